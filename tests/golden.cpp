#include "golden.h"

#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace golden {

ember::StateDict with_prefix_removed(const ember::StateDict& all, const std::string& prefix) {
  ember::StateDict out;
  for (const auto& [key, value] : all) {
    if (key.rfind(prefix, 0) == 0) out.emplace(key.substr(prefix.size()), value);
  }
  return out;
}

const ember::Tensor& Case::tensor(size_t i) const {
  if (i >= inputs.size() || !inputs[i].tensor)
    throw std::runtime_error("case " + name + ": input " + std::to_string(i) + " is not a tensor");
  return *inputs[i].tensor;
}

ember::Scalar Case::scalar(size_t i) const {
  if (i >= inputs.size() || !inputs[i].scalar)
    throw std::runtime_error("case " + name + ": input " + std::to_string(i) + " is not a scalar");
  return *inputs[i].scalar;
}

const json& load(const std::string& area) {
  static std::mutex mutex;
  static std::map<std::string, json> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(area);
  if (it != cache.end()) return it->second;
  const std::string path = std::string(EMBER_GOLDEN_DIR) + "/" + area + ".json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return cache[area] = json::parse(in);
}

ember::DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < ember::kNumDTypes; ++i) {
    const auto d = static_cast<ember::DType>(i);
    if (ember::dtype_name(d) == name) return d;
  }
  throw std::runtime_error("unknown dtype " + name);
}

ember::Scalar scalar_from_json(const json& j) {
  if (j.is_boolean()) return ember::Scalar(j.get<bool>());
  if (j.is_number_integer()) return ember::Scalar(j.get<int64_t>());
  return ember::Scalar(j.get<double>());
}

ember::Tensor decode_tensor(const json& j) {
  const ember::DType dtype = dtype_from_name(j.at("dtype").get<std::string>());
  const ember::Shape shape(j.at("shape").get<std::vector<int64_t>>());
  ember::Tensor base = ember::empty(shape, dtype);
  const std::string hex = j.at("data").get<std::string>();
  const size_t nbytes = static_cast<size_t>(base.numel() * base.element_size());
  if (hex.size() != 2 * nbytes) throw std::runtime_error("golden tensor data has the wrong length");
  auto* bytes = static_cast<unsigned char*>(base.data_ptr());
  for (size_t i = 0; i < nbytes; ++i)
    bytes[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  const json& view = j.at("view");
  if (view.is_string()) {
    const std::string v = view.get<std::string>();
    if (v == "contiguous") return base;
    if (v == "t") return base.transpose(-1, -2);
    if (v == "step2") return base.slice(0, std::nullopt, std::nullopt, 2);
    throw std::runtime_error("unknown view " + v);
  }
  return base.expand(ember::Shape(view.at("expand").get<std::vector<int64_t>>()));
}

std::vector<Case> cases(const std::string& area) {
  std::vector<Case> out;
  for (const json& j : load(area).at("cases")) {
    Case c;
    c.op = j.at("op").get<std::string>();
    c.name = j.at("name").get<std::string>();
    c.attrs = j.at("attrs");
    c.error = j.at("error").get<bool>();
    if (j.contains("message")) c.message = j.at("message").get<std::string>();
    for (const json& input : j.at("inputs")) {
      Value v;
      if (input.is_null()) {
        v.is_null = true;
      } else if (input.is_array()) {
        for (const json& t : input) v.list.push_back(decode_tensor(t));
      } else if (input.contains("scalar")) {
        v.scalar = scalar_from_json(input.at("scalar"));
      } else {
        v.tensor = decode_tensor(input);
      }
      c.inputs.push_back(std::move(v));
    }
    if (!c.error) {
      const json& e = j.at("expected");
      if (e.is_array()) {
        for (const json& t : e) c.expected.push_back(decode_tensor(t));
      } else {
        c.expected.push_back(decode_tensor(e));
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

Tolerance tolerance_for(ember::DType dtype) {
  switch (dtype) {
    case ember::kFloat32:
      return {1e-5, 1e-6};
    case ember::kFloat64:
      return {1e-10, 1e-12};
    case ember::kFloat16:
      return {1e-3, 1e-4};
    case ember::kBFloat16:
      return {8e-3, 1e-3};
    default:
      return {0, 0};
  }
}

Tolerance one_ulp_for_16bit(const Case& /*c*/, ember::DType dtype) {
  if (dtype == ember::kFloat16) return {2e-3, 1e-3};
  if (dtype == ember::kBFloat16) return {1.6e-2, 1e-2};
  return tolerance_for(dtype);
}

Tolerance accumulation_tolerance(const Case& c, ember::DType dtype) {
  const ember::Tensor& a = c.tensor(0);
  const double k = a.dim() > 0 ? static_cast<double>(a.size(-1)) : 1.0;
  switch (dtype) {
    case ember::kFloat32:
      return {1e-5, 2e-6 * k};
    case ember::kFloat64:
      return {1e-12, 1e-14 * k};
    default:
      return one_ulp_for_16bit(c, dtype);  // computed in float32, rounded once
  }
}

::testing::AssertionResult all_close(const ember::Tensor& actual, const ember::Tensor& expected, Tolerance tol) {
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << actual.dtype() << ", expected " << expected.dtype();
  }
  if (!(actual.shape() == expected.shape())) {
    return ::testing::AssertionFailure() << "shape " << actual.shape() << ", expected " << expected.shape();
  }
  const std::vector<double> a = actual.to_vector<double>();
  const std::vector<double> e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool same_inf = std::isinf(e[i]) && a[i] == e[i];
    if (both_nan || same_inf) continue;
    if (std::isnan(a[i]) || std::isnan(e[i]) || std::isinf(e[i]) || std::isinf(a[i]) ||
        std::abs(a[i] - e[i]) > tol.atol + tol.rtol * std::abs(e[i])) {
      std::ostringstream out;
      out << "element " << i << " is " << a[i] << ", expected " << e[i] << " (rtol " << tol.rtol << ", atol "
          << tol.atol << ")\nactual:   " << actual << "\nexpected: " << expected;
      return ::testing::AssertionFailure() << out.str();
    }
  }
  return ::testing::AssertionSuccess();
}

void run_cases(const std::string& area, const std::string& op, const OpFn& fn, const ToleranceFn& tolerance) {
  int count = 0;
  for (const Case& c : cases(area)) {
    if (c.op != op) continue;
    ++count;
    SCOPED_TRACE(op + " " + c.name);
    if (c.error) {
      EXPECT_THROW(fn(c), ember::Error) << "PyTorch raised: " << c.message;
      continue;
    }
    std::vector<ember::Tensor> actual;
    try {
      actual = fn(c);
    } catch (const ember::Error& e) {
      ADD_FAILURE() << "ember raised: " << e.what();
      continue;
    }
    ASSERT_EQ(actual.size(), c.expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      const Tolerance tol = tolerance ? tolerance(c, c.expected[i].dtype()) : tolerance_for(c.expected[i].dtype());
      EXPECT_TRUE(all_close(actual[i], c.expected[i], tol));
    }
  }
  EXPECT_GT(count, 0) << "no golden cases for " << op << " in " << area;
}

}  // namespace golden

// Reductions' and softmax's behaviour that the golden data cannot show: error messages, method forms,
// known values, large and strided inputs against a plain reference, and that the thread count does
// not change results. Each op's golden forward cases and gradchecks are its registry entry
// (tests/ops_reduce.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "golden.h"
#include "kernels/cpu/reduce_simd.h"
#include "test_util.h"

using ember::Tensor;

namespace {

// Expects `fn` to throw an ember::Error whose message starts with `prefix` and contains `detail`.
template <class F>
void expect_error(F fn, const std::string& prefix, const std::string& detail) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << prefix << " ... " << detail;
  } catch (const ember::Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
    EXPECT_NE(message.find(detail), std::string::npos) << message;
  }
}

// Runs fn with 1 thread and with 4 (more than the grain sizes need) and returns both results.
template <class F>
std::pair<Tensor, Tensor> with_one_and_many_threads(F fn) {
  const int saved = ember::get_num_threads();
  ember::set_num_threads(1);
  Tensor one = fn();
  ember::set_num_threads(4);
  Tensor many = fn();
  ember::set_num_threads(saved);
  return {one, many};
}

}  // namespace

TEST(Reduce, MethodFormsMatchFunctions) {
  ember::manual_seed(11);
  const Tensor x = ember::randn({3, 4, 5});
  EXPECT_TRUE(golden::all_close(x.sum({1}, true), ember::sum(x, {1}, true), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.sum(), ember::sum(x), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.mean({0, 2}), ember::mean(x, {0, 2}), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.prod({-1}), ember::prod(x, {-1}), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.max({1}), ember::amax(x, {1}), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.min(), ember::amin(x), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.argmax(1, true), ember::argmax(x, 1, true), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.argmin(), ember::argmin(x), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.var({1}, 0), ember::var(x, {1}, 0), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.std(), ember::std(x), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.logsumexp({2}, true), ember::logsumexp(x, {2}, true), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.norm(1.0, {0}), ember::norm(x, 1.0, {0}), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.softmax(1), ember::softmax(x, 1), {0, 0}));
  EXPECT_TRUE(golden::all_close(x.log_softmax(-1), ember::log_softmax(x, -1), {0, 0}));
  const Tensor b = x > 0;
  EXPECT_TRUE(golden::all_close(b.all({1}), ember::all(b, {1}), {0, 0}));
  EXPECT_TRUE(golden::all_close(b.any(), ember::any(b), {0, 0}));
}

TEST(Reduce, KnownValues) {
  const Tensor x = ember::arange(6).reshape({2, 3});  // [[0, 1, 2], [3, 4, 5]], int64
  EXPECT_EQ(x.sum().item<int64_t>(), 15);
  EXPECT_EQ(x.sum({0}).to_vector<int64_t>(), (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(x.sum({1}, true).shape(), (ember::Shape{2, 1}));
  EXPECT_EQ(x.prod({1}).to_vector<int64_t>(), (std::vector<int64_t>{0, 60}));
  EXPECT_EQ(x.max({0}).to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(x.argmax().item<int64_t>(), 5);
  EXPECT_EQ(x.argmin(1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  const Tensor f = x.to(ember::kFloat32);
  EXPECT_FLOAT_EQ(f.mean().item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(f.var().item<float>(), 3.5f);
  EXPECT_FLOAT_EQ(f.norm(2.0, {1}).to_vector<float>()[0], std::sqrt(5.0f));
  EXPECT_FLOAT_EQ(f.softmax(1).sum({1}).to_vector<float>()[1], 1.0f);
  EXPECT_EQ(ember::sum(ember::ones({0, 3})).item<float>(), 0.0f);
  EXPECT_EQ(ember::prod(ember::ones({0, 3}), {0}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(ember::mean(ember::ones({0})).item<float>()));
}

TEST(Reduce, ErrorsNameTheOpShapeAndDims) {
  const Tensor x = ember::ones({2, 3});
  expect_error([&] { ember::sum(x, {1, -1}); }, "[sum]", "appears more than once");
  expect_error([&] { ember::sum(x, {1, -1}); }, "[sum]", "[2, 3]");
  expect_error([&] { ember::amax(x, {2}); }, "[amax]", "out of range");
  expect_error([&] { ember::mean(ember::ones({2, 3}, ember::kInt64)); }, "[mean]", "int64");
  expect_error([&] { ember::var(ember::ones({2}, ember::kBool), {}); }, "[var]", "bool");
  expect_error([&] { ember::norm(ember::ones({2}, ember::kInt32)); }, "[norm]", "int32");
  expect_error([&] { ember::softmax(ember::ones({2}, ember::kInt64), 0); }, "[softmax]", "int64");
  expect_error([&] { ember::log_softmax(x, 2); }, "[log_softmax]", "out of range");
  expect_error([&] { ember::argmax(ember::ones({2}, ember::kBool)); }, "[argmax]", "bool");
  expect_error([&] { ember::amax(ember::ones({0, 3}), {0}); }, "[amax]", "[0, 3]");
  expect_error([&] { ember::argmin(ember::ones({0, 3})); }, "[argmin]", "empty");
  expect_error([&] { ember::norm(ember::ones({0}), std::numeric_limits<double>::infinity()); }, "[norm]", "size 0");
}

TEST(Reduce, ThreadCountDoesNotChangeResults) {
  // Large enough that every path splits into many tasks; results must match bit for bit.
  ember::manual_seed(5);
  const Tensor x = ember::randn({300, 1000});
  const Tensor t = ember::randn({1000, 300}).t();
  auto check = [](auto fn) {
    const auto [one, many] = with_one_and_many_threads(fn);
    EXPECT_TRUE(golden::all_close(one, many, {0, 0}));
  };
  check([&] { return ember::sum(x); });
  check([&] { return ember::sum(x, {0}); });
  check([&] { return ember::sum(x, {1}); });
  check([&] { return ember::sum(t, {0}); });
  check([&] { return ember::sum(t, {1}); });
  check([&] { return ember::amax(x, {0}); });
  check([&] { return ember::argmax(x, 0); });
  check([&] { return ember::argmin(t); });
  check([&] { return ember::prod(x.to(ember::kFloat64), {1}); });
  check([&] { return ember::any(x > 4, {0}); });
  check([&] { return ember::sum(x.reshape({300000}).to(ember::kBFloat16)); });
  check([&] { return ember::softmax(x, 1); });
  check([&] { return ember::log_softmax(x, 0); });
}

namespace {

// A plain reference over the logical elements: per output, the double sum, the max (first index),
// and whether any element is nonzero. Golden shapes are small; these cover chunked, tiled and
// multi-dim walks on large and oddly strided inputs.
struct Reference {
  std::vector<double> sum, max;
  std::vector<int64_t> argmax;
  std::vector<bool> any;
};

Reference reference(const Tensor& x, const std::vector<int>& reduced_dims) {
  const std::vector<double> values = x.to_vector<double>();
  const ember::Shape& shape = x.shape();
  std::vector<bool> reduced(shape.size(), false);
  for (int d : reduced_dims) reduced[d] = true;
  int64_t outputs = 1;
  for (int d = 0; d < shape.size(); ++d) outputs *= reduced[d] ? 1 : shape[d];
  Reference r{std::vector<double>(outputs, 0.0), std::vector<double>(outputs, -INFINITY),
              std::vector<int64_t>(outputs, -1), std::vector<bool>(outputs, false)};
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t o = 0, position = 0;
    for (int d = 0; d < shape.size(); ++d) {
      if (reduced[d]) {
        position = position * shape[d] + index[d];
      } else {
        o = o * shape[d] + index[d];
      }
    }
    r.sum[o] += values[i];
    if (values[i] > r.max[o]) {
      r.max[o] = values[i];
      r.argmax[o] = position;
    }
    if (values[i] != 0) r.any[o] = true;
    for (int d = shape.size() - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return r;
}

}  // namespace

TEST(Reduce, MatchesPlainReferenceOnLargeAndStridedInputs) {
  ember::manual_seed(17);
  struct Input {
    std::string name;
    Tensor x;
    std::vector<int> dims;
  };
  const std::vector<Input> inputs = {
      {"long rows (chunks)", ember::randn({3, 70000}), {1}},
      {"tall columns (row chunks)", ember::randn({70000, 3}), {0}},
      {"wide columns (tiles)", ember::randn({4, 50, 2500}), {1}},
      {"inner and outer reduced", ember::randn({5, 3000, 7}), {0, 2}},
      {"transposed, dim 0", ember::randn({2500, 300}).t(), {0}},
      {"transposed, dim 1", ember::randn({2500, 300}).t(), {1}},
      {"strided rows", ember::randn({200, 3000}).slice(1, std::nullopt, std::nullopt, 2), {1}},
      {"strided, every dim", ember::randn({200, 3000}).slice(1, std::nullopt, std::nullopt, 3), {0, 1}},
      {"broadcast reduced", ember::randn({1, 3000}).expand({100, 3000}), {0}},
      {"broadcast kept", ember::randn({1, 3000}).expand({100, 3000}), {1}},
      {"permuted", ember::randn({30, 40, 50}).permute({2, 0, 1}), {0, 2}},
      {"permuted, middle", ember::randn({30, 40, 50}).permute({1, 2, 0}), {1}},
      {"small rows", ember::randn({20000, 5}), {1}},
  };
  for (const Input& in : inputs) {
    SCOPED_TRACE(in.name);
    const Reference ref = reference(in.x, in.dims);
    ember::Axes axes;
    for (int d : in.dims) axes.push_back(d);
    const std::vector<double> sum = ember::sum(in.x, axes).to_vector<double>();
    const std::vector<double> max = ember::amax(in.x, axes).to_vector<double>();
    const std::vector<bool> any = ember::any(in.x > 2.5, axes).to_vector<bool>();
    ASSERT_EQ(sum.size(), ref.sum.size());
    for (size_t o = 0; o < sum.size(); ++o) {
      ASSERT_NEAR(sum[o], ref.sum[o], 1e-4 + 1e-5 * std::abs(ref.sum[o])) << "output " << o;
      ASSERT_EQ(max[o], ref.max[o]) << "output " << o;
    }
    const Reference big = reference(in.x > 2.5, in.dims);
    for (size_t o = 0; o < any.size(); ++o) ASSERT_EQ(any[o], big.any[o]) << "output " << o;
    if (in.dims.size() == 1) {
      const std::vector<int64_t> argmax = ember::argmax(in.x, in.dims[0]).to_vector<int64_t>();
      for (size_t o = 0; o < argmax.size(); ++o) ASSERT_EQ(argmax[o], ref.argmax[o]) << "output " << o;
    }
  }
}

TEST(Reduce, SoftmaxMatchesItsDecomposition) {
  // The fused kernels against softmax written with primitives, on every dim of a tensor whose
  // inner sizes span several vector tiles, in float32 and float64.
  ember::manual_seed(23);
  for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    const Tensor x = (ember::randn({3, 50, 600}) * 4).to(dtype);
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE("dim " + std::to_string(dim));
      const Tensor centered = x - ember::amax(x, {dim}, true);
      const Tensor total = ember::sum(ember::exp(centered), {dim}, true);
      const golden::Tolerance tol =
          dtype == ember::kFloat32 ? golden::Tolerance{1e-5, 1e-6} : golden::Tolerance{1e-12, 1e-14};
      EXPECT_TRUE(golden::all_close(ember::softmax(x, dim), ember::exp(centered) / total, tol));
      EXPECT_TRUE(golden::all_close(ember::log_softmax(x, dim), centered - ember::log(total), tol));
    }
  }
}

TEST(Reduce, LongFloat32SumsAreAccurate) {
  // 2^20 + 7 values of 0.1: a single running float32 sum drifts by ~1e-3 relative; pairwise
  // summation stays within a few ulps, along every path.
  const int64_t n = (int64_t{1} << 20) + 7;
  const Tensor x = ember::full({n}, 0.1, ember::kFloat32);
  const double exact = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_NEAR(ember::sum(x).item<double>(), exact, exact * 1e-6);
  EXPECT_NEAR(ember::sum(x.reshape({1, n})).item<double>(), exact, exact * 1e-6);
  const Tensor column = ember::full({n, 2}, 0.1, ember::kFloat32);
  const std::vector<double> sums = ember::sum(column, {0}).to_vector<double>();
  EXPECT_NEAR(sums[0], exact, exact * 1e-6);
  EXPECT_NEAR(sums[1], exact, exact * 1e-6);
  const Tensor strided = ember::full({2 * n}, 0.1, ember::kFloat32).slice(0, std::nullopt, std::nullopt, 2);
  EXPECT_NEAR(ember::sum(strided).item<double>(), exact, exact * 1e-6);
  EXPECT_NEAR(ember::mean(x.to(ember::kBFloat16)).item<double>(), 0.1, 1e-3);
}

TEST(Reduce, SoftmaxIsStableForLargeInputs) {
  const Tensor x = ember::tensor<float>({1000.0f, 1001.0f, 1002.0f, -1e30f});
  const std::vector<float> p = ember::softmax(x, 0).to_vector<float>();
  EXPECT_NEAR(p[2], 0.66524096f, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  const std::vector<float> lp = ember::log_softmax(x, 0).to_vector<float>();
  EXPECT_NEAR(lp[0], -2.40760596f, 1e-5);
  EXPECT_FLOAT_EQ(lp[3], -1e30f);
}

// logsumexp over an empty dim is -inf and stays on the graph: backward gives an empty gradient.
TEST(Reduce, LogSumExpOfAnEmptyDimIsDifferentiable) {
  const Tensor x = ember::zeros({3, 0}).requires_grad_();
  const Tensor out = ember::logsumexp(x, {1});
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(out.at<float>({0}), -std::numeric_limits<float>::infinity());
  (out * 0.0).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().shape(), (ember::Shape{3, 0}));
}

// reduce_row_fn (kernels/cpu/reduce_simd.h) gives each row the bits the kernel gives it over a whole
// tensor of such rows: every length up to past one vector block, kSmallReduce's edge, and rows longer
// than a chunk (kChunk = 32768), for each op and float type the vector path takes.
TEST(Reduce, RowFunctionsGiveTheKernelsBits) {
  using ember::OpKind;
  const std::pair<OpKind, Tensor (*)(const Tensor&)> ops[] = {
      {OpKind::kSum, [](const Tensor& x) { return ember::sum(x, {1}, true); }},
      {OpKind::kProd, [](const Tensor& x) { return ember::prod(x, {1}, true); }},
      {OpKind::kAmax, [](const Tensor& x) { return ember::amax(x, {1}, true); }},
      {OpKind::kAmin, [](const Tensor& x) { return ember::amin(x, {1}, true); }}};
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 150; ++n) lengths.push_back(n);
  for (int64_t n : {511, 512, 513, 768, 1000, 4099, 16384, 40000}) lengths.push_back(n);
  int found = 0;
  for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64, ember::kBFloat16, ember::kFloat16}) {
    for (const auto& [op, reduce] : ops) {
      const ember::cpu::simd::ReduceRowFn row = ember::cpu::simd::reduce_row_fn(op, dtype, dtype);
      if (row == nullptr) continue;
      ++found;
      for (const int64_t n : lengths) {
        // Prod over long rows of N(0, 1) underflows to zero: values near 1 keep it finite.
        Tensor x = op == OpKind::kProd ? (ember::randn({3, n}) * 0.01 + 1.0).to(dtype) : ember::randn({3, n}, dtype);
        if (n > 5) x.view({-1}).narrow(0, n + 3, 1).fill_(std::nan(""));  // the second row holds a NaN
        const Tensor want = reduce(x).contiguous();
        Tensor got = ember::empty({3, 1}, dtype);
        const int64_t bytes = ember::dtype_size(dtype);
        for (int64_t r = 0; r < 3; ++r) {
          row(static_cast<char*>(got.data_ptr()) + r * bytes, static_cast<const char*>(x.data_ptr()) + r * n * bytes,
              n);
        }
        ASSERT_TRUE(test_util::bitwise_equal(got, want)) << ember::op_name(op) << " " << dtype << " n " << n;
      }
    }
  }
  EXPECT_GE(found, 8);  // sum, prod, amax and amin of float32 and float64 at least
}

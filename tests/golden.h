// The golden-data harness: loads reference cases written by tests/golden/make_golden.py (PyTorch),
// rebuilds their inputs with the same views, and compares ember's results within dtype tolerances.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/ember.h"

namespace golden {

using nlohmann::json;

// An input of a case: a tensor, a scalar, a list of tensors, or null.
struct Value {
  std::optional<ember::Tensor> tensor;
  std::optional<ember::Scalar> scalar;
  std::vector<ember::Tensor> list;
  bool is_null = false;
};

struct Case {
  std::string op;
  std::string name;
  std::vector<Value> inputs;
  json attrs;
  bool error = false;
  std::string message;
  std::vector<ember::Tensor> expected;  // one entry, or several for multi-output ops

  const ember::Tensor& tensor(size_t i) const;
  ember::Scalar scalar(size_t i) const;
};

// The whole JSON of an area (tests/golden/<area>.json), parsed once.
const json& load(const std::string& area);
std::vector<Case> cases(const std::string& area);

ember::Tensor decode_tensor(const json& j);
ember::DType dtype_from_name(const std::string& name);
ember::Scalar scalar_from_json(const json& j);

struct Tolerance {
  double rtol;
  double atol;
};
Tolerance tolerance_for(ember::DType dtype);

// The entries of a reference file whose names start with `prefix` ("init.", "final."), without it.
ember::StateDict with_prefix_removed(const ember::StateDict& all, const std::string& prefix);

// Same shape, same dtype, values within tolerance (NaN matches NaN, infinities match exactly).
::testing::AssertionResult all_close(const ember::Tensor& actual, const ember::Tensor& expected, Tolerance tol);

// An op under test: builds ember's result(s) from a case.
using OpFn = std::function<std::vector<ember::Tensor>(const Case&)>;

// The tolerance of a case's comparison, per expected dtype.
using ToleranceFn = std::function<Tolerance(const Case&, ember::DType)>;

// float16/bfloat16 results are rounded once from float32 on both sides, but float32 values that
// differ in the last bit can round to neighbouring 16-bit values: allow one 16-bit ulp.
Tolerance one_ulp_for_16bit(const Case& c, ember::DType dtype);

// Sums of k products round k times: float tolerances grow with k, the last dim of the case's first
// input (matmul, linear and their fused forms, whose summation order depends on the micro-kernel).
Tolerance accumulation_tolerance(const Case& c, ember::DType dtype);

// Runs every case of `op` in `area` through `fn`: expects an ember::Error where PyTorch raised,
// and a match within tolerance otherwise. `tolerance` may widen the default per case.
void run_cases(const std::string& area, const std::string& op, const OpFn& fn, const ToleranceFn& tolerance = nullptr);

}  // namespace golden

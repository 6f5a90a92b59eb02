// The optimizer cases of tests/golden/optim.json (made by cases_optim.py): the optimizer a case
// names, built from its options and parameter groups, its parameters and per-step gradients, and
// the tolerance of the comparison with PyTorch. Shared by the update ops' registry entries
// (ops_optim.cpp) and the optimizer tests (test_optim.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/optim.h"
#include "golden.h"

namespace optim_golden {

using golden::json;

// options[key] when present, else fallback.
double get_or(const json& options, const char* key, double fallback);

// A parameter group's option overrides.
ember::optim::Options to_options(const json& options);

// An optimizer by name ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop"), with defaults from `options`
// (ember's option names) and the given groups.
std::unique_ptr<ember::optim::Optimizer> make_optimizer(const std::string& name, const json& options,
                                                        std::vector<ember::optim::ParamGroup> groups);

// The cases of optim.json of one kind: "optimizer", "scheduler" or "clip".
std::vector<const json*> cases_of_kind(const std::string& kind);

// The same values in a non-contiguous tensor: a transposed (or, for 1-D, every-other-element) view.
ember::Tensor non_contiguous_copy(const ember::Tensor& t);

// One golden optimizer case: the parameters and the optimizer, ready to step.
struct OptimizerRun {
  const json& c;
  std::vector<ember::Tensor> params;
  std::unique_ptr<ember::optim::Optimizer> optimizer;

  OptimizerRun(const json& case_json, bool contiguous);

  // A fresh optimizer of the case over `params`.
  std::unique_ptr<ember::optim::Optimizer> make(const std::vector<ember::Tensor>& params) const;

  // Sets step `s`'s gradients (undefined where the case has none) on `params`.
  void set_grads(const std::vector<ember::Tensor>& params, size_t s, bool contiguous = true) const;
};

// 1e-6 relative in float64, 1e-5 in float32 (the values are O(1)).
golden::Tolerance optimizer_tolerance(ember::DType dtype);

}  // namespace optim_golden

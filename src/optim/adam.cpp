// Adam and AdamW, as torch.optim.Adam / AdamW with foreach=False (see ember/optim/adam.h).
#include "ember/optim/adam.h"

#include <cmath>

#include "ember/ops.h"
#include "ops/optimizer_updates.h"
#include "optim/options.h"

namespace ember::optim {
namespace {

template <class AnyAdamOptions>
Options to_options(const AnyAdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

template <const char* kName>
void validate(const Options& options) {
  detail::check_non_negative(kName, options, "lr");
  detail::check_non_negative(kName, options, "eps");
  detail::check_unit_interval(kName, options, "beta1");
  detail::check_unit_interval(kName, options, "beta2");
  detail::check_non_negative(kName, options, "weight_decay");
  detail::get_flag(kName, options, "amsgrad");
}

constexpr char kAdam[] = "Adam";
constexpr char kAdamW[] = "AdamW";

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(detail::single_group(std::move(params)), options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam(kAdam, to_options(defaults), std::move(groups), false) {}

Adam::Adam(std::string name, Options defaults, std::vector<ParamGroup> groups, bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(defaults), decoupled_weight_decay ? validate<kAdamW> : validate<kAdam>,
                std::move(groups)),
      decoupled_weight_decay_(decoupled_weight_decay) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(detail::single_group(std::move(params)), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : Adam(kAdamW, to_options(defaults), std::move(groups), true) {}

std::vector<std::string> Adam::state_names(const Options& options) const {
  if (detail::get(options, "amsgrad") != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

Attrs Adam::prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) {
  const double lr = group.option("lr");
  const double beta1 = group.option("beta1");
  const double beta2 = group.option("beta2");
  const bool amsgrad = group.option("amsgrad") != 0;
  if (state.buffers.empty()) {
    state.step = 0;
    state.buffers.emplace("exp_avg", zeros_like(param));
    state.buffers.emplace("exp_avg_sq", zeros_like(param));
  }
  // amsgrad may have been switched on after the first steps: its maximum starts at zero, as in PyTorch.
  if (amsgrad && state.buffers.count("max_exp_avg_sq") == 0) {
    state.buffers.emplace("max_exp_avg_sq", zeros_like(param));
  }
  if (!skip) state.step += 1;
  AdamAttrs s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = group.option("eps");
  s.weight_decay = group.option("weight_decay");
  s.decoupled_weight_decay = decoupled_weight_decay_;
  s.amsgrad = amsgrad;
  // The per-step scalars exactly as PyTorch computes them in Python (double precision).
  const auto t = static_cast<double>(state.step);
  s.step_size = lr / (1.0 - std::pow(beta1, t));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
  return s;
}

void Adam::run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                      const std::shared_ptr<dispatch::HostAttrs>& attrs) {
  const bool amsgrad = group.option("amsgrad") != 0;
  const Tensor max_exp_avg_sq = amsgrad ? state.buffers.at("max_exp_avg_sq") : Tensor();
  ember::detail::adam_update(param, grad, state.buffers.at("exp_avg"), state.buffers.at("exp_avg_sq"), max_exp_avg_sq,
                             attrs);
}

}  // namespace ember::optim

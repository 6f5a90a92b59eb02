// Adagrad, as torch.optim.Adagrad with foreach=False (see ember/optim/adagrad.h).
#include "ember/optim/adagrad.h"

#include "ember/ops.h"
#include "ops/optimizer_updates.h"
#include "optim/options.h"

namespace ember::optim {
namespace {

constexpr const char* kAdagrad = "Adagrad";

Options to_options(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps}};
}

void validate_adagrad(const Options& options) {
  detail::check_non_negative(kAdagrad, options, "lr");
  detail::check_non_negative(kAdagrad, options, "lr_decay");
  detail::check_non_negative(kAdagrad, options, "weight_decay");
  detail::check_non_negative(kAdagrad, options, "initial_accumulator_value");
  detail::check_non_negative(kAdagrad, options, "eps");
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(detail::single_group(std::move(params)), options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults)
    : Optimizer(kAdagrad, to_options(defaults), validate_adagrad, std::move(groups)) {
  // PyTorch creates Adagrad's state with the optimizer, so it is in the state_dict from the start.
  for (const ParamGroup& group : param_groups()) init_state(group);
}

void Adagrad::init_state(const ParamGroup& group) {
  // PyTorch starts every accumulator at the optimizer's default, even in a group with its own value.
  const double initial = defaults().at("initial_accumulator_value");
  for (const Tensor& param : group.params) {
    ParamState& state = state_for(param);
    if (state.buffers.count("sum") == 0) {
      state.step = 0;
      state.buffers.emplace("sum",
                            full(param.shape(), initial, TensorOptions(param.device()).with_dtype(param.dtype())));
    }
  }
}

std::vector<std::string> Adagrad::state_names(const Options&) const { return {"sum"}; }

void Adagrad::prepare_group(const ParamGroup& group) {
  init_state(group);  // parameters added after construction, or without state in a loaded checkpoint
}

Attrs Adagrad::prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) {
  if (!skip) state.step += 1;
  AdagradAttrs s;
  s.weight_decay = group.option("weight_decay");
  s.eps = group.option("eps");
  s.clr = group.option("lr") / (1.0 + static_cast<double>(state.step - 1) * group.option("lr_decay"));
  return s;
}

void Adagrad::run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                         const std::shared_ptr<dispatch::HostAttrs>& attrs) {
  ember::detail::adagrad_update(param, grad, state.buffers.at("sum"), attrs);
}

}  // namespace ember::optim

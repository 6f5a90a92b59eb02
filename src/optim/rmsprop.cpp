// RMSprop, as torch.optim.RMSprop with foreach=False (see ember/optim/rmsprop.h).
#include "ember/optim/rmsprop.h"

#include "ember/ops.h"
#include "ops/optimizer_updates.h"
#include "optim/options.h"

namespace ember::optim {
namespace {

constexpr const char* kRmsprop = "RMSprop";

Options to_options(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0}};
}

void validate_rmsprop(const Options& options) {
  detail::check_non_negative(kRmsprop, options, "lr");
  detail::check_non_negative(kRmsprop, options, "eps");
  detail::check_non_negative(kRmsprop, options, "momentum");
  detail::check_non_negative(kRmsprop, options, "weight_decay");
  detail::check_non_negative(kRmsprop, options, "alpha");
  detail::get_flag(kRmsprop, options, "centered");
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(detail::single_group(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults)
    : Optimizer(kRmsprop, to_options(defaults), validate_rmsprop, std::move(groups)) {}

std::vector<std::string> RMSprop::state_names(const Options& options) const {
  std::vector<std::string> names = {"square_avg"};
  if (detail::get(options, "momentum") > 0) names.emplace_back("momentum_buffer");
  if (detail::get(options, "centered") != 0) names.emplace_back("grad_avg");
  return names;
}

Attrs RMSprop::prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) {
  if (state.buffers.empty()) state.step = 0;
  // Buffers start at zero; one switched on after the first steps (momentum, centered) starts then.
  for (const std::string& name : state_names(group.options)) {
    if (state.buffers.count(name) == 0) state.buffers.emplace(name, zeros_like(param));
  }
  if (!skip) state.step += 1;
  RmspropAttrs s;
  s.lr = group.option("lr");
  s.alpha = group.option("alpha");
  s.eps = group.option("eps");
  s.weight_decay = group.option("weight_decay");
  s.momentum = group.option("momentum");
  s.centered = group.option("centered") != 0;
  return s;
}

void RMSprop::run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                         const std::shared_ptr<dispatch::HostAttrs>& attrs) {
  auto buffer = [&](const char* name) -> Tensor {
    const auto it = state.buffers.find(name);
    return it == state.buffers.end() ? Tensor() : it->second;
  };
  const bool centered = group.option("centered") != 0;
  ember::detail::rmsprop_update(param, grad, buffer("square_avg"), centered ? buffer("grad_avg") : Tensor(),
                                group.option("momentum") > 0 ? buffer("momentum_buffer") : Tensor(), attrs);
}

}  // namespace ember::optim

// SGD, as torch.optim.SGD with foreach=False (see ember/optim/sgd.h).
#include "ember/optim/sgd.h"

#include <cmath>

#include "ember/ops.h"
#include "ops/optimizer_updates.h"
#include "optim/options.h"

namespace ember::optim {
namespace {

constexpr const char* kSgd = "SGD";

Options to_options(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void validate_sgd(const Options& options) {
  detail::check_non_negative(kSgd, options, "lr");
  detail::check_non_negative(kSgd, options, "momentum");
  detail::check_non_negative(kSgd, options, "weight_decay");
  const double dampening = detail::get(options, "dampening");
  EMBER_CHECK(!std::isnan(dampening), "[SGD] invalid dampening: ", dampening);
  if (detail::get_flag(kSgd, options, "nesterov")) {
    const double momentum = detail::get(options, "momentum");
    EMBER_CHECK(momentum > 0 && dampening == 0,
                "[SGD] Nesterov momentum requires momentum > 0 and dampening == 0, got momentum ", momentum,
                " and dampening ", dampening);
  }
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(detail::single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults)
    : Optimizer(kSgd, to_options(defaults), validate_sgd, std::move(groups)) {}

std::vector<std::string> SGD::state_names(const Options& options) const {
  if (detail::get(options, "momentum") == 0) return {};
  return {"momentum_buffer"};
}

Attrs SGD::prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) {
  SgdAttrs s;
  s.lr = group.option("lr");
  s.momentum = group.option("momentum");
  s.dampening = group.option("dampening");
  s.weight_decay = group.option("weight_decay");
  s.nesterov = group.option("nesterov") != 0;
  if (s.momentum != 0) {
    auto it = state.buffers.find("momentum_buffer");
    // PyTorch's first buffer is a copy of the gradient; the kernel writes it in the same pass. The
    // buffer is made even by a skipped step (a loss scaler's), which leaves the next one the first:
    // state.step counts the updates done (SGD saves no step count; a loaded buffer counts as one).
    s.first_step = it == state.buffers.end() || state.step == 0;
    if (it == state.buffers.end()) it = state.buffers.emplace("momentum_buffer", empty_like(param)).first;
  }
  if (!skip) state.step += 1;
  return s;
}

void SGD::run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                     const std::shared_ptr<dispatch::HostAttrs>& attrs) {
  const auto it = state.buffers.find("momentum_buffer");
  const Tensor buffer = group.option("momentum") != 0 && it != state.buffers.end() ? it->second : Tensor();
  ember::detail::sgd_update(param, grad, buffer, attrs);
}

}  // namespace ember::optim

// ember::optim::RMSprop, as torch.optim.RMSprop (foreach=False), with momentum and the centered
// variant (which divides by an estimate of the gradient's variance instead of its second moment).
// State per parameter: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
#pragma once

#include <vector>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
};

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  explicit RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults = {});

 protected:
  Attrs prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) override;
  void run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                  const std::shared_ptr<dispatch::HostAttrs>& attrs) override;
  std::vector<std::string> state_names(const Options& options) const override;
};

}  // namespace ember::optim

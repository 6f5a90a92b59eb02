// ember::optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum and
// L2 weight decay, as torch.optim.SGD (foreach=False): the momentum buffer is the gradient itself
// at a parameter's first step.
#pragma once

#include <vector>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});

 protected:
  Attrs prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) override;
  void run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                  const std::shared_ptr<dispatch::HostAttrs>& attrs) override;
  std::vector<std::string> state_names(const Options& options) const override;
  bool counts_steps() const override { return false; }
};

}  // namespace ember::optim

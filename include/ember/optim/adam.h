// ember::optim::Adam and AdamW, as torch.optim.Adam / AdamW (foreach=False): Adam adds L2 weight
// decay to the gradient; AdamW decays the parameter itself (param *= 1 - lr * weight_decay) before
// the update. Bias correction and eps placement follow PyTorch:
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps,  param -= lr / (1 - beta1^t) * m / denom.
// State per parameter: step, exp_avg, exp_avg_sq, and max_exp_avg_sq with amsgrad.
#pragma once

#include <vector>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

// The same options; only weight decay's default and meaning differ.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

 protected:
  Adam(std::string name, Options defaults, std::vector<ParamGroup> groups, bool decoupled_weight_decay);
  Attrs prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) override;
  void run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                  const std::shared_ptr<dispatch::HostAttrs>& attrs) override;
  std::vector<std::string> state_names(const Options& options) const override;

 private:
  bool decoupled_weight_decay_ = false;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
};

}  // namespace ember::optim

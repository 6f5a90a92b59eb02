// ember::optim::Adagrad, as torch.optim.Adagrad (foreach=False): the accumulator starts at
// initial_accumulator_value and the state exists from construction, as in PyTorch. Also as in
// PyTorch, accumulators start at the optimizer's default initial_accumulator_value: a param group's
// own value is kept in its options but not used.
// State per parameter: step, sum.
#pragma once

#include <vector>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  explicit Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults = {});

 protected:
  void prepare_group(const ParamGroup& group) override;
  Attrs prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) override;
  void run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                  const std::shared_ptr<dispatch::HostAttrs>& attrs) override;
  std::vector<std::string> state_names(const Options& options) const override;

 private:
  void init_state(const ParamGroup& group);
};

}  // namespace ember::optim

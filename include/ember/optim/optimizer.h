// ember::optim::Optimizer: the base of every optimizer, as torch.optim.Optimizer. Parameters live
// in groups that share hyper-parameters (PyTorch's param_groups); each parameter with a gradient is
// updated by one fused pass (src/kernels/cpu/optim.h); state is created at a parameter's first step
// and saved/restored through a StateDict of tensors only, so a checkpoint goes through safetensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/attrs.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::dispatch {
struct HostAttrs;  // src/ops/dispatch.h
}

namespace ember::optim {

// Hyper-parameters by name, as in a PyTorch param group: "lr", "momentum", "weight_decay", ...
// PyTorch's "betas" pair is split into "beta1" and "beta2"; flags (nesterov, amsgrad, centered) are
// 0 or 1.
using Options = std::map<std::string, double>;

// Parameters that share hyper-parameters. Given to an optimizer's constructor, `options` holds only
// the overrides of the optimizer's defaults (e.g. {{"lr", 0.1}}); inside the optimizer it holds
// every option. Options may be changed between steps (schedulers set "lr"); they are checked again
// at every step. Do not add or remove parameters of a group once it is in an optimizer.
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;

  double lr() const { return option("lr"); }
  void set_lr(double lr) { options["lr"] = lr; }
  // The value of a hyper-parameter; throws if the group has no option of that name.
  double option(const std::string& name) const;
};

// What the optimizer keeps for one parameter.
struct ParamState {
  int64_t step = 0;                       // updates done (Adam, AdamW, Adagrad, RMSprop)
  std::map<std::string, Tensor> buffers;  // "exp_avg", "momentum_buffer", ... (PyTorch's names)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient (parameters without one are skipped, as in
  // PyTorch), without recording autograd history, and bumps each updated parameter's version.
  // Parameters must be float32/float64 CPU tensors. The fused kernels need contiguous memory: a
  // non-contiguous parameter is updated through a contiguous copy that is then copied back (same
  // values, two extra passes); a non-contiguous gradient is read through a contiguous copy.
  // With `skip_if` (a 0-dim bool tensor, a loss scaler's Inf/NaN flag) set, nothing changes and
  // false is returned.
  //
  // In a compiled step the updates are kernels of the plan; what they read of the host (the
  // learning rate, the step counts, whether to step) is computed by a host region the plan replays
  // before them (Note [host attributes] in src/ops/dispatch.h), so a new learning rate reaches the
  // next call without a new trace.
  bool step(const Tensor& skip_if = Tensor());
  // Clears the gradients: to undefined (set_to_none), or to zeros in place.
  void zero_grad(bool set_to_none = true);

  // The optimizer's name ("Adam"), used in error messages.
  const std::string& name() const { return name_; }
  // Every option of this optimizer with its default value.
  const Options& defaults() const { return defaults_; }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group (options as for the constructor: overrides of the defaults).
  void add_param_group(ParamGroup group);

  // The state of a parameter, or null before its first update.
  const ParamState* state(const Tensor& param) const;

  // The optimizer's state as tensors, numbering parameters across groups in order as PyTorch does:
  //   "param_groups.<g>.<option>"  0-dim float64, every option of group g
  //   "param_groups.<g>.params"    int64 (n,), the indices of group g's parameters
  //   "state.<i>.step"             0-dim float64, for optimizers that count steps
  //   "state.<i>.<buffer>"         the buffers of parameter i (only parameters that have state)
  // State tensors alias the optimizer's own (as PyTorch's state_dict does): save them, or clone
  // them to keep a snapshot while training goes on.
  StateDict state_dict() const;
  // Restores a state_dict() (copying the tensors). The groups must have the same number of
  // parameters; every option and every buffer the options need must be present with the
  // parameter's shape (buffers are converted to the parameter's dtype); unknown keys are errors.
  // Nothing changes if any check fails. Parameters with no "state.<i>." entry start fresh.
  void load_state_dict(const StateDict& state_dict);

 protected:
  // Checks a complete set of options; throws ember::Error naming the bad value.
  using Validator = void (*)(const Options& options);
  Optimizer(std::string name, Options defaults, Validator validate, std::vector<ParamGroup> groups);

  // The two halves of a parameter's update, called by step() under NoGradGuard with validated
  // options. prepare_update runs on the host (replayed by a compiled step): it makes the state at the
  // parameter's first update, advances the step count unless `skip`, and returns the update's
  // attributes. run_update runs the fused update with them (param and grad contiguous, of one dtype
  // and shape; through the detail::*_update functions that take HostAttrs).
  virtual Attrs prepare_update(const ParamGroup& group, const Tensor& param, ParamState& state, bool skip) = 0;
  virtual void run_update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state,
                          const std::shared_ptr<dispatch::HostAttrs>& attrs) = 0;
  // Before a group's parameters are prepared (state every parameter of the group has).
  virtual void prepare_group(const ParamGroup& group) {}
  // The buffers a parameter's state holds under these options (all are required on load).
  virtual std::vector<std::string> state_names(const Options& options) const = 0;
  // Whether ParamState::step is part of the state (PyTorch's SGD has no step count).
  virtual bool counts_steps() const { return true; }

  // The state of a parameter, created empty if it has none yet.
  ParamState& state_for(const Tensor& param);

 private:
  std::string name_;
  Options defaults_;
  Validator validate_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
  // Each parameter's update attributes, as the host part of the last step computed them.
  std::unordered_map<const TensorImpl*, std::shared_ptr<dispatch::HostAttrs>> host_attrs_;

  ParamGroup complete(ParamGroup group, size_t index) const;
  bool prepare(const Tensor& skip_if);
};

}  // namespace ember::optim

// One training step, composed in one place: zero_grad, forward and loss (under autocast), backward
// (with the loss scaled for float16), gradient clipping, the optimizer's step (whole, or sharded
// over the ranks with ZeRO-1) and the schedule's step, with the gradients averaged over the ranks
// while backward runs (DDP), and the whole step traced and replayed by ember::compile. The
// combinations are checked here, once.
//
//   train::TrainingStep step(model, {{.params = model->parameters()}}, train::optimizer_factory("adam", 3e-3),
//                            [&](const std::vector<Tensor>& b) { return std::vector<Tensor>{loss_of(b)}; },
//                            {.autocast = kBFloat16, .compile = true});
//   for (...) { Tensor loss = step({x, y})[0]; }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/compile.h"
#include "ember/dist.h"
#include "ember/optim/adam.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"
#include "ember/train/checkpoint.h"

namespace ember::amp {
class GradScaler;
}

namespace ember::train {

/// The loss of a batch: {loss, whatever else the caller wants back (logits, ...)}; the loss first,
/// a 0-dim floating tensor.
using LossFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& batch)>;
/// Makes the optimizer over `groups` (for ZeRO-1: over this rank's shard of them).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup> groups)>;

/// An optimizer by name: "sgd", "momentum" (SGD with momentum 0.9), "adam", "adamw" (PyTorch's
/// defaults otherwise), "adagrad", "rmsprop". An unknown name is an ember::Error listing them.
OptimizerFactory optimizer_factory(const std::string& name, double lr);
/// AdamW with these defaults (the groups may override them).
OptimizerFactory adamw_factory(optim::AdamWOptions options);

struct StepOptions {
  double clip_grad_norm = 0;                    // > 0: the gradients' total norm is clipped to this before the update
  std::optional<DType> autocast{};              // kBFloat16 or kFloat16: the forward and loss under autocast;
                                                // float16 also scales the loss (a GradScaler, in checkpoints)
  bool compile = false;                         // trace the whole step once per batch signature and replay it
  std::shared_ptr<dist::ProcessGroup> group{};  // data-parallel over the group's ranks (DDP)
  double bucket_cap_mb = 25;                    // DDP's gradient buckets
  bool zero = false;                            // with a group: the optimizer state sharded over the ranks (ZeRO-1)
  std::string op = "train";                     // names the step in errors
};

class TrainingStep {
 public:
  /// Builds the optimizer (sharded when options.zero), the loss scaler, and wraps `model` in DDP
  /// when options.group is set (which broadcasts rank 0's weights). Invalid combinations are
  /// ember::Errors starting with [options.op].
  TrainingStep(std::shared_ptr<nn::Module> model, std::vector<optim::ParamGroup> groups,
               const OptimizerFactory& make_optimizer, LossFn loss, StepOptions options);
  ~TrainingStep();
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

  /// One step on `batch`; returns what the loss function returned (the loss unscaled). Under
  /// compile, the first batch of a signature traces the step and later ones replay it.
  std::vector<Tensor> operator()(const std::vector<Tensor>& batch);

  /// A schedule of the optimizer's learning rates (built over optimizer()), stepped after every
  /// optimizer step, inside the step.
  void set_schedule(std::unique_ptr<optim::LRScheduler> schedule);
  /// Sets every group's learning rate (a compiled step reads it at its next call).
  void set_lr(double lr);

  /// The optimizer the schedule and the scaler drive: this rank's shard's under ZeRO.
  optim::Optimizer& optimizer();
  optim::LRScheduler* schedule() { return schedule_.get(); }
  amp::GradScaler* scaler() { return scaler_.get(); }
  dist::DistributedDataParallel* ddp() { return ddp_.get(); }
  dist::ZeroRedundancyOptimizer* zero() { return sharded_.get(); }
  nn::Module& model() { return *model_; }
  const StepOptions& options() const { return options_; }
  /// The compiled step's statistics (null unless options.compile).
  const CompileStats* compile_stats() const;

  /// The state a checkpoint holds (model, optimizer, schedule, scaler). Under ZeRO every rank must
  /// call it: each sends its shard of the optimizer state.
  TrainingState state();
  /// Restores the parts a checkpoint holds: the model, the optimizer, and the schedule and scaler
  /// when this step has them.
  void load_state(const Checkpoint& checkpoint);

 private:
  std::vector<Tensor> eager(const std::vector<Tensor>& batch);

  std::shared_ptr<nn::Module> model_;
  LossFn loss_;
  StepOptions options_;
  std::unique_ptr<optim::Optimizer> whole_;
  std::unique_ptr<dist::ZeroRedundancyOptimizer> sharded_;
  std::unique_ptr<optim::LRScheduler> schedule_;
  std::unique_ptr<amp::GradScaler> scaler_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<detail::CompiledCore> compiled_;
};

}  // namespace ember::train

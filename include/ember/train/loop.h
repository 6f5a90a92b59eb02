// The training loop every kind of run shares: steps (or epochs of steps), the training step
// (step.h), evaluations, checkpoints and resuming, progress, and a summary. A Task says what differs
// between runs: the model and its loss, the data, the settings a checkpoint records, what to
// evaluate; train/tasks.h has the MNIST, character-LM and diffusion tasks the CLI configures.
//
//   train::MnistTask task({.model = "cnn", .epochs = 10});
//   train::RunSummary summary = train::fit(task, {.save_path = "mnist.safetensors"}, print_progress);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/profiler.h"
#include "ember/train/checkpoint.h"
#include "ember/train/resume.h"
#include "ember/train/step.h"

namespace ember::train {

/// What a run reports as it goes. Rank 0 alone reports in a data-parallel run.
struct Progress {
  enum class Kind {
    kStep,        // a step ended (loss: the step's, over the global batch)
    kEpoch,       // an epoch ended (loss and accuracy: the epoch's means)
    kLog,         // the task's periodic line (metrics: what it measured)
    kEvaluation,  // an evaluation ended (metrics: "train_loss", "val_loss", ...)
  };
  Kind kind = Kind::kStep;
  int64_t step = 0;   // steps done in the run
  int64_t steps = 0;  // of the whole run
  int64_t epoch = 0;  // epoch-based runs: the epoch (1-based) and the epochs of the run
  int64_t epochs = 0;
  int64_t epoch_samples = 0;  // samples seen in this epoch, and in a whole one
  int64_t epoch_total = 0;
  double loss = 0;
  double accuracy = -1;           // classification runs; -1 otherwise
  double seconds = 0;             // since the run started
  double epoch_seconds = 0;       // since the epoch started
  double samples_per_second = 0;  // training steps only (what a sample is, the task says)
  std::map<std::string, double> metrics{};
};
using ProgressFn = std::function<void(const Progress&)>;

/// One step's contribution to the running totals.
struct StepMetrics {
  double loss = 0;       // the batch's mean loss
  int64_t samples = 0;   // this rank's examples in the batch
  int64_t correct = -1;  // classification: examples whose most likely class is the label
};

/// A kind of run. The loop calls these in this order: settings(), the model, its groups, optimizer
/// and loss for the training step, setup(step) (a schedule), then per step lr_at(), batch(),
/// metrics(), after_step(), with evaluate() at the evaluation points and save()/load() with
/// checkpoints, and finish() at the end.
class Task {
 public:
  virtual ~Task() = default;

  /// The "task" setting and the op errors name: "mnist", "gpt", "ssm", "diffusion".
  virtual std::string name() const = 0;
  virtual std::string op() const { return "train " + name(); }
  /// The settings a checkpoint records; resuming checks a checkpoint was written with the same.
  virtual std::map<std::string, std::string> settings() const = 0;
  /// How resuming checks a checkpoint (progress and settings are filled by the loop).
  virtual ResumeRules resume_rules() const { return {}; }
  virtual uint64_t seed() const = 0;

  virtual std::shared_ptr<nn::Module> model() = 0;
  virtual std::vector<optim::ParamGroup> param_groups();  // one group of every parameter
  virtual OptimizerFactory optimizer() = 0;
  virtual LossFn loss() = 0;
  /// Gradient clipping, autocast, compile, DDP: the step's options (the loop sets op and group).
  virtual StepOptions step_options() const = 0;
  /// After the step is built (a schedule over its optimizer, say).
  virtual void setup(TrainingStep& step) {}

  /// The run's length: epochs of steps_per_epoch() steps, or steps.
  virtual int64_t steps() const = 0;
  virtual int64_t steps_per_epoch() const { return 0; }  // 0: a run of steps, not epochs
  virtual int64_t epoch_samples() const { return 0; }    // samples in an epoch (over all ranks)
  /// Steps between checkpoints (and evaluations, when evaluate_every() is 0: every checkpoint).
  virtual int64_t save_every() const = 0;
  virtual int64_t evaluate_every() const { return 0; }  // 0: at the end of the run only
  /// The learning rate of step `step` (0-based), set before it; nullopt: the optimizer's own.
  virtual std::optional<double> lr_at(int64_t step) const { return std::nullopt; }
  /// The batch of step `step` (0-based) for this rank.
  virtual std::vector<Tensor> batch(int64_t step) = 0;
  /// What the loop totals from a step's outputs.
  virtual StepMetrics metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs);
  /// After step `done` - 1 of a run that stops at `last_step` (a moving average of the weights, say),
  /// with the step's loss; may return a line of progress (kLog: its loss and metrics).
  virtual std::optional<Progress> after_step(int64_t done, int64_t last_step, double loss) { return std::nullopt; }
  /// An evaluation after step `step` (rank 0): named metrics.
  virtual std::map<std::string, double> evaluate(int64_t step) { return {}; }

  /// Extra checkpoint content: tensors (the moving average) and metadata entries (where the data
  /// stream is). load() gets the checkpoint and the resume point's state entries.
  virtual void save(TrainingState& state, std::map<std::string, std::string>& metadata) {}
  virtual std::vector<std::string> state_keys() const { return {}; }
  virtual void load(const Checkpoint& checkpoint, const std::map<std::string, uint64_t>& state) {}
};

struct LoopOptions {
  int64_t stop_after = 0;   // > 0: this many epochs (or steps) now; save, then resume later
  std::string save_path{};  // checkpoints (safetensors)
  std::string resume_path{};
  std::string profile_path{};                   // a Chrome trace of the training steps
  std::shared_ptr<dist::ProcessGroup> group{};  // data-parallel: this process is one rank
};

struct RunSummary {
  int64_t first_step = 0;  // where this run started (0, or where it resumed)
  int64_t last_step = 0;   // steps done at the end
  double final_loss = 0;   // the last step's (NaN when no step ran)
  double train_seconds = 0;
  double seconds = 0;
  int64_t samples = 0;                         // seen by the training steps (over all ranks)
  double system_allocs_per_step = 0;           // NaN unless measured (the last epoch's steps after its first)
  std::map<std::string, double> evaluation{};  // the last evaluation's metrics
  std::optional<CompileStats> compile{};
  dist::DdpStats communication{};                 // summed over the steps (buckets and bytes: the last step's)
  std::unique_ptr<profiler::Profiler> profile{};  // stopped; with profile_path
  bool speaks = true;                             // rank 0 (prints, evaluates, saves)
};

/// A run of `task`: construction builds the model (after manual_seed(task.seed())), the training
/// step and, with options.resume_path, checks the checkpoint and restores everything from it;
/// run() trains from there to the task's end or options.stop_after. Errors start with [task.op()].
class Trainer {
 public:
  Trainer(Task& task, LoopOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainingStep& step() { return *step_; }
  int64_t first_step() const { return first_step_; }
  int64_t last_step() const { return last_step_; }
  bool speaks() const { return rank_ == 0; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  /// Trains, reporting to `on_progress` (rank 0 only).
  RunSummary run(const ProgressFn& on_progress = nullptr);

 private:
  void save(int64_t done);

  Task& task_;
  LoopOptions options_;
  std::unique_ptr<TrainingStep> step_;
  int rank_ = 0;
  int world_size_ = 1;
  int64_t first_step_ = 0;
  int64_t last_step_ = 0;
};

/// Trainer(task, options).run(on_progress).
RunSummary fit(Task& task, const LoopOptions& options, const ProgressFn& on_progress = nullptr);

/// nanoGPT's get_lr: linear warmup to lr over `warmup` steps, then cosine decay to lr / 10 at step
/// `steps`.
double warmup_cosine_lr(int64_t step, double lr, int64_t warmup, int64_t steps);

}  // namespace ember::train

// The training loop (ember/train/loop.h).
#include "ember/train/loop.h"

#include <chrono>
#include <cmath>

#include "ember/memory.h"
#include "ember/nn/module.h"
#include "ember/ops.h"
#include "train/clock.h"

namespace ember::train {

std::vector<optim::ParamGroup> Task::param_groups() { return {{.params = model()->parameters(), .options = {}}}; }

StepMetrics Task::metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs) {
  return {.loss = outputs.at(0).item<double>(), .samples = batch.empty() ? 0 : batch[0].size(0)};
}

double warmup_cosine_lr(int64_t step, double lr, int64_t warmup, int64_t steps) {
  const double min_lr = lr / 10;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  const double span = static_cast<double>(std::max<int64_t>(steps - warmup, 1));
  const double ratio = std::min(1.0, static_cast<double>(step - warmup) / span);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

Trainer::Trainer(Task& task, LoopOptions options) : task_(task), options_(std::move(options)) {
  if (options_.group) {
    rank_ = options_.group->rank();
    world_size_ = options_.group->world_size();
  }
  manual_seed(task_.seed());
  std::shared_ptr<nn::Module> model = task_.model();
  StepOptions step_options = task_.step_options();
  step_options.op = task_.op();
  step_options.group = options_.group;
  step_ = std::make_unique<TrainingStep>(model, task_.param_groups(), task_.optimizer(), task_.loss(), step_options);
  task_.setup(*step_);

  const int64_t steps = task_.steps();
  const int64_t per_epoch = task_.steps_per_epoch();
  const int64_t unit = per_epoch > 0 ? per_epoch : 1;  // steps per unit of progress
  if (!options_.resume_path.empty()) {
    ResumeRules rules = task_.resume_rules();
    rules.op = task_.op();
    rules.path = options_.resume_path;
    rules.settings = task_.settings();
    rules.progress_key = per_epoch > 0 ? keys::kEpochsDone : keys::kStepsDone;
    rules.unit = per_epoch > 0 ? "epochs" : "steps";
    rules.limit = steps / unit;
    rules.state_keys = task_.state_keys();
    // The settings first (nothing is loaded from a checkpoint of another run), then every part.
    // The model's values are not checked: the run shows where they go wrong (autograd's anomaly
    // mode names the op).
    const ResumePoint point = check_resume(read_settings(options_.resume_path, task_.op()), rules);
    first_step_ = point.done * unit;
    const Checkpoint checkpoint = read_checkpoint(options_.resume_path, task_.op(), /*finite=*/false);
    step_->load_state(checkpoint);
    task_.load(checkpoint, point.state);
  }
  last_step_ = options_.stop_after > 0 ? std::min(steps, first_step_ + options_.stop_after * unit) : steps;
}

Trainer::~Trainer() = default;

void Trainer::save(int64_t done) {
  if (options_.save_path.empty()) return;
  // Under ZeRO every rank sends its shard of the optimizer state (a collective); rank 0 writes.
  TrainingState state = step_->state();
  std::map<std::string, std::string> metadata = task_.settings();
  const int64_t per_epoch = task_.steps_per_epoch();
  if (per_epoch > 0) {
    metadata[keys::kEpochsDone] = std::to_string(done / per_epoch);
  } else {
    metadata[keys::kStepsDone] = std::to_string(done);
  }
  task_.save(state, metadata);
  if (speaks()) save_checkpoint(options_.save_path, state, metadata);
}

RunSummary Trainer::run(const ProgressFn& on_progress) {
  RunSummary summary;
  summary.first_step = first_step_;
  summary.last_step = last_step_;
  summary.final_loss = NAN;
  summary.system_allocs_per_step = NAN;
  summary.speaks = speaks();
  const int64_t steps = task_.steps();
  const int64_t per_epoch = task_.steps_per_epoch();
  const int64_t evaluate_every = task_.evaluate_every();
  auto report = [&](const Progress& progress) {
    if (on_progress && speaks()) on_progress(progress);
  };
  if (!options_.profile_path.empty()) summary.profile = std::make_unique<profiler::Profiler>();

  const auto start = Clock::now();
  auto evaluate = [&](int64_t done) {
    if (!speaks()) return;
    const profiler::Range range("evaluation");
    summary.evaluation = task_.evaluate(done);
    Progress progress{.kind = Progress::Kind::kEvaluation, .step = done, .steps = steps};
    progress.metrics = summary.evaluation;
    progress.seconds = seconds_since(start);
    progress.samples_per_second =
        summary.train_seconds > 0 ? static_cast<double>(summary.samples) / summary.train_seconds : 0.0;
    report(progress);
  };
  const double busy_at_start = options_.group ? options_.group->busy_seconds() : 0.0;
  auto epoch_start = start;
  double epoch_loss = 0;  // the epoch's sums over the global batches
  int64_t epoch_correct = 0, epoch_seen = 0;
  int64_t allocations_at_second_step = 0;
  step_->model().train();
  for (int64_t step = first_step_; step < last_step_; ++step) {
    const int64_t epoch = per_epoch > 0 ? step / per_epoch : 0;
    const int64_t in_epoch = per_epoch > 0 ? step % per_epoch : step;
    if (per_epoch > 0 && in_epoch == 0) {
      epoch_start = Clock::now();
      epoch_loss = 0;
      epoch_correct = epoch_seen = 0;
    }
    // Calls to the system allocator that this thread's steps of the last epoch made after its first
    // (the caching allocator should serve every one of them). A data loader's thread is not
    // counted: when its prefetching reaches its most batches alive depends on the timing.
    const bool last_epoch = per_epoch > 0 && step >= last_step_ - per_epoch;
    if (last_epoch && in_epoch == 1) allocations_at_second_step = thread_system_allocations();

    const auto step_start = Clock::now();
    StepMetrics metrics;
    {
      const profiler::Range range("train step");
      if (const std::optional<double> lr = task_.lr_at(step)) step_->set_lr(*lr);
      const std::vector<Tensor> batch = task_.batch(step);
      const std::vector<Tensor> outputs = (*step_)(batch);
      metrics = task_.metrics(batch, outputs);
    }
    if (options_.group) {  // the global batch's loss and counts
      const Tensor totals =
          from_vector(std::vector<double>{metrics.loss * static_cast<double>(metrics.samples),
                                          static_cast<double>(metrics.correct), static_cast<double>(metrics.samples)});
      options_.group->all_reduce(totals)->wait();
      const double* t = static_cast<const double*>(totals.data_ptr());
      metrics.samples = static_cast<int64_t>(t[2]);
      metrics.loss = t[0] / t[2];
      if (metrics.correct >= 0) metrics.correct = static_cast<int64_t>(t[1]);
    }
    if (dist::DistributedDataParallel* ddp = step_->ddp(); ddp != nullptr && step_->options().compile) {
      // A replayed step runs the recorded collectives without DDP's bookkeeping: the communication
      // thread's time is all there is to report.
      summary.communication.communication_seconds = options_.group->busy_seconds() - busy_at_start;
    } else if (ddp != nullptr) {
      const dist::DdpStats& last = ddp->last_stats();
      summary.communication.buckets = last.buckets;
      summary.communication.bytes = last.bytes;
      summary.communication.communication_seconds += last.communication_seconds;
      summary.communication.hidden_seconds += last.hidden_seconds;
      summary.communication.exposed_seconds += last.exposed_seconds;
    }
    const std::optional<Progress> logged = task_.after_step(step + 1, last_step_, metrics.loss);
    summary.train_seconds += seconds_since(step_start);
    summary.samples += metrics.samples;
    summary.final_loss = metrics.loss;
    const int64_t done = step + 1;

    Progress progress{.kind = Progress::Kind::kStep, .step = done, .steps = steps, .loss = metrics.loss};
    progress.seconds = seconds_since(start);
    progress.samples_per_second =
        summary.train_seconds > 0 ? static_cast<double>(summary.samples) / summary.train_seconds : 0.0;
    if (per_epoch > 0) {
      epoch_loss += metrics.loss * static_cast<double>(metrics.samples);
      epoch_correct += std::max<int64_t>(metrics.correct, 0);
      epoch_seen += metrics.samples;
      progress.epoch = epoch + 1;
      progress.epochs = steps / per_epoch;
      progress.epoch_samples = epoch_seen;
      progress.epoch_total = task_.epoch_samples();
      progress.loss = epoch_loss / static_cast<double>(std::max<int64_t>(epoch_seen, 1));
      if (metrics.correct >= 0) {
        progress.accuracy = static_cast<double>(epoch_correct) / static_cast<double>(std::max<int64_t>(epoch_seen, 1));
      }
      progress.epoch_seconds = seconds_since(epoch_start);
      progress.samples_per_second =
          progress.epoch_seconds > 0 ? static_cast<double>(epoch_seen) / progress.epoch_seconds : 0.0;
    }
    report(progress);
    if (logged) {
      Progress log = *logged;
      log.kind = Progress::Kind::kLog;
      log.step = done;
      log.steps = steps;
      log.seconds = seconds_since(start);
      log.samples_per_second = progress.samples_per_second;
      report(log);
    }
    if (per_epoch > 0 && done % per_epoch == 0) {
      if (last_epoch && in_epoch >= 1) {
        summary.system_allocs_per_step = static_cast<double>(thread_system_allocations() - allocations_at_second_step) /
                                         static_cast<double>(in_epoch);
      }
      progress.kind = Progress::Kind::kEpoch;
      report(progress);
    }
    if (evaluate_every > 0 && (done % evaluate_every == 0 || done == steps)) evaluate(done);
    if (done % task_.save_every() == 0 && done < last_step_) save(done);
  }
  save(last_step_);
  if (summary.profile) summary.profile->stop();
  if (evaluate_every == 0) evaluate(last_step_);
  summary.seconds = seconds_since(start);
  if (const CompileStats* stats = step_->compile_stats()) summary.compile = *stats;
  return summary;
}

RunSummary fit(Task& task, const LoopOptions& options, const ProgressFn& on_progress) {
  Trainer trainer(task, options);
  return trainer.run(on_progress);
}

}  // namespace ember::train

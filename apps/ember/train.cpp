// `ember train mnist`: trains the MLP or the LeNet-style CNN on MNIST with any of ember's
// optimizers, shows progress, evaluates on the held-out images, checkpoints and resumes.
#include "train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "cli_util.h"
#include "ember/data.h"
#include "ember/dist.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/optim.h"
#include "ember/profiler.h"
#include "eval.h"
#include "resume.h"

namespace ember::cli {
namespace {

double default_lr(const std::string& optimizer) {
  if (optimizer == "sgd" || optimizer == "momentum" || optimizer == "adagrad") return 0.01;
  if (optimizer == "rmsprop") return 1e-3;
  return 3e-3;  // adam, adamw: with the cosine decay and shifts, 3e-3 beats 1e-3 on the 4,000 images
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, const std::vector<Tensor>& params,
                                                 double lr) {
  if (name == "sgd") return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = lr});
  if (name == "momentum") return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = lr, .momentum = 0.9});
  if (name == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr});
  if (name == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = lr});
  if (name == "adagrad") return std::make_unique<optim::Adagrad>(params, optim::AdagradOptions{.lr = lr});
  if (name == "rmsprop") return std::make_unique<optim::RMSprop>(params, optim::RMSpropOptions{.lr = lr});
  EMBER_FAIL("[train] unknown optimizer \"", name, "\"; choose sgd, momentum, adam, adamw, adagrad or rmsprop");
}

// A checkpoint holds the model's and the optimizer's state plus what is needed to continue: the
// number of finished epochs and the run's settings (resuming with other settings is refused).
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kSchedulePrefix = "schedule.";
// Keys the augmentation's random stream apart from the shuffling's (which uses the seed itself).
constexpr uint64_t kShiftSeedOffset = 0x9E3779B97F4A7C15ULL;

std::map<std::string, std::string> run_settings(const TrainOptions& o, double lr) {
  char lr_text[32];
  std::snprintf(lr_text, sizeof lr_text, "%.17g", lr);
  return {{"task", "mnist"},
          {"model", o.model},
          {"optimizer", o.optimizer},
          {"lr", lr_text},
          {"batch_size", std::to_string(o.batch_size)},
          {"shift", std::to_string(o.shift)},
          {"schedule", o.schedule},
          {"epochs", std::to_string(o.epochs)},
          {"seed", std::to_string(o.seed)}};
}

// One line of progress, redrawn in place on a terminal.
class Progress {
 public:
  Progress(bool live, int epoch, int epochs, int64_t total)
      : live_(live), epoch_(epoch), epochs_(epochs), total_(total) {}

  void update(int64_t done, double loss, double accuracy, double elapsed, bool final) {
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    if (live_) {
      if (!final && done < total_ && seconds_since(last_draw_) < 0.1) return;
      last_draw_ = Clock::now();
      constexpr int kWidth = 24;
      const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
      const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
      std::string bar(filled, '#');
      bar.append(kWidth - filled, '.');
      std::fprintf(stdout, "\repoch %d/%d [%s] %lld/%lld  loss %.4f  acc %5.1f%%  %6.0f samples/s  ETA %4.1fs ", epoch_,
                   epochs_, bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_), loss,
                   100 * accuracy, rate, eta);
      if (final) std::fputc('\n', stdout);
      std::fflush(stdout);
    } else if (final) {
      std::fprintf(stdout, "epoch %d/%d  loss %.4f  train acc %5.1f%%  %6.0f samples/s  %.1fs\n", epoch_, epochs_, loss,
                   100 * accuracy, rate, elapsed);
      std::fflush(stdout);
    }
  }

 private:
  bool live_;
  int epoch_;
  int epochs_;
  int64_t total_;
  Clock::time_point last_draw_{};
};

}  // namespace

int run_train_mnist(const TrainOptions& options) {
  EMBER_CHECK(options.epochs >= 1, "[train] --epochs must be at least 1, got ", options.epochs);
  EMBER_CHECK(options.batch_size >= 1, "[train] --batch-size must be at least 1, got ", options.batch_size);
  if (options.threads > 0) set_num_threads(options.threads);
  const double lr = options.lr.value_or(default_lr(options.optimizer));
  EMBER_CHECK(lr > 0 && std::isfinite(lr), "[train] --lr must be a positive number, got ", lr);

  const data::MNIST train_set(options.data_dir, data::Split::kTrain);
  const data::MNIST test_set(options.data_dir, data::Split::kTest);

  // --ddp: this process is one rank; the others run the same command.
  EMBER_CHECK(options.ddp || !options.zero, "[train] --zero needs --ddp");
  EMBER_CHECK(!(options.ddp && options.compile), "[train] --ddp cannot run with --compile yet: the compiled step ",
              "has no place for the gradient all-reduce");
  std::shared_ptr<dist::ProcessGroup> group;
  if (options.ddp) {
    group = dist::init_process_group();
    EMBER_CHECK(options.batch_size % group->world_size() == 0, "[train] --batch-size ", options.batch_size,
                " is not divisible by the ", group->world_size(), " ranks");
  }
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  const bool speaks = rank == 0;  // prints and writes checkpoints

  manual_seed(options.seed);
  std::shared_ptr<nn::Sequential> model = models::mnist_model(options.model);
  std::unique_ptr<dist::ZeroRedundancyOptimizer> sharded;
  std::unique_ptr<optim::Optimizer> whole;
  if (options.zero) {
    sharded = std::make_unique<dist::ZeroRedundancyOptimizer>(
        model->parameters(), group, [&](std::vector<optim::ParamGroup> groups) {
          return make_optimizer(options.optimizer, groups.at(0).params, lr);
        });
  } else {
    whole = make_optimizer(options.optimizer, model->parameters(), lr);
  }
  // The optimizer the schedule and the loss scaler drive: this rank's shard's under --zero.
  optim::Optimizer* const optimizer = sharded ? &sharded->local_optimizer() : whole.get();
  auto zero_grad = [&] { sharded ? sharded->zero_grad() : optimizer->zero_grad(); };
  auto optimizer_step = [&] { sharded ? sharded->step() : optimizer->step(); };
  // The learning rate follows a cosine from lr down to 0 over the whole run, stepped per batch.
  const int64_t batches_per_epoch = (train_set.size() + options.batch_size - 1) / options.batch_size;
  std::unique_ptr<optim::LRScheduler> schedule;
  if (options.schedule == "cosine") {
    schedule = std::make_unique<optim::CosineAnnealingLR>(*optimizer, batches_per_epoch * options.epochs);
  }
  std::map<std::string, std::string> settings = run_settings(options, lr);
  // --amp: the forward and the loss under autocast; float16 also scales the loss (GradScaler,
  // whose state goes into the checkpoint). Checkpoints of float32 runs carry no "amp" entry.
  const std::optional<DType> amp_dtype = amp_option(options.amp, "train");
  if (amp_dtype) settings["amp"] = options.amp;
  std::optional<amp::GradScaler> scaler;
  if (amp_dtype == kFloat16) scaler.emplace();
  EMBER_CHECK(!(scaler && options.compile),
              "[train] --amp f16 cannot run with --compile: the loss scaler reads the "
              "gradients on the host to decide whether to step (--amp bf16 can)");
  EMBER_CHECK(!(scaler && sharded),
              "[train] --amp f16 cannot run with --zero: the loss scaler steps one optimizer, "
              "not a sharded one (--amp bf16 can)");

  int first_epoch = 0;
  if (!options.resume_path.empty()) {
    const ResumePoint point = check_resume(load_metadata(options.resume_path), {.op = "train",
                                                                                .path = options.resume_path,
                                                                                .settings = settings,
                                                                                .progress_key = "epochs_done",
                                                                                .unit = "epochs",
                                                                                .limit = options.epochs});
    first_epoch = static_cast<int>(point.done);
    const StateDict checkpoint = load(options.resume_path);
    model->load_state_dict(strip_prefix(checkpoint, kModelPrefix));
    if (sharded) {
      sharded->load_state_dict(strip_prefix(checkpoint, kOptimizerPrefix));
    } else {
      optimizer->load_state_dict(strip_prefix(checkpoint, kOptimizerPrefix));
    }
    if (schedule) schedule->load_state_dict(strip_prefix(checkpoint, kSchedulePrefix));
    if (scaler) scaler->load_state_dict(strip_prefix(checkpoint, kScalerPrefix));
  }

  // Under --ddp each rank takes every world-th example of the shuffled epoch (DistributedSampler),
  // so that batch i of the ranks together is batch i of a single process.
  std::optional<dist::DistributedDataParallel> ddp;
  if (group) ddp.emplace(model, group, dist::DdpOptions{.bucket_cap_mb = options.bucket_cap_mb});
  data::DataLoader loader(train_set, options.batch_size / world, /*shuffle=*/true, options.seed);
  if (group) {
    const dist::DistributedSampler sampler(train_set.size(), world, rank, /*shuffle=*/true, options.seed);
    loader.set_sampler([sampler](uint64_t epoch) { return sampler.indices(epoch); }, sampler.num_samples());
  }
  DdpReport ddp_report;
  // One training step: zero_grad, forward, loss, backward, the optimizer's and the schedule's
  // steps. Returns the loss and the logits (for the accuracy, read outside the step).
  auto step = [&](const Tensor& inputs, const Tensor& targets) {
    zero_grad();
    Tensor logits, loss;
    {
      const amp::Autocast autocast(amp_dtype.value_or(kBFloat16), amp_dtype.has_value());
      logits = (*model)(inputs);
      loss = nn::functional::cross_entropy(logits, targets);
    }
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->step(*optimizer);
      scaler->update();
    } else {
      loss.backward();
      optimizer_step();
    }
    if (ddp) ddp_report.add(ddp->last_stats());
    if (schedule) schedule->step();
    return std::tuple<Tensor, Tensor>{loss, logits};
  };
  // --compile: the first batch traces the step, later ones replay its plan; the last, smaller
  // batch of an epoch has another signature and compiles a second plan.
  using CompiledStep = Compiled<decltype(step)>;
  std::optional<CompiledStep> compiled_step;
  if (options.compile) compiled_step.emplace(ember::compile(step));

  const bool live = ::isatty(::fileno(stdout)) != 0 && !options.json && speaks;
  const int64_t n_train = train_set.size();
  if (!options.json && speaks) {
    std::printf(
        "ember train mnist: %s, %s (lr %g, %s), batch %d, shifts of up to %d px, %lld train / %lld test "
        "images, %d threads%s%s\n",
        options.model.c_str(), options.optimizer.c_str(), lr, options.schedule.c_str(), options.batch_size,
        options.shift, static_cast<long long>(n_train), static_cast<long long>(test_set.size()), get_num_threads(),
        options.compile ? ", compiled step" : "", amp_dtype ? (", autocast " + options.amp).c_str() : "");
    if (group) {
      std::printf("data-parallel: %d ranks (%s), %d images per rank per step, %zu gradient buckets%s\n", world,
                  dist::backend_name(group->backend()), options.batch_size / world, ddp->buckets().size(),
                  sharded ? ", optimizer state sharded (ZeRO-1)" : "");
    }
  }

  // The value of a blank pixel after normalization, for the pixels a shift uncovers.
  const double background = (0.0 - data::MNIST::kMean) / data::MNIST::kStd;
  const auto start = Clock::now();
  double train_seconds = 0;
  int64_t samples_seen = 0;
  double last_loss = NAN;
  double system_allocs_per_step = NAN;
  model->train();
  // --profile records the training steps (not the evaluation).
  std::unique_ptr<profiler::Profiler> profile;
  if (!options.profile_path.empty()) profile = std::make_unique<profiler::Profiler>();
  const int last_epoch =
      options.stop_after > 0 ? std::min(options.epochs, first_epoch + options.stop_after) : options.epochs;
  for (int epoch = first_epoch; epoch < last_epoch; ++epoch) {
    loader.set_epoch(epoch);
    Progress progress(live, epoch + 1, options.epochs, n_train);
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    int64_t batch_index = 0;
    // Calls to the system allocator that this thread's steps of the last epoch made after its first
    // (the caching allocator should serve every one of them). The loader's thread is not counted:
    // when its prefetching reaches its most batches alive depends on the timing.
    const bool measure_allocs = epoch == last_epoch - 1;
    int64_t allocs_at_second_step = 0;
    for (const data::Batch& batch : loader) {
      if (measure_allocs && batch_index == 1) allocs_at_second_step = thread_system_allocations();
      // Shifts depend on (seed, epoch, batch) only, so a resumed run replays them.
      // Each rank draws its own shifts.
      const uint64_t stream = (static_cast<uint64_t>(rank) << 56) + (static_cast<uint64_t>(epoch) << 32) + batch_index;
      const Tensor inputs = options.shift > 0 ? data::random_shift(batch.inputs, options.shift, background,
                                                                   options.seed + kShiftSeedOffset, stream)
                                              : batch.inputs;
      ++batch_index;
      const profiler::Range step_range("train step");
      const auto [loss, logits] = compiled_step ? (*compiled_step)(inputs, batch.targets) : step(inputs, batch.targets);
      int64_t n = batch.inputs.size(0);
      last_loss = loss.item<double>();
      int64_t right = logits.argmax(1).eq(batch.targets).sum().item<int64_t>();
      if (group) {  // the global batch's loss and accuracy
        const Tensor totals = from_vector(std::vector<double>{last_loss * static_cast<double>(n),
                                                              static_cast<double>(right), static_cast<double>(n)});
        group->all_reduce(totals)->wait();
        const double* t = static_cast<const double*>(totals.data_ptr());
        n = static_cast<int64_t>(t[2]);
        last_loss = t[0] / t[2];
        right = static_cast<int64_t>(t[1]);
      }
      loss_sum += last_loss * static_cast<double>(n);
      correct += right;
      seen += n;
      if (speaks)
        progress.update(seen, loss_sum / static_cast<double>(seen),
                        static_cast<double>(correct) / static_cast<double>(seen), seconds_since(epoch_start), false);
    }
    const double elapsed = seconds_since(epoch_start);
    if (measure_allocs && batch_index > 1) {
      system_allocs_per_step = static_cast<double>(thread_system_allocations() - allocs_at_second_step) /
                               static_cast<double>(batch_index - 1);
    }
    train_seconds += elapsed;
    samples_seen += seen;
    if (speaks)
      progress.update(seen, loss_sum / static_cast<double>(std::max<int64_t>(seen, 1)),
                      static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1)), elapsed, true);
    if (!options.save_path.empty()) {
      // Under --zero every rank sends its shard of the optimizer state (a collective), rank 0 saves.
      StateDict optimizer_state = sharded ? sharded->consolidated_state_dict() : optimizer->state_dict();
      if (!speaks) continue;
      StateDict checkpoint = with_prefix(model->state_dict(), kModelPrefix);
      checkpoint.merge(with_prefix(optimizer_state, kOptimizerPrefix));
      if (schedule) checkpoint.merge(with_prefix(schedule->state_dict(), kSchedulePrefix));
      if (scaler) checkpoint.merge(with_prefix(scaler->state_dict(), kScalerPrefix));
      std::map<std::string, std::string> meta = settings;
      meta["epochs_done"] = std::to_string(epoch + 1);
      save(checkpoint, options.save_path, meta);
    }
  }

  if (profile) {
    profile->stop();
    if (speaks) profile->export_chrome_trace(options.profile_path);
  }
  if (!speaks) return 0;

  const double accuracy = mnist_accuracy(*model, test_set.images(), test_set.labels());
  const double total_seconds = seconds_since(start);
  const double rate = train_seconds > 0 ? static_cast<double>(samples_seen) / train_seconds : 0.0;
  if (options.json) {
    nlohmann::json result = {
        {"task", "mnist"},
        {"model", options.model},
        {"optimizer", options.optimizer},
        {"epochs", options.epochs},
        {"train_samples", n_train},
        {"test_samples", test_set.size()},
        {"test_accuracy", accuracy},
        {"final_loss", std::isnan(last_loss) ? nlohmann::json(nullptr) : nlohmann::json(last_loss)},
        {"seconds", total_seconds},
        {"samples_per_second", rate},
        {"system_allocs_per_step",
         std::isnan(system_allocs_per_step) ? nlohmann::json(nullptr) : nlohmann::json(system_allocs_per_step)},
        {"compiled", compiled_step.has_value()},
    };
    if (group) ddp_report.write(result, *group, *ddp, sharded.get());
    if (compiled_step) add_compile_stats(result, compiled_step->stats());
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("test accuracy %.2f%% on %lld images  |  %.1fs wall, %.0f samples/s\n", 100 * accuracy,
                static_cast<long long>(test_set.size()), total_seconds, rate);
    if (compiled_step) print_compile_stats(compiled_step->stats());
    if (group) ddp_report.print(*group, sharded.get());
  }
  if (profile) print_profile(*profile, options.profile_path, options.json ? std::cerr : std::cout);
  return 0;
}

}  // namespace ember::cli

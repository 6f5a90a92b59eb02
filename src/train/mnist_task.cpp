// The MNIST run (ember/train/tasks.h): the MLP or the LeNet-style CNN with any of ember's
// optimizers, random shifts, a cosine schedule stepped per batch, and the test accuracy at the end.
#include <cmath>

#include "ember/models/mnist.h"
#include "ember/ops.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/train/tasks.h"

namespace ember::train {
namespace {

double default_lr(const std::string& optimizer) {
  if (optimizer == "sgd" || optimizer == "momentum" || optimizer == "adagrad") return 0.01;
  if (optimizer == "rmsprop") return 1e-3;
  return 3e-3;  // adam, adamw: with the cosine decay and shifts, 3e-3 beats 1e-3 on the 4,000 images
}

// Keys the augmentation's random stream apart from the shuffling's (which uses the seed itself).
constexpr uint64_t kShiftSeedOffset = 0x9E3779B97F4A7C15ULL;

}  // namespace

MnistTask::MnistTask(MnistOptions options)
    : options_(std::move(options)),
      lr_(options_.lr.value_or(default_lr(options_.optimizer))),
      train_set_(options_.data_dir, data::Split::kTrain),
      test_set_(options_.data_dir, data::Split::kTest) {
  EMBER_CHECK(options_.epochs >= 1, "[train] --epochs must be at least 1, got ", options_.epochs);
  EMBER_CHECK(options_.batch_size >= 1, "[train] --batch-size must be at least 1, got ", options_.batch_size);
  EMBER_CHECK(lr_ > 0 && std::isfinite(lr_), "[train] --lr must be a positive number, got ", lr_);
  EMBER_CHECK(options_.schedule == "cosine" || options_.schedule == "constant",
              "[train] --schedule must be cosine or constant, got \"", options_.schedule, "\"");
  (void)optimizer_factory(options_.optimizer, lr_);  // an unknown optimizer fails here
  if (!options_.device.is_cpu()) {
    EMBER_CHECK(!options_.compile && !options_.group, "[train mnist] on ", options_.device,
                " training runs eagerly in one process: --compile and --ddp are CPU-only for now");
  }
  if (options_.group) {
    rank_ = options_.group->rank();
    world_size_ = options_.group->world_size();
    EMBER_CHECK(options_.batch_size % world_size_ == 0, "[train] --batch-size ", options_.batch_size,
                " is not divisible by the ", world_size_, " ranks");
  }
}

std::map<std::string, std::string> MnistTask::settings() const {
  const MnistOptions& o = options_;
  std::map<std::string, std::string> settings = {{keys::kTask, "mnist"},
                                                 {"model", o.model},
                                                 {"optimizer", o.optimizer},
                                                 {"lr", number_setting(lr_)},
                                                 {"batch_size", std::to_string(o.batch_size)},
                                                 {"shift", std::to_string(o.shift)},
                                                 {"schedule", o.schedule},
                                                 {"epochs", std::to_string(o.epochs)},
                                                 {"seed", std::to_string(o.seed)}};
  // Checkpoints of float32 runs carry no "amp" entry.
  if (o.amp) settings[keys::kAmp] = *o.amp == kFloat16 ? "f16" : "bf16";
  return settings;
}

std::shared_ptr<nn::Module> MnistTask::model() {
  if (!model_) {
    model_ = models::mnist_model(options_.model);
    model_->to(options_.device);
  }
  return model_;
}

OptimizerFactory MnistTask::optimizer() { return optimizer_factory(options_.optimizer, lr_); }

LossFn MnistTask::loss() {
  return [this](const std::vector<Tensor>& batch) {
    Tensor logits = (*model_)(batch[0]);
    Tensor loss = nn::functional::cross_entropy(logits, batch[1]);
    return std::vector<Tensor>{loss, logits};
  };
}

StepOptions MnistTask::step_options() const {
  return {.autocast = options_.amp,
          .compile = options_.compile,
          .bucket_cap_mb = options_.bucket_cap_mb,
          .zero = options_.zero};
}

int64_t MnistTask::steps_per_epoch() const {
  return (train_set_.size() + options_.batch_size - 1) / options_.batch_size;
}

void MnistTask::setup(TrainingStep& step) {
  // The learning rate follows a cosine from lr down to 0 over the whole run, stepped per batch.
  if (options_.schedule == "cosine")
    step.set_schedule(std::make_unique<optim::CosineAnnealingLR>(step.optimizer(), steps()));
  // Under data-parallel training each rank takes every world-th example of the shuffled epoch
  // (DistributedSampler), so that batch i of the ranks together is batch i of a single process.
  loader_ = std::make_unique<data::DataLoader>(train_set_, options_.batch_size / world_size_, /*shuffle=*/true,
                                               options_.seed);
  if (options_.group) {
    const dist::DistributedSampler sampler(train_set_.size(), world_size_, rank_, /*shuffle=*/true, options_.seed);
    loader_->set_sampler([sampler](uint64_t epoch) { return sampler.indices(epoch); }, sampler.num_samples());
  }
}

std::vector<Tensor> MnistTask::batch(int64_t step) {
  const int64_t epoch = step / steps_per_epoch(), index = step % steps_per_epoch();
  if (index == 0) {
    next_.reset();
    loader_->set_epoch(static_cast<uint64_t>(epoch));
    next_.emplace(loader_->begin());
  } else {
    ++*next_;
  }
  EMBER_CHECK(next_ && !(*next_ == std::default_sentinel), "[train] the data loader ended before batch ", index,
              " of epoch ", epoch + 1);
  const data::Batch& batch = **next_;
  const Device device = options_.device;
  if (options_.shift == 0) return {batch.inputs.to(device), batch.targets.to(device)};
  // Shifts depend on (seed, epoch, batch) only, so a resumed run replays them; each rank draws its own.
  // The value of a blank pixel after normalization fills the pixels a shift uncovers.
  const double background = (0.0 - data::MNIST::kMean) / data::MNIST::kStd;
  const uint64_t stream =
      (static_cast<uint64_t>(rank_) << 56) + (static_cast<uint64_t>(epoch) << 32) + static_cast<uint64_t>(index);
  return {
      data::random_shift(batch.inputs, options_.shift, background, options_.seed + kShiftSeedOffset, stream).to(device),
      batch.targets.to(device)};
}

StepMetrics MnistTask::metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs) {
  return {.loss = outputs[0].item<double>(),
          .samples = batch[0].size(0),
          .correct = outputs[1].argmax(1).eq(batch[1]).sum().item<int64_t>()};
}

std::map<std::string, double> MnistTask::evaluate(int64_t) {
  return {{"test_accuracy", classification_accuracy(*model_, test_set_.images(), test_set_.labels())}};
}

}  // namespace ember::train

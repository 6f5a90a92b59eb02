// The diffusion run (ember/train/tasks.h): a class-conditional DDPM on the MNIST training images
// (scaled to [-1, 1]), with AdamW (linear warmup, cosine decay), gradient clipping at 1, classifier-
// free guidance's class dropout and an exponential moving average of the weights, which the samplers
// use. Checkpoints hold the weights, their average, the optimizer and the run's settings; a resumed
// run is the same run: each step's batch and draws depend only on the seed and the step.
#include <algorithm>
#include <cmath>
#include <random>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/train/registry.h"
#include "ember/train/tasks.h"

namespace ember::train {
namespace {

constexpr int64_t kImageSize = 28;
constexpr int64_t kClasses = 10;
constexpr int64_t kGroups = 8;
const std::vector<int64_t> kMultipliers{1, 2, 2};

// A seed for step `step` of a run seeded `seed` (splitmix64 of both).
uint64_t step_seed(uint64_t seed, int64_t step) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Epoch e's order of the n training images: a shuffle seeded by the run's seed and e.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(step_seed(seed ^ 0x5EEDULL, epoch));
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

const DiffusionOptions& checked(const DiffusionOptions& o) {
  const char* op = "train diffusion";
  EMBER_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.channels >= 1 && o.timesteps >= 1 && o.save_every >= 1, "[", op,
              "] --steps, --batch-size, --channels, --timesteps and --save-every must be at least 1");
  EMBER_CHECK(o.channels % kGroups == 0, "[", op, "] --channels must be a multiple of ", kGroups,
              " (GroupNorm's groups), got ", o.channels);
  EMBER_CHECK(o.warmup >= 0 && o.warmup < o.steps, "[", op, "] --warmup must be in [0, --steps), got ", o.warmup);
  EMBER_CHECK(o.lr > 0 && std::isfinite(o.lr), "[", op, "] --lr must be a positive number, got ", o.lr);
  EMBER_CHECK(o.drop_class >= 0 && o.drop_class <= 1, "[", op, "] --drop-class must be in [0, 1], got ", o.drop_class);
  EMBER_CHECK(o.ema >= 0 && o.ema < 1, "[", op, "] --ema must be in [0, 1), got ", o.ema);
  return o;
}

}  // namespace

DiffusionTask::DiffusionTask(DiffusionOptions options)
    : options_(checked(options)), schedule_(options_.timesteps, models::noise_schedule(options_.schedule)) {
  const data::MNIST train_set(options_.data_dir, data::Split::kTrain, /*normalize=*/false);
  EMBER_CHECK(train_set.size() >= options_.batch_size, "[train diffusion] --batch-size ", options_.batch_size,
              " is more than the ", train_set.size(), " training images");
  images_ = (train_set.images() * 2.0 - 1.0).contiguous();  // (n, 1, 28, 28) in [-1, 1]
  labels_ = train_set.labels();
}

std::map<std::string, std::string> DiffusionTask::settings() const {
  const DiffusionOptions& o = options_;
  std::map<std::string, std::string> settings = config_settings(models::UNetConfig{
      .channels = o.channels, .multipliers = kMultipliers, .groups = kGroups, .num_classes = kClasses});
  settings.insert({{keys::kTask, "diffusion"},
                   {"image_size", std::to_string(kImageSize)},
                   {"timesteps", std::to_string(o.timesteps)},
                   {"schedule", o.schedule},
                   {"steps", std::to_string(o.steps)},
                   {"batch_size", std::to_string(o.batch_size)},
                   {"lr", number_setting(o.lr)},
                   {"warmup", std::to_string(o.warmup)},
                   {"drop_class", number_setting(o.drop_class)},
                   {"ema", number_setting(o.ema)},
                   {"seed", std::to_string(o.seed)}});
  return settings;
}

std::shared_ptr<nn::Module> DiffusionTask::model() {
  if (!model_) {
    model_ = std::make_shared<models::UNet>(models::UNetConfig{
        .channels = options_.channels, .multipliers = kMultipliers, .groups = kGroups, .num_classes = kClasses});
    model_->to(options_.device);
    parameters_ = model_->parameters();
    for (const Tensor& p : parameters_) average_.push_back(p.detach().clone());
  }
  return model_;
}

OptimizerFactory DiffusionTask::optimizer() { return adamw_factory({.lr = options_.lr, .weight_decay = 0.0}); }

LossFn DiffusionTask::loss() {
  return [this](const std::vector<Tensor>& batch) {
    return std::vector<Tensor>{models::diffusion_loss(*model_, schedule_, batch[0], batch[1], options_.drop_class)};
  };
}

std::optional<double> DiffusionTask::lr_at(int64_t step) const {
  return warmup_cosine_lr(step, options_.lr, options_.warmup, options_.steps);
}

std::vector<Tensor> DiffusionTask::batch(int64_t step) {
  const int64_t n = images_.size(0);
  const int64_t per_epoch = n / options_.batch_size;
  const int64_t epoch = step / per_epoch, offset = (step % per_epoch) * options_.batch_size;
  if (epoch != order_epoch_) {
    order_ = epoch_order(n, options_.seed, epoch);
    order_epoch_ = epoch;
  }
  const Tensor index =
      from_vector(std::vector<int64_t>(order_.begin() + offset, order_.begin() + offset + options_.batch_size));
  std::vector<Tensor> batch = {index_select(images_, 0, index).to(options_.device),
                               index_select(labels_, 0, index).to(options_.device)};
  // The step's time steps, noise and dropped classes (drawn by the loss) depend on the seed and the
  // step alone.
  manual_seed(step_seed(options_.seed, step));
  return batch;
}

std::optional<Progress> DiffusionTask::after_step(int64_t done, int64_t last_step, double loss) {
  {
    // The moving average, with the usual warmup of its decay (short runs are not held at the start).
    autograd::NoGradGuard no_grad;
    const double decay = std::min(options_.ema, static_cast<double>(done) / static_cast<double>(done + 9));
    for (size_t i = 0; i < parameters_.size(); ++i) {
      average_[i].mul_(decay).add_(parameters_[i].detach() * (1 - decay));
    }
  }
  window_loss_ += loss;
  ++window_;
  if (done % 100 != 0 && done != last_step) return std::nullopt;
  Progress line{.loss = window_loss_ / static_cast<double>(window_)};
  window_loss_ = 0;
  window_ = 0;
  return line;
}

StateDict DiffusionTask::average_state() const {
  StateDict state;
  const std::vector<std::pair<std::string, Tensor>> named = model_->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) state.emplace(named[i].first, average_[i]);
  return state;
}

void DiffusionTask::save(TrainingState& state, std::map<std::string, std::string>&) { state.average = average_state(); }

void DiffusionTask::load(const Checkpoint& checkpoint, const std::map<std::string, uint64_t>&) {
  const StateDict saved = checkpoint.part(kAveragePrefix);
  for (const auto& [name, tensor] : average_state()) {
    const auto it = saved.find(name);
    EMBER_CHECK(it != saved.end() && it->second.shape() == tensor.shape(), "[train diffusion] checkpoint ",
                checkpoint.path, " has no moving average for ", name);
    Tensor(tensor).copy_(it->second);
  }
}

int64_t DiffusionTask::flops_per_step() const {
  return 3 * model_->flops_per_image(kImageSize, kImageSize) * options_.batch_size;
}

int64_t DiffusionTask::parameter_count() const {
  int64_t count = 0;
  for (const Tensor& p : parameters_) count += p.numel();
  return count;
}

}  // namespace ember::train

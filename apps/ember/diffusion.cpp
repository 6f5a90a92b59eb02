// `ember train diffusion`: a class-conditional DDPM on the MNIST training images (scaled to [-1, 1]),
// with AdamW (linear warmup, cosine decay), gradient clipping at 1, classifier-free guidance's class
// dropout and an exponential moving average of the weights, which the samplers use. Checkpoints
// hold the weights, their average, the optimizer and the run's settings; a resumed run is the same
// run: each step's batch and draws depend only on the seed and the step.
//
// `ember sample diffusion`: draws `per_class` samples of each digit with DDPM or DDIM for every
// combination of the step counts and guidance scales asked for, writes each as a PNG grid (a row
// per digit), and, given an MNIST classifier, reports the fraction classified as the digit they were
// conditioned on.
#include "diffusion.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint.h"
#include "cli_util.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/diffusion.h"
#include "ember/optim.h"
#include "eval.h"
#include "png.h"
#include "resume.h"

namespace ember::cli {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kEmaPrefix = "ema.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr int64_t kImageSize = 28;
constexpr int64_t kClasses = 10;
constexpr int64_t kGroups = 8;
const std::vector<int64_t> kMultipliers{1, 2, 2};

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (const int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// The settings a checkpoint records: the model (needed to rebuild it) and the run's recipe (a
// resumed run must keep them).
std::map<std::string, std::string> run_settings(const TrainDiffusionOptions& o) {
  return {{"task", "diffusion"},
          {"channels", std::to_string(o.channels)},
          {"multipliers", join(kMultipliers)},
          {"groups", std::to_string(kGroups)},
          {"classes", std::to_string(kClasses)},
          {"image_size", std::to_string(kImageSize)},
          {"timesteps", std::to_string(o.timesteps)},
          {"schedule", o.schedule},
          {"steps", std::to_string(o.steps)},
          {"batch_size", std::to_string(o.batch_size)},
          {"lr", number(o.lr)},
          {"warmup", std::to_string(o.warmup)},
          {"drop_class", number(o.drop_class)},
          {"ema", number(o.ema)},
          {"seed", std::to_string(o.seed)}};
}

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

std::vector<int64_t> parse_list(const std::string& text, const std::string& path, std::string_view op) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    EMBER_CHECK(!item.empty() && item.size() < 6 && item.find_first_not_of("0123456789") == std::string::npos, "[", op,
                "] checkpoint ", path, " has a malformed multipliers entry \"", text, "\"");
    values.push_back(std::stoll(item));
    start = comma + 1;
  }
  return values;
}

}  // namespace

int run_train_diffusion(const TrainDiffusionOptions& o) {
  const std::string op = "train diffusion";
  EMBER_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.channels >= 1 && o.timesteps >= 1 && o.save_every >= 1, "[", op,
              "] --steps, --batch-size, --channels, --timesteps and --save-every must be at least 1");
  EMBER_CHECK(o.channels % kGroups == 0, "[", op, "] --channels must be a multiple of ", kGroups,
              " (GroupNorm's groups), got ", o.channels);
  EMBER_CHECK(o.warmup >= 0 && o.warmup < o.steps, "[", op, "] --warmup must be in [0, --steps), got ", o.warmup);
  EMBER_CHECK(o.lr > 0 && std::isfinite(o.lr), "[", op, "] --lr must be a positive number, got ", o.lr);
  EMBER_CHECK(o.drop_class >= 0 && o.drop_class <= 1, "[", op, "] --drop-class must be in [0, 1], got ", o.drop_class);
  EMBER_CHECK(o.ema >= 0 && o.ema < 1, "[", op, "] --ema must be in [0, 1), got ", o.ema);
  if (o.threads > 0) set_num_threads(o.threads);
  const models::DiffusionSchedule schedule(o.timesteps, models::noise_schedule(o.schedule));
  const data::MNIST train_set(o.data_dir, data::Split::kTrain, /*normalize=*/false);
  const int64_t n = train_set.size();
  EMBER_CHECK(n >= o.batch_size, "[", op, "] --batch-size ", o.batch_size, " is more than the ", n, " training images");
  const Tensor images = (train_set.images() * 2.0 - 1.0).contiguous();  // (n, 1, 28, 28) in [-1, 1]
  const Tensor labels = train_set.labels();
  const std::map<std::string, std::string> settings = run_settings(o);

  manual_seed(o.seed);
  models::UNet model({.channels = o.channels, .multipliers = kMultipliers, .groups = kGroups, .num_classes = kClasses});
  const std::vector<Tensor> parameters = model.parameters();
  std::vector<Tensor> average;  // the exponential moving average of the parameters
  for (const Tensor& p : parameters) average.push_back(p.detach().clone());
  optim::AdamW optimizer(parameters, {.lr = o.lr, .weight_decay = 0.0});
  int64_t first_step = 0;
  auto average_state = [&] {
    StateDict state;
    const std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) state.emplace(named[i].first, average[i]);
    return state;
  };
  if (!o.resume_path.empty()) {
    first_step = check_resume(load_metadata(o.resume_path), {.op = op,
                                                             .path = o.resume_path,
                                                             .settings = settings,
                                                             .progress_key = "steps_done",
                                                             .unit = "steps",
                                                             .limit = o.steps})
                     .done;
    const StateDict checkpoint = load(o.resume_path);
    model.load_state_dict(strip_prefix(checkpoint, kModelPrefix));
    const StateDict saved_average = strip_prefix(checkpoint, kEmaPrefix);
    const StateDict target = average_state();
    for (const auto& [name, tensor] : target) {
      const auto it = saved_average.find(name);
      EMBER_CHECK(it != saved_average.end() && it->second.shape() == tensor.shape(), "[", op, "] checkpoint ",
                  o.resume_path, " has no moving average for ", name);
      Tensor(tensor).copy_(it->second);
    }
    optimizer.load_state_dict(strip_prefix(checkpoint, kOptimizerPrefix));
  }
  auto save_checkpoint = [&](int64_t steps_done) {
    if (o.save_path.empty()) return;
    StateDict checkpoint = with_prefix(model.state_dict(), kModelPrefix);
    checkpoint.merge(with_prefix(average_state(), kEmaPrefix));
    checkpoint.merge(with_prefix(optimizer.state_dict(), kOptimizerPrefix));
    std::map<std::string, std::string> meta = settings;
    meta["steps_done"] = std::to_string(steps_done);
    save(checkpoint, o.save_path, meta);
  };

  const int64_t flops_per_step = 3 * model.flops_per_image(kImageSize, kImageSize) * o.batch_size;
  int64_t parameter_count = 0;
  for (const Tensor& p : parameters) parameter_count += p.numel();
  if (!o.json) {
    std::printf(
        "ember %s: U-Net %lld channels (x%s), %.2fM parameters, %.2f GFLOP per step (forward and backward), "
        "%s schedule over %lld steps, batch %lld, %lld steps, AdamW lr %g (warmup %lld, cosine to %g), "
        "class dropped %g, EMA %g, %lld training images, %d threads\n",
        op.c_str(), static_cast<long long>(o.channels), join(kMultipliers).c_str(),
        static_cast<double>(parameter_count) / 1e6, static_cast<double>(flops_per_step) / 1e9, o.schedule.c_str(),
        static_cast<long long>(o.timesteps), static_cast<long long>(o.batch_size), static_cast<long long>(o.steps),
        o.lr, static_cast<long long>(o.warmup), o.lr / 10, o.drop_class, o.ema, static_cast<long long>(n),
        get_num_threads());
  }
  const bool live = ::isatty(::fileno(stdout)) != 0 && !o.json;
  const int64_t per_epoch = n / o.batch_size;
  const int64_t last_step = o.stop_after > 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  int64_t order_epoch = -1;
  std::vector<int64_t> order;
  double train_seconds = 0, window_loss = 0, last_mean = NAN;
  int64_t window = 0;
  nlohmann::json curve = nlohmann::json::array();
  const auto start = Clock::now();
  model.train();
  for (int64_t step = first_step; step < last_step; ++step) {
    const auto step_start = Clock::now();
    const int64_t epoch = step / per_epoch, offset = (step % per_epoch) * o.batch_size;
    if (epoch != order_epoch) {
      order = epoch_order(n, o.seed, epoch);
      order_epoch = epoch;
    }
    const Tensor index =
        from_vector(std::vector<int64_t>(order.begin() + offset, order.begin() + offset + o.batch_size));
    manual_seed(step_seed(o.seed, step));  // the step's time steps, noise and dropped classes
    const Tensor loss = models::diffusion_loss(model, schedule, index_select(images, 0, index),
                                               index_select(labels, 0, index), o.drop_class);
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(parameters, 1.0);
    for (optim::ParamGroup& group : optimizer.param_groups())
      group.set_lr(warmup_cosine_lr(step, o.lr, o.warmup, o.steps));
    optimizer.step();
    {
      // The moving average, with the usual warmup of its decay (short runs are not held at the start).
      autograd::NoGradGuard no_grad;
      const double decay = std::min(o.ema, static_cast<double>(step + 1) / static_cast<double>(step + 10));
      for (size_t i = 0; i < parameters.size(); ++i) average[i].mul_(decay).add_(parameters[i].detach() * (1 - decay));
    }
    window_loss += loss.item<double>();
    ++window;
    train_seconds += seconds_since(step_start);
    const int64_t done = step + 1;
    const double rate = static_cast<double>((done - first_step) * o.batch_size) / train_seconds;
    if (done % 100 == 0 || done == last_step) {
      last_mean = window_loss / static_cast<double>(window);
      curve.push_back({{"step", done}, {"loss", last_mean}, {"seconds", seconds_since(start)}});
      if (!o.json) {
        std::printf("%sstep %5lld/%lld  loss %.4f  %6.1f images/s  %5.1f GFLOP/s  %6.1fs\n", live ? "\r" : "",
                    static_cast<long long>(done), static_cast<long long>(o.steps), last_mean, rate,
                    rate * static_cast<double>(flops_per_step / o.batch_size) / 1e9, seconds_since(start));
        std::fflush(stdout);
      }
      window_loss = 0;
      window = 0;
    }
    if (done % o.save_every == 0 && done < last_step) save_checkpoint(done);
  }
  save_checkpoint(last_step);
  const double rate =
      train_seconds > 0 ? static_cast<double>((last_step - first_step) * o.batch_size) / train_seconds : 0.0;
  if (o.json) {
    nlohmann::json result = {{"task", "diffusion"},
                             {"steps", last_step},
                             {"parameters", parameter_count},
                             {"flops_per_step", flops_per_step},
                             {"loss", std::isnan(last_mean) ? nlohmann::json() : nlohmann::json(last_mean)},
                             {"curve", curve},
                             {"train_seconds", train_seconds},
                             {"seconds", seconds_since(start)},
                             {"images_per_second", rate}};
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("trained %lld steps in %.1fs (%.1f images/s)%s%s\n", static_cast<long long>(last_step - first_step),
                train_seconds, rate, o.save_path.empty() ? "" : "; checkpoint ", o.save_path.c_str());
  }
  return 0;
}

namespace {

// The grid: one row per digit, `columns` samples each, 28x28 pixels with 2-pixel gray gaps.
GrayImage grid(const Tensor& pixels, int64_t rows, int64_t columns) {
  constexpr int64_t kGap = 2;
  constexpr uint8_t kGapValue = 96;
  GrayImage image;
  image.width = columns * (kImageSize + kGap) + kGap;
  image.height = rows * (kImageSize + kGap) + kGap;
  image.pixels.assign(static_cast<size_t>(image.width * image.height), kGapValue);
  const std::vector<float> values = pixels.to(kFloat32).contiguous().to_vector<float>();  // in [0, 1]
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const float* source = values.data() + (r * columns + c) * kImageSize * kImageSize;
      for (int64_t y = 0; y < kImageSize; ++y) {
        for (int64_t x = 0; x < kImageSize; ++x) {
          const int64_t at = (kGap + r * (kImageSize + kGap) + y) * image.width + kGap + c * (kImageSize + kGap) + x;
          image.pixels[static_cast<size_t>(at)] = static_cast<uint8_t>(source[y * kImageSize + x] * 255.0f + 0.5f);
        }
      }
    }
  }
  return image;
}

// "samples.png" -> "samples-s50-g3.png" when a run has several combinations.
std::string combination_path(const std::string& path, int64_t steps, double guidance, bool several) {
  if (!several) return path;
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-s%lld-g%g", static_cast<long long>(steps), guidance);
  return has_extension ? path.substr(0, dot) + suffix + path.substr(dot) : path + suffix;
}

}  // namespace

int run_sample_diffusion(const SampleDiffusionOptions& o) {
  const std::string op = "sample diffusion";
  EMBER_CHECK(o.per_class >= 1 && o.batch_size >= 1, "[", op, "] --per-class and --batch-size must be at least 1");
  EMBER_CHECK(!o.steps.empty() && !o.guidance.empty(), "[", op, "] --steps and --guidance need at least one value");
  if (o.threads > 0) set_num_threads(o.threads);
  const Checkpoint checkpoint = read_checkpoint(o.checkpoint, op);
  EMBER_CHECK(checkpoint.kind == "diffusion", "[", op, "] ", o.checkpoint, " holds ", checkpoint.describe(),
              ", not a checkpoint of `ember train diffusion`");
  const int64_t channels = setting_count(checkpoint, "channels", op);
  const int64_t groups = setting_count(checkpoint, "groups", op);
  const int64_t classes = setting_count(checkpoint, "classes", op);
  const int64_t size = setting_count(checkpoint, "image_size", op);
  const models::DiffusionSchedule schedule(setting_count(checkpoint, "timesteps", op),
                                           models::noise_schedule(checkpoint.settings.at("schedule")));
  models::UNet model({.channels = channels,
                      .multipliers = parse_list(checkpoint.settings.at("multipliers"), o.checkpoint, op),
                      .groups = groups,
                      .num_classes = classes});
  model.load_state_dict(o.raw_weights ? checkpoint.state : strip_prefix(load(o.checkpoint), kEmaPrefix));
  const models::DiffusionSampler sampler = models::diffusion_sampler(o.sampler);
  for (const int64_t steps : o.steps) (void)schedule.sampling_steps(steps);  // every count checked up front

  std::optional<MnistCheckpoint> classifier;
  double real_accuracy = NAN;
  if (!o.classifier.empty()) {
    classifier = load_mnist_checkpoint(o.classifier, op);
    const data::MNIST test_set(o.data_dir, data::Split::kTest);
    real_accuracy = mnist_accuracy(*classifier->model, test_set.images(), test_set.labels());
  }
  // 0 0 .. 1 1 .. (per_class of each), made by the library so that a count beyond memory is its
  // allocation error.
  EMBER_CHECK(o.per_class <= INT64_MAX / classes, "[", op, "] --per-class ", o.per_class, " samples of each of ",
              classes, " classes are more than a 64-bit count holds");
  const Tensor labels = arange(classes).unsqueeze(1).expand({classes, o.per_class}).reshape({-1});
  const int64_t total = labels.size(0);
  const bool several = o.steps.size() * o.guidance.size() > 1;
  if (!o.json) {
    std::printf("ember %s: %s (%s weights, %s schedule over %lld steps), %s, %lld samples per digit, %d threads\n",
                op.c_str(), o.checkpoint.c_str(), o.raw_weights ? "trained" : "averaged",
                checkpoint.settings.at("schedule").c_str(), static_cast<long long>(schedule.timesteps()),
                o.sampler.c_str(), static_cast<long long>(o.per_class), get_num_threads());
    if (classifier) {
      std::printf("classifier %s: %.2f%% on the real test digits\n", o.classifier.c_str(), 100 * real_accuracy);
    }
    std::printf("%6s %9s %9s %9s %10s  %s\n", "steps", "guidance", "accuracy", "seconds", "images/s", "grid");
  }
  nlohmann::json results = nlohmann::json::array();
  for (const int64_t steps : o.steps) {
    for (const double guidance : o.guidance) {
      manual_seed(o.seed);
      const models::SampleOptions options{.sampler = sampler, .steps = steps, .guidance = guidance, .eta = o.eta};
      const auto start = Clock::now();
      std::vector<Tensor> parts;
      for (int64_t first = 0; first < total; first += o.batch_size) {
        const int64_t count = std::min(o.batch_size, total - first);
        parts.push_back(models::sample(model, schedule, labels.narrow(0, first, count), size, size, options));
      }
      const double seconds = seconds_since(start);
      const Tensor pixels = clamp((cat(parts, 0) + 1.0) * 0.5, Scalar(0.0), Scalar(1.0));  // [0, 1]
      nlohmann::json result = {{"sampler", o.sampler}, {"steps", steps},   {"guidance", guidance},
                               {"eta", o.eta},         {"samples", total}, {"seconds", seconds}};
      double accuracy = NAN;
      if (classifier) {
        autograd::NoGradGuard no_grad;
        classifier->model->eval();
        const Tensor predicted = (*classifier->model)((pixels - data::MNIST::kMean) / data::MNIST::kStd).argmax(1);
        const Tensor right = predicted.eq(labels).to(kFloat64);
        accuracy = right.mean().item<double>();
        const std::vector<double> per_class = right.view({classes, o.per_class}).mean({1}).to_vector<double>();
        result["accuracy"] = accuracy;
        result["per_class_accuracy"] = per_class;
      }
      std::string path;
      if (!o.out.empty()) {
        path = combination_path(o.out, steps, guidance, several);
        save_bytes(path, encode_png(grid(pixels, classes, o.per_class), op), op);
        result["png"] = path;
      }
      results.push_back(result);
      if (!o.json) {
        char accuracy_text[16] = "-";
        if (classifier) std::snprintf(accuracy_text, sizeof accuracy_text, "%.1f%%", 100 * accuracy);
        std::printf("%6lld %9g %9s %9.1f %10.1f  %s\n", static_cast<long long>(steps), guidance, accuracy_text, seconds,
                    static_cast<double>(total) / seconds, path.c_str());
        std::fflush(stdout);
      }
    }
  }
  if (o.json) {
    nlohmann::json out = {{"task", "diffusion_samples"},
                          {"checkpoint", o.checkpoint},
                          {"weights", o.raw_weights ? "trained" : "averaged"},
                          {"results", results}};
    if (classifier) out["classifier_test_accuracy"] = real_accuracy;
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace ember::cli

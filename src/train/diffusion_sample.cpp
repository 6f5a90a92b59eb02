// Sampling a diffusion model (ember/train/tasks.h): DDPM or DDIM for every combination of step
// counts and guidance scales, judged by an MNIST classifier when one is given, and the samples as
// one grid image.
#include <chrono>

#include "ember/autograd.h"
#include "ember/data.h"
#include "ember/ops.h"
#include "ember/train/tasks.h"

namespace ember::train {

void sample_diffusion(const LoadedModel& loaded, const DiffusionSampleOptions& options, nn::Module* classifier,
                      const std::function<void(const DiffusionSamples&)>& on_samples) {
  const std::string op = "sample diffusion";
  EMBER_CHECK(options.per_class >= 1 && options.batch_size >= 1, "[", op,
              "] --per-class and --batch-size must be at least 1");
  EMBER_CHECK(!options.steps.empty() && !options.guidance.empty(), "[", op,
              "] --steps and --guidance need at least one value");
  EMBER_CHECK(loaded.kind == "diffusion" && loaded.schedule, "[", op, "] ", loaded.source.path, " holds ",
              loaded.source.describe(), ", not a checkpoint of `ember train diffusion`");
  auto& model = loaded.as<models::UNet>();
  const models::DiffusionSchedule& schedule = *loaded.schedule;
  const int64_t size = loaded.source.count("image_size", op);
  const int64_t classes = model.config.num_classes;
  const models::DiffusionSampler sampler = models::diffusion_sampler(options.sampler);
  for (const int64_t steps : options.steps) (void)schedule.sampling_steps(steps);  // every count checked up front
  // 0 0 .. 1 1 .. (per_class of each), made by the library so that a count beyond memory is its
  // allocation error.
  EMBER_CHECK(options.per_class <= INT64_MAX / classes, "[", op, "] --per-class ", options.per_class,
              " samples of each of ", classes, " classes are more than a 64-bit count holds");
  const Tensor labels = arange(classes).unsqueeze(1).expand({classes, options.per_class}).reshape({-1});
  const int64_t total = labels.size(0);
  for (const int64_t steps : options.steps) {
    for (const double guidance : options.guidance) {
      manual_seed(options.seed);
      const models::SampleOptions sample_options{
          .sampler = sampler, .steps = steps, .guidance = guidance, .eta = options.eta};
      const auto start = std::chrono::steady_clock::now();
      std::vector<Tensor> parts;
      for (int64_t first = 0; first < total; first += options.batch_size) {
        const int64_t count = std::min(options.batch_size, total - first);
        parts.push_back(models::sample(model, schedule, labels.narrow(0, first, count), size, size, sample_options));
      }
      DiffusionSamples result{.steps = steps, .guidance = guidance};
      result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      result.pixels = clamp((cat(parts, 0) + 1.0) * 0.5, Scalar(0.0), Scalar(1.0));  // [0, 1]
      result.labels = labels;
      if (classifier != nullptr) {
        autograd::NoGradGuard no_grad;
        classifier->eval();
        const Tensor predicted = (*classifier)((result.pixels - data::MNIST::kMean) / data::MNIST::kStd).argmax(1);
        const Tensor right = predicted.eq(labels).to(kFloat64);
        result.accuracy = right.mean().item<double>();
        result.per_class_accuracy = right.view({classes, options.per_class}).mean({1}).to_vector<double>();
      }
      on_samples(result);
    }
  }
}

GrayImage image_grid(const Tensor& pixels, int64_t rows, int64_t columns) {
  constexpr int64_t kGap = 2;
  constexpr uint8_t kGapValue = 96;
  const int64_t height = pixels.size(2), width = pixels.size(3);
  GrayImage image;
  image.width = columns * (width + kGap) + kGap;
  image.height = rows * (height + kGap) + kGap;
  image.pixels.assign(static_cast<size_t>(image.width * image.height), kGapValue);
  const std::vector<float> values = pixels.to(kFloat32).contiguous().to_vector<float>();  // in [0, 1]
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const float* source = values.data() + (r * columns + c) * height * width;
      for (int64_t y = 0; y < height; ++y) {
        for (int64_t x = 0; x < width; ++x) {
          const int64_t at = (kGap + r * (height + kGap) + y) * image.width + kGap + c * (width + kGap) + x;
          image.pixels[static_cast<size_t>(at)] = static_cast<uint8_t>(source[y * width + x] * 255.0f + 0.5f);
        }
      }
    }
  }
  return image;
}

}  // namespace ember::train

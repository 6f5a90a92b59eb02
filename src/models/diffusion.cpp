// The class-conditional diffusion model (include/ember/models/diffusion.h): the noise schedules, the
// U-Net, the training loss and the DDPM and DDIM samplers with classifier-free guidance.
#include "ember/models/diffusion.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/error.h"
#include "ember/ops.h"

namespace ember::models {

// --- the forward process ----------------------------------------------------------------------------

NoiseSchedule noise_schedule(std::string_view name) {
  if (name == "linear") return NoiseSchedule::kLinear;
  if (name == "cosine") return NoiseSchedule::kCosine;
  EMBER_FAIL("[diffusion] unknown noise schedule \"", name, "\": expected linear or cosine");
}

std::string_view noise_schedule_name(NoiseSchedule schedule) {
  return schedule == NoiseSchedule::kLinear ? "linear" : "cosine";
}

DiffusionSchedule::DiffusionSchedule(int64_t timesteps, NoiseSchedule kind) : kind_(kind) {
  EMBER_CHECK(timesteps >= 1 && timesteps <= 100000,
              "[diffusion] the number of time steps must be in [1, 100000], got ", timesteps);
  const auto n = static_cast<double>(timesteps);
  betas_.resize(static_cast<size_t>(timesteps));
  for (int64_t i = 0; i < timesteps; ++i) {
    const auto k = static_cast<double>(i);
    if (kind == NoiseSchedule::kLinear) {
      // Ho et al.'s 1e-4 .. 0.02 for T = 1000, scaled so that any T covers the same noise (capped
      // at 0.999 as the cosine schedule's, which changes only T < 21).
      const double scale = 1000.0 / n, first = scale * 1e-4, last = scale * 0.02;
      betas_[i] = std::min(timesteps == 1 ? first : first + (last - first) * k / (n - 1), 0.999);
    } else {
      auto alpha_bar = [](double s) {
        const double c = std::cos((s + 0.008) / 1.008 * M_PI / 2);
        return c * c;
      };
      betas_[i] = std::min(1.0 - alpha_bar((k + 1) / n) / alpha_bar(k / n), 0.999);
    }
  }
  alpha_bars_.resize(betas_.size());
  double product = 1.0;
  for (size_t i = 0; i < betas_.size(); ++i) alpha_bars_[i] = product *= 1.0 - betas_[i];
}

namespace {

// sqrt(f(alpha_bar_t)) per example, shaped (B, 1, ..., 1) to broadcast over x of `dim` dims.
Tensor per_example(const std::vector<double>& alpha_bars, double (*f)(double), const Tensor& t, int64_t dim,
                   DType dtype) {
  std::vector<double> values(alpha_bars.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sqrt(f(alpha_bars[i]));
  Shape shape(static_cast<int>(dim), 1);
  shape[0] = t.size(0);
  return index_select(from_vector(values).to(t.device()), 0, t).to(dtype).view(shape);
}

void check_steps(const Tensor& t, int64_t batch, int64_t timesteps, const char* what) {
  EMBER_CHECK(t.dim() == 1 && t.size(0) == batch && t.dtype() == kInt64, "[diffusion] expected ", what,
              " as int64 of shape (", batch, "), got ", t.dtype(), " ", t.shape());
  if (batch == 0) return;
  const int64_t low = t.min().item<int64_t>(), high = t.max().item<int64_t>();
  EMBER_CHECK(low >= 0 && high < timesteps, "[diffusion] ", what, " must be in [0, ", timesteps, "), got values in [",
              low, ", ", high, "]");
}

}  // namespace

Tensor DiffusionSchedule::add_noise(const Tensor& x0, const Tensor& t, const Tensor& noise) const {
  EMBER_CHECK(x0.dim() >= 1 && noise.shape() == x0.shape(), "[diffusion] the noise ", noise.shape(),
              " must have the images' shape ", x0.shape());
  check_steps(t, x0.size(0), timesteps(), "time steps");
  const Tensor keep = per_example(
      alpha_bars_, [](double a) { return a; }, t, x0.dim(), x0.dtype());
  const Tensor add = per_example(
      alpha_bars_, [](double a) { return 1.0 - a; }, t, x0.dim(), x0.dtype());
  return x0 * keep + noise * add;
}

std::vector<int64_t> DiffusionSchedule::sampling_steps(int64_t steps) const {
  const int64_t n = timesteps();
  EMBER_CHECK(steps >= 1 && steps <= n, "[diffusion] the number of sampling steps must be in [1, ", n, "], got ",
              steps);
  std::vector<int64_t> visited(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    visited[i] = steps == 1 ? n - 1
                            : std::llround(static_cast<double>(n - 1) * static_cast<double>(steps - 1 - i) /
                                           static_cast<double>(steps - 1));
  }
  return visited;
}

// --- the noise predictor ----------------------------------------------------------------------------

Tensor timestep_embedding(const Tensor& t, int64_t dim) {
  EMBER_CHECK(dim >= 2 && dim % 2 == 0, "[timestep_embedding] dim must be even and at least 2, got ", dim);
  EMBER_CHECK(t.dim() == 1, "[timestep_embedding] expected time steps of shape (B), got ", t.shape());
  const int64_t half = dim / 2;
  const Tensor freqs = exp(arange(0, half, 1, TensorOptions(t.device())).to(kFloat32) *
                           (-std::log(10000.0) / static_cast<double>(half)));
  const Tensor args = t.to(kFloat32).unsqueeze(1) * freqs.unsqueeze(0);
  return cat({sin(args), cos(args)}, 1);
}

namespace {

void zero_(const std::shared_ptr<nn::Conv2d>& conv) {
  autograd::NoGradGuard no_grad;
  conv->weight.zero_();
  if (conv->bias.defined()) conv->bias.zero_();
}

}  // namespace

ResBlock::ResBlock(int64_t in_channels, int64_t out_channels, int64_t embedding_dim, int64_t groups) {
  norm1 = register_module("norm1", std::make_shared<nn::GroupNorm>(groups, in_channels));
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in_channels, out_channels, 3, 1, 1));
  emb_proj = register_module("emb_proj", std::make_shared<nn::Linear>(embedding_dim, out_channels));
  norm2 = register_module("norm2", std::make_shared<nn::GroupNorm>(groups, out_channels));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out_channels, out_channels, 3, 1, 1));
  if (in_channels != out_channels) {
    skip = register_module("skip", std::make_shared<nn::Conv2d>(in_channels, out_channels, 1));
  }
  zero_(conv2);
}

Tensor ResBlock::forward(const Tensor& x, const Tensor& emb) {
  Tensor h = (*conv1)(silu((*norm1)(x)));
  const Tensor shift = (*emb_proj)(silu(emb));  // (B, out_channels)
  h = h + shift.view({shift.size(0), shift.size(1), 1, 1});
  h = (*conv2)(silu((*norm2)(h)));
  return (skip ? (*skip)(x) : x) + h;
}

Tensor ResBlock::forward(const Tensor&) {
  EMBER_FAIL("[ResBlock] needs the time and class embedding: call forward(x, emb)");
}

namespace {

void check_config(const UNetConfig& c) {
  EMBER_CHECK(c.image_channels > 0 && c.channels > 0 && c.groups > 0 && c.num_classes > 0, "[UNet] image_channels, ",
              "channels, groups and num_classes must be positive, got ", c.image_channels, ", ", c.channels, ", ",
              c.groups, ", ", c.num_classes);
  EMBER_CHECK(!c.multipliers.empty() && c.multipliers.size() <= 8, "[UNet] expected 1 to 8 width multipliers, got ",
              c.multipliers.size());
  for (const int64_t m : c.multipliers) {
    EMBER_CHECK(m > 0 && (c.channels * m) % c.groups == 0, "[UNet] every width (channels ", c.channels,
                " x multiplier ", m, ") must be positive and divide into ", c.groups, " groups");
  }
}

int64_t conv_flops(const nn::Conv2d& conv, int64_t out_height, int64_t out_width) {
  return 2 * conv.out_channels * conv.in_channels / conv.groups * conv.kernel_size.h * conv.kernel_size.w * out_height *
         out_width;
}

}  // namespace

UNet::UNet(const UNetConfig& c) : config((check_config(c), c)) {
  const int64_t emb = c.embedding_dim(), levels = static_cast<int64_t>(c.multipliers.size());
  auto width = [&](int64_t level) { return c.channels * c.multipliers[static_cast<size_t>(level)]; };
  time_fc1 = register_module("time_fc1", std::make_shared<nn::Linear>(c.channels, emb));
  time_fc2 = register_module("time_fc2", std::make_shared<nn::Linear>(emb, emb));
  class_embedding = register_module("class_embedding", std::make_shared<nn::Embedding>(c.num_classes + 1, emb));
  conv_in = register_module("conv_in", std::make_shared<nn::Conv2d>(c.image_channels, width(0), 3, 1, 1));
  down = register_module("down", std::make_shared<nn::ModuleList>());
  downsample = register_module("downsample", std::make_shared<nn::ModuleList>());
  int64_t current = width(0);
  for (int64_t level = 0; level < levels; ++level) {
    down->push_back(std::make_shared<ResBlock>(current, width(level), emb, c.groups));
    current = width(level);
    if (level + 1 < levels) downsample->push_back(std::make_shared<nn::Conv2d>(current, current, 3, 2, 1));
  }
  mid = register_module("mid", std::make_shared<ResBlock>(current, current, emb, c.groups));
  // up.0 and upsample.0 are the lowest resolution's.
  up = register_module("up", std::make_shared<nn::ModuleList>());
  upsample = register_module("upsample", std::make_shared<nn::ModuleList>());
  for (int64_t level = levels - 1; level >= 0; --level) {
    up->push_back(std::make_shared<ResBlock>(current + width(level), width(level), emb, c.groups));
    current = width(level);
    if (level > 0) upsample->push_back(std::make_shared<nn::Conv2d>(current, width(level - 1), 3, 1, 1));
    if (level > 0) current = width(level - 1);
  }
  norm_out = register_module("norm_out", std::make_shared<nn::GroupNorm>(c.groups, current));
  conv_out = register_module("conv_out", std::make_shared<nn::Conv2d>(current, c.image_channels, 3, 1, 1));
  zero_(conv_out);
}

Tensor UNet::forward(const Tensor& x, const Tensor& t, const Tensor& labels) {
  const int64_t levels = static_cast<int64_t>(config.multipliers.size()), factor = int64_t{1} << (levels - 1);
  EMBER_CHECK(x.dim() == 4 && x.size(1) == config.image_channels && x.size(2) > 0 && x.size(3) > 0 &&
                  x.size(2) % factor == 0 && x.size(3) % factor == 0,
              "[UNet] expected images (B, ", config.image_channels, ", H, W) with H and W positive multiples of ",
              factor, ", got ", x.shape());
  const int64_t batch = x.size(0);
  EMBER_CHECK(t.dim() == 1 && t.size(0) == batch, "[UNet] expected time steps of shape (", batch, "), got ", t.shape());
  EMBER_CHECK(labels.dim() == 1 && labels.size(0) == batch && labels.dtype() == kInt64, "[UNet] expected int64 ",
              "labels of shape (", batch, "), got ", labels.dtype(), " ", labels.shape());
  if (batch > 0) {
    const int64_t low = labels.min().item<int64_t>(), high = labels.max().item<int64_t>();
    EMBER_CHECK(low >= 0 && high <= config.num_classes, "[UNet] labels must be in [0, ", config.num_classes, "] (",
                config.num_classes, ": no class), got values in [", low, ", ", high, "]");
  }
  const Tensor emb =
      (*time_fc2)(silu((*time_fc1)(timestep_embedding(t, config.channels).to(x.dtype())))) + (*class_embedding)(labels);
  Tensor h = (*conv_in)(x);
  std::vector<Tensor> skips;
  for (int64_t level = 0; level < levels; ++level) {
    h = down->at<ResBlock>(level)->forward(h, emb);
    skips.push_back(h);
    if (level + 1 < levels) h = (*(*downsample)[level])(h);
  }
  h = mid->forward(h, emb);
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t level = levels - 1 - i;
    h = up->at<ResBlock>(i)->forward(cat({h, skips[static_cast<size_t>(level)]}, 1), emb);
    if (level > 0) h = (*(*upsample)[i])(interpolate(h, std::nullopt, std::vector<double>{2.0, 2.0}, "nearest"));
  }
  return (*conv_out)(silu((*norm_out)(h)));
}

Tensor UNet::forward(const Tensor&) {
  EMBER_FAIL("[UNet] needs the time steps and the labels: call forward(x, t, labels)");
}

int64_t UNet::flops_per_image(int64_t height, int64_t width) const {
  const int64_t levels = static_cast<int64_t>(config.multipliers.size()), emb = config.embedding_dim();
  int64_t flops = 2 * (config.channels * emb + emb * emb);  // the time MLP
  auto block = [&](const ResBlock& b, int64_t h, int64_t w) {
    int64_t f = conv_flops(*b.conv1, h, w) + conv_flops(*b.conv2, h, w) + 2 * emb * b.conv1->out_channels;
    if (b.skip) f += conv_flops(*b.skip, h, w);
    return f;
  };
  flops += conv_flops(*conv_in, height, width) + conv_flops(*conv_out, height, width);
  int64_t h = height, w = width;
  for (int64_t level = 0; level < levels; ++level) {
    flops += block(*down->at<ResBlock>(level), h, w);
    if (level + 1 < levels) {
      h = (h + 1) / 2;
      w = (w + 1) / 2;
      flops += conv_flops(*downsample->at<nn::Conv2d>(level), h, w);
    }
  }
  flops += block(*mid, h, w);
  for (int64_t i = 0; i < levels; ++i) {
    flops += block(*up->at<ResBlock>(i), h, w);
    if (i + 1 < levels) {
      h *= 2;
      w *= 2;
      flops += conv_flops(*upsample->at<nn::Conv2d>(i), h, w);
    }
  }
  return flops;
}

Tensor diffusion_loss(UNet& model, const DiffusionSchedule& schedule, const Tensor& x0, const Tensor& t,
                      const Tensor& noise, const Tensor& labels) {
  return mse_loss(model.forward(schedule.add_noise(x0, t, noise), t, labels), noise);
}

Tensor diffusion_loss(UNet& model, const DiffusionSchedule& schedule, const Tensor& x0, const Tensor& labels,
                      double drop_class) {
  EMBER_CHECK(drop_class >= 0 && drop_class <= 1, "[diffusion] the class drop probability must be in [0, 1], got ",
              drop_class);
  EMBER_CHECK(x0.dim() == 4, "[diffusion] expected images (B, C, H, W), got ", x0.shape());
  const int64_t batch = x0.size(0);
  // Drawn where the images are: the CUDA draws are the CPU's numbers for the same key.
  const TensorOptions on(x0.device());
  const Tensor t = randint(0, schedule.timesteps(), {batch}, on);
  const Tensor noise = randn_like(x0);
  const Tensor dropped = rand({batch}, on) < Scalar(drop_class);
  const Tensor none = full({batch}, Scalar(model.config.num_classes), on.with_dtype(kInt64));
  return diffusion_loss(model, schedule, x0, t, noise, where(dropped, none, labels));
}

// --- sampling ---------------------------------------------------------------------------------------

DiffusionSampler diffusion_sampler(std::string_view name) {
  if (name == "ddpm") return DiffusionSampler::kDdpm;
  if (name == "ddim") return DiffusionSampler::kDdim;
  EMBER_FAIL("[diffusion] unknown sampler \"", name, "\": expected ddpm or ddim");
}

std::string_view diffusion_sampler_name(DiffusionSampler sampler) {
  return sampler == DiffusionSampler::kDdpm ? "ddpm" : "ddim";
}

Tensor guided_noise(UNet& model, const Tensor& x_t, int64_t t, const Tensor& labels, double guidance) {
  const int64_t batch = x_t.size(0);
  const TensorOptions on = TensorOptions(x_t.device()).with_dtype(kInt64);  // the time steps and labels beside x_t
  if (guidance == 1.0) return model.forward(x_t, full({batch}, Scalar(t), on), labels);
  const Tensor none = full({batch}, Scalar(model.config.num_classes), on);
  const Tensor eps = model.forward(cat({x_t, x_t}, 0), full({2 * batch}, Scalar(t), on), cat({labels, none}, 0));
  const Tensor conditional = eps.narrow(0, 0, batch), unconditional = eps.narrow(0, batch, batch);
  return unconditional + (conditional - unconditional) * guidance;
}

// Note [the samplers]: both first estimate the clean image from the noise prediction,
//   x0 = (x_t - sqrt(1 - a_t) eps) / sqrt(a_t)    (a = alpha_bar),
// clamp it to the data's range [-1, 1] (the noise estimate is then recomputed from the clamped x0,
// as improved-diffusion does), and step from t to an earlier t' with a' = alpha_bar_t' (1 at the
// end). Over a subsequence of the steps, the step's own beta is b = 1 - a_t / a'.
// - DDPM (ancestral): x_t' ~ N(mean, var) with the posterior q(x_t' | x_t, x0):
//     mean = sqrt(a') b / (1 - a_t) x0 + sqrt(1 - b) (1 - a') / (1 - a_t) x_t,
//     var = b (1 - a') / (1 - a_t).
// - DDIM: x_t' = sqrt(a') x0 + sqrt(1 - a' - s^2) eps + s z with
//     s = eta sqrt((1 - a') / (1 - a_t)) sqrt(b);
//   eta = 0 is deterministic, eta = 1 has the posterior's variance.
Tensor denoise_step(const DiffusionSchedule& schedule, const Tensor& x_t, const Tensor& eps, int64_t t, int64_t t_prev,
                    const SampleOptions& options, const Tensor& noise) {
  EMBER_CHECK(t >= 0 && t < schedule.timesteps() && t_prev >= -1 && t_prev < t, "[diffusion] cannot step from ", t,
              " to ", t_prev, " with ", schedule.timesteps(), " time steps");
  EMBER_CHECK(eps.shape() == x_t.shape(), "[diffusion] the noise prediction ", eps.shape(), " must have the images' ",
              "shape ", x_t.shape());
  const double a = schedule.alpha_bars()[static_cast<size_t>(t)];
  const double a_prev = t_prev >= 0 ? schedule.alpha_bars()[static_cast<size_t>(t_prev)] : 1.0;
  Tensor x0 = (x_t - eps * std::sqrt(1 - a)) / std::sqrt(a);
  Tensor e = eps;
  if (options.clip) {
    x0 = clamp(x0, Scalar(-1.0), Scalar(1.0));
    e = (x_t - x0 * std::sqrt(a)) / std::sqrt(1 - a);
  }
  if (t_prev < 0) return x0;
  const double b = 1 - a / a_prev;
  if (options.sampler == DiffusionSampler::kDdpm) {
    const Tensor mean = x0 * (std::sqrt(a_prev) * b / (1 - a)) + x_t * (std::sqrt(1 - b) * (1 - a_prev) / (1 - a));
    return mean + noise * std::sqrt(b * (1 - a_prev) / (1 - a));
  }
  const double s = options.eta * std::sqrt((1 - a_prev) / (1 - a) * b);
  Tensor next = x0 * std::sqrt(a_prev) + e * std::sqrt(std::max(1 - a_prev - s * s, 0.0));
  if (s > 0) next = next + noise * s;
  return next;
}

Tensor sample(UNet& model, const DiffusionSchedule& schedule, const Tensor& labels, int64_t height, int64_t width,
              const SampleOptions& options, const std::function<void(int64_t, int64_t)>& on_step) {
  EMBER_CHECK(labels.dim() == 1 && labels.dtype() == kInt64, "[diffusion] expected int64 labels of shape (B), got ",
              labels.dtype(), " ", labels.shape());
  if (labels.numel() > 0) {
    const int64_t low = labels.min().item<int64_t>(), high = labels.max().item<int64_t>();
    EMBER_CHECK(low >= 0 && high < model.config.num_classes, "[diffusion] labels must be classes in [0, ",
                model.config.num_classes, "), got values in [", low, ", ", high, "]");
  }
  EMBER_CHECK(std::isfinite(options.guidance), "[diffusion] the guidance scale must be finite, got ", options.guidance);
  EMBER_CHECK(options.eta >= 0 && options.eta <= 1, "[diffusion] eta must be in [0, 1], got ", options.eta);
  const std::vector<int64_t> steps = schedule.sampling_steps(options.steps);
  EMBER_CHECK(height > 0 && width > 0, "[diffusion] the image size must be positive, got ", height, "x", width);
  // Sampling runs where the model's weights are; the images come back on the labels' device.
  const std::vector<Tensor> parameters = model.parameters();
  const Device device = parameters.empty() ? labels.device() : parameters.front().device();
  if (labels.size(0) == 0) {
    return zeros({0, model.config.image_channels, height, width}, TensorOptions(labels.device()));
  }
  const bool was_training = model.is_training();
  model.eval();
  autograd::NoGradGuard no_grad;
  const Tensor classes = labels.to(device);
  Tensor x = randn({labels.size(0), model.config.image_channels, height, width}, TensorOptions(device));
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t t = steps[i], t_prev = i + 1 < steps.size() ? steps[i + 1] : -1;
    const Tensor eps = guided_noise(model, x, t, classes, options.guidance);
    const bool noisy = t_prev >= 0 && (options.sampler == DiffusionSampler::kDdpm || options.eta > 0);
    x = denoise_step(schedule, x, eps, t, t_prev, options, noisy ? randn_like(x) : Tensor());
    if (on_step) on_step(static_cast<int64_t>(i) + 1, static_cast<int64_t>(steps.size()));
  }
  model.train(was_training);
  return x.to(labels.device());
}

}  // namespace ember::models

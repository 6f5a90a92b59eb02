// A class-conditional denoising diffusion model (Ho et al. 2020, "Denoising Diffusion Probabilistic
// Models"): a noise schedule, a small U-Net that predicts the noise added to an image from the
// noisy image, the time step and the class, the training loss, and two samplers: the ancestral one
// (DDPM) and DDIM's (Song et al. 2021), both over any subsequence of the time steps, with
// classifier-free guidance (Ho & Salimans 2022): the class is dropped from a fraction of training
// examples, and sampling mixes the conditional and unconditional predictions by a guidance scale.
//
//   models::DiffusionSchedule schedule(1000, models::NoiseSchedule::kCosine);
//   models::UNet unet({.channels = 32});
//   Tensor loss = models::diffusion_loss(unet, schedule, images, labels, /*drop_class=*/0.1);
//   Tensor samples = models::sample(unet, schedule, labels, {.sampler = models::DiffusionSampler::kDdim, .steps = 50});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ember/nn.h"

namespace ember::models {

// --- the forward process ----------------------------------------------------------------------------

enum class NoiseSchedule {
  kLinear,  // Ho et al.: beta from 1e-4 to 0.02 over the steps, scaled by 1000 / T (so any T has the same
            // ends) and capped at 0.999
  kCosine,  // Nichol & Dhariwal 2021: alpha_bar(t) = cos((t / T + 0.008) / 1.008 * pi / 2)^2, beta at most 0.999
};
NoiseSchedule noise_schedule(std::string_view name);  // "linear" or "cosine"; else an ember::Error
std::string_view noise_schedule_name(NoiseSchedule schedule);

// The schedule's betas and their running products alpha_bar_t = prod_{s <= t} (1 - beta_s), t in
// [0, T), in float64. x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) noise.
class DiffusionSchedule {
 public:
  DiffusionSchedule(int64_t timesteps, NoiseSchedule kind);
  int64_t timesteps() const { return static_cast<int64_t>(betas_.size()); }
  NoiseSchedule kind() const { return kind_; }
  const std::vector<double>& betas() const { return betas_; }
  const std::vector<double>& alpha_bars() const { return alpha_bars_; }
  // x_t for images x0 (B, ...), steps t (B) int64 in [0, T) and noise shaped as x0.
  Tensor add_noise(const Tensor& x0, const Tensor& t, const Tensor& noise) const;
  // `steps` time steps from T - 1 down to 0, evenly spaced (rounded): the steps a sampler visits.
  std::vector<int64_t> sampling_steps(int64_t steps) const;

 private:
  NoiseSchedule kind_;
  std::vector<double> betas_, alpha_bars_;
};

// --- the noise predictor ----------------------------------------------------------------------------

struct UNetConfig {
  int64_t image_channels = 1;
  int64_t channels = 32;                      // the width at full resolution
  std::vector<int64_t> multipliers{1, 2, 2};  // the width of each resolution, times `channels`; halved between
  int64_t groups = 8;                         // GroupNorm's groups (dividing every width)
  int64_t num_classes = 10;                   // the class num_classes is "no class" (classifier-free guidance)
  bool operator==(const UNetConfig&) const = default;

  int64_t embedding_dim() const { return 4 * channels; }
};

// The time step's sinusoidal embedding (Vaswani et al.; DDPM's): for t (B) and an even dim,
// [sin(t w_0), ..., sin(t w_{h-1}), cos(t w_0), ..., cos(t w_{h-1})] with w_i = 10000^(-i / h), h = dim / 2.
Tensor timestep_embedding(const Tensor& t, int64_t dim);

// A residual block: h = conv1(silu(norm1(x))) + emb_proj(silu(emb)) per channel;
// out = skip(x) + conv2(silu(norm2(h))), where skip is a 1x1 convolution when the width changes.
class ResBlock : public nn::Module {
 public:
  ResBlock(int64_t in_channels, int64_t out_channels, int64_t embedding_dim, int64_t groups);
  Tensor forward(const Tensor& x, const Tensor& emb);
  Tensor forward(const Tensor& x) override;  // an error: a ResBlock needs the embedding
  std::string name() const override { return "ResBlock"; }

  std::shared_ptr<nn::GroupNorm> norm1, norm2;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> emb_proj;
  std::shared_ptr<nn::Conv2d> skip;  // null when in_channels == out_channels
};

// The U-Net: conv_in; per resolution a ResBlock (kept for the skip connection) then a stride-2
// convolution down; a ResBlock in the middle; per resolution back up a ResBlock over the
// concatenation with the skip, then nearest 2x upsampling and a convolution; GroupNorm, SiLU and
// conv_out. The time embedding (sinusoidal, then Linear, SiLU, Linear) plus the class embedding
// feeds every ResBlock. Images' height and width must divide by 2^(levels - 1).
class UNet : public nn::Module {
 public:
  // PyTorch's default initialization, with conv_out and every ResBlock's conv2 zero (so each block
  // starts as its skip path and the first prediction is 0). Throws on a bad config.
  explicit UNet(const UNetConfig& config);
  // x (B, C, H, W) noisy images, t (B) time steps (int64 or float), labels (B) int64 in
  // [0, num_classes] -> the predicted noise (B, C, H, W).
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& labels);
  Tensor forward(const Tensor& x) override;  // an error: the U-Net needs t and labels
  std::string name() const override { return "UNet"; }
  // Multiply-adds times 2 of one forward pass over one image of size (height, width).
  int64_t flops_per_image(int64_t height, int64_t width) const;

  const UNetConfig config;
  std::shared_ptr<nn::Linear> time_fc1, time_fc2;
  std::shared_ptr<nn::Embedding> class_embedding;  // num_classes + 1 rows
  std::shared_ptr<nn::Conv2d> conv_in, conv_out;
  std::shared_ptr<nn::ModuleList> down, downsample, up, upsample;  // ResBlock / Conv2d per resolution
  std::shared_ptr<ResBlock> mid;
  std::shared_ptr<nn::GroupNorm> norm_out;
};

// The mean squared error between the noise and the model's prediction of it, for clean images x0
// (B, C, H, W) noised at time steps t (B) int64 with `noise`, and labels (B) int64 (num_classes for
// "no class"). The training loss with its randomness spelled out.
Tensor diffusion_loss(UNet& model, const DiffusionSchedule& schedule, const Tensor& x0, const Tensor& t,
                      const Tensor& noise, const Tensor& labels);
// The same with t uniform in [0, T), standard normal noise and each label replaced by "no class"
// with probability drop_class, drawn from ember's generator.
Tensor diffusion_loss(UNet& model, const DiffusionSchedule& schedule, const Tensor& x0, const Tensor& labels,
                      double drop_class);

// --- sampling ---------------------------------------------------------------------------------------

enum class DiffusionSampler {
  kDdpm,  // ancestral: x_prev ~ q(x_prev | x_t, x0_hat), the posterior's variance
  kDdim,  // deterministic for eta = 0; eta = 1 has the ancestral sampler's variance
};
DiffusionSampler diffusion_sampler(std::string_view name);  // "ddpm" or "ddim"; else an ember::Error
std::string_view diffusion_sampler_name(DiffusionSampler sampler);

struct SampleOptions {
  DiffusionSampler sampler = DiffusionSampler::kDdim;
  int64_t steps = 50;     // time steps visited, in [1, T]; T with kDdpm is Ho et al.'s sampler
  double guidance = 3.0;  // eps = eps_uncond + guidance (eps_cond - eps_uncond); 1: conditional only
  double eta = 0.0;       // DDIM's noise scale
  bool clip = true;       // clamp the predicted clean image to [-1, 1]
};

// The guided noise prediction at time step t for x_t (B, C, H, W) and labels (B): one batched
// forward pass over the conditional and the unconditional inputs (just the conditional one when
// guidance is 1).
Tensor guided_noise(UNet& model, const Tensor& x_t, int64_t t, const Tensor& labels, double guidance);

// One sampler step from time step t to t_prev (t_prev < t; -1 ends at the clean image) given the
// noise prediction eps; `noise` (shaped as x_t) is used only where the step adds noise (kDdpm, or
// kDdim with eta > 0, and t_prev >= 0).
Tensor denoise_step(const DiffusionSchedule& schedule, const Tensor& x_t, const Tensor& eps, int64_t t, int64_t t_prev,
                    const SampleOptions& options, const Tensor& noise);

// Images (B, C, H, W) in about [-1, 1] for labels (B) int64 in [0, num_classes), drawn in evaluation
// mode without gradients from standard normal noise of (B, image_channels, height, width). The
// noise comes from ember's generator: manual_seed fixes the samples.
// on_step(i, steps) is called after each step.
Tensor sample(UNet& model, const DiffusionSchedule& schedule, const Tensor& labels, int64_t height, int64_t width,
              const SampleOptions& options, const std::function<void(int64_t, int64_t)>& on_step = nullptr);

}  // namespace ember::models

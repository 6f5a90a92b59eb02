// The diffusion model (include/ember/models/diffusion.h): a few training steps and the DDPM and DDIM
// samplers against the same U-Net in PyTorch from the same weights and noise
// (tests/golden/make_diffusion_parity.py), the noise schedules and the time embedding, gradcheck
// through the U-Net, and bad configs and inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/diffusion.h"
#include "ember/optim.h"
#include "golden.h"
#include "test_util.h"

namespace {

using ember::Tensor;
using golden::with_prefix_removed;
namespace models = ember::models;

#define EXPECT_ERROR(statement, message) test_util::expect_error([&] { (void)(statement); }, {message})

const std::string kUnetParity = std::string(EMBER_GOLDEN_DIR) + "/diffusion_parity.safetensors";

models::UNetConfig parity_config(const std::map<std::string, std::string>& meta) {
  models::UNetConfig config{.image_channels = std::stoll(meta.at("image_channels")),
                            .channels = std::stoll(meta.at("channels")),
                            .multipliers = {},
                            .groups = std::stoll(meta.at("groups")),
                            .num_classes = std::stoll(meta.at("num_classes"))};
  std::string list = meta.at("multipliers");
  for (size_t start = 0; start < list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    config.multipliers.push_back(std::stoll(list.substr(start, comma - start)));
    start = comma + 1;
  }
  return config;
}

TEST(DiffusionParity, TrainingStepsAndSamplersMatchPyTorch) {
  const ember::StateDict golden = ember::load(kUnetParity);
  const std::map<std::string, std::string> meta = ember::load_metadata(kUnetParity);
  models::UNet model(parity_config(meta));
  const ember::StateDict init = with_prefix_removed(golden, "init.");
  ASSERT_EQ(model.state_dict().size(), init.size());
  model.load_state_dict(init);
  const models::DiffusionSchedule schedule(std::stoll(meta.at("timesteps")), models::NoiseSchedule::kCosine);
  ember::optim::AdamW optimizer(model.parameters(),
                                {.lr = std::stod(meta.at("lr")), .weight_decay = std::stod(meta.at("weight_decay"))});
  const Tensor x0 = golden.at("x0"), t = golden.at("t"), noise = golden.at("noise"), labels = golden.at("labels");
  const Tensor losses = golden.at("losses");
  const ember::StateDict first_grads = with_prefix_removed(golden, "grad.");
  for (int64_t step = 0; step < x0.size(0); ++step) {
    const Tensor loss = models::diffusion_loss(model, schedule, x0.select(0, step), t.select(0, step),
                                               noise.select(0, step), labels.select(0, step));
    optimizer.zero_grad();
    loss.backward();
    if (step == 0) {
      for (const auto& [name, parameter] : model.named_parameters()) {
        EXPECT_TRUE(golden::all_close(parameter.grad(), first_grads.at(name), {1e-4, 1e-6})) << name;
      }
    }
    optimizer.step();
    const double expected = losses.select(0, step).item<double>();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * std::abs(expected)) << "step " << step;
  }
  const ember::StateDict trained = model.state_dict();
  for (const auto& [name, expected] : with_prefix_removed(golden, "final.")) {
    EXPECT_TRUE(golden::all_close(trained.at(name), expected, {1e-4, 1e-5})) << name;
  }

  // The samplers, replayed with the reference's starting and per-step noise.
  model.eval();
  ember::autograd::NoGradGuard no_grad;
  const Tensor sample_labels = golden.at("sample.labels");
  for (const std::string run : {"ddpm", "ddpm_full", "ddim", "ddim_eta"}) {
    const Tensor settings = golden.at(run + ".settings");
    const models::SampleOptions options{.sampler = settings.select(0, 3).item<double>() == 1.0
                                                       ? models::DiffusionSampler::kDdpm
                                                       : models::DiffusionSampler::kDdim,
                                        .steps = static_cast<int64_t>(settings.select(0, 0).item<double>()),
                                        .guidance = settings.select(0, 1).item<double>(),
                                        .eta = settings.select(0, 2).item<double>()};
    const std::vector<int64_t> steps = schedule.sampling_steps(options.steps);
    Tensor x = golden.at(run + ".start");
    for (size_t i = 0; i < steps.size(); ++i) {
      const int64_t t_prev = i + 1 < steps.size() ? steps[i + 1] : -1;
      const Tensor eps = models::guided_noise(model, x, steps[i], sample_labels, options.guidance);
      x = models::denoise_step(schedule, x, eps, steps[i], t_prev, options,
                               golden.at(run + ".noise." + std::to_string(i)));
    }
    EXPECT_TRUE(golden::all_close(x, golden.at(run + ".result"), {1e-4, 1e-4})) << run;
  }
}

TEST(DiffusionSchedule, AlphaBarsMatchTheReference) {
  const ember::StateDict golden = ember::load(kUnetParity);
  for (const auto& [key, kind, n] : {std::tuple{"alpha_bars.linear", models::NoiseSchedule::kLinear, 50},
                                     std::tuple{"alpha_bars.cosine", models::NoiseSchedule::kCosine, 50},
                                     std::tuple{"alpha_bars.linear1000", models::NoiseSchedule::kLinear, 1000},
                                     std::tuple{"alpha_bars.cosine1000", models::NoiseSchedule::kCosine, 1000}}) {
    const models::DiffusionSchedule schedule(n, kind);
    const Tensor expected = golden.at(key);
    ASSERT_EQ(expected.numel(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(schedule.alpha_bars()[static_cast<size_t>(i)], expected.select(0, i).item<double>(), 1e-12)
          << key << " at " << i;
    }
  }
  // Ho et al.'s linear schedule ends near pure noise; the cosine schedule's betas are capped.
  EXPECT_LT(models::DiffusionSchedule(1000, models::NoiseSchedule::kLinear).alpha_bars().back(), 1e-4);
  const models::DiffusionSchedule cosine(1000, models::NoiseSchedule::kCosine);
  for (double beta : cosine.betas()) EXPECT_LE(beta, 0.999);
}

TEST(DiffusionSchedule, SamplingStepsRunFromTheLastStepToTheFirst) {
  const models::DiffusionSchedule schedule(50, models::NoiseSchedule::kCosine);
  EXPECT_EQ(schedule.sampling_steps(5), (std::vector<int64_t>{49, 37, 25, 12, 0}));  // 36.75, 24.5, 12.25
  EXPECT_EQ(schedule.sampling_steps(1), (std::vector<int64_t>{49}));
  EXPECT_EQ(schedule.sampling_steps(50).size(), 50u);
  EXPECT_EQ(schedule.sampling_steps(50).back(), 0);
  EXPECT_ERROR(schedule.sampling_steps(0), "[diffusion] the number of sampling steps must be in [1, 50]");
  EXPECT_ERROR(schedule.sampling_steps(51), "[diffusion] the number of sampling steps must be in [1, 50]");
}

TEST(DiffusionSchedule, AddNoiseMixesByAlphaBar) {
  const models::DiffusionSchedule schedule(10, models::NoiseSchedule::kLinear);  // betas capped at 0.999
  EXPECT_EQ(schedule.betas().back(), 0.999);
  const Tensor x0 = ember::ones({2, 1, 2, 2}), noise = ember::full({2, 1, 2, 2}, 2.0);
  const Tensor t = ember::from_vector(std::vector<int64_t>{0, 9});
  const Tensor xt = schedule.add_noise(x0, t, noise);
  for (int64_t i = 0; i < 2; ++i) {
    const double a = schedule.alpha_bars()[static_cast<size_t>(t.select(0, i).item<int64_t>())];
    EXPECT_NEAR(xt.select(0, i).max().item<double>(), std::sqrt(a) + 2 * std::sqrt(1 - a), 1e-6);
  }
  EXPECT_ERROR(schedule.add_noise(x0, ember::from_vector(std::vector<int64_t>{0, 10}), noise),
               "[diffusion] time steps must be in [0, 10), got values in [0, 10]");
  EXPECT_ERROR(schedule.add_noise(x0, t, ember::ones({2, 1, 2, 3})), "must have the images' shape");
  EXPECT_ERROR(models::DiffusionSchedule(0, models::NoiseSchedule::kLinear),
               "the number of time steps must be in [1, 100000], got 0");
}

TEST(Diffusion, TimestepEmbeddingMatchesTheReference) {
  const ember::StateDict golden = ember::load(kUnetParity);
  EXPECT_TRUE(golden::all_close(models::timestep_embedding(golden.at("embedding.t"), 16), golden.at("embedding.value"),
                                {1e-5, 1e-5}));
  EXPECT_ERROR(models::timestep_embedding(ember::zeros({3}), 7), "dim must be even");
}

models::UNetConfig tiny_unet() { return {.channels = 4, .multipliers = {1, 2}, .groups = 2, .num_classes = 3}; }

TEST(Diffusion, UNetStartsAtZeroAndCountsItsWork) {
  ember::manual_seed(5);
  models::UNet model({.channels = 32});
  const Tensor x = ember::randn({2, 1, 28, 28});
  const Tensor eps = model.forward(x, ember::from_vector(std::vector<int64_t>{3, 900}),
                                   ember::from_vector(std::vector<int64_t>{4, 10}));
  EXPECT_EQ(eps.shape(), x.shape());
  EXPECT_EQ(eps.abs().max().item<double>(), 0.0);  // conv_out starts at zero
  // conv_in, 2 x (ResBlock, downsample), mid, 3 x ResBlock and 2 upsamples, conv_out at 28 / 14 / 7.
  EXPECT_GT(model.flops_per_image(28, 28), int64_t{200'000'000});
  EXPECT_LT(model.flops_per_image(28, 28), int64_t{260'000'000});
  EXPECT_EQ(model.flops_per_image(28, 28) - model.flops_per_image(28, 28), 0);
}

TEST(Diffusion, GradcheckThroughTheUNet) {
  ember::manual_seed(6);
  models::UNet model(tiny_unet());
  // Random weights everywhere (the zero-initialized layers too), in float64.
  {
    ember::autograd::NoGradGuard no_grad;
    for (Tensor& p : model.parameters()) p.copy_(ember::randn(p.shape()) * 0.5);
  }
  model.to(ember::kFloat64);
  const Tensor t = ember::from_vector(std::vector<int64_t>{2, 40});
  const Tensor labels = ember::from_vector(std::vector<int64_t>{1, 3});
  const Tensor x = ember::randn({2, 1, 4, 4}, ember::kFloat64).requires_grad_();
  std::vector<Tensor> inputs{x, model.conv_in->weight, model.up->at<models::ResBlock>(0)->emb_proj->weight,
                             model.class_embedding->weight};
  EXPECT_TRUE(
      ember::autograd::gradcheck([&](const std::vector<Tensor>&) { return model.forward(x, t, labels); }, inputs));
}

TEST(Diffusion, SamplingIsSeededAndGuidanceOneSkipsTheUnconditionalPass) {
  ember::manual_seed(7);
  models::UNet model(tiny_unet());
  {
    ember::autograd::NoGradGuard no_grad;
    for (Tensor& p : model.parameters()) p.copy_(ember::randn(p.shape()) * 0.1);
  }
  const models::DiffusionSchedule schedule(20, models::NoiseSchedule::kLinear);
  const Tensor labels = ember::from_vector(std::vector<int64_t>{0, 2});
  for (auto sampler : {models::DiffusionSampler::kDdpm, models::DiffusionSampler::kDdim}) {
    const models::SampleOptions options{.sampler = sampler, .steps = 6, .guidance = 2.0, .eta = 0.3};
    ember::manual_seed(11);
    int64_t calls = 0;
    const Tensor a = models::sample(model, schedule, labels, 4, 4, options, [&](int64_t i, int64_t n) {
      EXPECT_EQ(n, 6);
      EXPECT_EQ(i, ++calls);
    });
    EXPECT_EQ(calls, 6);
    ember::manual_seed(11);
    const Tensor b = models::sample(model, schedule, labels, 4, 4, options);
    EXPECT_TRUE(golden::all_close(a, b, {0, 0}));
    EXPECT_LE(a.abs().max().item<double>(), 1.0);  // the last step returns the clamped x0
    EXPECT_TRUE(model.is_training());              // restored
  }
  // No labels, no samples.
  EXPECT_EQ(models::sample(model, schedule, ember::zeros({0}, ember::kInt64), 4, 4, {.steps = 3}).shape(),
            ember::Shape({0, 1, 4, 4}));
  // Guidance 1 is the conditional prediction alone.
  model.eval();
  const Tensor x = ember::randn({2, 1, 4, 4});
  const Tensor conditional = models::guided_noise(model, x, 5, labels, 1.0);
  EXPECT_TRUE(golden::all_close(conditional, model.forward(x, ember::full({2}, 5.0, ember::kInt64), labels), {0, 0}));
  // Guidance 0 is the unconditional one.
  const Tensor unconditional = models::guided_noise(model, x, 5, labels, 0.0);
  EXPECT_TRUE(golden::all_close(
      unconditional, model.forward(x, ember::full({2}, 5.0, ember::kInt64), ember::full({2}, 3.0, ember::kInt64)),
      {1e-6, 1e-6}));
}

TEST(Diffusion, BadConfigsAndInputsNameWhatIsWrong) {
  EXPECT_ERROR(models::UNet({.channels = 6, .groups = 4}), "must be positive and divide into 4 groups");
  EXPECT_ERROR(models::UNet({.multipliers = {}}), "expected 1 to 8 width multipliers, got 0");
  EXPECT_ERROR(models::noise_schedule("quadratic"), "unknown noise schedule \"quadratic\"");
  EXPECT_ERROR(models::diffusion_sampler("euler"), "unknown sampler \"euler\": expected ddpm or ddim");
  models::UNet model(tiny_unet());
  const Tensor t = ember::zeros({2}, ember::kInt64);
  const Tensor labels = ember::from_vector(std::vector<int64_t>{0, 1});
  EXPECT_ERROR(model.forward(ember::zeros({2, 1, 6, 5}), t, labels),
               "[UNet] expected images (B, 1, H, W) with H and W positive multiples of 2, got [2, 1, 6, 5]");
  EXPECT_ERROR(model.forward(ember::zeros({2, 1, 4, 4}), t, ember::from_vector(std::vector<int64_t>{0, 4})),
               "[UNet] labels must be in [0, 3] (3: no class), got values in [0, 4]");
  EXPECT_ERROR(model.forward(ember::zeros({2, 1, 4, 4})), "[UNet] needs the time steps and the labels");
  const models::DiffusionSchedule schedule(10, models::NoiseSchedule::kCosine);
  EXPECT_ERROR(models::sample(model, schedule, ember::from_vector(std::vector<int64_t>{3}), 4, 4, {}),
               "[diffusion] labels must be classes in [0, 3), got values in [3, 3]");
  EXPECT_ERROR(models::sample(model, schedule, labels, 4, 4, {.steps = 11}),
               "the number of sampling steps must be in [1, 10], got 11");
  EXPECT_ERROR(models::sample(model, schedule, labels, 4, 4, {.steps = 5, .eta = 2}), "eta must be in [0, 1], got 2");
  EXPECT_ERROR(models::denoise_step(schedule, ember::zeros({1}), ember::zeros({1}), 3, 3, {}, Tensor()),
               "[diffusion] cannot step from 3 to 3 with 10 time steps");
  EXPECT_ERROR(models::diffusion_loss(model, schedule, ember::zeros({2, 1, 4, 4}), labels, 1.5),
               "the class drop probability must be in [0, 1], got 1.5");
}

}  // namespace

// `ember train diffusion` and `ember sample diffusion`: a class-conditional DDPM on MNIST
// (include/ember/models/diffusion.h), its checkpoints, the samples as a PNG grid and their quality
// measured by an MNIST classifier (diffusion.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::cli {

struct TrainDiffusionOptions {
  int64_t channels = 32;     // the U-Net's width at full resolution (x1, x2, x2 at 28, 14, 7 pixels)
  int64_t timesteps = 1000;  // T
  std::string schedule = "cosine";
  int64_t steps = 1700;  // training steps (about 19 minutes on 2 cores)
  int64_t batch_size = 64;
  double lr = 1e-3;  // AdamW's peak: linear warmup, then cosine decay to lr / 10
  int64_t warmup = 200;
  double drop_class = 0.1;  // the fraction of examples trained without their class (for guidance)
  double ema = 0.999;       // the decay of the weights' moving average the samplers use
  uint64_t seed = 0;
  int threads = 0;
  std::string data_dir = "data/mnist";
  std::string save_path;  // written every save_every steps and at the end
  int64_t save_every = 500;
  std::string resume_path;
  int64_t stop_after = 0;  // train only this many steps now
  bool json = false;
};

int run_train_diffusion(const TrainDiffusionOptions& options);

struct SampleDiffusionOptions {
  std::string checkpoint;
  std::string sampler = "ddim";
  std::vector<int64_t> steps{50};  // several values: every combination with the guidance scales
  std::vector<double> guidance{3.0};
  double eta = 0.0;
  int64_t per_class = 10;    // samples of each digit: the grid's columns
  std::string out;           // the PNG grid (one row per digit); "-s<steps>-g<guidance>" per combination
  std::string classifier;    // an `ember train mnist --save` checkpoint that classifies the samples
  bool raw_weights = false;  // sample with the trained weights instead of their moving average
  int64_t batch_size = 250;
  uint64_t seed = 0;
  int threads = 0;
  std::string data_dir = "data/mnist";  // the classifier's accuracy on real test digits, for reference
  bool json = false;
};

int run_sample_diffusion(const SampleDiffusionOptions& options);

}  // namespace ember::cli

// `ember train mnist`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ember::cli {

struct TrainOptions {
  std::string model = "cnn";
  int epochs = 10;
  int stop_after = 0;  // > 0: train only this many epochs of the run now (save, then --resume later)
  int batch_size = 64;
  std::string optimizer = "adam";
  std::optional<double> lr;         // unset: the optimizer's usual default
  std::string schedule = "cosine";  // learning rate: "cosine" decay to 0 over the run, or "constant"
  int shift = 2;                    // augmentation: random shifts of up to this many pixels (0: none)
  uint64_t seed = 0;
  int threads = 0;                      // 0: all cores
  std::string data_dir = "data/mnist";  // IDX files, else the offline 5,000-image subset
  std::string save_path;                // checkpoint after every epoch
  std::string resume_path;              // continue from a checkpoint
  std::string profile_path;             // write a Chrome trace of the training steps and print the top ops
  bool json = false;
  bool compile = false;      // run the training step through ember::compile
  std::string amp = "none";  // mixed precision: "bf16" or "f16" autocast (f16 with loss scaling), or "none"
  // Data-parallel over the ranks of an mpirun (or Gloo) job: --batch-size is the global batch, each
  // rank takes its share; rank 0 alone prints and writes checkpoints.
  bool ddp = false;
  bool zero = false;  // with --ddp: shard the optimizer state over the ranks (ZeRO-1)
  double bucket_cap_mb = 25;
};

// Trains, evaluates and prints; returns the process exit code. Throws ember::Error on bad input.
int run_train_mnist(const TrainOptions& options);

}  // namespace ember::cli

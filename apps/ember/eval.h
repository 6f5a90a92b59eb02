// `ember eval gpt|mnist`: a checkpoint's validation loss or test accuracy, measured as `ember train`
// measures it (the evaluation functions below are the ones train and train_gpt call), from a
// safetensors checkpoint or a GGUF file of `ember quantize`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ember/models/gpt.h"
#include "ember/tokenizer.h"

namespace ember::cli {

// --- the evaluations `ember train` runs -------------------------------------------------------------

// The mean loss over `batches` batches of a split, without gradients, in eval mode (nanoGPT's
// estimate_loss). The batches depend only on `seed`, so every evaluation sees the same ones.
double text_split_loss(models::LanguageModel& model, const data::TextSplit& split, std::string_view name,
                       int64_t batches, int64_t batch_size, int64_t context, uint64_t seed);
// The seed of the evaluation batches of `split` ("train" or "val") in a run seeded with run_seed.
uint64_t gpt_eval_seed(uint64_t run_seed, std::string_view split);

// The fraction of `images` whose most likely class is their label, without gradients, in eval mode.
double mnist_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels);

// --- the command ------------------------------------------------------------------------------------

struct EvalGptOptions {
  std::string checkpoint;
  std::string data_path = "data/shakespeare/input.txt";
  int64_t batches = 20;               // `ember train gpt`'s default --eval-batches
  std::optional<int64_t> batch_size;  // unset: the run's, from the checkpoint
  std::optional<uint64_t> seed;       // unset: the run's, from the checkpoint
  int threads = 0;
  bool json = false;
};
int run_eval_gpt(const EvalGptOptions& options);

struct EvalMnistOptions {
  std::string checkpoint;
  std::string data_dir = "data/mnist";
  int threads = 0;
  bool json = false;
};
int run_eval_mnist(const EvalMnistOptions& options);

}  // namespace ember::cli

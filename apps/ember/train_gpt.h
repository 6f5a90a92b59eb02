// `ember train gpt|ssm` (train_gpt.cpp) and `ember generate` (generate.cpp): a character-level GPT
// or Mamba model on Shakespeare, and text from it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/models/language_model.h"

namespace ember::cli {

struct TrainGptOptions {
  // "gpt" or "ssm" (the Mamba model: heads and dropout do not apply; state, expand and conv do).
  // The GPT defaults train in about 5 minutes on 2 cores (about 12k tokens/s); nanoGPT's small
  // character model is --dim 128 --context 64 --batch-size 12 --steps 2000.
  std::string model = "gpt";
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t dim = 192;
  int64_t state = 16;  // ssm: the scan's state per channel
  int64_t expand = 2;  // ssm: channels inside a mixer per model dim
  int64_t conv = 4;    // ssm: the causal convolution's width
  int64_t context = 128;
  int64_t batch_size = 16;
  int64_t steps = 1800;
  double lr = 1e-3;  // peak; cosine decay to lr / 10 at the last step (nanoGPT's recipe)
  int64_t warmup = 100;
  double dropout = 0.0;
  uint64_t seed = 1337;
  int threads = 0;  // 0: all cores
  std::string data_path = "data/shakespeare/input.txt";
  int64_t eval_every = 300;
  int64_t eval_batches = 20;  // batches per split in each evaluation
  int64_t stop_after = 0;     // > 0: train only this many steps now (with --save, continue with --resume)
  int64_t sample_tokens = 300;
  std::string save_path;
  std::string resume_path;
  std::string profile_path;
  bool json = false;
  bool compile = false;      // run the training step through ember::compile
  std::string amp = "none";  // mixed precision: "bf16" or "f16" autocast (f16 with loss scaling), or "none"
  // Data-parallel (as `ember train mnist --ddp`): --batch-size is the global batch; each rank
  // trains on its rows of every batch; rank 0 alone evaluates, prints and saves.
  bool ddp = false;
  bool zero = false;  // with --ddp: shard AdamW's state over the ranks (ZeRO-1)
  double bucket_cap_mb = 25;

  // `ember train ssm`'s defaults: a Mamba model of about the default GPT's parameter count, trained
  // for about the default GPT's wall time.
  static TrainGptOptions ssm_defaults() {
    TrainGptOptions o;
    o.model = "ssm";
    o.dim = 256;
    o.steps = 1000;  // about 6,500 tokens/s on 2 cores: about the GPT's 5 minutes
    o.lr = 2e-3;
    o.eval_every = 250;
    return o;
  }
};

int run_train_gpt(const TrainGptOptions& options);

// Continues `prompt` with a GPT (through its KV cache unless !use_cache) or a Mamba model (through
// its recurrent step).
std::vector<int64_t> generate_text(models::LanguageModel& model, const std::vector<int64_t>& prompt, int64_t tokens,
                                   const models::SamplingOptions& options, bool use_cache = true,
                                   const std::function<void(int64_t)>& on_token = nullptr);

struct GenerateOptions {
  std::string checkpoint;  // `ember train gpt|ssm --save`'s safetensors or `ember quantize`'s GGUF (checkpoint.h)
  std::string prompt = "\n";
  int64_t tokens = 500;
  double temperature = 0.8;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  bool no_cache = false;
};

int run_generate(const GenerateOptions& options);

}  // namespace ember::cli

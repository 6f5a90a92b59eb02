// Drawing the next token from a language model's logits, shared by the GPT (gpt.h) and the Mamba
// model (mamba.h).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // > 0: sample among the k most likely tokens only
  double top_p = 1.0;        // < 1: sample among the most likely tokens whose probabilities sum to top_p
  uint64_t seed = 0;
};

// Draws tokens from next-token logits with temperature, top-k and top-p (nucleus), from its own
// seeded stream (the same seed gives the same text).
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // logits: vocab_size values (float32, contiguous, any device the host can read).
  int64_t sample(const Tensor& logits);

 private:
  SamplingOptions options_;
  uint64_t state_;
  std::vector<std::pair<float, int64_t>> candidates_;
};

}  // namespace ember::models

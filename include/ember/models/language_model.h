// What the token-level language models (the GPT of gpt.h, the Mamba model of mamba.h) share: the
// interface training and evaluation use, and drawing the next token from logits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ember/nn/module.h"
#include "ember/tensor.h"

namespace ember::models {

// A model of token ids (B, T) int64 to next-token logits (B, T, vocab_size).
class LanguageModel : public nn::Module {
 public:
  // The mean cross-entropy of the next-token logits against targets (B, T).
  virtual Tensor loss(const Tensor& idx, const Tensor& targets) = 0;
  // AdamW's groups (nanoGPT's recipe): the weights that decay, and the rest (biases, norms, ...).
  virtual std::vector<Tensor> decayed_parameters() const = 0;
  virtual std::vector<Tensor> undecayed_parameters() const = 0;
  // Parameters counted once (a tied output weight is the embedding).
  int64_t num_parameters() const;
};

// What generation accepts: a non-empty prompt of ids in the vocabulary, tokens >= 0; otherwise an
// ember::Error starting with [generate].
void check_generation(const std::vector<int64_t>& prompt, int64_t tokens, int64_t vocab_size);

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // > 0: sample among the k most likely tokens only
  double top_p = 1.0;        // < 1: sample among the most likely tokens whose probabilities sum to top_p
  double min_p = 0.0;        // > 0: drop tokens less likely than min_p times the most likely one
  // > 1: the logits of the tokens among the last penalty_last_n of the history are made less
  // likely (divided by it when positive, multiplied when negative: CTRL's penalty, as Hugging
  // Face and llama.cpp apply it), before greedy choice or sampling.
  double repetition_penalty = 1.0;
  // OpenAI's penalties over the same window: each token's logit less frequency_penalty times the
  // times it appears there, and less presence_penalty once if it appears at all (after the
  // repetition penalty).
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  int64_t penalty_last_n = 64;
  uint64_t seed = 0;
};

// splitmix64: advances `state` and returns the next uniform double in [0, 1) of its stream (the
// Sampler's draws).
double next_uniform(uint64_t& state);

// Draws tokens from next-token logits, in this order: the repetition penalty, then greedy choice
// (temperature 0), or the softmax at the temperature cut to the top k, the nucleus (top-p) and
// min-p, sampled from the sampler's own seeded stream (the same seed gives the same text).
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // logits: vocab_size values (float32, contiguous, any device the host can read); history: the
  // ids so far (for the repetition penalty).
  int64_t sample(const Tensor& logits, const std::vector<int64_t>& history = {});

 private:
  SamplingOptions options_;
  uint64_t state_;
  std::vector<std::pair<float, int64_t>> candidates_;
};

}  // namespace ember::models

// A Mamba language model (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective
// State Spaces"): token embedding, blocks of pre-RMSNorm residual Mamba mixers, a final RMSNorm and
// an output layer tied to the embedding. No attention and no position embedding: each mixer runs a
// causal depthwise convolution and a selective scan whose decay and input/output maps (delta, B,
// C) depend on the token, so generation carries O(1) state per layer instead of a growing cache.
// Parameter names are the reference implementation's (mamba_ssm's MambaLMHeadModel:
// "backbone.layers.0.mixer.in_proj.weight", "...mixer.A_log", "backbone.norm_f.weight"), so its
// state dicts load by name.
//
//   models::Mamba model({.vocab_size = 65, .d_model = 128, .n_layer = 4});
//   Tensor loss = model.loss(idx, targets);   // idx, targets (B, T) int64, any T
//   std::vector<int64_t> text = models::generate(model, prompt, 200, {.temperature = 0.8, .top_k = 40});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/models/language_model.h"
#include "ember/nn.h"

namespace ember::models {

struct MambaConfig {
  int64_t vocab_size = 65;
  int64_t d_model = 128;
  int64_t n_layer = 4;
  int64_t d_state = 16;     // N: the state per channel
  int64_t d_conv = 4;       // the causal convolution's width
  int64_t expand = 2;       // d_inner = expand * d_model channels inside a mixer
  int64_t dt_rank = 0;      // the rank of delta's projection; 0: ceil(d_model / 16), as the reference
  int64_t scan_chunk = 64;  // selective_scan's checkpoint interval (memory against recomputation)
  bool operator==(const MambaConfig&) const = default;

  int64_t d_inner() const { return expand * d_model; }
  int64_t rank() const { return dt_rank > 0 ? dt_rank : (d_model + 15) / 16; }
};

// One mixer's state between tokens in generation: the last d_conv - 1 inputs of the convolution
// (batch, d_inner, d_conv - 1) and the scan's state (batch, d_inner, d_state).
struct MambaLayerState {
  Tensor conv;
  Tensor ssm;
};

// The Mamba mixer (the reference's `Mamba` module): x (B, L, d_model) -> (B, L, d_model).
//   x, z = in_proj(x) split;  x = silu(causal depthwise conv1d(x));  dt, B, C = x_proj(x) split;
//   delta = softplus(dt_proj(dt));  y = selective_scan(x, delta, -exp(A_log), B, C) + D * x;
//   out_proj(y * silu(z)).
class MambaMixer : public nn::Module {
 public:
  explicit MambaMixer(const MambaConfig& config);
  Tensor forward(const Tensor& x) override;
  // One token per sequence: x (B, d_model) -> (B, d_model), reading and updating `state`.
  Tensor step(const Tensor& x, MambaLayerState& state);
  std::string name() const override { return "Mamba"; }

  const MambaConfig config;
  std::shared_ptr<nn::Linear> in_proj;   // d_model -> 2 d_inner, no bias
  std::shared_ptr<nn::Conv1d> conv1d;    // depthwise, d_inner channels, with bias
  std::shared_ptr<nn::Linear> x_proj;    // d_inner -> dt_rank + 2 d_state, no bias
  std::shared_ptr<nn::Linear> dt_proj;   // dt_rank -> d_inner, with bias (delta's floor)
  std::shared_ptr<nn::Linear> out_proj;  // d_inner -> d_model, no bias
  Tensor A_log;                          // (d_inner, d_state): A = -exp(A_log)
  Tensor D;                              // (d_inner): the skip

 private:
  // delta, B, C of the convolved input xc (..., d_inner): delta (..., d_inner), B and C (..., d_state).
  void selection(const Tensor& xc, Tensor& delta, Tensor& B, Tensor& C);
};

// The reference's `Block` without its fused add+norm: x + mixer(norm(x)).
class MambaBlock : public nn::Module {
 public:
  explicit MambaBlock(const MambaConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor step(const Tensor& x, MambaLayerState& state);
  std::string name() const override { return "Block"; }

  std::shared_ptr<MambaMixer> mixer;
  std::shared_ptr<nn::RMSNorm> norm;
};

// The reference's `MixerModel`: embedding, layers, norm_f.
class MambaBackbone : public nn::Module {
 public:
  explicit MambaBackbone(const MambaConfig& config);
  std::string name() const override { return "MixerModel"; }

  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm_f;
};

class Mamba : public LanguageModel {
 public:
  // The reference's initialization, from ember's generator (manual_seed): embedding N(0, 0.02);
  // Linear and Conv1d layers PyTorch's defaults with zero Linear biases, out_proj's weight scaled
  // by 1 / sqrt(n_layer); dt_proj's weight U(+-dt_rank^-0.5) and its bias softplus^-1 of a delta
  // drawn log-uniformly in [0.001, 0.1]; A_log = log(1..d_state) per channel; D = 1. Throws on a
  // bad config.
  explicit Mamba(const MambaConfig& config);
  // idx (B, T) int64 token ids -> logits (B, T, vocab_size). Any T >= 1: no context limit.
  Tensor forward(const Tensor& idx) override;
  // The mean cross-entropy of the next-token logits against targets (B, T).
  Tensor loss(const Tensor& idx, const Tensor& targets) override;
  // Zero states for `batch` sequences, one per layer.
  std::vector<MambaLayerState> make_state(int64_t batch) const;
  // Logits (B, vocab_size) of one token per sequence, ids (B) int64, advancing `state`.
  Tensor step(const Tensor& ids, std::vector<MambaLayerState>& state);
  // AdamW's groups as the GPT's: 2-D weights decay; biases, norms, A_log and D do not.
  std::vector<Tensor> decayed_parameters() const override;
  std::vector<Tensor> undecayed_parameters() const override;
  std::string name() const override { return "MambaLMHeadModel"; }

  const MambaConfig config;
  std::shared_ptr<MambaBackbone> backbone;

 private:
  MambaBlock& block(int64_t layer) const;
};

// Continues `prompt` (token ids, not empty) by `tokens` tokens in evaluation mode without
// gradients, a token at a time through the recurrent step (the prompt too): each token costs the
// same whatever the length of the text. Calls on_token(id) as each is drawn; returns the new tokens.
std::vector<int64_t> generate(Mamba& model, const std::vector<int64_t>& prompt, int64_t tokens,
                              const SamplingOptions& options, const std::function<void(int64_t)>& on_token = nullptr);

}  // namespace ember::models

// A GPT in nanoGPT's architecture (Karpathy's model.py): token and position embeddings, blocks of
// pre-LayerNorm causal self-attention and a 4x GELU MLP with residual connections, a final
// LayerNorm, and an output layer tied to the token embedding. Parameter names are nanoGPT's
// ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...), so its state dicts load by
// name; the tied output weight is the embedding's ("lm_head.weight" in PyTorch's state dict).
//
//   models::GPT model({.vocab_size = 84, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128});
//   Tensor loss = model.loss(idx, targets);   // idx, targets (B, T) int64
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

struct GPTConfig {
  int64_t vocab_size = 84;
  int64_t block_size = 64;  // the longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // in the Linear and LayerNorm layers
  bool operator==(const GPTConfig&) const = default;
};

// Keys and values of every layer, preallocated for block_size positions: layer l's are
// keys[l], values[l] (B, n_head, block_size, head_dim); the first `length` positions are filled.
struct KVCache {
  std::vector<Tensor> keys;
  std::vector<Tensor> values;
  int64_t length = 0;
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  // x (B, T, C) -> (B, T, C), position i attending to positions <= i.
  Tensor forward(const Tensor& x) override;
  // x holds positions [start, start + T): their keys and values are written into the cache, and
  // they attend to every cached position up to their own.
  Tensor forward_cached(const Tensor& x, Tensor& cache_keys, Tensor& cache_values, int64_t start);
  std::string name() const override { return "CausalSelfAttention"; }

  std::shared_ptr<nn::Linear> c_attn;
  std::shared_ptr<nn::Linear> c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
  const int64_t n_head;
  const double dropout;

 private:
  Tensor attend(const Tensor& x, const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attention);
};

class MLP : public nn::Module {
 public:
  explicit MLP(const GPTConfig& config);
  // c_proj(gelu(c_fc(x))), the GELU in c_fc's epilogue (after it when c_fc is quantized).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MLP"; }

  std::shared_ptr<nn::Linear> c_fc;
  std::shared_ptr<nn::Linear> c_proj;
  std::shared_ptr<nn::Dropout> dropout;
};

class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;  // x + attn(ln_1(x)), then + mlp(ln_2(.))
  Tensor forward_cached(const Tensor& x, Tensor& cache_keys, Tensor& cache_values, int64_t start);
  std::string name() const override { return "Block"; }

  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

// nanoGPT's `transformer` ModuleDict: wte, wpe, drop, h, ln_f.
class GPTTransformer : public nn::Module {
 public:
  explicit GPTTransformer(const GPTConfig& config);
  std::string name() const override { return "GPTTransformer"; }

  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Embedding> wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

class GPT : public LanguageModel {
 public:
  // nanoGPT's initialization: N(0, 0.02) for Linear and Embedding weights, N(0, 0.02 /
  // sqrt(2 n_layer)) for the residual projections (c_proj), zero biases; draws from ember's
  // generator (manual_seed). Throws on a bad config (n_embd not divisible by n_head, ...).
  explicit GPT(const GPTConfig& config);
  // idx (B, T) int64 token ids, T <= block_size -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx) override;
  // The mean cross-entropy of the next-token logits against targets (B, T).
  Tensor loss(const Tensor& idx, const Tensor& targets) override;
  // A cache for `batch` sequences of up to block_size positions.
  KVCache make_cache(int64_t batch) const;
  // Logits (B, T, vocab_size) of the positions [cache.length, cache.length + T) of idx (B, T),
  // reading and extending the cache. cache.length + T must be at most block_size.
  Tensor forward_cached(const Tensor& idx, KVCache& cache);
  // nanoGPT's AdamW groups: the 2-D weights (embeddings and Linear weights) decay, biases and
  // LayerNorm parameters do not.
  std::vector<Tensor> decayed_parameters() const override;
  std::vector<Tensor> undecayed_parameters() const override;
  std::string name() const override { return "GPT"; }

  const GPTConfig config;
  std::shared_ptr<GPTTransformer> transformer;

 private:
  Block& block(int64_t layer) const;
};

// Continues `prompt` (token ids, not empty) by `tokens` tokens in evaluation mode without
// gradients; calls on_token(id) as each is drawn. With use_cache the prompt is prefilled once and
// each new token costs one position per layer; without it, every token recomputes its whole
// window. Either way the model sees the last block_size tokens (nanoGPT's crop): once the text is
// longer than the context, the cache restarts from that window every token. Returns the new tokens.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, int64_t tokens,
                              const SamplingOptions& options, bool use_cache = true,
                              const std::function<void(int64_t)>& on_token = nullptr);

}  // namespace ember::models

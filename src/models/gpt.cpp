// nanoGPT's GPT (include/ember/models/gpt.h): the model, its KV cache, sampling and generation.
#include "ember/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ember/autograd.h"
#include "ember/error.h"
#include "ember/memory.h"
#include "ember/nn/init.h"
#include "ember/ops.h"

namespace ember::models {
namespace {

void check_config(const GPTConfig& c) {
  EMBER_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
              "[GPT] vocab_size, block_size, n_layer, n_head and n_embd must be positive, got ", c.vocab_size, ", ",
              c.block_size, ", ", c.n_layer, ", ", c.n_head, ", ", c.n_embd);
  EMBER_CHECK(c.n_embd % c.n_head == 0, "[GPT] n_embd ", c.n_embd, " is not divisible by n_head ", c.n_head);
  EMBER_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "[GPT] dropout must be in [0, 1), got ", c.dropout);
  // The float32 parameters, counted before the first layer is built: a model too large for memory
  // is an error now, not after hours of building layers. (Doubles: the count may pass 2^63.)
  const double d = static_cast<double>(c.n_embd), layers = static_cast<double>(c.n_layer);
  const double parameters = static_cast<double>(c.vocab_size + c.block_size) * d + layers * (12 * d * d + 13 * d);
  check_fits_in_memory(4 * parameters, "GPT",
                       detail::concat(parameters, " parameters of n_layer ", c.n_layer, ", n_embd ", c.n_embd));
}

void init_linear(nn::Linear& linear, double std) {
  nn::init::normal_(linear.weight, 0.0, std);
  if (linear.bias.defined()) nn::init::zeros_(linear.bias);
}

}  // namespace

// --- attention --------------------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config) : n_head(config.n_head), dropout(config.dropout) {
  c_attn = register_module("c_attn", std::make_shared<nn::Linear>(config.n_embd, 3 * config.n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(config.n_embd, config.n_embd, config.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(config.dropout));
}

// q, k, v of x (B, T, C) as (B, n_head, T, head_dim) views of one c_attn output; `attention` maps
// them to the heads' outputs, which c_proj mixes back to (B, T, C).
Tensor CausalSelfAttention::attend(
    const Tensor& x, const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attention) {
  EMBER_CHECK(x.dim() == 3, "[CausalSelfAttention] expected x of shape (B, T, C), got ", x.shape());
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2);
  const Tensor qkv = (*c_attn)(x);
  auto heads = [&](int64_t part) {
    return qkv.narrow(2, part * channels, channels).view({batch, length, n_head, channels / n_head}).transpose(1, 2);
  };
  const Tensor y = attention(heads(0), heads(1), heads(2));
  return (*resid_dropout)((*c_proj)(y.transpose(1, 2).contiguous().view({batch, length, channels})));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  return attend(x, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, std::nullopt, is_training() ? dropout : 0.0, /*is_causal=*/true);
  });
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& cache_keys, Tensor& cache_values, int64_t start) {
  return attend(x, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    const int64_t length = q.size(2), end = start + length;
    cache_keys.narrow(2, start, length).copy_(k);
    cache_values.narrow(2, start, length).copy_(v);
    const Tensor keys = cache_keys.narrow(2, 0, end), values = cache_values.narrow(2, 0, end);
    if (length == 1) return scaled_dot_product_attention(q, keys, values);  // the newest position sees all
    if (start == 0) return scaled_dot_product_attention(q, keys, values, std::nullopt, 0.0, /*is_causal=*/true);
    // Queries [start, end) against keys [0, end): query i keeps keys j <= start + i.
    const TensorOptions on(q.device());
    const Tensor keep = ge(arange(start, end, 1, on).unsqueeze(1), arange(0, end, 1, on).unsqueeze(0));
    return scaled_dot_product_attention(q, keys, values, keep);
  });
}

// --- MLP and block ----------------------------------------------------------------------------------

MLP::MLP(const GPTConfig& config) {
  c_fc = register_module("c_fc", std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  // A quantized c_fc (Linear::quantize_) has no GELU epilogue: its own product, then the GELU.
  if (c_fc->is_quantized()) return (*dropout)((*c_proj)(gelu((*c_fc)(x))));
  const std::optional<Tensor> bias = c_fc->bias.defined() ? std::optional<Tensor>(c_fc->bias) : std::nullopt;
  return (*dropout)((*c_proj)(linear_gelu(x, c_fc->weight, bias)));
}

Block::Block(const GPTConfig& config) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{config.n_embd}, 1e-5, true, config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{config.n_embd}, 1e-5, true, config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = x + (*attn)((*ln_1)(x));
  return h + (*mlp)((*ln_2)(h));
}

Tensor Block::forward_cached(const Tensor& x, Tensor& cache_keys, Tensor& cache_values, int64_t start) {
  const Tensor h = x + attn->forward_cached((*ln_1)(x), cache_keys, cache_values, start);
  return h + (*mlp)((*ln_2)(h));
}

GPTTransformer::GPTTransformer(const GPTConfig& config) {
  wte = register_module("wte", std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(config.block_size, config.n_embd));
  drop = register_module("drop", std::make_shared<nn::Dropout>(config.dropout));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t layer = 0; layer < config.n_layer; ++layer) h->push_back(std::make_shared<Block>(config));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{config.n_embd}, 1e-5, true, config.bias));
}

// --- the model -------------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& c) : config((check_config(c), c)) {
  transformer = register_module("transformer", std::make_shared<GPTTransformer>(config));
  autograd::NoGradGuard no_grad;
  nn::init::normal_(transformer->wte->weight, 0.0, 0.02);
  nn::init::normal_(transformer->wpe->weight, 0.0, 0.02);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    Block& b = block(layer);
    init_linear(*b.attn->c_attn, 0.02);
    init_linear(*b.attn->c_proj, residual_std);
    init_linear(*b.mlp->c_fc, 0.02);
    init_linear(*b.mlp->c_proj, residual_std);
  }
}

Block& GPT::block(int64_t layer) const { return static_cast<Block&>(*(*transformer->h)[layer]); }

Tensor GPT::forward(const Tensor& idx) {
  EMBER_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "[GPT] expected int64 token ids of shape (B, T), got ",
              idx.dtype(), " ", idx.shape());
  const int64_t length = idx.size(1);
  EMBER_CHECK(length <= config.block_size, "[GPT] a sequence of ", length, " tokens is longer than the context of ",
              config.block_size);
  Tensor x = (*transformer->drop)((*transformer->wte)(idx) +
                                  (*transformer->wpe)(arange(0, length, 1, TensorOptions(idx.device()))));
  for (int64_t layer = 0; layer < config.n_layer; ++layer) x = block(layer)(x);
  return linear((*transformer->ln_f)(x), transformer->wte->weight);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  EMBER_CHECK(targets.shape() == idx.shape(), "[GPT] targets of shape ", targets.shape(),
              " do not match the token ids' ", idx.shape());
  const Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, config.vocab_size}), targets.reshape({-1}));
}

KVCache GPT::make_cache(int64_t batch) const {
  KVCache cache;
  const int64_t head_dim = config.n_embd / config.n_head;
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    // On the model's device (its token embedding's).
    const TensorOptions on(transformer->wte->weight.device());
    cache.keys.push_back(zeros({batch, config.n_head, config.block_size, head_dim}, on));
    cache.values.push_back(zeros({batch, config.n_head, config.block_size, head_dim}, on));
  }
  return cache;
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) {
  EMBER_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "[GPT] expected int64 token ids of shape (B, T), got ",
              idx.dtype(), " ", idx.shape());
  EMBER_CHECK(static_cast<int64_t>(cache.keys.size()) == config.n_layer && idx.size(0) == cache.keys[0].size(0),
              "[GPT] the cache was made for another model or batch size");
  const int64_t start = cache.length, length = idx.size(1);
  EMBER_CHECK(start + length <= config.block_size, "[GPT] ", start, " cached and ", length,
              " new positions exceed the context of ", config.block_size);
  Tensor x =
      (*transformer->wte)(idx) + (*transformer->wpe)(arange(start, start + length, 1, TensorOptions(idx.device())));
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    x = block(layer).forward_cached(x, cache.keys[layer], cache.values[layer], start);
  }
  cache.length = start + length;
  return linear((*transformer->ln_f)(x), transformer->wte->weight);
}

std::vector<Tensor> GPT::decayed_parameters() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters()) {
    if (p.dim() >= 2) out.push_back(p);
  }
  return out;
}

std::vector<Tensor> GPT::undecayed_parameters() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters()) {
    if (p.dim() < 2) out.push_back(p);
  }
  return out;
}

// --- generation -----------------------------------------------------------------------------------

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, int64_t tokens,
                              const SamplingOptions& options, bool use_cache,
                              const std::function<void(int64_t)>& on_token) {
  check_generation(prompt, tokens, model.config.vocab_size);
  const bool was_training = model.is_training();
  model.eval();
  autograd::NoGradGuard no_grad;
  Sampler sampler(options);
  std::vector<int64_t> text = prompt, out;
  const int64_t block = model.config.block_size;
  // The last min(len, block_size) tokens of the text as a (1, T) tensor on the model's device.
  const Device device = model.transformer->wte->weight.device();
  auto window = [&](int64_t from) {
    std::vector<int64_t> ids(text.begin() + from, text.end());
    return from_vector(ids).view({1, -1}).to(device);
  };
  KVCache cache = use_cache ? model.make_cache(1) : KVCache{};
  for (int64_t step = 0; step < tokens; ++step) {
    const int64_t length = static_cast<int64_t>(text.size());
    const int64_t from = std::max<int64_t>(0, length - block);
    Tensor logits;
    if (!use_cache) {
      logits = model.forward(window(from));
    } else if (cache.length > 0 && cache.length == length - 1 && from == 0) {
      logits = model.forward_cached(window(length - 1), cache);  // one new position
    } else {
      cache.length = 0;  // prefill: the prompt, or the window after the text outgrew the context
      logits = model.forward_cached(window(from), cache);
    }
    const int64_t id = sampler.sample(logits.select(0, 0).select(0, logits.size(1) - 1), text);
    text.push_back(id);
    out.push_back(id);
    if (on_token) on_token(id);
  }
  if (was_training) model.train();
  return out;
}

}  // namespace ember::models

// Llama-family models from GGUF files (ember/models/llama.h).
#include "ember/models/llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "ember/autograd.h"
#include "ember/blocks.h"
#include "ember/ops.h"
#include "ember/quant.h"

namespace ember::models {
namespace {

// --- metadata -------------------------------------------------------------------------------------

const gguf::Value* find(const gguf::File& file, const std::string& key) { return file.find_value(key); }

int64_t integer_key(const gguf::File& file, const std::string& what, const std::string& key,
                    std::optional<int64_t> fallback = std::nullopt) {
  const gguf::Value* value = find(file, key);
  if (value == nullptr) {
    EMBER_CHECK(fallback.has_value(), "[Llama] ", what, ": the metadata has no '", key, "'");
    return *fallback;
  }
  EMBER_CHECK(!value->is_array(), "[Llama] ", what, ": '", key, "' is an array (", *value,
              "); ember reads models whose layers all have the same shape");
  int64_t out = 0;
  try {
    out = value->as_integer();
  } catch (const Error&) {
    EMBER_FAIL("[Llama] ", what, ": '", key, "' should be an integer, got ", *value);
  }
  EMBER_CHECK(out > 0, "[Llama] ", what, ": '", key, "' must be positive, got ", out);
  return out;
}

double float_key(const gguf::File& file, const std::string& what, const std::string& key,
                 std::optional<double> fallback = std::nullopt) {
  const gguf::Value* value = find(file, key);
  if (value == nullptr) {
    EMBER_CHECK(fallback.has_value(), "[Llama] ", what, ": the metadata has no '", key, "'");
    return *fallback;
  }
  if (value->type() == gguf::ValueType::kFloat32) return value->as_float32();
  if (value->type() == gguf::ValueType::kFloat64) return value->as_float64();
  EMBER_FAIL("[Llama] ", what, ": '", key, "' should be a float, got ", *value);
}

// --- tensors --------------------------------------------------------------------------------------

bool is_weight_dtype(DType dtype) { return is_floating(dtype) || dtype == kQ8_0 || dtype == kQ4_0 || dtype == kQ4_1; }

// What a weight matrix becomes in memory: block-quantized ones stay as stored (or float32 when
// dequantizing), other floating ones float32.
Tensor prepare_weight(const Tensor& stored, const LlamaLoadOptions& options) {
  if (is_block_quantized(stored.dtype())) return options.dequantize ? dequantize(stored) : stored;
  return stored.dtype() == kFloat32 ? stored : stored.to(kFloat32);
}

}  // namespace

LlamaConfig llama_config(const gguf::File& file, const std::string& what) {
  const gguf::Value* architecture = find(file, "general.architecture");
  EMBER_CHECK(architecture != nullptr && architecture->type() == gguf::ValueType::kString, "[Llama] ", what,
              ": the metadata has no general.architecture string: not a model file");
  EMBER_CHECK(architecture->as_string() == "llama", "[Llama] ", what, ": general.architecture is \"",
              architecture->as_string(), "\"; ember runs the llama architecture only");
  // What ember does not implement is refused rather than run wrong.
  if (const gguf::Value* experts = find(file, "llama.expert_count"); experts != nullptr && !experts->is_array()) {
    EMBER_CHECK(experts->as_integer() == 0, "[Llama] ", what, ": llama.expert_count is ", experts->as_integer(),
                "; ember does not run mixture-of-experts models");
  }
  if (const gguf::Value* scaling = find(file, "llama.rope.scaling.type"); scaling != nullptr) {
    EMBER_CHECK(scaling->type() == gguf::ValueType::kString && scaling->as_string() == "none", "[Llama] ", what,
                ": llama.rope.scaling.type is ", *scaling, "; ember supports unscaled RoPE only");
  }
  LlamaConfig c;
  c.n_layer = integer_key(file, what, "llama.block_count");
  c.dim = integer_key(file, what, "llama.embedding_length");
  c.ffn_dim = integer_key(file, what, "llama.feed_forward_length");
  c.n_head = integer_key(file, what, "llama.attention.head_count");
  c.n_kv_head = integer_key(file, what, "llama.attention.head_count_kv", c.n_head);
  c.context_length = integer_key(file, what, "llama.context_length");
  EMBER_CHECK(c.dim % c.n_head == 0, "[Llama] ", what, ": embedding_length ", c.dim,
              " is not a multiple of head_count ", c.n_head);
  EMBER_CHECK(c.n_head % c.n_kv_head == 0, "[Llama] ", what, ": head_count ", c.n_head,
              " is not a multiple of head_count_kv ", c.n_kv_head);
  c.head_dim = c.dim / c.n_head;
  c.rope_dim = integer_key(file, what, "llama.rope.dimension_count", c.head_dim);
  EMBER_CHECK(c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim, "[Llama] ", what, ": llama.rope.dimension_count ",
              c.rope_dim, " must be even and at most the head size ", c.head_dim);
  c.rope_base = float_key(file, what, "llama.rope.freq_base", 10000.0);
  c.norm_eps = float_key(file, what, "llama.attention.layer_norm_rms_epsilon");
  EMBER_CHECK(c.rope_base > 0 && c.norm_eps > 0, "[Llama] ", what, ": rope.freq_base ", c.rope_base,
              " and layer_norm_rms_epsilon ", c.norm_eps, " must be positive");
  const Tensor* embedding = file.find_tensor("token_embd.weight");
  EMBER_CHECK(embedding != nullptr && embedding->dim() == 2, "[Llama] ", what,
              ": no 2-D tensor 'token_embd.weight' (the token embedding)");
  c.vocab_size = integer_key(file, what, "llama.vocab_size", embedding->size(0));
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  return c;
}

// --- modules --------------------------------------------------------------------------------------

LlamaLinear::LlamaLinear(Tensor w) {
  weight = is_floating(w.dtype()) ? register_parameter("weight", std::move(w), false)
                                  : register_buffer("weight", std::move(w));
}

void LlamaLinear::prepare() {
  if (is_block_quantized(weight.dtype())) interleaved_.prepare();
}

Tensor LlamaLinear::forward(const Tensor& x) {
  return is_block_quantized(weight.dtype()) ? interleaved_.apply(x) : linear(x, weight);
}

LlamaAttention::LlamaAttention(const LlamaConfig& c, Tensor q, Tensor k, Tensor v, Tensor out) : config(c) {
  attn_q = register_module("attn_q", std::make_shared<LlamaLinear>(std::move(q)));
  attn_k = register_module("attn_k", std::make_shared<LlamaLinear>(std::move(k)));
  attn_v = register_module("attn_v", std::make_shared<LlamaLinear>(std::move(v)));
  attn_output = register_module("attn_output", std::make_shared<LlamaLinear>(std::move(out)));
  qkv_ = InterleavedStack({&attn_q->weight, &attn_k->weight, &attn_v->weight});
}

void LlamaAttention::prepare() {
  if (qkv_.stackable()) {
    qkv_.prepare();
  } else {
    for (const auto& linear : {attn_q, attn_k, attn_v}) linear->prepare();
  }
  attn_output->prepare();
}

Tensor LlamaAttention::forward(const Tensor&) {
  EMBER_FAIL("[LlamaAttention] needs the positions' rotations: call Llama::forward");
}

std::array<Tensor, 3> LlamaAttention::project(const Tensor& x) {
  const int64_t heads = config.n_head, kv_heads = config.n_kv_head, head_dim = config.head_dim;
  if (!qkv_.stackable()) return {(*attn_q)(x), (*attn_k)(x), (*attn_v)(x)};
  const Tensor qkv = qkv_.apply(x);
  return {qkv.narrow(2, 0, heads * head_dim), qkv.narrow(2, heads * head_dim, kv_heads * head_dim),
          qkv.narrow(2, (heads + kv_heads) * head_dim, kv_heads * head_dim)};
}

Tensor LlamaAttention::attend_newest(const Tensor& q, const Tensor& keys, const Tensor& values) const {
  // The newest position sees every cached one. The query heads that share a key/value head (head h
  // reads h / group) are that head's queries: (B, Hq, 1, D) as (B, Hk, group, D), one attention
  // tile per key/value head instead of one per query head, each reading its keys once.
  const int64_t batch = q.size(0), heads = config.n_head, kv_heads = config.n_kv_head, head_dim = config.head_dim;
  return scaled_dot_product_attention(q.reshape({batch, kv_heads, heads / kv_heads, head_dim}), keys, values)
      .reshape({batch, heads, 1, head_dim});
}

Tensor LlamaAttention::forward_decode(const Tensor& x, const std::vector<LlamaCache*>& caches, size_t layer,
                                      const Tensor& cos, const Tensor& sin) {
  const int64_t batch = x.size(0);
  const int64_t heads = config.n_head, kv_heads = config.n_kv_head, head_dim = config.head_dim;
  const auto [q_rows, k_rows, v_rows] = project(x);
  const Tensor q = rope(q_rows.view({batch, 1, heads, head_dim}), cos, sin).transpose(1, 2);
  const Tensor k = rope(k_rows.view({batch, 1, kv_heads, head_dim}), cos, sin).transpose(1, 2);
  const Tensor v = v_rows.view({batch, 1, kv_heads, head_dim}).transpose(1, 2);
  std::vector<Tensor> ys;
  for (int64_t b = 0; b < batch; ++b) {
    LlamaCache& cache = *caches[static_cast<size_t>(b)];
    const int64_t start = cache.length;
    Tensor& keys = cache.keys[layer];
    Tensor& values = cache.values[layer];
    keys.narrow(2, start, 1).copy_(k.narrow(0, b, 1));
    values.narrow(2, start, 1).copy_(v.narrow(0, b, 1));
    ys.push_back(attend_newest(q.narrow(0, b, 1), keys.narrow(2, 0, start + 1), values.narrow(2, 0, start + 1)));
  }
  const Tensor y = batch == 1 ? ys[0] : cat(ys, 0);
  return (*attn_output)(y.transpose(1, 2).reshape({batch, 1, heads * head_dim}));
}

Tensor LlamaAttention::forward_at(const Tensor& x, int64_t start, Tensor* cache_keys, Tensor* cache_values,
                                  const Tensor& cos, const Tensor& sin) {
  const int64_t batch = x.size(0), length = x.size(1), end = start + length;
  const int64_t heads = config.n_head, kv_heads = config.n_kv_head, head_dim = config.head_dim;
  const auto [q_rows, k_rows, v_rows] = project(x);
  const Tensor q = rope(q_rows.view({batch, length, heads, head_dim}), cos, sin).transpose(1, 2);
  const Tensor k = rope(k_rows.view({batch, length, kv_heads, head_dim}), cos, sin).transpose(1, 2);
  const Tensor v = v_rows.view({batch, length, kv_heads, head_dim}).transpose(1, 2);
  Tensor keys = k, values = v;
  if (cache_keys != nullptr) {
    cache_keys->narrow(2, start, length).copy_(k);
    cache_values->narrow(2, start, length).copy_(v);
    keys = cache_keys->narrow(2, 0, end);
    values = cache_values->narrow(2, 0, end);
  }
  const bool grouped = kv_heads != heads;
  Tensor y;
  if (length == 1) {
    y = attend_newest(q, keys, values);
  } else if (start == 0) {
    y = scaled_dot_product_attention(q, keys, values, std::nullopt, 0.0, /*is_causal=*/true, std::nullopt, grouped);
  } else {  // queries [start, end) against keys [0, end): query i keeps keys j <= start + i
    const Tensor keep = ge(arange(start, end).unsqueeze(1), arange(end).unsqueeze(0));
    y = scaled_dot_product_attention(q, keys, values, keep, 0.0, false, std::nullopt, grouped);
  }
  return (*attn_output)(y.transpose(1, 2).reshape({batch, length, heads * head_dim}));
}

LlamaBlock::LlamaBlock(const LlamaConfig& c, std::shared_ptr<LlamaAttention> attn, Tensor attn_norm_weight,
                       Tensor ffn_norm_weight, Tensor gate, Tensor up, Tensor down) {
  const autograd::NoGradGuard no_grad;
  attn_norm = register_module("attn_norm", std::make_shared<nn::RMSNorm>(Shape{c.dim}, c.norm_eps));
  attn_norm->weight.copy_(attn_norm_weight);
  // The attention's weights are the block's children, as the file names them (blk.N.attn_q.weight):
  // the attention module itself is not registered.
  attention = std::move(attn);
  register_module("attn_q", attention->attn_q);
  register_module("attn_k", attention->attn_k);
  register_module("attn_v", attention->attn_v);
  register_module("attn_output", attention->attn_output);
  ffn_norm = register_module("ffn_norm", std::make_shared<nn::RMSNorm>(Shape{c.dim}, c.norm_eps));
  ffn_norm->weight.copy_(ffn_norm_weight);
  ffn_gate = register_module("ffn_gate", std::make_shared<LlamaLinear>(std::move(gate)));
  ffn_up = register_module("ffn_up", std::make_shared<LlamaLinear>(std::move(up)));
  ffn_down = register_module("ffn_down", std::make_shared<LlamaLinear>(std::move(down)));
  gate_up_ = InterleavedStack({&ffn_gate->weight, &ffn_up->weight});
}

void LlamaBlock::prepare() {
  attention->prepare();
  if (gate_up_.stackable()) {
    gate_up_.prepare();
  } else {
    ffn_gate->prepare();
    ffn_up->prepare();
  }
  ffn_down->prepare();
}

Tensor LlamaBlock::forward(const Tensor&) {
  EMBER_FAIL("[LlamaBlock] needs the positions' rotations: call Llama::forward");
}

Tensor LlamaBlock::forward_at(const Tensor& x, int64_t start, Tensor* cache_keys, Tensor* cache_values,
                              const Tensor& cos, const Tensor& sin) {
  return feed_forward(x + attention->forward_at((*attn_norm)(x), start, cache_keys, cache_values, cos, sin));
}

Tensor LlamaBlock::forward_decode(const Tensor& x, const std::vector<LlamaCache*>& caches, size_t layer,
                                  const Tensor& cos, const Tensor& sin) {
  return feed_forward(x + attention->forward_decode((*attn_norm)(x), caches, layer, cos, sin));
}

Tensor LlamaBlock::feed_forward(const Tensor& h) {
  const Tensor n = (*ffn_norm)(h);
  if (gate_up_.stackable()) {
    const Tensor gate_up = gate_up_.apply(n);
    const int64_t ffn = ffn_gate->weight.size(0);
    return h + (*ffn_down)(silu(gate_up.narrow(2, 0, ffn)) * gate_up.narrow(2, ffn, ffn_up->weight.size(0)));
  }
  return h + (*ffn_down)(silu((*ffn_gate)(n)) * (*ffn_up)(n));
}

// --- the model ------------------------------------------------------------------------------------

Llama::Llama(const LlamaConfig& c, Tensor embedding) : config(c) {
  const auto table = register_module("token_embd", std::make_shared<LlamaLinear>(std::move(embedding)));
  token_embd = table->weight;
  output = table;  // replaced by the model's own output layer when it has one
  blk = register_module("blk", std::make_shared<nn::ModuleList>());
  output_norm = register_module("output_norm", std::make_shared<nn::RMSNorm>(Shape{c.dim}, c.norm_eps));
  for (int64_t i = 0; i < c.rope_dim / 2; ++i) {
    inverse_frequencies_.push_back(
        std::pow(c.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dim)));
  }
}

std::shared_ptr<Llama> Llama::from_gguf(const std::string& path, const LlamaLoadOptions& options) {
  return from_gguf(gguf::map(path), path, options);
}

std::shared_ptr<Llama> Llama::from_gguf(const gguf::File& file, const std::string& what,
                                        const LlamaLoadOptions& options) {
  const LlamaConfig c = llama_config(file, what);
  // Every tensor the architecture needs, with its shape; then one error listing what is missing,
  // unexpected, mis-shaped or of a type the products do not take.
  const int64_t q_rows = c.n_head * c.head_dim, kv_rows = c.n_kv_head * c.head_dim;
  std::map<std::string, Shape> expected{{"token_embd.weight", {c.vocab_size, c.dim}}, {"output_norm.weight", {c.dim}}};
  if (!c.tied_output) expected["output.weight"] = {c.vocab_size, c.dim};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    expected[p + "attn_norm.weight"] = {c.dim};
    expected[p + "attn_q.weight"] = {q_rows, c.dim};
    expected[p + "attn_k.weight"] = {kv_rows, c.dim};
    expected[p + "attn_v.weight"] = {kv_rows, c.dim};
    expected[p + "attn_output.weight"] = {c.dim, q_rows};
    expected[p + "ffn_norm.weight"] = {c.dim};
    expected[p + "ffn_gate.weight"] = {c.ffn_dim, c.dim};
    expected[p + "ffn_up.weight"] = {c.ffn_dim, c.dim};
    expected[p + "ffn_down.weight"] = {c.dim, c.ffn_dim};
  }
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> unexpected, misshaped, mistyped, missing;
  for (const auto& [name, tensor] : file.tensors) {
    const auto it = expected.find(name);
    if (it == expected.end()) {
      unexpected.push_back(name);
      continue;
    }
    std::ostringstream problem;
    if (tensor.shape() != it->second) {
      problem << name << " is " << tensor.shape() << ", expected " << it->second;
      misshaped.push_back(problem.str());
    } else if (!is_weight_dtype(tensor.dtype()) || (tensor.dim() == 1 && !is_floating(tensor.dtype()))) {
      problem << name << " is " << tensor.dtype();
      mistyped.push_back(problem.str());
    }
    tensors[name] = tensor;
  }
  for (const auto& [name, shape] : expected) {
    if (tensors.count(name) == 0) missing.push_back(name);
  }
  if (!unexpected.empty() || !misshaped.empty() || !mistyped.empty() || !missing.empty()) {
    std::ostringstream message;
    const auto list = [&](const char* label, const std::vector<std::string>& items) {
      if (items.empty()) return;
      message << "; " << label << " (" << items.size() << "): ";
      for (size_t i = 0; i < items.size() && i < 8; ++i) message << (i > 0 ? ", " : "") << items[i];
      if (items.size() > 8) message << ", ...";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mis-shaped", misshaped);
    list("of an unsupported type (weights: float, q8_0, q4_0, q4_1; norms: float)", mistyped);
    EMBER_FAIL("[Llama] ", what, ": the tensors do not match the llama architecture of its metadata (", c.n_layer,
               " blocks, ", c.dim, " dims, ", c.n_head, "/", c.n_kv_head, " heads, ffn ", c.ffn_dim, ", vocabulary ",
               c.vocab_size, ")", message.str());
  }
  const auto weight = [&](const std::string& name) { return prepare_weight(tensors.at(name), options); };
  const auto norm = [&](const std::string& name) { return tensors.at(name).to(kFloat32); };
  std::shared_ptr<Llama> model(new Llama(c, weight("token_embd.weight")));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto attention = std::make_shared<LlamaAttention>(c, weight(p + "attn_q.weight"), weight(p + "attn_k.weight"),
                                                      weight(p + "attn_v.weight"), weight(p + "attn_output.weight"));
    model->blk->push_back(std::make_shared<LlamaBlock>(c, std::move(attention), norm(p + "attn_norm.weight"),
                                                       norm(p + "ffn_norm.weight"), weight(p + "ffn_gate.weight"),
                                                       weight(p + "ffn_up.weight"), weight(p + "ffn_down.weight")));
  }
  {
    const autograd::NoGradGuard no_grad;
    model->output_norm->weight.copy_(norm("output_norm.weight"));
  }
  if (!c.tied_output)
    model->output = model->register_module("output", std::make_shared<LlamaLinear>(weight("output.weight")));
  model->eval();
  // The interleaved copies now: loading pays for them, not the first token.
  for (int64_t l = 0; l < c.n_layer; ++l) model->blk->at<LlamaBlock>(l)->prepare();
  model->output->prepare();
  return model;
}

LlamaCache Llama::make_cache(int64_t capacity, int64_t batch) const {
  EMBER_CHECK(capacity > 0 && capacity <= config.context_length, "[Llama] a cache holds 1 to ", config.context_length,
              " positions (the model's context), got ", capacity);
  EMBER_CHECK(batch > 0, "[Llama] a cache needs a positive batch, got ", batch);
  LlamaCache cache;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    cache.keys.push_back(zeros({batch, config.n_kv_head, capacity, config.head_dim}));
    cache.values.push_back(zeros({batch, config.n_kv_head, capacity, config.head_dim}));
  }
  return cache;
}

std::pair<Tensor, Tensor> Llama::rotation(const std::vector<int64_t>& positions) const {
  const int64_t half = config.rope_dim / 2, length = static_cast<int64_t>(positions.size());
  std::vector<float> cos(static_cast<size_t>(length * half)), sin(cos.size());
  for (int64_t t = 0; t < length; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(positions[static_cast<size_t>(t)]) * inverse_frequencies_[static_cast<size_t>(i)];
      cos[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  return {from_vector(cos, Shape{length, half}), from_vector(sin, Shape{length, half})};
}

Tensor Llama::embed(const Tensor& idx) const {
  EMBER_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "[Llama] expected int64 token ids of shape (B, T), got ",
              idx.dtype(), " ", idx.shape());
  const Tensor ids = idx.contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    EMBER_CHECK(id[i] >= 0 && id[i] < config.vocab_size, "[Llama] token id ", id[i], " is outside the vocabulary of ",
                config.vocab_size);
  }
  if (is_floating(token_embd.dtype())) return embedding(token_embd, ids);
  // Block-quantized rows are dequantized one by one: only the rows asked for.
  const BlockTraits& traits = block_traits(token_embd.dtype());
  const int64_t row_bytes = storage_bytes(token_embd.dtype(), config.dim);
  Tensor out = empty({ids.size(0), ids.size(1), config.dim});
  const auto* table = static_cast<const uint8_t*>(token_embd.data_ptr());
  float* rows = out.data_ptr<float>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    traits.to_float(table + id[i] * row_bytes, rows + i * config.dim, config.dim);
  return out;
}

Tensor Llama::run(const Tensor& idx, int64_t start, LlamaCache* cache, bool last_only) {
  const int64_t length = idx.size(1);
  Tensor x = embed(idx);
  std::vector<int64_t> positions(static_cast<size_t>(length));
  for (int64_t t = 0; t < length; ++t) positions[static_cast<size_t>(t)] = start + t;
  const auto [cos, sin] = rotation(positions);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    Tensor* keys = cache != nullptr ? &cache->keys[static_cast<size_t>(l)] : nullptr;
    Tensor* values = cache != nullptr ? &cache->values[static_cast<size_t>(l)] : nullptr;
    x = blk->at<LlamaBlock>(l)->forward_at(x, start, keys, values, cos, sin);
  }
  if (last_only) x = x.narrow(1, length - 1, 1);
  return (*output)((*output_norm)(x));
}

Tensor Llama::forward(const Tensor& idx) {
  EMBER_CHECK(idx.dim() == 2 && idx.size(1) >= 1 && idx.size(1) <= config.context_length,
              "[Llama] expected (B, T) ids with 1 <= T <= ", config.context_length, ", got ", idx.shape());
  return run(idx, 0, nullptr, false);
}

Tensor Llama::forward_cached(const Tensor& idx, LlamaCache& cache, bool last_only) {
  EMBER_CHECK(static_cast<int64_t>(cache.keys.size()) == config.n_layer && idx.dim() == 2 &&
                  idx.size(0) == cache.keys[0].size(0),
              "[Llama] the cache was made for another model or batch size");
  const int64_t start = cache.length, length = idx.size(1);
  EMBER_CHECK(length >= 1, "[Llama] no token ids to process");
  EMBER_CHECK(start + length <= cache.capacity(), "[Llama] ", start, " cached and ", length,
              " new positions exceed the cache's ", cache.capacity());
  Tensor logits = run(idx, start, &cache, last_only);
  cache.length = start + length;
  return logits;
}

Tensor Llama::decode(const std::vector<int64_t>& ids, const std::vector<LlamaCache*>& caches) {
  EMBER_CHECK(!ids.empty() && ids.size() == caches.size(), "[Llama] decode takes one id per cache, got ", ids.size(),
              " ids and ", caches.size(), " caches");
  std::vector<int64_t> positions;
  for (size_t b = 0; b < caches.size(); ++b) {
    const LlamaCache* cache = caches[b];
    EMBER_CHECK(
        cache != nullptr && static_cast<int64_t>(cache->keys.size()) == config.n_layer && cache->keys[0].size(0) == 1,
        "[Llama] decode: cache ", b, " is not a batch-1 cache of this model");
    EMBER_CHECK(cache->length < cache->capacity(), "[Llama] decode: cache ", b, " is full (", cache->capacity(),
                " positions)");
    for (size_t other = 0; other < b; ++other) {
      EMBER_CHECK(caches[other] != cache, "[Llama] decode: caches ", other, " and ", b, " are the same cache");
    }
    positions.push_back(cache->length);
  }
  const int64_t batch = static_cast<int64_t>(ids.size());
  Tensor x = embed(from_vector(ids).view({batch, 1}));
  auto [cos, sin] = rotation(positions);
  cos = cos.view({batch, 1, config.rope_dim / 2});
  sin = sin.view({batch, 1, config.rope_dim / 2});
  for (int64_t l = 0; l < config.n_layer; ++l) {
    x = blk->at<LlamaBlock>(l)->forward_decode(x, caches, static_cast<size_t>(l), cos, sin);
  }
  for (LlamaCache* cache : caches) ++cache->length;
  return (*output)((*output_norm)(x)).view({batch, config.vocab_size});
}

// --- generation -----------------------------------------------------------------------------------

std::vector<int64_t> generate(Llama& model, LlamaCache& cache, const std::vector<int64_t>& prompt, int64_t max_tokens,
                              const SamplingOptions& options, const std::vector<int64_t>& stop,
                              const std::function<void(int64_t)>& on_token) {
  check_generation(prompt, max_tokens, model.config.vocab_size);
  EMBER_CHECK(cache.keys.size() == static_cast<size_t>(model.config.n_layer) && cache.keys[0].size(0) == 1,
              "[generate] the cache was made for another model, or for more than one sequence");
  // The new tokens' keys go into the cache but the last one's: it is only drawn.
  const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(0, max_tokens - 1);
  EMBER_CHECK(needed <= cache.capacity(), "[generate] the prompt (", prompt.size(), " tokens) and ", max_tokens,
              " new tokens do not fit the context of ", cache.capacity(), " positions");
  const autograd::NoGradGuard no_grad;
  // Reuse what the cache holds of this prompt (reusable_prefix).
  size_t common = 0;
  const size_t reusable = std::min(cache.tokens.size(), reusable_prefix(prompt.size()));
  while (common < reusable && cache.tokens[common] == prompt[common]) ++common;
  cache.length = static_cast<int64_t>(common);
  cache.tokens.resize(common);
  const auto run = [&](std::vector<int64_t> ids) {
    cache.tokens.insert(cache.tokens.end(), ids.begin(), ids.end());
    const Tensor logits = model.forward_cached(from_vector(ids).view({1, -1}), cache, /*last_only=*/true);
    return logits.select(0, 0).select(0, 0);
  };
  Sampler sampler(options);
  std::vector<int64_t> out, history = prompt;
  Tensor logits = run(std::vector<int64_t>(prompt.begin() + static_cast<std::ptrdiff_t>(common), prompt.end()));
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    const int64_t id = sampler.sample(logits, history);
    out.push_back(id);
    history.push_back(id);
    if (on_token) on_token(id);
    if (std::find(stop.begin(), stop.end(), id) != stop.end() || static_cast<int64_t>(out.size()) == max_tokens) break;
    logits = run({id});
  }
  return out;
}

size_t reusable_prefix(size_t prompt_tokens) { return prompt_tokens >= 2 ? prompt_tokens - 2 : 0; }

LlamaSpeed measure_speed(Llama& model, int64_t prompt_tokens, int64_t gen_tokens, int repeats, int64_t batch) {
  EMBER_CHECK(prompt_tokens > 0 && gen_tokens > 0 && repeats > 0 && batch > 0,
              "[bench llm] the token counts, repeats and batch must be positive, got ", prompt_tokens, ", ", gen_tokens,
              ", ", repeats, " and ", batch);
  const autograd::NoGradGuard no_grad;
  std::vector<int64_t> ids(static_cast<size_t>(std::max(prompt_tokens, gen_tokens)));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>((i * 2654435761ULL + 17) % static_cast<uint64_t>(model.config.vocab_size));
  LlamaCache cache = model.make_cache(std::min(model.config.context_length, std::max(prompt_tokens, gen_tokens)));
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto seconds = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<LlamaCache> sequences;  // batch > 1: a cache per sequence
  std::vector<LlamaCache*> pointers;
  for (int64_t b = 0; batch > 1 && b < batch; ++b) sequences.push_back(model.make_cache(cache.capacity()));
  for (LlamaCache& c : sequences) pointers.push_back(&c);
  std::vector<double> pp, tg;
  const Tensor prompt = from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + prompt_tokens)).view({1, -1});
  for (int r = 0; r <= repeats; ++r) {  // the first run warms up
    cache.length = 0;
    auto start = std::chrono::steady_clock::now();
    model.forward_cached(prompt, cache, /*last_only=*/true);
    const double prompt_s = seconds(start);
    cache.length = 0;
    for (LlamaCache& c : sequences) c.length = 0;
    start = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < gen_tokens; ++t) {
      if (batch == 1) {
        model.forward_cached(from_vector(std::vector<int64_t>{ids[static_cast<size_t>(t)]}).view({1, 1}), cache, true);
      } else {  // sequence b's token t is id t + b: the sequences differ
        std::vector<int64_t> next(static_cast<size_t>(batch));
        for (int64_t b = 0; b < batch; ++b) {
          next[static_cast<size_t>(b)] = ids[static_cast<size_t>((t + b) % static_cast<int64_t>(ids.size()))];
        }
        model.decode(next, pointers);
      }
    }
    const double gen_s = seconds(start);
    if (r == 0) continue;
    pp.push_back(static_cast<double>(prompt_tokens) / prompt_s);
    tg.push_back(static_cast<double>(batch * gen_tokens) / gen_s);
  }
  return {median(pp), median(tg)};
}

}  // namespace ember::models

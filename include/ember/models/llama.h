// Llama-family language models read from GGUF files, as llama.cpp runs them: token embedding,
// blocks of pre-RMSNorm grouped-query self-attention with rotary position embeddings and a SwiGLU
// feed-forward, a final RMSNorm and an output layer (its own, or tied to the embedding). The
// architecture comes from the file's metadata (general.architecture = "llama" and the llama.*
// keys), the tensors from their llama.cpp names ("token_embd.weight", "blk.0.attn_q.weight", ...),
// so the module's state_dict() names are the file's. Quantized weights (q8_0, q4_0, q4_1) stay
// quantized: the products quantize the activations on the fly (ember/quant.h), as llama.cpp does.
// from_gguf(path) maps the file (gguf::map): the stored weights are the file's pages, and each
// quantized matrix gets one interleaved copy for the mat-vec kernels (LlamaLinear).
//
//   auto model = models::Llama::from_gguf("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
//   models::LlamaCache cache = model->make_cache(512);
//   Tensor logits = model->forward_cached(from_vector<int64_t>({1, 2, 3}).view({1, -1}), cache);
//
// RoPE: llama.cpp's converter stores the query and key rows so that each head's rotation turns
// adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i / rope_dim), which is what forward() applies
// to the weights as stored (Hugging Face's rotate_half on the rows before that permutation), with
// the rope primitive (RopeStyle::kAdjacent).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/gguf.h"
#include "ember/models/language_model.h"
#include "ember/nn.h"
#include "ember/quant.h"

namespace ember::models {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // the longest context the model was trained for
  int64_t dim = 0;             // llama.embedding_length
  int64_t n_layer = 0;         // llama.block_count
  int64_t n_head = 0;          // llama.attention.head_count
  int64_t n_kv_head = 0;       // llama.attention.head_count_kv (grouped-query attention)
  int64_t ffn_dim = 0;         // llama.feed_forward_length
  int64_t head_dim = 0;        // dim / n_head
  int64_t rope_dim = 0;        // llama.rope.dimension_count (the leading dims of a head it rotates)
  double rope_base = 10000.0;  // llama.rope.freq_base
  double norm_eps = 1e-5;      // llama.attention.layer_norm_rms_epsilon
  bool tied_output = false;    // no output.weight: the output layer is the token embedding
  bool operator==(const LlamaConfig&) const = default;
};

struct LlamaLoadOptions {
  // Every quantized weight dequantized to float32 at load: the reference path, to compare with
  // implementations that compute in floats (Hugging Face transformers loading the same file).
  bool dequantize = false;
};

// Keys and values of every layer, preallocated for `capacity` positions: layer l's are keys[l] and
// values[l], (B, n_kv_head, capacity, head_dim) float32; the first `length` positions are filled.
struct LlamaCache {
  std::vector<Tensor> keys;
  std::vector<Tensor> values;
  int64_t length = 0;
  std::vector<int64_t> tokens;  // generate(): the ids whose keys and values the cache holds
  int64_t capacity() const { return keys.empty() ? 0 : keys[0].size(2); }
};

// y = x @ weight^T, the weight (out, in) as the file stores it: floating, or block-quantized (the
// product quantizes x to q8_0 blocks on the fly and reads an interleaved copy: InterleavedStack).
class LlamaLinear : public nn::Module {
 public:
  explicit LlamaLinear(Tensor weight);
  Tensor forward(const Tensor& x) override;
  // Makes a quantized weight's interleaved copy now (Llama::from_gguf does, so that loading pays for
  // it rather than the first token).
  void prepare();
  std::string name() const override { return "LlamaLinear"; }
  Tensor weight;

 private:
  InterleavedStack interleaved_{{&weight}};
};

class LlamaAttention : public nn::Module {
 public:
  LlamaAttention(const LlamaConfig& config, Tensor q, Tensor k, Tensor v, Tensor output);
  // x (B, T, dim) at positions [start, start + T): their keys and values are written into the
  // cache (layer `layer`) when one is given, and each position attends to every earlier one.
  Tensor forward(const Tensor& x) override;
  Tensor forward_at(const Tensor& x, int64_t start, Tensor* cache_keys, Tensor* cache_values, const Tensor& cos,
                    const Tensor& sin);
  // x (B, 1, dim): the next position of B sequences, sequence b's at caches[b]->length (layer
  // `layer`), rotated by cos and sin (B, 1, rope_dim / 2). Each writes its key and value into its
  // own cache and attends to its own positions.
  Tensor forward_decode(const Tensor& x, const std::vector<LlamaCache*>& caches, size_t layer, const Tensor& cos,
                        const Tensor& sin);
  std::string name() const override { return "LlamaAttention"; }
  // Makes the interleaved copies of the weights now (LlamaLinear::prepare).
  void prepare();

  std::shared_ptr<LlamaLinear> attn_q, attn_k, attn_v, attn_output;
  const LlamaConfig config;

 private:
  // x's queries, keys and values: (B, T, heads * head_dim) and twice (B, T, kv_heads * head_dim).
  std::array<Tensor, 3> project(const Tensor& x);
  // One new position's attention over `length` cached ones: q (B, heads, 1, head_dim).
  Tensor attend_newest(const Tensor& q, const Tensor& keys, const Tensor& values) const;
  InterleavedStack qkv_;  // q, k and v in one product when they stack
};

class LlamaBlock : public nn::Module {
 public:
  LlamaBlock(const LlamaConfig& config, std::shared_ptr<LlamaAttention> attention, Tensor attn_norm, Tensor ffn_norm,
             Tensor gate, Tensor up, Tensor down);
  Tensor forward(const Tensor& x) override;
  // h = x + attn(rms(x)); h + down(silu(gate(rms(h))) * up(rms(h))).
  Tensor forward_at(const Tensor& x, int64_t start, Tensor* cache_keys, Tensor* cache_values, const Tensor& cos,
                    const Tensor& sin);
  // The same for the next position of several sequences, each with its own cache
  // (LlamaAttention::forward_decode).
  Tensor forward_decode(const Tensor& x, const std::vector<LlamaCache*>& caches, size_t layer, const Tensor& cos,
                        const Tensor& sin);
  std::string name() const override { return "LlamaBlock"; }
  void prepare();

  std::shared_ptr<LlamaAttention> attention;
  std::shared_ptr<nn::RMSNorm> attn_norm, ffn_norm;
  std::shared_ptr<LlamaLinear> ffn_gate, ffn_up, ffn_down;

 private:
  // h + down(silu(gate(rms(h))) * up(rms(h))).
  Tensor feed_forward(const Tensor& h);
  InterleavedStack gate_up_;  // gate and up in one product when they stack
};

class Llama : public nn::Module {
 public:
  // Reads the model of a GGUF file, mapped (gguf::map). Errors name the file and what is wrong: another architecture,
  // a missing or malformed llama.* key, missing, unexpected or mis-shaped tensors (all of them
  // listed), or a tensor of a type the products do not take.
  static std::shared_ptr<Llama> from_gguf(const std::string& path, const LlamaLoadOptions& options = {});
  // The model of a GGUF file already read; `what` names it in errors.
  static std::shared_ptr<Llama> from_gguf(const gguf::File& file, const std::string& what,
                                          const LlamaLoadOptions& options = {});

  // idx (B, T) int64 -> next-token logits (B, T, vocab_size) float32, positions 0 .. T-1.
  Tensor forward(const Tensor& idx) override;
  // idx (B, T) at positions [cache.length, cache.length + T): keys and values go into the cache.
  // Returns the logits of every new position (B, T, vocab), or of the last one only (B, 1, vocab)
  // when last_only: prompt processing needs no other.
  Tensor forward_cached(const Tensor& idx, LlamaCache& cache, bool last_only = false);
  // One decode step of several sequences at once, each with its own cache (batch 1) at its own
  // length: ids[b] is sequence b's next token. The products run once for all of them, attention per
  // sequence; returns the next-token logits (B, vocab_size), and each cache grows by one. Each
  // row equals forward_cached of that sequence alone, bit for bit (the products sum every row in
  // one order whatever the batch: Note [interleaved weights]).
  Tensor decode(const std::vector<int64_t>& ids, const std::vector<LlamaCache*>& caches);
  // A cache for `capacity` positions (at most the model's context length) and `batch` sequences.
  LlamaCache make_cache(int64_t capacity, int64_t batch = 1) const;
  std::string name() const override { return "Llama"; }

  const LlamaConfig config;
  Tensor token_embd;  // (vocab, dim), floating or block-quantized
  std::shared_ptr<nn::ModuleList> blk;
  std::shared_ptr<nn::RMSNorm> output_norm;
  std::shared_ptr<LlamaLinear> output;  // the token embedding when tied

 private:
  Llama(const LlamaConfig& config, Tensor token_embd);
  // Rows of the embedding for idx (B, T): (B, T, dim) float32.
  Tensor embed(const Tensor& idx) const;
  Tensor run(const Tensor& idx, int64_t start, LlamaCache* cache, bool last_only);
  // cos and sin of the rotation angles at `positions`: (positions, rope_dim / 2).
  std::pair<Tensor, Tensor> rotation(const std::vector<int64_t>& positions) const;
  std::vector<double> inverse_frequencies_;
};

// The architecture a GGUF file's metadata describes; an ember::Error naming `what` when it is no
// Llama model or a key is missing or malformed.
LlamaConfig llama_config(const gguf::File& file, const std::string& what);

// Greedy or sampled continuation of `prompt` (at least one id): up to `max_tokens` new ids, stopping
// at the first id in `stop` (returned last). on_token sees each new id as it is drawn. The cache
// (batch 1) keeps what earlier calls processed, so a chat pays only for its new turn: the ids of
// `prompt` that match cache.tokens from the start are not processed again. The prompt and the new
// tokens must fit the cache's capacity (an ember::Error before anything runs otherwise).
std::vector<int64_t> generate(Llama& model, LlamaCache& cache, const std::vector<int64_t>& prompt, int64_t max_tokens,
                              const SamplingOptions& options, const std::vector<int64_t>& stop = {},
                              const std::function<void(int64_t)>& on_token = {});

// How many of a prompt's first ids may come from a cache that already holds them: all but the last
// two (the last is run again for its logits). A prompt's rows are then always computed as prompt
// processing computes them (chunks of two or more positions, whose keys and values do not depend
// on the chunking), never as a one-token decode step, whose attention sums in another order: the
// same prompt gives the same bits with or without a cache, in a chat or in `ember serve`.
size_t reusable_prefix(size_t prompt_tokens);

// llama-bench's two numbers: prompt processing (one pass over `prompt_tokens` ids into an empty
// cache) and generation (`gen_tokens` single-token steps from an empty cache), in tokens per second,
// each the median of `repeats` runs. The ids are fixed pseudo-random ones. With batch > 1,
// generation runs `batch` sequences together (Llama::decode), each from an empty cache, and counts
// the tokens of all of them.
struct LlamaSpeed {
  double prompt_tokens_per_s = 0;
  double gen_tokens_per_s = 0;
};
LlamaSpeed measure_speed(Llama& model, int64_t prompt_tokens = 512, int64_t gen_tokens = 128, int repeats = 3,
                         int64_t batch = 1);

}  // namespace ember::models

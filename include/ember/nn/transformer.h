// The Transformer's building blocks, as torch.nn: MultiheadAttention, TransformerEncoderLayer and
// TransformerEncoder. Constructor arguments and their defaults, parameter and child names
// ("self_attn.in_proj_weight", "layers.0.linear1.weight", ...), initialization, mask conventions
// and shapes follow PyTorch, so a PyTorch state_dict loads by name.
//
//   auto layer = std::make_shared<ember::nn::TransformerEncoderLayer>(
//       512, 8, ember::nn::TransformerEncoderLayerOptions{.dim_feedforward = 2048, .batch_first = true});
//   auto encoder = std::make_shared<ember::nn::TransformerEncoder>(layer, 6);
//   ember::Tensor y = encoder->forward(x, std::nullopt, padding);  // x (N, L, 512), padding (N, L) bool
//
// Masks. key_padding_mask and attn_mask are bool (true = this key is NOT attended, PyTorch's
// MultiheadAttention convention, the opposite of scaled_dot_product_attention's) or floating
// (added to the scores). A query row whose every key is masked gives NaN weights in PyTorch; in
// ember it gives NaN weights when need_weights and zeros otherwise (the flash kernel's rule).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/dtype.h"
#include "ember/nn/module.h"
#include "ember/nn/modules.h"
#include "ember/tensor.h"

namespace ember::nn {

// A float (size, size) mask with -inf above the diagonal and 0 elsewhere: key j > query i is not
// attended (torch.nn.Transformer.generate_square_subsequent_mask).
Tensor generate_square_subsequent_mask(int64_t size, DType dtype = kFloat32);

// --- MultiheadAttention ---------------------------------------------------------------------------

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, in training mode only
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool batch_first = false;
  std::optional<int64_t> kdim = std::nullopt;  // the key's features; unset: embed_dim
  std::optional<int64_t> vdim = std::nullopt;  // the value's features; unset: embed_dim
};

// What MultiheadAttention::forward returns. weights is undefined unless need_weights.
struct AttentionOutput {
  Tensor output;
  Tensor weights;
};

// Multi-head attention (torch.nn.MultiheadAttention, without add_bias_kv and add_zero_attn):
// out_proj(concat_h softmax(q_h k_h^T / sqrt(head_dim) + mask) v_h) with q, k, v the in-projections
// of query, key and value.
//
// Parameters: in_proj_weight (3E, E) when kdim == vdim == E, otherwise q_proj_weight (E, E),
// k_proj_weight (E, kdim) and v_proj_weight (E, vdim); in_proj_bias (3E); the child out_proj, a
// Linear(E, E). Initialization as PyTorch: xavier_uniform_ on the projection weights, zero biases,
// out_proj.weight as Linear's default.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});

  // Shapes: query (L, N, E), key (S, N, kdim), value (S, N, vdim) -> output (L, N, E); (N, L, E)
  // ... when batch_first; unbatched (L, E), (S, kdim), (S, vdim) -> (L, E).
  //   key_padding_mask: (N, S), or (S) unbatched; bool (true = ignore this key) or float (added).
  //   attn_mask: (L, S) or (N * num_heads, L, S); bool (true = NOT allowed) or float (added).
  //   need_weights: also return the attention weights, (N, L, S), or (N, num_heads, L, S) when
  //     !average_attn_weights (unbatched: without N); they are computed explicitly. Without them
  //     the attention runs as scaled_dot_product_attention (the flash kernel on the CPU).
  //   is_causal: a hint that attn_mask is the causal mask (it needs attn_mask, as in PyTorch); with
  //     no key_padding_mask and !need_weights, the causal kernel runs and attn_mask is not read.
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const std::optional<Tensor>& key_padding_mask = std::nullopt, bool need_weights = true,
                          const std::optional<Tensor>& attn_mask = std::nullopt, bool average_attn_weights = true,
                          bool is_causal = false);
  // Self-attention without masks or weights: forward(x, x, x, {}, false).output, so the module fits
  // in a Sequential and runs its hooks when called.
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "MultiheadAttention"; }
  void reset_parameters();

  const int64_t embed_dim;
  const int64_t num_heads;
  const int64_t head_dim;
  const int64_t kdim;
  const int64_t vdim;
  const double dropout;
  const bool batch_first;
  Tensor in_proj_weight;  // undefined when kdim or vdim differs from embed_dim
  Tensor q_proj_weight;   // defined only when kdim or vdim differs from embed_dim
  Tensor k_proj_weight;
  Tensor v_proj_weight;
  Tensor in_proj_bias;  // undefined when made with bias = false
  std::shared_ptr<Linear> out_proj;
};

// --- TransformerEncoderLayer ----------------------------------------------------------------------

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + sa(norm1(x)), then x + ff(norm2(x))
  bool bias = true;         // the Linear and LayerNorm biases and the attention's
};

// Self-attention and a feed-forward block, each with a residual connection and a LayerNorm
// (torch.nn.TransformerEncoderLayer). Children, in PyTorch's order and names: self_attn, linear1,
// dropout, linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});

  // src (S, N, E), (N, S, E) when batch_first, or (S, E) unbatched. src_mask and
  // src_key_padding_mask are self_attn's attn_mask and key_padding_mask (true = NOT attended).
  Tensor forward(const Tensor& src, const std::optional<Tensor>& src_mask,
                 const std::optional<Tensor>& src_key_padding_mask = std::nullopt, bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, std::nullopt); }
  std::string name() const override { return "TransformerEncoderLayer"; }
  // A new layer with the same options and a copy of this one's parameters, dtype and mode (what
  // PyTorch's copy.deepcopy gives TransformerEncoder).
  std::shared_ptr<TransformerEncoderLayer> clone() const;

  const int64_t d_model;
  const int64_t nhead;
  const TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1;
  std::shared_ptr<LayerNorm> norm2;
  std::shared_ptr<Dropout> dropout1;
  std::shared_ptr<Dropout> dropout2;

 private:
  Tensor self_attention_block(const Tensor& x, const std::optional<Tensor>& mask,
                              const std::optional<Tensor>& key_padding_mask, bool is_causal);
  Tensor feed_forward_block(const Tensor& x);
};

// --- TransformerEncoder ---------------------------------------------------------------------------

// num_layers encoder layers applied in turn, then an optional final norm
// (torch.nn.TransformerEncoder). Children: layers (a ModuleList: "layers.0", "layers.1", ...) and
// norm when given.
class TransformerEncoder : public Module {
 public:
  using LayerFactory = std::function<std::shared_ptr<TransformerEncoderLayer>()>;

  // As PyTorch: num_layers copies of encoder_layer (the same initial weights in every layer).
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer, int64_t num_layers,
                     std::shared_ptr<Module> norm = nullptr);
  // Each layer made by make_layer (independent initial weights).
  TransformerEncoder(const LayerFactory& make_layer, int64_t num_layers, std::shared_ptr<Module> norm = nullptr);

  // mask and src_key_padding_mask as TransformerEncoderLayer's. is_causal unset: detected by
  // comparing mask with generate_square_subsequent_mask (as PyTorch), so the causal kernel runs.
  Tensor forward(const Tensor& src, const std::optional<Tensor>& mask,
                 const std::optional<Tensor>& src_key_padding_mask = std::nullopt,
                 std::optional<bool> is_causal = std::nullopt);
  Tensor forward(const Tensor& src) override { return forward(src, std::nullopt); }
  std::string name() const override { return "TransformerEncoder"; }

  // The layer at index (negative counts from the end).
  std::shared_ptr<TransformerEncoderLayer> layer(int64_t index) const {
    return layers->at<TransformerEncoderLayer>(index);
  }

  const int64_t num_layers;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;  // null when made without one

 private:
  void add_layers(const LayerFactory& make_layer);
};

}  // namespace ember::nn

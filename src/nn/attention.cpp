// MultiheadAttention: PyTorch's parameters, masks and shapes around ember's attention. Inputs are
// brought to batch-first (N, L, E), projected and split into heads (N, H, L, D). Without weights
// the attention is scaled_dot_product_attention (the flash kernel: no (L, S) matrix); with them it
// is written out (scores, softmax, dropout, weights @ v), as PyTorch's need_weights path.
//
// Note [MHA masks]: PyTorch's MultiheadAttention masks say true = NOT attended; SDPA's bool mask
// says true = attended. Both masks become one mask in SDPA's terms, broadcast to (N, H, L, S):
// attn_mask (L, S) or (N*H, L, S) -> (N, H, L, S) and key_padding_mask (N, S) -> (N, 1, 1, S).
// When both are bool they merge into one bool keep-mask; otherwise each becomes additive (a bool
// mask turns into 0 / -inf, as PyTorch's _canonical_mask) and they are summed.
#include <cmath>
#include <limits>

#include "ember/nn/init.h"
#include "ember/nn/transformer.h"
#include "ember/ops.h"
#include "nn/optional_tensor.h"
#include "nn/repr.h"

namespace ember::nn {
namespace {

constexpr const char* kOp = "MultiheadAttention";

bool same_tensor(const Tensor& a, const Tensor& b) { return &a.impl() == &b.impl(); }

void check_mask_dtype(const Tensor& mask, const char* mask_name) {
  EMBER_CHECK(mask.dtype() == kBool || is_floating(mask.dtype()), "[", kOp, "] only bool and floating ", mask_name,
              " are supported, got ", mask.dtype());
}

// A mask in additive form: bool true -> -inf, false -> 0; a float mask in the compute dtype.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return mask.dtype() == dtype ? mask : mask.to(dtype);
  return zeros_like(mask, dtype).masked_fill(mask, -std::numeric_limits<double>::infinity());
}

// The two masks merged into one (Note [MHA masks]): a bool keep-mask when keep_bool and both are
// bool, otherwise additive. Either may be undefined; so is the result when both are.
Tensor merge_masks(const Tensor& attn_mask, const Tensor& key_padding_mask, DType dtype, bool keep_bool) {
  const bool all_bool = (!attn_mask.defined() || attn_mask.dtype() == kBool) &&
                        (!key_padding_mask.defined() || key_padding_mask.dtype() == kBool);
  if (keep_bool && all_bool) {
    const Tensor keep_attn = attn_mask.defined() ? attn_mask.logical_not() : Tensor();
    const Tensor keep_key = key_padding_mask.defined() ? key_padding_mask.logical_not() : Tensor();
    if (keep_attn.defined() && keep_key.defined()) return logical_and(keep_attn, keep_key);
    return keep_attn.defined() ? keep_attn : keep_key;
  }
  const Tensor add_attn = attn_mask.defined() ? additive_mask(attn_mask, dtype) : Tensor();
  const Tensor add_key = key_padding_mask.defined() ? additive_mask(key_padding_mask, dtype) : Tensor();
  if (add_attn.defined() && add_key.defined()) return add_attn + add_key;
  return add_attn.defined() ? add_attn : add_key;
}

// (N, T, E) -> (N, H, T, D).
Tensor split_heads(const Tensor& x, int64_t num_heads) {
  return x.reshape({x.size(0), x.size(1), num_heads, x.size(2) / num_heads}).transpose(1, 2);
}

}  // namespace

Tensor generate_square_subsequent_mask(int64_t size, DType dtype) {
  EMBER_CHECK(size >= 0, "[generate_square_subsequent_mask] size must be non-negative, got ", size);
  EMBER_CHECK(is_floating(dtype), "[generate_square_subsequent_mask] expects a floating dtype, got ", dtype);
  return triu(full({size, size}, -std::numeric_limits<double>::infinity(), dtype), 1);
}

// --- construction ---------------------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t embed, int64_t heads, MultiheadAttentionOptions options)
    : embed_dim(embed),
      num_heads(heads),
      head_dim(heads > 0 ? embed / heads : 0),
      kdim(options.kdim.value_or(embed)),
      vdim(options.vdim.value_or(embed)),
      dropout(options.dropout),
      batch_first(options.batch_first) {
  EMBER_CHECK(embed > 0 && heads > 0, "[", kOp, "] embed_dim and num_heads must be positive, got embed_dim=", embed,
              " and num_heads=", heads);
  EMBER_CHECK(embed % heads == 0, "[", kOp, "] embed_dim (", embed, ") must be divisible by num_heads (", heads, ")");
  EMBER_CHECK(kdim > 0 && vdim > 0, "[", kOp, "] kdim and vdim must be positive, got ", kdim, " and ", vdim);
  EMBER_CHECK(dropout >= 0.0 && dropout < 1.0, "[", kOp, "] dropout must be in [0, 1), got ", dropout);
  if (kdim == embed && vdim == embed) {
    in_proj_weight = register_parameter("in_proj_weight", ember::empty({3 * embed, embed}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", ember::empty({embed, embed}));
    k_proj_weight = register_parameter("k_proj_weight", ember::empty({embed, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", ember::empty({embed, vdim}));
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", ember::empty({3 * embed}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed, embed, options.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  // PyTorch's _reset_parameters; out_proj.weight keeps Linear's own initialization.
  for (const Tensor& w : {in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight}) {
    if (w.defined()) init::xavier_uniform_(w);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

// --- forward --------------------------------------------------------------------------------------

Tensor MultiheadAttention::forward(const Tensor& input) {
  return forward(input, input, input, std::nullopt, false).output;
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const std::optional<Tensor>& key_padding_mask, bool need_weights,
                                            const std::optional<Tensor>& attn_mask, bool average_attn_weights,
                                            bool is_causal) {
  // Ranks: batched (3-D) or unbatched (2-D), the same for all three.
  EMBER_CHECK(query.dim() == 2 || query.dim() == 3, "[", kOp,
              "] expects a 2-D (unbatched) or 3-D (batched) query, got shape ", query.shape());
  const bool batched = query.dim() == 3;
  EMBER_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), "[", kOp, "] for a ", query.dim(),
              "-D query, expects key and value of the same rank, got key ", key.shape(), " and value ", value.shape());
  // Batch-first views: (N, L, E), (N, S, kdim), (N, S, vdim).
  auto batch_first_view = [&](const Tensor& x) {
    if (!batched) return x.unsqueeze(0);
    return batch_first ? x : x.transpose(0, 1);
  };
  const Tensor q_in = batch_first_view(query), k_in = batch_first_view(key), v_in = batch_first_view(value);
  const int64_t batch = q_in.size(0), target_len = q_in.size(1), source_len = k_in.size(1);
  EMBER_CHECK(q_in.size(2) == embed_dim, "[", kOp, "] expects query features ", embed_dim, ", got query shape ",
              query.shape());
  EMBER_CHECK(k_in.size(2) == kdim && v_in.size(2) == vdim, "[", kOp, "] expects key features ", kdim,
              " and value features ", vdim, ", got key ", key.shape(), " and value ", value.shape());
  EMBER_CHECK(k_in.size(0) == batch && v_in.size(0) == batch && v_in.size(1) == source_len, "[", kOp, "] query ",
              query.shape(), ", key ", key.shape(), " and value ", value.shape(),
              " disagree in batch size or key/value length (batch_first=", repr::boolean(batch_first), ")");

  // Masks: dtypes and shapes as PyTorch's, then in batch-first 4-D form (Note [MHA masks]).
  Tensor padding, attention;
  if (key_padding_mask) {
    check_mask_dtype(*key_padding_mask, "key_padding_mask");
    const Shape expected = batched ? Shape{batch, source_len} : Shape{source_len};
    EMBER_CHECK(key_padding_mask->shape() == expected, "[", kOp, "] expects key_padding_mask of shape ", expected,
                ", got ", key_padding_mask->shape());
    padding = key_padding_mask->reshape({batch, 1, 1, source_len});
  }
  if (attn_mask) {
    check_mask_dtype(*attn_mask, "attn_mask");
    const Shape shape_2d{target_len, source_len}, shape_3d{batch * num_heads, target_len, source_len};
    EMBER_CHECK(attn_mask->shape() == shape_2d || attn_mask->shape() == shape_3d, "[", kOp,
                "] expects attn_mask of shape ", shape_2d, " or ", shape_3d, ", got ", attn_mask->shape());
    attention = attn_mask->dim() == 2 ? *attn_mask : attn_mask->reshape({batch, num_heads, target_len, source_len});
  }
  EMBER_CHECK(!is_causal || attn_mask, "[", kOp,
              "] is_causal is a hint that attn_mask is the causal mask: it needs attn_mask (see "
              "generate_square_subsequent_mask)");

  // In-projections: one GEMM for self-attention with packed weights.
  const Tensor bias_q = in_proj_bias.defined() ? in_proj_bias.narrow(0, 0, embed_dim) : Tensor();
  const Tensor bias_k = in_proj_bias.defined() ? in_proj_bias.narrow(0, embed_dim, embed_dim) : Tensor();
  const Tensor bias_v = in_proj_bias.defined() ? in_proj_bias.narrow(0, 2 * embed_dim, embed_dim) : Tensor();
  Tensor q, k, v;
  if (in_proj_weight.defined() && same_tensor(query, key) && same_tensor(key, value)) {
    const Tensor qkv = functional::linear(q_in, in_proj_weight, optional_tensor(in_proj_bias));
    q = qkv.narrow(2, 0, embed_dim);
    k = qkv.narrow(2, embed_dim, embed_dim);
    v = qkv.narrow(2, 2 * embed_dim, embed_dim);
  } else {
    const Tensor w_q = in_proj_weight.defined() ? in_proj_weight.narrow(0, 0, embed_dim) : q_proj_weight;
    const Tensor w_k = in_proj_weight.defined() ? in_proj_weight.narrow(0, embed_dim, embed_dim) : k_proj_weight;
    const Tensor w_v = in_proj_weight.defined() ? in_proj_weight.narrow(0, 2 * embed_dim, embed_dim) : v_proj_weight;
    q = functional::linear(q_in, w_q, optional_tensor(bias_q));
    k = functional::linear(k_in, w_k, optional_tensor(bias_k));
    v = functional::linear(v_in, w_v, optional_tensor(bias_v));
  }
  q = split_heads(q, num_heads);  // (N, H, L, D)
  k = split_heads(k, num_heads);  // (N, H, S, D)
  v = split_heads(v, num_heads);  // (N, H, S, D)

  const double dropout_p = is_training() ? dropout : 0.0;
  Tensor heads, weights;  // (N, H, L, D), (N, H, L, S)
  if (need_weights) {
    // PyTorch's explicit path: the weights are returned (after dropout, as PyTorch's).
    const Tensor mask = merge_masks(attention, padding, q.dtype(), false);
    Tensor scores = matmul(q * std::sqrt(1.0 / static_cast<double>(head_dim)), k.transpose(-2, -1));
    if (mask.defined()) scores = scores + mask;
    weights = functional::dropout(functional::softmax(scores, -1), dropout_p, dropout_p > 0.0);
    heads = matmul(weights, v);
  } else if (is_causal && !padding.defined()) {
    // attn_mask is the causal mask (the caller's promise): the kernel skips the masked tiles.
    heads = functional::scaled_dot_product_attention(q, k, v, std::nullopt, dropout_p, true);
  } else {
    heads = functional::scaled_dot_product_attention(
        q, k, v, optional_tensor(merge_masks(attention, padding, q.dtype(), true)), dropout_p, false);
  }

  // (N, H, L, D) -> (N, L, E) -> out_proj -> the caller's layout.
  Tensor output = functional::linear(heads.transpose(1, 2).reshape({batch, target_len, embed_dim}), out_proj->weight,
                                     optional_tensor(out_proj->bias));
  if (!batched) {
    output = output.squeeze(0);
  } else if (!batch_first) {
    output = output.transpose(0, 1);
  }
  if (weights.defined()) {
    if (average_attn_weights) weights = weights.mean({1});
    if (!batched) weights = weights.squeeze(0);
  }
  return {output, weights};
}

}  // namespace ember::nn

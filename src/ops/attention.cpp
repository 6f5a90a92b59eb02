// scaled_dot_product_attention: softmax(q k^T * scale + mask) v, forward and backward, with
// PyTorch's semantics (torch.nn.functional.scaled_dot_product_attention).
//
// Shape rule: query (..., Hq, L, E), key (..., Hk, S, E), value (..., Hk, S, Ev) of one rank >= 2
// with equal leading dims; Hq == Hk, or Hk divides Hq with enable_gqa. The output is
// (..., Hq, L, Ev) in the query's dtype (all three share one floating dtype). attn_mask is bool
// (true: the key takes part) or of the query's dtype (added to the scores) and broadcasts to
// (..., Hq, L, S); is_causal masks key j > query i and excludes attn_mask.
//
// The primitive works on 4-D operands (B, H, rows, features) with the last dim contiguous; the
// front-end folds the leading dims into B (a view when it can) and expands the mask to
// (B, Hq, L, S) with zero strides where it broadcasts, so no mask is copied. Outputs: the attention
// (B, Hq, L, Ev) and each query row's log-sum-exp of its scaled, masked scores (B, Hq, L), kept for
// the backward (+inf for a row with no key, so that its recomputed weights are exp(-inf) = 0).
//
// Masked rows: a query row whose every key is masked gives zeros (and zero gradients), as
// PyTorch's math path (its _safe_softmax) does.
// Dropout: each weight (bh, i, j) is kept when the Philox uniform at element ((bh L + i) S + j) of
// the draw is below 1 - p, exactly the mask that dropout() draws for a (B, Hq, L, S) tensor with
// the same attributes, so the reference below reproduces it; kept weights are scaled by 1/(1-p).
// Gradients: query, key and value. The mask gets none (a float mask that requires grad is an error).
//
// Cost (per head; a causal mask halves it, the kernel skipping key tiles above the diagonal):
// forward 2 L S (E + Ev) FLOPs for the two products plus ~5 L S for the online softmax; backward
// recomputes the scores (2 L S E) and adds dV, dP, dQ and dK (2 L S (Ev + Ev + E + E)), plus ~8 L S
// elementwise. Bytes: every operand once.
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/factory.h"
#include "ops/reference.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// (..., H, N, F) as (B, H, N, F): the leading dims folded into one (a view when the strides
// allow), with the last dim contiguous for the kernel.
Tensor as_4d(const Tensor& t) {
  Tensor x = t;
  if (x.dim() == 2) x = x.unsqueeze(0);
  if (x.dim() == 3) x = x.unsqueeze(0);
  if (x.dim() > 4) x = x.reshape({-1, x.size(-3), x.size(-2), x.size(-1)});
  if (x.size(-1) > 1 && x.stride(-1) != 1) x = x.contiguous();
  return x;
}

struct Geometry {
  Shape out_shape;   // (..., Hq, L, Ev)
  Shape mask_shape;  // (..., Hq, L, S): the mask's broadcast target
};

Geometry check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                      bool is_causal, bool enable_gqa) {
  detail::check_same_device(kOp, {&q, &k, &v});
  if (mask.defined()) detail::check_same_device(kOp, {&q, &mask});
  EMBER_CHECK(is_floating(q.dtype()), "[", kOp, "] expects floating-point query, key and value, got ", q.dtype());
  EMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "[", kOp,
              "] expects query, key and value of one dtype, got ", q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  EMBER_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), "[", kOp,
              "] expects query, key and value of one rank of at least 2 (..., L, E), got shapes ", q.shape(), ", ",
              k.shape(), " and ", v.shape());
  const int r = q.dim();
  EMBER_CHECK(k.size(-1) == q.size(-1), "[", kOp, "] key's last dim ", k.size(-1), " differs from query's ", q.size(-1),
              " (query ", q.shape(), ", key ", k.shape(), ")");
  EMBER_CHECK(v.size(-2) == k.size(-2), "[", kOp, "] value has ", v.size(-2), " positions but key has ", k.size(-2),
              " (key ", k.shape(), ", value ", v.shape(), ")");
  for (int d = 0; d < r - 2; ++d) {
    const bool head_dim = d == r - 3;
    EMBER_CHECK(k.size(d) == v.size(d), "[", kOp, "] key ", k.shape(), " and value ", v.shape(), " differ in dim ", d);
    if (head_dim && enable_gqa) {
      EMBER_CHECK(k.size(d) > 0 && q.size(d) % k.size(d) == 0, "[", kOp, "] with enable_gqa, the key's ", k.size(d),
                  " heads must divide the query's ", q.size(d), " (query ", q.shape(), ", key ", k.shape(), ")");
    } else {
      EMBER_CHECK(q.size(d) == k.size(d), "[", kOp, "] query ", q.shape(), " and key ", k.shape(), " differ in dim ", d,
                  head_dim ? " (different head counts need enable_gqa = true)" : "");
    }
  }
  EMBER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "[", kOp, "] dropout_p must be in [0, 1), got ", dropout_p);
  Geometry g;
  g.out_shape = q.shape();
  g.out_shape[r - 1] = v.size(-1);
  g.mask_shape = q.shape();
  g.mask_shape[r - 1] = k.size(-2);
  if (mask.defined()) {
    EMBER_CHECK(!is_causal, "[", kOp, "] takes attn_mask or is_causal, not both");
    EMBER_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), "[", kOp,
                "] expects a bool attn_mask or one of the query's dtype ", q.dtype(), ", got ", mask.dtype());
    EMBER_CHECK(!mask.requires_grad(), "[", kOp, "] computes no gradient for attn_mask: detach it");
    bool broadcasts = mask.dim() <= r;
    for (int i = 0; broadcasts && i < mask.dim(); ++i) {
      const int64_t m = mask.size(mask.dim() - 1 - i), t = g.mask_shape[r - 1 - i];
      broadcasts = m == t || m == 1;
    }
    EMBER_CHECK(broadcasts, "[", kOp, "] attn_mask of shape ", mask.shape(), " does not broadcast to ", g.mask_shape,
                " (..., heads, L, S)");
  }
  return g;
}

// The mask as a (B, Hq, L, S) operand: broadcast dims get stride 0 (no copy up to rank 4).
Tensor mask_4d(const Tensor& mask, const Shape& mask_shape) {
  if (!mask.defined()) return Tensor();
  Tensor m = detail::broadcast_view(mask, mask_shape);
  if (m.dim() > 4) m = m.contiguous().reshape({-1, m.size(-3), m.size(-2), m.size(-1)});
  while (m.dim() < 4) m = m.unsqueeze(0);
  return m;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query_arg, const Tensor& key_arg, const Tensor& value_arg,
                                    const std::optional<Tensor>& attn_mask_arg, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  const Tensor query = amp::cast(OpKind::kScaledDotProductAttention, query_arg);
  const Tensor key = amp::cast(OpKind::kScaledDotProductAttention, key_arg);
  const Tensor value = amp::cast(OpKind::kScaledDotProductAttention, value_arg);
  const std::optional<Tensor> attn_mask = amp::cast(OpKind::kScaledDotProductAttention, attn_mask_arg);
  const Tensor mask = attn_mask.value_or(Tensor());
  const Geometry g = check_inputs(query, key, value, mask, dropout_p, is_causal, enable_gqa);
  AttentionAttrs attrs{scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1)))), is_causal, dropout_p, 0,
                       0};
  if (dropout_p > 0.0) {
    const detail::RandomDraw draw = detail::reserve_random_blocks((g.mask_shape.numel() + 1) / 2);
    attrs.seed = draw.seed;
    attrs.first_block = draw.first_block;
  }
  if (!dispatch::has_kernel(OpKind::kScaledDotProductAttention, query.device())) {
    return reference::scaled_dot_product_attention(query, key, value, mask, attrs);
  }
  const DType dtype = query.dtype(), compute = detail::compute_dtype(dtype);
  const Tensor q = as_4d(query.detach().to(compute)), k = as_4d(key.detach().to(compute)),
               v = as_4d(value.detach().to(compute));
  const Tensor m = mask_4d(mask.defined() && mask.dtype() != kBool ? mask.to(compute) : mask, g.mask_shape);
  Tensor out = detail::make_empty({q.size(0), q.size(1), q.size(2), v.size(3)}, compute, query.device());
  Tensor lse = detail::make_empty({q.size(0), q.size(1), q.size(2)}, compute, query.device());
  dispatch::run(OpKind::kScaledDotProductAttention, attrs, {&q, &k, &v, &m}, {&out, &lse});
  Tensor result = out.view(g.out_shape);
  if (compute != dtype) result = result.to(dtype);

  if (autograd::needs_grad(query, key, value)) {
    autograd::record(OpKind::kScaledDotProductAttention, attrs, result, {&query, &key, &value},
                     [attrs, compute, qs = autograd::SavedTensor(q), ks = autograd::SavedTensor(k),
                      vs = autograd::SavedTensor(v), m, out, lse, q_shape = query.shape(), k_shape = key.shape(),
                      v_shape = value.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       const Tensor q_value = qs.get(), k_value = ks.get(), v_value = vs.get();
                       const Tensor go = detail::kernel_operand(grad, compute).view(out.shape());
                       Tensor gq = detail::make_empty(q_value.shape(), compute, go.device());
                       Tensor gk = detail::make_empty(k_value.shape(), compute, go.device());
                       Tensor gv = detail::make_empty(v_value.shape(), compute, go.device());
                       dispatch::run(OpKind::kAttentionGrad, attrs, {&q_value, &k_value, &v_value, &m, &out, &lse, &go},
                                     {&gq, &gk, &gv});
                       return {gq.view(q_shape), gk.view(k_shape), gv.view(v_shape)};
                     });
  }
  return result;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// Score elements (B Hq L S), halved under a causal mask, and the feature sizes.
struct AttentionSizes {
  double scores, e, ev;
};

AttentionSizes attention_sizes(const KernelCall& c) {
  const Operand &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  double scores = cost::as_double(q.size(0) * q.size(1)) * cost::as_double(q.size(2)) * cost::as_double(k.size(2));
  if (c.get<AttentionAttrs>().is_causal) scores *= 0.5;
  return {scores, cost::as_double(q.size(3)), cost::as_double(v.size(3))};
}

OpCost attention_cost(const KernelCall& c) {
  const AttentionSizes s = attention_sizes(c);
  return {s.scores * (2.0 * (s.e + s.ev) + 5.0), cost::operand_bytes(c)};
}

OpCost attention_grad_cost(const KernelCall& c) {
  const AttentionSizes s = attention_sizes(c);
  return {s.scores * (2.0 * (3.0 * s.e + 2.0 * s.ev) + 8.0), cost::operand_bytes(c)};
}

}  // namespace

void define_attention_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kScaledDotProductAttention, attention_cost);
  table.set_cost(OpKind::kAttentionGrad, attention_grad_cost);
}

// --- the reference decomposition (ops/reference.h) ------------------------------------------------

namespace reference {

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                                    const AttentionAttrs& attrs) {
  const int r = query.dim();
  Tensor k = key, v = value;
  if (r >= 3 && key.size(-3) != query.size(-3)) {  // grouped-query attention: head h reads h / group
    const int64_t group = query.size(-3) / key.size(-3);
    auto repeat_heads = [&](const Tensor& t) {
      Shape merged = t.shape();
      merged[r - 3] *= group;
      Tensor repeated = t.unsqueeze(r - 2);
      Shape expanded = repeated.shape();
      expanded[r - 2] = group;
      return repeated.expand(expanded).reshape(merged);
    };
    k = repeat_heads(key);
    v = repeat_heads(value);
  }
  const int64_t length = query.size(-2), keys = key.size(-2);
  Tensor scores = matmul(query, k.transpose(-2, -1)) * attrs.scale;
  Tensor keep;  // bool: the (query, key) pairs that take part
  if (attrs.is_causal) {
    keep = ge(arange(length, query.device()).unsqueeze(1), arange(keys, query.device()).unsqueeze(0));
  } else if (mask.defined() && mask.dtype() == kBool) {
    keep = mask;
  } else if (mask.defined()) {
    scores = scores + mask;
  }
  if (keep.defined()) scores = masked_fill(scores, logical_not(keep), -std::numeric_limits<double>::infinity());
  Tensor weights = ember::softmax(scores, -1);
  // A row with no key left (every score -inf) gives zeros, not the NaN of 0/0.
  const Tensor empty_row = eq(amax(scores.detach(), {-1}, true), -std::numeric_limits<double>::infinity());
  weights = where(empty_row, zeros_like(weights), weights);
  if (attrs.dropout_p > 0.0) {
    // The kernel's keep mask: dropout's draw over the contiguous (..., Hq, L, S) weights.
    Tensor scaled_mask, dropped;
    {
      autograd::NoGradGuard no_grad;
      const Tensor ones = ones_like(weights).contiguous();
      dropped = detail::make_empty(ones.shape(), ones.dtype(), ones.device());
      scaled_mask = detail::make_empty(ones.shape(), ones.dtype(), ones.device());
      dispatch::run(OpKind::kDropout, DropoutAttrs{attrs.dropout_p, attrs.seed, attrs.first_block}, {&ones},
                    {&dropped, &scaled_mask});
    }
    weights = weights * scaled_mask;
  }
  return matmul(weights, v);
}

}  // namespace reference
}  // namespace ember

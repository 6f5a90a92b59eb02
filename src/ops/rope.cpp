// rope: rotary position embedding (ember/ops.h).
//
// Shape rules: x (..., T, H, D), at least 3 dims; cos and sin of one shape, (T, R/2) for every
// leading index or (..., T, R/2) with x's leading dims; R = 2 * cos.size(-1) <= D. The output has
// x's shape. Dtype rules: x floating; float32 and float64 compute as they are, float16 and
// bfloat16 in float32, rounded back once; cos and sin are converted to the compute dtype.
// The Rope primitive (RopeAttrs: the pairing, and inverse for the negated angles) reads contiguous
// x, cos and sin in the compute dtype.
// Cost: 6 FLOPs per rotated pair (3 per rotated value); every operand read once.
// Backward: rotation is linear and orthogonal, so the gradient of x is the incoming gradient
// rotated by the negated angles: the same primitive with inverse flipped, itself differentiable.
// cos and sin are constants: no gradient reaches them.
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

void check_rope_operands(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  EMBER_CHECK(x.defined() && cos.defined() && sin.defined(), "[rope] x, cos and sin must all be defined");
  EMBER_CHECK(is_floating(x.dtype()), "[rope] expected a floating-point x, got ", x.dtype());
  EMBER_CHECK(is_floating(cos.dtype()) && is_floating(sin.dtype()), "[rope] expected floating-point cos and sin, got ",
              cos.dtype(), " and ", sin.dtype());
  EMBER_CHECK(x.dim() >= 3, "[rope] expected x of at least 3 dims (..., T, H, D), got shape ", x.shape());
  EMBER_CHECK(cos.shape() == sin.shape(), "[rope] cos and sin must have one shape, got ", cos.shape(), " and ",
              sin.shape());
  EMBER_CHECK(x.device() == cos.device() && x.device() == sin.device(),
              "[rope] expected x, cos and sin on one device, got ", x.device(), ", ", cos.device(), " and ",
              sin.device());
  const int64_t positions = x.size(-3), head_dim = x.size(-1);
  const bool shared = cos.dim() == 2;
  bool matches = shared || cos.dim() == x.dim() - 1;
  for (int d = 0; matches && d < cos.dim() - 1; ++d) {
    matches = cos.size(d) == (shared ? positions : x.size(d));
  }
  EMBER_CHECK(matches, "[rope] cos and sin must be (T, R/2) or x's leading dims then (T, R/2): x has shape ", x.shape(),
              ", cos ", cos.shape());
  EMBER_CHECK(2 * cos.size(-1) <= head_dim, "[rope] cos and sin rotate ", 2 * cos.size(-1),
              " values per head, more than the head size ", head_dim);
}

Tensor rope_impl(const Tensor& x, const Tensor& cos, const Tensor& sin, RopeAttrs attrs) {
  check_rope_operands(x, cos, sin);
  const DType dtype = x.dtype(), compute = detail::compute_dtype(dtype);
  const Tensor input = detail::kernel_operand(x, compute);
  const Tensor c = detail::kernel_operand(cos, compute), s = detail::kernel_operand(sin, compute);
  Tensor out = detail::make_empty(x.shape(), compute, x.device());
  dispatch::run(OpKind::kRope, attrs, {&input, &c, &s}, {&out});
  if (compute != dtype) out = out.to(dtype);
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kRope, attrs, out, {&x},
                     [c, s, attrs](const Tensor& g, autograd::GradMask) -> autograd::Grads {
                       return {rope_impl(g, c, s, RopeAttrs{attrs.style, !attrs.inverse})};
                     });
  }
  return out;
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, RopeStyle style) {
  return rope_impl(x, cos, sin, RopeAttrs{style, false});
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

OpCost rope_cost(const KernelCall& c) {
  // The rotated values: R of every D per head, R = 2 * cos.size(-1).
  const Operand &x = c.inputs[0], &cos = c.inputs[1];
  const double head_dim = cost::as_double(x.size(-1));
  const double rotated =
      head_dim == 0 ? 0 : cost::as_double(x.numel()) * 2.0 * cost::as_double(cos.size(-1)) / head_dim;
  return {3.0 * rotated, cost::operand_bytes(c)};
}

}  // namespace

void define_rope_ops(OpRuleTable& table) { table.set_cost(OpKind::kRope, rope_cost); }

}  // namespace ember

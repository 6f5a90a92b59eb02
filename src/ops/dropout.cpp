// dropout: zeroes each element with probability p and scales the survivors by 1 / (1 - p), so the
// expected value is unchanged (inverted dropout, as PyTorch).
//
// Shape and dtype rule: the output has the input's shape and floating dtype. p must be in [0, 1].
// Not training, or p == 0: the input itself is returned (no copy, no node). p == 1: zeros (as
// input * 0, so NaN and infinity stay NaN).
// Randomness: the Dropout primitive draws its keep mask as rand(float32) < 1 - p from the Philox
// key in its attributes (DropoutAttrs), so it depends on ember::manual_seed only, never on the
// thread count, and a recorded call replays the same mask. (It does not reproduce PyTorch's stream.)
// Cost: one uniform draw per element (a Philox block per 2 elements), one compare-select and one
// multiply: ~3 E FLOPs; bytes: input + output + the scaled mask (E each), kept for backward.
// Backward: grad * mask, the same scaled mask (1 / (1 - p) or 0) as the forward.
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/factory.h"
#include "ops/tensor_util.h"

namespace ember {

Tensor dropout(const Tensor& input, double p, bool training) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "[dropout] probability p must be in [0, 1], got ", p);
  EMBER_CHECK(is_floating(input.dtype()), "[dropout] expects a floating-point input, got ", input.dtype(), " (shape ",
              input.shape(), ")");
  if (!training || p == 0.0) return input;
  Tensor scaled_mask, out;
  DropoutAttrs attrs{p, 0, 0};
  {
    autograd::NoGradGuard no_grad;
    if (p == 1.0) {  // every element dropped: no draws, the mask is zeros
      scaled_mask = zeros(input.shape(), input.dtype());
      out = input * scaled_mask;
    } else {
      const Tensor x = detail::kernel_operand(input);
      const detail::RandomDraw draw = detail::reserve_random_blocks((x.numel() + 1) / 2);
      attrs.seed = draw.seed;
      attrs.first_block = draw.first_block;
      out = detail::make_empty(x.shape(), x.dtype(), x.device());
      scaled_mask = detail::make_empty(x.shape(), x.dtype(), x.device());
      dispatch::run(OpKind::kDropout, attrs, {&x}, {&out, &scaled_mask});
    }
  }
  if (autograd::needs_grad(input)) {
    autograd::record(OpKind::kDropout, attrs, out, {&input}, [scaled_mask](const Tensor& grad, autograd::GradMask) {
      return autograd::Grads{grad * scaled_mask};
    });
  }
  return out;
}

namespace {

OpCost dropout_cost(const KernelCall& c) {
  return {3.0 * cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)};
}

}  // namespace

// Registered with the creation ops' rules: a draw from the generator.
void define_dropout_ops(OpRuleTable& table) { table.set_cost(OpKind::kDropout, dropout_cost); }

}  // namespace ember

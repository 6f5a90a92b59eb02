// nn::functional::dropout: zeroes each element with probability p and scales the survivors by
// 1 / (1 - p), so the expected value is unchanged (inverted dropout, as PyTorch).
//
// Shape and dtype rule: the output has the input's shape and floating dtype. p must be in [0, 1].
// Not training, or p == 0: the input itself is returned (no copy, no node). p == 1: zeros.
// Randomness: the keep mask is ember::rand (Philox4x32-10) compared with 1 - p, so it depends on
// ember::manual_seed only, never on the thread count. (It does not reproduce PyTorch's stream.)
// Cost: one uniform draw per element (a Philox block per 4 elements), then one compare-select and
// one multiply: ~3 E FLOPs; bytes: input + output + the scaled mask (E each), kept for backward.
// Backward: grad * mask / (1 - p), the same scaled mask as the forward.
#include "autograd/function.h"
#include "ember/nn/functional.h"
#include "profiler/op_scope.h"

namespace ember::nn::functional {

Tensor dropout(const Tensor& input, double p, bool training) {
  profiler::detail::OpScope scope("dropout", {&input});  // composite: its rand, lt, where, mul record costs
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "[dropout] probability p must be in [0, 1], got ", p);
  EMBER_CHECK(is_floating(input.dtype()), "[dropout] expects a floating-point input, got ", input.dtype(), " (shape ",
              input.shape(), ")");
  if (!training || p == 0.0) return input;
  Tensor scaled_mask, out;
  {
    autograd::NoGradGuard no_grad;
    if (p == 1.0) {
      scaled_mask = zeros(input.shape(), input.dtype());
    } else {
      // Keep with probability 1 - p: u in [0, 1) is below 1 - p with exactly that probability.
      const Tensor keep = lt(rand(input.shape(), kFloat32), 1.0 - p);
      scaled_mask = where(keep, full({}, 1.0 / (1.0 - p), input.dtype()), zeros({}, input.dtype()));
    }
    out = input * scaled_mask;
  }
  if (autograd::needs_grad(input)) {
    autograd::record(
        "dropout", out, {&input},
        [scaled_mask](const Tensor& grad, autograd::GradMask) -> autograd::Grads { return {grad * scaled_mask}; });
  }
  return out;
}

}  // namespace ember::nn::functional

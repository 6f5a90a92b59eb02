// cumsum: running sums along one dim.
//
// Shape rule: the input's shape; dim may be negative, and a 0-dim input takes dim 0 or -1 (its sum
// is itself). Dtype rule, as PyTorch: floating inputs keep their dtype, integer and bool inputs give
// int64; with `dtype` the input is converted to it first (the conversion is part of the graph).
// Accumulation follows PyTorch's CPU kernel: float32 in double, 16-bit floats in float (rounded
// once per element), integers in int64 (kernels/cpu/cumsum.cpp).
// The Cumsum primitive (DimAttrs: the normalized dim) reads a contiguous input in the output's dtype.
// Cost: one add per element; bytes = input read + output written.
// Backward: the reverse cumulative sum of the gradient along dim (flip, cumsum, flip): element i
// of the input reaches every output j >= i.
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  if (dtype && *dtype != x.dtype()) return cumsum(x.to(*dtype), dim, dtype);
  const int d = normalize_axis(dim, x.dim(), "cumsum");
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : (dtype ? *dtype : kInt64);
  const DimAttrs attrs{d};
  Tensor input = detail::kernel_operand(x, out_dtype);
  if (input.dim() == 0) input = input.reshape({1});
  Tensor out = detail::make_empty(x.shape(), out_dtype, x.device());
  const Tensor out_1d = out.dim() == 0 ? out.reshape({1}) : out;
  dispatch::run(OpKind::kCumsum, attrs, {&input}, {&out_1d});
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kCumsum, attrs, out, {&x}, [d](const Tensor& g, autograd::GradMask) -> autograd::Grads {
      if (g.dim() == 0) return {g};
      return {flip(cumsum(flip(g, {d}), d), {d})};
    });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

OpCost cumsum_cost(const KernelCall& c) { return {cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)}; }

}  // namespace

void define_cumsum_ops(OpRuleTable& table) { table.set_cost(OpKind::kCumsum, cumsum_cost); }

}  // namespace ember

// tril and triu: the lower / upper triangle of the last two dims, batched over the leading ones.
//
// Shape and dtype rule: the input's shape (at least 2-D) and dtype, any dtype. `diagonal` picks the
// boundary as torch.tril / torch.triu: element (i, j) of each matrix is kept when j - i <= diagonal
// (tril) or j - i >= diagonal (triu), and zeroed otherwise; any diagonal is allowed.
// The Tril and Triu primitives (TriangleAttrs) read a contiguous input (non-contiguous inputs are
// copied first) and write a new contiguous output (kernels/cpu/triangle.cpp).
// Cost: no FLOPs; bytes = input read + output written.
// Backward: the same triangle of the gradient (a fixed mask is a linear map that is its own
// adjoint).
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

Tensor triangle(OpKind op, const Tensor& x, int64_t diagonal) {
  EMBER_CHECK(x.dim() >= 2, "[", op_name(op), "] expects an input with at least 2 dimensions, got shape ", x.shape());
  const TriangleAttrs attrs{diagonal};
  const Tensor input = detail::kernel_operand(x);
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  dispatch::run(op, attrs, {&input}, {&out});
  if (autograd::needs_grad(x)) {
    autograd::record(op, attrs, out, {&x}, [op, diagonal](const Tensor& g, autograd::GradMask) -> autograd::Grads {
      return {op == OpKind::kTril ? tril(g, diagonal) : triu(g, diagonal)};
    });
  }
  return out;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(OpKind::kTril, x, diagonal); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(OpKind::kTriu, x, diagonal); }

// --- cost rules ----------------------------------------------------------------------------------

namespace {

OpCost triangle_cost(const KernelCall& c) { return {0.0, cost::operand_bytes(c)}; }

}  // namespace

void define_triangle_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kTril, triangle_cost);
  table.set_cost(OpKind::kTriu, triangle_cost);
}

}  // namespace ember

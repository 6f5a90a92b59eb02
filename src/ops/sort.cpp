// sort, argsort and topk: values and their int64 indices along one dim.
//
// Shape rule: sort keeps the shape; topk puts k (0 <= k <= size(dim)) along dim. dim may be
// negative; a 0-dim input is one element (dim 0 or -1; topk gives it for k 0 or 1, as PyTorch).
// Dtype rule: the values keep the input's dtype; the indices are int64. sort takes every dtype,
// topk every dtype but bool (as PyTorch on the CPU).
//
// Order (Note [sort order] in kernels/cpu/sort.cpp): NaN ranks above every number; equal values
// keep their index order, so sort is always stable (stable=false allows it; PyTorch's unstable
// sort may order ties otherwise) and topk takes tied values lowest index first. topk with
// sorted = false returns the k elements in an unspecified order.
//
// The Sort (SortAttrs) and TopK (TopKAttrs) primitives read a contiguous input and write
// contiguous values and indices. topk selects with a heap of k (small k) or a partition (large k),
// never a full sort; argsort is sort's indices.
// Cost: sort counts n * ceil(log2 n) comparisons per line of n, topk n per line (the heap's
// replacements are rare on data in no particular order); bytes = input + values + indices.
// Backward: the values' gradient scattered back to the positions the indices name (zeros
// elsewhere); the indices are not differentiable.
#include <algorithm>
#include <cmath>
#include <utility>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

// A 0-dim tensor as a 1-D tensor of one element (a view), so kernels see one line.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// Records values' backward: g goes to the input positions `indices` names along d.
void record_selection(OpKind op, const Attrs& attrs, const Tensor& x, const Tensor& values, const Tensor& indices,
                      int d) {
  if (!autograd::needs_grad(x)) return;
  autograd::record(op, attrs, values, {&x},
                   [d, shape = x.shape(), si = autograd::SavedTensor(indices)](const Tensor& g, autograd::GradMask)
                       -> autograd::Grads { return {scatter_add(autograd::zeros_for(shape, g), d, si.get(), g)}; });
}

// Runs `op` on x into new values of `shape` (x's dtype) and int64 indices.
ValuesAndIndices run_selection(OpKind op, const Attrs& attrs, const Tensor& x, const Shape& shape) {
  ValuesAndIndices out{detail::make_empty(shape, x.dtype(), x.device()), detail::make_empty(shape, kInt64, x.device())};
  const Tensor input = at_least_1d(detail::kernel_operand(x));
  const Tensor values = at_least_1d(out.values), indices = at_least_1d(out.indices);
  dispatch::run(op, attrs, {&input}, {&values, &indices});
  return out;
}

}  // namespace

ValuesAndIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  const int d = normalize_axis(dim, x.dim(), "sort");
  const SortAttrs attrs{d, descending, stable};
  ValuesAndIndices out = run_selection(OpKind::kSort, attrs, x, x.shape());
  record_selection(OpKind::kSort, attrs, x, out.values, out.indices, d);
  return out;
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  autograd::NoGradGuard no_grad;  // the indices only
  return sort(x, dim, descending, stable).indices;
}

ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const int d = normalize_axis(dim, x.dim(), "topk");
  EMBER_CHECK(x.dtype() != kBool, "[topk] does not support bool input (shape ", x.shape(), ")");
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  EMBER_CHECK(k >= 0 && k <= size, "[topk] selected index k out of range: k = ", k, " for dimension ", d, " of size ",
              size, " (input shape ", x.shape(), ")");
  Shape shape = x.shape();
  if (x.dim() > 0) shape[d] = k;
  // A 0-dim input gives its element whether k is 0 or 1, as PyTorch.
  const TopKAttrs attrs{x.dim() == 0 ? 1 : k, d, largest, sorted};
  ValuesAndIndices out = run_selection(OpKind::kTopK, attrs, x, shape);
  record_selection(OpKind::kTopK, attrs, x, out.values, out.indices, d);
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// Lines along the op's dim: (elements per line, number of lines) of operand t.
std::pair<double, double> line_sizes(const Operand& t, int64_t dim) {
  const double n = t.dim() == 0 ? 1.0 : cost::as_double(t.size(static_cast<int>(dim)));
  const double total = cost::as_double(t.numel());
  return {n, n > 0 ? total / n : 0.0};
}

OpCost sort_cost(const KernelCall& c) {
  const auto [n, lines] = line_sizes(c.inputs[0], c.get<SortAttrs>().dim);
  return {lines * n * std::max(1.0, std::ceil(std::log2(std::max(n, 1.0)))), cost::operand_bytes(c)};
}

OpCost topk_cost(const KernelCall& c) { return {cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)}; }

}  // namespace

void define_sort_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kSort, sort_cost);
  table.set_cost(OpKind::kTopK, topk_cost);
}

}  // namespace ember

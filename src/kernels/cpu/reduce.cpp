// Reduction kernels (sum, prod, amax, amin, argmax, argmin, all, any): make_reduce_layout and
// reduce(), which takes the vector path where it has one for the op and dtype (Sum, Prod, Amax and
// Amin on float types) and the scalar path otherwise. The family is split so that no file dominates
// the build:
//   reduce_walkers.h         the functors and walkers, target-independent, and run_scalar
//   reduce.cpp               the layout, the dispatch, run_scalar for Sum, Prod, All and Any
//   reduce_extreme.cpp       run_scalar for Amax, Amin, Argmax and Argmin
//   reduce-inl.h             per Highway target: the vector forms and row loops, and run_vector
//   reduce_simd.cpp          the per-target kernel (reduce_simd.h), run_vector for Sum and Prod
//   reduce_extreme_simd.cpp  run_vector for Amax and Amin
// Softmax lives in softmax.cpp.

#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "ember/error.h"
#include "kernels/cpu/reduce_simd.h"
#include "kernels/cpu/reduce_walkers.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace reduction {

// Instantiated in reduce_extreme.cpp.
extern template void run_scalar<Extreme<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                               const ReduceLayout& layout);
extern template void run_scalar<Extreme<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                                const ReduceLayout& layout);
extern template void run_scalar<Arg<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                           const ReduceLayout& layout);
extern template void run_scalar<Arg<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in,
                                            const ReduceLayout& layout);

namespace {

// Every reduction with scalar row loops: what reduce() runs when the vector path has no form for
// the op and dtype.
void reduce_scalar(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  switch (op) {
    case OpKind::kSum:
      return run_scalar<Sum>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kProd:
      return run_scalar<Prod>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmax:
      return run_scalar<Extreme<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmin:
      return run_scalar<Extreme<false>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kArgmax:
      return run_scalar<Arg<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kArgmin:
      return run_scalar<Arg<false>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAll:
      return run_scalar<Truth<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAny:
      return run_scalar<Truth<false>>(op, in_dtype, out_dtype, out, in, layout);
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a reduction primitive");
}

}  // namespace
}  // namespace reduction

ReduceLayout make_reduce_layout(const Shape& shape, const Strides& strides, const bool* reduced) {
  ReduceLayout layout;
  int order[kMaxDims];
  int num_reduced = 0;
  for (int d = 0; d < shape.size(); ++d) {
    (reduced[d] ? layout.reduce_size : layout.num_outputs) *= shape[d];
    if (shape[d] == 1) continue;
    if (reduced[d]) {
      order[num_reduced++] = d;
      continue;
    }
    // Kept dims keep their order (the output walks them row-major); merge when the input allows.
    const int last = layout.kept_ndim - 1;
    if (last >= 0 && layout.kept_strides[last] == shape[d] * strides[d]) {
      layout.kept_sizes[last] *= shape[d];
      layout.kept_strides[last] = strides[d];
    } else {
      layout.kept_sizes[layout.kept_ndim] = shape[d];
      layout.kept_strides[layout.kept_ndim++] = strides[d];
    }
  }
  // Reduced dims in any order: largest stride first (broadcast dims outermost), then merged.
  auto key = [&](int d) { return strides[d] == 0 ? std::numeric_limits<int64_t>::max() : std::abs(strides[d]); };
  std::stable_sort(order, order + num_reduced, [&](int a, int b) { return key(a) > key(b); });
  for (int i = 0; i < num_reduced; ++i) {
    const int d = order[i], last = layout.reduced_ndim - 1;
    if (last >= 0 && layout.reduced_strides[last] == shape[d] * strides[d]) {
      layout.reduced_sizes[last] *= shape[d];
      layout.reduced_strides[last] = strides[d];
    } else {
      layout.reduced_sizes[layout.reduced_ndim] = shape[d];
      layout.reduced_strides[layout.reduced_ndim++] = strides[d];
    }
  }
  if (layout.kept_ndim == 0) layout.kept_sizes[layout.kept_ndim++] = 1;
  if (layout.reduced_ndim == 0) layout.reduced_sizes[layout.reduced_ndim++] = 1;
  return layout;
}

void reduce(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  if (!simd::reduce_vector(op, in_dtype, out_dtype, out, in, layout)) {
    reduction::reduce_scalar(op, in_dtype, out_dtype, out, in, layout);
  }
}

// --- registry entries ----------------------------------------------------------------------------

namespace {

// inputs: x (any layout); outputs: the reduced tensor, contiguous over the kept dims. ReduceAttrs
// lists the reduced dims (argmax and argmin: exactly one).
void reduce_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  if (out.numel() == 0) return;
  bool reduced[kMaxDims] = {};
  for (int64_t d : c.get<ReduceAttrs>().dims) reduced[d] = true;
  reduce(c.kind, x.dtype, out.dtype, out.data, x.data, make_reduce_layout(*x.shape, *x.strides, reduced));
}

}  // namespace

void register_reduce_kernels(KernelTable& table) {
  for (OpKind kind : {OpKind::kSum, OpKind::kProd, OpKind::kAmax, OpKind::kAmin, OpKind::kArgmax, OpKind::kArgmin,
                      OpKind::kAll, OpKind::kAny}) {
    table.add(kind, DeviceType::kCPU, reduce_kernel, DTypeSet::all());
  }
}

}  // namespace ember::cpu

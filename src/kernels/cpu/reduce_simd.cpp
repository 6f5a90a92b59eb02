// The vector path of the reductions (see reduce_simd.h) for every Highway target: the kernel that
// picks the op and its row functions, and reduce-inl.h's run_vector instantiated for Sum and Prod (for Amax and Amin in
// reduce_extreme_simd.cpp, so that neither file dominates the build). Only what needs vectors is
// compiled per target; the scalar path is compiled once (reduce.cpp, reduce_extreme.cpp).
// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/reduce_simd.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/reduce_walkers.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/float_vector-inl.h"
#include "kernels/cpu/reduce-inl.h"

// Instantiated in reduce_extreme_simd.cpp.
extern template bool run_vector<reduction::Extreme<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out,
                                                          const void* in, const ReduceLayout& layout);
extern template bool run_vector<reduction::Extreme<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out,
                                                           const void* in, const ReduceLayout& layout);
extern template simd::ReduceRowFn reduce_row_fn_for<reduction::Extreme<true>>(DType in_dtype, DType out_dtype);
extern template simd::ReduceRowFn reduce_row_fn_for<reduction::Extreme<false>>(DType in_dtype, DType out_dtype);

bool ReduceVector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  switch (op) {
    case OpKind::kSum:
      return run_vector<reduction::Sum>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kProd:
      return run_vector<reduction::Prod>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmax:
      return run_vector<reduction::Extreme<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmin:
      return run_vector<reduction::Extreme<false>>(op, in_dtype, out_dtype, out, in, layout);
    default:
      return false;
  }
}

simd::ReduceRowFn ReduceRowFnFor(OpKind op, DType in_dtype, DType out_dtype) {
  switch (op) {
    case OpKind::kSum:
      return reduce_row_fn_for<reduction::Sum>(in_dtype, out_dtype);
    case OpKind::kProd:
      return reduce_row_fn_for<reduction::Prod>(in_dtype, out_dtype);
    case OpKind::kAmax:
      return reduce_row_fn_for<reduction::Extreme<true>>(in_dtype, out_dtype);
    case OpKind::kAmin:
      return reduce_row_fn_for<reduction::Extreme<false>>(in_dtype, out_dtype);
    default:
      return nullptr;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(ReduceVector);
HWY_EXPORT(ReduceRowFnFor);

namespace simd {
bool reduce_vector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  return HWY_DYNAMIC_DISPATCH(ReduceVector)(op, in_dtype, out_dtype, out, in, layout);
}
ReduceRowFn reduce_row_fn(OpKind op, DType in_dtype, DType out_dtype) {
  return HWY_DYNAMIC_DISPATCH(ReduceRowFnFor)(op, in_dtype, out_dtype);
}
}  // namespace simd

}  // namespace ember::cpu
#endif

// The vector path of Amax and Amin for every Highway target: reduce-inl.h's run_vector and row
// functions instantiated for them, which reduce_simd.cpp's kernel calls. Apart from reduce_simd.cpp
// (Sum and Prod) so that neither file dominates the build.
// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce_extreme_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/reduce_simd.h"
#include "kernels/cpu/reduce_walkers.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/float_vector-inl.h"
#include "kernels/cpu/reduce-inl.h"

template bool run_vector<reduction::Extreme<true>>(OpKind op, DType in_dtype, DType out_dtype, void* out,
                                                   const void* in, const ReduceLayout& layout);
template bool run_vector<reduction::Extreme<false>>(OpKind op, DType in_dtype, DType out_dtype, void* out,
                                                    const void* in, const ReduceLayout& layout);
template simd::ReduceRowFn reduce_row_fn_for<reduction::Extreme<true>>(DType in_dtype, DType out_dtype);
template simd::ReduceRowFn reduce_row_fn_for<reduction::Extreme<false>>(DType in_dtype, DType out_dtype);

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

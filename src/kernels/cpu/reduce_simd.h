// The vector path of the reductions (reduce_simd.cpp, reduce_extreme_simd.cpp), compiled for every
// Highway target and chosen at run time. reduce() in reduce.cpp tries it first and falls back to
// the scalar path.
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "kernels/cpu/reduce.h"

namespace ember::cpu::simd {

// Runs `op` as reduce() does, with vector row loops, when the op has a vector form (Sum, Prod,
// Amax, Amin) and this target loads in_dtype into vectors (float types); false, doing nothing,
// otherwise.
bool reduce_vector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout);

// out[0] = the reduction of the n contiguous elements at `in`, bit for bit what reduce_vector gives
// each output whose reduced elements are one unit-stride row of n, resolved once for one op and pair
// of dtypes on this machine's target; nullptr where reduce_vector would not take them. For callers
// that reduce many rows one at a time (Note [fused reductions] in graph/fused.h).
using ReduceRowFn = void (*)(void* out, const void* in, int64_t n);
ReduceRowFn reduce_row_fn(OpKind op, DType in_dtype, DType out_dtype);

}  // namespace ember::cpu::simd

// The vector path of the reductions (reduce_simd.cpp, reduce_extreme_simd.cpp), compiled for every
// Highway target and chosen at run time. reduce() in reduce.cpp tries it first and falls back to
// the scalar path.
#pragma once

#include "ember/dtype.h"
#include "kernels/cpu/reduce.h"

namespace ember::cpu::simd {

// Runs `op` as reduce() does, with vector row loops, when the op has a vector form (Sum, Prod,
// Amax, Amin) and this target loads in_dtype into vectors (float types); false, doing nothing,
// otherwise.
bool reduce_vector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout);

}  // namespace ember::cpu::simd

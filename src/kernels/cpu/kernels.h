// The CPU kernels' interface. Kernels know nothing about Tensor: they take raw pointers, dtypes
// and a Loop (sizes + strides), so eager ops, the graph executor and importers share them.
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "ember/primitives.h"
#include "ember/scalar.h"
#include "kernels/cpu/loop.h"

namespace ember::cpu {

// out = op(in). Operand 0 of `loop` is out, 1 is in. `dtype` is the input dtype; the output dtype
// is bool for kBoolResult ops and `dtype` otherwise.
void unary(OpKind op, DType dtype, void* out, const void* in, const Loop& loop);
// out = op(a, b). Operands: 0 out, 1 a, 2 b. a and b have `dtype`; out is bool for kBoolResult ops.
void binary(OpKind op, DType dtype, void* out, const void* a, const void* b, const Loop& loop);
// out = cond ? a : b. Operands: 0 out, 1 cond (bool), 2 a, 3 b; out, a and b have `dtype`.
void where(DType dtype, void* out, const bool* cond, const void* a, const void* b, const Loop& loop);
// dst = convert(src). Operands: 0 dst, 1 src.
void copy(DType dst_dtype, DType src_dtype, void* dst, const void* src, const Loop& loop);
// out = value. Operand 0 only.
void fill(DType dtype, void* out, const Scalar& value, const Loop& loop);

// The Highway target chosen on this CPU, and every target compiled in.
const char* simd_target_name();
const char* simd_compiled_targets();

}  // namespace ember::cpu

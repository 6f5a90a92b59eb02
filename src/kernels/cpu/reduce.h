// The CPU reduction and softmax kernels' interface. Like every kernel they see raw pointers, sizes,
// strides and dtypes, never a Tensor: the op layer (src/ops/reduce.cpp) allocates the output, and
// the registry entry (kernels/cpu/reduce.cpp) builds the ReduceLayout from the operands.
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "ember/primitives.h"
#include "ember/shape.h"

namespace ember::cpu {

// One reduction's geometry: the input's dims split into kept dims (the output's, in order) and
// reduced dims, with size-1 dims dropped and neighbours that walk memory as one dim merged. The
// reduced dims are ordered by decreasing stride (broadcast dims first), so the innermost is the
// unit-stride dim when the input has one. Both lists have at least one dim (size 1, stride 0 when
// there is nothing to walk).
struct ReduceLayout {
  int kept_ndim = 0;
  int64_t kept_sizes[kMaxDims] = {};
  int64_t kept_strides[kMaxDims] = {};  // input strides, in elements
  int reduced_ndim = 0;
  int64_t reduced_sizes[kMaxDims] = {};
  int64_t reduced_strides[kMaxDims] = {};  // input strides, in elements
  int64_t num_outputs = 1;                 // product of the kept sizes
  int64_t reduce_size = 1;                 // elements reduced into each output
};

// `reduced[d]` says whether dim d of `shape` is reduced. Argmax/argmin must reduce exactly one dim:
// their indices count positions along it.
ReduceLayout make_reduce_layout(const Shape& shape, const Strides& strides, const bool* reduced);

// out[o] = op over the layout.reduce_size input elements of output o; out is contiguous over the
// kept dims. op: Sum, Prod, Amax, Amin, Argmax, Argmin, All or Any. Output dtypes:
//   Sum, Prod     the input dtype for floats (or float32 for float16/bfloat16, skipping a rounding
//                 for callers that keep computing), int64 for integers and bool;
//   Amax, Amin    the input dtype;           Argmax, Argmin  int64 (no bool input);
//   All, Any      bool (or uint8).
// float16/bfloat16 accumulate in float32, integer sums and products wrap around in int64. NaN
// propagates through Amax/Amin and wins Argmax/Argmin (first NaN). With reduce_size 0 the output
// gets the identity (sum 0, prod 1, all true, any false); Amax..Argmin need reduce_size > 0.
// The result is the same for any number of threads (Note [deterministic reductions]).
void reduce(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout);

// Softmax (op Softmax) or log-softmax (op LogSoftmax) over the middle dim of a contiguous
// (outer, dim_size, inner) input into a contiguous output of the same shape and floating dtype.
// Numerically stable: exp is taken of x - max; a row of only -inf, or one holding nan or +inf,
// gives nan, as PyTorch.
void softmax(OpKind op, DType dtype, void* out, const void* in, int64_t outer, int64_t dim_size, int64_t inner);

// The gradient of softmax (op Softmax) or log-softmax (LogSoftmax) over the last dim of contiguous
// (rows, n) float32 or float64 buffers, in one pass per row from the forward's output y:
//   softmax      grad_in = y * (grad_out - sum(grad_out * y))
//   log_softmax  grad_in = grad_out - exp(y) * sum(grad_out)
void softmax_backward(OpKind op, DType dtype, void* grad_in, const void* grad_out, const void* out, int64_t rows,
                      int64_t n);

}  // namespace ember::cpu

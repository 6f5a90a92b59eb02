// The elementwise front-end shared by every elementwise op: promotion, broadcasting, output
// allocation and overlap handling around the elementwise primitives.
#pragma once

#include <optional>

#include "ember/primitives.h"
#include "ember/tensor.h"

namespace ember::detail {

// One input of a binary op: a tensor, or a scalar from C++ code (the lowest promotion tier).
struct TensorOrScalar {
  const Tensor* tensor = nullptr;
  const Scalar* scalar = nullptr;
};

// PyTorch's result_type over tensors and scalars (dim tensors > 0-dim tensors > scalars).
DType result_type(std::initializer_list<TensorOrScalar> operands);

// out = op(a, b), allocated when `out` is null, else written into *out (shape must match the
// broadcast shape and its dtype must be able to hold the result).
Tensor binary_op(OpKind op, TensorOrScalar a, TensorOrScalar b, Tensor* out = nullptr);
Tensor unary_op(OpKind op, const Tensor& x, Tensor* out = nullptr);

// PyTorch's can_cast: no float -> integer, no non-bool -> bool.
bool can_cast(DType from, DType to);

}  // namespace ember::detail

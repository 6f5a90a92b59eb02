// The activations' fused backwards. ReLU's as one fused pass: result = out > 0 ? grad : 0, PyTorch's threshold_backward
// with threshold 0 (elements with out <= 0 pass nothing, so x == 0 gets a zero gradient; a NaN
// output passes the gradient through, as in PyTorch). The composite where(le(out, 0), 0, grad)
// is the reference and the path for other dtypes and layouts (src/ops/elementwise.cpp, relu).
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember::cpu {

// result[i] = out[i] <= 0 ? 0 : grad[i] for n contiguous elements of a float type. result
// may alias grad. Threads split the range above kElementwiseGrain elements.
void relu_backward(DType dtype, const void* grad, const void* out, void* result, int64_t n);

// GELU's backward in one pass: result[i] = grad[i] * gelu'(x[i]) for the erf form, or the tanh
// form's derivative (tanh_form), over n contiguous elements; float32, float16 and bfloat16
// (vectorized in float32, erf to ~1e-7 relative, rounded once) and float64 (the standard library's
// erf). The decomposition in src/ops/elementwise.cpp
// (gelu) is the reference and the path for other dtypes and layouts.
void gelu_backward(DType dtype, const void* grad, const void* x, void* result, int64_t n, bool tanh_form);

}  // namespace ember::cpu

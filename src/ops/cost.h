// Cost rules: FLOPs and bytes moved for one call of an op, for the profiler and the roofline.
#pragma once

#include <initializer_list>

#include "ember/tensor.h"
#include "ops/primitives.h"

namespace ember {

// Elementwise: the table's FLOPs per output element; bytes = every input read + output written.
OpCost elementwise_cost(OpKind op, const Tensor& out, std::initializer_list<const Tensor*> inputs);
// Reduction: one FLOP per input element; bytes = input + output.
OpCost reduction_cost(const Tensor& in, const Tensor& out);
// (batch x m x k) @ (batch x k x n): 2 m n k FLOPs per batch; bytes = A + B + C once each.
OpCost matmul_cost(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype);

}  // namespace ember

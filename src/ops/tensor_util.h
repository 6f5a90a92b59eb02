// What front-ends share: allocating outputs, device checks, copies through the dispatch seam, and
// the operands kernels want.
#pragma once

#include <initializer_list>

#include "base/op_context.h"
#include "core/tensor_impl.h"
#include "ember/tensor.h"

namespace ember::detail {

// A new contiguous tensor from the device's caching allocator (uninitialized). A shape with a
// negative dimension, or too large to count or to allocate, is an ember::Error naming the op the
// user called: the composite running (Note [error names]), else `op`.
Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op = "empty");

// Names `op` in the errors raised while it is alive (Note [error names]) without making the op a
// composite (observers see nothing): for a primitive's front-end whose operand copies and output
// allocations come before its kernel runs ("[conv2d] cannot allocate ...", not "[copy] ...").
// An outer name (a composite the user called) stays.
class ErrorName {
 public:
  explicit ErrorName(const char* op) : owns_(op_context() == nullptr) {
    if (owns_) set_op_context(op);
  }
  ~ErrorName() {
    if (owns_) set_op_context(nullptr);
  }
  ErrorName(const ErrorName&) = delete;
  ErrorName& operator=(const ErrorName&) = delete;

 private:
  bool owns_;
};

// Throws "[op] expected all tensors on the same device" naming the devices.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);

// dst = src (src broadcast to dst's shape, converted to its dtype) through the Copy primitive.
// Records nothing for autograd.
void copy_into(const Tensor& dst, const Tensor& src);

// Strides of `t` after expanding it to `shape` (0 on broadcast dims). `shape` must be a valid
// broadcast target of t's shape.
Strides broadcast_strides(const Tensor& t, const Shape& shape);

// `t` seen with `shape`'s rank and sizes (a view with 0 strides on the broadcast dims), without an
// autograd link.
Tensor broadcast_view(const Tensor& t, const Shape& shape);

// Do distinct indices of (shape, strides) reach distinct memory? A sufficient test: ordered by
// stride, each dim must step past everything the smaller dims reach. Geometries it rejects may
// still be free of overlap (interleaved layouts); callers treat them as overlapping.
bool is_non_overlapping(const Shape& shape, const Strides& strides);

// Throws "[op] unsupported operation: more than one element of the written-to tensor refers to a
// single memory location" when `t` has a broadcast dim (stride 0, size > 1): an in-place or out=
// write into it would race with itself. PyTorch's rule: other overlapping layouts pass.
void check_no_internal_overlap(const char* op, const Tensor& t);

// The dtype float kernels compute 16-bit floats in: float32 (every other dtype: itself).
inline DType compute_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

// A tensor as a kernel wants it: contiguous, in `dtype` (no copy when it already is), and detached,
// so the conversions record no graph of their own: the op records one node for itself.
Tensor kernel_operand(const Tensor& t, DType dtype);
inline Tensor kernel_operand(const Tensor& t) { return kernel_operand(t, t.dtype()); }

}  // namespace ember::detail

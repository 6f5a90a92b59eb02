// Helpers the op layer uses to build tensors and views and to hand tensors to kernels.
#pragma once

#include <initializer_list>

#include "ember/tensor.h"
#include "kernels/cpu/loop.h"

namespace ember::detail {

// A new contiguous tensor from the caching allocator (uninitialized).
Tensor make_empty(const Shape& shape, DType dtype, Device device);

// A view of `base`'s storage with new geometry; the autograd links are not copied.
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);

// A Loop over `shape` whose operands are `tensors` (already expanded to `shape`).
cpu::Loop make_loop(const Shape& shape, std::initializer_list<const Tensor*> tensors);

// Throws "[op] expected all tensors on the same device" naming the devices.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);

// Copies src into dst (same shape, after broadcasting src), converting dtype. No checks.
void copy_into(const Tensor& dst, const Tensor& src);

// Strides of `t` after expanding it to `shape` (0 on broadcast dims). `shape` must be a valid
// broadcast target of t's shape.
Strides broadcast_strides(const Tensor& t, const Shape& shape);

}  // namespace ember::detail

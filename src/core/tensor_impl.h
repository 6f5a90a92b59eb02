// Making tensor headers: a new tensor over a fresh storage, or a view sharing another's storage.
#pragma once

#include <memory>

#include "core/block_pool.h"
#include "ember/tensor.h"

namespace ember::detail {

// A contiguous tensor over `storage` (which holds at least shape.numel() elements). Inline: it is
// part of every op's output allocation.
inline Tensor make_tensor(std::shared_ptr<StorageImpl> storage, const Shape& shape, DType dtype) {
  auto impl = make_pooled<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);  // contiguous stays true
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// A view of `base`'s storage with new geometry; the autograd links are not copied.
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);

}  // namespace ember::detail

// What front-ends share (ops/tensor_util.h): output allocation, device checks, copies, broadcasting.
#include "ops/tensor_util.h"

#include <algorithm>
#include <vector>

#include "core/allocator.h"
#include "ops/dispatch.h"

namespace ember::detail {

Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op) {
  const char* name = op_context() != nullptr ? op_context() : op;
  const int64_t numel = checked_numel(shape, name);
  const BlockLayout layout = block_layout(dtype);
  if (is_block_quantized(dtype)) {
    EMBER_CHECK(shape.size() >= 1 && shape[shape.size() - 1] % layout.values == 0, "[", name, "] a ", dtype,
                " tensor's last dim must be a multiple of ", layout.values, ", got shape ", shape);
  }
  int64_t nbytes = 0;
  EMBER_CHECK(!__builtin_mul_overflow(numel / layout.values, layout.bytes, &nbytes), "[", name, "] cannot allocate a ",
              dtype, " tensor of shape ", shape, ": its size in bytes does not fit in 64 bits");
  return make_tensor(allocate_storage(nbytes, device, name), shape, dtype);
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Device first = (*tensors.begin())->device();
  for (const Tensor* t : tensors) {
    EMBER_CHECK(t->device() == first, "[", op, "] expected all tensors on the same device, got ", first, " and ",
                t->device());
  }
}

void copy_into(const Tensor& dst, const Tensor& src) { dispatch::run(OpKind::kCopy, {}, {&src}, {&dst}); }

Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  return ember::broadcast_strides(t.shape(), t.strides(), shape);
}

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  return make_view(t, shape, broadcast_strides(t, shape), t.offset());
}

Tensor kernel_operand(const Tensor& t, DType dtype) { return t.detach().to(dtype).contiguous(); }

bool is_non_overlapping(const Shape& shape, const Strides& strides) {
  std::vector<int> dims;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t reach = 0;  // the largest offset the dims so far can reach
  for (int d : dims) {
    if (strides[d] <= reach) return false;
    reach += (shape[d] - 1) * strides[d];
  }
  return true;
}

void check_no_internal_overlap(const char* op, const Tensor& t) {
  if (t.numel() == 0) return;  // no element, no two elements at one location (PyTorch does nothing)
  for (int d = 0; d < t.dim(); ++d) {
    EMBER_CHECK(!(t.shape()[d] > 1 && t.strides()[d] == 0), "[", op,
                "] unsupported operation: more than one element of the written-to tensor (shape ", t.shape(),
                ", strides ", t.strides(), ") refers to a single memory location; clone() it first");
  }
}

}  // namespace ember::detail

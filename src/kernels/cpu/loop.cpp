#include "kernels/cpu/loop.h"

namespace ember::cpu {

Loop make_loop(const Shape& shape, const Strides* const* strides, int num_operands) {
  Loop loop;
  loop.num_operands = num_operands;
  loop.numel = shape.numel();
  // Keep dims of size > 1, outermost first.
  int nd = 0;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    loop.sizes[nd] = shape[d];
    for (int k = 0; k < num_operands; ++k) loop.strides[k][nd] = (*strides[k])[d];
    ++nd;
  }
  if (nd == 0) {
    loop.ndim = 1;
    loop.sizes[0] = loop.numel == 0 ? 0 : 1;
    for (int k = 0; k < num_operands; ++k) loop.strides[k][0] = 0;
    return loop;
  }
  // Merge dim d into d-1 when, for every operand, stepping d-1 equals stepping all of d.
  int out = 0;
  for (int d = 1; d < nd; ++d) {
    bool mergeable = true;
    for (int k = 0; k < num_operands && mergeable; ++k) {
      mergeable = loop.strides[k][out] == loop.strides[k][d] * loop.sizes[d];
    }
    if (mergeable) {
      loop.sizes[out] *= loop.sizes[d];
      for (int k = 0; k < num_operands; ++k) loop.strides[k][out] = loop.strides[k][d];
    } else {
      ++out;
      loop.sizes[out] = loop.sizes[d];
      for (int k = 0; k < num_operands; ++k) loop.strides[k][out] = loop.strides[k][d];
    }
  }
  loop.ndim = out + 1;
  return loop;
}

Loop make_loop(std::initializer_list<const Operand*> operands) {
  const Operand& out = **operands.begin();
  const Shape& shape = *out.shape;
  const int num_operands = static_cast<int>(operands.size());
  bool flat = true;
  for (const Operand* o : operands) flat = flat && o->is_contiguous() && *o->shape == shape;
  Loop loop;  // the one object returned (no copy on either path)
  if (flat) {
    loop.ndim = 1;
    loop.num_operands = num_operands;
    loop.numel = shape.numel();
    loop.sizes[0] = loop.numel;
    for (int k = 0; k < num_operands; ++k) loop.strides[k][0] = 1;
    return loop;
  }
  Strides strides[kMaxOperands];
  const Strides* pointers[kMaxOperands];
  int k = 0;
  for (const Operand* o : operands) {
    strides[k] = broadcast_strides(*o->shape, *o->strides, shape);
    pointers[k] = &strides[k];
    ++k;
  }
  loop = make_loop(shape, pointers, num_operands);
  return loop;
}

}  // namespace ember::cpu

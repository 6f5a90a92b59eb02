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

}  // namespace ember::cpu

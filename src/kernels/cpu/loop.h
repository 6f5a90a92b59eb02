// Loop: the layout engine every elementwise kernel shares. It takes the output shape and each
// operand's strides (0 where broadcast), drops size-1 dims and merges dims that are contiguous
// for every operand, then walks [begin, end) of the flattened index space row by row, handing
// each inner row to a kernel as (pointers, inner strides, length). Kernels see raw pointers only.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "base/kernel.h"
#include "ember/shape.h"

namespace ember::cpu {

inline constexpr int kMaxOperands = 4;

struct Loop {
  int ndim = 0;  // after collapsing; at least 1
  int num_operands = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements
  int64_t numel = 0;

  int64_t inner_size() const { return sizes[ndim - 1]; }
  int64_t inner_stride(int operand) const { return strides[operand][ndim - 1]; }
};

// Builds a collapsed Loop for `num_operands` operands of shape `shape` (operand 0 is usually the
// output). `strides[k]` are operand k's strides for exactly this shape.
Loop make_loop(const Shape& shape, const Strides* const* strides, int num_operands);

// The Loop of an elementwise kernel call: the first operand (the output) gives the shape; the
// others broadcast to it (a missing leading dim or a size-1 dim steps by 0). When every operand is
// contiguous with the output's shape, the Loop is one flat row without any stride analysis.
Loop make_loop(std::initializer_list<const Operand*> operands);

// Calls row(ptrs, n) for every inner row of the flattened range [begin, end). ptrs[k] points at
// operand k's first element of that row; element sizes are in `element_sizes` (bytes).
template <int N, class Row>
void for_each_row(const Loop& loop, char* const* base, const int64_t* element_sizes, int64_t begin, int64_t end,
                  const Row& row) {
  const int nd = loop.ndim;
  const int64_t inner = loop.sizes[nd - 1];
  int64_t index[kMaxDims] = {};
  int64_t linear = begin / inner;
  int64_t column = begin % inner;
  for (int d = nd - 2; d >= 0; --d) {
    index[d] = linear % loop.sizes[d];
    linear /= loop.sizes[d];
  }
  int64_t position = begin;
  while (position < end) {
    char* ptrs[N];
    for (int k = 0; k < N; ++k) {
      int64_t offset = column * loop.strides[k][nd - 1];
      for (int d = 0; d < nd - 1; ++d) offset += index[d] * loop.strides[k][d];
      ptrs[k] = base[k] + offset * element_sizes[k];
    }
    const int64_t n = inner - column < end - position ? inner - column : end - position;
    row(ptrs, n);
    position += n;
    column = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++index[d] < loop.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace ember::cpu

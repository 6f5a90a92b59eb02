// CPU kernels of the indexing ops: index_select, gather, scatter_add and one_hot. Like every kernel
// they take raw pointers, sizes and strides (in elements) and never see a Tensor.
//
// Note [index bounds in kernels]: every kernel checks each index it reads against its bound before
// touching memory. A bad index is never dereferenced: the kernel stops and returns it (the first
// one met; with several threads, the first one any thread met), and the op layer turns it into an
// ember::Error naming the op, the dim and its size. No exception ever leaves a parallel region.
#pragma once

#include <cstdint>
#include <optional>

#include "ember/dtype.h"
#include "kernels/cpu/loop.h"

namespace ember::cpu {

// out (outer, count, inner) = src (outer, src_size, inner)[:, index, :]. src and out are
// contiguous; index holds `count` int32 or int64 values, `index_stride` elements apart. Whole rows
// of `row_bytes` (= inner * element size) are copied, so one kernel serves every dtype. Indices are
// checked against [0, src_size) even when there is nothing to copy.
[[nodiscard]] std::optional<int64_t> index_select(void* out, const void* src, int64_t outer, int64_t src_size,
                                                  int64_t row_bytes, const void* index, DType index_dtype,
                                                  int64_t count, int64_t index_stride);

// The iteration space of gather and scatter_add: the index's shape cut into lines along the
// indexed dim. `lines` walks the index's shape without that dim, one element per line, with
// operands 0 = out, 1 = data (gather: the input; scatter_add: src), 2 = index. A line holds
// `length` elements; along it operand k steps dim_strides[k]. Valid indices lie in [0, bound).
struct IndexLines {
  Loop lines;
  int64_t length = 0;
  int64_t dim_strides[3] = {};
  int64_t bound = 0;
};

// out[line, j] = data[line, index[line, j]]: the index steps data by dim_strides[1]. Elements are
// moved as bytes of dtype_size(dtype), so every dtype works.
[[nodiscard]] std::optional<int64_t> gather(DType dtype, void* out, const void* data, const void* index,
                                            DType index_dtype, const IndexLines& geometry);

// out[line, index[line, j]] += src[line, j]: the index steps out by dim_strides[0]. Distinct lines
// must reach distinct elements of out (true for a fresh out covering the index's shape), so lines
// run in parallel and each out element accumulates in the order j = 0, 1, ... of its line.
// bool adds as logical or and integers wrap, as PyTorch's CPU kernel does; 16-bit floats round
// after every addition (the op layer passes float32 buffers instead, to round once as PyTorch).
[[nodiscard]] std::optional<int64_t> scatter_add(DType dtype, void* out, const void* src, const void* index,
                                                 DType index_dtype, const IndexLines& geometry);

// out (n, num_classes) = 0, except out[i, index[i]] = 1. index: n contiguous values.
[[nodiscard]] std::optional<int64_t> one_hot(int64_t* out, const int64_t* index, int64_t n, int64_t num_classes);

}  // namespace ember::cpu

// CPU indexing kernels (see indexing.h). Plain C++ rather than Highway: these ops move rows or
// single elements to data-dependent addresses, so their speed is memory traffic, not arithmetic.
// Bounds are checked in the kernels themselves (Note [index bounds in kernels]).
#include "kernels/cpu/indexing.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

// Lines of gather/scatter_add handled together, so that consecutive accesses stay close whether
// the lines run along memory (dim = last) or across it (dim = 0).
constexpr int64_t kLineBlock = 16;
// Bytes below which a copy stays on one thread (as the copy kernel's memcpy path).
constexpr int64_t kCopyGrainBytes = kElementwiseGrain * 4;

// The first out-of-range index met by any thread; each thread stops at its first.
class BadIndex {
 public:
  void report(int64_t value) {
    bool expected = false;
    if (found_.compare_exchange_strong(expected, true)) value_ = value;
  }
  // Read after the parallel region has joined.
  std::optional<int64_t> result() const {
    if (!found_.load()) return std::nullopt;
    return value_;
  }

 private:
  std::atomic<bool> found_{false};
  int64_t value_ = 0;
};

// Calls f(TypeTag<I>{}) with the C++ type of an index dtype (int32 or int64).
template <class F>
decltype(auto) dispatch_index(DType index_dtype, F&& f) {
  EMBER_CHECK(index_dtype == kInt64 || index_dtype == kInt32, "[indexing] index dtype must be int32 or int64, got ",
              index_dtype);
  if (index_dtype == kInt32) return f(TypeTag<int32_t>{});
  return f(TypeTag<int64_t>{});
}

// Calls f(std::integral_constant<int64_t, N>{}) with N = the element size in bytes.
template <class F>
decltype(auto) dispatch_size(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      return f(std::integral_constant<int64_t, 1>{});
    case 2:
      return f(std::integral_constant<int64_t, 2>{});
    case 4:
      return f(std::integral_constant<int64_t, 4>{});
    default:
      return f(std::integral_constant<int64_t, 8>{});
  }
}

int64_t grain_for(int64_t work_per_item, int64_t budget) {
  return std::max<int64_t>(1, budget / std::max<int64_t>(1, work_per_item));
}

// Calls visit(out, data, index, j) for every element j of every line of `g`, with the three
// operands' pointers at the start of that line; lines run in parallel, a thread stops when visit
// returns false.
template <class Visit>
void for_each_line(const IndexLines& g, char* out, const char* data, const char* index,
                   const int64_t (&element_sizes)[3], const Visit& visit) {
  char* base[3] = {out, const_cast<char*>(data), const_cast<char*>(index)};
  const Loop& loop = g.lines;
  const int64_t step[3] = {loop.inner_stride(0) * element_sizes[0], loop.inner_stride(1) * element_sizes[1],
                           loop.inner_stride(2) * element_sizes[2]};
  parallel_for(0, loop.numel, grain_for(g.length, kElementwiseGrain), [&](int64_t begin, int64_t end) {
    bool go = true;
    for_each_row<3>(loop, base, element_sizes, begin, end, [&](char* const* p, int64_t n) {
      for (int64_t c0 = 0; c0 < n && go; c0 += kLineBlock) {
        const int64_t c1 = std::min(n, c0 + kLineBlock);
        for (int64_t j = 0; j < g.length && go; ++j) {
          for (int64_t c = c0; c < c1 && go; ++c) {
            go = visit(p[0] + c * step[0], p[1] + c * step[1], p[2] + c * step[2], j);
          }
        }
      }
    });
  });
}

}  // namespace

std::optional<int64_t> index_select(void* out, const void* src, int64_t outer, int64_t src_size, int64_t row_bytes,
                                    const void* index, DType index_dtype, int64_t count, int64_t index_stride) {
  return dispatch_index(index_dtype, [&](auto tag) -> std::optional<int64_t> {
    using I = typename decltype(tag)::type;
    const I* idx = static_cast<const I*>(index);
    BadIndex bad;
    if (outer == 0 || row_bytes == 0) {  // nothing to copy, but the indices must still be valid
      for (int64_t j = 0; j < count; ++j) {
        const int64_t k = idx[j * index_stride];
        if (k < 0 || k >= src_size) return k;
      }
      return std::nullopt;
    }
    char* o = static_cast<char*>(out);
    const char* s = static_cast<const char*>(src);
    // (outer, count) rows, each a memcpy of row_bytes.
    parallel_for(0, outer * count, grain_for(row_bytes, kCopyGrainBytes), [&](int64_t begin, int64_t end) {
      int64_t i = begin / count, j = begin % count;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t k = idx[j * index_stride];
        if (k < 0 || k >= src_size) {
          bad.report(k);
          return;
        }
        std::memcpy(o + r * row_bytes, s + (i * src_size + k) * row_bytes, static_cast<size_t>(row_bytes));
        if (++j == count) {
          j = 0;
          ++i;
        }
      }
    });
    return bad.result();
  });
}

std::optional<int64_t> gather(DType dtype, void* out, const void* data, const void* index, DType index_dtype,
                              const IndexLines& g) {
  return dispatch_index(index_dtype, [&](auto index_tag) {
    using I = typename decltype(index_tag)::type;
    return dispatch_size(dtype, [&](auto size_tag) {
      constexpr int64_t kSize = decltype(size_tag)::value;
      const int64_t sizes[3] = {kSize, kSize, sizeof(I)};
      const int64_t out_step = g.dim_strides[0] * kSize, data_step = g.dim_strides[1] * kSize;
      const int64_t index_step = g.dim_strides[2];
      BadIndex bad;
      for_each_line(g, static_cast<char*>(out), static_cast<const char*>(data), static_cast<const char*>(index), sizes,
                    [&](char* o, const char* d, const char* ix, int64_t j) {
                      const int64_t k = reinterpret_cast<const I*>(ix)[j * index_step];
                      if (k < 0 || k >= g.bound) {
                        bad.report(k);
                        return false;
                      }
                      std::memcpy(o + j * out_step, d + k * data_step, kSize);
                      return true;
                    });
      return bad.result();
    });
  });
}

std::optional<int64_t> scatter_add(DType dtype, void* out, const void* src, const void* index, DType index_dtype,
                                   const IndexLines& g) {
  return dispatch_index(index_dtype, [&](auto index_tag) {
    using I = typename decltype(index_tag)::type;
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const int64_t sizes[3] = {sizeof(T), sizeof(T), sizeof(I)};
      const int64_t out_step = g.dim_strides[0], src_step = g.dim_strides[1], index_step = g.dim_strides[2];
      BadIndex bad;
      for_each_line(g, static_cast<char*>(out), static_cast<const char*>(src), static_cast<const char*>(index), sizes,
                    [&](char* o, const char* s, const char* ix, int64_t j) {
                      const int64_t k = reinterpret_cast<const I*>(ix)[j * index_step];
                      if (k < 0 || k >= g.bound) {
                        bad.report(k);
                        return false;
                      }
                      T& target = reinterpret_cast<T*>(o)[k * out_step];
                      const T value = reinterpret_cast<const T*>(s)[j * src_step];
                      target = static_cast<T>(static_cast<C>(target) + static_cast<C>(value));
                      return true;
                    });
      return bad.result();
    });
  });
}

std::optional<int64_t> one_hot(int64_t* out, const int64_t* index, int64_t n, int64_t num_classes) {
  BadIndex bad;
  parallel_for(0, n, grain_for(num_classes, kCopyGrainBytes / 8), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t* row = out + i * num_classes;
      std::fill(row, row + num_classes, int64_t{0});
      const int64_t k = index[i];
      if (k < 0 || k >= num_classes) {
        bad.report(k);
        return;
      }
      row[k] = 1;
    }
  });
  return bad.result();
}

// --- registry entries ----------------------------------------------------------------------------
//
// The indexed dim is DimAttrs::dim. A 0-dim input, index or output is taken as a 1-D tensor of one
// element (the front-ends pass them so). A bad index becomes "[op] index i is out of bounds for
// dimension d with size n".

namespace {

void check_index(const KernelCall& c, std::optional<int64_t> bad, int64_t dim, int64_t size) {
  EMBER_CHECK(!bad, "[", c.name(), "] index ", *bad, " is out of bounds for dimension ", dim, " with size ", size);
}

// inputs: src (contiguous, at least 1-D), index (at most 1-D, int32 or int64); outputs: src's
// shape with `count` rows along dim (or a 0-dim tensor for a 0-dim input, taken as 1-D).
void index_select_kernel(const KernelCall& c) {
  const Operand &src = c.inputs[0], &index = c.inputs[1], &out = c.outputs[0];
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= src.size(k);
  for (int k = d + 1; k < src.dim(); ++k) inner *= src.size(k);
  const int64_t size = src.size(d);
  const std::optional<int64_t> bad =
      index_select(out.data, src.data, outer, size, inner * dtype_size(src.dtype), index.data, index.dtype,
                   index.numel(), index.dim() == 0 ? 1 : index.stride(0));
  check_index(c, bad, d, size);
}

// The line geometry of gather/scatter_add over `index`'s shape along dim d. `out` and `data` are
// operands 0 and 1; only their strides are read (their sizes may exceed the index's).
IndexLines index_lines(const Operand& out, const Operand& data, const Operand& index, int d, int64_t bound) {
  Shape shape = *index.shape;
  shape[d] = 1;  // make_loop drops size-1 dims: one loop element per line
  const Strides* strides[3] = {out.strides, data.strides, index.strides};
  IndexLines g;
  g.lines = make_loop(shape, strides, 3);
  g.length = index.size(d);
  g.dim_strides[0] = out.stride(d);
  g.dim_strides[1] = data.stride(d);
  g.dim_strides[2] = index.stride(d);
  g.bound = bound;
  return g;
}

// inputs: x, index (same rank, no larger than x except along dim); outputs: the index's shape.
void gather_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &index = c.inputs[1], &out = c.outputs[0];
  if (index.numel() == 0) return;
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  const int64_t size = x.size(d);
  check_index(c, gather(x.dtype, out.data, x.data, index.data, index.dtype, index_lines(out, x, index, d, size)), d,
              size);
}

// inputs: index, src; outputs: the tensor scattered into (read and updated in place).
void scatter_add_kernel(const KernelCall& c) {
  const Operand &index = c.inputs[0], &src = c.inputs[1], &out = c.outputs[0];
  if (index.numel() == 0) return;
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  const int64_t size = out.size(d);
  check_index(
      c, scatter_add(out.dtype, out.data, src.data, index.data, index.dtype, index_lines(out, src, index, d, size)), d,
      size);
}

// inputs: index (int64, contiguous); outputs: (index..., num_classes) int64.
void one_hot_kernel(const KernelCall& c) {
  const Operand &index = c.inputs[0], &out = c.outputs[0];
  if (index.numel() == 0) return;
  const int64_t classes = out.size(-1);
  const std::optional<int64_t> bad = one_hot(out.ptr<int64_t>(), index.ptr<const int64_t>(), index.numel(), classes);
  EMBER_CHECK(!bad, "[", c.name(), "] class value ", *bad, " is out of range for ", classes, " classes");
}

}  // namespace

void register_indexing_kernels(KernelTable& table) {
  table.add(OpKind::kIndexSelect, DeviceType::kCPU, index_select_kernel, DTypeSet::all());
  table.add(OpKind::kGather, DeviceType::kCPU, gather_kernel, DTypeSet::all());
  table.add(OpKind::kScatterAdd, DeviceType::kCPU, scatter_add_kernel, DTypeSet::all());
  table.add(OpKind::kOneHot, DeviceType::kCPU, one_hot_kernel, {kInt64});
}

}  // namespace ember::cpu

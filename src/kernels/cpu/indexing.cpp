// CPU indexing kernels (see indexing.h). Plain C++ rather than Highway: these ops move rows or
// single elements to data-dependent addresses, so their speed is memory traffic, not arithmetic.
// Bounds are checked in the kernels themselves (Note [index bounds in kernels]).
#include "kernels/cpu/indexing.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/parallel.h"

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

void min_max(const int64_t* values, int64_t n, int64_t* min, int64_t* max) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  std::mutex mutex;
  parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    const auto [first, last] = std::minmax_element(values + begin, values + end);
    const std::lock_guard<std::mutex> lock(mutex);
    lo = std::min(lo, *first);
    hi = std::max(hi, *last);
  });
  *min = lo;
  *max = hi;
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

}  // namespace ember::cpu

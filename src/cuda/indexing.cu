// Indexing kernels: index_select copies whole rows (4-byte words where the rows allow), gather and
// scatter_add walk the index's layout. scatter_add adds with atomics, so the order of the terms
// summed into one element varies from run to run (the CPU's order is fixed). A bad index stops
// nothing: it is recorded (the smallest flat position holding one) for the caller to report.
#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

template <class I>
__device__ __forceinline__ bool in_bounds(I k, int64_t bound) {
  return k >= 0 && static_cast<int64_t>(k) < bound;
}

template <class Word, class I>
__global__ void index_select_kernel(Word* out, const Word* src, int64_t outer, int64_t size, int64_t row_words,
                                    const I* index, int64_t count, int64_t index_stride, unsigned long long* bad) {
  const int64_t total = outer * count * row_words, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t w = e % row_words, r = e / row_words, j = r % count, i = r / count;
    const I k = index[j * index_stride];
    if (!in_bounds(k, size)) {
      atomicMin(bad, static_cast<unsigned long long>(j));
      continue;
    }
    out[e] = src[(i * size + k) * row_words + w];
  }
}

template <class I>
__global__ void check_kernel(const I* index, int64_t count, int64_t index_stride, int64_t size,
                             unsigned long long* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += stride) {
    if (!in_bounds(index[j * index_stride], size)) atomicMin(bad, static_cast<unsigned long long>(j));
  }
}

template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <bool scatter, class T, class I>
__global__ void gather_scatter_kernel(T* out, const T* data, const I* index, Layout l, int64_t dim_stride,
                                      int64_t bound, unsigned long long* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < l.numel; e += stride) {
    const Offsets<3, int64_t> o = offsets_of<3, int64_t>(l, e, l.ndim);
    const I k = index[o.at[2]];
    if (!in_bounds(k, bound)) {
      atomicMin(bad, static_cast<unsigned long long>(e));
      continue;
    }
    if constexpr (scatter) {
      atomic_add(out + o.at[0] + k * dim_stride, data[o.at[1]]);
    } else {
      out[o.at[0]] = data[o.at[1] + k * dim_stride];
    }
  }
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

template <class Fn>
void with_index(bool int64, Fn&& fn) {
  if (int64) {
    fn(int64_t{});
  } else {
    fn(int32_t{});
  }
}

}  // namespace

bool index_select(void* out, const void* src, int64_t outer, int64_t size, int64_t row_bytes, const void* index,
                  bool index_int64, int64_t count, int64_t index_stride, int64_t* bad, void* stream) {
  auto* flag = reinterpret_cast<unsigned long long*>(bad);
  with_index(index_int64, [&](auto tag) {
    using I = decltype(tag);
    const I* idx = static_cast<const I*>(index);
    if (count == 0) return;
    if (outer == 0 || row_bytes == 0) {  // nothing to copy, but the indices must still be valid
      check_kernel<I><<<grid_for(count), kThreads, 0, as_stream(stream)>>>(idx, count, index_stride, size, flag);
      return;
    }
    const bool words =
        row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0;
    if (words) {
      const int64_t row_words = row_bytes / 4;
      index_select_kernel<uint32_t, I><<<grid_for(outer * count * row_words), kThreads, 0, as_stream(stream)>>>(
          static_cast<uint32_t*>(out), static_cast<const uint32_t*>(src), outer, size, row_words, idx, count,
          index_stride, flag);
    } else {
      index_select_kernel<uint8_t, I><<<grid_for(outer * count * row_bytes), kThreads, 0, as_stream(stream)>>>(
          static_cast<uint8_t*>(out), static_cast<const uint8_t*>(src), outer, size, row_bytes, idx, count,
          index_stride, flag);
    }
  });
  return true;
}

bool gather_scatter(bool scatter, Type type, void* out, const void* data, const void* index, bool index_int64,
                    const Layout& layout, int64_t dim_stride, int64_t bound, int64_t* bad, void* stream) {
  if (layout.numel == 0) return true;
  auto* flag = reinterpret_cast<unsigned long long*>(bad);
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_index(index_int64, [&](auto index_tag) {
      using I = decltype(index_tag);
      const unsigned grid = grid_for(layout.numel);
      if (scatter) {
        if constexpr (!std::is_same_v<T, bool>) {
          gather_scatter_kernel<true, T, I>
              <<<grid, kThreads, 0, as_stream(stream)>>>(static_cast<T*>(out), static_cast<const T*>(data),
                                                         static_cast<const I*>(index), layout, dim_stride, bound, flag);
          ran = true;
        }
      } else {
        gather_scatter_kernel<false, T, I>
            <<<grid, kThreads, 0, as_stream(stream)>>>(static_cast<T*>(out), static_cast<const T*>(data),
                                                       static_cast<const I*>(index), layout, dim_stride, bound, flag);
        ran = true;
      }
    });
  });
  return ran;
}

}  // namespace ember::cuda::launch

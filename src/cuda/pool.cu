// 2-D pooling (launch.h): one thread per output element for the forwards and the average
// backwards' gather, with the CPU kernels' window rules (kernels/cpu/pool.cpp), so the values,
// ties, NaNs and indices are the CPU's. Max pooling's backward adds each output's gradient at its
// saved index with atomics (windows that overlap share an input).
#include <cmath>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

// The taps [first, last) of a window starting at `start` (step `step`, `kernel` taps) that fall
// inside an axis of `size`, as the CPU's clip(); in the kernel's index type I.
template <class I>
struct Taps {
  I start, first, last;
};
template <class I>
__device__ __forceinline__ Taps<I> clip(I start, I kernel, I step, I size) {
  const I first = start >= 0 ? 0 : (-start + step - 1) / step;
  const I last = start > size - 1 ? 0 : min(kernel, (size - 1 - start) / step + 1);
  return {start, min(first, last), last};
}

// Output o of an adaptive axis: input [floor(o * in / out), ceil((o + 1) * in / out)).
template <class I>
__device__ __forceinline__ Taps<I> adaptive(I o, I out, I in) {
  const I begin = o * in / out, end = ((o + 1) * in + out - 1) / out;
  return {begin, 0, end - begin};
}

template <class I>
__device__ __forceinline__ void windows_of(const Pool2d& p, I oh, I ow, Taps<I>* r, Taps<I>* c) {
  if (p.kind == Pool::kAdaptiveAvg) {
    *r = adaptive<I>(oh, p.out_height, p.in_height);
    *c = adaptive<I>(ow, p.out_width, p.in_width);
  } else {
    const bool max = p.kind == Pool::kMax;
    *r = clip<I>(oh * p.stride_h - p.pad_h, p.kernel_h, max ? p.dilation_h : 1, p.in_height);
    *c = clip<I>(ow * p.stride_w - p.pad_w, p.kernel_w, max ? p.dilation_w : 1, p.in_width);
  }
}

// The divisor of an average window (the CPU's divisor()).
template <class I>
__device__ __forceinline__ int64_t divisor(const Pool2d& p, const Taps<I>& r, const Taps<I>& c) {
  if (p.kind == Pool::kAdaptiveAvg || !p.count_include_pad) return int64_t{r.last - r.first} * (c.last - c.first);
  const int64_t h = min(int64_t{r.start} + p.kernel_h, p.in_height + p.pad_h) - r.start;
  const int64_t w = min(int64_t{c.start} + p.kernel_w, p.in_width + p.pad_w) - c.start;
  return h * w;
}

// I, the index type: int32 where every input and output position fits (a 32-bit division costs a
// fraction of a 64-bit one), else int64.
template <class T, class I>
__global__ void pool_forward_kernel(Pool2d p, const T* in, T* out, int64_t* indices) {
  const I out_width = static_cast<I>(p.out_width), out_plane = static_cast<I>(p.out_height) * out_width;
  const I total = static_cast<I>(p.planes) * out_plane, in_plane = static_cast<I>(p.in_height * p.in_width);
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const I plane = e / out_plane, rest = e - plane * out_plane, oh = rest / out_width, ow = rest - oh * out_width;
    const T* x = in + plane * in_plane;
    Taps<I> r, c;
    windows_of<I>(p, oh, ow, &r, &c);
    if (p.kind == Pool::kMax) {
      const I dilation_h = static_cast<I>(p.dilation_h), dilation_w = static_cast<I>(p.dilation_w);
      const I in_width = static_cast<I>(p.in_width);
      T best = -INFINITY;
      I best_index = -1;
      for (I i = r.first; i < r.last; ++i) {
        const I row = (r.start + i * dilation_h) * in_width;
        for (I j = c.first; j < c.last; ++j) {
          const I index = row + c.start + j * dilation_w;
          const T v = x[index];
          if (best_index < 0 || v > best || v != v) {
            best = v;
            best_index = index;
          }
        }
      }
      out[e] = best;
      if (indices != nullptr) indices[e] = best_index;
    } else {
      const int64_t count = divisor(p, r, c);
      T total_value = 0;
      for (I i = r.first; i < r.last; ++i) {
        const T* row = x + (r.start + i) * static_cast<I>(p.in_width) + c.start;
        for (I j = c.first; j < c.last; ++j) total_value += row[j];
      }
      out[e] = count > 0 && r.first < r.last && c.first < c.last ? total_value / static_cast<T>(count) : T(0);
    }
  }
}

template <class T>
__global__ void zero_kernel(T* out, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    out[e] = T(0);
}

// Whether every input and output position of the pooling (and the grid's strides past them) fits in
// an int32.
bool fits_32_bits(const Pool2d& p) {
  const int64_t limit = INT32_MAX / 2;
  return p.planes * p.in_height * p.in_width < limit && p.planes * p.out_height * p.out_width < limit;
}

template <class T, class I>
__global__ void max_backward_kernel(Pool2d p, const T* grad_out, const int64_t* indices, T* grad_in) {
  const I out_plane = static_cast<I>(p.out_height * p.out_width), total = static_cast<I>(p.planes) * out_plane;
  const I in_plane = static_cast<I>(p.in_height * p.in_width);
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int64_t where = indices[e];
    if (where >= 0) atomicAdd(grad_in + (e / out_plane) * in_plane + static_cast<I>(where), grad_out[e]);
  }
}

// The outputs [lo, hi) along one axis whose windows may hold input position x.
__device__ __forceinline__ void outputs_over(int64_t x, int64_t out, int64_t stride, int64_t pad, int64_t kernel,
                                             int64_t* lo, int64_t* hi) {
  // o * stride - pad <= x  and  o * stride - pad + kernel > x
  const int64_t a = x + pad - kernel + 1;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  *hi = min(out, (x + pad) / stride + 1);
}

// One thread per input element: the sum of its share of every window holding it.
template <class T, class I>
__global__ void avg_backward_kernel(Pool2d p, const T* grad_out, T* grad_in) {
  const I in_width = static_cast<I>(p.in_width), in_plane = static_cast<I>(p.in_height) * in_width;
  const I total = static_cast<I>(p.planes) * in_plane, out_plane = static_cast<I>(p.out_height * p.out_width);
  for (I e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const I plane = e / in_plane, rest = e - plane * in_plane;
    const int64_t h = rest / in_width, w = rest - (rest / in_width) * in_width;
    const T* dy = grad_out + plane * out_plane;
    int64_t oh0, oh1, ow0, ow1;
    if (p.kind == Pool::kAdaptiveAvg) {
      // Output o covers [floor(o * in / out), ceil((o + 1) * in / out)): a few outputs at most.
      oh0 = h * p.out_height / p.in_height;
      oh1 = min(p.out_height, ((h + 1) * p.out_height + p.in_height - 1) / p.in_height);
      ow0 = w * p.out_width / p.in_width;
      ow1 = min(p.out_width, ((w + 1) * p.out_width + p.in_width - 1) / p.in_width);
      oh0 = oh0 > 0 ? oh0 - 1 : 0;
      ow0 = ow0 > 0 ? ow0 - 1 : 0;
    } else {
      outputs_over(h, p.out_height, p.stride_h, p.pad_h, p.kernel_h, &oh0, &oh1);
      outputs_over(w, p.out_width, p.stride_w, p.pad_w, p.kernel_w, &ow0, &ow1);
    }
    T total_value = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        Taps<int64_t> r, c;
        windows_of<int64_t>(p, oh, ow, &r, &c);
        const bool inside =
            h >= r.start + r.first && h < r.start + r.last && w >= c.start + c.first && w < c.start + c.last;
        const int64_t count = divisor(p, r, c);
        if (inside && count > 0) total_value += dy[oh * p.out_width + ow] / static_cast<T>(count);
      }
    }
    grad_in[e] = total_value;
  }
}

}  // namespace

bool pool2d_forward(Type type, const Pool2d& p, void* out, const void* in, int64_t* indices, void* stream) {
  const int64_t n = p.planes * p.out_height * p.out_width;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    if (fits_32_bits(p)) {
      pool_forward_kernel<T, int32_t>
          <<<grid_for(n), kThreads, 0, s>>>(p, static_cast<const T*>(in), static_cast<T*>(out), indices);
    } else {
      pool_forward_kernel<T, int64_t>
          <<<grid_for(n), kThreads, 0, s>>>(p, static_cast<const T*>(in), static_cast<T*>(out), indices);
    }
  });
}

bool pool2d_backward(Type type, const Pool2d& p, void* grad_in, const void* grad_out, const int64_t* indices,
                     void* stream) {
  const int64_t n_in = p.planes * p.in_height * p.in_width, n_out = p.planes * p.out_height * p.out_width;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (n_in == 0) return;
    T* dx = static_cast<T*>(grad_in);
    const T* dy = static_cast<const T*>(grad_out);
    const bool narrow = fits_32_bits(p);
    if (p.kind == Pool::kMax) {
      zero_kernel<T><<<grid_for(n_in), kThreads, 0, s>>>(dx, n_in);
      if (n_out == 0) return;
      if (narrow) {
        max_backward_kernel<T, int32_t><<<grid_for(n_out), kThreads, 0, s>>>(p, dy, indices, dx);
      } else {
        max_backward_kernel<T, int64_t><<<grid_for(n_out), kThreads, 0, s>>>(p, dy, indices, dx);
      }
    } else if (narrow) {
      avg_backward_kernel<T, int32_t><<<grid_for(n_in), kThreads, 0, s>>>(p, dy, dx);
    } else {
      avg_backward_kernel<T, int64_t><<<grid_for(n_in), kThreads, 0, s>>>(p, dy, dx);
    }
  });
}

}  // namespace ember::cuda::launch

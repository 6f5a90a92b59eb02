// 2-D pooling kernels. Every plane is independent, so threads split the planes (each plane's
// forward and backward run on one thread: the backward's scattered additions never race, and the
// results do not depend on the thread count). The window of each output row and column is clipped
// to the input once (Window), so the loops over a window test no bounds.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ember::cpu {
namespace {

// The taps of one window along one axis that fall inside the input: positions start + i * step for
// i in [first, last).
struct Window {
  int64_t start;
  int64_t first;
  int64_t last;
};

Window clip(int64_t start, int64_t kernel, int64_t step, int64_t size) {
  const int64_t first = start >= 0 ? 0 : (-start + step - 1) / step;
  const int64_t last = start > size - 1 ? 0 : std::min(kernel, (size - 1 - start) / step + 1);
  return {start, std::min(first, last), last};
}

// The clipped windows of every output position along one axis.
std::vector<Window> windows(int64_t out_size, int64_t in_size, int64_t kernel, int64_t stride, int64_t pad,
                            int64_t dilation) {
  std::vector<Window> result(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o)
    result[static_cast<size_t>(o)] = clip(o * stride - pad, kernel, dilation, in_size);
  return result;
}

// Planes per task: enough that a task touches at least kElementwiseGrain input elements.
int64_t plane_grain(const Pool2dGeometry& g) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, g.in_height * g.in_width));
}

template <class F>
void for_each_plane(const Pool2dGeometry& g, const F& body) {
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) body(plane);
  });
}

template <class T>
void max_forward(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices) {
  const std::vector<Window> rows = windows(g.out_height, g.in_height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
  const std::vector<Window> cols = windows(g.out_width, g.in_width, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for_each_plane(g, [&](int64_t plane) {
    const T* x = in + plane * in_plane;
    T* y = out + plane * out_plane;
    int64_t* where = indices + plane * out_plane;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window r = rows[static_cast<size_t>(oh)];
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const Window c = cols[static_cast<size_t>(ow)];
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_index = -1;  // an empty window (possible only in theory) routes no gradient
        for (int64_t i = r.first; i < r.last; ++i) {
          const int64_t row = (r.start + i * g.dilation_h) * g.in_width;
          for (int64_t j = c.first; j < c.last; ++j) {
            const int64_t index = row + c.start + j * g.dilation_w;
            const T v = x[index];
            // The first maximum wins ties; NaN beats everything (the last NaN is kept), as PyTorch.
            if (best_index < 0 || v > best || std::isnan(v)) {
              best = v;
              best_index = index;
            }
          }
        }
        y[oh * g.out_width + ow] = best;
        where[oh * g.out_width + ow] = best_index;
      }
    }
  });
}

template <class T>
void max_backward(const Pool2dGeometry& g, const T* grad_out, const int64_t* indices, T* grad_in) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for_each_plane(g, [&](int64_t plane) {
    T* dx = grad_in + plane * in_plane;
    const T* dy = grad_out + plane * out_plane;
    const int64_t* where = indices + plane * out_plane;
    std::fill(dx, dx + in_plane, T(0));
    for (int64_t o = 0; o < out_plane; ++o) {
      if (where[o] >= 0) dx[where[o]] += dy[o];
    }
  });
}

// The divisor of an average window: its size clipped to the padded input, or its elements inside
// the input when !count_include_pad.
int64_t divisor(const Window& r, const Window& c, const Pool2dGeometry& g, bool count_include_pad) {
  if (!count_include_pad) return (r.last - r.first) * (c.last - c.first);
  const int64_t h = std::min(r.start + g.kernel_h, g.in_height + g.pad_h) - r.start;
  const int64_t w = std::min(c.start + g.kernel_w, g.in_width + g.pad_w) - c.start;
  return h * w;
}

// Average of each window (rows[oh] x cols[ow]) and its backward, for avg_pool2d (clipped strided
// windows) and adaptive_avg_pool2d (the adaptive windows, which never need padding: their divisor
// is their size, as with !count_include_pad).
template <class T>
void mean_forward(const Pool2dGeometry& g, const std::vector<Window>& rows, const std::vector<Window>& cols,
                  bool count_include_pad, const T* in, T* out) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for_each_plane(g, [&](int64_t plane) {
    const T* x = in + plane * in_plane;
    T* y = out + plane * out_plane;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window r = rows[static_cast<size_t>(oh)];
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const Window c = cols[static_cast<size_t>(ow)];
        const int64_t count = divisor(r, c, g, count_include_pad);
        T total = 0;
        for (int64_t i = r.first; i < r.last; ++i) {
          const T* row = x + (r.start + i) * g.in_width + c.start;
          for (int64_t j = c.first; j < c.last; ++j) total += row[j];
        }
        // A window wholly in the padding (excluded by the shape rule) would divide 0 by 0: PyTorch writes 0.
        y[oh * g.out_width + ow] =
            count > 0 && r.first < r.last && c.first < c.last ? total / static_cast<T>(count) : T(0);
      }
    }
  });
}

template <class T>
void mean_backward(const Pool2dGeometry& g, const std::vector<Window>& rows, const std::vector<Window>& cols,
                   bool count_include_pad, const T* grad_out, T* grad_in) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for_each_plane(g, [&](int64_t plane) {
    T* dx = grad_in + plane * in_plane;
    const T* dy = grad_out + plane * out_plane;
    std::fill(dx, dx + in_plane, T(0));
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window r = rows[static_cast<size_t>(oh)];
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const Window c = cols[static_cast<size_t>(ow)];
        const int64_t count = divisor(r, c, g, count_include_pad);
        if (count <= 0) continue;
        const T share = dy[oh * g.out_width + ow] / static_cast<T>(count);
        for (int64_t i = r.first; i < r.last; ++i) {
          T* row = dx + (r.start + i) * g.in_width + c.start;
          for (int64_t j = c.first; j < c.last; ++j) row[j] += share;
        }
      }
    }
  });
}

std::vector<Window> avg_rows(const Pool2dGeometry& g) {
  return windows(g.out_height, g.in_height, g.kernel_h, g.stride_h, g.pad_h, 1);
}
std::vector<Window> avg_cols(const Pool2dGeometry& g) {
  return windows(g.out_width, g.in_width, g.kernel_w, g.stride_w, g.pad_w, 1);
}

// Adaptive windows: output o of `out_size` covers input [floor(o * in / out), ceil((o + 1) * in / out)).
std::vector<Window> adaptive_windows(int64_t out_size, int64_t in_size) {
  std::vector<Window> result(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) {
    const int64_t begin = o * in_size / out_size, end = ((o + 1) * in_size + out_size - 1) / out_size;
    result[static_cast<size_t>(o)] = {begin, 0, end - begin};
  }
  return result;
}

}  // namespace

void max_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* in, void* out, int64_t* indices) {
  dispatch_float("max_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    max_forward(g, static_cast<const T*>(in), static_cast<T*>(out), indices);
  });
}

void max_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, const int64_t* indices,
                         void* grad_in) {
  dispatch_float("max_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    max_backward(g, static_cast<const T*>(grad_out), indices, static_cast<T*>(grad_in));
  });
}

void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* in, void* out) {
  dispatch_float("avg_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    mean_forward(g, avg_rows(g), avg_cols(g), count_include_pad, static_cast<const T*>(in), static_cast<T*>(out));
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in) {
  dispatch_float("avg_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    mean_backward(g, avg_rows(g), avg_cols(g), count_include_pad, static_cast<const T*>(grad_out),
                  static_cast<T*>(grad_in));
  });
}

void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* in, void* out) {
  dispatch_float("adaptive_avg_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    mean_forward(g, adaptive_windows(g.out_height, g.in_height), adaptive_windows(g.out_width, g.in_width),
                 /*count_include_pad=*/false, static_cast<const T*>(in), static_cast<T*>(out));
  });
}

void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in) {
  dispatch_float("adaptive_avg_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    mean_backward(g, adaptive_windows(g.out_height, g.in_height), adaptive_windows(g.out_width, g.in_width),
                  /*count_include_pad=*/false, static_cast<const T*>(grad_out), static_cast<T*>(grad_in));
  });
}

}  // namespace ember::cpu

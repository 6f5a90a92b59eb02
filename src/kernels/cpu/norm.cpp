// Normalization kernels (batch norm per channel; layer norm and RMS norm per row), forward and
// backward. Sums are accumulated in double with four independent accumulators (precision for long
// float32 reductions, and enough independent adds to hide their latency); the elementwise parts
// run in the buffer's own type. Every statistic is summed in a fixed order by one thread, so the
// results do not depend on the thread count.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ember::cpu {
namespace {

// sum(x[i]) over n elements, in double.
template <class T>
double sum_of(const T* x, int64_t n) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += static_cast<double>(x[i]);
    a1 += static_cast<double>(x[i + 1]);
    a2 += static_cast<double>(x[i + 2]);
    a3 += static_cast<double>(x[i + 3]);
  }
  for (; i < n; ++i) a0 += static_cast<double>(x[i]);
  return (a0 + a1) + (a2 + a3);
}

// sum((x[i] - center)^2), in double.
template <class T>
double squared_deviations(const T* x, int64_t n, double center) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double d0 = static_cast<double>(x[i]) - center, d1 = static_cast<double>(x[i + 1]) - center;
    const double d2 = static_cast<double>(x[i + 2]) - center, d3 = static_cast<double>(x[i + 3]) - center;
    a0 += d0 * d0;
    a1 += d1 * d1;
    a2 += d2 * d2;
    a3 += d3 * d3;
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    a0 += d * d;
  }
  return (a0 + a1) + (a2 + a3);
}

// sum(dy[i] * (x[i] - center)), in double.
template <class T>
double centered_dot(const T* dy, const T* x, int64_t n, double center) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - center);
    a1 += static_cast<double>(dy[i + 1]) * (static_cast<double>(x[i + 1]) - center);
    a2 += static_cast<double>(dy[i + 2]) * (static_cast<double>(x[i + 2]) - center);
    a3 += static_cast<double>(dy[i + 3]) * (static_cast<double>(x[i + 3]) - center);
  }
  for (; i < n; ++i) a0 += static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - center);
  return (a0 + a1) + (a2 + a3);
}

// Items per task so that a task handles at least kElementwiseGrain elements.
int64_t grain_for(int64_t elements_per_item) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, elements_per_item));
}

// --- batch norm ---------------------------------------------------------------------------------------

template <class T>
void stats(int64_t outer, int64_t channels, int64_t inner, const T* x, T* mean, T* var) {
  const double count = static_cast<double>(outer * inner);
  parallel_for(0, channels, grain_for(outer * inner), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double total = 0;
      for (int64_t n = 0; n < outer; ++n) total += sum_of(x + (n * channels + c) * inner, inner);
      const double m = total / count;
      double deviations = 0;
      for (int64_t n = 0; n < outer; ++n) deviations += squared_deviations(x + (n * channels + c) * inner, inner, m);
      mean[c] = static_cast<T>(m);
      var[c] = static_cast<T>(deviations / count);
    }
  });
}

template <class T>
void affine(int64_t outer, int64_t channels, int64_t inner, const T* x, const T* scale, const T* shift, T* y) {
  parallel_for(0, outer * channels, grain_for(inner), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % channels;
      const T a = scale[c], b = shift[c];
      const T* in = x + row * inner;
      T* out = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) out[i] = in[i] * a + b;
    }
  });
}

template <class T>
void bn_backward(int64_t outer, int64_t channels, int64_t inner, bool batch_stats, const T* x, const T* dy,
                 const T* mean, const T* invstd, const T* weight, T* dx, T* dweight, T* dbias) {
  const double count = static_cast<double>(outer * inner);
  parallel_for(0, channels, grain_for(outer * inner), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const double m = static_cast<double>(mean[c]), rs = static_cast<double>(invstd[c]);
      double sum_dy = 0, sum_dy_centered = 0;
      if (dweight != nullptr || dbias != nullptr || (dx != nullptr && batch_stats)) {
        for (int64_t n = 0; n < outer; ++n) {
          const int64_t at = (n * channels + c) * inner;
          sum_dy += sum_of(dy + at, inner);
          sum_dy_centered += centered_dot(dy + at, x + at, inner, m);
        }
      }
      if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
      if (dweight != nullptr) dweight[c] = static_cast<T>(sum_dy_centered * rs);
      if (dx == nullptr) continue;
      const double w = weight != nullptr ? static_cast<double>(weight[c]) : 1.0;
      // With batch statistics: dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), and
      // xhat * mean(dy * xhat) = (x - mean) * invstd^2 * sum(dy * (x - mean)) / count.
      const T gain = static_cast<T>(w * rs);
      const T dy_mean = static_cast<T>(batch_stats ? sum_dy / count : 0.0);
      const T slope = static_cast<T>(batch_stats ? sum_dy_centered * rs * rs / count : 0.0);
      const T center = static_cast<T>(m);
      for (int64_t n = 0; n < outer; ++n) {
        const int64_t at = (n * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          dx[at + i] = (dy[at + i] - dy_mean - (x[at + i] - center) * slope) * gain;
        }
      }
    }
  });
}

// --- layer norm / RMS norm --------------------------------------------------------------------------

template <class T>
void rows_forward(int64_t rows, int64_t cols, double eps, bool center, const T* x, const T* weight, const T* bias, T* y,
                  T* mean, T* rstd) {
  parallel_for(0, rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* in = x + r * cols;
      T* out = y + r * cols;
      const double m = center ? sum_of(in, cols) / static_cast<double>(cols) : 0.0;
      const double rs = 1.0 / std::sqrt(squared_deviations(in, cols, m) / static_cast<double>(cols) + eps);
      if (center) mean[r] = static_cast<T>(m);
      rstd[r] = static_cast<T>(rs);
      const T tm = static_cast<T>(m), trs = static_cast<T>(rs);
      if (weight != nullptr && bias != nullptr) {
        for (int64_t j = 0; j < cols; ++j) out[j] = (in[j] - tm) * trs * weight[j] + bias[j];
      } else if (weight != nullptr) {
        for (int64_t j = 0; j < cols; ++j) out[j] = (in[j] - tm) * trs * weight[j];
      } else if (bias != nullptr) {
        for (int64_t j = 0; j < cols; ++j) out[j] = (in[j] - tm) * trs + bias[j];
      } else {
        for (int64_t j = 0; j < cols; ++j) out[j] = (in[j] - tm) * trs;
      }
    }
  });
}

// Grow-only scratch of the calling thread for the per-chunk column sums.
std::vector<double>& column_partials(int64_t count) {
  thread_local std::vector<double> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer;
}

// Note [deterministic column sums]: rows are cut into at most kRowChunks contiguous ranges by the row
// count alone; each range's column sums go to its own partial (one task per range), and the partials
// are added in range order.
constexpr int64_t kRowChunks = 16;

template <class T>
void rows_backward(int64_t rows, int64_t cols, bool center, const T* x, const T* dy, const T* mean, const T* rstd,
                   const T* weight, T* dx, T* dweight, T* dbias) {
  if (rows == 0) {
    if (dweight != nullptr) std::fill(dweight, dweight + cols, T(0));
    if (dbias != nullptr) std::fill(dbias, dbias + cols, T(0));
    return;
  }
  const int64_t chunks = std::min(rows, kRowChunks);
  const bool column_sums = dweight != nullptr || dbias != nullptr;
  double* partials = column_sums ? column_partials(2 * chunks * cols).data() : nullptr;
  const double inv_cols = 1.0 / static_cast<double>(cols);
  parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      double* sum_w = column_sums ? partials + 2 * chunk * cols : nullptr;
      double* sum_b = column_sums ? sum_w + cols : nullptr;
      if (column_sums) std::fill(sum_w, sum_w + 2 * cols, 0.0);
      for (int64_t r = chunk * rows / chunks; r < (chunk + 1) * rows / chunks; ++r) {
        const T* in = x + r * cols;
        const T* g = dy + r * cols;
        const double m = center ? static_cast<double>(mean[r]) : 0.0, rs = static_cast<double>(rstd[r]);
        // The row's sums for dx: sum(g * w) and sum(g * w * xhat).
        double sum_gw = 0, sum_gw_xhat = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double xhat = (static_cast<double>(in[j]) - m) * rs, grad = static_cast<double>(g[j]);
          const double gw = weight != nullptr ? grad * static_cast<double>(weight[j]) : grad;
          sum_gw += gw;
          sum_gw_xhat += gw * xhat;
          if (column_sums) {
            sum_w[j] += grad * xhat;
            sum_b[j] += grad;
          }
        }
        if (dx == nullptr) continue;
        // dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)); RMS norm has no mean(g w) term.
        const double a = center ? sum_gw * inv_cols : 0.0, b = sum_gw_xhat * inv_cols;
        T* out = dx + r * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const double xhat = (static_cast<double>(in[j]) - m) * rs, grad = static_cast<double>(g[j]);
          const double gw = weight != nullptr ? grad * static_cast<double>(weight[j]) : grad;
          out[j] = static_cast<T>(rs * (gw - a - xhat * b));
        }
      }
    }
  });
  if (!column_sums) return;
  parallel_for(0, cols, grain_for(chunks), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      double w = 0, b = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        w += partials[2 * chunk * cols + j];
        b += partials[(2 * chunk + 1) * cols + j];
      }
      if (dweight != nullptr) dweight[j] = static_cast<T>(w);
      if (dbias != nullptr) dbias[j] = static_cast<T>(b);
    }
  });
}

template <class T>
const T* cast(const void* p) {
  return static_cast<const T*>(p);
}
template <class T>
T* cast(void* p) {
  return static_cast<T*>(p);
}

}  // namespace

void channel_stats(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* x, void* mean, void* var) {
  dispatch_float("batch_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    stats(outer, channels, inner, cast<T>(x), cast<T>(mean), cast<T>(var));
  });
}

void channel_affine(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* x, const void* scale,
                    const void* shift, void* y) {
  dispatch_float("batch_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    affine(outer, channels, inner, cast<T>(x), cast<T>(scale), cast<T>(shift), cast<T>(y));
  });
}

void batch_norm_backward(DType dtype, int64_t outer, int64_t channels, int64_t inner, bool batch_stats, const void* x,
                         const void* grad_out, const void* mean, const void* invstd, const void* weight, void* grad_in,
                         void* grad_weight, void* grad_bias) {
  dispatch_float("batch_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    bn_backward(outer, channels, inner, batch_stats, cast<T>(x), cast<T>(grad_out), cast<T>(mean), cast<T>(invstd),
                cast<T>(weight), cast<T>(grad_in), cast<T>(grad_weight), cast<T>(grad_bias));
  });
}

void row_norm_forward(DType dtype, int64_t rows, int64_t cols, double eps, bool center, const void* x,
                      const void* weight, const void* bias, void* y, void* mean, void* rstd) {
  dispatch_float(center ? "layer_norm" : "rms_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    rows_forward(rows, cols, eps, center, cast<T>(x), cast<T>(weight), cast<T>(bias), cast<T>(y), cast<T>(mean),
                 cast<T>(rstd));
  });
}

void row_norm_backward(DType dtype, int64_t rows, int64_t cols, bool center, const void* x, const void* grad_out,
                       const void* mean, const void* rstd, const void* weight, void* grad_in, void* grad_weight,
                       void* grad_bias) {
  dispatch_float(center ? "layer_norm" : "rms_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    rows_backward(rows, cols, center, cast<T>(x), cast<T>(grad_out), cast<T>(mean), cast<T>(rstd), cast<T>(weight),
                  cast<T>(grad_in), cast<T>(grad_weight), cast<T>(grad_bias));
  });
}

}  // namespace ember::cpu

// Normalization kernels (batch norm per channel; layer norm and RMS norm per row), forward and
// backward. Batch norm sums in double, in vectors of four independent accumulators (precision for
// long float32 reductions, and enough independent adds to hide their latency: Note [batch norm
// sums]); its elementwise parts run in the buffer's own type. Layer norm and RMS norm run per Highway target (Note [row
// norm sums]). Every statistic is summed in a fixed order by one thread, so the results do not depend on the thread
// count.

// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/parallel.h"

// Note [row norm sums]
// A row's sums (mean, variance, and the backward's two dot products) accumulate in vectors of the
// buffer's type over blocks of kSumBlock elements; each block's lanes are then added into a double.
// The weight and bias gradients add each chunk of kChunkRows rows in the buffer's type, then the
// chunks in double. Chunks are cut by the row count alone (Note [deterministic column sums]).

// --- per Highway target: layer norm / RMS norm rows ----------------------------------------------------

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

constexpr int64_t kSumBlock = 512;

// sum(f(i)) over i in [0, n) in vector steps, where f(i) returns a vector of the lanes at i; the
// tail is summed by tail(i) for single elements.
template <class D, class VectorTerm, class ScalarTerm>
double block_sum(D d, int64_t n, const VectorTerm& term, const ScalarTerm& tail) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  double total = 0;
  int64_t i = 0;
  while (i + lanes <= n) {
    const int64_t end = std::min(n, i + kSumBlock) / lanes * lanes;
    V a0 = hn::Zero(d), a1 = a0;
    for (; i + 2 * lanes <= end; i += 2 * lanes) {
      a0 = hn::Add(a0, term(i));
      a1 = hn::Add(a1, term(i + lanes));
    }
    if (i < end) {
      a0 = hn::Add(a0, term(i));
      i += lanes;
    }
    total += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1))));
  }
  for (; i < n; ++i) total += static_cast<double>(tail(i));
  return total;
}

template <class T>
void rows_forward(int64_t begin, int64_t end, int64_t cols, double eps, bool center, const T* x, const T* weight,
                  const T* bias, T* y, T* mean, T* rstd) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const double inv_cols = 1.0 / static_cast<double>(cols);
  for (int64_t r = begin; r < end; ++r) {
    const T* in = x + r * cols;
    T* out = y + r * cols;
    // Two passes over the row (it stays in L1): the mean, then the squared deviations from it.
    const double m =
        center ? block_sum(
                     d, cols, [&](int64_t i) { return hn::LoadU(d, in + i); }, [&](int64_t i) { return in[i]; }) *
                     inv_cols
               : 0.0;
    const T tm = static_cast<T>(m);
    const auto vm = hn::Set(d, tm);
    const double squares = block_sum(
        d, cols,
        [&](int64_t i) {
          const auto c = hn::Sub(hn::LoadU(d, in + i), vm);
          return hn::Mul(c, c);
        },
        [&](int64_t i) { return (in[i] - tm) * (in[i] - tm); });
    const double rs = 1.0 / std::sqrt(squares * inv_cols + eps);
    if (center) mean[r] = tm;
    rstd[r] = static_cast<T>(rs);
    const T trs = static_cast<T>(rs);
    const auto vrs = hn::Set(d, trs);
    int64_t j = 0;
    for (; j + lanes <= cols; j += lanes) {
      auto v = hn::Mul(hn::Sub(hn::LoadU(d, in + j), vm), vrs);
      if (weight != nullptr && bias != nullptr) {
        v = hn::MulAdd(v, hn::LoadU(d, weight + j), hn::LoadU(d, bias + j));
      } else if (weight != nullptr) {
        v = hn::Mul(v, hn::LoadU(d, weight + j));
      } else if (bias != nullptr) {
        v = hn::Add(v, hn::LoadU(d, bias + j));
      }
      hn::StoreU(v, d, out + j);
    }
    for (; j < cols; ++j) {
      T v = (in[j] - tm) * trs;
      if (weight != nullptr) v *= weight[j];
      if (bias != nullptr) v += bias[j];
      out[j] = v;
    }
  }
}

// Rows [begin, end) of the backward. sum_w / sum_b (cols each, or null) receive this range's
// column sums of grad * xhat and grad, overwritten.
template <class T>
void rows_backward(int64_t begin, int64_t end, int64_t cols, bool center, const T* x, const T* dy, const T* mean,
                   const T* rstd, const T* weight, T* dx, T* sum_w, T* sum_b) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const double inv_cols = 1.0 / static_cast<double>(cols);
  if (sum_w != nullptr) {
    std::fill(sum_w, sum_w + cols, T(0));
    std::fill(sum_b, sum_b + cols, T(0));
  }
  for (int64_t r = begin; r < end; ++r) {
    const T* in = x + r * cols;
    const T* g = dy + r * cols;
    const T m = center ? mean[r] : T(0), rs = rstd[r];
    const V vm = hn::Set(d, m), vrs = hn::Set(d, rs);
    auto xhat_at = [&](int64_t i) { return hn::Mul(hn::Sub(hn::LoadU(d, in + i), vm), vrs); };
    auto gw_at = [&](int64_t i) {
      const V grad = hn::LoadU(d, g + i);
      return weight != nullptr ? hn::Mul(grad, hn::LoadU(d, weight + i)) : grad;
    };
    auto scalar_gw = [&](int64_t i) { return weight != nullptr ? g[i] * weight[i] : g[i]; };
    // The column sums first (a vertical pass), then the row's sums for dx: sum(g w), sum(g w xhat).
    if (sum_w != nullptr) {
      int64_t j = 0;
      for (; j + lanes <= cols; j += lanes) {
        const V grad = hn::LoadU(d, g + j);
        hn::StoreU(hn::MulAdd(grad, xhat_at(j), hn::LoadU(d, sum_w + j)), d, sum_w + j);
        hn::StoreU(hn::Add(hn::LoadU(d, sum_b + j), grad), d, sum_b + j);
      }
      for (; j < cols; ++j) {
        sum_w[j] += g[j] * ((in[j] - m) * rs);
        sum_b[j] += g[j];
      }
    }
    if (dx == nullptr) continue;
    const double sum_gw = center ? block_sum(d, cols, gw_at, scalar_gw) : 0.0;
    const double sum_gw_xhat = block_sum(
        d, cols, [&](int64_t i) { return hn::Mul(gw_at(i), xhat_at(i)); },
        [&](int64_t i) { return scalar_gw(i) * ((in[i] - m) * rs); });
    // dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)); RMS norm has no mean(g w) term.
    const T a = static_cast<T>(sum_gw * inv_cols), b = static_cast<T>(sum_gw_xhat * inv_cols);
    const V va = hn::Set(d, a), vb = hn::Set(d, b);
    T* out = dx + r * cols;
    int64_t j = 0;
    for (; j + lanes <= cols; j += lanes) {
      hn::StoreU(hn::Mul(vrs, hn::NegMulAdd(xhat_at(j), vb, hn::Sub(gw_at(j), va))), d, out + j);
    }
    for (; j < cols; ++j) out[j] = rs * ((scalar_gw(j) - a) - ((in[j] - m) * rs) * b);
  }
}

}  // namespace

// Note [batch norm sums]
// Batch norm's per-channel statistics sum a plane of each image in double: vectors of doubles
// (float32 lanes widened), four accumulators, then the lanes and the scalar tail. What to sum:
// x (kSum), (x - center)^2 (kSquares), dy (x - center) (kCentered). As scalar code with four
// double accumulators these ran at about one element per cycle; in vectors, over 16 x 64 x 28 x 28
// (resnet_block_f32), batch_norm_stats 271 -> 135 us and the backward 521 -> 435 us (its dx pass,
// compiled once, is the rest).
enum class ChannelSum : int { kSum, kSquares, kCentered };

template <class T>
double channel_sum(ChannelSum what, const T* x, const T* dy, int64_t n, double center) {
  const hn::ScalableTag<double> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto load = [&](const T* p) HWY_ATTR {
    if constexpr (std::is_same_v<T, float>) {
      return hn::PromoteTo(d, hn::LoadU(hn::Rebind<float, decltype(d)>(), p));
    } else {
      return hn::LoadU(d, p);
    }
  };
  const V c = hn::Set(d, center);
  const auto add = [&](V acc, int64_t i) HWY_ATTR {
    if (what == ChannelSum::kSum) return hn::Add(acc, load(x + i));
    const V centered = hn::Sub(load(x + i), c);
    return hn::MulAdd(what == ChannelSum::kSquares ? centered : load(dy + i), centered, acc);
  };
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = add(a0, i);
    a1 = add(a1, i + lanes);
    a2 = add(a2, i + 2 * lanes);
    a3 = add(a3, i + 3 * lanes);
  }
  for (; i + lanes <= n; i += lanes) a0 = add(a0, i);
  double total = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]) - (what == ChannelSum::kSum ? 0.0 : center);
    total += what == ChannelSum::kSum ? v : what == ChannelSum::kSquares ? v * v : static_cast<double>(dy[i]) * v;
  }
  return total;
}

double BatchNormSum(DType dtype, int what, const void* x, const void* dy, int64_t n, double center) {
  const auto kind = static_cast<ChannelSum>(what);
  if (dtype == kFloat32) return channel_sum(kind, cast<float>(x), cast<float>(dy), n, center);
  return channel_sum(kind, cast<double>(x), cast<double>(dy), n, center);
}

void RowNormForward(DType dtype, int64_t begin, int64_t end, int64_t cols, double eps, bool center, const void* x,
                    const void* weight, const void* bias, void* y, void* mean, void* rstd) {
  dispatch_float(center ? "layer_norm" : "rms_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    rows_forward(begin, end, cols, eps, center, cast<T>(x), cast<T>(weight), cast<T>(bias), cast<T>(y), cast<T>(mean),
                 cast<T>(rstd));
  });
}

void RowNormBackward(DType dtype, int64_t begin, int64_t end, int64_t cols, bool center, const void* x,
                     const void* grad_out, const void* mean, const void* rstd, const void* weight, void* grad_in,
                     void* sum_w, void* sum_b) {
  dispatch_float(center ? "layer_norm" : "rms_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    rows_backward(begin, end, cols, center, cast<T>(x), cast<T>(grad_out), cast<T>(mean), cast<T>(rstd),
                  cast<T>(weight), cast<T>(grad_in), cast<T>(sum_w), cast<T>(sum_b));
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/registry.h"
namespace ember::cpu {

HWY_EXPORT(BatchNormSum);
HWY_EXPORT(RowNormForward);
HWY_EXPORT(RowNormBackward);

namespace {

// Batch norm's sums in double (Note [batch norm sums]), per Highway target.
template <class T>
double sum_of(const T* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(BatchNormSum)(dtype_of<T>(), 0, x, nullptr, n, 0.0);
}
template <class T>
double squared_deviations(const T* x, int64_t n, double center) {
  return HWY_DYNAMIC_DISPATCH(BatchNormSum)(dtype_of<T>(), 1, x, nullptr, n, center);
}
template <class T>
double centered_dot(const T* dy, const T* x, int64_t n, double center) {
  return HWY_DYNAMIC_DISPATCH(BatchNormSum)(dtype_of<T>(), 2, x, dy, n, center);
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

namespace {

// Note [deterministic column sums]: rows are cut into chunks of kChunkRows by the row count alone;
// each chunk's column sums go to its own partial (one task per chunk), and the partials are added
// in chunk order.
constexpr int64_t kChunkRows = 64;

// Grow-only scratch of the calling thread for the per-chunk column sums.
template <class T>
T* column_partials(int64_t count) {
  thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

}  // namespace

void row_norm_forward(DType dtype, int64_t rows, int64_t cols, double eps, bool center, const void* x,
                      const void* weight, const void* bias, void* y, void* mean, void* rstd) {
  parallel_for(0, rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(RowNormForward)(dtype, begin, end, cols, eps, center, x, weight, bias, y, mean, rstd);
  });
}

void row_norm_backward(DType dtype, int64_t rows, int64_t cols, bool center, const void* x, const void* grad_out,
                       const void* mean, const void* rstd, const void* weight, void* grad_in, void* grad_weight,
                       void* grad_bias) {
  dispatch_float(center ? "layer_norm" : "rms_norm", dtype, [&](auto zero) {
    using T = decltype(zero);
    const bool column_sums = grad_weight != nullptr || grad_bias != nullptr;
    const int64_t chunks = std::max<int64_t>(1, (rows + kChunkRows - 1) / kChunkRows);
    T* partials = column_sums ? column_partials<T>(2 * chunks * cols) : nullptr;
    parallel_for(0, chunks, std::max<int64_t>(1, grain_for(kChunkRows * cols)), [&](int64_t begin, int64_t end) {
      for (int64_t chunk = begin; chunk < end; ++chunk) {
        T* sum_w = column_sums ? partials + 2 * chunk * cols : nullptr;
        HWY_DYNAMIC_DISPATCH(RowNormBackward)
        (dtype, chunk * kChunkRows, std::min(rows, (chunk + 1) * kChunkRows), cols, center, x, grad_out, mean, rstd,
         weight, grad_in, sum_w, column_sums ? sum_w + cols : nullptr);
      }
    });
    if (!column_sums) return;
    T* dweight = static_cast<T*>(grad_weight);
    T* dbias = static_cast<T*>(grad_bias);
    parallel_for(0, cols, grain_for(chunks), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        double w = 0, b = 0;
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
          w += static_cast<double>(partials[2 * chunk * cols + j]);
          b += static_cast<double>(partials[(2 * chunk + 1) * cols + j]);
        }
        if (dweight != nullptr) dweight[j] = static_cast<T>(w);
        if (dbias != nullptr) dbias[j] = static_cast<T>(b);
      }
    });
  });
}

// --- registry entries ----------------------------------------------------------------------------
//
// Operands are contiguous and of one float dtype. Optional operands (weight, bias, a gradient that
// is not needed) may be absent; their data pointers are then null, which the kernels accept.

namespace {

// x (outer, channels, inner...) seen as the kernels' three sizes.
struct ChannelSizes {
  int64_t outer, channels, inner;
};
ChannelSizes channel_sizes(const Operand& x) {
  const int64_t outer = x.size(0), channels = x.size(1);
  return {outer, channels, channels == 0 || outer == 0 ? 0 : x.numel() / (outer * channels)};
}

// inputs: x (N, C, ...); outputs: mean (C), biased var (C).
void batch_norm_stats_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  const ChannelSizes z = channel_sizes(x);
  channel_stats(x.dtype, z.outer, z.channels, z.inner, x.data, c.outputs[0].data, c.outputs[1].data);
}
// inputs: x, scale (C), shift (C); outputs: y = x * scale[c] + shift[c].
void batch_norm_apply_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  if (x.numel() == 0) return;
  const ChannelSizes z = channel_sizes(x);
  channel_affine(x.dtype, z.outer, z.channels, z.inner, x.data, c.inputs[1].data, c.inputs[2].data, c.outputs[0].data);
}
// inputs: x, grad_out, mean, invstd, weight; outputs: grad_in, grad_weight, grad_bias.
void batch_norm_backward_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  const ChannelSizes z = channel_sizes(x);
  batch_norm_backward(x.dtype, z.outer, z.channels, z.inner, c.get<BatchNormAttrs>().training, x.data, c.inputs[1].data,
                      c.inputs[2].data, c.inputs[3].data, c.inputs[4].data, c.outputs[0].data, c.outputs[1].data,
                      c.outputs[2].data);
}

// The rows and columns of a layer or RMS norm over x's trailing normalized_shape dims.
struct RowSizes {
  int64_t rows, cols;
};
RowSizes row_sizes(const KernelCall& c) {
  const int64_t cols = c.get<LayerNormAttrs>().normalized_shape.numel();
  return {cols == 0 ? 0 : c.inputs[0].numel() / cols, cols};
}

// layer_norm: inputs x, weight, bias; outputs y, mean, rstd (one per row).
void layer_norm_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  if (x.numel() == 0) return;
  const RowSizes z = row_sizes(c);
  row_norm_forward(x.dtype, z.rows, z.cols, c.get<LayerNormAttrs>().eps, true, x.data, c.inputs[1].data,
                   c.inputs[2].data, c.outputs[0].data, c.outputs[1].data, c.outputs[2].data);
}
// rms_norm: inputs x, weight; outputs y, rstd.
void rms_norm_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  if (x.numel() == 0) return;
  const RowSizes z = row_sizes(c);
  row_norm_forward(x.dtype, z.rows, z.cols, c.get<LayerNormAttrs>().eps, false, x.data, c.inputs[1].data, nullptr,
                   c.outputs[0].data, nullptr, c.outputs[1].data);
}
// layer_norm's backward: inputs x, grad_out, mean, rstd, weight; outputs grad_in, grad_weight, grad_bias.
void layer_norm_backward_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  const RowSizes z = row_sizes(c);
  row_norm_backward(x.dtype, z.rows, z.cols, true, x.data, c.inputs[1].data, c.inputs[2].data, c.inputs[3].data,
                    c.inputs[4].data, c.outputs[0].data, c.outputs[1].data, c.outputs[2].data);
}
// rms_norm's backward: inputs x, grad_out, rstd, weight; outputs grad_in, grad_weight.
void rms_norm_backward_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  const RowSizes z = row_sizes(c);
  row_norm_backward(x.dtype, z.rows, z.cols, false, x.data, c.inputs[1].data, nullptr, c.inputs[2].data,
                    c.inputs[3].data, c.outputs[0].data, c.outputs[1].data, nullptr);
}

}  // namespace

void register_norm_kernels(KernelTable& table) {
  table.add(OpKind::kBatchNormStats, DeviceType::kCPU, batch_norm_stats_kernel, kFloat32Or64);
  table.add(OpKind::kBatchNormApply, DeviceType::kCPU, batch_norm_apply_kernel, kFloat32Or64);
  table.add(OpKind::kBatchNormGrad, DeviceType::kCPU, batch_norm_backward_kernel, kFloat32Or64);
  table.add(OpKind::kLayerNorm, DeviceType::kCPU, layer_norm_kernel, kFloat32Or64);
  table.add(OpKind::kLayerNormGrad, DeviceType::kCPU, layer_norm_backward_kernel, kFloat32Or64);
  table.add(OpKind::kRmsNorm, DeviceType::kCPU, rms_norm_kernel, kFloat32Or64);
  table.add(OpKind::kRmsNormGrad, DeviceType::kCPU, rms_norm_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

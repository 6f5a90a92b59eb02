// Softmax and log_softmax over a dim, forward and backward (declared in reduce.h), compiled for
// every Highway target and chosen at run time. Apart from the reductions (reduce.cpp) so that no
// file dominates the build; they share only the loads and stores of float_vector-inl.h.
// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

#include "kernels/cpu/float_vector-inl.h"  // kHalfType, kVectorLoad, load_vector, store_vector
#include "kernels/cpu/functors-inl.h"      // vec::exp, exp_nonpositive_with_subnormals

// Columns per vertical tile, and elements below which a softmax stays on one thread.
constexpr int64_t kSoftmaxTile = 256;
constexpr int64_t kSoftmaxGrain = 8192;

// Note [softmax special rows]
// PyTorch's softmax of a row that holds a nan, or whose max is not finite (+inf, or every element
// -inf), is nan everywhere: x - max or the sum turns nan. The last-dim kernels find such rows in
// their max pass and fill them with nan; every other row has x - max in [-inf, 0], which
// exp_nonpositive_with_subnormals takes (Note [attention exp]; within 0.88 ulp, and Highway's Exp
// where the result is subnormal) without the overflow and nan patches of vec::exp.

// Rows at most this long are vectorized across rows (one lane per row) instead of along them.
constexpr int64_t kShortRow = 16;

template <class T>
void fill_nan(T* y, int64_t n) {
  std::fill(y, y + n, static_cast<T>(std::numeric_limits<compute_t<T>>::quiet_NaN()));
}

// The max of x[0, n) and whether any element is nan.
template <class T>
compute_t<T> row_max(const T* x, int64_t n, bool* has_nan) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  bool nan = false;
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    V m0 = hn::Set(d, m), m1 = m0, m2 = m0, m3 = m0;
    auto bad = hn::Ne(hn::Zero(d), hn::Zero(d));  // all false
    for (; i + 4 * lanes <= n; i += 4 * lanes) {
      const V x0 = load_vector(d, x + i), x1 = load_vector(d, x + i + lanes);
      const V x2 = load_vector(d, x + i + 2 * lanes), x3 = load_vector(d, x + i + 3 * lanes);
      m0 = hn::Max(m0, x0);
      m1 = hn::Max(m1, x1);
      m2 = hn::Max(m2, x2);
      m3 = hn::Max(m3, x3);
      bad = hn::Or(bad, hn::Or(hn::Or(hn::IsNaN(x0), hn::IsNaN(x1)), hn::Or(hn::IsNaN(x2), hn::IsNaN(x3))));
    }
    for (; i + lanes <= n; i += lanes) {
      const V x0 = load_vector(d, x + i);
      m0 = hn::Max(m0, x0);
      bad = hn::Or(bad, hn::IsNaN(x0));
    }
    nan = !hn::AllFalse(d, bad);
    m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  }
  for (; i < n; ++i) {
    const C v = static_cast<C>(x[i]);
    nan = nan || v != v;
    m = std::max(m, v);
  }
  *has_nan = nan;
  return m;
}

// sum(exp(x[i] - m)) over x[0, n); with kStore, exp(x[i] - m) is also written to y[i].
template <bool kStore, class T>
compute_t<T> sum_exp(const T* x, int64_t n, compute_t<T> m, T* y) {
  using C = compute_t<T>;
  C s = 0;
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const V vm = hn::Set(d, m);
    V s0 = hn::Zero(d), s1 = s0;
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
      const V e0 = exp_nonpositive_with_subnormals(d, hn::Sub(load_vector(d, x + i), vm));
      const V e1 = exp_nonpositive_with_subnormals(d, hn::Sub(load_vector(d, x + i + lanes), vm));
      if constexpr (kStore) {
        store_vector(d, e0, y + i);
        store_vector(d, e1, y + i + lanes);
      }
      s0 = hn::Add(s0, e0);
      s1 = hn::Add(s1, e1);
    }
    for (; i + lanes <= n; i += lanes) {
      const V e0 = exp_nonpositive_with_subnormals(d, hn::Sub(load_vector(d, x + i), vm));
      if constexpr (kStore) store_vector(d, e0, y + i);
      s0 = hn::Add(s0, e0);
    }
    s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  }
  for (; i < n; ++i) {
    const C e = std::exp(static_cast<C>(x[i]) - m);
    if constexpr (kStore) y[i] = static_cast<T>(e);
    s += e;
  }
  return s;
}

// Note [masked rows]: a row of attention scores under a causal or padding mask ends in a run of
// -inf, whose exps are exactly 0. The sum stops before that run, at a whole number of its main
// loop's steps (two vectors), so every element before it meets the same accumulator as over the
// whole row, and the skipped ones would only have added +0: the same sum, bit for bit. Softmax
// writes +0 there (0 * factor) without computing the exps, log_softmax -inf as before. Softmax of
// causal rows of 512 (masked_softmax_f32_compiled, 2 threads, Zen 4, binaries alternated 3 times):
// 7.15-7.16 -> 6.65-6.79 ms; rows without such a run (softmax_f32_8192x1024) 2.10-2.12 -> 2.10-2.11.
//
// The end of the row once the run of -inf at its end is cut off, rounded up to a whole number of
// `step`s (n when the row does not end in -inf).
template <class T>
int64_t live_length(const T* x, int64_t n, int64_t step) {
  using C = compute_t<T>;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  int64_t end = n;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const auto ninf = hn::Set(d, kNegInf);
    while (end >= lanes && hn::AllTrue(d, hn::Eq(load_vector(d, x + end - lanes), ninf))) end -= lanes;
  }
  while (end > 0 && static_cast<C>(x[end - 1]) == kNegInf) --end;
  return std::min(n, (end + step - 1) / step * step);
}

// One row: max, then the sum of exp(x - max) (softmax stores the exps: the row is in L1), then the
// output: softmax exp(x - max) / sum, log_softmax (x - max) - log(sum), as PyTorch's vector kernel.
// 16-bit softmax recomputes the exps from x rather than reading back rounded ones.
template <bool kLog, class T>
void softmax_row(T* y, const T* x, int64_t n) {
  using C = compute_t<T>;
  constexpr bool kStoreExp = !kLog && !kHalfType<T>;
  bool has_nan = false;
  const C m = row_max(x, n, &has_nan);
  if (has_nan || !(std::abs(m) < std::numeric_limits<C>::infinity())) return fill_nan(y, n);
  int64_t live = n;  // Note [masked rows]
  if constexpr (kVectorLoad<T>) live = live_length(x, n, 2 * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<C>())));
  const C s = sum_exp<kStoreExp>(x, live, m, y);
  const C factor = kLog ? std::log(s) : C(1) / s;
  if constexpr (!kLog) {
    std::fill(y + live, y + n, T(0));
    n = live;
  }
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const auto vm = hn::Set(d, m), vf = hn::Set(d, factor);
    for (; i + lanes <= n; i += lanes) {
      if constexpr (kLog) {
        store_vector(d, hn::Sub(hn::Sub(load_vector(d, x + i), vm), vf), y + i);
      } else if constexpr (kStoreExp) {
        hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vf), d, y + i);
      } else {
        store_vector(d, hn::Mul(exp_nonpositive_with_subnormals(d, hn::Sub(load_vector(d, x + i), vm)), vf), y + i);
      }
    }
  }
  for (; i < n; ++i) {
    if constexpr (kLog) {
      y[i] = static_cast<T>((static_cast<C>(x[i]) - m) - factor);
    } else if constexpr (kStoreExp) {
      y[i] = y[i] * factor;
    } else {
      y[i] = static_cast<T>(std::exp(static_cast<C>(x[i]) - m) * factor);
    }
  }
}

// Lanes(d) short rows of n <= kShortRow elements at once, one row per lane: the columns are
// copied into `buffer` (n vectors), reduced and transformed there, and written back row by row.
// Returns false, writing nothing, when a row is special (Note [softmax special rows]).
template <bool kLog, class C>
bool softmax_short_rows(C* y, const C* x, int64_t n) {
  const hn::ScalableTag<C> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN C buffer[kShortRow * hn::MaxLanes(d)];
  // A plain transposing copy into the buffer: cheaper than n gathers on current x86 cores.
  for (int64_t l = 0; l < lanes; ++l) {
    for (int64_t k = 0; k < n; ++k) buffer[k * lanes + l] = x[l * n + k];
  }
  V m = hn::Set(d, -std::numeric_limits<C>::infinity());
  auto bad = hn::Ne(hn::Zero(d), hn::Zero(d));
  for (int64_t k = 0; k < n; ++k) {
    const V column = hn::Load(d, buffer + k * lanes);
    m = hn::Max(m, column);
    bad = hn::Or(bad, hn::IsNaN(column));
  }
  if (!hn::AllFalse(d, bad) || !hn::AllTrue(d, hn::IsFinite(m))) return false;
  V s = hn::Zero(d);
  for (int64_t k = 0; k < n; ++k) {
    const V e = exp_nonpositive_with_subnormals(d, hn::Sub(hn::Load(d, buffer + k * lanes), m));
    if constexpr (!kLog) hn::Store(e, d, buffer + k * lanes);
    s = hn::Add(s, e);
  }
  const V factor = kLog ? hn::Log(d, s) : hn::Div(hn::Set(d, C(1)), s);
  for (int64_t k = 0; k < n; ++k) {
    const V v = hn::Load(d, buffer + k * lanes);
    hn::Store(kLog ? hn::Sub(hn::Sub(v, m), factor) : hn::Mul(v, factor), d, buffer + k * lanes);
  }
  for (int64_t l = 0; l < lanes; ++l) {
    for (int64_t k = 0; k < n; ++k) y[l * n + k] = buffer[k * lanes + l];
  }
  return true;
}

template <bool kLog, class T>
void softmax_last_dim(T* out, const T* in, int64_t rows, int64_t n) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (n <= kShortRow) {
      const hn::ScalableTag<T> d;
      const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
      const int64_t blocks = (rows + lanes - 1) / lanes;
      parallel_for(0, blocks, std::max<int64_t>(1, kSoftmaxGrain / (n * lanes)), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t first = b * lanes, count = std::min(lanes, rows - first);
          if (count == lanes && softmax_short_rows<kLog>(out + first * n, in + first * n, n)) continue;
          for (int64_t r = first; r < first + count; ++r) softmax_row<kLog>(out + r * n, in + r * n, n);
        }
      });
      return;
    }
  }
  parallel_for(0, rows, std::max<int64_t>(1, kSoftmaxGrain / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) softmax_row<kLog>(out + r * n, in + r * n, n);
  });
}

// Backward over the last dim, one row at a time: softmax dx = y (g - sum(g y)); log_softmax
// dx = g - exp(y) sum(g), as PyTorch.
template <bool kLog, class T>
void softmax_backward_row(T* dx, const T* g, const T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V a0 = hn::Zero(d), a1 = a0;
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const V g0 = hn::LoadU(d, g + i), g1 = hn::LoadU(d, g + i + lanes);
    if constexpr (kLog) {
      a0 = hn::Add(a0, g0);
      a1 = hn::Add(a1, g1);
    } else {
      a0 = hn::MulAdd(g0, hn::LoadU(d, y + i), a0);
      a1 = hn::MulAdd(g1, hn::LoadU(d, y + i + lanes), a1);
    }
  }
  T total = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (int64_t j = i; j < n; ++j) total += kLog ? g[j] : g[j] * y[j];
  const V vt = hn::Set(d, total);
  i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V gv = hn::LoadU(d, g + i), yv = hn::LoadU(d, y + i);
    hn::StoreU(kLog ? hn::NegMulAdd(vec::exp(d, yv), vt, gv) : hn::Mul(yv, hn::Sub(gv, vt)), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = kLog ? g[i] - std::exp(y[i]) * total : y[i] * (g[i] - total);
}

// Softmax over the middle dim when inner > 1, for a tile of adjacent columns at a time: the column
// max, then the sum of exp(x - max), then the output (exp taken once per element except for
// 16-bit outputs, which are recomputed from x rather than read back rounded). A column of only
// -inf, or holding +inf or nan, gets nan through x - max or the sum, as PyTorch.
template <bool kLog, class T>
void softmax_middle_dim(T* out, const T* in, int64_t outer, int64_t dim_size, int64_t inner) {
  using C = compute_t<T>;
  constexpr bool kStoreExp = !kLog && !kHalfType<T>;  // pass 2 writes exp(x - max), pass 3 scales it
  const int64_t tiles = (inner + kSoftmaxTile - 1) / kSoftmaxTile;
  const int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / (dim_size * std::min(inner, kSoftmaxTile)));
  parallel_for(0, outer * tiles, grain, [&](int64_t begin, int64_t end) {
    HWY_ALIGN C m[kSoftmaxTile];
    HWY_ALIGN C s[kSoftmaxTile];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / tiles, column = (task % tiles) * kSoftmaxTile;
      const int64_t n = std::min(kSoftmaxTile, inner - column);
      const T* x = in + o * dim_size * inner + column;
      T* y = out + o * dim_size * inner + column;
      std::fill(m, m + n, -std::numeric_limits<C>::infinity());
      std::fill(s, s + n, C(0));
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) hn::Store(hn::Max(hn::Load(d, m + j), load_vector(d, row + j)), d, m + j);
        }
        for (; j < n; ++j) m[j] = std::max(m[j], static_cast<C>(row[j]));
      }
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        T* dst = y + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) {
            const auto e = vec::exp(d, hn::Sub(load_vector(d, row + j), hn::Load(d, m + j)));
            if constexpr (kStoreExp) hn::StoreU(e, d, dst + j);
            hn::Store(hn::Add(hn::Load(d, s + j), e), d, s + j);
          }
        }
        for (; j < n; ++j) {
          const C e = std::exp(static_cast<C>(row[j]) - m[j]);
          if constexpr (kStoreExp) dst[j] = e;
          s[j] += e;
        }
      }
      for (int64_t j = 0; j < n; ++j) s[j] = kLog ? std::log(s[j]) : C(1) / s[j];
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        T* dst = y + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) {
            const auto factor = hn::Load(d, s + j);
            if constexpr (kStoreExp) {
              hn::StoreU(hn::Mul(hn::LoadU(d, dst + j), factor), d, dst + j);
            } else {
              const auto centered = hn::Sub(load_vector(d, row + j), hn::Load(d, m + j));
              store_vector(d, kLog ? hn::Sub(centered, factor) : hn::Mul(vec::exp(d, centered), factor), dst + j);
            }
          }
        }
        for (; j < n; ++j) {
          if constexpr (kStoreExp) {
            dst[j] = dst[j] * s[j];
          } else {
            const C centered = static_cast<C>(row[j]) - m[j];
            dst[j] = static_cast<T>(kLog ? centered - s[j] : std::exp(centered) * s[j]);
          }
        }
      }
    }
  });
}

}  // namespace

void SoftmaxKernel(OpKind op, DType dtype, void* out, const void* in, int64_t outer, int64_t dim_size, int64_t inner) {
  EMBER_CHECK(op == OpKind::kSoftmax || op == OpKind::kLogSoftmax, "[", op_info(op).name,
              "] is not a softmax primitive");
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", dtype);
    } else {
      T* y = static_cast<T*>(out);
      const T* x = static_cast<const T*>(in);
      const bool log = op == OpKind::kLogSoftmax;
      if (inner == 1) {
        log ? softmax_last_dim<true>(y, x, outer, dim_size) : softmax_last_dim<false>(y, x, outer, dim_size);
      } else {
        log ? softmax_middle_dim<true>(y, x, outer, dim_size, inner)
            : softmax_middle_dim<false>(y, x, outer, dim_size, inner);
      }
    }
  });
}

void SoftmaxBackwardKernel(OpKind op, DType dtype, void* grad_in, const void* grad_out, const void* out, int64_t rows,
                           int64_t n) {
  EMBER_CHECK(op == OpKind::kSoftmax || op == OpKind::kLogSoftmax, "[", op_info(op).name,
              "] is not a softmax primitive");
  const bool log = op == OpKind::kLogSoftmax;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    T* dx = static_cast<T*>(grad_in);
    const T* g = static_cast<const T*>(grad_out);
    const T* y = static_cast<const T*>(out);
    parallel_for(0, rows, std::max<int64_t>(1, kSoftmaxGrain / n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        log ? softmax_backward_row<true>(dx + r * n, g + r * n, y + r * n, n)
            : softmax_backward_row<false>(dx + r * n, g + r * n, y + r * n, n);
      }
    });
  };
  if (dtype == kFloat32) {
    run(float{});
  } else if (dtype == kFloat64) {
    run(double{});
  } else {
    EMBER_FAIL("[", op_info(op).name, "] the backward kernel takes float32 or float64, got ", dtype);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/registry.h"

namespace ember::cpu {

HWY_EXPORT(SoftmaxKernel);
HWY_EXPORT(SoftmaxBackwardKernel);

void softmax(OpKind op, DType dtype, void* out, const void* in, int64_t outer, int64_t dim_size, int64_t inner) {
  if (outer * dim_size * inner == 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxKernel)(op, dtype, out, in, outer, dim_size, inner);
}

void softmax_backward(OpKind op, DType dtype, void* grad_in, const void* grad_out, const void* out, int64_t rows,
                      int64_t n) {
  if (rows * n == 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardKernel)(op, dtype, grad_in, grad_out, out, rows, n);
}

// --- registry entries ----------------------------------------------------------------------------

namespace {

// inputs: x (contiguous); outputs: y. DimAttrs::dim is the normalized dim.
void softmax_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  const int64_t size = x.dim() == 0 ? 1 : x.size(d);
  for (int i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= x.size(i);
    if (i > d) inner *= x.size(i);
  }
  softmax(c.kind, x.dtype, out.data, x.data, outer, size, inner);
}

// inputs: the output gradient and the forward's output, contiguous, normalized over the last dim;
// outputs: the input gradient.
void softmax_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &y = c.inputs[1], &dx = c.outputs[0];
  if (dx.numel() == 0) return;
  const int64_t n = y.dim() == 0 ? 1 : y.size(-1);
  const OpKind forward = c.kind == OpKind::kSoftmaxGrad ? OpKind::kSoftmax : OpKind::kLogSoftmax;
  softmax_backward(forward, y.dtype, dx.data, grad.data, y.data, dx.numel() / n, n);
}

}  // namespace

void register_softmax_kernels(KernelTable& table) {
  table.add(OpKind::kSoftmax, DeviceType::kCPU, softmax_kernel, kFloatTypes);
  table.add(OpKind::kLogSoftmax, DeviceType::kCPU, softmax_kernel, kFloatTypes);
  table.add(OpKind::kSoftmaxGrad, DeviceType::kCPU, softmax_backward_kernel, kFloat32Or64);
  table.add(OpKind::kLogSoftmaxGrad, DeviceType::kCPU, softmax_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif

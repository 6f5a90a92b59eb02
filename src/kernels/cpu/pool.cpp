// 2-D pooling kernels. Every plane is independent, so threads split the planes (each plane's
// forward and backward run on one thread: the backward's scattered additions never race, and the
// results do not depend on the thread count). The window of each output row and column is clipped
// to the input once (Window), so the loops over a window test no bounds.
//
// Max pooling's forward has a vector path, compiled for every Highway target: for stride_w in
// 1..4 and no dilation, the output columns whose windows lie inside the input's columns are done
// a vector of outputs at a time. Lane l of tap j reads input column (ow0 + l) * stride_w + j, so
// one LoadInterleaved<stride_w> gives stride_w consecutive taps for every lane, de-interleaved,
// with no gather. Rows are clipped as in the scalar path; the columns next to the padding (and
// any tail shorter than a 128-bit vector) take the scalar window. Both paths scan a window in the
// same order with the same rule (first maximum wins ties, a NaN replaces anything), so they agree
// to the bit, indices included. A row's last outputs, if more than a 128-bit vector holds, take one
// partial vector for strides 1 and 2 where masked loads cannot fault (AVX2 and up; MNIST's first
// pooling, 32 x 16 x 24 x 24 to 12 x 12 without indices, 56 -> 38 us), else 128-bit steps (MNIST's
// 4-wide second pooling, where a partial 512-bit vector measured 14 -> 23 us).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/pool.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ember/half.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/parallel.h"

// Target-independent helpers, compiled once (this file is included once per Highway target).
#ifndef EMBER_KERNELS_CPU_POOL_SHARED
#define EMBER_KERNELS_CPU_POOL_SHARED
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

// The max of one clipped window of plane x and where it is (h * in_width + w; `where` may be null),
// as PyTorch: the first maximum wins ties; NaN beats everything (the last NaN is kept).
template <class T>
inline void max_window(const Pool2dGeometry& g, const T* x, const Window& r, const Window& c, T* y, int64_t* where) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_index = -1;  // an empty window (possible only in theory) routes no gradient
  for (int64_t i = r.first; i < r.last; ++i) {
    const int64_t row = (r.start + i * g.dilation_h) * g.in_width;
    for (int64_t j = c.first; j < c.last; ++j) {
      const int64_t index = row + c.start + j * g.dilation_w;
      const T v = x[index];
      if (best_index < 0 || v > best || std::isnan(v)) {
        best = v;
        best_index = index;
      }
    }
  }
  *y = best;
  if (where != nullptr) *where = best_index;
}

// The output columns [first, last) whose windows the vector path can read in full: the window
// starts at or right of column 0, and the de-interleaving loads, which read whole groups of
// stride_w columns, stay inside the row.
struct VectorColumns {
  int64_t first;
  int64_t last;
};

VectorColumns vector_columns(const Pool2dGeometry& g) {
  const int64_t stride = g.stride_w;
  const int64_t reach = (g.kernel_w + stride - 1) / stride * stride;  // columns read per lane
  const int64_t first = std::min(g.out_width, (g.pad_w + stride - 1) / stride);
  // ow * stride - pad_w + reach <= in_width
  const int64_t room = g.in_width + g.pad_w - reach;
  const int64_t last = room < 0 ? first : std::clamp(room / stride + 1, first, g.out_width);
  return {first, last};
}

// Whether max_pool2d's forward can take the vector path (see the top of the file).
bool max_vector_path(const Pool2dGeometry& g) {
  return g.dilation_w == 1 && g.dilation_h == 1 && g.stride_w >= 1 && g.stride_w <= 4 &&
         g.in_height * g.in_width < (int64_t{1} << 31);
}

}  // namespace
}  // namespace ember::cpu
#endif  // EMBER_KERNELS_CPU_POOL_SHARED

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/partial_vector-inl.h"  // load_part, store_part

// Whether a row's last outputs take one partial vector (kStride 1 or 2, on targets with masked
// loads that cannot fault) instead of 128-bit steps and single windows.
#if HWY_TARGET != HWY_SCALAR && !HWY_MEM_OPS_MIGHT_FAULT
#define EMBER_POOL_PARTIAL_TAIL 1
#else
#define EMBER_POOL_PARTIAL_TAIL 0
#endif
template <int kStride>
inline constexpr bool kPartialTail = kStride <= 2 && EMBER_POOL_PARTIAL_TAIL;

// v[t] = lanes of taps t of kStride consecutive taps: v[t][l] = p[l * kStride + t], for every lane,
// or (kPartial, where kPartialTail) for the first `count` lanes: the rest are zero, and nothing past
// lane count - 1's taps is read.
template <int kStride, bool kPartial, class D, class V>
HWY_INLINE void load_taps(D d, const hn::TFromD<D>* p, int64_t count, V* v) {
#if EMBER_POOL_PARTIAL_TAIL
  if constexpr (kPartial && kStride == 1) {
    v[0] = load_part(d, p, count);
    return;
  } else if constexpr (kPartial && kStride == 2) {
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const V lo = load_part(d, p, std::min(2 * count, lanes));
    const V hi = 2 * count > lanes ? load_part(d, p + lanes, 2 * count - lanes) : hn::Zero(d);
    v[0] = hn::ConcatEven(d, hi, lo);
    v[1] = hn::ConcatOdd(d, hi, lo);
    return;
  }
#else
  (void)count;
#endif
  if constexpr (kStride == 1) {
    v[0] = hn::LoadU(d, p);
  } else if constexpr (kStride == 2) {
    hn::LoadInterleaved2(d, p, v[0], v[1]);
  } else if constexpr (kStride == 3) {
    hn::LoadInterleaved3(d, p, v[0], v[1], v[2]);
  } else {
    hn::LoadInterleaved4(d, p, v[0], v[1], v[2], v[3]);
  }
}
#undef EMBER_POOL_PARTIAL_TAIL

// Outputs [ow0, ow0 + count) of the output row whose clipped row window is r (count: Lanes(d), or
// fewer with kPartial, where kPartialTail); every column window is whole (vector_columns). kIndices: also where
// each maximum is (else `where` is unused).
template <int kStride, bool kIndices, bool kPartial = false, class D>
HWY_INLINE void max_vector(D d, const Pool2dGeometry& g, const hn::TFromD<D>* x, const Window& r, int64_t ow0,
                           int64_t count, hn::TFromD<D>* y, int64_t* where) {
  using T = hn::TFromD<D>;
  const hn::RebindToSigned<D> di;  // int32 lanes for float, int64 for double: the index in the plane
  using TI = hn::TFromD<decltype(di)>;
  using V = hn::Vec<D>;
  using VI = hn::Vec<decltype(di)>;
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(T);
  const size_t lanes = hn::Lanes(d);

  HWY_ALIGN TI steps[kMaxLanes];  // lane l's first column, relative to lane 0's
  for (size_t l = 0; l < lanes; ++l) steps[l] = static_cast<TI>(l * kStride);
  const VI lane_offsets = hn::Load(di, steps);

  const int64_t col0 = ow0 * kStride - g.pad_w;  // >= 0
  V best = hn::Zero(d);
  VI best_index = hn::Zero(di);
  bool first = true;
  for (int64_t i = r.first; i < r.last; ++i) {
    const int64_t row = (r.start + i) * g.in_width + col0;
    for (int64_t group = 0; group * kStride < g.kernel_w; ++group) {
      V v[kStride];
      load_taps<kStride, kPartial>(d, x + row + group * kStride, count, v);
      const int64_t taps = std::min<int64_t>(kStride, g.kernel_w - group * kStride);
      for (int64_t t = 0; t < taps; ++t) {
        const VI index = hn::Add(lane_offsets, hn::Set(di, static_cast<TI>(row + group * kStride + t)));
        if (first) {
          best = v[t];
          best_index = index;
          first = false;
          continue;
        }
        const auto take = hn::Or(hn::Gt(v[t], best), hn::IsNaN(v[t]));
        best = hn::IfThenElse(take, v[t], best);
        if constexpr (kIndices) best_index = hn::IfThenElse(hn::RebindMask(di, take), index, best_index);
      }
    }
  }
  if constexpr (kPartial) {
    store_part(d, best, y + ow0, count);
  } else {
    hn::StoreU(best, d, y + ow0);
  }
  if constexpr (!kIndices) {
    return;
  } else if constexpr (sizeof(TI) == sizeof(int64_t)) {
    store_part(di, best_index, reinterpret_cast<TI*>(where + ow0), count);
  } else {
    HWY_ALIGN TI narrow[kMaxLanes];
    hn::Store(best_index, di, narrow);
    for (int64_t l = 0; l < count; ++l) where[ow0 + l] = narrow[l];
  }
}

// Note [2 x 2 pooling]: the most common pooling, a 2 x 2 window at stride 2 with no padding and
// every window whole, goes row pair by row pair: each vector of outputs de-interleaves the two
// input rows' even and odd columns and keeps the first maximum in the order of max_vector (row 0's
// taps, then row 1's), and where it is, with no window bookkeeping. The MNIST CNN's two poolings
// at batch 32 without indices, timed from Python: 32 x 16 x 24 x 24 38.5 -> 22.4 us, 32 x 32 x 8 x 8
// 13.6 -> 10.3 us; the ONNX MNIST CNN at batch 32 (`ember onnx run --bench`, 3 alternating rounds)
// 373-383 -> 346-364 us. With indices (`maxpool2d_f32`, 32 x 16 x 24 x 24 under autograd, `ember
// bench`, 3 alternating rounds): 34.7-35.9 -> 16.3-17.2 us.
bool pairs_path(const Pool2dGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0 &&
         2 * g.out_height <= g.in_height && 2 * g.out_width <= g.in_width;
}

template <bool kIndices, class T>
void max_pairs(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices, int64_t begin, int64_t end) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;  // int32 lanes for float, int64 for double: the index in the plane
  using V = hn::Vec<decltype(d)>;
  using VI = hn::Vec<decltype(di)>;
  using TI = hn::TFromD<decltype(di)>;
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(T);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), width = g.in_width;
  const VI even_columns = hn::ShiftLeft<1>(hn::Iota(di, 0));  // lane l's first column, relative to lane 0's
  // Pools count values of rows a and a + width from column 2 * ow0 into y (and where, the plane's
  // index of each maximum; offset: a's index in the plane).
  const auto pool = [&]<bool kPartial>(const T* a, int64_t offset, int64_t count, T* y, int64_t* where) HWY_ATTR {
    V taps[4];
    load_taps<2, kPartial>(d, a, count, taps);
    load_taps<2, kPartial>(d, a + width, count, taps + 2);
    V best = taps[0];
    VI best_index = hn::Add(even_columns, hn::Set(di, static_cast<TI>(offset)));
    for (int t = 1; t < 4; ++t) {
      const auto take = hn::Or(hn::Gt(taps[t], best), hn::IsNaN(taps[t]));
      best = hn::IfThenElse(take, taps[t], best);
      if constexpr (kIndices) {
        const int64_t tap = (t / 2) * width + t % 2;
        const VI index = hn::Add(even_columns, hn::Set(di, static_cast<TI>(offset + tap)));
        best_index = hn::IfThenElse(hn::RebindMask(di, take), index, best_index);
      }
    }
    if constexpr (kPartial) {
      store_part(d, best, y, count);
    } else {
      hn::StoreU(best, d, y);
    }
    if constexpr (!kIndices) {
      return;
    } else if constexpr (sizeof(TI) == sizeof(int64_t)) {
      store_part(di, best_index, reinterpret_cast<TI*>(where), count);
    } else {
      HWY_ALIGN TI narrow[kMaxLanes];
      hn::Store(best_index, di, narrow);
      for (int64_t l = 0; l < count; ++l) where[l] = narrow[l];
    }
  };
  const int64_t in_plane = g.in_height * width, out_plane = g.out_height * g.out_width;
  for (int64_t plane = begin; plane < end; ++plane) {
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const int64_t row = 2 * oh * width;
      const T* a = in + plane * in_plane + row;
      const int64_t o = plane * out_plane + oh * g.out_width;
      int64_t* where = kIndices ? indices + o : nullptr;
      int64_t ow = 0;
      for (; ow + lanes <= g.out_width; ow += lanes) {
        pool.template operator()<false>(a + 2 * ow, row + 2 * ow, lanes, out + o + ow, kIndices ? where + ow : nullptr);
      }
      if (ow < g.out_width) {
        pool.template operator()<true>(a + 2 * ow, row + 2 * ow, g.out_width - ow, out + o + ow,
                                       kIndices ? where + ow : nullptr);
      }
    }
  }
}

// Planes [begin, end); indices may be null (kIndices false: the values alone, for inference).
template <int kStride, bool kIndices, class T>
void max_planes(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices, int64_t begin, int64_t end) {
  if constexpr (kStride == 2 && kPartialTail<2>) {
    if (pairs_path(g)) return max_pairs<kIndices>(g, in, out, indices, begin, end);  // Note [2 x 2 pooling]
  }
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 16 / sizeof(T)> d128;  // the 128-bit step for short rows and tails
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), lanes128 = static_cast<int64_t>(hn::Lanes(d128));
  const std::vector<Window> rows = windows(g.out_height, g.in_height, g.kernel_h, g.stride_h, g.pad_h, 1);
  const std::vector<Window> cols = windows(g.out_width, g.in_width, g.kernel_w, g.stride_w, g.pad_w, 1);
  const VectorColumns inner = vector_columns(g);
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for (int64_t plane = begin; plane < end; ++plane) {
    const T* x = in + plane * in_plane;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window& r = rows[static_cast<size_t>(oh)];
      T* y = out + plane * out_plane + oh * g.out_width;
      int64_t* where = kIndices ? indices + plane * out_plane + oh * g.out_width : nullptr;
      // An empty row window cannot happen (padding is at most half the kernel); were it to, the
      // scalar path alone handles it.
      const int64_t vector_last = r.first < r.last ? inner.last : inner.first;
      int64_t ow = 0;
      const auto at = [&](int64_t o) { return kIndices ? where + o : nullptr; };
      for (; ow < inner.first; ++ow) max_window(g, x, r, cols[static_cast<size_t>(ow)], y + ow, at(ow));
      for (; ow + lanes <= vector_last; ow += lanes) max_vector<kStride, kIndices>(d, g, x, r, ow, lanes, y, where);
      if constexpr (kPartialTail<kStride>) {
        if (vector_last - ow > lanes128) {
          max_vector<kStride, kIndices, true>(d, g, x, r, ow, vector_last - ow, y, where);
          ow = vector_last;
        }
      }
      for (; ow + lanes128 <= vector_last; ow += lanes128) {
        max_vector<kStride, kIndices>(d128, g, x, r, ow, lanes128, y, where);
      }
      for (; ow < g.out_width; ++ow) max_window(g, x, r, cols[static_cast<size_t>(ow)], y + ow, at(ow));
    }
  }
}

template <bool kIndices, class T>
void max_planes_any_stride(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices, int64_t begin, int64_t end) {
  switch (g.stride_w) {
    case 1:
      return max_planes<1, kIndices>(g, in, out, indices, begin, end);
    case 2:
      return max_planes<2, kIndices>(g, in, out, indices, begin, end);
    case 3:
      return max_planes<3, kIndices>(g, in, out, indices, begin, end);
    default:
      return max_planes<4, kIndices>(g, in, out, indices, begin, end);
  }
}

template <class T>
void max_planes_any(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices, int64_t begin, int64_t end) {
  if (indices != nullptr) return max_planes_any_stride<true>(g, in, out, indices, begin, end);
  max_planes_any_stride<false>(g, in, out, indices, begin, end);
}

// Planes [begin, end) of max_pool2d's forward by the vector path (max_vector_path(g) holds).
void MaxPoolPlanesF32(const Pool2dGeometry& g, const float* in, float* out, int64_t* indices, int64_t begin,
                      int64_t end) {
  max_planes_any(g, in, out, indices, begin, end);
}
void MaxPoolPlanesF64(const Pool2dGeometry& g, const double* in, double* out, int64_t* indices, int64_t begin,
                      int64_t end) {
  max_planes_any(g, in, out, indices, begin, end);
}

int64_t VectorLanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

// Planes [begin, end) of max_pool2d_blocked; the block is the vector (VectorLanes()).
void MaxPoolBlocked(const Pool2dGeometry& g, const float* in, Pair in_pad, float* out, Pair out_pad, int64_t begin,
                    int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t c = static_cast<int64_t>(hn::Lanes(d));
  const std::vector<Window> rows = windows(g.out_height, g.in_height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
  const std::vector<Window> cols = windows(g.out_width, g.in_width, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
  const int64_t in_row = (g.in_width + 2 * in_pad.w) * c, out_row = (g.out_width + 2 * out_pad.w) * c;
  const int64_t in_plane = (g.in_height + 2 * in_pad.h) * in_row, out_plane = (g.out_height + 2 * out_pad.h) * out_row;
  const auto zero = [](float* p, int64_t n) { std::fill(p, p + n, 0.0f); };
  for (int64_t plane = begin; plane < end; ++plane) {
    const float* x = in + plane * in_plane + in_pad.h * in_row + in_pad.w * c;  // the unpadded (0, 0)
    float* y = out + plane * out_plane;
    zero(y, out_pad.h * out_row);
    zero(y + (out_pad.h + g.out_height) * out_row, out_pad.h * out_row);
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window& r = rows[static_cast<size_t>(oh)];
      float* y_row = y + (out_pad.h + oh) * out_row;
      zero(y_row, out_pad.w * c);
      zero(y_row + (out_pad.w + g.out_width) * c, out_pad.w * c);
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        const Window& w = cols[static_cast<size_t>(ow)];
        auto best = hn::Set(d, -std::numeric_limits<float>::infinity());
        bool first = true;  // an empty window (possible only in theory) is -inf, as max_window's
        for (int64_t i = r.first; i < r.last; ++i) {
          const float* x_row = x + (r.start + i * g.dilation_h) * in_row;
          for (int64_t j = w.first; j < w.last; ++j) {
            const auto v = hn::LoadU(d, x_row + (w.start + j * g.dilation_w) * c);
            best = first ? v : hn::IfThenElse(hn::Or(hn::Gt(v, best), hn::IsNaN(v)), v, best);
            first = false;
          }
        }
        hn::StoreU(best, d, y_row + (out_pad.w + ow) * c);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

HWY_EXPORT(MaxPoolPlanesF32);
HWY_EXPORT(MaxPoolPlanesF64);
HWY_EXPORT(MaxPoolBlocked);
HWY_EXPORT(VectorLanes);

void max_planes_vector(const Pool2dGeometry& g, const float* in, float* out, int64_t* indices, int64_t begin,
                       int64_t end) {
  HWY_DYNAMIC_DISPATCH(MaxPoolPlanesF32)(g, in, out, indices, begin, end);
}
void max_planes_vector(const Pool2dGeometry& g, const double* in, double* out, int64_t* indices, int64_t begin,
                       int64_t end) {
  HWY_DYNAMIC_DISPATCH(MaxPoolPlanesF64)(g, in, out, indices, begin, end);
}

template <class T>
void max_forward(const Pool2dGeometry& g, const T* in, T* out, int64_t* indices) {
  if (max_vector_path(g)) {
    parallel_for(0, g.planes, plane_grain(g),
                 [&](int64_t begin, int64_t end) { max_planes_vector(g, in, out, indices, begin, end); });
    return;
  }
  const std::vector<Window> rows = windows(g.out_height, g.in_height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
  const std::vector<Window> cols = windows(g.out_width, g.in_width, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  for_each_plane(g, [&](int64_t plane) {
    const T* x = in + plane * in_plane;
    T* y = out + plane * out_plane;
    int64_t* where = indices != nullptr ? indices + plane * out_plane : nullptr;
    for (int64_t oh = 0; oh < g.out_height; ++oh) {
      const Window& r = rows[static_cast<size_t>(oh)];
      for (int64_t ow = 0; ow < g.out_width; ++ow) {
        max_window(g, x, r, cols[static_cast<size_t>(ow)], y + oh * g.out_width + ow,
                   where != nullptr ? where + oh * g.out_width + ow : nullptr);
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

// Note [bfloat16 max pooling]: a maximum is one of its inputs, so max pooling needs no arithmetic in
// bfloat16. Chunks of planes (about kHalfChunk input values) are widened to float32 in the calling
// thread's buffers, pooled by the float32 kernels (the same ties, NaNs and indices), and the
// results' upper halves stored: exact, since each is a widened input (NaN payloads too). The
// gradient likewise, each input's sum in float32 rounded once (exact where windows do not overlap).
// Before, the op converted the whole input to float32 and the output back, two more passes over
// memory (and two more for the gradient): in `ember train mnist --amp bf16` the first pooling's
// 62 + 26 us of copies a step.
constexpr int64_t kHalfChunk = 16384;

float* half_buffer(int slot, int64_t count) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& buffer = buffers[slot];
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// n bfloat16 values widened to float32 (exact), in vectors.
void widen(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = simd::convert_row(kFloat32, kBFloat16, dst, src, n); i < n; ++i) {
    dst[i] = detail::bfloat16_bits_to_float(src[i]);
  }
}

// body(chunk geometry, its first plane, widened input, float32 result) for chunks of planes: `from`
// values a plane widened from `src`, and `to` values a plane of the result stored to `dst`: their
// upper halves when `exact` (each a widened input), else rounded to nearest even.
template <class Body>
void bf16_chunks(const Pool2dGeometry& g, int64_t from, int64_t to, const uint16_t* src, uint16_t* dst, bool exact,
                 const Body& body) {
  const int64_t per_chunk = std::max<int64_t>(1, kHalfChunk / std::max<int64_t>(1, from));
  parallel_for(0, g.planes, std::max(plane_grain(g), per_chunk), [&](int64_t begin, int64_t end) {
    for (int64_t p0 = begin; p0 < end; p0 += per_chunk) {
      const int64_t planes = std::min(end, p0 + per_chunk) - p0, n = planes * to;
      float* wide = half_buffer(0, planes * from);
      float* result = half_buffer(1, n);
      widen(src + p0 * from, wide, planes * from);
      Pool2dGeometry chunk = g;
      chunk.planes = planes;
      body(chunk, p0, wide, result);
      uint16_t* d = dst + p0 * to;
      if (exact) {
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(ember::bit_cast<uint32_t>(result[i]) >> 16);
      } else {
        for (int64_t i = simd::convert_row(kBFloat16, kFloat32, d, result, n); i < n; ++i) {
          d[i] = detail::float_to_bfloat16_bits(result[i]);
        }
      }
    }
  });
}

void max_forward_bf16(const Pool2dGeometry& g, const uint16_t* in, uint16_t* out, int64_t* indices) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  bf16_chunks(g, in_plane, out_plane, in, out, /*exact=*/true,
              [&](const Pool2dGeometry& chunk, int64_t p0, const float* x, float* y) {
                max_forward(chunk, x, y, indices != nullptr ? indices + p0 * out_plane : nullptr);
              });
}

void max_backward_bf16(const Pool2dGeometry& g, const uint16_t* grad_out, const int64_t* indices, uint16_t* grad_in) {
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  bf16_chunks(g, out_plane, in_plane, grad_out, grad_in, /*exact=*/false,
              [&](const Pool2dGeometry& chunk, int64_t p0, const float* dy, float* dx) {
                max_backward(chunk, dy, indices + p0 * out_plane, dx);
              });
}

}  // namespace

void max_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* in, void* out, int64_t* indices) {
  if (dtype == kBFloat16) {
    return max_forward_bf16(g, static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), indices);
  }
  dispatch_float("max_pool2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    max_forward(g, static_cast<const T*>(in), static_cast<T*>(out), indices);
  });
}

void max_pool2d_blocked(const Pool2dGeometry& g, int64_t block, const float* in, Pair in_pad, float* out,
                        Pair out_pad) {
  const int64_t lanes = HWY_DYNAMIC_DISPATCH(VectorLanes)();
  EMBER_CHECK(block == lanes, "[max_pool2d] internal error: planes in blocks of ", block,
              " channels where this CPU's vectors hold ", lanes);
  parallel_for(0, g.planes, 1, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(MaxPoolBlocked)(g, in, in_pad, out, out_pad, begin, end);
  });
}

void max_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, const int64_t* indices,
                         void* grad_in) {
  if (dtype == kBFloat16) {
    return max_backward_bf16(g, static_cast<const uint16_t*>(grad_out), indices, static_cast<uint16_t*>(grad_in));
  }
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

// --- registry entries ----------------------------------------------------------------------------
//
// Operands are contiguous (..., H, W) tensors, every leading dim a plane: the input (..., H, W) and
// the output (..., OH, OW); max pooling's indices have the output's shape. The window comes from
// Pool2dAttrs (adaptive pooling needs only the sizes).

namespace {

Pool2dGeometry pool_geometry(const Pool2dAttrs& attrs, const Operand& in, const Operand& out) {
  Pool2dGeometry g;
  g.in_height = in.size(-2);
  g.in_width = in.size(-1);
  g.planes = g.in_height * g.in_width == 0 ? 0 : in.numel() / (g.in_height * g.in_width);
  g.out_height = out.size(-2);
  g.out_width = out.size(-1);
  g.kernel_h = attrs.kernel_size.h;
  g.kernel_w = attrs.kernel_size.w;
  g.stride_h = attrs.stride.h;
  g.stride_w = attrs.stride.w;
  g.pad_h = attrs.padding.h;
  g.pad_w = attrs.padding.w;
  g.dilation_h = attrs.dilation.h;
  g.dilation_w = attrs.dilation.w;
  return g;
}

// inputs: x; outputs: y, indices (int64).
void max_pool2d_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &y = c.outputs[0];
  if (y.numel() == 0) return;
  const Pool2dAttrs& attrs = c.get<Pool2dAttrs>();
  if (attrs.blocked_input.h >= 0 || attrs.blocked_output.h >= 0) {
    EMBER_CHECK(attrs.blocked_input.h >= 0 && attrs.blocked_output.h >= 0 && x.dtype == kFloat32 &&
                    x.shape->size() == 5 && y.shape->size() == 5 && c.outputs[1].data == nullptr,
                "[max_pool2d] internal error: blocked operands must be a float32 input and output without indices");
    Pool2dGeometry g = pool_geometry(attrs, x, y);
    g.planes = x.size(0) * x.size(1);
    g.in_height = x.size(2) - 2 * attrs.blocked_input.h;
    g.in_width = x.size(3) - 2 * attrs.blocked_input.w;
    g.out_height = y.size(2) - 2 * attrs.blocked_output.h;
    g.out_width = y.size(3) - 2 * attrs.blocked_output.w;
    return max_pool2d_blocked(g, x.size(4), x.ptr<const float>(), attrs.blocked_input, y.ptr<float>(),
                              attrs.blocked_output);
  }
  max_pool2d_forward(x.dtype, pool_geometry(c.get<Pool2dAttrs>(), x, y), x.data, y.data, c.outputs[1].ptr<int64_t>());
}
// inputs: grad_out, indices; outputs: grad_in.
void max_pool2d_backward_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &grad_in = c.outputs[0];
  if (grad_in.numel() == 0) return;
  max_pool2d_backward(grad_in.dtype, pool_geometry(c.get<Pool2dAttrs>(), grad_in, grad_out), grad_out.data,
                      c.inputs[1].ptr<const int64_t>(), grad_in.data);
}
// inputs: x; outputs: y.
void avg_pool2d_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &y = c.outputs[0];
  if (y.numel() == 0) return;
  const Pool2dAttrs& attrs = c.get<Pool2dAttrs>();
  avg_pool2d_forward(x.dtype, pool_geometry(attrs, x, y), attrs.count_include_pad, x.data, y.data);
}
// inputs: grad_out; outputs: grad_in.
void avg_pool2d_backward_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &grad_in = c.outputs[0];
  if (grad_in.numel() == 0) return;
  const Pool2dAttrs& attrs = c.get<Pool2dAttrs>();
  avg_pool2d_backward(grad_in.dtype, pool_geometry(attrs, grad_in, grad_out), attrs.count_include_pad, grad_out.data,
                      grad_in.data);
}
void adaptive_avg_pool2d_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &y = c.outputs[0];
  if (y.numel() == 0) return;
  adaptive_avg_pool2d_forward(x.dtype, pool_geometry(c.get<Pool2dAttrs>(), x, y), x.data, y.data);
}
void adaptive_avg_pool2d_backward_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &grad_in = c.outputs[0];
  if (grad_in.numel() == 0) return;
  adaptive_avg_pool2d_backward(grad_in.dtype, pool_geometry(c.get<Pool2dAttrs>(), grad_in, grad_out), grad_out.data,
                               grad_in.data);
}

}  // namespace

void register_pool_kernels(KernelTable& table) {
  // bfloat16 through float32 chunks in cache (Note [bfloat16 max pooling]).
  const DTypeSet max_dtypes{kFloat32, kFloat64, kBFloat16};
  table.add(OpKind::kMaxPool2d, DeviceType::kCPU, max_pool2d_kernel, max_dtypes);
  table.add(OpKind::kMaxPool2dGrad, DeviceType::kCPU, max_pool2d_backward_kernel, max_dtypes);
  table.add(OpKind::kAvgPool2d, DeviceType::kCPU, avg_pool2d_kernel, kFloat32Or64);
  table.add(OpKind::kAvgPool2dGrad, DeviceType::kCPU, avg_pool2d_backward_kernel, kFloat32Or64);
  table.add(OpKind::kAdaptiveAvgPool2d, DeviceType::kCPU, adaptive_avg_pool2d_kernel, kFloat32Or64);
  table.add(OpKind::kAdaptiveAvgPool2dGrad, DeviceType::kCPU, adaptive_avg_pool2d_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

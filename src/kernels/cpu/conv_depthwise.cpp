// Depthwise convolution (conv_depthwise.h), compiled for every Highway target and chosen at run
// time.
//
// Note [depthwise convolution]
// With one input channel per group, each output is kernel_h x kernel_w multiply-adds of one input
// plane: the im2col path ran one GEMM of a single row per channel and image (K = 9 for a 3 x 3),
// so its time went to calls, packing and column matrices. Here each (image, input channel) plane
// is copied once into a zero-padded buffer (thread-local, in L1/L2), and a vector holds that many
// consecutive output columns of one row: per tap, one load of the padded row shifted by the tap
// (its even places for stride 2, by a deinterleaving load) and one multiply-add with the tap's
// weight broadcast. Four vectors of sums are in flight (four of a row, or four rows of one vector
// when a row is one vector wide, as a late layer's 7 x 7 planes are), so the multiply-adds do not
// wait on each other. The bias joins the finished sum, then the epilogue the compiler may fold in
// (a residual and a ReLU), as in the other paths.
//
// The input gradient (stride 1) is the same kernel over the output gradient padded by the kernel's
// reach less the padding, with each channel's taps reversed, summed over the output channels of an
// input channel. Under a stride of 2 along the width, a tap reaches either the even or the odd input
// columns, each at a fixed offset into the output gradient's row: two sums per vector, interleaved
// as they are stored (transposed_strip). The weight gradient runs one output channel's taps (eight at a time) over
// every output position of an image, the output gradient loaded once per vector for all eight; each image's sums are
// added in double, in image order. Every output is computed by one task in a fixed order, so results do not depend on
// the thread count.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv_depthwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/conv_depthwise.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scalar_math.h"

#ifndef EMBER_KERNELS_CPU_CONV_DEPTHWISE_SHARED
#define EMBER_KERNELS_CPU_CONV_DEPTHWISE_SHARED
namespace ember::cpu::depthwise_detail {

// One output plane: the sum over `sources` padded planes (the forward: one; the input gradient:
// the output channels of one input channel), each `pw` wide with its own kernel_h x kernel_w taps.
template <class T>
struct Plane {
  const T* src = nullptr;
  int64_t src_stride = 0;  // values between two sources
  int64_t sources = 1;
  const T* weight = nullptr;  // sources x kernel_h x kernel_w
  int64_t pw = 0;
  int64_t kernel_h = 1, kernel_w = 1, dilation_h = 1, dilation_w = 1, stride_h = 1, stride_w = 1;
  int64_t out_h = 0, out_w = 0;
  const T* bias = nullptr;      // one value, or null
  const T* residual = nullptr;  // laid out as out, or null
  Activation activation = Activation::kNone;
  T* out = nullptr;
};

// One plane of the input gradient of a convolution with stride 2 along the width: the sum over
// `sources` output-gradient planes (grad_h rows of pw, each row's values from column `left` on,
// zeros around them) with the forward's taps.
template <class T>
struct Transposed {
  const T* src = nullptr;
  int64_t src_stride = 0;
  int64_t sources = 1;
  const T* weight = nullptr;  // sources x kernel_h x kernel_w
  int64_t pw = 0, left = 0;
  int64_t kernel_h = 1, kernel_w = 1, dilation_h = 1, dilation_w = 1, stride_h = 1, pad_h = 0, pad_w = 0;
  int64_t grad_h = 0;
  int64_t out_h = 0, out_w = 0;
  T* out = nullptr;
};

// One image's share of one output channel's weight gradient, tap by tap.
template <class T>
struct WeightPlane {
  const T* src = nullptr;   // the padded input plane, pw wide
  const T* grad = nullptr;  // the output gradient's plane, out_h x out_w
  int64_t pw = 0;
  int64_t kernel_h = 1, kernel_w = 1, dilation_h = 1, dilation_w = 1, stride_h = 1, stride_w = 1;
  int64_t out_h = 0, out_w = 0;
  T* taps = nullptr;  // kernel_h x kernel_w sums, written
};

}  // namespace ember::cpu::depthwise_detail
#endif  // EMBER_KERNELS_CPU_CONV_DEPTHWISE_SHARED

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using depthwise_detail::Plane;
using depthwise_detail::Transposed;
using depthwise_detail::WeightPlane;

#include "kernels/cpu/activation-inl.h"      // the activations as the elementwise ops compute them
#include "kernels/cpu/partial_vector-inl.h"  // load_part, store_part

// The accumulator loops have compile-time bounds and must be unrolled, or the sums live in memory.
#ifndef EMBER_UNROLL
#define EMBER_UNROLL _Pragma("GCC unroll 16")
#endif

// The inputs of `lanes` consecutive outputs at p: p[0, lanes) for stride 1, the even places of
// p[0, 2 lanes) for stride 2.
template <int SW, class D, class T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> load_taps(D d, const T* p) {
  if constexpr (SW == 1) {
    return hn::LoadU(d, p);
  } else {
    hn::Vec<D> even, odd;
    hn::LoadInterleaved2(d, p, even, odd);
    return even;
  }
}

// Output rows [y, y + R), columns [x, x + NV vectors), the last vector of each row holding `last`.
template <int R, int NV, int SW, class T>
HWY_INLINE void strip(const Plane<T>& a, int64_t y, int64_t x, int64_t last) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t taps = a.kernel_h * a.kernel_w, row_step = a.stride_h * a.pw;
  V acc[R][NV];
  EMBER_UNROLL
  for (int r = 0; r < R; ++r) {
    EMBER_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t s = 0; s < a.sources; ++s) {
    const T* plane = a.src + s * a.src_stride + y * row_step + x * SW;
    const T* w = a.weight + s * taps;
    for (int64_t ky = 0; ky < a.kernel_h; ++ky) {
      const T* row = plane + ky * a.dilation_h * a.pw;
      for (int64_t kx = 0; kx < a.kernel_w; ++kx) {
        const V wv = hn::Set(d, w[ky * a.kernel_w + kx]);
        const T* p = row + kx * a.dilation_w;
        EMBER_UNROLL
        for (int r = 0; r < R; ++r) {
          EMBER_UNROLL
          for (int v = 0; v < NV; ++v)
            acc[r][v] = hn::MulAdd(wv, load_taps<SW>(d, p + r * row_step + v * lanes * SW), acc[r][v]);
        }
      }
    }
  }
  EMBER_UNROLL
  for (int r = 0; r < R; ++r) {
    EMBER_UNROLL
    for (int v = 0; v < NV; ++v) {
      const int64_t count = v == NV - 1 ? last : lanes;
      const int64_t at = (y + r) * a.out_w + x + v * lanes;
      V o = acc[r][v];
      if (a.bias != nullptr) o = hn::Add(o, hn::Set(d, *a.bias));
      if (a.residual != nullptr) o = hn::Add(o, load_part(d, a.residual + at, count));
      store_part(d, activate(d, a.activation, o), a.out + at, count);
    }
  }
}

// Each row's vectors in strips of four; the one to three left at the end of every row (all of a
// narrow row: a late layer's 7 or 14 columns) in strips over several rows, so that four to six
// sums are always in flight: one vector's taps alone are a chain of dependent multiply-adds.
template <int SW, class T>
void plane(const Plane<T>& a) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  const int64_t vectors = (a.out_w + lanes - 1) / lanes, last = a.out_w - (vectors - 1) * lanes;
  const int64_t groups = vectors / 4, rest = vectors % 4, x_rest = groups * 4 * lanes;
  for (int64_t y = 0; y < a.out_h; ++y) {
    for (int64_t g = 0; g < groups; ++g)
      strip<1, 4, SW>(a, y, g * 4 * lanes, g + 1 == groups && rest == 0 ? last : lanes);
  }
  int64_t y = 0;
  if (rest == 1) {
    for (; y + 4 <= a.out_h; y += 4) strip<4, 1, SW>(a, y, x_rest, last);
    for (; y < a.out_h; ++y) strip<1, 1, SW>(a, y, x_rest, last);
  } else if (rest == 2) {
    for (; y + 2 <= a.out_h; y += 2) strip<2, 2, SW>(a, y, x_rest, last);
    for (; y < a.out_h; ++y) strip<1, 2, SW>(a, y, x_rest, last);
  } else if (rest == 3) {
    for (; y + 2 <= a.out_h; y += 2) strip<2, 3, SW>(a, y, x_rest, last);
    for (; y < a.out_h; ++y) strip<1, 3, SW>(a, y, x_rest, last);
  }
}

// Taps [t0, t0 + NT) of one image's weight gradient.
template <int NT, int SW, class T>
HWY_INLINE void weight_taps(const WeightPlane<T>& a, int64_t t0) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t offset[NT];
  V acc[NT];
  EMBER_UNROLL
  for (int j = 0; j < NT; ++j) {
    const int64_t ky = (t0 + j) / a.kernel_w, kx = (t0 + j) % a.kernel_w;
    offset[j] = ky * a.dilation_h * a.pw + kx * a.dilation_w;
    acc[j] = hn::Zero(d);
  }
  for (int64_t y = 0; y < a.out_h; ++y) {
    const T* g = a.grad + y * a.out_w;
    const T* row = a.src + y * a.stride_h * a.pw;
    int64_t x = 0;
    for (; x + lanes <= a.out_w; x += lanes) {
      const V gv = hn::LoadU(d, g + x);
      const T* p = row + x * SW;
      EMBER_UNROLL
      for (int j = 0; j < NT; ++j) acc[j] = hn::MulAdd(gv, load_taps<SW>(d, p + offset[j]), acc[j]);
    }
    if (x < a.out_w) {
      // The inputs past the row's last output are zeroed too: 0 times an Inf there is NaN.
      const auto valid = hn::FirstN(d, static_cast<size_t>(a.out_w - x));
      const V gv = load_part(d, g + x, a.out_w - x);
      const T* p = row + x * SW;
      EMBER_UNROLL
      for (int j = 0; j < NT; ++j) {
        acc[j] = hn::MulAdd(gv, hn::IfThenElseZero(valid, load_taps<SW>(d, p + offset[j])), acc[j]);
      }
    }
  }
  EMBER_UNROLL
  for (int j = 0; j < NT; ++j) a.taps[t0 + j] = hn::GetLane(hn::SumOfLanes(d, acc[j]));
}

template <int SW, class T>
void weight_plane(const WeightPlane<T>& a) {
  const int64_t taps = a.kernel_h * a.kernel_w;
  int64_t t = 0;
  for (; t + 8 <= taps; t += 8) weight_taps<8, SW>(a, t);
  switch (taps - t) {
    case 7:
      return weight_taps<7, SW>(a, t);
    case 6:
      return weight_taps<6, SW>(a, t);
    case 5:
      return weight_taps<5, SW>(a, t);
    case 4:
      return weight_taps<4, SW>(a, t);
    case 3:
      return weight_taps<3, SW>(a, t);
    case 2:
      return weight_taps<2, SW>(a, t);
    case 1:
      return weight_taps<1, SW>(a, t);
    default:
      return;
  }
}

// Input columns 2j and 2j + 1 for j in [j0, j0 + NV vectors) of row iy: a tap (ky, kx) reaches
// column 2j + q from output-gradient column j + (q + pad_w - kx dilation_w) / 2 when that numerator
// is even, so each tap adds to the even or the odd columns, at a fixed offset; the two sums are
// interleaved as they are stored.
template <int NV, class T>
HWY_INLINE void transposed_strip(const Transposed<T>& a, int64_t iy, int64_t j0, int64_t half) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), taps = a.kernel_h * a.kernel_w;
  V even[NV], odd[NV];
  EMBER_UNROLL
  for (int v = 0; v < NV; ++v) even[v] = odd[v] = hn::Zero(d);
  for (int64_t s = 0; s < a.sources; ++s) {
    for (int64_t ky = 0; ky < a.kernel_h; ++ky) {
      const int64_t t = iy + a.pad_h - ky * a.dilation_h;
      if (t < 0 || t % a.stride_h != 0 || t / a.stride_h >= a.grad_h) continue;
      const T* row = a.src + s * a.src_stride + (t / a.stride_h) * a.pw + a.left + j0;
      for (int64_t kx = 0; kx < a.kernel_w; ++kx) {
        const V wv = hn::Set(d, a.weight[s * taps + ky * a.kernel_w + kx]);
        const int64_t u = a.pad_w - kx * a.dilation_w;
        if (u % 2 == 0) {
          EMBER_UNROLL
          for (int v = 0; v < NV; ++v) even[v] = hn::MulAdd(wv, hn::LoadU(d, row + u / 2 + v * lanes), even[v]);
        } else {
          EMBER_UNROLL
          for (int v = 0; v < NV; ++v) odd[v] = hn::MulAdd(wv, hn::LoadU(d, row + (u + 1) / 2 + v * lanes), odd[v]);
        }
      }
    }
  }
  T* out = a.out + iy * a.out_w;
  EMBER_UNROLL
  for (int v = 0; v < NV; ++v) {
    const int64_t j = j0 + v * lanes;
    if (j >= half) break;
    if (2 * (j + lanes) <= a.out_w) {
      hn::StoreInterleaved2(even[v], odd[v], d, out + 2 * j);
    } else {  // the row's end: through a buffer
      HWY_ALIGN T pairs[2 * hn::MaxLanes(d)];
      hn::StoreInterleaved2(even[v], odd[v], d, pairs);
      std::copy(pairs, pairs + (a.out_w - 2 * j), out + 2 * j);
    }
  }
}

template <class T>
void transposed_plane(const Transposed<T>& a) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  const int64_t half = (a.out_w + 1) / 2;
  for (int64_t iy = 0; iy < a.out_h; ++iy) {
    int64_t j = 0;
    for (; j + lanes < half; j += 2 * lanes) transposed_strip<2>(a, iy, j, half);
    if (j < half) transposed_strip<1>(a, iy, j, half);
  }
}

template <class T>
void PlaneT(const Plane<T>& a) {
  return a.stride_w == 1 ? plane<1>(a) : plane<2>(a);
}
template <class T>
void WeightPlaneT(const WeightPlane<T>& a) {
  return a.stride_w == 1 ? weight_plane<1>(a) : weight_plane<2>(a);
}

void TransposedF32(const Transposed<float>& a) { transposed_plane(a); }
void TransposedF64(const Transposed<double>& a) { transposed_plane(a); }
void PlaneF32(const Plane<float>& a) { PlaneT(a); }
void PlaneF64(const Plane<double>& a) { PlaneT(a); }
void WeightPlaneF32(const WeightPlane<float>& a) { WeightPlaneT(a); }
void WeightPlaneF64(const WeightPlane<double>& a) { WeightPlaneT(a); }

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(PlaneF32);
HWY_EXPORT(PlaneF64);
HWY_EXPORT(WeightPlaneF32);
HWY_EXPORT(WeightPlaneF64);
HWY_EXPORT(TransposedF32);
HWY_EXPORT(TransposedF64);

namespace {

using depthwise_detail::Plane;
using depthwise_detail::Transposed;
using depthwise_detail::WeightPlane;

void run(const Plane<float>& a) { HWY_DYNAMIC_DISPATCH(PlaneF32)(a); }
void run(const Plane<double>& a) { HWY_DYNAMIC_DISPATCH(PlaneF64)(a); }
void run(const WeightPlane<float>& a) { HWY_DYNAMIC_DISPATCH(WeightPlaneF32)(a); }
void run(const WeightPlane<double>& a) { HWY_DYNAMIC_DISPATCH(WeightPlaneF64)(a); }
void run(const Transposed<float>& a) { HWY_DYNAMIC_DISPATCH(TransposedF32)(a); }
void run(const Transposed<double>& a) { HWY_DYNAMIC_DISPATCH(TransposedF64)(a); }

// The padded planes: every row a vector of the widest target (and its stride) past the last
// output's reach, so the kernels load whole vectors without reading outside the buffer.
struct Padded {
  int64_t height, width;
};

template <class T>
Padded padded_size(int64_t in_h, int64_t in_w, int64_t pad_h, int64_t pad_w, int64_t out_h, int64_t out_w,
                   int64_t kernel_h, int64_t kernel_w, int64_t dilation_h, int64_t dilation_w, int64_t stride_h,
                   int64_t stride_w) {
  const int64_t widest = HWY_MAX_BYTES / sizeof(T);
  return {std::max(in_h + 2 * pad_h, (out_h - 1) * stride_h + (kernel_h - 1) * dilation_h + 1),
          std::max(in_w + 2 * pad_w, (out_w - 1) * stride_w + (kernel_w - 1) * dilation_w + widest * stride_w)};
}

// The plane `src` (h x w) at (pad_h, pad_w) of `dst` (p.height x p.width), zeros around it.
template <class T>
void pad_plane(const T* src, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w, const Padded& p, T* dst) {
  std::fill(dst, dst + p.height * p.width, T(0));
  for (int64_t y = 0; y < h; ++y) {
    std::memcpy(dst + (y + pad_h) * p.width + pad_w, src + y * w, static_cast<size_t>(w) * sizeof(T));
  }
}

// Grow-only buffers of the calling thread, one per use.
enum class Scratch : int { kPadded, kTaps, kCount };

template <class T>
T* scratch(Scratch slot, int64_t count) {
  thread_local std::vector<T> buffers[static_cast<int>(Scratch::kCount)];
  std::vector<T>& b = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  return b.data();
}

// Planes per task: about 64K multiply-adds each, so small planes are not one task apiece.
int64_t plane_grain(int64_t work_per_plane) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_plane));
}

}  // namespace

bool depthwise_takes(const Conv2dGeometry& g) {
  return g.groups > 1 && g.groups == g.in_channels && (g.stride_w == 1 || g.stride_w == 2);
}

namespace {

// The stride-1 input gradient as a forward over the padded output gradient.
bool input_grad_as_forward(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= (g.kernel_h - 1) * g.dilation_h &&
         g.pad_w <= (g.kernel_w - 1) * g.dilation_w;
}

}  // namespace

bool depthwise_input_grad_takes(const Conv2dGeometry& g) {
  return depthwise_takes(g) && (g.stride_w == 2 || input_grad_as_forward(g));
}

template <class T>
void depthwise_forward(const Conv2dGeometry& g, const T* input, const T* weight, const T* bias, T* out,
                       const T* residual, Activation activation) {
  const int64_t mult = g.out_channels / g.in_channels, taps = g.kernel_h * g.kernel_w;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  const Padded p = padded_size<T>(g.in_height, g.in_width, g.pad_h, g.pad_w, g.out_height, g.out_width, g.kernel_h,
                                  g.kernel_w, g.dilation_h, g.dilation_w, g.stride_h, g.stride_w);
  parallel_for(0, g.batch * g.in_channels, plane_grain(mult * out_plane * taps), [&](int64_t begin, int64_t end) {
    T* padded = scratch<T>(Scratch::kPadded, p.height * p.width);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / g.in_channels, c = i % g.in_channels;
      pad_plane(input + i * in_plane, g.in_height, g.in_width, g.pad_h, g.pad_w, p, padded);
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t o = c * mult + m, at = (n * g.out_channels + o) * out_plane;
        Plane<T> a;
        a.src = padded;
        a.weight = weight + o * taps;
        a.pw = p.width;
        a.kernel_h = g.kernel_h, a.kernel_w = g.kernel_w, a.dilation_h = g.dilation_h, a.dilation_w = g.dilation_w;
        a.stride_h = g.stride_h, a.stride_w = g.stride_w;
        a.out_h = g.out_height, a.out_w = g.out_width;
        a.bias = bias != nullptr ? bias + o : nullptr;
        a.residual = residual != nullptr ? residual + at : nullptr;
        a.activation = activation;
        a.out = out + at;
        run(a);
      }
    }
  });
}

namespace {

// The input gradient of a stride of 2 along the width: each input column's taps from the output
// gradient's rows and columns that reach it (transposed_strip).
template <class T>
void backward_input_stride2(const Conv2dGeometry& g, const T* grad_out, const T* weight, T* grad_input) {
  const int64_t mult = g.out_channels / g.in_channels, taps = g.kernel_h * g.kernel_w;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  const int64_t widest = HWY_MAX_BYTES / sizeof(T), half = (g.in_width + 1) / 2;
  // Each tap reads output-gradient column j + (q + pad_w - kx dilation_w) / 2: from kx = kernel_w - 1
  // (the leftmost, which may be left of column 0) to kx = 0.
  const int64_t lowest = g.pad_w - (g.kernel_w - 1) * g.dilation_w, highest = (g.pad_w + 1) / 2;
  const int64_t left = std::max<int64_t>(0, -(lowest - 1) / 2 + 1);
  const Padded p{g.out_height, left + std::max(g.out_width, half + highest + 2 * widest)};
  parallel_for(0, g.batch * g.in_channels, plane_grain(mult * in_plane * taps / 2), [&](int64_t begin, int64_t end) {
    T* padded = scratch<T>(Scratch::kPadded, mult * p.height * p.width);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / g.in_channels, c = i % g.in_channels;
      for (int64_t m = 0; m < mult; ++m) {
        pad_plane(grad_out + (n * g.out_channels + c * mult + m) * out_plane, g.out_height, g.out_width, 0, left, p,
                  padded + m * p.height * p.width);
      }
      Transposed<T> a;
      a.src = padded;
      a.src_stride = p.height * p.width;
      a.sources = mult;
      a.weight = weight + c * mult * taps;
      a.pw = p.width;
      a.left = left;
      a.kernel_h = g.kernel_h, a.kernel_w = g.kernel_w, a.dilation_h = g.dilation_h, a.dilation_w = g.dilation_w;
      a.stride_h = g.stride_h, a.pad_h = g.pad_h, a.pad_w = g.pad_w;
      a.grad_h = g.out_height;
      a.out_h = g.in_height, a.out_w = g.in_width;
      a.out = grad_input + i * in_plane;
      run(a);
    }
  });
}

}  // namespace

template <class T>
void depthwise_backward_input(const Conv2dGeometry& g, const T* grad_out, const T* weight, T* grad_input) {
  if (!input_grad_as_forward(g)) return backward_input_stride2(g, grad_out, weight, grad_input);
  const int64_t mult = g.out_channels / g.in_channels, taps = g.kernel_h * g.kernel_w;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  // The forward of grad_out padded by the kernel's reach less the padding, taps reversed.
  const int64_t pad_h = (g.kernel_h - 1) * g.dilation_h - g.pad_h, pad_w = (g.kernel_w - 1) * g.dilation_w - g.pad_w;
  std::vector<T> flipped(static_cast<size_t>(g.out_channels * taps));
  for (int64_t o = 0; o < g.out_channels; ++o) {
    for (int64_t t = 0; t < taps; ++t) flipped[o * taps + taps - 1 - t] = weight[o * taps + t];
  }
  const Padded p = padded_size<T>(g.out_height, g.out_width, pad_h, pad_w, g.in_height, g.in_width, g.kernel_h,
                                  g.kernel_w, g.dilation_h, g.dilation_w, 1, 1);
  parallel_for(0, g.batch * g.in_channels, plane_grain(mult * in_plane * taps), [&](int64_t begin, int64_t end) {
    T* padded = scratch<T>(Scratch::kPadded, mult * p.height * p.width);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / g.in_channels, c = i % g.in_channels;
      for (int64_t m = 0; m < mult; ++m) {
        pad_plane(grad_out + (n * g.out_channels + c * mult + m) * out_plane, g.out_height, g.out_width, pad_h, pad_w,
                  p, padded + m * p.height * p.width);
      }
      Plane<T> a;
      a.src = padded;
      a.src_stride = p.height * p.width;
      a.sources = mult;
      a.weight = flipped.data() + c * mult * taps;
      a.pw = p.width;
      a.kernel_h = g.kernel_h, a.kernel_w = g.kernel_w, a.dilation_h = g.dilation_h, a.dilation_w = g.dilation_w;
      a.out_h = g.in_height, a.out_w = g.in_width;
      a.out = grad_input + i * in_plane;
      run(a);
    }
  });
}

template <class T>
void depthwise_backward_weight(const Conv2dGeometry& g, const T* grad_out, const T* input, T* grad_weight) {
  const int64_t mult = g.out_channels / g.in_channels, taps = g.kernel_h * g.kernel_w;
  const int64_t in_plane = g.in_height * g.in_width, out_plane = g.out_height * g.out_width;
  const Padded p = padded_size<T>(g.in_height, g.in_width, g.pad_h, g.pad_w, g.out_height, g.out_width, g.kernel_h,
                                  g.kernel_w, g.dilation_h, g.dilation_w, g.stride_h, g.stride_w);
  // Tasks over input channels: each pads its channel's planes once for all its output channels.
  parallel_for(0, g.in_channels, plane_grain(g.batch * mult * out_plane * taps), [&](int64_t begin, int64_t end) {
    T* padded = scratch<T>(Scratch::kPadded, p.height * p.width);
    T* sums = scratch<T>(Scratch::kTaps, taps);
    std::vector<double> total(static_cast<size_t>(mult * taps));
    for (int64_t c = begin; c < end; ++c) {
      std::fill(total.begin(), total.end(), 0.0);
      for (int64_t n = 0; n < g.batch; ++n) {
        pad_plane(input + (n * g.in_channels + c) * in_plane, g.in_height, g.in_width, g.pad_h, g.pad_w, p, padded);
        for (int64_t m = 0; m < mult; ++m) {
          WeightPlane<T> a;
          a.src = padded;
          a.grad = grad_out + (n * g.out_channels + c * mult + m) * out_plane;
          a.pw = p.width;
          a.kernel_h = g.kernel_h, a.kernel_w = g.kernel_w, a.dilation_h = g.dilation_h, a.dilation_w = g.dilation_w;
          a.stride_h = g.stride_h, a.stride_w = g.stride_w;
          a.out_h = g.out_height, a.out_w = g.out_width;
          a.taps = sums;
          run(a);
          for (int64_t t = 0; t < taps; ++t) total[m * taps + t] += static_cast<double>(sums[t]);
        }
      }
      for (int64_t k = 0; k < mult * taps; ++k) grad_weight[c * mult * taps + k] = static_cast<T>(total[k]);
    }
  });
}

template void depthwise_forward(const Conv2dGeometry&, const float*, const float*, const float*, float*, const float*,
                                Activation);
template void depthwise_forward(const Conv2dGeometry&, const double*, const double*, const double*, double*,
                                const double*, Activation);
template void depthwise_backward_input(const Conv2dGeometry&, const float*, const float*, float*);
template void depthwise_backward_input(const Conv2dGeometry&, const double*, const double*, double*);
template void depthwise_backward_weight(const Conv2dGeometry&, const float*, const float*, float*);
template void depthwise_backward_weight(const Conv2dGeometry&, const double*, const double*, double*);

}  // namespace ember::cpu
#endif  // HWY_ONCE

// Direct 2-D convolution for stride 1, dilation 1, one group, small kernels over few input
// channels (Note [direct convolution] in conv.cpp says when): the forward, and the weight
// gradient, computed from the image in place, with no column matrix. The input gradient is the
// forward of the padded output gradient with the weight flipped and transposed (conv.cpp).
//
// Forward: a strip of an output row (two vectors, or three when that is the whole row) of a block
// of CB output channels is held in registers while every tap (ci, ky, kx) adds weight * the input
// row shifted by kx: per tap two loads of input, CB broadcasts of a weight and 2 x CB
// multiply-adds; the bias, a residual and an activation join as the strip is stored, and a 2 x 2
// max pooling after them as each pair of rows is (Note [pooled convolution]). A row of 24 columns
// (MNIST's first layer) as one strip of three vectors instead of strips of two and one:
// conv2d_f32_lenet1 97.5-105.3 -> 83.4-86.6 us, infer_cnn_b1 24.2 -> 22.5-22.7 us (binaries
// alternated three times). Weight gradient: for a block of CB output channels, one input
// channel and kernel row ky, CB x kernel_w vector accumulators sum grad_out row * input row
// shifted by kx over an image's rows and columns; their lanes are added and the images' sums
// summed in double. The last, partial vector of a row is a masked load (or goes through
// a small buffer), so nothing past a row's end is read.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv_direct.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/conv_direct.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/scalar_math.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/activation-inl.h"      // the activations as the elementwise ops compute them
#include "kernels/cpu/partial_vector-inl.h"  // load_part, store_part

// Vectors of at most 8 lanes: rows as narrow as 8 or 24 (MNIST's maps) then split into whole
// vectors, and a 256-bit multiply-add costs no more per lane than a 512-bit one on the CPUs that
// split the latter in two (Zen 4).
template <class T>
using Tag = hn::CappedTag<T, 8>;

// The loops over a register block's channels, columns and kernel columns (compile-time bounds)
// must be unrolled, or the accumulators live in memory.
#ifndef EMBER_UNROLL
#define EMBER_UNROLL _Pragma("GCC unroll 16")
#endif

// The activation argument of the functions below that stands for c.activation, read at run time:
// GELU's and SiLU's, which are not worth an instance of their own (see forward_rows).
constexpr auto kAnyActivation = static_cast<Activation>(255);

// The finished sums of forward_strip: the bias, a residual and the activation kAct, then the stores
// to `to` (channel co's column x, the next channel `plane` values on: the output's row, or a pooled
// convolution's row buffer).
template <Activation kAct, int CB, int NV, class T, class V>
HWY_INLINE void finish_with(const DirectConv<T>& c, const V (&acc)[CB][NV], int64_t co, int64_t y, int64_t x,
                            int64_t last, T* to, int64_t plane) {
  const Tag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t out_plane = c.out_height * c.out_width;
  EMBER_UNROLL
  for (int b = 0; b < CB; ++b) {
    const int64_t at = (co + b) * out_plane + y * c.out_width + x;  // in the residual
    // The bias joins the finished sum (as in PyTorch, and the im2col path), not the first tap.
    const V bias = hn::Set(d, c.bias != nullptr ? c.bias[co + b] : T(0));
    EMBER_UNROLL
    for (int v = 0; v < NV; ++v) {
      const int64_t count = v == NV - 1 ? last : lanes;
      V o = c.bias != nullptr ? hn::Add(acc[b][v], bias) : acc[b][v];
      if (c.residual != nullptr) o = hn::Add(o, load_part(d, c.residual + at + v * lanes, count));
      store_part(d, activate(d, kAct == kAnyActivation ? c.activation : kAct, o), to + b * plane + v * lanes, count);
    }
  }
}

// Output row y's columns [x, x + NV vectors) (the last vector holding `last` values) of channels
// [co, co + CB): the accumulators stay in registers over every tap.
template <Activation kAct, int CB, int NV, class T>
HWY_INLINE void forward_strip(const DirectConv<T>& c, const T* weights, int64_t co, int64_t y, int64_t x, int64_t last,
                              T* to, int64_t plane) {
  const Tag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t in_plane = c.in_height * c.in_width;
  const int64_t taps = c.kernel_h * c.kernel_w;
  V acc[CB][NV];
  EMBER_UNROLL
  for (int b = 0; b < CB; ++b) {
    EMBER_UNROLL
    for (int v = 0; v < NV; ++v) acc[b][v] = hn::Zero(d);
  }
  for (int64_t ci = 0; ci < c.in_channels; ++ci) {
    for (int64_t ky = 0; ky < c.kernel_h; ++ky) {
      const T* row = c.input + ci * in_plane + (y + ky) * c.in_width + x;
      const T* w = weights + (ci * taps + ky * c.kernel_w) * CB;
      for (int64_t kx = 0; kx < c.kernel_w; ++kx) {
        V in[NV];
        EMBER_UNROLL
        for (int v = 0; v < NV; ++v) in[v] = load_part(d, row + kx + v * lanes, v == NV - 1 ? last : lanes);
        EMBER_UNROLL
        for (int b = 0; b < CB; ++b) {
          const V wv = hn::Set(d, w[kx * CB + b]);
          EMBER_UNROLL
          for (int v = 0; v < NV; ++v) acc[b][v] = hn::MulAdd(wv, in[v], acc[b][v]);
        }
      }
    }
  }
  finish_with<kAct>(c, acc, co, y, x, last, to + x, plane);
}

// Output row y of channels [co, co + CB) into `to` (column 0 of channel co; channels `plane`
// apart): a strip of three whole vectors where a row is exactly three (MNIST's 24 columns: one
// strip, not one of two and one of one), else strips of two whole vectors, then one, then the
// partial last vector.
template <Activation kAct, int CB, class T>
HWY_NOINLINE void forward_row(const DirectConv<T>& c, const T* weights, int64_t co, int64_t y, T* to, int64_t plane) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(Tag<T>()));
  int64_t x = 0;
  if (c.out_width == 3 * lanes) return forward_strip<kAct, CB, 3>(c, weights, co, y, x, lanes, to, plane);
  for (; x + 2 * lanes <= c.out_width; x += 2 * lanes)
    forward_strip<kAct, CB, 2>(c, weights, co, y, x, lanes, to, plane);
  for (; x + lanes <= c.out_width; x += lanes) forward_strip<kAct, CB, 1>(c, weights, co, y, x, lanes, to, plane);
  if (x < c.out_width) forward_strip<kAct, CB, 1>(c, weights, co, y, x, c.out_width - x, to, plane);
}

#if HWY_TARGET <= HWY_AVX3
// Note [row pairs]: on AVX-512, a float32 output row of 24 columns (MNIST's and LeNet's first
// layer) is one and a half 16-lane vectors, so forward_row takes it as three 8-lane vectors. Two
// rows together are three whole 16-lane vectors: the middle one holds the first row's last eight
// columns and the second row's first eight, loaded (and stored) as two masked halves. Per tap that
// is 4 loads, CB broadcasts and 3 CB multiply-adds for two rows where forward_row takes 6, 2 CB and
// 6 CB of half the width: on a CPU with two 512-bit FMA units (Intel's Xeons) the multiply-adds'
// time halves, and on one that splits them (Zen 4) their count of 256-bit halves stays the same.
// Each output is the same sum in the same order as forward_row's: the same bits.
constexpr int64_t kPairWidth = 24;

// Vector 1 of a pair of 24-column rows r0 and r1 = r0 + row: r0's columns 16-23, then r1's 0-7.
template <class D, class M>
HWY_INLINE hn::Vec<D> load_straddle(D d, M first, const float* r0, const float* r1) {
  return hn::Or(hn::MaskedLoad(first, d, r0 + 16), hn::MaskedLoad(hn::Not(first), d, r1 - 8));
}

// Output rows y and y + 1 (24 columns) of channels [co, co + CB) into to0 and to1 (channels
// `plane` apart), finished as finish_with finishes a strip.
template <Activation kAct, int CB>
HWY_NOINLINE void forward_row_pair(const DirectConv<float>& c, const float* weights, int64_t co, int64_t y, float* to0,
                                   float* to1, int64_t plane) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  static_assert(3 * hn::MaxLanes(hn::ScalableTag<float>()) == 2 * kPairWidth);
  const auto first = hn::FirstN(d, 8);
  const int64_t in_plane = c.in_height * c.in_width, taps = c.kernel_h * c.kernel_w;
  V acc[CB][3];
  EMBER_UNROLL
  for (int b = 0; b < CB; ++b) {
    EMBER_UNROLL
    for (int v = 0; v < 3; ++v) acc[b][v] = hn::Zero(d);
  }
  for (int64_t ci = 0; ci < c.in_channels; ++ci) {
    for (int64_t ky = 0; ky < c.kernel_h; ++ky) {
      const float* r0 = c.input + ci * in_plane + (y + ky) * c.in_width;
      const float* r1 = r0 + c.in_width;
      const float* w = weights + (ci * taps + ky * c.kernel_w) * CB;
      for (int64_t kx = 0; kx < c.kernel_w; ++kx) {
        const V in[3] = {hn::LoadU(d, r0 + kx), load_straddle(d, first, r0 + kx, r1 + kx), hn::LoadU(d, r1 + 8 + kx)};
        EMBER_UNROLL
        for (int b = 0; b < CB; ++b) {
          const V wv = hn::Set(d, w[kx * CB + b]);
          EMBER_UNROLL
          for (int v = 0; v < 3; ++v) acc[b][v] = hn::MulAdd(wv, in[v], acc[b][v]);
        }
      }
    }
  }
  const int64_t out_plane = c.out_height * c.out_width;
  EMBER_UNROLL
  for (int b = 0; b < CB; ++b) {
    const V bias = hn::Set(d, c.bias != nullptr ? c.bias[co + b] : 0.0f);
    V o[3];
    EMBER_UNROLL
    for (int v = 0; v < 3; ++v) o[v] = c.bias != nullptr ? hn::Add(acc[b][v], bias) : acc[b][v];
    if (c.residual != nullptr) {
      const float* r0 = c.residual + (co + b) * out_plane + y * kPairWidth;
      const float* r1 = r0 + kPairWidth;
      o[0] = hn::Add(o[0], hn::LoadU(d, r0));
      o[1] = hn::Add(o[1], load_straddle(d, first, r0, r1));
      o[2] = hn::Add(o[2], hn::LoadU(d, r1 + 8));
    }
    EMBER_UNROLL
    for (int v = 0; v < 3; ++v) o[v] = activate(d, kAct == kAnyActivation ? c.activation : kAct, o[v]);
    float* row0 = to0 + b * plane;
    float* row1 = to1 + b * plane;
    hn::StoreU(o[0], d, row0);
    hn::BlendedStore(o[1], first, d, row0 + 16);
    hn::BlendedStore(o[1], hn::Not(first), d, row1 - 8);
    hn::StoreU(o[2], d, row1 + 8);
  }
}
#endif

// Note [pooled convolution]: a convolution followed by a 2 x 2 max pooling at stride 2 (LeNet's
// and MNIST's first layer, VGG's blocks), fused by the compiler for inference (Conv2dAttrs::
// max_pool): each pair of output rows goes to a row buffer (in L1) instead of the output, and
// only the pooled row is stored, a quarter of the convolution's output; no separate pooling pass
// reads it back. The windows are scanned as max pooling's kernel scans them (Note [2 x 2 pooling]
// in pool.cpp: row 0's even and odd column, then row 1's; a later value wins if greater or NaN),
// so the results are its bits.
template <class T>
HWY_INLINE void pool_pair(const T* row0, const T* row1, int64_t width, T* out) {
  const hn::ScalableTag<T> d;  // all lanes: a row's pooling is not held in registers
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t x = 0; x < width; x += lanes) {
    V taps[4];
    hn::LoadInterleaved2(d, row0 + 2 * x, taps[0], taps[1]);
    hn::LoadInterleaved2(d, row1 + 2 * x, taps[2], taps[3]);
    V best = taps[0];
    EMBER_UNROLL
    for (int t = 1; t < 4; ++t) best = hn::IfThenElse(hn::Or(hn::Gt(taps[t], best), hn::IsNaN(taps[t])), taps[t], best);
    store_part(d, best, out + x, std::min(lanes, width - x));
  }
}

// Output rows [y_begin, y_end) of channels [co, co + CB) (pooled rows when c.pool is 2), with the
// activation kAct.
//
// The block's weights are first copied tap by tap, the CB channels' side by side, so that a strip
// reads every weight it broadcasts from one pointer (with CB pointers, GCC kept some of them on the
// stack and reloaded them at every tap).
template <Activation kAct, int CB, class T>
void rows_with(const DirectConv<T>& c, int64_t co, int64_t y_begin, int64_t y_end) {
  const int64_t patch = c.in_channels * c.kernel_h * c.kernel_w;
  thread_local std::vector<T> packed;
  packed.resize(static_cast<size_t>(patch * CB));
  for (int64_t t = 0; t < patch; ++t) {
    for (int b = 0; b < CB; ++b) packed[static_cast<size_t>(t * CB + b)] = c.weight[(co + b) * patch + t];
  }
  const T* weights = packed.data();
  const int64_t out_plane = c.out_height * c.out_width;
  bool pairs = false;  // Note [row pairs]
#if HWY_TARGET <= HWY_AVX3
  pairs = std::is_same_v<T, float> && c.out_width == kPairWidth;
#endif
  if (c.pool == 1) {
    int64_t y = y_begin;
#if HWY_TARGET <= HWY_AVX3
    if constexpr (std::is_same_v<T, float>) {
      for (; pairs && y + 1 < y_end; y += 2) {
        float* to = c.out + co * out_plane + y * c.out_width;
        forward_row_pair<kAct, CB>(c, weights, co, y, to, to + c.out_width, out_plane);
      }
    }
#endif
    for (; y < y_end; ++y)
      forward_row<kAct, CB>(c, weights, co, y, c.out + co * out_plane + y * c.out_width, out_plane);
    return;
  }
  // Two rows of CB channels, each row padded to whole pairs of vectors so that pool_pair's loads
  // stay inside it (what they read past the row is not stored).
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  const int64_t pooled_width = c.out_width / 2, pooled_plane = (c.out_height / 2) * pooled_width;
  const int64_t stride = (c.out_width + 2 * lanes - 1) / (2 * lanes) * (2 * lanes);
  thread_local std::vector<T> pair;
  pair.resize(static_cast<size_t>(2 * CB * stride));
  T* rows = pair.data();
  for (int64_t y = y_begin; y < y_end; ++y) {
    if (pairs) {
#if HWY_TARGET <= HWY_AVX3
      if constexpr (std::is_same_v<T, float>)
        forward_row_pair<kAct, CB>(c, weights, co, 2 * y, rows, rows + CB * stride, stride);
#endif
    } else {
      forward_row<kAct, CB>(c, weights, co, 2 * y, rows, stride);
      forward_row<kAct, CB>(c, weights, co, 2 * y + 1, rows + CB * stride, stride);
    }
    for (int b = 0; b < CB; ++b) {
      pool_pair(rows + b * stride, rows + (CB + b) * stride, pooled_width,
                c.out + (co + b) * pooled_plane + y * pooled_width);
    }
  }
}

// rows_with for c's activation. With the activation a value read at run time, each stored vector
// went through its switch, and GCC kept the activations' constants in four registers through the
// taps' loop, which spilled one of the 24 accumulators of CB = 8, NV = 3 (its store and reload
// then took 37% of the strip's samples): the common cases, none and ReLU, are compiled each on its
// own (conv2d_f32_lenet1 88.7 -> 78.6 us, 5 alternated rounds); GELU and SiLU share one instance
// (each instance adds about 5 s to this file's compile and 130 kB of code over the targets).
template <int CB, class T>
void forward_rows(const DirectConv<T>& c, int64_t co, int64_t y_begin, int64_t y_end) {
  switch (c.activation) {
    case Activation::kNone:
      return rows_with<Activation::kNone, CB>(c, co, y_begin, y_end);
    case Activation::kRelu:
      return rows_with<Activation::kRelu, CB>(c, co, y_begin, y_end);
    default:
      return rows_with<kAnyActivation, CB>(c, co, y_begin, y_end);
  }
}

// Blocks of output channels as wide as the registers allow (2 x CB accumulators).
template <class T>
void DirectForwardRows(const DirectConv<T>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end) {
  constexpr int kWide = HWY_TARGET <= HWY_AVX3 ? 8 : 4;
  int64_t o = co;
  for (; o + kWide <= co + channels; o += kWide) forward_rows<kWide>(c, o, y_begin, y_end);
  for (; o < co + channels; ++o) forward_rows<1>(c, o, y_begin, y_end);
}

void DirectForwardRowsF32(const DirectConv<float>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end) {
  DirectForwardRows(c, co, channels, y_begin, y_end);
}
void DirectForwardRowsF64(const DirectConv<double>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end) {
  DirectForwardRows(c, co, channels, y_begin, y_end);
}

// One column step of weight_row: `count` columns of the CB output-gradient rows at g_row (planes
// out_plane apart) times the input row at `row` shifted by each kernel column, into acc.
template <int CB, int KW, class D, class V = hn::Vec<D>, class T = hn::TFromD<D>>
HWY_INLINE void weight_step(D d, const T* row, const T* g_row, int64_t out_plane, int64_t count, V (&acc)[CB][KW]) {
  V g[CB];
  EMBER_UNROLL
  for (int b = 0; b < CB; ++b) g[b] = load_part(d, g_row + b * out_plane, count);
  EMBER_UNROLL
  for (int kx = 0; kx < KW; ++kx) {
    const V in = load_part(d, row + kx, count);
    EMBER_UNROLL
    for (int b = 0; b < CB; ++b) acc[b][kx] = hn::MulAdd(g[b], in, acc[b][kx]);
  }
}

#if HWY_TARGET <= HWY_AVX3
// weight_step for two rows of 24 columns as three 16-lane vectors (Note [row pairs]): the CB
// output-gradient rows at g (their two rows adjacent in memory), the input rows r0 and r1.
template <int CB, int KW, class D, class M, class V = hn::Vec<D>>
HWY_INLINE void weight_pair_step(D d, M first, const float* r0, const float* r1, const float* g, int64_t out_plane,
                                 V (&acc)[CB][KW]) {
  EMBER_UNROLL
  for (int v = 0; v < 3; ++v) {
    V gv[CB];
    EMBER_UNROLL
    for (int b = 0; b < CB; ++b) gv[b] = hn::LoadU(d, g + b * out_plane + v * 16);
    EMBER_UNROLL
    for (int kx = 0; kx < KW; ++kx) {
      const V in = v == 0   ? hn::LoadU(d, r0 + kx)
                   : v == 1 ? load_straddle(d, first, r0 + kx, r1 + kx)
                            : hn::LoadU(d, r1 + 8 + kx);
      EMBER_UNROLL
      for (int b = 0; b < CB; ++b) acc[b][kx] = hn::MulAdd(gv[b], in, acc[b][kx]);
    }
  }
}
#endif

// grad_weight[co + b, ci, ky, :] for b < CB and ky in [ky0, ky1), summed over images [0, batch) in
// order: `grad_out` is (batch, out_channels, out_height, out_width) and c.input the (padded) images,
// c.out unused. An image's output gradients are read for every kernel row in turn while they are
// in L1 (with one kernel row per call, MNIST's first layer streamed its 2.4 MB of them from the
// last-level cache five times); each (image, kernel row) is summed as with one row per call.
// kPairs: rows of 24 columns two at a time in 16-lane vectors (Note [row pairs]; AVX-512, float32),
// which sums each lane's products in another grouping than 8-lane vectors do: the same values to
// float32's rounding, not the same bits. MNIST's first layer on a Xeon: this function's share of
// train_step_cnn_compiled against the second layer's forward tile 0.74 -> 0.59, the step 1.74 ->
// 1.69-1.73 ms and the eager one 2.03 -> 1.98 ms (3 alternated rounds).
template <int CB, int KW, bool kPairs, class T>
void weight_row_with(const DirectConv<T>& c, const T* grad_out, int64_t batch, int64_t co, int64_t ci, int64_t ky0,
                     int64_t ky1, T* grad_weight) {
  using D = std::conditional_t<kPairs, hn::ScalableTag<T>, Tag<T>>;
  const D d;
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t in_plane = c.in_height * c.in_width, out_plane = c.out_height * c.out_width;
  V acc[CB][KW];
  std::vector<double> totals(static_cast<size_t>((ky1 - ky0) * CB * KW), 0.0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t ky = ky0; ky < ky1; ++ky) {
      double(*total)[KW] = reinterpret_cast<double(*)[KW]>(totals.data() + (ky - ky0) * CB * KW);
      EMBER_UNROLL
      for (int b = 0; b < CB; ++b) {
        EMBER_UNROLL
        for (int kx = 0; kx < KW; ++kx) acc[b][kx] = hn::Zero(d);
      }
      const T* image = c.input + (n * c.in_channels + ci) * in_plane;
      const T* grads = grad_out + (n * c.out_channels + co) * out_plane;
      int64_t y = 0;
#if HWY_TARGET <= HWY_AVX3
      if constexpr (kPairs) {
        const auto first = hn::FirstN(d, 8);
        for (; y + 1 < c.out_height; y += 2) {
          const T* row = image + (y + ky) * c.in_width;
          weight_pair_step<CB, KW>(d, first, row, row + c.in_width, grads + y * c.out_width, out_plane, acc);
        }
      }
#endif
      // Whole vectors and the partial last one in separate loops, so that the whole ones' loop
      // keeps the gradient vectors in registers (with one loop for both, GCC kept them on the stack).
      for (; y < c.out_height; ++y) {
        const T* row = image + (y + ky) * c.in_width;
        const T* g_row = grads + y * c.out_width;
        int64_t x = 0;
        for (; x + lanes <= c.out_width; x += lanes) weight_step<CB, KW>(d, row + x, g_row + x, out_plane, lanes, acc);
        if (x < c.out_width) weight_step<CB, KW>(d, row + x, g_row + x, out_plane, c.out_width - x, acc);
      }
      // Each image's sums join the total in double: the batch's sum, tens of thousands of
      // products, then rounds once instead of along one long float chain per lane.
      EMBER_UNROLL
      for (int b = 0; b < CB; ++b) {
        EMBER_UNROLL
        for (int kx = 0; kx < KW; ++kx) total[b][kx] += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, acc[b][kx])));
      }
    }
  }
  const int64_t patch = c.in_channels * c.kernel_h * KW;
  for (int64_t ky = ky0; ky < ky1; ++ky) {
    for (int b = 0; b < CB; ++b) {
      for (int kx = 0; kx < KW; ++kx) {
        grad_weight[(co + b) * patch + (ci * c.kernel_h + ky) * KW + kx] =
            static_cast<T>(totals[static_cast<size_t>(((ky - ky0) * CB + b) * KW + kx)]);
      }
    }
  }
}

template <int CB, int KW, class T>
void weight_row(const DirectConv<T>& c, const T* grad_out, int64_t batch, int64_t co, int64_t ci, int64_t ky0,
                int64_t ky1, T* grad_weight) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<T, float>) {
    if (c.out_width == kPairWidth)
      return weight_row_with<CB, KW, true>(c, grad_out, batch, co, ci, ky0, ky1, grad_weight);
  }
#endif
  weight_row_with<CB, KW, false>(c, grad_out, batch, co, ci, ky0, ky1, grad_weight);
}

// The widest block of output channels whose accumulators fit in the registers with room to spare.
template <int KW, class T>
void weight_rows_kw(const DirectConv<T>& c, const T* grad_out, int64_t batch, int64_t co, int64_t channels, int64_t ci,
                    int64_t ky0, int64_t ky1, T* grad_weight) {
  constexpr int kRegisters = HWY_TARGET <= HWY_AVX3 ? 32 : 16;
  constexpr int kWide = (kRegisters - 2) / (KW + 1) >= 4 ? 4 : (kRegisters - 2) / (KW + 1) >= 2 ? 2 : 1;
  int64_t o = co;
  for (; o + kWide <= co + channels; o += kWide)
    weight_row<kWide, KW>(c, grad_out, batch, o, ci, ky0, ky1, grad_weight);
  for (; o < co + channels; ++o) weight_row<1, KW>(c, grad_out, batch, o, ci, ky0, ky1, grad_weight);
}

template <class T>
void DirectWeightRows(const DirectConv<T>& c, const T* grad_out, int64_t batch, int64_t co, int64_t channels,
                      int64_t ci, int64_t ky0, int64_t ky1, T* grad_weight) {
  switch (c.kernel_w) {
    case 1:
      return weight_rows_kw<1>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    case 2:
      return weight_rows_kw<2>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    case 3:
      return weight_rows_kw<3>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    case 4:
      return weight_rows_kw<4>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    case 5:
      return weight_rows_kw<5>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    case 6:
      return weight_rows_kw<6>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
    default:
      return weight_rows_kw<7>(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
  }
}

void DirectWeightRowsF32(const DirectConv<float>& c, const float* grad_out, int64_t batch, int64_t co, int64_t channels,
                         int64_t ci, int64_t ky0, int64_t ky1, float* grad_weight) {
  DirectWeightRows(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
}
void DirectWeightRowsF64(const DirectConv<double>& c, const double* grad_out, int64_t batch, int64_t co,
                         int64_t channels, int64_t ci, int64_t ky0, int64_t ky1, double* grad_weight) {
  DirectWeightRows(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(DirectForwardRowsF32);
HWY_EXPORT(DirectForwardRowsF64);
HWY_EXPORT(DirectWeightRowsF32);
HWY_EXPORT(DirectWeightRowsF64);

template <>
void direct_forward_rows(const DirectConv<float>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end) {
  HWY_DYNAMIC_DISPATCH(DirectForwardRowsF32)(c, co, channels, y_begin, y_end);
}
template <>
void direct_forward_rows(const DirectConv<double>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end) {
  HWY_DYNAMIC_DISPATCH(DirectForwardRowsF64)(c, co, channels, y_begin, y_end);
}
template <>
void direct_weight_rows(const DirectConv<float>& c, const float* grad_out, int64_t batch, int64_t co, int64_t channels,
                        int64_t ci, int64_t ky0, int64_t ky1, float* grad_weight) {
  HWY_DYNAMIC_DISPATCH(DirectWeightRowsF32)(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
}
template <>
void direct_weight_rows(const DirectConv<double>& c, const double* grad_out, int64_t batch, int64_t co,
                        int64_t channels, int64_t ci, int64_t ky0, int64_t ky1, double* grad_weight) {
  HWY_DYNAMIC_DISPATCH(DirectWeightRowsF64)(c, grad_out, batch, co, channels, ci, ky0, ky1, grad_weight);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

// Note [blocked convolution]
// The float32 convolution forward as a product whose column matrix is never built. The image is
// copied once into a blocked, padded layout: for each block of C input channels (C = the float32
// vector width: 16 on AVX-512, 8 on AVX2), a (H + 2 pad_h) x (W + 2 pad_w) plane of C-lane pixels,
// zeros in the padding and in the channels past C_in (onnxruntime's and oneDNN's NCHWc). The
// weight is packed once into the order the micro-kernel reads it: for each group of NB x C output
// channels (NB = 2, or 1 where pairs would round C_out up by more than a quarter), for each input
// block, kernel row, kernel column and input channel i of the block, the group's weights side by
// side (zeros past C_out). conv.cpp keeps the packed weight on the weight's storage (Note [derived
// forms] in ember/tensor.h), so inference packs each weight once.
//
// The micro-kernel holds P output positions (P <= 14 on AVX-512, 6 on AVX2) times NB vectors of
// output channels in registers: for every (input channel, kernel row, kernel column) it loads the
// weight vectors once and multiplies them by each position's input value, broadcast from the
// blocked plane, where the positions' values are S x C floats apart (S: the stride). That is the
// packed GEMM's register tile (gemm.cpp) with the image read in place: the loop over k walks input
// blocks, kernel rows and columns, and the C channels of a block, which lie next to each other in
// memory. A row of W positions is cut into tiles as even as whole tiles allow (56 = 4 x 14), each
// tile of its own width by a table of kernels; maps at most P / 2 wide take two rows per tile
// (ResNet's 7 x 7: 28 accumulators, not 14). The weight is prefetched 2 KiB ahead: a group's
// weights (73 KiB for 64 channels 3 x 3, 590 KiB for 512) do not fit L1, and each tile streams
// them from L2 (ResNet-18 at batch 1: 17.3 -> 15.1 ms). The finished tile goes to the NCHW output
// through 8 x 8 register transposes, and the epilogue on the way: the bias, then, from a compiled
// graph, a residual and an activation (Conv2dAttrs). A tile skips the kernel rows that would read
// only the padding's zero rows for each of its output rows (rows_of); the padding's columns it
// cannot skip, since a tile's positions share their taps. Between two convolutions of a compiled
// graph the compiler may keep the activation blocked (Note [blocked activations] in
// graph/passes.cpp): the producer then stores each finished vector of C channels straight into the
// consumer's padded planes, and the consumer reads them in place of blocking its input.
//
// Measured on 2 threads of a Xeon (AVX-512), `ember bench` against the im2col + GEMM and direct
// kernels it replaces: 32 x 64 x 56 x 56, 3 x 3 46.4 -> 21.7-24.5 ms (1.6x PyTorch, 63-67% of the FMA
// peak; the tile itself runs at about 76%: `perf` gives it 88% of the time, the blocking 4% and
// the write-out 6%); 64 x 16 x 12 x 12, 5 x 5 651 -> 350-390 us.
//
// Threads: with as many images as threads (or four times as many), each task takes whole images,
// blocks one into its own buffer and computes all of its output; otherwise the batch is blocked
// first (tasks over channel blocks) and the tasks are (image, group of output channels, band of
// output rows). Every output element is one tile's sum in a fixed order, so the result never
// depends on the threads.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv_nchwc.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/aligned_allocator.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/conv_nchwc.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>
#include <utility>

#include "ember/error.h"
#include "kernels/cpu/conv_weight_tiles.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scalar_math.h"

#ifndef EMBER_KERNELS_CPU_CONV_NCHWC_SHARED
#define EMBER_KERNELS_CPU_CONV_NCHWC_SHARED
namespace ember::cpu::nchwc_detail {

// The sizes of one blocked convolution.
struct Blocked {
  int64_t c = 0;           // channels per block (vector lanes)
  int64_t nbc = 0;         // output channels per group (two vectors)
  int64_t in_blocks = 0;   // ceil(C_in / c)
  int64_t out_groups = 0;  // ceil(C_out / nbc)
  int64_t hp = 0, wp = 0;  // the padded plane
  int64_t plane = 0;       // floats of one block's plane: hp * wp * c
  int64_t image = 0;       // floats of one blocked image: in_blocks * plane
  int64_t group = 0;       // floats of one output group's packed weight
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline Blocked blocked(const Conv2dGeometry& g, NchwcLayout layout) {
  Blocked k;
  k.c = layout.block;
  k.nbc = layout.out_block;
  k.in_blocks = ceil_div(g.in_channels, k.c);
  k.out_groups = ceil_div(g.out_channels, k.nbc);
  k.hp = g.in_height + 2 * g.pad_h;
  k.wp = g.in_width + 2 * g.pad_w;
  k.plane = k.hp * k.wp * k.c;
  k.image = k.in_blocks * k.plane;
  k.group = k.in_blocks * g.kernel_h * g.kernel_w * k.c * k.nbc;
  return k;
}

// Grow-only, 64-byte aligned floats owned by the calling thread, one buffer per use.
enum class Buffer : int { kImage, kBatch, kGrad, kSums, kCount };
inline float* thread_floats(Buffer slot, int64_t count) {
  constexpr int kSlots = static_cast<int>(Buffer::kCount);
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffers[kSlots];
  thread_local int64_t sizes[kSlots] = {};
  const int i = static_cast<int>(slot);
  if (sizes[i] < count) {
    buffers[i] = hwy::AllocateAligned<float>(static_cast<size_t>(count));
    EMBER_CHECK(buffers[i] != nullptr, "[conv2d] out of memory allocating ", count * 4, " bytes of workspace");
    sizes[i] = count;
  }
  return buffers[i].get();
}

// Below this many FLOPs a convolution runs on the calling thread. MNIST's second layer at batch 1
// (16 -> 32 channels, 5 x 5, 8 x 8 outputs: 1.6 MFLOP, two groups of 16 channels in bands) is
// above it: on 2 threads of a Zen 4 `onnx_cnn_b1` went from 23.2 to 17.6 us (the layer from about
// 14 to 8 us). Beside a one-core background load the median moved from 22.5 to 23.4 us and the
// p99 not at all (48-57 us either way). Its first layer (0.46 MFLOP, the direct convolution's
// kSerialConvFlops) on 2 threads saved another 0.5 us quiet, but cost 1.3 us beside the load.
inline constexpr double kSerialFlops = 1e6;

// The weight gradient blocks this many bytes of images and output gradients at a time (Note
// [blocked weight gradient]): about half of an L2.
inline constexpr int64_t kChunkBytes = int64_t{1} << 20;

// The output gradient (C_out, OH, OW) as a blocked image without padding.
inline Conv2dGeometry output_as_image(const Conv2dGeometry& g) {
  Conv2dGeometry o;
  o.in_channels = g.out_channels;
  o.in_height = g.out_height;
  o.in_width = g.out_width;
  return o;
}

}  // namespace ember::cpu::nchwc_detail
#endif  // EMBER_KERNELS_CPU_CONV_NCHWC_SHARED

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace nchwc_detail;  // NOLINT(google-build-using-namespace)

#ifndef EMBER_UNROLL
#define EMBER_UNROLL _Pragma("GCC unroll 16")
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr int kPositions = 14;  // 28 accumulators of 32 registers
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
inline constexpr int kPositions = 6;  // 12 accumulators of 16 registers
#else
inline constexpr int kPositions = 0;  // no blocked kernel
#endif

#if HWY_TARGET != HWY_SCALAR
#include "kernels/cpu/transpose-inl.h"
#endif
#include "kernels/cpu/activation-inl.h"      // the activations as the elementwise ops compute them
#include "kernels/cpu/partial_vector-inl.h"  // load_part, store_part

// Output channels go two vectors at a time, or one where rounding them up to two would add more
// than a quarter (16 channels on AVX-512: LeNet's, the MNIST CNN's input gradient).
NchwcLayout Layout(const Conv2dGeometry& g) {
  if constexpr (kPositions == 0) {
    return {};
  } else {
    const hn::ScalableTag<float> d;
    const auto lanes = static_cast<int64_t>(hn::Lanes(d));
    const bool two = ceil_div(g.out_channels, 2 * lanes) * 2 * lanes * 4 <= g.out_channels * 5;
    return {lanes, two ? 2 * lanes : lanes};
  }
}

// The packing (Note [blocked convolution]): output group, input block, kernel row, kernel column,
// input channel, then the group's output channels.
void PackWeight(const Conv2dGeometry& g, const float* weight, bool transposed, float* packed) {
  const Blocked k = blocked(g, Layout(g));
  const int64_t taps = g.kernel_h * g.kernel_w;
  parallel_for(0, k.out_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t og = begin; og < end; ++og) {
      float* dst = packed + og * k.group;
      for (int64_t b = 0; b < k.in_blocks; ++b) {
        for (int64_t t = 0; t < taps; ++t) {
          for (int64_t i = 0; i < k.c; ++i) {
            const int64_t ci = b * k.c + i;
            for (int64_t j = 0; j < k.nbc; ++j, ++dst) {
              const int64_t o = og * k.nbc + j;
              if (o >= g.out_channels || ci >= g.in_channels) {
                *dst = 0.0f;
              } else {
                *dst = transposed ? weight[(ci * g.out_channels + o) * taps + (taps - 1 - t)]
                                  : weight[(o * g.in_channels + ci) * taps + t];
              }
            }
          }
        }
      }
    }
  });
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
inline constexpr int64_t kC = static_cast<int64_t>(hn::MaxLanes(D()));

// Input blocks [b0, b1) of one image (C_in, H, W) into its blocked, padded planes at dst (image
// floats). Eight channels by eight pixels at a time through an 8 x 8 register transpose.
void block_image(const Conv2dGeometry& g, const Blocked& k, const float* image, float* dst, int64_t b0, int64_t b1) {
  const hn::CappedTag<float, 8> d8;
  const int64_t h_in = g.in_height, w_in = g.in_width, plane_in = h_in * w_in, row = k.wp * kC;
  for (int64_t b = b0; b < b1; ++b) {
    float* plane = dst + b * k.plane;
    std::memset(plane, 0, static_cast<size_t>(g.pad_h * row) * sizeof(float));
    std::memset(plane + (g.pad_h + h_in) * row, 0, static_cast<size_t>((k.hp - g.pad_h - h_in) * row) * sizeof(float));
    const int64_t channels = std::min(kC, g.in_channels - b * kC);
    const float* src = image + b * kC * plane_in;
    for (int64_t y = 0; y < h_in; ++y) {
      float* out = plane + (g.pad_h + y) * row;
      std::memset(out, 0, static_cast<size_t>(g.pad_w * kC) * sizeof(float));
      std::memset(out + (g.pad_w + w_in) * kC, 0, static_cast<size_t>((k.wp - g.pad_w - w_in) * kC) * sizeof(float));
      out += g.pad_w * kC;
      const float* in = src + y * w_in;
      int64_t x = 0;
      if (channels == kC) {
        for (; x + 8 <= w_in; x += 8) {
          for (int64_t c0 = 0; c0 < kC; c0 += 8) {
            hn::Vec<decltype(d8)> r0, r1, r2, r3, r4, r5, r6, r7;
            load_8_rows_transposed(d8, in + c0 * plane_in + x, plane_in, r0, r1, r2, r3, r4, r5, r6, r7);
            store_8_rows(d8, out + x * kC + c0, kC, r0, r1, r2, r3, r4, r5, r6, r7);
          }
        }
      }
      for (; x < w_in; ++x) {
        for (int64_t c = 0; c < kC; ++c) out[x * kC + c] = c < channels ? in[c * plane_in + x] : 0.0f;
      }
    }
  }
}

// What a tile needs besides its pointers.
struct TileArgs {
  int64_t in_blocks;
  int64_t plane;  // floats between input blocks
  int64_t kernel_h, kernel_w;
  int64_t row_step;  // floats between kernel rows: dilation_h * wp * c
  int64_t col_step;  // floats between kernel columns: dilation_w * c
  int64_t next_row;  // floats between the first positions of two output rows: stride * wp * c
  // The kernel rows to sum, [y_begin, y_end): those that read a row of the image for some output row
  // of the tile, not only the zeros of its padding (rows_of).
  int64_t y_begin, y_end;
};

// The NB weight vectors of one input channel, prefetching 16 channels ahead (Note [blocked
// convolution]: the group's weights stream from L2).
template <int NB>
HWY_INLINE void load_weights(const float* w, V* wv) {
  const D d;
  EMBER_UNROLL
  for (int j = 0; j < NB; ++j) {
    wv[j] = hn::LoadU(d, w + j * kC);
    __builtin_prefetch(w + (16 * NB + j) * kC);
  }
}

// R output rows of P positions each (S * kC floats apart within a row, a.next_row between rows,
// from `in`, the first position's first tap) x NB vectors of output channels, summed over the
// whole patch, stored to `sums` ((R * P) x NB kC, row by row).
template <int R, int P, int S, int NB>
void tile(const float* in, const float* w, const TileArgs& a, float* sums) {
  const D d;
  V acc[R * P][NB];
  EMBER_UNROLL
  for (int p = 0; p < R * P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) acc[p][j] = hn::Zero(d);
  }
  // The packed weight's floats before and after the kernel rows summed, in each input block.
  const int64_t skip_before = a.y_begin * a.kernel_w * kC * NB * kC;
  const int64_t skip_after = (a.kernel_h - a.y_end) * a.kernel_w * kC * NB * kC;
  for (int64_t b = 0; b < a.in_blocks; ++b) {
    const float* block = in + b * a.plane;
    w += skip_before;
    for (int64_t y = a.y_begin; y < a.y_end; ++y) {
      const float* row = block + y * a.row_step;
      for (int64_t x = 0; x < a.kernel_w; ++x) {
        const float* px = row + x * a.col_step;
        for (int64_t i = 0; i < kC; ++i) {
          V wv[NB];
          load_weights<NB>(w, wv);
          w += NB * kC;
          EMBER_UNROLL
          for (int r = 0; r < R; ++r) {
            EMBER_UNROLL
            for (int p = 0; p < P; ++p) {
              const V v = hn::Set(d, px[r * a.next_row + p * S * kC + i]);
              EMBER_UNROLL
              for (int j = 0; j < NB; ++j) acc[r * P + p][j] = hn::MulAdd(v, wv[j], acc[r * P + p][j]);
            }
          }
        }
      }
    }
    w += skip_after;
  }
  EMBER_UNROLL
  for (int p = 0; p < R * P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) hn::StoreU(acc[p][j], d, sums + (p * NB + j) * kC);
  }
}

using TileFn = void (*)(const float*, const float*, const TileArgs&, float*);

// Note [padded rows]: a row of P positions that is the whole output row of a stride-1, undilated
// convolution whose KW kernel columns hang PAD columns over each side of the image (PAD = KW - 1:
// the input gradient of an unpadded convolution, computed as a forward over the output gradient
// padded by KW - 1). Position p's tap x reads padded column p + x, which is padding unless
// PAD <= p + x < PAD + W (W = P + KW - 1 - 2 PAD, the image's width): for the MNIST CNN's second
// layer (5 x 5, 8 x 8 outputs: a 12-wide input gradient) 20 of every 60 multiply-adds of tile() add
// zeros. This tile is tile() with the kernel columns unrolled, so that each (position, tap) pair is
// known when compiling and the ones reading padding are left out. The sums keep their values: each
// product left out is a zero added to a sum that starts at +0 (only a weight of inf or NaN, whose
// product with a padding zero would have made the sum NaN, reads differently). `perf` of
// `train_step_cnn`: that tile 20.5% of the samples, this one 13.6%, beside the forward's tile at
// 13.8% and 13.4%. Rows at most kPositions / 2 wide go two to a tile (rows()), which still
// multiplies the padding.
template <int P, int KW, int PAD, int NB>
void padded_row_tile(const float* in, const float* w, const TileArgs& a, float* sums) {
  constexpr int kWidth = P + KW - 1 - 2 * PAD;
  const D d;
  V acc[P][NB];
  EMBER_UNROLL
  for (int p = 0; p < P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) acc[p][j] = hn::Zero(d);
  }
  const int64_t skip_before = a.y_begin * KW * kC * NB * kC;
  const int64_t skip_after = (a.kernel_h - a.y_end) * KW * kC * NB * kC;
  for (int64_t b = 0; b < a.in_blocks; ++b) {
    const float* block = in + b * a.plane;
    w += skip_before;
    for (int64_t y = a.y_begin; y < a.y_end; ++y) {
      const float* row = block + y * a.row_step;
      EMBER_UNROLL
      for (int x = 0; x < KW; ++x) {
        const float* px = row + x * kC;
        for (int64_t i = 0; i < kC; ++i) {
          V wv[NB];
          load_weights<NB>(w, wv);
          w += NB * kC;
          EMBER_UNROLL
          for (int p = 0; p < P; ++p) {
            if (p + x < PAD || p + x >= PAD + kWidth) continue;  // padding: folded when unrolled
            const V v = hn::Set(d, px[p * kC + i]);
            EMBER_UNROLL
            for (int j = 0; j < NB; ++j) acc[p][j] = hn::MulAdd(v, wv[j], acc[p][j]);
          }
        }
      }
    }
    w += skip_after;
  }
  EMBER_UNROLL
  for (int p = 0; p < P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) hn::StoreU(acc[p][j], d, sums + (p * NB + j) * kC);
  }
}

template <int KW, int NB, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> padded_row_table(std::index_sequence<I...> /*widths*/) {
  // Widths of at least KW (narrower rows would have positions that read no image at all) and more
  // than kPositions / 2 (narrower rows go two to a tile: rows()).
  constexpr auto fits = [](int width) { return width >= KW && 2 * width > kPositions; };
  return {(fits(static_cast<int>(I) + 1) ? &padded_row_tile<static_cast<int>(I) + 1, KW, KW - 1, NB> : nullptr)...};
}
// [vectors - 1][width - 1], for 5 x 5 and 3 x 3 kernels.
constexpr std::array<std::array<TileFn, kPositions>, 2> kPaddedRows5 = {
    padded_row_table<5, 1>(std::make_index_sequence<kPositions>()),
    padded_row_table<5, 2>(std::make_index_sequence<kPositions>())};
constexpr std::array<std::array<TileFn, kPositions>, 2> kPaddedRows3 = {
    padded_row_table<3, 1>(std::make_index_sequence<kPositions>()),
    padded_row_table<3, 2>(std::make_index_sequence<kPositions>())};

// The padded-row tile for g's rows (Note [padded rows]), or null.
TileFn padded_row_tile_for(const Conv2dGeometry& g, size_t nb) {
  if (g.stride_w != 1 || g.dilation_w != 1 || g.pad_w != g.kernel_w - 1 || g.out_width > kPositions ||
      2 * g.out_width <= kPositions) {
    return nullptr;
  }
  const auto width = static_cast<size_t>(g.out_width - 1);
  if (g.kernel_w == 5) return kPaddedRows5[nb][width];
  if (g.kernel_w == 3) return kPaddedRows3[nb][width];
  return nullptr;
}

template <int R, int S, int NB, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> tile_table(std::index_sequence<I...> /*widths*/) {
  return {&tile<R, static_cast<int>(I) + 1, S, NB>...};
}
template <int R, int NB>
constexpr std::array<std::array<TileFn, kPositions / R>, 2> stride_tables() {
  return {tile_table<R, 1, NB>(std::make_index_sequence<kPositions / R>()),
          tile_table<R, 2, NB>(std::make_index_sequence<kPositions / R>())};
}
// One row: [vectors - 1][stride - 1][width - 1]; two rows (maps at most half a tile wide, ResNet's
// 7 x 7): the same for widths up to kPositions / 2.
constexpr std::array<std::array<std::array<TileFn, kPositions>, 2>, 2> kTiles = {stride_tables<1, 1>(),
                                                                                 stride_tables<1, 2>()};
constexpr std::array<std::array<std::array<TileFn, kPositions / 2>, 2>, 2> kPairTiles = {stride_tables<2, 1>(),
                                                                                         stride_tables<2, 2>()};

// The finished tile's `count` positions (P x `row` sums) into `channels` NCHW planes at dst, through
// the epilogue (its bias and residual at this tile's channels and position, then its activation):
// eight positions by eight channels at a time through an 8 x 8 register transpose (the positions
// past `count` masked off), the channels past a multiple of eight one by one. Of the activations it
// applies a ReLU only: rows() applies the others (late_activation).
void write_tile(const float* sums, int64_t row, int64_t count, int64_t channels, const NchwcEpilogue& e,
                int64_t out_plane, float* dst) {
  const float* bias = e.bias;
  const bool relu = e.activation == Activation::kRelu;
  const hn::CappedTag<float, 8> d8;
  int64_t j = 0;
  for (; j + 8 <= channels; j += 8) {
    for (int64_t p = 0; p < count; p += 8) {
      const float* s = sums + p * row + j;
      // Rows past the tile's count read the sums buffer's slack (kPositions + 8 rows).
      auto r0 = hn::Load(d8, s), r1 = hn::Load(d8, s + row), r2 = hn::Load(d8, s + 2 * row),
           r3 = hn::Load(d8, s + 3 * row), r4 = hn::Load(d8, s + 4 * row), r5 = hn::Load(d8, s + 5 * row),
           r6 = hn::Load(d8, s + 6 * row), r7 = hn::Load(d8, s + 7 * row);
      transpose_8x8(d8, r0, r1, r2, r3, r4, r5, r6, r7);
      const auto valid = hn::FirstN(d8, static_cast<size_t>(std::min<int64_t>(8, count - p)));
      float* out = dst + j * out_plane + p;
      const auto put = [&](auto v, int64_t q) HWY_ATTR {
        v = hn::Add(v, hn::Set(d8, bias != nullptr ? bias[j + q] : 0.0f));
        if (e.residual != nullptr) v = hn::Add(v, hn::MaskedLoad(valid, d8, e.residual + (j + q) * out_plane + p));
        if (relu) v = activate(d8, Activation::kRelu, v);
        hn::BlendedStore(v, valid, d8, out + q * out_plane);
      };
      put(r0, 0), put(r1, 1), put(r2, 2), put(r3, 3), put(r4, 4), put(r5, 5), put(r6, 6), put(r7, 7);
    }
  }
  for (; j < channels; ++j) {
    const float add = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t p = 0; p < count; ++p) {
      float v = sums[p * row + j] + add;
      if (e.residual != nullptr) v += e.residual[j * out_plane + p];
      dst[j * out_plane + p] = relu ? scalar::Relu()(v) : v;
    }
  }
}

// A GELU or SiLU costs tens of instructions a vector, so it does not go through the 8 x 8 transpose
// of write_tile in eight lanes: rows() applies it to each channel's finished positions every
// kLateSpan positions or more (still in L1), in vectors of the full width. silu(conv2d) over 16 x 64
// x 56 x 56 on a Zen 4: write_tile took 11.6% of the samples with the SiLU in eight lanes, against
// 5.8% without it and 4.5% for the elementwise op's own pass.
bool late_activation(Activation a) { return a != Activation::kNone && a != Activation::kRelu; }
inline constexpr int64_t kLateSpan = 128;

// The activation over positions [from, to) of `channels` planes `out_plane` apart.
void activate_planes(Activation activation, float* out, int64_t out_plane, int64_t channels, int64_t from, int64_t to) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < channels; ++j) {
    float* values = out + j * out_plane;
    for (int64_t p = from; p < to; p += lanes) {
      const int64_t n = std::min(lanes, to - p);
      store_part(d, activate(d, activation, load_part(d, values + p, n)), values + p, n);
    }
  }
}

// The kernel rows [y_begin, y_end) that read an image row (not the padding's zeros) for output row
// oh or oh + rows - 1, and so for the rows between. The input gradient of a convolution computed as
// a forward pads by kernel - 1 - padding: for the MNIST CNN's second layer (5 x 5, 8 x 8 outputs)
// a third of the taps of its 12 x 12 input gradient's tiles read only zeros.
std::pair<int64_t, int64_t> rows_of(const Conv2dGeometry& g, int64_t oh, int64_t rows) {
  const int64_t top = oh * g.stride_h - g.pad_h, bottom = (oh + rows - 1) * g.stride_h - g.pad_h;
  const int64_t y_begin = std::min(g.kernel_h, bottom >= 0 ? 0 : ceil_div(-bottom, g.dilation_h));
  const int64_t y_end = std::clamp<int64_t>(ceil_div(g.in_height - top, g.dilation_h), y_begin, g.kernel_h);
  return {y_begin, y_end};
}

// An output-sized image (the output, or a residual) in the blocked layout (BlockedPlanes).
struct BlockedImage {
  int64_t pad_h = -1, pad_w = 0;
  int64_t wp = 0;      // positions of one padded row
  int64_t plane = 0;   // floats of one block's padded plane
  int64_t blocks = 0;  // channel blocks
  bool blocked() const { return pad_h >= 0; }
  // Floats from the image's start to output position (oh, ow) of block 0.
  int64_t at(int64_t oh, int64_t ow) const { return ((oh + pad_h) * wp + ow + pad_w) * kC; }
};

BlockedImage blocked_image_of(const Conv2dGeometry& g, BlockedPlanes planes) {
  if (!planes.blocked()) return {};
  const int64_t wp = g.out_width + 2 * planes.pad_w;
  return {planes.pad_h, planes.pad_w, wp, (g.out_height + 2 * planes.pad_h) * wp * kC, ceil_div(g.out_channels, kC)};
}

// Adds an NCHW residual (`residual`: channel 0 of the group at the first position, planes
// `out_plane` floats apart) to `count` positions' sums (`row` floats apart) of `channels` channels:
// eight channels by eight positions at a time through an 8 x 8 register transpose, the rest one by
// one.
void add_nchw_residual(float* sums, int64_t row, int64_t count, int64_t channels, const float* residual,
                       int64_t out_plane) {
  const hn::CappedTag<float, 8> d8;
  int64_t j = 0;
  for (; j + 8 <= channels; j += 8) {
    int64_t p = 0;
    for (; p + 8 <= count; p += 8) {
      hn::Vec<decltype(d8)> r0, r1, r2, r3, r4, r5, r6, r7;
      load_8_rows_transposed(d8, residual + j * out_plane + p, out_plane, r0, r1, r2, r3, r4, r5, r6, r7);
      float* s = sums + p * row + j;
      const auto add = [&](auto v, int64_t q)
                           HWY_ATTR { hn::StoreU(hn::Add(hn::LoadU(d8, s + q * row), v), d8, s + q * row); };
      add(r0, 0), add(r1, 1), add(r2, 2), add(r3, 3), add(r4, 4), add(r5, 5), add(r6, 6), add(r7, 7);
    }
    for (; p < count; ++p) {
      for (int64_t l = 0; l < 8; ++l) sums[p * row + j + l] += residual[(j + l) * out_plane + p];
    }
  }
  for (; j < channels; ++j) {
    for (int64_t p = 0; p < count; ++p) sums[p * row + j] += residual[j * out_plane + p];
  }
}

// Adds the bias and then the residual to `count` positions' sums (`row` floats apart) of output
// group channels [o0, o0 + channels), at output row oh from column ow0, for a write-out that takes
// neither (a blocked output, or a blocked residual): the same two roundings, in the same order, as
// write_tile's. The lanes past `channels` keep their zeros.
void add_bias_and_residual(float* sums, int64_t row, int64_t count, int64_t o0, int64_t channels,
                           const NchwcEpilogue& e, const BlockedImage& res, int64_t out_plane, int64_t oh, int64_t ow0,
                           int64_t out_width) {
  const D d;
  for (int64_t j = 0; j * kC < channels; ++j) {
    const V bias =
        e.bias != nullptr ? load_part(d, e.bias + o0 + j * kC, std::min(kC, channels - j * kC)) : hn::Zero(d);
    const float* blocked_res = res.blocked() ? e.residual + (o0 / kC + j) * res.plane + res.at(oh, ow0) : nullptr;
    for (int64_t p = 0; p < count; ++p) {
      float* s = sums + p * row + j * kC;
      V v = hn::Add(hn::Load(d, s), bias);
      if (blocked_res != nullptr) v = hn::Add(v, hn::LoadU(d, blocked_res + p * kC));
      hn::Store(v, d, s);
    }
  }
  if (e.residual != nullptr && !res.blocked()) {
    add_nchw_residual(sums, row, count, channels, e.residual + o0 * out_plane + oh * out_width + ow0, out_plane);
  }
}

// The blocked write-out: `count` positions' finished sums (`row` floats apart) of `channels`
// output channels to dst (position 0 of the first block; blocks `plane` floats apart, positions kC),
// each vector through the activation at full width. The lanes past `channels` get zeros (their
// sums are zero weights times the inputs, NaN where an input is infinite).
void write_blocked(const float* sums, int64_t row, int64_t count, int64_t channels, Activation activation,
                   int64_t plane, float* dst) {
  const D d;
  for (int64_t j = 0; j * kC < channels; ++j) {
    const auto valid = hn::FirstN(d, static_cast<size_t>(std::min(kC, channels - j * kC)));
    for (int64_t p = 0; p < count; ++p) {
      V v = hn::Load(d, sums + p * row + j * kC);
      if (activation != Activation::kNone) v = activate(d, activation, v);
      hn::Store(hn::IfThenElseZero(valid, v), d, dst + j * plane + p * kC);
    }
  }
}

// Zeros the padding of output rows [oh0, oh1) of blocks [b0, b1) of a blocked output image, and its
// top and bottom padding rows where the rows begin or end the image.
void zero_padding(const Conv2dGeometry& g, const BlockedImage& o, float* image, int64_t b0, int64_t b1, int64_t oh0,
                  int64_t oh1) {
  const auto zero = [](float* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * sizeof(float)); };
  const int64_t row = o.wp * kC;
  for (int64_t b = b0; b < b1; ++b) {
    float* plane = image + b * o.plane;
    if (oh0 == 0) zero(plane, o.pad_h * row);
    if (oh1 == g.out_height) zero(plane + (o.pad_h + g.out_height) * row, o.pad_h * row);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      zero(plane + (o.pad_h + oh) * row, o.pad_w * kC);
      zero(plane + (o.pad_h + oh) * row + (o.pad_w + g.out_width) * kC, o.pad_w * kC);
    }
  }
}

// Output rows [oh0, oh1) of output group og of one image, from its blocked planes, to out_image:
// NCHW, or blocked as `out` says.
// The blocked image holds input rows from first_row * stride on (the patch forward's bands).
void rows(const Conv2dGeometry& g, const Blocked& k, const float* blocked_image, const float* packed,
          const NchwcEpilogue& epilogue, float* out_image, const float* residual_image, int64_t og, int64_t oh0,
          int64_t oh1, int64_t first_row = 0, const BlockedImage& out = {}) {
  const int64_t s = g.stride_h, ow_size = g.out_width;
  TileArgs a{k.in_blocks,       k.plane,       g.kernel_h, g.kernel_w, g.dilation_h * k.wp * kC,
             g.dilation_w * kC, s * k.wp * kC, 0,          0};
  const float* w = packed + og * k.group;
  const int64_t out_plane = g.out_height * ow_size, o0 = og * k.nbc;
  const int64_t channels = std::min(k.nbc, g.out_channels - o0);
  const BlockedImage res = blocked_image_of(g, epilogue.residual_planes);
  // Where the sums take the bias and residual before the write-out (a blocked operand), the
  // write-out applies only the activation.
  const bool added_first = out.blocked() || res.blocked();
  const bool late = late_activation(epilogue.activation) && !out.blocked();
  const int64_t out_blocks = ceil_div(channels, kC);
  float* dst = out.blocked() ? out_image + (o0 / kC) * out.plane : out_image + o0 * out_plane;
  if (out.blocked()) zero_padding(g, out, out_image, o0 / kC, o0 / kC + out_blocks, oh0, oh1);
  // The epilogue at position `offset` of this group's planes.
  const auto at = [&](int64_t offset) {
    const Activation activation = late ? Activation::kNone : epilogue.activation;
    if (added_first) return NchwcEpilogue{nullptr, nullptr, activation, {}};
    return NchwcEpilogue{epilogue.bias != nullptr ? epilogue.bias + o0 : nullptr,
                         residual_image != nullptr ? residual_image + o0 * out_plane + offset : nullptr,
                         activation,
                         {}};
  };
  // `count` finished positions of output row oh from column ow0, their sums at `sums`.
  const NchwcEpilogue image_epilogue{epilogue.bias, residual_image, epilogue.activation, epilogue.residual_planes};
  const auto write = [&](float* sums, int64_t oh, int64_t ow0, int64_t count) {
    if (added_first) {
      add_bias_and_residual(sums, k.nbc, count, o0, channels, image_epilogue, res, out_plane, oh, ow0, ow_size);
    }
    if (out.blocked()) {
      write_blocked(sums, k.nbc, count, channels, epilogue.activation, out.plane, dst + out.at(oh, ow0));
    } else {
      write_tile(sums, k.nbc, count, channels, at(oh * ow_size + ow0), out_plane, dst + oh * ow_size + ow0);
    }
  };
  // The late activation over the positions finished since the last time, up to row `oh` (excluded).
  int64_t pending = oh0 * ow_size;
  const auto finish_rows = [&](int64_t oh) {
    if (!late || (oh < oh1 && oh * ow_size - pending < kLateSpan)) return;
    activate_planes(epilogue.activation, dst, out_plane, channels, pending, oh * ow_size);
    pending = oh * ow_size;
  };
  HWY_ALIGN float sums[(kPositions + 8) * 2 * kC];
  const size_t nb = static_cast<size_t>(k.nbc / kC) - 1, stride = static_cast<size_t>(s - 1);
  if (2 * ow_size <= kPositions) {
    for (int64_t oh = oh0; oh < oh1; oh += 2) {
      const float* in = blocked_image + (oh - first_row) * s * k.wp * kC;
      std::tie(a.y_begin, a.y_end) = rows_of(g, oh, oh + 1 < oh1 ? 2 : 1);
      if (oh + 1 < oh1) {
        kPairTiles[nb][stride][static_cast<size_t>(ow_size - 1)](in, w, a, sums);
        write(sums, oh, 0, ow_size);
        write(sums + ow_size * k.nbc, oh + 1, 0, ow_size);
      } else {
        kTiles[nb][stride][static_cast<size_t>(ow_size - 1)](in, w, a, sums);
        write(sums, oh, 0, ow_size);
      }
      finish_rows(std::min(oh + 2, oh1));
    }
    return;
  }
  const int64_t n_tiles = ceil_div(ow_size, kPositions);
  const TileFn padded_row = padded_row_tile_for(g, nb);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    std::tie(a.y_begin, a.y_end) = rows_of(g, oh, 1);
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t ow0 = t * ow_size / n_tiles, count = (t + 1) * ow_size / n_tiles - ow0;
      const TileFn tile_fn = padded_row != nullptr ? padded_row : kTiles[nb][stride][static_cast<size_t>(count - 1)];
      tile_fn(blocked_image + ((oh - first_row) * s * k.wp + ow0 * s) * kC, w, a, sums);
      write(sums, oh, ow0, count);
    }
    finish_rows(oh + 1);
  }
}

void Forward(const Conv2dGeometry& g, const float* input, const float* packed, const NchwcEpilogue& epilogue,
             float* out, BlockedPlanes input_planes, BlockedPlanes out_planes) {
  Blocked k = blocked(g, Layout(g));
  int64_t in_image = g.in_channels * g.in_height * g.in_width, in_offset = 0;
  if (input_planes.blocked()) {
    // The planes as they are, read from g's padding on.
    k.hp = g.in_height + 2 * input_planes.pad_h;
    k.wp = g.in_width + 2 * input_planes.pad_w;
    k.plane = k.hp * k.wp * kC;
    k.image = in_image = k.in_blocks * k.plane;
    in_offset = ((input_planes.pad_h - g.pad_h) * k.wp + input_planes.pad_w - g.pad_w) * kC;
  }
  const BlockedImage bo = blocked_image_of(g, out_planes), res = blocked_image_of(g, epilogue.residual_planes);
  const int64_t nchw_out = g.out_channels * g.out_height * g.out_width;
  const int64_t out_image = bo.blocked() ? bo.blocks * bo.plane : nchw_out;
  const int64_t res_image = res.blocked() ? res.blocks * res.plane : nchw_out;
  const double flops =
      2.0 * static_cast<double>(g.batch * nchw_out) * static_cast<double>(g.in_channels * g.kernel_h * g.kernel_w);
  const int threads = flops < kSerialFlops ? 1 : num_threads();
  const auto residual_of = [&](int64_t n) {
    return epilogue.residual != nullptr ? epilogue.residual + n * res_image : nullptr;
  };
  if (g.batch % threads == 0 || g.batch >= 4 * threads) {
    parallel_tasks(g.batch, threads, [&](int64_t n) {
      const float* image = input + n * in_image + in_offset;
      if (!input_planes.blocked()) {
        float* blocked_image = thread_floats(Buffer::kImage, k.image);
        block_image(g, k, input + n * in_image, blocked_image, 0, k.in_blocks);
        image = blocked_image;
      }
      for (int64_t og = 0; og < k.out_groups; ++og) {
        rows(g, k, image, packed, epilogue, out + n * out_image, residual_of(n), og, 0, g.out_height, 0, bo);
      }
    });
    return;
  }
  const float* images = input + in_offset;
  if (!input_planes.blocked()) {
    float* blocked_images = thread_floats(Buffer::kBatch, g.batch * k.image);
    parallel_tasks(g.batch * k.in_blocks, threads, [&](int64_t t) {
      const int64_t n = t / k.in_blocks, b = t % k.in_blocks;
      block_image(g, k, input + n * in_image, blocked_images + n * k.image, b, b + 1);
    });
    images = blocked_images;
  }
  const int64_t per_image = g.batch * k.out_groups;
  const int64_t bands = std::clamp<int64_t>(ceil_div(threads * kTasksPerThread, per_image), 1, g.out_height);
  parallel_tasks(per_image * bands, threads, [&](int64_t t) {
    const int64_t band = t % bands, og = (t / bands) % k.out_groups, n = t / (bands * k.out_groups);
    rows(g, k, images + n * k.image, packed, epilogue, out + n * out_image, residual_of(n), og,
         band * g.out_height / bands, (band + 1) * g.out_height / bands, 0, bo);
  });
}

// Note [patch convolution]
// A convolution with fewer input channels than a block (an RGB image's first layer: 3 channels,
// 7 x 7, stride 2) would be mostly zeros in the blocked layout. Its patches (C_in x kh x kw values
// per output position, 147 there) are instead the channels of a 1 x 1 convolution
// (nchwc_patch_geometry), whose weight is the same array: im2col, but blocked, a band of output
// rows at a time (about kChunkBytes, so the band stays in L2), and the blocked 1 x 1 tiles over it.
// ResNet-18's first layer at batch 1 (224 x 224, profiled in onnx_resnet18_b1): im2col + GEMM 2.52
// ms (94 GFLOP/s), this 1.45 ms (160); of that, the patches and their blocking take a third and
// the 1 x 1 tiles run at about half the FMA peak (each output is 147 multiply-adds, 9 times fewer
// than a 64-channel 3 x 3 convolution's, so writing it out weighs more).

// The band's patches, one row of `count` positions per patch entry (C_in, kh, kw order), zeros
// where a tap falls in the padding.
void patch_rows(const Conv2dGeometry& g, const float* image, int64_t oh0, int64_t oh1, float* columns) {
  const int64_t ow_size = g.out_width, count = (oh1 - oh0) * ow_size;
  float* dst = columns;
  for (int64_t ci = 0; ci < g.in_channels; ++ci) {
    for (int64_t ky = 0; ky < g.kernel_h; ++ky) {
      for (int64_t kx = 0; kx < g.kernel_w; ++kx, dst += count) {
        // Input column ow * stride_w + x0 lies inside the image for ow in [lo, hi).
        const int64_t x0 = kx * g.dilation_w - g.pad_w, sw = g.stride_w;
        const int64_t hi = x0 > g.in_width - 1 ? 0 : std::min(ow_size, (g.in_width - 1 - x0) / sw + 1);
        const int64_t lo = std::min(hi, x0 >= 0 ? 0 : ceil_div(-x0, sw));
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          float* row = dst + (oh - oh0) * ow_size;
          const int64_t ih = oh * g.stride_h - g.pad_h + ky * g.dilation_h;
          if (ih < 0 || ih >= g.in_height) {
            std::fill(row, row + ow_size, 0.0f);
            continue;
          }
          const float* src = image + (ci * g.in_height + ih) * g.in_width + x0;
          std::fill(row, row + lo, 0.0f);
          if (sw == 1) {
            std::copy(src + lo, src + hi, row + lo);
          } else if (sw == 2) {
            for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[2 * ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * sw];
          }
          std::fill(row + hi, row + ow_size, 0.0f);
        }
      }
    }
  }
}

void PatchForward(const Conv2dGeometry& g, const float* input, const float* packed, const NchwcEpilogue& epilogue,
                  float* out, BlockedPlanes out_planes) {
  const Conv2dGeometry c = nchwc_patch_geometry(g);
  const Blocked k = blocked(c, Layout(c));
  const int64_t ow_size = g.out_width, patch = c.in_channels;
  const int64_t in_image = g.in_channels * g.in_height * g.in_width;
  const int64_t nchw_out = g.out_channels * g.out_height * ow_size;
  const BlockedImage bo = blocked_image_of(c, out_planes);
  const int64_t out_image = bo.blocked() ? bo.blocks * bo.plane : nchw_out;
  // A band's rows before and after blocking.
  const int64_t row_bytes = (k.in_blocks * kC + patch) * ow_size * static_cast<int64_t>(sizeof(float));
  const int64_t band_rows = std::clamp<int64_t>(kChunkBytes / row_bytes, 1, g.out_height);
  const int64_t bands = ceil_div(g.out_height, band_rows);
  const double flops = 2.0 * static_cast<double>(g.batch * nchw_out) * static_cast<double>(patch);
  const int threads = flops < kSerialFlops ? 1 : num_threads();
  parallel_tasks(g.batch * bands, threads, [&](int64_t t) {
    const int64_t n = t / bands, oh0 = (t % bands) * band_rows, oh1 = std::min(g.out_height, oh0 + band_rows);
    Conv2dGeometry band = c;
    band.in_height = band.out_height = oh1 - oh0;
    const Blocked kb = blocked(band, Layout(band));
    float* columns = thread_floats(Buffer::kGrad, patch * (oh1 - oh0) * ow_size);
    float* image = thread_floats(Buffer::kImage, kb.image);
    patch_rows(g, input + n * in_image, oh0, oh1, columns);
    block_image(band, kb, columns, image, 0, kb.in_blocks);
    const float* residual = epilogue.residual != nullptr ? epilogue.residual + n * nchw_out : nullptr;
    for (int64_t og = 0; og < k.out_groups; ++og) {
      rows(c, kb, image, packed, epilogue, out + n * out_image, residual, og, oh0, oh1, oh0, bo);
    }
  });
}

// Note [blocked weight gradient]
// grad_weight[o, i, ky, kx] sums grad_out[n, o, p] * the input at p's tap (ky, kx) over images n and
// output positions p. The images and the output gradients are blocked (a chunk of images, about
// kChunkBytes, at a time). The result is cut into tiles of one tap, half a block of input channels
// (kI) and two vectors of output channels; for every position a tile loads the two gradient
// vectors and multiplies them by each of its kI input values, broadcast: 2 kI multiply-adds per
// kI + 2 loads, the forward's tile turned around.
//
// A task owns the tiles of one pair of output vectors, one input block and a range of taps (all 9
// of a 3 x 3 kernel when there are enough tasks without splitting them). It walks its chunk a band
// of output rows at a time (about kBandPositions positions, at least a row) and runs every one of
// its tiles over the band before going on, each tile's sums loaded from and stored back to its
// buffer: the band's gradient rows and input rows are read from L2 once and then from L1 by every
// tap and half-block (18 tiles for a 3 x 3 kernel), instead of once per tile. Every tile still goes
// over the images and positions in order, so the result does not depend on the threads (or on the
// band).
// Measured in `ember bench`: resnet_block_f32 (16 x 64 x 28 x 28, forward and backward) with the
// im2col + GEMM weight gradient 30.4 ms, with this one 25.4 ms; train_step_cnn 5.2 -> 3.5 ms. The
// tile's loop runs at about 78% of one core's FMA peak with its data in L1; the bands (against one
// pass over the chunk per tile) gained 2-10% across ResNet's shapes, most at 7 x 7 (256 channels:
// 210 -> 232 GFLOP/s), and lost 3% at 32 channels (222 -> 215), with bands of 32 positions slower
// than 64.
inline constexpr int64_t kI = kC / 2;
inline constexpr int64_t kBandPositions = 64;

// Adds one band of one image (output rows [oh0, oh1)) to one tile's sums.
void weight_tile(const Conv2dGeometry& g, const Blocked& k, const float* x_image, const float* g0, const float* g1,
                 int64_t oh0, int64_t oh1, int64_t tap, int64_t it, bool first, float* sums) {
  const D d;
  V acc[kI][2];
  EMBER_UNROLL
  for (int64_t i = 0; i < kI; ++i) {
    acc[i][0] = first ? hn::Zero(d) : hn::LoadU(d, sums + 2 * i * kC);
    acc[i][1] = first ? hn::Zero(d) : hn::LoadU(d, sums + (2 * i + 1) * kC);
  }
  const int64_t ky = tap / g.kernel_w, kx = tap % g.kernel_w, s = g.stride_h;
  const float* x = x_image + (it / 2) * k.plane + (it % 2) * kI + (ky * g.dilation_h * k.wp + kx * g.dilation_w) * kC;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const float* px = x + oh * s * k.wp * kC;
    const int64_t row = oh * g.out_width * kC;
    for (int64_t ow = 0; ow < g.out_width; ++ow, px += s * kC) {
      const V a = hn::LoadU(d, g0 + row + ow * kC), b = hn::LoadU(d, g1 + row + ow * kC);
      EMBER_UNROLL
      for (int64_t i = 0; i < kI; ++i) {
        const V v = hn::Set(d, px[i]);
        acc[i][0] = hn::MulAdd(v, a, acc[i][0]);
        acc[i][1] = hn::MulAdd(v, b, acc[i][1]);
      }
    }
  }
  EMBER_UNROLL
  for (int64_t i = 0; i < kI; ++i) {
    hn::StoreU(acc[i][0], d, sums + 2 * i * kC);
    hn::StoreU(acc[i][1], d, sums + (2 * i + 1) * kC);
  }
}

void WeightGrad(const Conv2dGeometry& g, const float* grad_out, const float* input, float* grad_weight) {
  const Blocked k = blocked(g, Layout(g));
  const Conv2dGeometry go = output_as_image(g);
  const Blocked kg = blocked(go, Layout(go));
  const int64_t o_blocks = ceil_div(kg.in_blocks, 2) * 2, g_image = o_blocks * kg.plane;
  const int64_t in_image = g.in_channels * g.in_height * g.in_width;
  const int64_t out_image = g.out_channels * g.out_height * g.out_width;
  const double flops =
      2.0 * static_cast<double>(g.batch * out_image) * static_cast<double>(g.in_channels * g.kernel_h * g.kernel_w);
  const int threads = flops < kSerialFlops ? 1 : num_threads();
  const WeightTiles w = weight_tiles(g, kC, threads, kBandPositions);
  const int64_t per_chunk =
      std::clamp<int64_t>(kChunkBytes / ((k.image + g_image) * static_cast<int64_t>(sizeof(float))), 1, g.batch);
  float* xs = thread_floats(Buffer::kBatch, per_chunk * k.image);
  float* gs = thread_floats(Buffer::kGrad, per_chunk * g_image);
  float* sums = thread_floats(Buffer::kSums, w.count() * w.tile_floats());
  for (int64_t n0 = 0; n0 < g.batch; n0 += per_chunk) {
    const int64_t images = std::min(per_chunk, g.batch - n0), blocks = k.in_blocks + o_blocks;
    parallel_tasks(images * blocks, threads, [&](int64_t t) {
      const int64_t n = t / blocks, b = t % blocks;
      if (b < k.in_blocks) {
        block_image(g, k, input + (n0 + n) * in_image, xs + n * k.image, b, b + 1);
      } else if (b - k.in_blocks < kg.in_blocks) {
        block_image(go, kg, grad_out + (n0 + n) * out_image, gs + n * g_image, b - k.in_blocks, b - k.in_blocks + 1);
      } else {  // the zero block that makes the count even
        std::memset(gs + n * g_image + (b - k.in_blocks) * kg.plane, 0, static_cast<size_t>(kg.plane) * sizeof(float));
      }
    });
    run_weight_tiles(
        w, g, images, n0 == 0, threads, sums,
        [&](int64_t n, int64_t og, int64_t oh0, int64_t oh1, int64_t tap, int64_t it, bool first, float* tile_sums) {
          const float* g0 = gs + n * g_image + 2 * og * kg.plane;
          weight_tile(g, k, xs + n * k.image, g0, g0 + kg.plane, oh0, oh1, tap, it, first, tile_sums);
        });
  }
  scatter_weight_tiles(g, w, sums, grad_weight);
}

#else

void WeightGrad(const Conv2dGeometry& /*g*/, const float* /*grad_out*/, const float* /*input*/,
                float* /*grad_weight*/) {
  EMBER_CHECK(false, "[conv2d] internal error: no blocked kernel on this CPU");
}

void Forward(const Conv2dGeometry& /*g*/, const float* /*input*/, const float* /*packed*/,
             const NchwcEpilogue& /*epilogue*/, float* /*out*/, BlockedPlanes /*input_planes*/,
             BlockedPlanes /*out_planes*/) {
  EMBER_CHECK(false, "[conv2d] internal error: no blocked kernel on this CPU");
}

void PatchForward(const Conv2dGeometry& /*g*/, const float* /*input*/, const float* /*packed*/,
                  const NchwcEpilogue& /*epilogue*/, float* /*out*/, BlockedPlanes /*out_planes*/) {
  EMBER_CHECK(false, "[conv2d] internal error: no blocked kernel on this CPU");
}

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(Layout);
HWY_EXPORT(PackWeight);
HWY_EXPORT(Forward);
HWY_EXPORT(PatchForward);
HWY_EXPORT(WeightGrad);

NchwcLayout nchwc_layout(const Conv2dGeometry& g) { return HWY_DYNAMIC_DISPATCH(Layout)(g); }

bool nchwc_takes(const Conv2dGeometry& g) {
  const NchwcLayout layout = nchwc_layout(g);
  if (layout.block == 0 || g.groups != 1 || g.stride_h != g.stride_w || g.stride_h > 2) return false;
  // Channels padded to whole blocks cost multiply-adds of zeros: at most an eighth on the input
  // side and a quarter on the output side.
  const int64_t in_padded = nchwc_detail::ceil_div(g.in_channels, layout.block) * layout.block;
  const int64_t out_padded = nchwc_detail::ceil_div(g.out_channels, layout.out_block) * layout.out_block;
  return in_padded * 8 <= g.in_channels * 9 && out_padded * 4 <= g.out_channels * 5;
}

Conv2dGeometry nchwc_patch_geometry(const Conv2dGeometry& g) {
  Conv2dGeometry c;
  c.batch = g.batch;
  c.in_channels = g.in_channels * g.kernel_h * g.kernel_w;
  c.in_height = c.out_height = g.out_height;
  c.in_width = c.out_width = g.out_width;
  c.out_channels = g.out_channels;
  return c;
}

bool nchwc_patch_takes(const Conv2dGeometry& g) {
  const int64_t block = nchwc_layout(g).block;
  return block > 0 && g.groups == 1 && g.in_channels < block && nchwc_takes(nchwc_patch_geometry(g));
}

void nchwc_patch_forward(const Conv2dGeometry& g, const float* input, const float* packed, NchwcLayout layout,
                         const NchwcEpilogue& epilogue, float* out, BlockedPlanes out_planes) {
  EMBER_CHECK(layout == nchwc_layout(nchwc_patch_geometry(g)) && layout.block > 0,
              "[conv2d] internal error: a patch weight packed for another layout");
  EMBER_CHECK(!epilogue.residual_planes.blocked(), "[conv2d] internal error: a blocked residual for a patch forward");
  HWY_DYNAMIC_DISPATCH(PatchForward)(g, input, packed, epilogue, out, out_planes);
}

bool nchwc_weight_grad_takes(const Conv2dGeometry& g) {
  const int64_t pair = 2 * nchwc_layout(g).block;
  return nchwc_takes(g) && nchwc_detail::ceil_div(g.out_channels, pair) * pair * 4 <= g.out_channels * 5;
}

int64_t nchwc_packed_size(const Conv2dGeometry& g, NchwcLayout layout) {
  const nchwc_detail::Blocked k = nchwc_detail::blocked(g, layout);
  return k.out_groups * k.group;
}

void nchwc_pack_weight(const Conv2dGeometry& g, const float* weight, bool transposed, float* packed) {
  HWY_DYNAMIC_DISPATCH(PackWeight)(g, weight, transposed, packed);
}

Shape blocked_shape(const Shape& nchw, int64_t block, BlockedPlanes planes) {
  return {nchw[0], nchwc_detail::ceil_div(nchw[1], block), nchw[2] + 2 * planes.pad_h, nchw[3] + 2 * planes.pad_w,
          block};
}

void nchwc_forward(const Conv2dGeometry& g, const float* input, const float* packed, NchwcLayout layout,
                   const NchwcEpilogue& epilogue, float* out, BlockedPlanes input_planes, BlockedPlanes out_planes) {
  EMBER_CHECK(layout == nchwc_layout(g) && layout.block > 0, "[conv2d] internal error: a weight packed for blocks of ",
              layout.block, " x ", layout.out_block, " where this CPU runs ", nchwc_layout(g).block, " x ",
              nchwc_layout(g).out_block);
  EMBER_CHECK(!input_planes.blocked() || (input_planes.pad_h >= g.pad_h && input_planes.pad_w >= g.pad_w),
              "[conv2d] internal error: blocked input planes padded by ", input_planes.pad_h, " x ", input_planes.pad_w,
              " for a convolution padded by ", g.pad_h, " x ", g.pad_w);
  HWY_DYNAMIC_DISPATCH(Forward)(g, input, packed, epilogue, out, input_planes, out_planes);
}

void nchwc_weight_grad(const Conv2dGeometry& g, const float* grad_out, const float* input, float* grad_weight) {
  EMBER_CHECK(nchwc_layout(g).block > 0, "[conv2d] internal error: no blocked kernel on this CPU");
  HWY_DYNAMIC_DISPATCH(WeightGrad)(g, grad_out, input, grad_weight);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

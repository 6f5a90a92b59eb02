// Note [bfloat16 blocked convolution]
// The bfloat16 forward on maps too narrow for the bfloat16 im2col path (conv.cpp, Note [bfloat16
// convolution]: its column copies cost more than its products save below 28 columns). It is the
// float32 blocked forward (Note [blocked convolution] in conv_nchwc.cpp) with input channels taken
// in pairs: vdpbf16ps multiplies a 32-bit word holding two bfloat16 values by another and adds
// both products to a float32 lane, 32 multiply-adds an instruction where a float32 FMA does 16.
// - The image is blocked into planes of 16 channels, each pixel 8 words: the pairs (c, c + 1) of
//   its channels, zeros in the padding and past C_in. Eight channel rows are widened to pairs and
//   turned into pixels eight at a time through an 8 x 8 transpose of 32-bit words.
// - The weight is packed for each group of 16 or 32 output channels (32 unless that rounds C_out
//   up by more than a quarter), input block, tap and pair of the block: the group's words (w[o][c],
//   w[o][c + 1]) side by side, one vector per 16 channels.
// - The tile holds P <= 14 positions (two rows of a map at most 7 wide) times one or two vectors
//   of output channels, 28 accumulators at most: per pair and tap, one or two weight loads, P
//   broadcasts of the position's pair and P or 2P vdpbf16ps.
// - The finished sums go to the NCHW output a channel at a time: the tile's positions gathered
//   into one vector, the bias added, rounded by vcvtneps2bf16 (as round_to_bf16) and stored under
//   a mask.
// Each output element is one tile's sum in a fixed order, so the result does not depend on the
// threads. The tasks are the float32 forward's: whole images when the batch splits evenly, or bands
// of output rows of one output group.
// Measured in `ember bench` on 2 threads of a Zen 4: train_step_cnn_amp, whose second layer (16 ->
// 32 channels, 5 x 5, 12 x 12 -> 8 x 8) and its input gradient had been widened to float32 around
// the float32 blocked kernel, 3.63-3.66 -> 2.93-3.02 ms; the float32 step (train_step_cnn) took
// 3.16-3.26 ms in the same runs. `perf`: the two tiles now take 23% of the amp step, against 37%
// for the float32 tiles before.
#include "kernels/cpu/conv_nchwc_bf16.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_weight_tiles.h"
#include "kernels/cpu/parallel.h"

// GCC 12's AVX-512 casts start from undefined vectors, which its own -Wuninitialized then reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define EMBER_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

#ifndef EMBER_UNROLL
#define EMBER_UNROLL _Pragma("GCC unroll 16")
#endif

namespace ember::cpu {
namespace {

constexpr int64_t kC = 16;          // channels per input block
constexpr int64_t kPairs = kC / 2;  // words per pixel of a block
constexpr int kPositions = 14;      // positions per tile (28 accumulators of 32 registers)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t out_block(const Conv2dGeometry& g) {
  return ceil_div(g.out_channels, 2 * kC) * 2 * kC * 4 <= g.out_channels * 5 ? 2 * kC : kC;
}

// The sizes of one blocked convolution, in 32-bit words (pairs of bfloat16 values).
struct Blocked {
  int64_t nbc = 0;         // output channels per group
  int64_t in_blocks = 0;   // ceil(C_in / kC)
  int64_t out_groups = 0;  // ceil(C_out / nbc)
  int64_t hp = 0, wp = 0;  // the padded plane
  int64_t plane = 0;       // words of one block's plane: hp * wp * kPairs
  int64_t image = 0;       // words of one blocked image
  int64_t group = 0;       // words of one output group's packed weight
};

Blocked blocked(const Conv2dGeometry& g) {
  Blocked k;
  k.nbc = out_block(g);
  k.in_blocks = ceil_div(g.in_channels, kC);
  k.out_groups = ceil_div(g.out_channels, k.nbc);
  k.hp = g.in_height + 2 * g.pad_h;
  k.wp = g.in_width + 2 * g.pad_w;
  k.plane = k.hp * k.wp * kPairs;
  k.image = k.in_blocks * k.plane;
  k.group = k.in_blocks * g.kernel_h * g.kernel_w * kPairs * k.nbc;
  return k;
}

// Grow-only words owned by the calling thread, one buffer per use.
enum class Buffer : int { kImage, kBatch, kCount };
uint32_t* thread_words(Buffer slot, int64_t count) {
  thread_local std::vector<uint32_t> buffers[static_cast<int>(Buffer::kCount)];
  std::vector<uint32_t>& b = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  return b.data();
}

// Below this many multiply-adds a convolution runs on the calling thread.
constexpr double kSerialFlops = 2e6;

// Eight rows of eight 32-bit words, transposed in place.
EMBER_BF16 inline void transpose_8x8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// Input blocks [b0, b1) of one image (C_in, H, W) into its blocked, padded planes at dst.
EMBER_BF16 void block_image(const Conv2dGeometry& g, const Blocked& k, const uint16_t* image, uint32_t* dst, int64_t b0,
                            int64_t b1) {
  const int64_t h_in = g.in_height, w_in = g.in_width, plane_in = h_in * w_in, row = k.wp * kPairs;
  for (int64_t b = b0; b < b1; ++b) {
    uint32_t* plane = dst + b * k.plane;
    std::fill(plane, plane + g.pad_h * row, 0u);
    std::fill(plane + (g.pad_h + h_in) * row, plane + k.hp * row, 0u);
    const int64_t channels = std::min(kC, g.in_channels - b * kC);
    const uint16_t* src = image + b * kC * plane_in;
    for (int64_t y = 0; y < h_in; ++y) {
      uint32_t* out = plane + (g.pad_h + y) * row;
      std::fill(out, out + g.pad_w * kPairs, 0u);
      std::fill(out + (g.pad_w + w_in) * kPairs, out + row, 0u);
      out += g.pad_w * kPairs;
      const uint16_t* in = src + y * w_in;
      int64_t x = 0;
      if (channels == kC) {
        for (; x + 8 <= w_in; x += 8) {
          __m256i r[8];
          for (int q = 0; q < 8; ++q) {
            const __m128i even = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * q * plane_in + x));
            const __m128i odd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + (2 * q + 1) * plane_in + x));
            r[q] = _mm256_set_m128i(_mm_unpackhi_epi16(even, odd), _mm_unpacklo_epi16(even, odd));
          }
          transpose_8x8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (x + i) * kPairs), r[i]);
        }
      }
      auto* halves = reinterpret_cast<uint16_t*>(out);
      for (; x < w_in; ++x) {
        for (int64_t c = 0; c < kC; ++c) halves[x * kC + c] = c < channels ? in[c * plane_in + x] : uint16_t{0};
      }
    }
  }
}

// What a tile needs besides its pointers (words).
struct TileArgs {
  int64_t in_blocks;
  int64_t plane;  // between input blocks
  int64_t kernel_h, kernel_w;
  int64_t row_step;  // between kernel rows: dilation_h * wp * kPairs
  int64_t col_step;  // between kernel columns: dilation_w * kPairs
  int64_t next_row;  // between the first positions of two output rows: stride * wp * kPairs
};

// R output rows of P positions each (S * kPairs words apart within a row, a.next_row between
// rows, from `in`, the first position's first tap) x NB vectors of output channels, summed over the
// whole patch, stored to `sums` ((R * P) x NB * 16 floats, row by row).
template <int R, int P, int S, int NB>
EMBER_BF16 void tile(const uint32_t* in, const uint32_t* w, const TileArgs& a, float* sums) {
  __m512 acc[R * P][NB];
  EMBER_UNROLL
  for (int p = 0; p < R * P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) acc[p][j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < a.in_blocks; ++b) {
    const uint32_t* block = in + b * a.plane;
    for (int64_t y = 0; y < a.kernel_h; ++y) {
      const uint32_t* row = block + y * a.row_step;
      for (int64_t x = 0; x < a.kernel_w; ++x) {
        const uint32_t* px = row + x * a.col_step;
        for (int64_t i = 0; i < kPairs; ++i) {
          __m512bh wv[NB];
          EMBER_UNROLL
          for (int j = 0; j < NB; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(w + j * kC);
          w += NB * kC;
          EMBER_UNROLL
          for (int r = 0; r < R; ++r) {
            EMBER_UNROLL
            for (int p = 0; p < P; ++p) {
              const auto v = (__m512bh)_mm512_set1_epi32(static_cast<int>(px[r * a.next_row + p * S * kPairs + i]));
              EMBER_UNROLL
              for (int j = 0; j < NB; ++j) acc[r * P + p][j] = _mm512_dpbf16_ps(acc[r * P + p][j], v, wv[j]);
            }
          }
        }
      }
    }
  }
  EMBER_UNROLL
  for (int p = 0; p < R * P; ++p) {
    EMBER_UNROLL
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(sums + (p * NB + j) * kC, acc[p][j]);
  }
}

using TileFn = void (*)(const uint32_t*, const uint32_t*, const TileArgs&, float*);

template <int R, int S, int NB, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> tile_table(std::index_sequence<I...> /*widths*/) {
  return {&tile<R, static_cast<int>(I) + 1, S, NB>...};
}
template <int R, int NB>
constexpr std::array<std::array<TileFn, kPositions / R>, 2> stride_tables() {
  return {tile_table<R, 1, NB>(std::make_index_sequence<kPositions / R>()),
          tile_table<R, 2, NB>(std::make_index_sequence<kPositions / R>())};
}
// One row: [vectors - 1][stride - 1][width - 1]; two rows (maps at most half a tile wide): the
// same for widths up to kPositions / 2.
constexpr std::array<std::array<std::array<TileFn, kPositions>, 2>, 2> kTiles = {stride_tables<1, 1>(),
                                                                                 stride_tables<1, 2>()};
constexpr std::array<std::array<std::array<TileFn, kPositions / 2>, 2>, 2> kPairTiles = {stride_tables<2, 1>(),
                                                                                         stride_tables<2, 2>()};

// The finished tile's `count` positions (each `row` sums apart) of `channels` channels into their
// NCHW planes at dst: per channel, the positions gathered into one vector, plus the bias, rounded.
EMBER_BF16 void write_tile(const float* sums, int64_t row, int64_t count, int64_t channels, const float* bias,
                           int64_t out_plane, uint16_t* dst) {
  const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32(static_cast<int>(row)));
  const auto valid = static_cast<__mmask16>((1u << count) - 1);
  for (int64_t j = 0; j < channels; ++j) {
    __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, at, sums + j, 4);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_set1_ps(bias[j]));
    _mm256_mask_storeu_epi16(dst + j * out_plane, valid, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

// Output rows [oh0, oh1) of output group og of one image, from its blocked planes.
EMBER_BF16 void rows(const Conv2dGeometry& g, const Blocked& k, const uint32_t* blocked_image, const uint32_t* packed,
                     const float* bias, uint16_t* out_image, int64_t og, int64_t oh0, int64_t oh1) {
  const int64_t s = g.stride_h, ow_size = g.out_width;
  const TileArgs a{k.in_blocks,           k.plane,          g.kernel_h, g.kernel_w, g.dilation_h * k.wp * kPairs,
                   g.dilation_w * kPairs, s * k.wp * kPairs};
  const uint32_t* w = packed + og * k.group;
  const int64_t out_plane = g.out_height * ow_size, o0 = og * k.nbc;
  const int64_t channels = std::min(k.nbc, g.out_channels - o0);
  const float* group_bias = bias != nullptr ? bias + o0 : nullptr;
  uint16_t* out = out_image + o0 * out_plane;
  alignas(64) float sums[kPositions * 2 * kC];
  const auto nb = static_cast<size_t>(k.nbc / kC) - 1, stride = static_cast<size_t>(s - 1);
  if (2 * ow_size <= kPositions) {
    for (int64_t oh = oh0; oh < oh1; oh += 2) {
      const uint32_t* in = blocked_image + oh * s * k.wp * kPairs;
      if (oh + 1 < oh1) {
        kPairTiles[nb][stride][static_cast<size_t>(ow_size - 1)](in, w, a, sums);
        write_tile(sums, k.nbc, ow_size, channels, group_bias, out_plane, out + oh * ow_size);
        write_tile(sums + ow_size * k.nbc, k.nbc, ow_size, channels, group_bias, out_plane, out + (oh + 1) * ow_size);
      } else {
        kTiles[nb][stride][static_cast<size_t>(ow_size - 1)](in, w, a, sums);
        write_tile(sums, k.nbc, ow_size, channels, group_bias, out_plane, out + oh * ow_size);
      }
    }
    return;
  }
  const int64_t n_tiles = ceil_div(ow_size, kPositions);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t ow0 = t * ow_size / n_tiles, count = (t + 1) * ow_size / n_tiles - ow0;
      kTiles[nb][stride][static_cast<size_t>(count - 1)](blocked_image + (oh * s * k.wp + ow0 * s) * kPairs, w, a,
                                                         sums);
      write_tile(sums, k.nbc, count, channels, group_bias, out_plane, out + oh * ow_size + ow0);
    }
  }
}

// --- weight gradient -------------------------------------------------------------------------
//
// Note [bfloat16 blocked weight gradient]
// grad_weight[o, i, ky, kx] sums grad_out[n, o, p] * the input at p's tap over images and output
// positions p: vdpbf16ps pairs must run along that sum, so they are pairs of positions (ow, ow + 1)
// of one output row. Both operands are laid out in such pairs:
// - the output gradient, per block of 16 output channels, row and pair q of the row: the 16
//   channels' words (grad[o][oh][2q], grad[o][oh][2q + 1]), one vector (a row of odd width ends
//   with a zero);
// - the input, per block of 16 input channels of the padded plane: for each pixel (y, c), its 16
//   channels' words (x[y][c], x[y][c + stride]), the values of the two positions of a pair at any
//   tap.
// The tiles are the float32 ones (Note [blocked weight gradient] in conv_nchwc.cpp): one tap, 8
// input channels and two vectors of output channels, 16 accumulators; per pair of positions two
// loads of gradient words, 8 broadcasts of input words and 16 vdpbf16ps (32 multiply-adds each).
// An odd row's last position is multiplied alone (the input word's upper half cleared, so that a
// value past the row never meets the padding's zero gradient: 0 x inf would be NaN). The tasks,
// chunks and bands are the float32 kernel's, so the sums run in an order the threads do not change;
// the float32 result is rounded once.
// The input words are broadcast from memory (a load); the odd position's form clears the upper
// halves after. One form for both, masking each word in a general register before broadcasting
// it, ran 16-26% slower than the GEMM path this replaced (8 x 64 x 56 x 56, 3 x 3: 22.5 against
// 18.8 ms, forward + weight gradient); as it is, 1.01-1.36x faster than it or the float32 kernels
// across ResNet's and MNIST's shapes (the numbers are in conv.cpp's Note [bfloat16 convolution]).

constexpr int64_t kI = 8;  // input channels per weight tile
// Positions per band: twice the float32 kernel's, as a pair step covers two. The backward of
// sum(conv(x, w) * c) into w alone, 3 alternating rounds: 8 x 64 x 56 x 56 5.92-6.41 ms against
// 6.60-6.94 with 64, 256 channels at 14 x 14 5.55-5.63 against 6.06-6.40, MNIST's second layer
// equal.
constexpr int64_t kBandPositions = 128;
constexpr int64_t kChunkBytes = int64_t{1} << 20;

enum class GradBuffer : int { kInputPairs, kGradPairs, kBlocked, kCount };
uint32_t* grad_words(GradBuffer slot, int64_t count) {
  thread_local std::vector<uint32_t> buffers[static_cast<int>(GradBuffer::kCount)];
  std::vector<uint32_t>& b = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(b.size()) < count) b.resize(static_cast<size_t>(count));
  return b.data();
}

// The pair layouts' sizes (words).
struct PairSizes {
  int64_t in_blocks = 0, o_blocks = 0;  // o_blocks even: pairs of output vectors
  int64_t hp = 0, wp = 0, x_plane = 0, x_image = 0;
  int64_t pairs = 0, g_plane = 0, g_image = 0;  // pairs per output row
};

PairSizes pair_sizes(const Conv2dGeometry& g) {
  PairSizes z;
  z.in_blocks = ceil_div(g.in_channels, kC);
  z.o_blocks = ceil_div(g.out_channels, 2 * kC) * 2;
  z.hp = g.in_height + 2 * g.pad_h;
  z.wp = g.in_width + 2 * g.pad_w;
  z.x_plane = z.hp * z.wp * kC;
  z.x_image = z.in_blocks * z.x_plane;
  z.pairs = ceil_div(g.out_width, 2);
  z.g_plane = g.out_height * z.pairs * kC;
  z.g_image = z.o_blocks * z.g_plane;
  return z;
}

// Input block b of one image into its pair plane at dst: the block's blocked plane (block_image's
// 16 channels a pixel) first, into `scratch`, then each pixel's channels interleaved with those
// `stride` pixels to its right (zeros past the plane).
EMBER_BF16 void pair_image(const Conv2dGeometry& g, const Blocked& k, const PairSizes& z, const uint16_t* image,
                           int64_t b, uint32_t* scratch, uint32_t* dst) {
  Conv2dGeometry rest = g;  // the channels from block b on, as an image of its own
  rest.in_channels = g.in_channels - b * kC;
  block_image(rest, k, image + b * kC * g.in_height * g.in_width, scratch, 0, 1);
  const auto* px = reinterpret_cast<const uint16_t*>(scratch);  // 16 values a pixel
  const int64_t s = g.stride_w;
  for (int64_t y = 0; y < z.hp; ++y) {
    const uint16_t* row = px + y * z.wp * kC;
    uint32_t* out = dst + y * z.wp * kC;
    for (int64_t c = 0; c < z.wp; ++c) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * kC));
      const __m256i next = c + s < z.wp ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (c + s) * kC))
                                        : _mm256_setzero_si256();
      const __m256i lo = _mm256_unpacklo_epi16(a, next), hi = _mm256_unpackhi_epi16(a, next);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c * kC), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c * kC + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

// Output-gradient block ob of one image (C_out, OH, OW) into its pair plane at dst (zeros past
// C_out and past an odd row's end): eight pairs of sixteen channels at a time through two 8 x 8
// transposes of words.
EMBER_BF16 void pair_grads(const Conv2dGeometry& g, const PairSizes& z, const uint16_t* grads, int64_t ob,
                           uint32_t* dst) {
  const int64_t plane = g.out_height * g.out_width, channels = std::clamp<int64_t>(g.out_channels - ob * kC, 0, kC);
  const int64_t whole = g.out_width / 2;  // pairs with both positions in the row
  const uint16_t* src = grads + ob * kC * plane;
  for (int64_t oh = 0; oh < g.out_height; ++oh) {
    uint32_t* out = dst + oh * z.pairs * kC;
    const uint16_t* row = src + oh * g.out_width;
    int64_t q = 0;
    if (channels == kC) {
      for (; q + 8 <= whole; q += 8) {
        __m256i lo[8], hi[8];
        for (int c = 0; c < 8; ++c) {
          lo[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * plane + 2 * q));
          hi[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (c + 8) * plane + 2 * q));
        }
        transpose_8x8(lo);
        transpose_8x8(hi);
        for (int i = 0; i < 8; ++i) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (q + i) * kC), lo[i]);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (q + i) * kC + 8), hi[i]);
        }
      }
    }
    for (; q < z.pairs; ++q) {
      for (int64_t c = 0; c < kC; ++c) {
        const bool in = c < channels;
        const uint32_t first = in ? row[c * plane + 2 * q] : 0u;
        const uint32_t second = in && 2 * q + 1 < g.out_width ? row[c * plane + 2 * q + 1] : 0u;
        out[q * kC + c] = first | (second << 16);
      }
    }
  }
}

// One pair of positions into a weight tile's accumulators: the gradient words at ga and gb (two
// vectors of output channels) times each of the tile's input words at px, broadcast (Whole) or
// with their upper halves, the second position's, cleared.
template <bool Whole>
EMBER_BF16 __attribute__((always_inline)) inline void pair_step(__m512 (&acc)[kI][2], const uint32_t* px,
                                                                const uint32_t* ga, const uint32_t* gb) {
  const auto a = (__m512bh)_mm512_loadu_si512(ga), b = (__m512bh)_mm512_loadu_si512(gb);
  EMBER_UNROLL
  for (int64_t i = 0; i < kI; ++i) {
    __m512i word = _mm512_set1_epi32(static_cast<int>(px[i]));
    if constexpr (!Whole) word = _mm512_maskz_mov_epi16(0x55555555u, word);
    const auto v = (__m512bh)word;
    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], v, a);
    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], v, b);
  }
}

// Adds output rows [oh0, oh1) of one image to one tile's sums (tap, input half-block it, the
// output-vector pair whose gradient words are g0 and g1).
EMBER_BF16 void weight_tile(const Conv2dGeometry& g, const PairSizes& z, const uint32_t* x_image, const uint32_t* g0,
                            const uint32_t* g1, int64_t oh0, int64_t oh1, int64_t tap, int64_t it, bool first,
                            float* sums) {
  __m512 acc[kI][2];
  EMBER_UNROLL
  for (int64_t i = 0; i < kI; ++i) {
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(sums + 2 * i * kC);
    acc[i][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(sums + (2 * i + 1) * kC);
  }
  const int64_t ky = tap / g.kernel_w, kx = tap % g.kernel_w, s = g.stride_h;
  const uint32_t* x =
      x_image + (it / 2) * z.x_plane + (it % 2) * kI + (ky * g.dilation_h * z.wp + kx * g.dilation_w) * kC;
  const int64_t whole = g.out_width / 2, other = g1 - g0;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const uint32_t* px = x + oh * s * z.wp * kC;
    const uint32_t* gp = g0 + oh * z.pairs * kC;
    for (int64_t q = 0; q < whole; ++q, px += 2 * s * kC, gp += kC) pair_step<true>(acc, px, gp, gp + other);
    if (whole < z.pairs) pair_step<false>(acc, px, gp, gp + other);
  }
  EMBER_UNROLL
  for (int64_t i = 0; i < kI; ++i) {
    _mm512_storeu_ps(sums + 2 * i * kC, acc[i][0]);
    _mm512_storeu_ps(sums + (2 * i + 1) * kC, acc[i][1]);
  }
}

}  // namespace

bool nchwc_bf16_weight_grad_takes(const Conv2dGeometry& g) {
  return nchwc_bf16_takes(g) && ceil_div(g.out_channels, 2 * kC) * 2 * kC * 4 <= g.out_channels * 5;
}

void nchwc_bf16_weight_grad(const Conv2dGeometry& g, const uint16_t* grad_out, const uint16_t* input,
                            float* grad_weight) {
  const Blocked k = blocked(g);
  const PairSizes z = pair_sizes(g);
  const int64_t in_image = g.in_channels * g.in_height * g.in_width;
  const int64_t out_image = g.out_channels * g.out_height * g.out_width;
  const double flops =
      2.0 * static_cast<double>(g.batch * out_image) * static_cast<double>(g.in_channels * g.kernel_h * g.kernel_w);
  const int threads = flops < kSerialFlops ? 1 : num_threads();
  const WeightTiles w = weight_tiles(g, kC, threads, kBandPositions);
  const int64_t per_chunk = std::clamp<int64_t>(kChunkBytes / ((z.x_image + z.g_image) * 4), 1, g.batch);
  uint32_t* xs = grad_words(GradBuffer::kInputPairs, per_chunk * z.x_image);
  uint32_t* gs = grad_words(GradBuffer::kGradPairs, per_chunk * z.g_image);
  thread_local std::vector<float> sum_buffer;
  if (static_cast<int64_t>(sum_buffer.size()) < w.count() * w.tile_floats()) {
    sum_buffer.resize(static_cast<size_t>(w.count() * w.tile_floats()));
  }
  float* sums = sum_buffer.data();
  for (int64_t n0 = 0; n0 < g.batch; n0 += per_chunk) {
    const int64_t images = std::min(per_chunk, g.batch - n0), blocks = z.in_blocks + z.o_blocks;
    parallel_tasks(images * blocks, threads, [&](int64_t t) {
      const int64_t n = t / blocks, b = t % blocks;
      if (b < z.in_blocks) {
        uint32_t* scratch = grad_words(GradBuffer::kBlocked, k.plane);
        pair_image(g, k, z, input + (n0 + n) * in_image, b, scratch, xs + n * z.x_image + b * z.x_plane);
      } else {
        pair_grads(g, z, grad_out + (n0 + n) * out_image, b - z.in_blocks,
                   gs + n * z.g_image + (b - z.in_blocks) * z.g_plane);
      }
    });
    run_weight_tiles(
        w, g, images, n0 == 0, threads, sums,
        [&](int64_t n, int64_t og, int64_t oh0, int64_t oh1, int64_t tap, int64_t it, bool first, float* tile_sums) {
          const uint32_t* g0 = gs + n * z.g_image + 2 * og * z.g_plane;
          weight_tile(g, z, xs + n * z.x_image, g0, g0 + z.g_plane, oh0, oh1, tap, it, first, tile_sums);
        });
  }
  scatter_weight_tiles(g, w, sums, grad_weight);
}

bool nchwc_bf16_takes(const Conv2dGeometry& g) {
  if (g.groups != 1 || g.stride_h != g.stride_w || g.stride_h > 2) return false;
  const int64_t in_padded = ceil_div(g.in_channels, kC) * kC;
  const int64_t nbc = out_block(g), out_padded = ceil_div(g.out_channels, nbc) * nbc;
  return in_padded * 8 <= g.in_channels * 9 && out_padded * 4 <= g.out_channels * 5;
}

int64_t nchwc_bf16_packed_size(const Conv2dGeometry& g) {
  const Blocked k = blocked(g);
  return 2 * k.out_groups * k.group;
}

void nchwc_bf16_pack_weight(const Conv2dGeometry& g, const uint16_t* weight, bool transposed, uint16_t* packed) {
  const Blocked k = blocked(g);
  const int64_t taps = g.kernel_h * g.kernel_w;
  const auto value = [&](int64_t o, int64_t ci, int64_t t) -> uint16_t {
    if (o >= g.out_channels || ci >= g.in_channels) return 0;
    return transposed ? weight[(ci * g.out_channels + o) * taps + (taps - 1 - t)]
                      : weight[(o * g.in_channels + ci) * taps + t];
  };
  parallel_for(0, k.out_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t og = begin; og < end; ++og) {
      uint16_t* dst = packed + 2 * og * k.group;
      for (int64_t b = 0; b < k.in_blocks; ++b) {
        for (int64_t t = 0; t < taps; ++t) {
          for (int64_t q = 0; q < kPairs; ++q) {
            const int64_t ci = b * kC + 2 * q;
            for (int64_t j = 0; j < k.nbc; ++j) {
              const int64_t o = og * k.nbc + j;
              *dst++ = value(o, ci, t);
              *dst++ = value(o, ci + 1, t);
            }
          }
        }
      }
    }
  });
}

void nchwc_bf16_forward(const Conv2dGeometry& g, const uint16_t* input, const uint16_t* packed_weight,
                        const float* bias, uint16_t* out) {
  const Blocked k = blocked(g);
  const auto* packed = reinterpret_cast<const uint32_t*>(packed_weight);
  const int64_t in_image = g.in_channels * g.in_height * g.in_width;
  const int64_t out_image = g.out_channels * g.out_height * g.out_width;
  const double flops =
      2.0 * static_cast<double>(g.batch * out_image) * static_cast<double>(g.in_channels * g.kernel_h * g.kernel_w);
  const int threads = flops < kSerialFlops ? 1 : num_threads();
  if (g.batch % threads == 0 || g.batch >= 4 * threads) {
    parallel_tasks(g.batch, threads, [&](int64_t n) {
      uint32_t* image = thread_words(Buffer::kImage, k.image);
      block_image(g, k, input + n * in_image, image, 0, k.in_blocks);
      for (int64_t og = 0; og < k.out_groups; ++og)
        rows(g, k, image, packed, bias, out + n * out_image, og, 0, g.out_height);
    });
    return;
  }
  uint32_t* images = thread_words(Buffer::kBatch, g.batch * k.image);
  parallel_tasks(g.batch * k.in_blocks, threads, [&](int64_t t) {
    const int64_t n = t / k.in_blocks, b = t % k.in_blocks;
    block_image(g, k, input + n * in_image, images + n * k.image, b, b + 1);
  });
  const int64_t per_image = g.batch * k.out_groups;
  const int64_t bands = std::clamp<int64_t>(ceil_div(threads * kTasksPerThread, per_image), 1, g.out_height);
  parallel_tasks(per_image * bands, threads, [&](int64_t t) {
    const int64_t band = t % bands, og = (t / bands) % k.out_groups, n = t / (bands * k.out_groups);
    rows(g, k, images + n * k.image, packed, bias, out + n * out_image, og, band * g.out_height / bands,
         (band + 1) * g.out_height / bands);
  });
}

}  // namespace ember::cpu

#else  // !__x86_64__: conv.cpp registers no bfloat16 convolution there.

namespace ember::cpu {

bool nchwc_bf16_takes(const Conv2dGeometry&) { return false; }
int64_t nchwc_bf16_packed_size(const Conv2dGeometry&) { return 0; }
void nchwc_bf16_pack_weight(const Conv2dGeometry&, const uint16_t*, bool, uint16_t*) {}
void nchwc_bf16_forward(const Conv2dGeometry&, const uint16_t*, const uint16_t*, const float*, uint16_t*) {}
bool nchwc_bf16_weight_grad_takes(const Conv2dGeometry&) { return false; }
void nchwc_bf16_weight_grad(const Conv2dGeometry&, const uint16_t*, const uint16_t*, float*) {}

}  // namespace ember::cpu

#endif

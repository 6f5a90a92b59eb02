// bfloat16 GEMM on AVX-512 BF16 (gemm_bf16.h): vdpbf16ps multiplies pairs of bfloat16 values and
// adds both products to a float32 lane, so each instruction does 32 multiply-adds where a float32
// FMA does 16.
//
// Note [bf16 GEMM]: the loops are the float32 GEMM's (gemm.cpp: B panels of KC x NC, A blocks of
// MC x KC, an MR x NR register tile), with k taken in pairs:
// - B micro-panel (KC x 32 columns): for each pair of k, the 32 columns' (B[2q][j], B[2q+1][j])
//   as 32-bit words: two 512-bit vectors per pair.
// - A micro-panel (14 rows x KC): for each pair of k, each row's (A[i][2q], A[i][2q+1]) as a
//   32-bit word, broadcast to the 16 lanes by the micro-kernel.
// - The tile: 14 x 32 float32 accumulators (28 of the 32 vector registers), 28 vdpbf16ps per pair
//   from 2 loads of B and 14 broadcasts of A. An odd k is padded with a zero pair; partial tiles
//   are padded with zero rows and columns in the packing and written back under a mask.
// C is accumulated in a float32 buffer (the first KC block stores, the others add) and rounded to
// bfloat16 once: tile by tile as the last KC block finishes each tile (gemm_bf16's `rounded`, the
// matmul's usual epilogue of a bias at most: 1024^3 on AMX 1.86 -> 1.65 ms), or by the caller's
// epilogue afterwards. On the AVX-512 path the last block rounds its sums straight from the
// registers, never storing them as float32, and every tile prefetches the C rows it will touch
// (1024^3 on Zen 4, 2 threads: 5.8 -> 5.46 ms, level with PyTorch's oneDNN at 5.41). The k blocks
// depend on k alone, so the result does not depend on the thread count.
//
// Products with few rows (m <= 4; a mat-vec product for one token) whose B is a weight stored row
// by row (B = W^T, pairs of k adjacent in memory) skip the packing: each output is a dot product
// of a row of A with a row of W, reading W once. They are memory-bound.
//
// Note [AMX bf16 tiles]: on CPUs with AMX (cpu_isa() kAmx) the same loops feed tile registers
// instead: tdpbf16ps multiplies a 16 x 32 tile of A by a 32 x 16 tile of B (16 pairs of k by 16
// columns, each row of the tile a pair's 16 words) into a 16 x 16 float32 tile: 8,192 multiply-adds
// an instruction, 16 times a vdpbf16ps's 512 every 16 cycles. The register tile is 32 x 32: four C
// tiles, two tiles of A and two of B (8 of the 8 tile registers), four tdpbf16ps per 16 pairs.
// - The B micro-panel is the one above (pair q's 32 words at q * 32): its two 16-column halves
//   are tiles with a row stride of 128 bytes. The pairs are padded with zeros to a multiple of 16.
// - A is packed row by row instead ([row][pair], rows `stride` words apart), so that a tile's row
//   is a row of A: 16 pairs, 64 bytes; the pairs zero-padded likewise.
// - C tiles load from and store to C itself when the tile is whole, through a 32 x 32 buffer
//   at the edges. Each thread loads the tile configuration before its rows and releases the tiles
//   after them (a thread holding tile data makes every context switch save 8 KiB more).
// The k blocks are the AVX-512 path's, so the result still depends on k alone; the sums round
// differently from vdpbf16ps's (both within float32 accumulation's error of the float64 sums).
#include "kernels/cpu/gemm_bf16.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/parallel.h"

// GCC 12's AVX-512 casts and reductions start from undefined vectors, which its own
// -Wuninitialized then reports at every inlined use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ember::cpu {

namespace {

#define EMBER_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

constexpr int64_t kMr = 14, kNr = 32;
// Note [bf16 blocking]: each k block re-reads and re-writes the float32 C, so k blocks are long: a
// B micro-panel of 1024 values (64 KiB) outgrows L1 but streams from L2 well, and with 256 the
// C traffic cost a fifth of the time (2048^3 on Zen 4, 2 threads: 308 GFLOP/s with 256, 385-394
// with 1024, 397-401 with 2048).
constexpr int64_t kKc = 1024;     // values of k per block
constexpr int64_t kMc = 14 * 12;  // rows of A per block (168 x 1024 x 2 bytes = 336 KiB, in L2)
constexpr int64_t kNc = 4096;     // columns of B per panel (4096 x 1024 x 2 bytes = 8 MiB, in L3)

inline uint32_t pair(const Bf16Matrix& m, int64_t i, int64_t p, int64_t k) {
  const uint16_t lo = m.data[i * m.row_stride + p * m.col_stride];
  const uint16_t hi = p + 1 < k ? m.data[i * m.row_stride + (p + 1) * m.col_stride] : uint16_t{0};
  return lo | (static_cast<uint32_t>(hi) << 16);
}

inline uint32_t load_u32(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Note [bf16 packing]: a micro-panel holds, for pair q and row (or column) i, the word
// (M[i][2q], M[i][2q+1]). Where pairs lie in memory as 32-bit words (the matrix's k runs along
// its rows: A as stored, a weight W), packing copies words; where k runs down the columns (a
// transposed A, a row-major B), it interleaves two rows of storage with one word permute per 16
// pairs. An odd block's last pair, and other strides, take `pair`.
EMBER_BF16 inline void interleave_rows(const uint16_t* r0, const uint16_t* r1, __mmask32 mask, uint32_t* out,
                                       __mmask16 lo_mask, __mmask16 hi_mask) {
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  const __m512i v0 = _mm512_maskz_loadu_epi16(mask, r0);
  const __m512i v1 = r1 != nullptr ? _mm512_maskz_loadu_epi16(mask, r1) : _mm512_setzero_si512();
  _mm512_mask_storeu_epi32(out, lo_mask, _mm512_permutex2var_epi16(v0, idx_lo, v1));
  if (hi_mask != 0) _mm512_mask_storeu_epi32(out + 16, hi_mask, _mm512_permutex2var_epi16(v0, idx_hi, v1));
}

// The micro-panel of `width` (kNr or kMr) lines i0.. of m (rows of m; `lines` of them real, the rest
// zero) over k values pc..pc+kc, pairs of k, as out[q * width + i].
EMBER_BF16 void pack_panel(const Bf16Matrix& m, int64_t k, int64_t pc, int64_t kc, int64_t i0, int64_t lines,
                           int64_t width, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2, end = std::min(k, pc + kc);
  if (m.col_stride == 1) {  // pairs are words
    for (int64_t i = 0; i < width; ++i) {
      if (i >= lines) {
        for (int64_t q = 0; q < pairs; ++q) out[q * width + i] = 0;
        continue;
      }
      const uint16_t* row = m.data + (i0 + i) * m.row_stride + pc;
      for (int64_t q = 0; q < full; ++q) out[q * width + i] = load_u32(row + 2 * q);
      if (full < pairs) out[full * width + i] = pair(m, i0 + i, pc + 2 * full, end);
    }
    return;
  }
  if (m.row_stride == 1 && width <= 32) {  // k runs down the columns: interleave two rows of storage
    const __mmask32 mask = static_cast<__mmask32>(lines >= 32 ? ~0u : (1u << lines) - 1);
    const __mmask16 lo_mask = static_cast<__mmask16>(width >= 16 ? 0xffff : (1u << width) - 1);
    const __mmask16 hi_mask = static_cast<__mmask16>(width <= 16 ? 0 : width >= 32 ? 0xffff : (1u << (width - 16)) - 1);
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* r0 = m.data + i0 + (pc + 2 * q) * m.col_stride;
      interleave_rows(r0, q < full ? r0 + m.col_stride : nullptr, mask, out + q * width, lo_mask, hi_mask);
    }
    return;
  }
  for (int64_t i = 0; i < width; ++i) {
    for (int64_t q = 0; q < pairs; ++q) out[q * width + i] = i < lines ? pair(m, i0 + i, pc + 2 * q, end) : 0u;
  }
}

// B[pc:pc+kc, j0:j0+cols] as a micro-panel of kc/2 pairs (rounded up) x 32 columns. B is read as
// the transpose of a matrix Bt (n x k) so that its rows are B's columns.
EMBER_BF16 void pack_b(const Bf16Matrix& bt, int64_t k, int64_t pc, int64_t kc, int64_t j0, int64_t cols,
                       uint32_t* out) {
  pack_panel(bt, k, pc, kc, j0, cols, kNr, out);
}

// A[i0:i0+rows, pc:pc+kc] as a micro-panel of kc/2 pairs x 14 rows.
EMBER_BF16 void pack_a(const Bf16Matrix& a, int64_t k, int64_t pc, int64_t kc, int64_t i0, int64_t rows,
                       uint32_t* out) {
  pack_panel(a, k, pc, kc, i0, rows, kMr, out);
}

// c (rows x cols of the tile, row stride ldc) = (first ? 0 : c) + A micro-panel x B micro-panel; or,
// with `rounded` (the last block of k), that sum plus the bias rounded to bfloat16 straight from
// the registers into rounded.data, c left as it was (round_rows's arithmetic, in its order).
EMBER_BF16 void micro_kernel(const uint32_t* a, const uint32_t* b, int64_t pairs, float* c, int64_t ldc, int64_t rows,
                             int64_t cols, bool first, const Bf16Output& rounded) {
  // The rows the tile reads or writes after its sums (C, the rounded output): ask for them now, each
  // row's first and last byte (a row of 32 float32 spans at most 3 lines, of bfloat16 2).
  const bool touches_c = !first || rounded.data == nullptr;
  for (int64_t i = 0; i < rows; ++i) {
    if (touches_c) {
      const char* row = reinterpret_cast<const char*>(c + i * ldc);
      _mm_prefetch(row, _MM_HINT_T0);
      _mm_prefetch(row + 64, _MM_HINT_T0);
      _mm_prefetch(row + 4 * kNr - 1, _MM_HINT_T0);
    }
    if (rounded.data != nullptr) {
      const char* row = reinterpret_cast<const char*>(rounded.data + i * rounded.row_stride);
      _mm_prefetch(row, _MM_HINT_T0);
      _mm_prefetch(row + 2 * kNr - 1, _MM_HINT_T0);
    }
  }
  __m512 acc[kMr][2];
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * kNr + 16);
    for (int i = 0; i < kMr; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[q * kMr + i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xffff) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (rounded.bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, rounded.bias);
    bias1 = _mm512_maskz_loadu_ps(m1, rounded.bias + 16);
  }
  for (int i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    if (!first) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, row + 16));
    }
    if (rounded.data == nullptr) {
      _mm512_mask_storeu_ps(row, m0, acc[i][0]);
      _mm512_mask_storeu_ps(row + 16, m1, acc[i][1]);
      continue;
    }
    if (rounded.bias != nullptr) {
      acc[i][0] = _mm512_add_ps(acc[i][0], bias0);
      acc[i][1] = _mm512_add_ps(acc[i][1], bias1);
    }
    uint16_t* out = rounded.data + i * rounded.row_stride;
    _mm256_mask_storeu_epi16(out, m0, (__m256i)_mm512_cvtneps_pbh(acc[i][0]));
    _mm256_mask_storeu_epi16(out + 16, m1, (__m256i)_mm512_cvtneps_pbh(acc[i][1]));
  }
}

// y[i][j] = dot(A row i, W row j) for W stored row by row with pairs adjacent (Bt.col_stride 1).
// Four rows of W at a time, each prefetching the same place of the rows two steps on into L1 and
// eight steps on into L2: four streams keep more loads in flight than one, and prefetching whole
// steps ahead covers the start of the next rows, which prefetching 2 KiB ahead within each row
// missed (gemv_bf16_4096x14336, 2 threads, on the first machine: 4.45 ms with one row and no
// prefetch, 3.2 with four rows, 2.3-2.7 with the prefetch 2 KiB ahead, 2.1-2.3 a step ahead, 2.2-2.4
// with both; 8 rows measured no better). On a Zen 4, where the row read 28 GB/s against PyTorch's
// 32, the L2 prefetch 32 rows (256 KiB) ahead took the median of 12 alternated rounds from 4.38
// to 4.07 ms. With a few rows of A the rows of W are read from L1 for the second and later.
constexpr int kDotL1Steps = 2;  // steps of kRows rows ahead for the L1 prefetch
constexpr int kDotL2Steps = 8;  // and for the L2 prefetch
EMBER_BF16 void dot_rows(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t k, int64_t j_begin,
                         int64_t j_end, float* c, int64_t ldc) {
  constexpr int kRows = 4;
  const int64_t full = k / 32 * 32;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k - full)) - 1);
  for (int64_t j = j_begin; j < j_end; j += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, j_end - j));
    const uint16_t* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = bt.data + (j + std::min(r, rows - 1)) * bt.row_stride;
    for (int64_t i = 0; i < m; ++i) {
      const uint16_t* x = a.data + i * a.row_stride;
      __m512 acc[kRows];
      for (__m512& v : acc) v = _mm512_setzero_ps();
      for (int64_t p = 0; p < full; p += 32) {
        if (i == 0) {
          for (int r = 0; r < kRows; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(w[r] + kDotL1Steps * kRows * bt.row_stride + p), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(w[r] + kDotL2Steps * kRows * bt.row_stride + p), _MM_HINT_T1);
          }
        }
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + p);
        for (int r = 0; r < kRows; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], xv, (__m512bh)_mm512_loadu_si512(w[r] + p));
      }
      if (full < k) {  // the tail, masked: whole 16-bit values, zero past the end
        const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(tail, x + full);
        for (int r = 0; r < kRows; ++r) {
          acc[r] = _mm512_dpbf16_ps(acc[r], xv, (__m512bh)_mm512_maskz_loadu_epi16(tail, w[r] + full));
        }
      }
      for (int r = 0; r < rows; ++r) c[i * ldc + j + r] = _mm512_reduce_add_ps(acc[r]);
    }
  }
}

// out (m x n, rows out_row_stride apart) = c (rows ldc apart) + bias, rounded to bfloat16.
EMBER_BF16 void round_rows(const float* c, int64_t ldc, int64_t m, int64_t n, const float* bias, uint16_t* out,
                           int64_t out_row_stride) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = c + i * ldc;
    uint16_t* dst = out + i * out_row_stride;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      __m512 v = _mm512_loadu_ps(row + j);
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)_mm512_cvtneps_pbh(v));
    }
    if (j < n) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (n - j)) - 1);
      __m512 v = _mm512_maskz_loadu_ps(mask, row + j);
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + j));
      _mm256_mask_storeu_epi16(dst + j, mask, (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

// The rounded output's tile at row i0, column j0 (data null without one).
Bf16Output rounded_tile(const Bf16Output* rounded, int64_t i0, int64_t j0) {
  if (rounded == nullptr) return {};
  return {rounded->data + i0 * rounded->row_stride + j0, rounded->row_stride,
          rounded->bias != nullptr ? rounded->bias + j0 : nullptr};
}

// --- AMX (Note [AMX bf16 tiles]) ---------------------------------------------------------------------

#define EMBER_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile,amx-bf16")))

constexpr int64_t kAmxMr = 32;           // rows of the register tile: two A tiles
constexpr int64_t kTilePairs = 16;       // pairs of k per tile
constexpr int64_t kAmxKc = 4096;         // values of k per block: C stays in the tiles for k <= 4096
constexpr int64_t kAmxABlock = 1 << 20;  // bytes of packed A per block (256 rows of 2048 k, in L2)

// Palette 1: tiles 0-3 are C (16 rows of 16 float32), 4-5 A and 6-7 B (16 rows of 16 words).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

constexpr TileConfig tile_config() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}

// A constant in memory: GCC 12 drops the stores into a local configuration that only ldtilecfg reads.
constexpr TileConfig kTileConfig = tile_config();

EMBER_AMX void configure_tiles() { _tile_loadconfig(&kTileConfig); }

EMBER_AMX void release_tiles() { _tile_release(); }

// Rows i0.. of A (`lines` real, the rest of 16 zero) over k values pc..pc+kc as `blocks` tiles of 16
// rows x 16 pairs, each 1 KiB and contiguous: row i's pair q at out[(q / 16) * 256 + i * 16 + q % 16],
// zero past the block's pairs. (Rows of a tile `stride` pairs apart would map a tile's 16 rows
// to two sets of the L1 cache when the stride is a multiple of 2 KiB.)
EMBER_AMX void pack_a_tiles(const Bf16Matrix& a, int64_t k, int64_t pc, int64_t kc, int64_t i0, int64_t lines,
                            int64_t blocks, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2;
  std::fill(out, out + blocks * 256, 0u);
  if (a.col_stride == 1) {  // a row of A is a row of the tiles: copy 64 bytes at a time
    for (int64_t i = 0; i < lines; ++i) {
      const uint16_t* row = a.data + (i0 + i) * a.row_stride + pc;
      for (int64_t qb = 0; qb < blocks; ++qb) {
        const int64_t values = std::min<int64_t>(32, kc - qb * 32);
        std::memcpy(out + qb * 256 + i * 16, row + qb * 32, static_cast<size_t>(values) * 2);
      }
    }
    return;
  }
  // Other layouts: the AVX-512 packing's [pair][row] panel of 16 rows, then transposed.
  std::vector<uint32_t> panel(static_cast<size_t>(pairs * 16));
  pack_panel(a, k, pc, kc, i0, lines, 16, panel.data());
  for (int64_t q = 0; q < pairs; ++q) {
    for (int64_t i = 0; i < 16; ++i) out[(q / 16) * 256 + i * 16 + q % 16] = panel[static_cast<size_t>(q * 16 + i)];
  }
}

// c (rows x cols of a 32 x 32 tile, row stride ldc) = (first ? 0 : c) + A (`rows` rows: one or two
// groups of 16 packed by pack_a_tiles, `group` words apart) x B micro-panel, over `pairs` pairs of k
// (zero-padded to whole blocks of 16).
EMBER_AMX void amx_micro_kernel(const uint32_t* a, int64_t group, const uint32_t* b, int64_t pairs, float* c,
                                int64_t ldc, int64_t rows, int64_t cols, bool first, const char* ahead,
                                int64_t ahead_lines, const Bf16Output& rounded) {
  const int64_t blocks = (pairs + kTilePairs - 1) / kTilePairs;
  alignas(64) float buffer[kAmxMr * kNr];
  // A rounded tile goes through the buffer (in L1) to its bfloat16 output, never to c.
  const bool whole = rows == kAmxMr && cols == kNr && rounded.data == nullptr;
  float* out = whole ? c : buffer;
  const int64_t out_ld = whole ? ldc : kNr;
  const int64_t out_bytes = out_ld * 4, a_bytes = 64, b_bytes = kNr * 4;
  const uint32_t* a1 = a + group;
  const bool two = rows > 16;
  if (!whole && !first) {
    std::fill(buffer, buffer + kAmxMr * kNr, 0.0f);
    for (int64_t i = 0; i < rows; ++i) std::memcpy(buffer + i * kNr, c + i * ldc, static_cast<size_t>(cols) * 4);
  }
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, out, out_bytes);
    _tile_loadd(1, out + 16, out_bytes);
    _tile_loadd(2, out + 16 * out_ld, out_bytes);
    _tile_loadd(3, out + 16 * out_ld + 16, out_bytes);
  }
  // Note [AMX prefetch]: the tile loads wait on L2 (a 32 x 32 tile over 2048 k streams 256 KiB
  // through 256 products), so each step asks for the next step's A tiles in L1, and for its share
  // of `ahead` (the caller's next B panel) in L2. 2048^3 on 2 threads: 16.3 ms without either,
  // 13.7 with the A prefetch, 12.3-13.4 with both (3 interleaved rounds).
  const int64_t ahead_per_step = blocks > 0 ? (ahead_lines + blocks - 1) / blocks : 0;
  // Each step's tiles are loaded during the step before it, each right after the last product that
  // reads its register (a load into a tile register waits for the products reading it), so that
  // it overlaps the products after that one; placed together before their step's products, the
  // loads overlapped none (`perf annotate` put 38% of the kernel's samples behind B's loads).
  // 2048^3 on 2 threads of an AMX Xeon: 9.68 -> 9.26 ms, 1024^3 1.33 -> 1.31 ms (3 interleaved
  // rounds). Tried against this and not kept: prefetching B into L1 as well, 1 to 4 steps ahead
  // (1-3% slower); B's tiles stored as 1 KiB each like A's instead of 64-byte rows 128 bytes apart
  // (no change); k blocks of 512 or 1024 instead of 4096 (2048^3 13.2 and 11.2 ms: C goes through
  // memory between blocks); within a block, chunks of 64-512 pairs of k over groups of 2-8 row
  // tiles, so that B's chunk stays in L1 and each tile's C waits in an L1 buffer between chunks
  // (2048^3 9.9-11.4 ms, 1024^3 1.27-1.50 ms: the B traffic saved did not pay for C's tile stores
  // and loads).
  if (blocks > 0) {
    _tile_loadd(6, b, b_bytes);
    _tile_loadd(7, b + 16, b_bytes);
    _tile_loadd(4, a, a_bytes);
    if (two) _tile_loadd(5, a1, a_bytes);
  }
  for (int64_t qb = 0; qb < blocks; ++qb) {
    for (int64_t l = qb * ahead_per_step, end = std::min(ahead_lines, l + ahead_per_step); l < end; ++l) {
      _mm_prefetch(ahead + l * 64, _MM_HINT_T1);
    }
    if (qb + 1 < blocks) {
      for (int64_t line = 0; line < 16; ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(a + (qb + 1) * 256 + line * 16), _MM_HINT_T0);
        if (two) _mm_prefetch(reinterpret_cast<const char*>(a1 + (qb + 1) * 256 + line * 16), _MM_HINT_T0);
      }
    }
    const bool more = qb + 1 < blocks;
    const uint32_t* b_next = b + (qb + 1) * kTilePairs * kNr;
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (more) _tile_loadd(4, a + (qb + 1) * 256, a_bytes);
    if (two) _tile_dpbf16ps(2, 5, 6);
    if (more) _tile_loadd(6, b_next, b_bytes);
    if (two) _tile_dpbf16ps(3, 5, 7);
    if (more) {
      if (two) _tile_loadd(5, a1 + (qb + 1) * 256, a_bytes);
      _tile_loadd(7, b_next + 16, b_bytes);
    }
  }
  _tile_stored(0, out, out_bytes);
  _tile_stored(1, out + 16, out_bytes);
  if (two) {
    _tile_stored(2, out + 16 * out_ld, out_bytes);
    _tile_stored(3, out + 16 * out_ld + 16, out_bytes);
  }
  if (rounded.data != nullptr) {
    round_rows(buffer, kNr, rows, cols, rounded.bias, rounded.data, rounded.row_stride);
  } else if (!whole) {
    for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, buffer + i * kNr, static_cast<size_t>(cols) * 4);
  }
}

// --- the driver, for both kernels ---------------------------------------------------------------------

// The AVX-512 path: 14 x 32 tiles, k blocks of 1024 (Note [bf16 blocking]).
struct Avx512Path {
  static constexpr int64_t kRows = kMr, kKcLimit = kKc, kPairMultiple = 1;
  static int64_t row_block(int64_t /*stride*/) { return kMc; }
  static void begin() {}
  static void end() {}
  // Rows i0..i0+rows of A, at most kRows, as one micro-panel.
  static void pack(const Bf16Matrix& a, int64_t k, int64_t pc, int64_t kc, int64_t i0, int64_t rows, int64_t stride,
                   uint32_t* out) {
    (void)stride;
    pack_a(a, k, pc, kc, i0, rows, out);
  }
  static void tile(const uint32_t* a, int64_t /*stride*/, const uint32_t* b, int64_t pairs, float* c, int64_t ldc,
                   int64_t rows, int64_t cols, bool first, const char* /*ahead*/, int64_t /*ahead_lines*/,
                   const Bf16Output& rounded) {
    micro_kernel(a, b, pairs, c, ldc, rows, cols, first, rounded);
  }
};

// The AMX path (Note [AMX bf16 tiles]): 32 x 32 tiles, k blocks of 4096, 1 MiB of packed A per block.
struct AmxPath {
  static constexpr int64_t kRows = kAmxMr, kKcLimit = kAmxKc, kPairMultiple = kTilePairs;
  static int64_t row_block(int64_t stride) {
    return std::clamp<int64_t>(kAmxABlock / (stride * 4) / kAmxMr, 1, 8) * kAmxMr;
  }
  static void begin() { configure_tiles(); }
  static void end() { release_tiles(); }
  // Rows i0..i0+rows of A, at most 32, as two groups of 16 rows' tiles, 16 * stride words apart.
  static void pack(const Bf16Matrix& a, int64_t k, int64_t pc, int64_t kc, int64_t i0, int64_t rows, int64_t stride,
                   uint32_t* out) {
    const int64_t blocks = ((kc + 1) / 2 + kTilePairs - 1) / kTilePairs;
    for (int64_t g = 0; g < rows; g += 16) {
      pack_a_tiles(a, k, pc, kc, i0 + g, std::min<int64_t>(16, rows - g), blocks, out + g * stride);
    }
  }
  static void tile(const uint32_t* a, int64_t stride, const uint32_t* b, int64_t pairs, float* c, int64_t ldc,
                   int64_t rows, int64_t cols, bool first, const char* ahead, int64_t ahead_lines,
                   const Bf16Output& rounded) {
    amx_micro_kernel(a, 16 * stride, b, pairs, c, ldc, rows, cols, first, ahead, ahead_lines, rounded);
  }
};

constexpr int64_t kPackPairs = 64;  // pairs of k packed per panel in one pass over the panels

// Grow-only packing memory owned by the calling thread (the pool's threads live as long as the
// process): a convolution calls a GEMM per few images, and fresh panels of a few hundred KiB each
// time would be mapped and cleared page by page.
enum class PackSlot : int { kA, kB, kCount };

uint32_t* pack_buffer(PackSlot slot, int64_t words) {
  thread_local std::vector<uint32_t> buffers[static_cast<int>(PackSlot::kCount)];
  std::vector<uint32_t>& buffer = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(buffer.size()) < words) buffer.resize(static_cast<size_t>(words));
  return buffer.data();
}

// The packed GEMM's loops for either path: B panels of NC columns x a k block (packed by all the
// threads, pairs zero-padded to the path's multiple), then each thread's row tiles in blocks of A,
// every tile against every B micro-panel. The k blocks are equal and depend on k alone.
template <class Path>
void packed_gemm(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t n, int64_t k, float* c, int threads,
                 const Bf16Output* rounded) {
  const int64_t kc_blocks = (k + Path::kKcLimit - 1) / Path::kKcLimit;
  const int64_t kc_size = (k + kc_blocks - 1) / kc_blocks;
  const int64_t stride = ((kc_size + 1) / 2 + Path::kPairMultiple - 1) / Path::kPairMultiple * Path::kPairMultiple;
  const int64_t row_block = Path::row_block(stride);
  // Every word a tile reads is written by pack_b or the padding's fill: no zeroing first.
  uint32_t* const b_pack = pack_buffer(PackSlot::kB, (std::min(kNc, n) + kNr - 1) / kNr * stride * kNr);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    const int64_t panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < k; pc += kc_size) {
      const int64_t kc = std::min(kc_size, k - pc), pairs = (kc + 1) / 2;
      const int64_t padded = (pairs + Path::kPairMultiple - 1) / Path::kPairMultiple * Path::kPairMultiple;
      const Bf16Output* round_now = pc + kc == k ? rounded : nullptr;  // the last block of k
      parallel_for_threads(threads, 0, panels, 1, [&](int64_t begin, int64_t end) {
        // 64 pairs of every panel at a time: a row-major B is then read along its rows (one panel
        // over all of k walks down 32 columns, a page per pair). With the zeroing gone, 2048^3 on
        // AMX went 11.5 -> 10.6 ms and 1024^3 1.62 -> 1.48 ms.
        for (int64_t q0 = 0; q0 < pairs; q0 += kPackPairs) {
          const int64_t values = std::min(2 * kPackPairs, kc - 2 * q0);
          for (int64_t jp = begin; jp < end; ++jp) {
            pack_b(bt, k, pc + 2 * q0, values, jc + jp * kNr, std::min(kNr, nc - jp * kNr),
                   b_pack + jp * stride * kNr + q0 * kNr);
          }
        }
        for (int64_t jp = begin; jp < end; ++jp) {  // a shorter last block's padding
          std::fill(b_pack + (jp * stride + pairs) * kNr, b_pack + (jp * stride + padded) * kNr, 0u);
        }
      });
      // The row tiles split evenly among the threads (blocks of kMc rows would leave one thread a
      // block more than the other: 7 blocks for 1024 rows), then each thread's rows in blocks.
      const int64_t row_tiles = (m + Path::kRows - 1) / Path::kRows;
      parallel_for_threads(threads, 0, row_tiles, 1, [&](int64_t tile_begin, int64_t tile_end) {
        Path::begin();
        uint32_t* const a_pack = pack_buffer(PackSlot::kA, row_block * stride);
        const int64_t row_end = std::min(m, tile_end * Path::kRows);
        for (int64_t ic = tile_begin * Path::kRows; ic < row_end; ic += row_block) {
          const int64_t mc = std::min(row_block, row_end - ic), tiles = (mc + Path::kRows - 1) / Path::kRows;
          for (int64_t ir = 0; ir < mc; ir += Path::kRows) {
            Path::pack(a, k, pc, kc, ic + ir, std::min(Path::kRows, mc - ir), stride, a_pack + ir * stride);
          }
          for (int64_t jp = 0; jp < panels; ++jp) {
            const uint32_t* b_panel = b_pack + jp * stride * kNr;
            // The next panel is asked for while this one is used, a slice per row tile (Note [AMX prefetch]).
            const int64_t panel_lines = padded * kNr * 4 / 64;
            const char* next = jp + 1 < panels ? reinterpret_cast<const char*>(b_panel + stride * kNr) : nullptr;
            const int64_t slice = next != nullptr ? (panel_lines + tiles - 1) / tiles : 0;
            for (int64_t ir = 0; ir < mc; ir += Path::kRows) {
              const int64_t t = ir / Path::kRows;
              Path::tile(a_pack + ir * stride, stride, b_panel, pairs, c + (ic + ir) * n + jc + jp * kNr, n,
                         std::min(Path::kRows, mc - ir), std::min(kNr, nc - jp * kNr), pc == 0, next + t * slice * 64,
                         std::max<int64_t>(0, std::min(slice, panel_lines - t * slice)),
                         rounded_tile(round_now, ic + ir, jc + jp * kNr));
            }
          }
        }
        Path::end();
      });
    }
  }
}

}  // namespace

EMBER_BF16 void round_to_bf16(const float* c, int64_t m, int64_t n, const float* bias, uint16_t* out,
                              int64_t out_row_stride) {
  round_rows(c, n, m, n, bias, out, out_row_stride);
}

void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t n, int64_t k, float* c, int threads,
               const Bf16Output* rounded, Isa isa) {
  if (m == 0 || n == 0) return;
  const auto round_all = [&] {
    if (rounded != nullptr) round_rows(c, n, m, n, rounded->bias, rounded->data, rounded->row_stride);
  };
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * n, c + (i + 1) * n, 0.0f);
    round_all();
    return;
  }
  if (m <= 4 && bt.col_stride == 1 && a.col_stride == 1) {
    const int64_t grain = std::max<int64_t>(16, 65536 / std::max<int64_t>(2 * k, 1));
    parallel_for_threads(threads, 0, n, grain,
                         [&](int64_t begin, int64_t end) { dot_rows(a, bt, m, k, begin, end, c, n); });
    round_all();
    return;
  }
  if (supports(isa, Isa::kAmx)) {
    packed_gemm<AmxPath>(a, bt, m, n, k, c, threads, rounded);
  } else {
    packed_gemm<Avx512Path>(a, bt, m, n, k, c, threads, rounded);
  }
}

}  // namespace ember::cpu

#else  // not x86-64: callers check cpu_isa() for AVX512_BF16 first, which only x86-64 has.

#include "ember/error.h"

namespace ember::cpu {

void gemm_bf16(const Bf16Matrix&, const Bf16Matrix&, int64_t, int64_t, int64_t, float*, int, const Bf16Output*, Isa) {
  EMBER_FAIL("[gemm_bf16] the AVX512_BF16 kernel was called on a CPU without it");
}
void round_to_bf16(const float*, int64_t, int64_t, const float*, uint16_t*, int64_t) {
  EMBER_FAIL("[gemm_bf16] the AVX512_BF16 kernel was called on a CPU without it");
}

}  // namespace ember::cpu

#endif  // defined(__x86_64__)

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
// bfloat16 once, by the caller's epilogue. The k blocks depend on k alone, so the result does not
// depend on the thread count.
//
// Products with few rows (m <= 4; a mat-vec product for one token) whose B is a weight stored row
// by row (B = W^T, pairs of k adjacent in memory) skip the packing: each output is a dot product
// of a row of A with a row of W, reading W once. They are memory-bound.
#include "kernels/cpu/gemm_bf16.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

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

// c (rows x cols of the tile, row stride ldc) = (first ? 0 : c) + A micro-panel x B micro-panel.
EMBER_BF16 void micro_kernel(const uint32_t* a, const uint32_t* b, int64_t pairs, float* c, int64_t ldc, int64_t rows,
                             int64_t cols, bool first) {
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
  for (int i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    if (!first) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, row + 16));
    }
    _mm512_mask_storeu_ps(row, m0, acc[i][0]);
    _mm512_mask_storeu_ps(row + 16, m1, acc[i][1]);
  }
}

// y[i][j] = dot(A row i, W row j) for W stored row by row with pairs adjacent (Bt.col_stride 1).
EMBER_BF16 void dot_rows(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t k, int64_t j_begin,
                         int64_t j_end, float* c, int64_t ldc) {
  const int64_t full = k / 32 * 32;
  for (int64_t i = 0; i < m; ++i) {
    const uint16_t* x = a.data + i * a.row_stride;
    for (int64_t j = j_begin; j < j_end; ++j) {
      const uint16_t* w = bt.data + j * bt.row_stride;
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
      int64_t p = 0;
      for (; p + 64 <= full; p += 64) {
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(x + p), (__m512bh)_mm512_loadu_si512(w + p));
        acc1 =
            _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(x + p + 32), (__m512bh)_mm512_loadu_si512(w + p + 32));
      }
      for (; p < full; p += 32) {
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(x + p), (__m512bh)_mm512_loadu_si512(w + p));
      }
      if (p < k) {  // the tail, masked: whole 16-bit values, zero past the end
        const __mmask32 mask = (__mmask32{1} << (k - p)) - 1;
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_maskz_loadu_epi16(mask, x + p),
                                (__m512bh)_mm512_maskz_loadu_epi16(mask, w + p));
      }
      c[i * ldc + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
  }
}

}  // namespace

EMBER_BF16 void round_to_bf16(const float* c, int64_t m, int64_t n, const float* bias, uint16_t* out,
                              int64_t out_row_stride) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = c + i * n;
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

void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t n, int64_t k, float* c, int threads) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * n, c + (i + 1) * n, 0.0f);
    return;
  }
  if (m <= 4 && bt.col_stride == 1 && a.col_stride == 1) {
    const int64_t grain = std::max<int64_t>(16, 65536 / std::max<int64_t>(2 * k, 1));
    parallel_for_threads(threads, 0, n, grain,
                         [&](int64_t begin, int64_t end) { dot_rows(a, bt, m, k, begin, end, c, n); });
    return;
  }
  const int64_t kc_blocks = (k + kKc - 1) / kKc;
  const int64_t kc_size = (k + kc_blocks - 1) / kc_blocks;  // equal blocks, as the float32 GEMM
  const int64_t max_pairs = (kc_size + 1) / 2;
  std::vector<uint32_t> b_pack;
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    const int64_t panels = (nc + kNr - 1) / kNr;
    b_pack.assign(static_cast<size_t>(panels * max_pairs * kNr), 0u);
    for (int64_t pc = 0; pc < k; pc += kc_size) {
      const int64_t kc = std::min(kc_size, k - pc), pairs = (kc + 1) / 2;
      parallel_for_threads(threads, 0, panels, 1, [&](int64_t begin, int64_t end) {
        for (int64_t jp = begin; jp < end; ++jp) {
          pack_b(bt, k, pc, kc, jc + jp * kNr, std::min(kNr, nc - jp * kNr), b_pack.data() + jp * max_pairs * kNr);
        }
      });
      // The row tiles split evenly among the threads (blocks of kMc rows would leave one thread a
      // block more than the other: 7 blocks for 1024 rows), then each thread's rows in blocks.
      const int64_t row_tiles = (m + kMr - 1) / kMr;
      parallel_for_threads(threads, 0, row_tiles, 1, [&](int64_t tile_begin, int64_t tile_end) {
        std::vector<uint32_t> a_pack(static_cast<size_t>(kMc * max_pairs));
        const int64_t row_end = std::min(m, tile_end * kMr);
        for (int64_t ic = tile_begin * kMr; ic < row_end; ic += kMc) {
          const int64_t mc = std::min(kMc, row_end - ic);
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            pack_a(a, k, pc, kc, ic + ir, std::min(kMr, mc - ir), a_pack.data() + ir * max_pairs);
          }
          for (int64_t jp = 0; jp < panels; ++jp) {
            const uint32_t* b_panel = b_pack.data() + jp * max_pairs * kNr;
            for (int64_t ir = 0; ir < mc; ir += kMr) {
              micro_kernel(a_pack.data() + ir * max_pairs, b_panel, pairs, c + (ic + ir) * n + jc + jp * kNr, n,
                           std::min(kMr, mc - ir), std::min(kNr, nc - jp * kNr), pc == 0);
            }
          }
        }
      });
    }
  }
}

}  // namespace ember::cpu

#else  // not x86-64: callers check cpu_isa() for AVX512_BF16 first, which only x86-64 has.

#include "ember/error.h"

namespace ember::cpu {

void gemm_bf16(const Bf16Matrix&, const Bf16Matrix&, int64_t, int64_t, int64_t, float*, int) {
  EMBER_FAIL("[gemm_bf16] the AVX512_BF16 kernel was called on a CPU without it");
}
void round_to_bf16(const float*, int64_t, int64_t, const float*, uint16_t*, int64_t) {
  EMBER_FAIL("[gemm_bf16] the AVX512_BF16 kernel was called on a CPU without it");
}

}  // namespace ember::cpu

#endif  // defined(__x86_64__)

// Quantized matrix products (quant.h): the activations are quantized once per call into records
// that every code path reads, then each path runs the integer dot products its CPU has.
//
// Note [quantized activations]: a row of x becomes, per pair of 32-value blocks (64 values), a
// 192-byte record: the 64 int8 values (zero past the row's end), the two blocks' float16-rounded
// scales spread over 16 float lanes (lanes 0-7 and 8-15), and a correction term in int32 lanes 0
// and 8. The correction makes vpdpbusd, which multiplies unsigned by signed bytes, give a signed
// product: with q8_0 weights the kernel feeds w + 128 (w xor 0x80), so it sums (w + 128) * x and
// the correction is -128 * sum(x); with q4_0 weights it feeds the stored nibble q + 8, and the
// correction is -8 * sum(x). Summing the 8 lanes of each block then gives exactly
// sum(w * x) + correction, an integer, which the kernel scales by d_w * d_x in float32 and adds to
// 16 float accumulators. The AVX2 and scalar paths read the same records. For q4_1 weights (fed
// as their nibbles, no correction) the lane holds sum(x) itself, for the term m_w * d_x * sum(x) of
// the blocks' minimums; q4_1 has record tiles but no packed panels.
//
// Note [quantized matmul tiling]: a task owns a block of rows of x (64) and of weight rows (as many
// as fit in L2); inside it, tiles of up to 4 rows of x by 4 rows of w keep 16 accumulators in
// registers while the pairs of blocks stream by: each weight vector loaded is used by 4 rows of x,
// each activation vector by 4 rows of w. With one row of x (a mat-vec product) the tasks split the
// weight rows alone, read once, in order, which is all that matters there: the product is limited
// by memory bandwidth (bench rows gemv_q8_0 / gemv_q4_0). With more rows of x than packing costs,
// block weights go through int8 panels instead (Note [packed block GEMM]).
#include "kernels/cpu/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12's AVX-512 reductions and casts start from _mm256_undefined_si256(), which its own
// -Wuninitialized then reports at every inlined use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/kernel.h"
#include "ember/blocks.h"
#include "ember/error.h"
#include "ember/half.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu::quant {

namespace {

constexpr int64_t kPairValues = 2 * kQuantBlock;  // 64: one 512-bit vector of int8

struct alignas(64) PairRecord {
  int8_t values[kPairValues];
  float scales[16];        // lanes 0-7: the first block's d, lanes 8-15: the second's
  int32_t correction[16];  // lane 0: the first block's, lane 8: the second's, 0 elsewhere
};
static_assert(sizeof(PairRecord) == 192);

// Activations for int8 weights: one scale per row and one correction.
struct Int8Rows {
  std::vector<int8_t> values;  // rows x padded_k
  std::vector<float> scales;
  std::vector<int32_t> corrections;  // -128 * sum(x) of each row
  int64_t padded_k = 0;
};

// Blocks of a row of k values (its last one zero-padded), pairs of them, and the bytes of a weight
// row in a block dtype.
int64_t blocks_of(int64_t k) { return (k + kQuantBlock - 1) / kQuantBlock; }
int64_t pairs_of(int64_t k) { return (blocks_of(k) + 1) / 2; }
int64_t row_bytes_of(DType wtype, int64_t k) { return storage_bytes(wtype, blocks_of(k) * kQuantBlock); }

#if !defined(__x86_64__)
// Elsewhere cpu_isa() is kScalar and only the scalar kernels run: these stand in for the x86-64
// kernels (AVX-512, AVX2, VNNI) so that the dispatch below compiles unchanged.
[[noreturn]] void no_x86_kernel() { EMBER_FAIL("[quantized matmul] an x86-64 kernel was called on another CPU"); }
bool quantize_block_avx512(const float*, PairRecord&, int64_t, int32_t) { no_x86_kernel(); }
float quantize_int8_row_avx512(const float*, int64_t, int8_t*, int32_t*) { no_x86_kernel(); }
void block_rows_avx2(const MatmulArgs&, const PairRecord*, int64_t, int64_t, int64_t, int64_t) { no_x86_kernel(); }
void int8_rows_avx2(const MatmulArgs&, const Int8Rows&, int64_t, int64_t, int64_t, int64_t) { no_x86_kernel(); }
template <DType W, int R, int C>
void block_tile_vnni(const MatmulArgs&, const PairRecord*, int64_t, int64_t) {
  no_x86_kernel();
}
template <int R, int C>
void int8_tile_vnni(const MatmulArgs&, const Int8Rows&, int64_t, int64_t) {
  no_x86_kernel();
}
void packed_matmul(const MatmulArgs&, const std::vector<PairRecord>&, int) { no_x86_kernel(); }
template <DType W, int R>
void interleaved_tile_vnni(const MatmulArgs&, const PairRecord*, int64_t, int64_t, bool) {
  no_x86_kernel();
}
template <DType W>
void interleaved_row_avx2(const MatmulArgs&, const PairRecord*, int64_t, int64_t, bool) {
  no_x86_kernel();
}
#endif

#define EMBER_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,fma")))

// Block b (0 or 1) of a record from 32 floats: the reference quantizer's values (ember/blocks.h),
// their float16-rounded scale and the correction for weights stored with `offset` (128 for q8_0,
// 8 for q4_0; -1 for q4_1, whose lane then holds sum(x)). Returns false, leaving the record undefined, when a value is
// NaN or Inf.
bool quantize_block_scalar(const float* x, PairRecord& rec, int64_t b, int32_t offset) {
  for (int64_t j = 0; j < kQuantBlock; ++j) {
    if (!std::isfinite(x[j])) return false;
  }
  BlockQ8_0 block;
  quant_ref::quantize_q8_0(x, &block, kQuantBlock);
  int32_t sum = 0;
  for (int64_t j = 0; j < kQuantBlock; ++j) {
    rec.values[b * kQuantBlock + j] = block.values[j];
    sum += block.values[j];
  }
  const float d = detail::half_bits_to_float(block.scale);
  for (int64_t j = 0; j < 8; ++j) rec.scales[b * 8 + j] = d;
  rec.correction[b * 8] = -offset * sum;
  return true;
}

#if defined(__x86_64__)
// Rounds half away from zero, as roundf: truncate, then step away from zero where the dropped
// fraction is at least a half.
EMBER_AVX512 inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 step = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
  return _mm512_mask_add_ps(t, step, t, one);
}

// The same in AVX-512, bit for bit.
EMBER_AVX512 bool quantize_block_avx512(const float* x, PairRecord& rec, int64_t b, int32_t offset) {
  const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
  const __m512 abs_lo = _mm512_abs_ps(lo), abs_hi = _mm512_abs_ps(hi);
  const __m512 inf = _mm512_set1_ps(INFINITY);
  // Ordered less-than is false for NaN and for Inf.
  if ((_mm512_cmp_ps_mask(abs_lo, inf, _CMP_LT_OQ) & _mm512_cmp_ps_mask(abs_hi, inf, _CMP_LT_OQ)) != 0xffff) {
    return false;
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_lo, abs_hi));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512i q_lo = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(lo, _mm512_set1_ps(id))));
  const __m512i q_hi = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(hi, _mm512_set1_ps(id))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(rec.values + b * kQuantBlock), _mm512_cvtepi32_epi8(q_lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(rec.values + b * kQuantBlock + 16), _mm512_cvtepi32_epi8(q_hi));
  const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q_lo, q_hi));
  const float rounded = detail::half_bits_to_float(detail::float_to_half_bits(d));
  _mm256_storeu_ps(rec.scales + b * 8, _mm256_set1_ps(rounded));
  rec.correction[b * 8] = -offset * sum;
  return true;
}
#endif

// Note [quantized activations]: the records of the rows of x for weights of `a.wtype`; false when
// x holds NaN or Inf.
bool quantize_activations(const MatmulArgs& a, Isa isa, int threads, std::vector<PairRecord>& records) {
  const int64_t pairs = pairs_of(a.k);
  records.assign(static_cast<size_t>(a.m * pairs), PairRecord{});
  const int32_t offset = a.wtype == kQ8_0 ? 128 : a.wtype == kQ4_0 ? 8 : -1;
  const auto block = supports(isa, Isa::kAvx512) ? quantize_block_avx512 : quantize_block_scalar;
  std::atomic<bool> finite{true};
  parallel_for_threads(threads, 0, a.m, 1, [&](int64_t begin, int64_t end) {
    float padded[kQuantBlock];
    for (int64_t r = begin; r < end; ++r) {
      const float* x = a.x + r * a.x_stride;
      for (int64_t p = 0; p < pairs; ++p) {
        PairRecord& rec = records[static_cast<size_t>(r * pairs + p)];
        for (int64_t b = 0; b < 2; ++b) {
          const int64_t start = p * kPairValues + b * kQuantBlock, count = std::min(kQuantBlock, a.k - start);
          if (count <= 0) break;
          const float* values = x + start;
          if (count < kQuantBlock) {  // a row's last block, zero-padded as the weight rows are
            std::fill(padded, padded + kQuantBlock, 0.0f);
            std::copy(values, values + count, padded);
            values = padded;
          }
          if (!block(values, rec, b, offset)) finite.store(false, std::memory_order_relaxed);
        }
      }
    }
  });
  return finite.load();
}

// A row of k floats to int8 as quant_ref::quantize_int8_row does, bit for bit; returns its scale
// and writes sum(q) to *sum, or returns NaN when the row holds NaN or Inf.
float quantize_int8_row_scalar(const float* x, int64_t k, int8_t* q, int32_t* sum) {
  for (int64_t j = 0; j < k; ++j) {
    if (!std::isfinite(x[j])) return NAN;
  }
  const float scale = quant_ref::quantize_int8_row(x, q, k);
  *sum = 0;
  for (int64_t j = 0; j < k; ++j) *sum += q[j];
  return scale;
}

#if defined(__x86_64__)
EMBER_AVX512 float quantize_int8_row_avx512(const float* x, int64_t k, int8_t* q, int32_t* sum) {
  const __m512 inf = _mm512_set1_ps(INFINITY);
  __m512 amax = _mm512_setzero_ps();
  for (int64_t j = 0; j < k; j += 16) {
    const __mmask16 mask = k - j >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (k - j)) - 1);
    const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + j));
    if (_mm512_cmp_ps_mask(v, inf, _CMP_LT_OQ) != 0xffff) return NAN;  // ordered: false for NaN and Inf
    amax = _mm512_max_ps(amax, v);
  }
  const float scale = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 inverse = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
  __m512i total = _mm512_setzero_si512();
  for (int64_t j = 0; j < k; j += 16) {
    const __mmask16 mask = k - j >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (k - j)) - 1);
    const __m512i v = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + j), inverse)));
    _mm_mask_storeu_epi8(q + j, mask, _mm512_cvtepi32_epi8(v));
    total = _mm512_add_epi32(total, v);
  }
  *sum = _mm512_reduce_add_epi32(total);
  return scale;
}
#endif

// Rows of x as int8 with their scales and corrections; false when x holds NaN or Inf.
bool quantize_int8_activations(const MatmulArgs& a, Isa isa, int threads, Int8Rows& rows) {
  rows.padded_k = (a.k + kPairValues - 1) / kPairValues * kPairValues;
  rows.values.assign(static_cast<size_t>(a.m * rows.padded_k), 0);
  rows.scales.resize(static_cast<size_t>(a.m));
  rows.corrections.resize(static_cast<size_t>(a.m));
  const auto quantize_row = supports(isa, Isa::kAvx512) ? quantize_int8_row_avx512 : quantize_int8_row_scalar;
  std::atomic<bool> finite{true};
  parallel_for_threads(threads, 0, a.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int32_t sum = 0;
      const float scale = quantize_row(a.x + r * a.x_stride, a.k, rows.values.data() + r * rows.padded_k, &sum);
      if (std::isnan(scale)) finite.store(false, std::memory_order_relaxed);
      rows.scales[static_cast<size_t>(r)] = scale;
      rows.corrections[static_cast<size_t>(r)] = -128 * sum;
    }
  });
  return finite.load();
}

// --- scalar ---------------------------------------------------------------------------------------

// The integer dot product of one pair of weight blocks with a record, and the float result.
float pair_dot_scalar(DType wtype, const uint8_t* w_row, int64_t p, int64_t blocks, const PairRecord& rec) {
  float sum = 0.0f;
  for (int64_t b = 0; b < 2 && 2 * p + b < blocks; ++b) {
    const int8_t* x = rec.values + b * kQuantBlock;
    int32_t isum = 0;
    float dw = 0.0f;
    if (wtype == kQ8_0) {
      const auto* block = reinterpret_cast<const BlockQ8_0*>(w_row) + 2 * p + b;
      for (int64_t j = 0; j < kQuantBlock; ++j) isum += int32_t{block->values[j]} * x[j];
      dw = detail::half_bits_to_float(block->scale);
    } else if (wtype == kQ4_0) {
      const auto* block = reinterpret_cast<const BlockQ4_0*>(w_row) + 2 * p + b;
      for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
        isum += ((block->nibbles[j] & 0x0f) - 8) * int32_t{x[j]};
        isum += ((block->nibbles[j] >> 4) - 8) * int32_t{x[j + kQuantBlock / 2]};
      }
      dw = detail::half_bits_to_float(block->scale);
    } else {
      const auto* block = reinterpret_cast<const BlockQ4_1*>(w_row) + 2 * p + b;
      for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
        isum += (block->nibbles[j] & 0x0f) * int32_t{x[j]} + (block->nibbles[j] >> 4) * int32_t{x[j + kQuantBlock / 2]};
      }
      dw = detail::half_bits_to_float(block->scale);
      const float dx = rec.scales[b * 8];
      sum += detail::half_bits_to_float(block->min) * (static_cast<float>(rec.correction[b * 8]) * dx);
    }
    sum += static_cast<float>(isum) * (dw * rec.scales[b * 8]);
  }
  return sum;
}

void block_rows_scalar(const MatmulArgs& a, const PairRecord* records, int64_t m_begin, int64_t m_end, int64_t n_begin,
                       int64_t n_end) {
  const int64_t pairs = pairs_of(a.k), blocks = blocks_of(a.k);
  const int64_t row_bytes = row_bytes_of(a.wtype, a.k);
  for (int64_t r = m_begin; r < m_end; ++r) {
    for (int64_t c = n_begin; c < n_end; ++c) {
      const auto* w_row = static_cast<const uint8_t*>(a.w) + c * row_bytes;
      float sum = 0.0f;
      for (int64_t p = 0; p < pairs; ++p) sum += pair_dot_scalar(a.wtype, w_row, p, blocks, records[r * pairs + p]);
      a.y[r * a.y_stride + c] = sum + (a.bias != nullptr ? a.bias[c] : 0.0f);
    }
  }
}

void int8_rows_scalar(const MatmulArgs& a, const Int8Rows& x, int64_t m_begin, int64_t m_end, int64_t n_begin,
                      int64_t n_end) {
  for (int64_t r = m_begin; r < m_end; ++r) {
    const int8_t* xq = x.values.data() + r * x.padded_k;
    for (int64_t c = n_begin; c < n_end; ++c) {
      const int32_t isum = quant_ref::dot_int8(static_cast<const int8_t*>(a.w) + c * a.k, xq, a.k);
      a.y[r * a.y_stride + c] = static_cast<float>(isum) * (x.scales[static_cast<size_t>(r)] * a.w_scale[c]) +
                                (a.bias != nullptr ? a.bias[c] : 0.0f);
    }
  }
}

// --- interleaved weights --------------------------------------------------------------------------
//
// Note [interleaved weights]: in the row layout a mat-vec kernel computes each weight row as its own
// dot product: it loads a pair of blocks, spreads their scales and nibbles over the lanes with
// permutes and reduces 16 lanes to one number at the end, and those shuffles cost more than the
// multiply-adds (SmolLM2's generation spent 70% of its time there). The interleaved layout puts 16
// rows side by side instead, lane r of every vector being row r. For each group of 16 rows and each
// block of 32 values it stores
//   - the 16 rows' float16 scales (32 bytes), for q4_1 then their 16 minimums (32 bytes);
//   - the values as 4-byte words, word i of the 16 rows in 64 bytes: i = 0..7 for q8_0 (values
//     4i..4i+3, each xor 0x80: w + 128 as an unsigned byte), i = 0..3 for q4_0 and q4_1 (bytes
//     4i..4i+3 of the block's nibbles: values 4i..4i+3 in the low nibbles, 16+4i..16+4i+3 in the
//     high ones).
// One 64-byte load and one vpdpbusd against a broadcast word of 4 activations then advance 16 rows
// by 4 values (two vpdpbusd for q4, one per nibble), the scales arrive as one vector, and the 16
// sums come out in the lanes without a reduction. A block of 16 rows takes the bytes of 16 blocks,
// so each group keeps its place and the last n % 16 rows stay in the row layout (the tiles above
// compute them). The activations are the same records (Note [quantized activations]): the
// correction lane makes (w + 128) * x and (q + 8) * x signed products as before, and holds sum(x)
// for q4_1's minimums. Each row of x is summed in the same order whatever the number of rows, so a
// batch of sequences gets the numbers each gets alone.

constexpr int64_t kGroupRows = 16;

// Note [weight prefetch]: a group's blocks are one contiguous stream, and one stream leaves the
// core waiting on memory: the hardware prefetcher keeps too few lines in flight for it. In a
// mat-vec product (up to 4 rows of x, one pass over each group) the kernel prefetches each line
// 8 KiB ahead, into the next group where this one ends. With more rows the group is read again
// from L1 by the later tiles, and a prefetch would evict it (prompt processing measured the same
// with and without). gemv_q4_0_4096x14336 on 2 threads: 1.44-1.55
// ms without, 0.75-0.85 ms 1-2 KiB ahead, 0.6-0.7 ms 8 KiB ahead, no better 16 KiB ahead or into
// L3 only (_MM_HINT_T2); one thread: 3.5 -> 2.4-3.0 ms.
constexpr int64_t kPrefetchAhead = 8192;

// Prefetches, line by line, what lies kPrefetchAhead bytes past the position each step reaches
// (prefetches never fault, so reading past the end of the weights is harmless).
class StreamPrefetch {
 public:
  StreamPrefetch(const uint8_t* start, bool enabled) : next_(enabled ? start + kPrefetchAhead : nullptr) {}
  void reach(const uint8_t* position) {
    if (next_ == nullptr) return;
    for (; next_ < position + kPrefetchAhead; next_ += 64) __builtin_prefetch(next_);
  }

 private:
  const uint8_t* next_;
};

// Bytes of a block of 16 interleaved rows, and where its values start.
int64_t group_block_bytes(DType wtype) { return kGroupRows * storage_bytes(wtype, kQuantBlock); }
int64_t group_values_offset(DType wtype) { return wtype == kQ4_1 ? 64 : 32; }

uint16_t load_half_bits(const uint8_t* p) {
  uint16_t bits = 0;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
}

// Row r of x against the 16 rows of group g.
void interleaved_row_scalar(const MatmulArgs& a, const PairRecord* records, int64_t r, int64_t g) {
  const int64_t blocks = blocks_of(a.k), pairs = pairs_of(a.k), bytes = group_block_bytes(a.wtype);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + g * blocks * bytes;
  float acc[kGroupRows] = {};
  for (int64_t b = 0; b < blocks; ++b, w += bytes) {
    const PairRecord& rec = records[r * pairs + b / 2];
    const int8_t* x = rec.values + b % 2 * kQuantBlock;
    const float dx = rec.scales[b % 2 * 8];
    const int32_t extra = rec.correction[b % 2 * 8];
    const uint8_t* values = w + group_values_offset(a.wtype);
    for (int64_t lane = 0; lane < kGroupRows; ++lane) {
      int32_t sum = 0;
      for (int64_t i = 0; i < (a.wtype == kQ8_0 ? 8 : 4); ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          const int32_t byte = values[64 * i + 4 * lane + j];
          sum +=
              a.wtype == kQ8_0 ? byte * x[4 * i + j] : (byte & 0x0f) * x[4 * i + j] + (byte >> 4) * x[16 + 4 * i + j];
        }
      }
      const float dw = detail::half_bits_to_float(load_half_bits(w + 2 * lane));
      if (a.wtype == kQ4_1) {
        acc[lane] += static_cast<float>(sum) * (dw * dx);
        acc[lane] += detail::half_bits_to_float(load_half_bits(w + 32 + 2 * lane)) * (dx * static_cast<float>(extra));
      } else {
        acc[lane] += static_cast<float>(sum + extra) * (dw * dx);
      }
    }
  }
  for (int64_t lane = 0; lane < kGroupRows; ++lane) {
    const int64_t c = g * kGroupRows + lane;
    a.y[r * a.y_stride + c] = acc[lane] + (a.bias != nullptr ? a.bias[c] : 0.0f);
  }
}

#if defined(__x86_64__)
// --- AVX2 -----------------------------------------------------------------------------------------

#define EMBER_AVX2 __attribute__((target("avx2,fma,f16c")))

// sum over 8 int32 lanes of the signed products a * b of 32 bytes (vpmaddubsw on |a| and b
// signed by a: llama.cpp's trick; |a| <= 128 and |b| <= 127 keep the int16 pairs in range).
EMBER_AVX2 inline __m256i dot_i8_avx2(__m256i a, __m256i b) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// The same for unsigned a small enough that the int16 pairs stay in range (nibbles: at most 15).
EMBER_AVX2 inline __m256i dot_u8_avx2(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

EMBER_AVX2 inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

EMBER_AVX2 inline int32_t hsum_i32_avx2(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// 16 bytes of nibbles as 32 bytes: the low nibbles, then the high ones.
EMBER_AVX2 inline __m256i unpack_nibbles_avx2(const uint8_t* nibbles) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
}

// One block of weights as 32 signed bytes, its scale in *dw and (q4_1) its minimum in *mw.
EMBER_AVX2 inline __m256i load_block_avx2(DType wtype, const uint8_t* w_row, int64_t block, float* dw, float* mw) {
  if (wtype == kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(w_row) + block;
    *dw = detail::half_bits_to_float(b->scale);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->values));
  }
  if (wtype == kQ4_1) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(w_row) + block;
    *dw = detail::half_bits_to_float(b->scale);
    *mw = detail::half_bits_to_float(b->min);
    return unpack_nibbles_avx2(b->nibbles);
  }
  const auto* b = reinterpret_cast<const BlockQ4_0*>(w_row) + block;
  *dw = detail::half_bits_to_float(b->scale);
  return _mm256_sub_epi8(unpack_nibbles_avx2(b->nibbles), _mm256_set1_epi8(8));
}

EMBER_AVX2 void block_rows_avx2(const MatmulArgs& a, const PairRecord* records, int64_t m_begin, int64_t m_end,
                                int64_t n_begin, int64_t n_end) {
  const int64_t pairs = pairs_of(a.k), blocks = blocks_of(a.k);
  const int64_t row_bytes = row_bytes_of(a.wtype, a.k);
  for (int64_t r = m_begin; r < m_end; ++r) {
    const PairRecord* rec = records + r * pairs;
    for (int64_t c = n_begin; c < n_end; ++c) {
      const auto* w_row = static_cast<const uint8_t*>(a.w) + c * row_bytes;
      __m256 acc = _mm256_setzero_ps();
      float mins = 0.0f;  // q4_1: the sum over blocks of m_w * d_x * sum(x)
      for (int64_t b = 0; b < blocks; ++b) {
        float dw = 0.0f, mw = 0.0f;
        const __m256i w = load_block_avx2(a.wtype, w_row, b, &dw, &mw);
        const PairRecord& pr = rec[b / 2];
        const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(pr.values + (b % 2) * kQuantBlock));
        const __m256 products = _mm256_cvtepi32_ps(dot_i8_avx2(w, x));
        const float dx = pr.scales[(b % 2) * 8];
        acc = _mm256_fmadd_ps(products, _mm256_set1_ps(dw * dx), acc);
        if (a.wtype == kQ4_1) mins += mw * (static_cast<float>(pr.correction[(b % 2) * 8]) * dx);
      }
      a.y[r * a.y_stride + c] = hsum_avx2(acc) + mins + (a.bias != nullptr ? a.bias[c] : 0.0f);
    }
  }
}

EMBER_AVX2 void int8_rows_avx2(const MatmulArgs& a, const Int8Rows& x, int64_t m_begin, int64_t m_end, int64_t n_begin,
                               int64_t n_end) {
  const int64_t full = a.k / 32 * 32;
  for (int64_t r = m_begin; r < m_end; ++r) {
    const int8_t* xq = x.values.data() + r * x.padded_k;
    for (int64_t c = n_begin; c < n_end; ++c) {
      const int8_t* w = static_cast<const int8_t*>(a.w) + c * a.k;
      __m256i acc = _mm256_setzero_si256();
      for (int64_t j = 0; j < full; j += 32) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j));
        acc = _mm256_add_epi32(acc, dot_i8_avx2(wv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + j))));
      }
      const int32_t isum = hsum_i32_avx2(acc) + quant_ref::dot_int8(w + full, xq + full, a.k - full);
      a.y[r * a.y_stride + c] = static_cast<float>(isum) * (x.scales[static_cast<size_t>(r)] * a.w_scale[c]) +
                                (a.bias != nullptr ? a.bias[c] : 0.0f);
    }
  }
}

// Row r of x against the 16 rows of group g (Note [interleaved weights]), as two halves of 8 rows.
// vpmaddubsw multiplies unsigned by signed bytes into int16 pairs: the nibbles (at most 15) go in as
// they are; q8_0's w + 128 would overflow the pairs, so its signed w goes through dot_i8_avx2's
// sign trick and needs no correction.
template <DType W>
EMBER_AVX2 void interleaved_row_avx2(const MatmulArgs& a, const PairRecord* records, int64_t r, int64_t g,
                                     bool prefetch) {
  const int64_t blocks = blocks_of(a.k), pairs = pairs_of(a.k), bytes = group_block_bytes(W);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + g * blocks * bytes;
  StreamPrefetch ahead(w, prefetch);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < blocks; ++b, w += bytes) {
    ahead.reach(w + bytes);
    const PairRecord& rec = records[r * pairs + b / 2];
    const auto* x = reinterpret_cast<const int32_t*>(rec.values + b % 2 * kQuantBlock);
    const float dx = rec.scales[b % 2 * 8];
    const int32_t extra = rec.correction[b % 2 * 8];
    const uint8_t* values = w + group_values_offset(W);
    for (int half = 0; half < 2; ++half) {
      __m256i sum = _mm256_setzero_si256();
      if constexpr (W == kQ8_0) {
        for (int i = 0; i < 8; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 64 * i + 32 * half));
          sum =
              _mm256_add_epi32(sum, dot_i8_avx2(_mm256_xor_si256(v, _mm256_set1_epi8(-128)), _mm256_set1_epi32(x[i])));
        }
      } else {
        for (int i = 0; i < 4; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 64 * i + 32 * half));
          sum = _mm256_add_epi32(sum, dot_u8_avx2(_mm256_and_si256(v, low_nibbles), _mm256_set1_epi32(x[i])));
          sum = _mm256_add_epi32(
              sum, dot_u8_avx2(_mm256_and_si256(_mm256_srli_epi16(v, 4), low_nibbles), _mm256_set1_epi32(x[4 + i])));
        }
        if constexpr (W == kQ4_0) sum = _mm256_add_epi32(sum, _mm256_set1_epi32(extra));
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * half)));
      acc[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[half]);
      if constexpr (W == kQ4_1) {
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 + 16 * half)));
        acc[half] = _mm256_fmadd_ps(mw, _mm256_set1_ps(dx * static_cast<float>(extra)), acc[half]);
      }
    }
  }
  float* y = a.y + r * a.y_stride + g * kGroupRows;
  for (int half = 0; half < 2; ++half) {
    __m256 out = acc[half];
    if (a.bias != nullptr) out = _mm256_add_ps(out, _mm256_loadu_ps(a.bias + g * kGroupRows + 8 * half));
    _mm256_storeu_ps(y + 8 * half, out);
  }
}

// --- AVX-512 VNNI ---------------------------------------------------------------------------------

#define EMBER_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c,fma")))

#define EMBER_UNROLL _Pragma("GCC unroll 16")

// A pair of weight blocks as 64 unsigned bytes for vpdpbusd (Note [quantized activations]) and
// their scales (and q4_1's minimums, in *mw) spread over the 16 lanes; `kSecond` is false for a
// row's odd last block, whose missing partner reads as zero values with a zero scale.
template <DType W, bool kSecond>
EMBER_VNNI inline __m512i load_pair_vnni(const uint8_t* w_row, int64_t p, __m512* dw, __m512* mw) {
  if constexpr (W == kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(w_row) + 2 * p;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].values));
    const __m256i hi =
        kSecond ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].values)) : _mm256_setzero_si256();
    *dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(kSecond ? b[1].scale : 0)),
                                           _mm_set1_epi16(static_cast<int16_t>(b[0].scale))));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8(-128));
  } else if constexpr (W == kQ4_0) {
    // Both blocks (36 bytes) in one load; as 16-bit words, block 0's scale is word 0 and its 16
    // bytes of nibbles words 1-8, block 1's scale word 9 and its nibbles words 10-17.
    static_assert(sizeof(BlockQ4_0) == 18);
    const __m512i raw = _mm512_maskz_loadu_epi8(kSecond ? 0xfffffffffULL : 0x3ffffULL, w_row + p * 36);
    const __m256i scale_words = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_castsi256_si512(scale_words), raw)));
    // [block 0, block 0, block 1, block 1] by 128-bit lanes, then the high nibbles of lanes 1
    // and 3: [0 low, 0 high, 1 low, 1 high], the order of the values in a block.
    alignas(64) static constexpr int16_t kNibbleWords[32] = {
        1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 10, 11, 12, 13, 14, 15, 16, 17};
    const __m512i spread = _mm512_permutexvar_epi16(_mm512_load_si512(kNibbleWords), raw);
    return _mm512_and_si512(_mm512_mask_srli_epi16(spread, 0xff00ff00u, spread, 4), _mm512_set1_epi8(0x0f));
  } else {
    // q4_1: both blocks (40 bytes) in one load; as 16-bit words, block 0's scale is word 0, its
    // minimum word 1 and its nibbles words 2-9, block 1's words 10, 11 and 12-19.
    static_assert(sizeof(BlockQ4_1) == 20);
    const __m512i raw = _mm512_maskz_loadu_epi8(kSecond ? 0xffffffffffULL : 0xfffffULL, w_row + p * 40);
    // The scales and the minimums in one permute: [d0 x8, d1 x8 | m0 x8, m1 x8].
    alignas(64) static constexpr int16_t kScaleMinWords[32] = {0, 0, 0, 0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 10, 10, 10,
                                                               1, 1, 1, 1, 1, 1, 1, 1, 11, 11, 11, 11, 11, 11, 11, 11};
    const __m512i halves = _mm512_permutexvar_epi16(_mm512_load_si512(kScaleMinWords), raw);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    *mw = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
    alignas(64) static constexpr int16_t kNibbleWords[32] = {
        2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18, 19, 12, 13, 14, 15, 16, 17, 18, 19};
    const __m512i spread = _mm512_permutexvar_epi16(_mm512_load_si512(kNibbleWords), raw);
    return _mm512_and_si512(_mm512_mask_srli_epi16(spread, 0xff00ff00u, spread, 4), _mm512_set1_epi8(0x0f));
  }
}

// One pair of blocks of an R x C tile: weights of rows w_rows at pair p against the records of R
// rows of x (`records` at pair p, `pairs` apart).
template <DType W, int R, int C, bool kSecond>
EMBER_VNNI inline void block_pair_vnni(const uint8_t* const* w_rows, const PairRecord* records, int64_t pairs,
                                       int64_t p, __m512 (&acc)[R][C]) {
  __m512i w[C];
  __m512 dw[C], mw[C];
  EMBER_UNROLL for (int c = 0; c < C; ++c) w[c] = load_pair_vnni<W, kSecond>(w_rows[c], p, &dw[c], &mw[c]);
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    const PairRecord& rec = records[r * pairs + p];
    const __m512i x = _mm512_load_si512(rec.values);
    const __m512i correction = _mm512_load_si512(rec.correction);
    const __m512 dx = _mm512_load_ps(rec.scales);
    if constexpr (W == kQ4_1) {
      // The nibbles need no correction; the record's lanes 0 and 8 hold each block's sum(x), which
      // the minimums' term m_w * d_x * sum(x) takes (every lane is summed at the end).
      // (products * d_w + sum(x) * m_w) * d_x: both terms scaled by d_x at once.
      const __m512 sums = _mm512_cvtepi32_ps(correction);
      EMBER_UNROLL for (int c = 0; c < C; ++c) {
        const __m512 products = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[c], x));
        acc[r][c] = _mm512_fmadd_ps(_mm512_fmadd_ps(products, dw[c], _mm512_mul_ps(sums, mw[c])), dx, acc[r][c]);
      }
    } else {
      EMBER_UNROLL for (int c = 0; c < C; ++c) {
        const __m512 products = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(correction, w[c], x));
        acc[r][c] = _mm512_fmadd_ps(products, _mm512_mul_ps(dw[c], dx), acc[r][c]);
      }
    }
  }
}

// An R x C tile of y: rows r0.. of x against weight rows c0.. (Note [quantized matmul tiling]).
template <DType W, int R, int C>
EMBER_VNNI void block_tile_vnni(const MatmulArgs& a, const PairRecord* records, int64_t r0, int64_t c0) {
  const int64_t pairs = pairs_of(a.k), full_pairs = blocks_of(a.k) / 2;
  const int64_t row_bytes = row_bytes_of(W, a.k);
  __m512 acc[R][C];
  EMBER_UNROLL for (int r = 0; r < R; ++r) { EMBER_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps(); }
  const uint8_t* w_rows[C];
  EMBER_UNROLL for (int c = 0; c < C; ++c) w_rows[c] = static_cast<const uint8_t*>(a.w) + (c0 + c) * row_bytes;
  const PairRecord* x = records + r0 * pairs;
  for (int64_t p = 0; p < full_pairs; ++p) block_pair_vnni<W, R, C, true>(w_rows, x, pairs, p, acc);
  if (full_pairs < pairs) block_pair_vnni<W, R, C, false>(w_rows, x, pairs, full_pairs, acc);
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    EMBER_UNROLL for (int c = 0; c < C; ++c) {
      a.y[(r0 + r) * a.y_stride + c0 + c] =
          _mm512_reduce_add_ps(acc[r][c]) + (a.bias != nullptr ? a.bias[c0 + c] : 0.0f);
    }
  }
}

// 64 values of an R x C int8 tile from column j, the weights' bytes past `mask` read as zero.
template <int R, int C>
EMBER_VNNI inline void int8_step_vnni(const int8_t* const* w_rows, const int8_t* x, int64_t x_stride, int64_t j,
                                      __mmask64 mask, __m512i (&acc)[R][C]) {
  __m512i w[C];
  EMBER_UNROLL for (int c = 0; c < C; ++c) {
    w[c] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, w_rows[c] + j), _mm512_set1_epi8(-128));
  }
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    const __m512i xv = _mm512_loadu_si512(x + r * x_stride + j);
    EMBER_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], w[c], xv);
  }
}

template <int R, int C>
EMBER_VNNI void int8_tile_vnni(const MatmulArgs& a, const Int8Rows& x, int64_t r0, int64_t c0) {
  __m512i acc[R][C];
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    EMBER_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
  }
  const int8_t* w_rows[C];
  EMBER_UNROLL for (int c = 0; c < C; ++c) w_rows[c] = static_cast<const int8_t*>(a.w) + (c0 + c) * a.k;
  const int8_t* xr = x.values.data() + r0 * x.padded_k;
  for (int64_t j = 0; j < a.k; j += kPairValues) {
    const __mmask64 mask = a.k - j >= kPairValues ? ~__mmask64{0} : (__mmask64{1} << (a.k - j)) - 1;
    int8_step_vnni<R, C>(w_rows, xr, x.padded_k, j, mask, acc);
  }
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    EMBER_UNROLL for (int c = 0; c < C; ++c) {
      const int32_t isum = _mm512_reduce_add_epi32(acc[r][c]) + x.corrections[static_cast<size_t>(r0 + r)];
      a.y[(r0 + r) * a.y_stride + c0 + c] =
          static_cast<float>(isum) * (x.scales[static_cast<size_t>(r0 + r)] * a.w_scale[c0 + c]) +
          (a.bias != nullptr ? a.bias[c0 + c] : 0.0f);
    }
  }
}

// Rows r0..r0+R of x against the 16 rows of group g (Note [interleaved weights]). Two integer
// accumulators per row of x (the low and high nibbles; even and odd words for q8_0) halve the
// chain of dependent vpdpbusd.
template <DType W, int R>
EMBER_VNNI void interleaved_tile_vnni(const MatmulArgs& a, const PairRecord* records, int64_t r0, int64_t g,
                                      bool prefetch) {
  const int64_t blocks = blocks_of(a.k), pairs = pairs_of(a.k);
  const int64_t bytes = group_block_bytes(W), values_offset = group_values_offset(W);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + g * blocks * bytes;
  StreamPrefetch ahead(w, prefetch);
  __m512 acc[R];
  EMBER_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, w += bytes) {
    ahead.reach(w + bytes);
    const uint8_t* values = w + values_offset;
    const PairRecord* rec[R];
    const int32_t* x[R];
    __m512i lo[R], hi[R];
    EMBER_UNROLL for (int r = 0; r < R; ++r) {
      rec[r] = records + (r0 + r) * pairs + b / 2;
      x[r] = reinterpret_cast<const int32_t*>(rec[r]->values + b % 2 * kQuantBlock);
      lo[r] = _mm512_setzero_si512();
      hi[r] = _mm512_setzero_si512();
    }
    if constexpr (W == kQ8_0) {
      EMBER_UNROLL for (int i = 0; i < 8; i += 2) {
        const __m512i even = _mm512_loadu_si512(values + 64 * i), odd = _mm512_loadu_si512(values + 64 * (i + 1));
        EMBER_UNROLL for (int r = 0; r < R; ++r) {
          lo[r] = _mm512_dpbusd_epi32(lo[r], even, _mm512_set1_epi32(x[r][i]));
          hi[r] = _mm512_dpbusd_epi32(hi[r], odd, _mm512_set1_epi32(x[r][i + 1]));
        }
      }
    } else {
      EMBER_UNROLL for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(values + 64 * i);
        const __m512i low = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
        EMBER_UNROLL for (int r = 0; r < R; ++r) {
          lo[r] = _mm512_dpbusd_epi32(lo[r], low, _mm512_set1_epi32(x[r][i]));
          hi[r] = _mm512_dpbusd_epi32(hi[r], high, _mm512_set1_epi32(x[r][4 + i]));
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
    EMBER_UNROLL for (int r = 0; r < R; ++r) {
      const float dx = rec[r]->scales[b % 2 * 8];
      const int32_t extra = rec[r]->correction[b % 2 * 8];
      __m512i sum = _mm512_add_epi32(lo[r], hi[r]);
      if constexpr (W != kQ4_1) sum = _mm512_add_epi32(sum, _mm512_set1_epi32(extra));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[r]);
      if constexpr (W == kQ4_1) {
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32)));
        acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(dx * static_cast<float>(extra)), acc[r]);
      }
    }
  }
  const __m512 bias = a.bias != nullptr ? _mm512_loadu_ps(a.bias + g * kGroupRows) : _mm512_setzero_ps();
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(a.y + (r0 + r) * a.y_stride + g * kGroupRows, _mm512_add_ps(acc[r], bias));
  }
}

// --- AVX-512 VNNI, many rows: weights packed into int8 panels --------------------------------------
//
// Note [packed block GEMM]: with more than a few rows of x, the weights of a task's 32 columns are
// unpacked once into an int8 panel laid out for vpdpbusd with the columns across the lanes: for
// block b and group g of 4 values, 128 bytes hold the 4 signed weights of each of the 32 columns
// (two vectors of 16 columns). The activations become unsigned (x + 128) and each row's 4 bytes of
// a group are broadcast, so one vpdpbusd adds 4 products to 16 columns at once, and a block's 8
// groups sum into int32 lanes that are exact block sums; one conversion and one multiply-add per 16
// columns then apply d_w * d_x. The + 128 adds 128 * sum(w) to each block sum, which the panel
// stores negated per column and block as the integer accumulators' starting value. Per block of
// 4 rows x 32 columns: 64 vpdpbusd against 8 conversions and 8 multiply-adds, where the record
// tiles above spend a conversion, a multiply and a multiply-add on every vpdpbusd. k runs in slices
// of 8 blocks (a 10 KiB slice of the panel stays in L1 while the rows stream past it); y holds the
// float32 sums between slices.

constexpr int64_t kPanelColumns = 32;
constexpr int64_t kPanelBlockBytes = kQuantBlock * kPanelColumns;  // 1024
constexpr int64_t kSliceBlocks = 8;

struct Panel {
  const uint8_t* values;  // blocks x 1024 bytes
  const int32_t* starts;  // blocks x 32: -128 * sum(w) of each column's block
  const float* scales;    // blocks x 32: d_w
};

// 32-bit words at base + lane_offsets + offset for the lanes in `lanes`, zero elsewhere.
EMBER_VNNI inline __m512i gather_words(const uint8_t* base, __m512i lane_offsets, __mmask16 lanes, int64_t offset) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes,
                                     _mm512_add_epi32(lane_offsets, _mm512_set1_epi32(static_cast<int32_t>(offset))),
                                     base, 1);
}

// Unpacks weight rows n0.. (cols of them; the panel's other columns are zero) into `storage`: for
// each block and 16 columns, the columns' words of 4 values are gathered and land, as they are,
// across the lanes of the 8 vectors of groups (q4_0's nibbles masked or shifted, minus 8), and a
// vpdpbusd with ones sums each column's block for its starting value.
EMBER_VNNI Panel pack_panel(const MatmulArgs& a, int64_t n0, int64_t cols, std::vector<uint8_t>& storage) {
  const int64_t blocks = blocks_of(a.k), row_bytes = row_bytes_of(a.wtype, a.k);
  const int64_t block_bytes = a.wtype == kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  const size_t values_bytes = static_cast<size_t>(blocks * kPanelBlockBytes);
  const size_t meta = static_cast<size_t>(blocks * kPanelColumns);
  storage.resize(values_bytes + meta * (sizeof(int32_t) + sizeof(float)));
  uint8_t* values = storage.data();
  auto* starts = reinterpret_cast<int32_t*>(values + values_bytes);
  auto* scales = reinterpret_cast<float*>(starts + meta);
  const __m512i lane_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  const __m512i ones = _mm512_set1_epi8(1), low = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t first = half * 16, count = std::clamp<int64_t>(cols - first, 0, 16);
    const __mmask16 lanes = static_cast<__mmask16>((1u << count) - 1);
    const uint8_t* rows = static_cast<const uint8_t*>(a.w) + (n0 + std::min(first, cols)) * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* base = rows + b * block_bytes;
      uint8_t* dst = values + b * kPanelBlockBytes + half * 64;
      __m512i sum = _mm512_setzero_si512();
      if (a.wtype == kQ8_0) {
        for (int64_t g = 0; g < 8; ++g) {
          const __m512i w = gather_words(base, lane_offsets, lanes, 2 + 4 * g);
          _mm512_storeu_si512(dst + g * 128, w);
          sum = _mm512_dpbusd_epi32(sum, ones, w);
        }
      } else {
        for (int64_t g = 0; g < 4; ++g) {
          const __m512i nibbles = gather_words(base, lane_offsets, lanes, 2 + 4 * g);
          const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(nibbles, low), eight);
          const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(nibbles, 4), low), eight);
          _mm512_storeu_si512(dst + g * 128, _mm512_maskz_mov_epi32(lanes, lo));
          _mm512_storeu_si512(dst + (g + 4) * 128, _mm512_maskz_mov_epi32(lanes, hi));
          sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum, ones, _mm512_maskz_mov_epi32(lanes, lo)), ones,
                                    _mm512_maskz_mov_epi32(lanes, hi));
        }
      }
      _mm512_storeu_si512(starts + b * kPanelColumns + first, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-128)));
      const __m256i scale_bits =
          _mm512_cvtepi32_epi16(gather_words(base, lane_offsets, lanes, 0));  // the low 16 bits of each word
      _mm512_storeu_ps(scales + b * kPanelColumns + first, _mm512_cvtph_ps(scale_bits));
    }
  }
  return {values, starts, scales};
}

// Rows of x as unsigned bytes (x + 128, the records' values xor 0x80) and their block scales.
struct UnsignedRows {
  std::vector<uint8_t> values;  // rows x blocks * 32
  std::vector<float> scales;    // rows x blocks
};

UnsignedRows unsigned_rows(const MatmulArgs& a, const std::vector<PairRecord>& records, int threads) {
  const int64_t blocks = blocks_of(a.k), pairs = pairs_of(a.k);
  UnsignedRows x;
  x.values.resize(static_cast<size_t>(a.m * blocks * kQuantBlock));
  x.scales.resize(static_cast<size_t>(a.m * blocks));
  parallel_for_threads(threads, 0, a.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const PairRecord& rec = records[static_cast<size_t>(r * pairs + b / 2)];
        uint8_t* dst = x.values.data() + (r * blocks + b) * kQuantBlock;
        for (int64_t j = 0; j < kQuantBlock; ++j)
          dst[j] = static_cast<uint8_t>(rec.values[(b % 2) * kQuantBlock + j]) ^ 0x80;
        x.scales[static_cast<size_t>(r * blocks + b)] = rec.scales[(b % 2) * 8];
      }
    }
  });
  return x;
}

// y[r0..r0+R, n0..n0+cols] (+)= rows r0.. of x against the panel over blocks [b0, b1); `first`
// stores instead of adding, `bias` (the columns' own, or null) is added with the last slice.
template <int R>
EMBER_VNNI void packed_tile(const MatmulArgs& a, const UnsignedRows& x, const Panel& panel, int64_t r0, int64_t n0,
                            int64_t cols, int64_t b0, int64_t b1, bool first, const float* bias) {
  const int64_t blocks = blocks_of(a.k);
  __m512 acc[R][2];
  EMBER_UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; ++b) {
    const __m512i start0 = _mm512_loadu_si512(panel.starts + b * kPanelColumns);
    const __m512i start1 = _mm512_loadu_si512(panel.starts + b * kPanelColumns + 16);
    __m512i sums[R][2];
    EMBER_UNROLL for (int r = 0; r < R; ++r) {
      sums[r][0] = start0;
      sums[r][1] = start1;
    }
    const uint8_t* w = panel.values + b * kPanelBlockBytes;
    EMBER_UNROLL for (int64_t g = 0; g < kQuantBlock / 4; ++g) {
      const __m512i w0 = _mm512_loadu_si512(w + g * 128), w1 = _mm512_loadu_si512(w + g * 128 + 64);
      EMBER_UNROLL for (int r = 0; r < R; ++r) {
        int32_t word;
        std::memcpy(&word, x.values.data() + ((r0 + r) * blocks + b) * kQuantBlock + 4 * g, 4);
        const __m512i xb = _mm512_set1_epi32(word);
        sums[r][0] = _mm512_dpbusd_epi32(sums[r][0], xb, w0);
        sums[r][1] = _mm512_dpbusd_epi32(sums[r][1], xb, w1);
      }
    }
    const __m512 d0 = _mm512_loadu_ps(panel.scales + b * kPanelColumns);
    const __m512 d1 = _mm512_loadu_ps(panel.scales + b * kPanelColumns + 16);
    EMBER_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(x.scales[static_cast<size_t>((r0 + r) * blocks + b)]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][0]), _mm512_mul_ps(d0, dx), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][1]), _mm512_mul_ps(d1, dx), acc[r][1]);
    }
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? __mmask16(0xffff)
                       : cols <= 16 ? __mmask16(0)
                                    : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  EMBER_UNROLL for (int r = 0; r < R; ++r) {
    float* y = a.y + (r0 + r) * a.y_stride + n0;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (!first) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, y));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, y + 16));
    }
    if (bias != nullptr) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, bias));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, bias + 16));
    }
    _mm512_mask_storeu_ps(y, m0, v0);
    _mm512_mask_storeu_ps(y + 16, m1, v1);
  }
}

// Note [packed block GEMM]: tasks of 32 weight rows (columns of y), each packed once and run
// against every row of x.
void packed_matmul(const MatmulArgs& a, const std::vector<PairRecord>& records, int threads) {
  const UnsignedRows x = unsigned_rows(a, records, threads);
  const int64_t blocks = blocks_of(a.k), panels = (a.n + kPanelColumns - 1) / kPanelColumns;
  parallel_tasks(panels, threads, [&](int64_t t) {
    thread_local std::vector<uint8_t> storage;
    const int64_t n0 = t * kPanelColumns, cols = std::min(kPanelColumns, a.n - n0);
    const Panel panel = pack_panel(a, n0, cols, storage);
    const float* bias = a.bias != nullptr ? a.bias + n0 : nullptr;
    for (int64_t b0 = 0; b0 < blocks; b0 += kSliceBlocks) {
      const int64_t b1 = std::min(blocks, b0 + kSliceBlocks);
      const float* slice_bias = b1 == blocks ? bias : nullptr;
      for (int64_t r = 0; r < a.m; r += 4) {
        switch (std::min<int64_t>(4, a.m - r)) {
          case 1:
            packed_tile<1>(a, x, panel, r, n0, cols, b0, b1, b0 == 0, slice_bias);
            break;
          case 2:
            packed_tile<2>(a, x, panel, r, n0, cols, b0, b1, b0 == 0, slice_bias);
            break;
          case 3:
            packed_tile<3>(a, x, panel, r, n0, cols, b0, b1, b0 == 0, slice_bias);
            break;
          default:
            packed_tile<4>(a, x, panel, r, n0, cols, b0, b1, b0 == 0, slice_bias);
        }
      }
    }
  });
}

#endif  // defined(__x86_64__)

// Calls tile.template operator()<R, C>(r, c) over rows [m_begin, m_end) x weight rows [n_begin, n_end) in
// tiles of 4 x 4, smaller at the edges.
template <class Tile>
void tiles(int64_t m_begin, int64_t m_end, int64_t n_begin, int64_t n_end, const Tile& tile) {
  constexpr int64_t kR = 4, kC = 4;
  if (m_end - m_begin == 1) {  // a mat-vec product: 8 weight rows at a time, the rest below
    for (; n_begin + 8 <= n_end; n_begin += 8) tile.template operator()<1, 8>(m_begin, n_begin);
  }
  for (int64_t r = m_begin; r < m_end; r += kR) {
    const int64_t rows = std::min(kR, m_end - r);
    for (int64_t c = n_begin; c < n_end; c += kC) {
      const int64_t cols = std::min(kC, n_end - c);
      const auto with_rows = [&]<int R>() {
        switch (cols) {
          case 1:
            return tile.template operator()<R, 1>(r, c);
          case 2:
            return tile.template operator()<R, 2>(r, c);
          case 3:
            return tile.template operator()<R, 3>(r, c);
          default:
            return tile.template operator()<R, 4>(r, c);
        }
      };
      switch (rows) {
        case 1:
          with_rows.template operator()<1>();
          break;
        case 2:
          with_rows.template operator()<2>();
          break;
        case 3:
          with_rows.template operator()<3>();
          break;
        default:
          with_rows.template operator()<4>();
      }
    }
  }
}

// Rows [m0, m1) of x against group g of interleaved weights, with the kernel the ISA has.
template <DType W>
void interleaved_rows(const MatmulArgs& a, const PairRecord* records, Isa isa, int64_t m0, int64_t m1, int64_t g) {
  const int64_t streamed = m1 - m0 <= 4 ? m0 : -1;  // the row that prefetches (Note [weight prefetch])
  if (supports(isa, Isa::kAvx512Vnni)) {
    int64_t r = m0;
    for (; r + 4 <= m1; r += 4) interleaved_tile_vnni<W, 4>(a, records, r, g, r == streamed);
    if (m1 - r == 3) interleaved_tile_vnni<W, 3>(a, records, r, g, r == streamed);
    if (m1 - r == 2) interleaved_tile_vnni<W, 2>(a, records, r, g, r == streamed);
    if (m1 - r == 1) interleaved_tile_vnni<W, 1>(a, records, r, g, r == streamed);
  } else if (supports(isa, Isa::kAvx2)) {
    for (int64_t r = m0; r < m1; ++r) interleaved_row_avx2<W>(a, records, r, g, r == streamed);
  } else {
    for (int64_t r = m0; r < m1; ++r) interleaved_row_scalar(a, records, r, g);
  }
}

// Note [interleaved weights]: tasks of whole groups. With a few rows of x the threads split the
// groups alone; with more, tasks are blocks of 64 rows of x by groups that stay in L2 (Note
// [quantized matmul tiling]), and inside a task each group's blocks stay in L1 while the rows of x
// pass 4 at a time. The rows past the last whole group are in the row layout: the tiles take them.
void interleaved_matmul(const MatmulArgs& a, const PairRecord* records, Isa isa, int threads) {
  const int64_t groups = a.n / kGroupRows, group_bytes = kGroupRows * row_bytes_of(a.wtype, a.k);
  const auto run = [&](int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      if (a.wtype == kQ8_0) {
        interleaved_rows<kQ8_0>(a, records, isa, m0, m1, g);
      } else if (a.wtype == kQ4_0) {
        interleaved_rows<kQ4_0>(a, records, isa, m0, m1, g);
      } else {
        interleaved_rows<kQ4_1>(a, records, isa, m0, m1, g);
      }
    }
  };
  if (a.m <= 4) {
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(group_bytes, 1));
    parallel_for_threads(threads, 0, groups, grain, [&](int64_t g0, int64_t g1) { run(0, a.m, g0, g1); });
  } else {
    constexpr int64_t kRowBlock = 64;
    const int64_t grain = std::max<int64_t>(1, 262144 / std::max<int64_t>(group_bytes, 1));
    const int64_t m_blocks = (a.m + kRowBlock - 1) / kRowBlock, g_blocks = (groups + grain - 1) / grain;
    parallel_tasks(m_blocks * g_blocks, threads, [&](int64_t t) {
      const int64_t m0 = t / g_blocks * kRowBlock, g0 = t % g_blocks * grain;
      run(m0, std::min(a.m, m0 + kRowBlock), g0, std::min(groups, g0 + grain));
    });
  }
  const int64_t tail = groups * kGroupRows;
  if (tail == a.n) return;
  if (supports(isa, Isa::kAvx512Vnni)) {
    const auto tile = [&]<DType W>() {
      tiles(0, a.m, tail, a.n, [&]<int R, int C>(int64_t r, int64_t c) { block_tile_vnni<W, R, C>(a, records, r, c); });
    };
    if (a.wtype == kQ8_0) {
      tile.template operator()<kQ8_0>();
    } else if (a.wtype == kQ4_0) {
      tile.template operator()<kQ4_0>();
    } else {
      tile.template operator()<kQ4_1>();
    }
  } else if (supports(isa, Isa::kAvx2)) {
    block_rows_avx2(a, records, 0, a.m, tail, a.n);
  } else {
    block_rows_scalar(a, records, 0, a.m, tail, a.n);
  }
}

}  // namespace

bool matmul(const MatmulArgs& a, Isa isa, int threads) {
  if (a.m == 0 || a.n == 0) return true;
  const bool vnni = supports(isa, Isa::kAvx512Vnni);
  const bool avx2 = supports(isa, Isa::kAvx2);
  // Weight rows per task: enough that a task's weights are worth a thread (a mat-vec product is
  // cut finer than a product with many rows of x, whose tasks each sweep all of x).
  const int64_t row_bytes = a.wtype == kInt8 ? a.k : row_bytes_of(a.wtype, a.k);
  // Note [quantized matmul tiling]: a mat-vec product splits the weight rows among the threads; a
  // product with more rows of x splits both: blocks of 64 rows of x by blocks of weight rows that
  // stay in L2 (256 KiB) while the rows of x stream past them.
  const int64_t grain = std::max<int64_t>(4, (a.m <= 4 ? 65536 : 262144) / std::max<int64_t>(row_bytes, 1)) / 4 * 4;
  const auto grid = [&](const auto& run) {
    if (a.m <= 4) {
      // Tasks in a multiple of the threads, of equal size: a small matrix (a 576 x 192 projection
      // is 192 rows, about one grain) would otherwise run on one thread, or as 2 tasks against 1.
      const int64_t per_round = std::max<int64_t>(1, threads) * grain;
      const int64_t tasks = std::max<int64_t>(1, threads) * std::max<int64_t>(1, (a.n + per_round / 2) / per_round);
      const int64_t even = std::max<int64_t>(4, ((a.n + tasks - 1) / tasks + 3) / 4 * 4);
      parallel_for_threads(threads, 0, a.n, even, [&](int64_t begin, int64_t end) { run(0, a.m, begin, end); });
      return;
    }
    constexpr int64_t kRowBlock = 64;
    const int64_t m_blocks = (a.m + kRowBlock - 1) / kRowBlock, n_blocks = (a.n + grain - 1) / grain;
    parallel_tasks(m_blocks * n_blocks, threads, [&](int64_t t) {
      const int64_t m0 = t / n_blocks * kRowBlock, n0 = t % n_blocks * grain;
      run(m0, std::min(a.m, m0 + kRowBlock), n0, std::min(a.n, n0 + grain));
    });
  };
  if (a.wtype == kInt8) {
    Int8Rows x;
    if (!quantize_int8_activations(a, isa, threads, x)) return false;
    grid([&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      if (vnni) {
        tiles(m0, m1, n0, n1, [&]<int R, int C>(int64_t r, int64_t c) { int8_tile_vnni<R, C>(a, x, r, c); });
      } else if (avx2) {
        int8_rows_avx2(a, x, m0, m1, n0, n1);
      } else {
        int8_rows_scalar(a, x, m0, m1, n0, n1);
      }
    });
    return true;
  }
  // A few rows of x (a decode step) reuse the calling thread's records: no allocation per call.
  thread_local std::vector<PairRecord> reused;
  std::vector<PairRecord> owned;
  std::vector<PairRecord>& records = a.m <= 16 ? reused : owned;
  if (!quantize_activations(a, isa, threads, records)) return false;
  if (a.interleaved) {
    interleaved_matmul(a, records.data(), isa, threads);
    return true;
  }
  // Packing costs about as much as 16 rows of q8_0 (whose blocks take twice the gathers) or 6 of
  // q4_0 against the tiles (4096 x 4096 weights, 2 threads). q4_1 has no panels: tiles throughout.
  if (vnni && a.wtype != kQ4_1 && a.m > (a.wtype == kQ8_0 ? 16 : 8)) {
    packed_matmul(a, records, threads);
    return true;
  }
  grid([&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (vnni && a.wtype == kQ8_0) {
      tiles(m0, m1, n0, n1,
            [&]<int R, int C>(int64_t r, int64_t c) { block_tile_vnni<kQ8_0, R, C>(a, records.data(), r, c); });
    } else if (vnni && a.wtype == kQ4_0) {
      tiles(m0, m1, n0, n1,
            [&]<int R, int C>(int64_t r, int64_t c) { block_tile_vnni<kQ4_0, R, C>(a, records.data(), r, c); });
    } else if (vnni) {
      tiles(m0, m1, n0, n1,
            [&]<int R, int C>(int64_t r, int64_t c) { block_tile_vnni<kQ4_1, R, C>(a, records.data(), r, c); });
    } else if (avx2) {
      block_rows_avx2(a, records.data(), m0, m1, n0, n1);
    } else {
      block_rows_scalar(a, records.data(), m0, m1, n0, n1);
    }
  });
  return true;
}

void quantize_rows(DType dtype, const float* x, int64_t x_stride, int64_t rows, int64_t k, void* out, int threads) {
  const BlockTraits& traits = block_traits(dtype);
  const int64_t row_bytes = storage_bytes(dtype, k);
  parallel_for_threads(threads, 0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           traits.from_float_ref(x + r * x_stride, static_cast<uint8_t*>(out) + r * row_bytes, k);
                         }
                       });
}

void dequantize_rows(DType dtype, const void* in, int64_t rows, int64_t k, float* out, int threads) {
  const BlockTraits& traits = block_traits(dtype);
  const int64_t row_bytes = storage_bytes(dtype, k);
  parallel_for_threads(threads, 0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(k, 1)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           traits.to_float(static_cast<const uint8_t*>(in) + r * row_bytes, out + r * k, k);
                         }
                       });
}

void interleave_rows(DType dtype, const void* const* rows, int64_t n, int64_t k, void* out) {
  const int64_t block_bytes = storage_bytes(dtype, kQuantBlock), blocks = k / kQuantBlock;
  const int64_t values_in = dtype == kQ4_1 ? 4 : 2, values_out = group_values_offset(dtype);
  const int64_t words = dtype == kQ8_0 ? 8 : 4;
  const uint8_t flip = dtype == kQ8_0 ? 0x80 : 0;
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t groups = n / kGroupRows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* d = dst + (g * blocks + b) * kGroupRows * block_bytes;
      for (int64_t r = 0; r < kGroupRows; ++r) {
        const uint8_t* block = static_cast<const uint8_t*>(rows[g * kGroupRows + r]) + b * block_bytes;
        std::memcpy(d + 2 * r, block, 2);                               // the scale
        if (dtype == kQ4_1) std::memcpy(d + 32 + 2 * r, block + 2, 2);  // the minimum
        for (int64_t i = 0; i < words; ++i) {
          for (int64_t j = 0; j < 4; ++j) {
            d[values_out + 64 * i + 4 * r + j] = static_cast<uint8_t>(block[values_in + 4 * i + j] ^ flip);
          }
        }
      }
    }
  }
  for (int64_t r = groups * kGroupRows; r < n; ++r) {
    std::memcpy(dst + r * blocks * block_bytes, rows[r], static_cast<size_t>(blocks * block_bytes));
  }
}

void interleave_rows(DType dtype, const void* rows, int64_t n, int64_t k, void* out) {
  const int64_t row_bytes = storage_bytes(dtype, k);
  std::vector<const void*> pointers(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) pointers[static_cast<size_t>(r)] = static_cast<const uint8_t*>(rows) + r * row_bytes;
  interleave_rows(dtype, pointers.data(), n, k, out);
}

}  // namespace ember::cpu::quant

// --- kernels --------------------------------------------------------------------------------------

namespace ember::cpu {

namespace {

// Rows and row length of a tensor seen as a matrix (the last dim is the row).
int64_t row_length(const Operand& t) { return t.dim() == 0 ? 1 : t.size(-1); }
int64_t row_count(const Operand& t) { return row_length(t) == 0 ? 0 : t.numel() / row_length(t); }

// inputs: x, float32, contiguous, finite; outputs: the same shape in q8_0, q4_0 or q4_1 (last dim a
// multiple of 32), or in int8 and then the rows' scales (float32, one per row).
void quantize_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  const int64_t k = row_length(x);
  if (out.dtype != kInt8) {
    quant::quantize_rows(out.dtype, x.ptr<const float>(), k, row_count(x), k, out.data, num_threads());
    return;
  }
  const float* in = x.ptr<const float>();
  auto* values = out.ptr<int8_t>();
  auto* scales = c.outputs[1].ptr<float>();
  parallel_for_threads(num_threads(), 0, row_count(x), std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           scales[r] = quant_ref::quantize_int8_row(in + r * k, values + r * k, k);
                         }
                       });
}

// inputs: q8_0, q4_0 or q4_1; outputs: the same shape in float32.
void dequantize_kernel(const KernelCall& c) {
  const Operand &q = c.inputs[0], &out = c.outputs[0];
  quant::dequantize_rows(q.dtype, q.data, row_count(q), row_length(q), out.ptr<float>(), num_threads());
}

// inputs: x (m, k) float32 contiguous, w (n, k) in q8_0, q4_0, q4_1 or int8, w_scale (n) float32 for int8
// weights (absent otherwise), bias (n) float32 or absent; outputs: y (m, n) float32 contiguous.
void quantized_matmul_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &w = c.inputs[1], &w_scale = c.inputs[2], &bias = c.inputs[3];
  const Operand& y = c.outputs[0];
  quant::MatmulArgs args;
  args.wtype = w.dtype;
  args.x = x.ptr<const float>();
  args.w = w.data;
  args.w_scale = w_scale.defined() ? w_scale.ptr<const float>() : nullptr;
  args.bias = bias.defined() ? bias.ptr<const float>() : nullptr;
  args.y = y.ptr<float>();
  args.m = x.size(0);
  args.k = x.size(1);
  args.n = w.size(0);
  args.x_stride = args.k;
  args.y_stride = args.n;
  args.interleaved = c.get<QuantizedMatmulAttrs>().interleaved;
  EMBER_CHECK(quant::matmul(args, cpu_isa(), num_threads()), "[", c.name(),
              "] the input holds NaN or Inf, which cannot be quantized");
}

// inputs: q8_0, q4_0 or q4_1 matrices of one dtype and row length, contiguous; outputs: their rows
// stacked, in the interleaved layout.
void interleave_kernel(const KernelCall& c) {
  const Operand& out = c.outputs[0];
  const int64_t k = row_length(out), row_bytes = storage_bytes(out.dtype, k);
  std::vector<const void*> rows;
  for (const Operand& w : c.inputs) {
    for (int64_t r = 0; r < row_count(w); ++r) rows.push_back(static_cast<const uint8_t*>(w.data) + r * row_bytes);
  }
  quant::interleave_rows(out.dtype, rows.data(), row_count(out), k, out.data);
}

}  // namespace

void register_quant_kernels(KernelTable& table) {
  table.add(OpKind::kQuantize, DeviceType::kCPU, quantize_kernel, {kQ8_0, kQ4_0, kQ4_1, kInt8});
  table.add(OpKind::kDequantize, DeviceType::kCPU, dequantize_kernel, {kFloat32});
  table.add(OpKind::kQuantizedMatmul, DeviceType::kCPU, quantized_matmul_kernel, {kFloat32});
  table.add(OpKind::kInterleave, DeviceType::kCPU, interleave_kernel, {kQ8_0, kQ4_0, kQ4_1});
}

}  // namespace ember::cpu

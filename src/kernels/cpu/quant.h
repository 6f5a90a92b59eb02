// Quantized matrix products on the CPU: weights in a block format (q8_0, q4_0, q4_1; ember/blocks.h)
// or per-row int8, activations quantized on the fly, integer dot products (AVX-512 VNNI's
// vpdpbusd, AVX2's vpmaddubsw, or scalar code), chosen at run time (cpu_isa.h).
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "kernels/cpu/cpu_isa.h"

namespace ember::cpu::quant {

// y (m x n, rows y_stride apart) = x (m x k, rows x_stride apart) @ w^T + bias, where w holds n
// rows of k values: blocks of `wtype` (kQ8_0, kQ4_0, kQ4_1; when k is not a multiple of 32 the rows are
// zero-padded to whole blocks, and so are the activations), or int8 (kInt8) with a float scale
// per row in w_scale (x is then quantized per row to int8 as well). bias may be null. `isa` picks
// the code path (at most cpu_isa(); the tests run every one).
struct MatmulArgs {
  DType wtype = kQ8_0;
  const float* x = nullptr;
  int64_t x_stride = 0;
  const void* w = nullptr;
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t y_stride = 0;
  int64_t m = 0, n = 0, k = 0;
  bool interleaved = false;  // w in the interleaved layout of interleave_rows (block dtypes only)
};
// Returns false, computing nothing, when x holds NaN or Inf (which have no quantized value).
bool matmul(const MatmulArgs& args, Isa isa, int threads);

// Quantizes `rows` rows of k floats (rows x_stride apart) into contiguous blocks of `dtype`, as
// the reference does (ember/blocks.h), bit for bit.
void quantize_rows(DType dtype, const float* x, int64_t x_stride, int64_t rows, int64_t k, void* out, int threads);
// The inverse: contiguous blocks into rows of floats.
void dequantize_rows(DType dtype, const void* in, int64_t rows, int64_t k, float* out, int threads);

// n rows of k values (k a multiple of 32) of `dtype` (kQ8_0, kQ4_0, kQ4_1), row r at rows[r], into
// the interleaved layout that matmul reads with args.interleaved (Note [interleaved weights]): as
// many bytes as n contiguous rows, each group of 16 rows rearranged within its own bytes, the rows
// past the last whole group left as they are.
void interleave_rows(DType dtype, const void* const* rows, int64_t n, int64_t k, void* out);
// The same for n contiguous rows.
void interleave_rows(DType dtype, const void* rows, int64_t n, int64_t k, void* out);

}  // namespace ember::cpu::quant

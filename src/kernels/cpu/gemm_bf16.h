// bfloat16 matrix products with float32 accumulation on AVX-512 BF16 (vdpbf16ps) or AMX tiles: the packed
// GEMM of gemm.cpp with k taken in pairs (Note [bf16 GEMM] in gemm_bf16.cpp). gemm.cpp calls it for
// bfloat16 problems when cpu_isa() has AVX512_BF16; other CPUs convert to float32.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace ember::cpu {

// A matrix of bfloat16 bits: element (i, j) at data[i * row_stride + j * col_stride].
struct Bf16Matrix {
  const uint16_t* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// Where gemm_bf16 also writes its result rounded to bfloat16: data (m x n, rows row_stride apart,
// columns contiguous) = c + bias (n float32 values, or null), rounded as round_to_bf16 rounds, each
// tile as soon as its last block of k is summed (the float32 result need not go through memory).
struct Bf16Output {
  uint16_t* data = nullptr;
  int64_t row_stride = 0;
  const float* bias = nullptr;
};

// c (m x n, contiguous, float32) = a (m x k) @ bt^T, where bt is B seen transposed (n x k): for a
// weight W stored (n, k), bt is W itself. Sums each element in float32 in an order that depends
// on k and `isa` alone: AMX tiles at kAmx, vdpbf16ps below (tests pass each level this CPU has).
// With `rounded`, the result goes there and c is scratch (partial sums; do not read it).
// Needs AVX512_BF16.
void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& bt, int64_t m, int64_t n, int64_t k, float* c, int threads,
               const Bf16Output* rounded = nullptr, Isa isa = cpu_isa());

// out (m x n bfloat16, rows out_row_stride apart, columns contiguous) = c (m x n, contiguous) + bias
// (n float32 values, or null), rounded to nearest even with vcvtneps2bf16 (which, unlike the scalar
// rounding, treats float32 subnormals as zero). Needs AVX512_BF16.
void round_to_bf16(const float* c, int64_t m, int64_t n, const float* bias, uint16_t* out, int64_t out_row_stride);

}  // namespace ember::cpu

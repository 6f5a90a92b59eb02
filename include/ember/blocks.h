// The block-quantized formats, with llama.cpp's byte layouts (ggml-common.h), and their scalar
// reference code: the oracle every SIMD kernel is tested against, and what the PyPI `gguf`
// package's quantizer reproduces bit for bit.
//
//   q8_0  34 bytes per 32 values: a float16 scale d, then 32 int8 q;    value = d * q
//   q4_0  18 bytes per 32 values: a float16 scale d, then 16 bytes: value j (0..15) in the low
//         nibble of byte j, value j + 16 in its high nibble, each stored as q + 8; value = d * q
//   q4_1  20 bytes per 32 values: a float16 scale d, a float16 minimum m, then 16 bytes of
//         nibbles q (0..15) as q4_0's; value = d * q + m
//
// Quantizing a block of 32 floats x (round half away from zero, as C's roundf):
//   q8_0  d = max|x| / 127, q = round(x / d)                   (d = 0: q = 0)
//   q4_0  m = the x of largest magnitude (the first on ties), d = m / -8,
//         q + 8 = min(15, trunc(x / d + 8.5))                   (d = 0: q + 8 = 8)
//   q4_1  m = min(x), d = (max(x) - m) / 15, q = min(15, trunc((x - m) / d + 0.5))  (d = 0: q = 0)
// with x / d computed as x * (1 / d) in float32, and d stored rounded to float16.
//
// Matrix products quantize the activations to q8_0 (as llama.cpp does) and sum, block by block,
// d_w * d_x * (the exact integer dot product of the block's values), in float32; q4_1 adds
// m_w * (d_x * the sum of the block's activation values).
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember {

inline constexpr int64_t kQuantBlock = 32;  // values per block of every block format

struct BlockQ8_0 {
  uint16_t scale;  // float16 bits
  int8_t values[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0's block is llama.cpp's: 2 + 32 bytes");

struct BlockQ4_0 {
  uint16_t scale;                    // float16 bits
  uint8_t nibbles[kQuantBlock / 2];  // value j and value j + 16, each + 8
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0's block is llama.cpp's: 2 + 16 bytes");

struct BlockQ4_1 {
  uint16_t scale;                    // float16 bits
  uint16_t min;                      // float16 bits
  uint8_t nibbles[kQuantBlock / 2];  // value j and value j + 16
};
static_assert(sizeof(BlockQ4_1) == 20, "q4_1's block is llama.cpp's: 2 + 2 + 16 bytes");

// What a block dtype is, as data: the quantized kernels and the file formats read this table.
// Counts are in values (a multiple of kQuantBlock).
struct BlockTraits {
  DType dtype;
  int64_t block_values;
  int64_t block_bytes;
  void (*to_float)(const void* blocks, float* out, int64_t count);
  void (*from_float_ref)(const float* in, void* blocks, int64_t count);
  // sum over i of value_i(w) * value_i(x) for x quantized to q8_0, summed per block as above.
  float (*vec_dot_ref)(const void* w, const BlockQ8_0* x, int64_t count);
};

// The traits of kQ8_0, kQ4_0 or kQ4_1; throws for any other dtype.
const BlockTraits& block_traits(DType dtype);

namespace quant_ref {

void quantize_q8_0(const float* in, BlockQ8_0* out, int64_t count);
void quantize_q4_0(const float* in, BlockQ4_0* out, int64_t count);
void quantize_q4_1(const float* in, BlockQ4_1* out, int64_t count);
void dequantize_q8_0(const BlockQ8_0* in, float* out, int64_t count);
void dequantize_q4_0(const BlockQ4_0* in, float* out, int64_t count);
void dequantize_q4_1(const BlockQ4_1* in, float* out, int64_t count);
float vec_dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t count);
float vec_dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t count);
float vec_dot_q4_1(const BlockQ4_1* w, const BlockQ8_0* x, int64_t count);

// Per-row symmetric int8 (the int8 scheme's weights, per output channel, and its activations, per
// row): scale = max|x| / 127, q = round(x / scale). Returns the scale (0 for an all-zero row).
float quantize_int8_row(const float* in, int8_t* out, int64_t count);
// The exact integer dot product of two int8 rows.
int32_t dot_int8(const int8_t* a, const int8_t* b, int64_t count);

}  // namespace quant_ref

}  // namespace ember

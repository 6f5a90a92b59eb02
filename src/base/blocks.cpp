// The scalar reference of the block formats (ember/blocks.h).
#include "ember/blocks.h"

#include <cmath>

#include "ember/error.h"
#include "ember/half.h"

namespace ember {

namespace quant_ref {

namespace {

float half_to_float(uint16_t bits) { return detail::half_bits_to_float(bits); }
uint16_t float_to_half(float value) { return detail::float_to_half_bits(value); }

}  // namespace

void quantize_q8_0(const float* in, BlockQ8_0* out, int64_t count) {
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float* x = in + b * kQuantBlock;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].scale = float_to_half(d);
    for (int64_t j = 0; j < kQuantBlock; ++j) out[b].values[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q4_0(const float* in, BlockQ4_0* out, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float* x = in + b * kQuantBlock;
    float amax = 0.0f;
    float max = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].scale = float_to_half(d);
    for (int64_t j = 0; j < kHalf; ++j) {
      const auto lo = static_cast<uint8_t>(std::min(15.0f, std::trunc(x[j] * id + 8.5f)));
      const auto hi = static_cast<uint8_t>(std::min(15.0f, std::trunc(x[j + kHalf] * id + 8.5f)));
      out[b].nibbles[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_q4_1(const float* in, BlockQ4_1* out, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float* x = in + b * kQuantBlock;
    float min = x[0];
    float max = x[0];
    for (int64_t j = 1; j < kQuantBlock; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].scale = float_to_half(d);
    out[b].min = float_to_half(min);
    for (int64_t j = 0; j < kHalf; ++j) {
      const auto lo = static_cast<uint8_t>(std::min(15.0f, std::trunc((x[j] - min) * id + 0.5f)));
      const auto hi = static_cast<uint8_t>(std::min(15.0f, std::trunc((x[j + kHalf] - min) * id + 0.5f)));
      out[b].nibbles[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* in, float* out, int64_t count) {
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float d = half_to_float(in[b].scale);
    for (int64_t j = 0; j < kQuantBlock; ++j) out[b * kQuantBlock + j] = d * static_cast<float>(in[b].values[j]);
  }
}

void dequantize_q4_0(const BlockQ4_0* in, float* out, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float d = half_to_float(in[b].scale);
    for (int64_t j = 0; j < kHalf; ++j) {
      out[b * kQuantBlock + j] = d * static_cast<float>((in[b].nibbles[j] & 0x0f) - 8);
      out[b * kQuantBlock + j + kHalf] = d * static_cast<float>((in[b].nibbles[j] >> 4) - 8);
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* in, float* out, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    const float d = half_to_float(in[b].scale), m = half_to_float(in[b].min);
    for (int64_t j = 0; j < kHalf; ++j) {
      out[b * kQuantBlock + j] = d * static_cast<float>(in[b].nibbles[j] & 0x0f) + m;
      out[b * kQuantBlock + j + kHalf] = d * static_cast<float>(in[b].nibbles[j] >> 4) + m;
    }
  }
}

float vec_dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t count) {
  float sum = 0.0f;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    int32_t isum = 0;
    for (int64_t j = 0; j < kQuantBlock; ++j) isum += int32_t{w[b].values[j]} * int32_t{x[b].values[j]};
    sum += static_cast<float>(isum) * (half_to_float(w[b].scale) * half_to_float(x[b].scale));
  }
  return sum;
}

float vec_dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  float sum = 0.0f;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    int32_t isum = 0;
    for (int64_t j = 0; j < kHalf; ++j) {
      isum += ((w[b].nibbles[j] & 0x0f) - 8) * int32_t{x[b].values[j]};
      isum += ((w[b].nibbles[j] >> 4) - 8) * int32_t{x[b].values[j + kHalf]};
    }
    sum += static_cast<float>(isum) * (half_to_float(w[b].scale) * half_to_float(x[b].scale));
  }
  return sum;
}

float vec_dot_q4_1(const BlockQ4_1* w, const BlockQ8_0* x, int64_t count) {
  constexpr int64_t kHalf = kQuantBlock / 2;
  float sum = 0.0f;
  for (int64_t b = 0; b < count / kQuantBlock; ++b) {
    int32_t isum = 0, xsum = 0;
    for (int64_t j = 0; j < kHalf; ++j) {
      isum +=
          (w[b].nibbles[j] & 0x0f) * int32_t{x[b].values[j]} + (w[b].nibbles[j] >> 4) * int32_t{x[b].values[j + kHalf]};
      xsum += int32_t{x[b].values[j]} + int32_t{x[b].values[j + kHalf]};
    }
    const float dx = half_to_float(x[b].scale);
    sum += static_cast<float>(isum) * (half_to_float(w[b].scale) * dx) +
           half_to_float(w[b].min) * (static_cast<float>(xsum) * dx);
  }
  return sum;
}

float quantize_int8_row(const float* in, int8_t* out, int64_t count) {
  float amax = 0.0f;
  for (int64_t j = 0; j < count; ++j) amax = std::max(amax, std::fabs(in[j]));
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t j = 0; j < count; ++j) out[j] = static_cast<int8_t>(std::round(in[j] * inverse));
  return scale;
}

int32_t dot_int8(const int8_t* a, const int8_t* b, int64_t count) {
  int32_t sum = 0;
  for (int64_t j = 0; j < count; ++j) sum += int32_t{a[j]} * int32_t{b[j]};
  return sum;
}

}  // namespace quant_ref

namespace {

template <class Block, void (*Quantize)(const float*, Block*, int64_t),
          void (*Dequantize)(const Block*, float*, int64_t), float (*Dot)(const Block*, const BlockQ8_0*, int64_t)>
constexpr BlockTraits make_traits(DType dtype) {
  return {
      dtype,
      kQuantBlock,
      sizeof(Block),
      [](const void* blocks, float* out, int64_t count) { Dequantize(static_cast<const Block*>(blocks), out, count); },
      [](const float* in, void* blocks, int64_t count) { Quantize(in, static_cast<Block*>(blocks), count); },
      [](const void* w, const BlockQ8_0* x, int64_t count) { return Dot(static_cast<const Block*>(w), x, count); }};
}

constexpr BlockTraits kQ8_0Traits =
    make_traits<BlockQ8_0, quant_ref::quantize_q8_0, quant_ref::dequantize_q8_0, quant_ref::vec_dot_q8_0>(kQ8_0);
constexpr BlockTraits kQ4_0Traits =
    make_traits<BlockQ4_0, quant_ref::quantize_q4_0, quant_ref::dequantize_q4_0, quant_ref::vec_dot_q4_0>(kQ4_0);
constexpr BlockTraits kQ4_1Traits =
    make_traits<BlockQ4_1, quant_ref::quantize_q4_1, quant_ref::dequantize_q4_1, quant_ref::vec_dot_q4_1>(kQ4_1);

}  // namespace

const BlockTraits& block_traits(DType dtype) {
  if (dtype == kQ8_0) return kQ8_0Traits;
  if (dtype == kQ4_0) return kQ4_0Traits;
  if (dtype == kQ4_1) return kQ4_1Traits;
  EMBER_FAIL("[block_traits] ", dtype, " is not a block-quantized dtype (q8_0, q4_0, q4_1)");
}

static_assert(sizeof(BlockQ8_0) == block_layout(kQ8_0).bytes && sizeof(BlockQ4_0) == block_layout(kQ4_0).bytes &&
              sizeof(BlockQ4_1) == block_layout(kQ4_1).bytes);

}  // namespace ember

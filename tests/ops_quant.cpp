// Registry entries of the quantization ops (ember/quant.h). Their reference is not PyTorch (which
// has no q8_0 or q4_0) but llama.cpp's quantizer as the gguf package reproduces it, and the scalar
// code of ember/blocks.h: tests/test_quant.cpp compares every code path with them. The checks here
// run each primitive through its front-end and assert values a reader can verify by hand.
#include <cmath>
#include <cstring>
#include <vector>

#include "ember/quant.h"
#include "op_registry.h"
#include "test_util.h"

namespace op_registry {
namespace {

using ember::kFloat32;
using ember::kQ4_0;
using ember::kQ8_0;

// One block of 0, 1, ..., 31 (q8_0: d = 31 / 127, q = round(i * 127 / 31)), another of -8 .. 7
// scaled by 0.5 (q4_0: the largest magnitude -4 gives d = 0.5, the values come back exactly).
void quantize_and_dequantize_blocks() {
  const Tensor ramp = ember::arange(32, kFloat32).reshape({1, 32});
  const Tensor q8 = ember::quantize(ramp, kQ8_0);
  std::vector<uint8_t> bytes(34);
  std::memcpy(bytes.data(), q8.data_ptr(), bytes.size());
  EXPECT_EQ(ember::detail::half_bits_to_float(static_cast<uint16_t>(bytes[0] | bytes[1] << 8)),
            static_cast<float>(ember::Half(31.0f / 127.0f)));
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(static_cast<int8_t>(bytes[2 + i]), static_cast<int8_t>(std::round(i * (1.0f / (31.0f / 127.0f)))));
  }
  std::vector<float> values(32);
  for (int i = 0; i < 32; ++i) values[i] = static_cast<float>(i % 16 - 8) * 0.5f;
  const Tensor halves = ember::from_vector(values);
  EXPECT_TRUE(test_util::bitwise_equal(ember::dequantize(ember::quantize(halves.reshape({1, 32}), kQ4_0)),
                                       halves.reshape({1, 32})));
}

// Values the formats hold exactly give the float product exactly (integer sums below 2^24): x
// (2, 64) of whole numbers with 127 leading each block (the activations' scale is then 1), and
// weights whose scales are 1 too: +-127 for q8_0 and int8, -8 .. 7 (-8 first) for q4_0.
void quantized_matmul_is_exact_on_representable_values() {
  std::vector<float> xs(128), w8(192), w4(192);
  for (int i = 0; i < 128; ++i) xs[i] = i % 32 == 0 ? 127.0f : static_cast<float>((i * 37) % 255 - 127);
  for (int i = 0; i < 192; ++i) {
    w8[i] = i % 3 == 0 ? 127.0f : -127.0f;
    w4[i] = static_cast<float>(i % 16 - 8);
  }
  const Tensor x = ember::from_vector(xs, ember::Shape{2, 64});
  const Tensor bias = ember::tensor<float>({0.5f, -1.0f, 2.0f});
  for (const ember::DType dtype : {kQ8_0, kQ4_0}) {
    const Tensor w = ember::from_vector(dtype == kQ8_0 ? w8 : w4, ember::Shape{3, 64});
    EXPECT_TRUE(test_util::bitwise_equal(ember::quantized_linear(x, ember::quantize(w, dtype), std::nullopt, bias),
                                         ember::linear(x, w, bias)))
        << dtype;
  }
  const Tensor w = ember::from_vector(w8, ember::Shape{3, 64});
  const auto [values, scales] = ember::quantize_int8(w);
  EXPECT_TRUE(test_util::bitwise_equal(ember::quantized_linear(x, values, scales, bias), ember::linear(x, w, bias)));
}

// The same exact values through interleaved weights (Note [interleaved weights]): 19 rows, a group
// of 16 in the interleaved kernel and 3 left in the row layout; q4_1 holds -8 .. 7 exactly too (its
// minimum -8, its scale 1).
void interleaved_matmul_is_exact_on_representable_values() {
  std::vector<float> xs(192), w8(19 * 64), w4(19 * 64);
  for (int i = 0; i < 192; ++i) xs[i] = i % 32 == 0 ? 127.0f : static_cast<float>((i * 37) % 255 - 127);
  for (int i = 0; i < 19 * 64; ++i) {
    w8[i] = (i * 7) % 3 == 0 ? 127.0f : -127.0f;
    w4[i] = i % 32 == 0 ? -8.0f : i % 32 == 1 ? 7.0f : static_cast<float>((i * 5) % 16 - 8);
  }
  const Tensor x = ember::from_vector(xs, ember::Shape{3, 64});
  const Tensor bias = ember::arange(19, kFloat32) * 0.25;
  for (const ember::DType dtype : {kQ8_0, kQ4_0, ember::kQ4_1}) {
    const Tensor w = ember::from_vector(dtype == kQ8_0 ? w8 : w4, ember::Shape{19, 64});
    const ember::InterleavedWeight fast = ember::interleave(ember::quantize(w, dtype));
    EXPECT_TRUE(test_util::bitwise_equal(ember::quantized_linear(x, fast, bias), ember::linear(x, w, bias))) << dtype;
    EXPECT_TRUE(test_util::bitwise_equal(ember::quantized_linear(x.select(0, 1), fast, bias),
                                         ember::linear(x.select(0, 1), w, bias)))
        << dtype;
  }
}

std::vector<Entry> quant_entries() {
  return {Entry{.name = "quantize",
                .ops = {OpKind::kQuantize, OpKind::kDequantize},
                .checks = {{"quantize_dequantize", quantize_and_dequantize_blocks}}},
          Entry{.name = "quantized_matmul",
                .ops = {OpKind::kQuantizedMatmul, OpKind::kQuantize},
                .checks = {{"quantized_matmul_exact", quantized_matmul_is_exact_on_representable_values}}},
          Entry{.name = "interleave",
                .ops = {OpKind::kInterleave, OpKind::kQuantizedMatmul, OpKind::kQuantize},
                .checks = {{"interleaved_matmul_exact", interleaved_matmul_is_exact_on_representable_values}}}};
}

[[maybe_unused]] const bool kQuantRegistered = add(quant_entries());

}  // namespace
}  // namespace op_registry

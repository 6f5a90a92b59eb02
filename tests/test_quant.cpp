// Quantization: q8_0, q4_0 and q4_1 bit for bit against the PyPI gguf package (llama.cpp's reference
// quantizer; tests/quant/make_quant.py), every code path of the quantized products (scalar, AVX2,
// AVX-512 VNNI, whichever this CPU runs) against the scalar reference of ember/blocks.h, and the
// front-ends' contracts: shapes, dtypes, conversions and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ember/blocks.h"
#include "ember/ember.h"
#include "ember/npy.h"
#include "ember/quant.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/quant.h"
#include "test_util.h"

namespace ember {
namespace {

using test_util::expect_error;

const std::string kData = std::string(EMBER_TEST_DATA_DIR) + "/quant/";

// The bytes of a q-tensor as a uint8 tensor of shape (rows, bytes per row).
Tensor bytes_of(const Tensor& q) {
  const int64_t rows = q.numel() / q.size(-1), row_bytes = storage_bytes(q.dtype(), q.size(-1));
  Tensor out = empty({rows, row_bytes}, kUInt8);
  std::memcpy(out.data_ptr(), q.data_ptr(), static_cast<size_t>(rows * row_bytes));
  return out;
}

TEST(QuantFormats, BlockLayoutsAreLlamaCpps) {
  EXPECT_EQ(block_layout(kQ8_0).values, 32);
  EXPECT_EQ(block_layout(kQ8_0).bytes, 34);
  EXPECT_EQ(block_layout(kQ4_0).bytes, 18);
  EXPECT_EQ(storage_bytes(kQ4_0, 4096), 128 * 18);
  EXPECT_EQ(block_traits(kQ8_0).block_bytes, 34);
  EXPECT_EQ(block_traits(kQ4_0).dtype, kQ4_0);
  EXPECT_EQ(dtype_name(kQ4_0), "q4_0");
  EXPECT_EQ(block_layout(kQ4_1).bytes, 20);
  EXPECT_EQ(storage_bytes(kQ4_1, 4096), 128 * 20);
  EXPECT_EQ(block_traits(kQ4_1).block_bytes, 20);
  EXPECT_EQ(dtype_name(kQ4_1), "q4_1");
  expect_error([] { block_traits(kFloat32); }, {"[block_traits] float32 is not a block-quantized dtype"});
}

// Every row of input.npy quantized by ember equals the gguf package's bytes, and dequantizes to its
// floats bit for bit (NaN where a float16 scale overflowed to Inf and met a 0).
TEST(QuantFormats, QuantizeAndDequantizeMatchTheGgufPackageBitForBit) {
  const Tensor x = load_npy(kData + "input.npy");
  for (const auto& [dtype, name] : {std::pair{kQ8_0, "q8_0"}, std::pair{kQ4_0, "q4_0"}, std::pair{kQ4_1, "q4_1"}}) {
    SCOPED_TRACE(name);
    const Tensor expected = load_npy(kData + name + ".npy");
    const Tensor expected_values = load_npy(kData + name + "_dequantized.npy");
    // The front-end checks its input is finite: quantize the rows the reference code takes as they are.
    Tensor q = empty(x.shape(), dtype);
    block_traits(dtype).from_float_ref(x.data_ptr<float>(), q.data_ptr(), x.numel());
    EXPECT_TRUE(test_util::bitwise_equal(bytes_of(q), expected));
    Tensor values = empty(x.shape(), kFloat32);
    block_traits(dtype).to_float(q.data_ptr(), values.data_ptr<float>(), x.numel());
    EXPECT_TRUE(test_util::bitwise_equal(values, expected_values));
    // The op (every row but the one whose scale overflows float16) and .to() give the same bytes.
    const Tensor finite_rows = x.slice(0, 0, x.size(0) - 1);
    const Tensor op = quantize(finite_rows, dtype);
    EXPECT_TRUE(test_util::bitwise_equal(bytes_of(op), expected.slice(0, 0, x.size(0) - 1)));
    EXPECT_TRUE(test_util::bitwise_equal(bytes_of(finite_rows.to(dtype)), bytes_of(op)));
    EXPECT_TRUE(test_util::bitwise_equal(dequantize(op), expected_values.slice(0, 0, x.size(0) - 1)));
    EXPECT_TRUE(test_util::bitwise_equal(op.to(kFloat32), dequantize(op)));
  }
}

// The quantization error is at most half a step of each block's scale (q4_0: a whole step on the
// side opposite the largest magnitude, where +8 steps clip to +7).
TEST(QuantFormats, ErrorIsHalfAStep) {
  manual_seed(3);
  const Tensor x = randn({16, 256});
  for (const DType dtype : {kQ8_0, kQ4_0}) {
    const Tensor error = abs(dequantize(quantize(x, dtype)) - x).reshape({16, 8, 32});
    const Tensor amax = ember::amax(abs(x).reshape({16, 8, 32}), {-1}, true);
    const double steps = dtype == kQ8_0 ? 127.0 : 8.0, allowed = dtype == kQ8_0 ? 0.5 : 1.0;
    // plus float16's rounding of the scale (relative 2^-11, over up to 8 or 127 steps)
    const Tensor bound = amax / steps * (allowed + steps * 1e-3);
    EXPECT_TRUE(le(error, bound).all().item<bool>()) << dtype;
  }
  // q4_1: half a step of d = (max - min) / 15, plus float16's rounding of d (over 15 steps) and of
  // the minimum.
  const Tensor blocks = x.reshape({16, 8, 32});
  const Tensor error = abs(dequantize(quantize(x, kQ4_1)) - x).reshape({16, 8, 32});
  const Tensor low = ember::amin(blocks, {-1}, true), range = ember::amax(blocks, {-1}, true) - low;
  const Tensor bound = range / 15.0 * (0.5 + 15 * 1e-3) + abs(low) * 1e-3;
  EXPECT_TRUE(le(error, bound).all().item<bool>());
}

// --- the quantized products -------------------------------------------------------------------

std::vector<cpu::Isa> paths() {
  std::vector<cpu::Isa> out{cpu::Isa::kScalar};
  if (cpu::supports(cpu::cpu_isa(), cpu::Isa::kAvx2)) out.push_back(cpu::Isa::kAvx2);
  if (cpu::supports(cpu::cpu_isa(), cpu::Isa::kAvx512Vnni)) out.push_back(cpu::Isa::kAvx512Vnni);
  return out;
}

struct Problem {
  int64_t m, n, k;
};

// m, n, k across the tile edges (4 x 4 tiles, 1 x 8 for one row, pairs of blocks, odd block counts,
// tails of 64) and,
// from 9 rows of q4_0 and 17 of q8_0, the packed panels' (32 columns in halves of 16, slices of 8
// blocks, rows in fours).
const std::vector<Problem> kProblems = {{1, 1, 32},    {1, 7, 96},    {3, 5, 64},   {4, 4, 128},  {5, 9, 160},
                                        {17, 13, 320}, {2, 33, 1056}, {6, 3, 4096}, {9, 40, 100}, {18, 45, 1056},
                                        {23, 16, 64},  {33, 70, 544}, {1, 19, 200}};

std::vector<float> random_floats(std::mt19937& rng, int64_t count, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(count));
  for (float& v : out) v = normal(rng);
  return out;
}

// Rows of k values in blocks of 32, the last zero-padded.
int64_t padded(int64_t k) { return (k + kQuantBlock - 1) / kQuantBlock * kQuantBlock; }

TEST(QuantKernels, EveryBlockPathMatchesTheScalarReference) {
  std::mt19937 rng(5);
  std::vector<Problem> problems = kProblems;
  for (const int64_t k : {1, 31, 100, 784}) problems.push_back({3, 6, k});  // rows padded to whole blocks
  for (const DType wtype : {kQ8_0, kQ4_0, kQ4_1}) {
    const BlockTraits& traits = block_traits(wtype);
    for (const Problem& p : problems) {
      const int64_t kp = padded(p.k);
      const std::vector<float> x = random_floats(rng, p.m * p.k, 1.0f);
      std::vector<float> w_float = random_floats(rng, p.n * kp, 0.1f);
      for (int64_t c = 0; c < p.n; ++c) std::fill(&w_float[c * kp + p.k], &w_float[c * kp] + kp, 0.0f);
      const std::vector<float> bias = random_floats(rng, p.n, 1.0f);
      std::vector<uint8_t> w(static_cast<size_t>(storage_bytes(wtype, p.n * kp)));
      traits.from_float_ref(w_float.data(), w.data(), p.n * kp);
      // The reference: each row of x, zero-padded, to q8_0 blocks, then the block-wise dot products.
      std::vector<float> expected(static_cast<size_t>(p.m * p.n));
      std::vector<float> magnitude(expected.size());
      std::vector<BlockQ8_0> xq(static_cast<size_t>(kp / kQuantBlock));
      std::vector<float> x_row(static_cast<size_t>(kp), 0.0f);
      for (int64_t r = 0; r < p.m; ++r) {
        std::copy(&x[r * p.k], &x[r * p.k] + p.k, x_row.begin());
        quant_ref::quantize_q8_0(x_row.data(), xq.data(), kp);
        for (int64_t c = 0; c < p.n; ++c) {
          const uint8_t* row = w.data() + c * storage_bytes(wtype, kp);
          expected[r * p.n + c] = traits.vec_dot_ref(row, xq.data(), kp) + bias[c];
          float size = std::fabs(bias[c]);  // a bound on the sum's magnitudes, for the tolerance
          for (int64_t j = 0; j < p.k; ++j) size += std::fabs(x[r * p.k + j] * w_float[c * kp + j]);
          magnitude[r * p.n + c] = size;
        }
      }
      // The same weights interleaved by 16 rows (the rows past the last group as they are).
      std::vector<uint8_t> w_interleaved(w.size());
      cpu::quant::interleave_rows(wtype, w.data(), p.n, kp, w_interleaved.data());
      for (const cpu::Isa isa : paths()) {
        for (const int threads : {1, 2}) {
          for (const bool interleaved : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(wtype)) + " " + cpu::isa_name(isa) + " m=" + std::to_string(p.m) +
                         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                         " threads=" + std::to_string(threads) + (interleaved ? " interleaved" : ""));
            std::vector<float> y(expected.size(), -1.0f);
            cpu::quant::MatmulArgs args{wtype,   x.data(),    p.k,      interleaved ? w_interleaved.data() : w.data(),
                                        nullptr, bias.data(), y.data(), p.n,
                                        p.m,     p.n,         p.k,      interleaved};
            ASSERT_TRUE(cpu::quant::matmul(args, isa, threads));
            for (size_t i = 0; i < y.size(); ++i) {
              // The integer sums are exact; only the float sums of the blocks' terms run in another order.
              ASSERT_NEAR(y[i], expected[i], 1e-5f * magnitude[i] + 1e-6f) << "at " << i;
            }
          }
        }
      }
    }
  }
}

TEST(QuantKernels, EveryInt8PathMatchesTheScalarReference) {
  std::mt19937 rng(6);
  for (const Problem& base : kProblems) {
    for (const int64_t k : {base.k, base.k + 13}) {  // int8 rows need not be whole blocks
      const Problem p{base.m, base.n, k};
      const std::vector<float> x = random_floats(rng, p.m * p.k, 1.0f);
      const std::vector<float> w_float = random_floats(rng, p.n * p.k, 0.1f);
      std::vector<int8_t> w(static_cast<size_t>(p.n * p.k)), xq(static_cast<size_t>(p.k));
      std::vector<float> w_scale(static_cast<size_t>(p.n));
      for (int64_t c = 0; c < p.n; ++c) w_scale[c] = quant_ref::quantize_int8_row(&w_float[c * p.k], &w[c * p.k], p.k);
      std::vector<float> expected(static_cast<size_t>(p.m * p.n));
      for (int64_t r = 0; r < p.m; ++r) {
        const float x_scale = quant_ref::quantize_int8_row(&x[r * p.k], xq.data(), p.k);
        for (int64_t c = 0; c < p.n; ++c) {
          expected[r * p.n + c] =
              static_cast<float>(quant_ref::dot_int8(&w[c * p.k], xq.data(), p.k)) * (x_scale * w_scale[c]);
        }
      }
      for (const cpu::Isa isa : paths()) {
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                     " k=" + std::to_string(p.k));
        std::vector<float> y(expected.size(), -1.0f);
        cpu::quant::MatmulArgs args{kInt8, x.data(), p.k, w.data(), w_scale.data(), nullptr, y.data(),
                                    p.n,   p.m,      p.n, p.k};
        ASSERT_TRUE(cpu::quant::matmul(args, isa, 2));
        // One integer sum per output, scaled once: every path gives the same float.
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], expected[i]) << "at " << i;
      }
    }
  }
}

// Against a weight of 127 times the identity (q8_0: d = 1, one 127 per row), y[r][c] is 127 times
// row r's c-th quantized value times its block's scale, so every path's activation quantizer
// (rounding ties away from zero: input.npy has exact ties) must give the reference's values: one
// step off would move y by 127 scales; the float sums across vector lanes move it by far less than
// a quarter of that.
TEST(QuantKernels, ActivationsQuantizeAsTheReference) {
  const Tensor all = load_npy(kData + "input.npy");
  const Tensor x = all.slice(0, 0, all.size(0) - 1).contiguous();  // the last row's scale overflows
  const int64_t m = x.size(0), k = x.size(1);
  const Tensor w = quantize(eye(k) * 127.0, kQ8_0);
  std::vector<float> expected(static_cast<size_t>(m * k)), step(expected.size());
  std::vector<BlockQ8_0> xq(static_cast<size_t>(k / kQuantBlock));
  for (int64_t r = 0; r < m; ++r) {
    quant_ref::quantize_q8_0(x.data_ptr<float>() + r * k, xq.data(), k);
    for (int64_t c = 0; c < k; ++c) {
      const auto* row = static_cast<const BlockQ8_0*>(w.data_ptr()) + c * (k / kQuantBlock);
      expected[r * k + c] = quant_ref::vec_dot_q8_0(row, xq.data(), k);
      step[r * k + c] = 127.0f * detail::half_bits_to_float(xq[c / kQuantBlock].scale);
    }
  }
  for (const cpu::Isa isa : paths()) {
    std::vector<float> y(expected.size());
    cpu::quant::MatmulArgs args{kQ8_0, x.data_ptr<float>(), k, w.data_ptr(), nullptr, nullptr, y.data(), k, m, k, k};
    ASSERT_TRUE(cpu::quant::matmul(args, isa, 2));
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], expected[i], 0.25f * step[i]) << cpu::isa_name(isa) << " at " << i;
    }
  }
}

TEST(QuantKernels, ExtremeValuesStayInRange) {
  // Weights at -128 (possible in a q8_0 file, never made by the quantizer) and activations at
  // +-127 in every lane: the sign and offset tricks must not overflow.
  const int64_t k = 256;
  std::vector<BlockQ8_0> w(static_cast<size_t>(k / kQuantBlock));
  for (BlockQ8_0& b : w) {
    b.scale = detail::float_to_half_bits(1.0f);
    for (int8_t& v : b.values) v = -128;
  }
  std::vector<float> x(static_cast<size_t>(k), -127.0f);
  for (const cpu::Isa isa : paths()) {
    float y = 0.0f;
    cpu::quant::MatmulArgs args{kQ8_0, x.data(), k, w.data(), nullptr, nullptr, &y, 1, 1, 1, k};
    ASSERT_TRUE(cpu::quant::matmul(args, isa, 1));
    EXPECT_EQ(y, 128.0f * 127.0f * static_cast<float>(k)) << cpu::isa_name(isa);
  }
}

// Note [interleaved weights]: each row of x is summed in one order whatever the rows around it, so
// a batch of sequences decodes to the numbers each gives alone, on every path and thread count.
TEST(QuantKernels, InterleavedRowsGiveWhatEachGivesAlone) {
  std::mt19937 rng(8);
  const int64_t m = 11, n = 70, k = 352;  // 4 groups and a tail of 6 rows; 11 blocks (an odd count)
  for (const DType wtype : {kQ8_0, kQ4_0, kQ4_1}) {
    const std::vector<float> x = random_floats(rng, m * k, 1.0f), w_float = random_floats(rng, n * k, 0.1f);
    std::vector<uint8_t> w(static_cast<size_t>(storage_bytes(wtype, n * k))), w_interleaved(w.size());
    block_traits(wtype).from_float_ref(w_float.data(), w.data(), n * k);
    cpu::quant::interleave_rows(wtype, w.data(), n, k, w_interleaved.data());
    for (const cpu::Isa isa : paths()) {
      for (const int threads : {1, 2}) {
        std::vector<float> batch(static_cast<size_t>(m * n)), alone(batch.size());
        cpu::quant::MatmulArgs args{wtype, x.data(), k,   w_interleaved.data(), nullptr, nullptr, batch.data(), n, m,
                                    n,     k,        true};
        ASSERT_TRUE(cpu::quant::matmul(args, isa, threads));
        for (int64_t r = 0; r < m; ++r) {
          args.x = x.data() + r * k;
          args.y = alone.data() + r * n;
          args.m = 1;
          ASSERT_TRUE(cpu::quant::matmul(args, isa, threads));
        }
        for (size_t i = 0; i < batch.size(); ++i) {
          ASSERT_EQ(batch[i], alone[i]) << dtype_name(wtype) << " " << cpu::isa_name(isa) << " threads=" << threads
                                        << " at " << i;
        }
      }
    }
  }
}

TEST(QuantKernels, InterleavedExtremeValuesStayInRange) {
  // As ExtremeValuesStayInRange, over a whole group of 16 rows of -128 (stored as 0 after the xor).
  const int64_t n = 16, k = 256;
  std::vector<BlockQ8_0> w(static_cast<size_t>(n * k / kQuantBlock)), w_interleaved(w.size());
  for (BlockQ8_0& b : w) {
    b.scale = detail::float_to_half_bits(1.0f);
    for (int8_t& v : b.values) v = -128;
  }
  cpu::quant::interleave_rows(kQ8_0, w.data(), n, k, w_interleaved.data());
  std::vector<float> x(static_cast<size_t>(k), -127.0f);
  for (const cpu::Isa isa : paths()) {
    std::vector<float> y(static_cast<size_t>(n));
    cpu::quant::MatmulArgs args{kQ8_0, x.data(), k, w_interleaved.data(), nullptr, nullptr, y.data(), n, 1, n, k, true};
    ASSERT_TRUE(cpu::quant::matmul(args, isa, 1));
    for (const float v : y) EXPECT_EQ(v, 128.0f * 127.0f * static_cast<float>(k)) << cpu::isa_name(isa);
  }
}

// --- the front-ends -------------------------------------------------------------------------------

TEST(QuantizedLinear, ApproximatesTheFloatProduct) {
  manual_seed(11);
  const Tensor x = randn({2, 3, 256});
  const Tensor w = randn({40, 256}) * 0.05;
  const Tensor bias = randn({40});
  const Tensor exact = linear(x, w, bias);
  const double norm = exact.norm().item<double>();
  for (const DType dtype : {kQ8_0, kQ4_0, kQ4_1}) {
    const Tensor y = quantized_linear(x, quantize(w, dtype), std::nullopt, bias);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 40}));
    EXPECT_EQ(y.dtype(), kFloat32);
    // Relative error of the whole product: q8_0 about 0.5%, q4_0 and q4_1 about 10% on Gaussian
    // weights.
    const double error = (y - exact).norm().item<double>() / norm;
    EXPECT_LT(error, dtype == kQ8_0 ? 0.01 : 0.15) << dtype;
    EXPECT_GT(error, 0.0) << dtype;
    // Against the dequantized weight the only error left is the activations' quantization.
    const Tensor deq = linear(x, dequantize(quantize(w, dtype)), bias);
    EXPECT_LT((y - deq).norm().item<double>() / norm, 0.01) << dtype;
  }
  const auto [values, scales] = quantize_int8(w);
  EXPECT_EQ(values.dtype(), kInt8);
  EXPECT_EQ(scales.shape(), Shape{40});
  const Tensor y8 = quantized_linear(x, values, scales, bias);
  EXPECT_LT((y8 - exact).norm().item<double>() / norm, 0.01);
  // int8 values times their scales give the weight back within half a step per row.
  const Tensor back = values.to(kFloat32) * scales.unsqueeze(1);
  EXPECT_TRUE(le(abs(back - w), scales.unsqueeze(1) * 0.5001).all().item<bool>());
}

TEST(QuantizedLinear, InterleavedWeightsGiveTheSameProduct) {
  manual_seed(13);
  for (const DType dtype : {kQ8_0, kQ4_0, kQ4_1}) {
    const Tensor w = quantize(randn({40, 96}), dtype), bias = randn({40});
    const InterleavedWeight fast = interleave(w);
    EXPECT_EQ(fast.dtype(), dtype);
    EXPECT_EQ(fast.data.shape(), w.shape());
    EXPECT_EQ(fast.out_features(), 40);
    EXPECT_EQ(fast.in_features(), 96);
    for (const Shape& shape : {Shape{96}, Shape{1, 96}, Shape{3, 1, 96}, Shape{9, 96}, Shape{0, 96}}) {
      const Tensor x = randn(shape);
      const Tensor expected = quantized_linear(x, w, std::nullopt, bias), got = quantized_linear(x, fast, bias);
      EXPECT_EQ(got.shape(), expected.shape());
      EXPECT_TRUE(le(abs(got - expected), abs(expected) * 1e-5 + 1e-4).all().item<bool>())
          << dtype_name(dtype) << " " << shape;
    }
  }
  const Tensor x = randn({64, 5}).t();  // (5, 64), transposed
  const InterleavedWeight fast = interleave(quantize(randn({16, 64}), kQ4_1));
  EXPECT_TRUE(test_util::bitwise_equal(quantized_linear(x, fast), quantized_linear(x.contiguous(), fast)));
  // Stacked weights (20 rows, not a whole group, then 30): one product gives both layers' outputs.
  const Tensor a = quantize(randn({20, 64}), kQ4_1), b = quantize(randn({30, 64}), kQ4_1);
  const Tensor both = quantized_linear(x, interleave({a, b}));
  EXPECT_EQ(both.shape(), (Shape{5, 50}));
  const Tensor separate = cat({quantized_linear(x, a), quantized_linear(x, b)}, 1);
  EXPECT_TRUE(le(abs(both - separate), abs(separate) * 1e-5 + 1e-4).all().item<bool>());
  expect_error([] { interleave(ones({16, 64})); }, {"[interleave] expected 2-D q8_0, q4_0 or q4_1 weights", "float32"});
  expect_error([] { interleave(quantize(ones({64}), kQ8_0)); }, {"[interleave] expected 2-D"});
  expect_error([&] { interleave({a, quantize(ones({16, 64}), kQ8_0)}); }, {"share their dtype and in_features"});
  expect_error([&] { interleave({a, quantize(ones({16, 96}), kQ4_1)}); }, {"share their dtype and in_features"});
  expect_error([] { interleave(std::vector<Tensor>{}); }, {"[interleave] expected at least one weight"});
  expect_error([] { quantized_linear(ones({1, 64}), InterleavedWeight{}); }, {"the interleaved weight is empty"});
  expect_error([&] { quantized_linear(ones({1, 32}), fast); }, {"[quantized_linear] input of shape [1, 32]"});
  expect_error([&] { quantized_linear(full({1, 64}, std::nan("")), fast); }, {"NaN or Inf"});
}

TEST(QuantizedLinear, EmptyAndNonContiguousInputs) {
  manual_seed(12);
  const Tensor w = quantize(randn({8, 64}), kQ8_0);
  EXPECT_EQ(quantized_linear(zeros({0, 64}), w).shape(), (Shape{0, 8}));
  const Tensor x = randn({64, 5}).t();  // (5, 64), transposed
  EXPECT_TRUE(test_util::bitwise_equal(quantized_linear(x, w), quantized_linear(x.contiguous(), w)));
  EXPECT_TRUE(test_util::bitwise_equal(quantized_linear(x.to(kBFloat16), w),
                                       quantized_linear(x.to(kBFloat16).to(kFloat32), w)));
}

TEST(QuantizedLinear, BadInputsAreErrors) {
  const Tensor w = quantize(ones({8, 64}), kQ8_0);
  expect_error([&] { quantized_linear(ones({2, 32}), w); }, {"[quantized_linear] input of shape [2, 32]", "64"});
  expect_error([&] { quantized_linear(ones({2, 64}), w, ones({8})); }, {"pass no scale"});
  expect_error([&] { quantized_linear(ones({2, 64}), ones({8, 64}).to(kInt8)); }, {"needs its per-row float32 scales"});
  expect_error([&] { quantized_linear(ones({2, 64}), ones({8, 64})); }, {"expected a q8_0, q4_0, q4_1 or int8 weight"});
  expect_error([&] { quantized_linear(ones({2, 64}), w, std::nullopt, ones({7})); }, {"expected a bias of shape (8)"});
  expect_error([&] { quantized_linear(full({1, 64}, std::nan("")), w); }, {"NaN or Inf"});
  expect_error([&] { quantized_linear(ones({1, 64}).to(kInt64), w); }, {"expected a floating-point input"});
  expect_error([] { quantize(ones({4, 48}), kQ8_0); }, {"[quantize] q8_0 stores rows in blocks of 32", "[4, 48]"});
  expect_error([] { quantize(ones({4, 32}), kInt8); }, {"[quantize] int8 is not a block-quantized dtype"});
  expect_error([] { quantize(full({32}, INFINITY), kQ4_0); }, {"[quantize] the input holds NaN or Inf"});
  expect_error([] { dequantize(ones({32})); }, {"[dequantize] expected a q8_0, q4_0 or q4_1 tensor, got float32"});
}

TEST(QuantizedTensors, AreOpaqueExceptWhereTheyMeanSomething) {
  const Tensor q = quantize(arange(128, kFloat32).reshape({2, 64}), kQ4_0);
  EXPECT_EQ(q.shape(), (Shape{2, 64}));
  EXPECT_EQ(q.dtype(), kQ4_0);
  EXPECT_TRUE(q.is_contiguous());
  const Tensor copy = q.clone();
  EXPECT_FALSE(copy.is_same(q));
  EXPECT_TRUE(test_util::bitwise_equal(copy, q));
  Tensor target = quantize(zeros({2, 64}), kQ4_0);
  target.copy_(q);
  EXPECT_TRUE(test_util::bitwise_equal(target, q));
  expect_error([&] { target.copy_(ones({2, 64})); }, {"[copy_] a q4_0 tensor copies only into one of the same dtype"});
  expect_error([&] { q.t(); }, {"[view] a q4_0 tensor is block-quantized and cannot be viewed"});
  expect_error([&] { q.reshape({128}); }, {"cannot be viewed"});
  expect_error([&] { q + q; }, {"q4_0"});
  expect_error([&] { q.sum(); }, {"q4_0"});
  expect_error([&] { Tensor(q).requires_grad_(); }, {"only floating-point tensors can require gradients"});
  expect_error(
      [&] {
        save({{"w", q}}, ::testing::TempDir() + "/q.safetensors");
      },
      {"which safetensors has no dtype for; save it as GGUF"});
  expect_error([] { empty({3, 40}, kQ8_0); }, {"[empty] a q8_0 tensor's last dim must be a multiple of 32"});
  EXPECT_EQ(q.detach().dtype(), kQ4_0);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

std::shared_ptr<nn::Sequential> small_mlp() {
  manual_seed(21);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 96), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(96, 10), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(10, 3));
}

TEST(QuantizeModule, QuantizesLinearLayersInPlaceAndReports) {
  for (const DType dtype : {kQ8_0, kQ4_0, kInt8}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    auto model = small_mlp();
    manual_seed(22);
    const Tensor x = randn({5, 64});
    const Tensor expected = (*model)(x);
    auto* first = model->children()[0]->as<nn::Linear>();
    const Tensor weight_handle = first->weight;  // the member keeps its identity
    const quant::Summary summary = quant::quantize(*model, {.dtype = dtype, .skip = {"4"}});
    EXPECT_EQ(weight_handle.dtype(), dtype);
    EXPECT_TRUE(weight_handle.is_same(first->weight));
    EXPECT_FALSE(first->weight.requires_grad());
    // 64 -> 96 always; 96 -> 10 for every dtype (96 = 3 blocks); 10 -> 3 skipped by name.
    EXPECT_EQ(summary.quantized, (std::vector<std::string>{"0", "2"}));
    ASSERT_EQ(summary.skipped.size(), 1u);
    EXPECT_EQ(summary.skipped[0].first, "4");
    EXPECT_EQ(summary.float_bytes, (64 * 96 + 96 * 10) * 4);
    const int64_t expected_bytes = dtype == kInt8 ? 64 * 96 + 96 * 10 + (96 + 10) * 4
                                                  : storage_bytes(dtype, 64 * 96) + storage_bytes(dtype, 96 * 10);
    EXPECT_EQ(summary.quantized_bytes, expected_bytes);
    EXPECT_NE(summary.report().find("quantized 2 Linear layers"), std::string::npos);
    EXPECT_NE(first->extra_repr().find(std::string("weight=") + std::string(dtype_name(dtype))), std::string::npos);
    // Parameters left: the biases, not trainable, and the skipped layer's weight and bias.
    int64_t trainable = 0;
    for (const Tensor& p : model->parameters()) trainable += p.requires_grad() ? 1 : 0;
    EXPECT_EQ(trainable, 2);
    const Tensor y = (*model)(x);
    const double error = (y - expected).norm().item<double>() / expected.norm().item<double>();
    EXPECT_LT(error, dtype == kQ4_0 ? 0.2 : 0.02);
    expect_error([&] { first->quantize_(kQ8_0); }, {"[Linear::quantize_] the weight is already"});
  }
}

// A layer whose in_features is no multiple of 32 stores zero-padded rows of whole blocks.
TEST(QuantizeModule, PadsRowsToWholeBlocks) {
  manual_seed(25);
  auto layer = std::make_shared<nn::Linear>(100, 16);
  const Tensor x = randn({3, 100});
  const Tensor expected = (*layer)(x);
  const Tensor padded_weight = pad(layer->weight.detach(), {0, 28});
  const quant::Summary summary = quant::quantize(*layer, {.dtype = kQ4_0});
  EXPECT_EQ(summary.quantized, std::vector<std::string>{"(the model)"});
  EXPECT_EQ(layer->weight.shape(), (Shape{16, 128}));
  EXPECT_TRUE(test_util::bitwise_equal(layer->weight, quantize(padded_weight, kQ4_0)));
  const Tensor y = (*layer)(x);
  EXPECT_LT((y - expected).norm().item<double>() / expected.norm().item<double>(), 0.2);
  expect_error(
      [&] {
        quantized_linear(randn({3, 96}), layer->weight);
      },
      {"does not match the weight's in_features 128"});
  layer->dynamic_activations = false;
  EXPECT_EQ((*layer)(x).shape(), (Shape{3, 16}));
}

TEST(QuantizeModule, WeightsOnlyMultipliesFloatActivations) {
  auto model = small_mlp();
  manual_seed(23);
  const Tensor x = randn({4, 64});
  quant::quantize(*model, {.dtype = kQ8_0, .dynamic_activations = false});
  auto* first = model->children()[0]->as<nn::Linear>();
  EXPECT_TRUE(test_util::bitwise_equal((*first)(x), nn::functional::linear(x, dequantize(first->weight), first->bias)));
}

// A quantized model's state dict loads into a fresh model once prepare() has quantized the same
// layers, and gives the same outputs bit for bit; loading it into a float model is a clear error.
TEST(QuantizeModule, StateDictRoundTripThroughPrepare) {
  for (const DType dtype : {kQ8_0, kInt8}) {
    auto model = small_mlp();
    quant::quantize(*model, {.dtype = dtype});
    const StateDict state = model->state_dict();
    EXPECT_EQ(state.at("0.weight").dtype(), dtype);
    EXPECT_EQ(state.count("0.weight_scale"), dtype == kInt8 ? 1u : 0u);
    auto fresh = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 96), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(96, 10), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(10, 3));
    expect_error([&] { fresh->load_state_dict(state); },
                 {"dtype mismatch for \"0.weight\": the state dict has", "quant::prepare the module first"});
    quant::prepare(*fresh, state);
    fresh->load_state_dict(state);
    const Tensor x = randn({3, 64});
    EXPECT_TRUE(test_util::bitwise_equal((*fresh)(x), (*model)(x)));
  }
}

// A block-quantized layer multiplies through an interleaved copy of its weight: the file layout's
// product up to the float32 order of the sums, and a copy that follows the weight when it is
// loaded or written. 40 rows: two whole groups of 16 and an edge group.
TEST(QuantizeModule, InterleavedCopyFollowsTheWeight) {
  for (const DType dtype : {kQ8_0, kQ4_0, kQ4_1}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    manual_seed(26);
    nn::Linear layer(100, 40);
    layer.quantize_(dtype);
    const Tensor x = randn({3, 100});
    const auto expect_product_of = [&](const Tensor& weight) {
      const Tensor y = layer(x);
      const Tensor reference = quantized_linear(x, weight, std::nullopt, layer.bias);
      EXPECT_LT((y - reference).abs().max().item<double>(), 1e-5 * (1.0 + reference.abs().max().item<double>()));
    };
    expect_product_of(layer.weight);
    nn::Linear other(100, 40);
    other.quantize_(dtype);
    const Tensor before = layer(x);
    layer.load_state_dict(other.state_dict());
    expect_product_of(other.weight);
    EXPECT_GT((layer(x) - before).abs().max().item<double>(), 1e-3);
    {
      const autograd::NoGradGuard no_grad;
      layer.weight.copy_(quantize(pad(randn({40, 100}), {0, 28}), dtype));
    }
    expect_product_of(layer.weight);
    // Several threads at once, the copy remade under them.
    layer.weight.bump_version();
    std::vector<Tensor> results(4);
    std::vector<std::thread> threads;
    for (auto& r : results) threads.emplace_back([&] { r = layer(x); });
    for (auto& t : threads) t.join();
    for (const Tensor& r : results) EXPECT_TRUE(test_util::bitwise_equal(r, results[0]));
  }
}

TEST(QuantizeModule, QuantizedLinearIsALinear) {
  manual_seed(24);
  nn::QuantizedLinear layer(64, 8, kQ4_0);
  EXPECT_EQ(layer.weight.dtype(), kQ4_0);
  EXPECT_EQ(layer.name(), "QuantizedLinear");
  EXPECT_EQ(layer(randn({2, 64})).shape(), (Shape{2, 8}));
}

}  // namespace
}  // namespace ember

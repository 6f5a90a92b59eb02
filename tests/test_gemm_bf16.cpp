// The bfloat16 GEMM on AVX-512 BF16 (kernels/cpu/gemm_bf16.cpp) against sums in float64 of the
// same bfloat16 values: every tile edge, odd k, k across several blocks, transposed and strided
// operands, and the unpacked path for few rows; and ember::matmul on bfloat16 tensors, which
// rounds that float32 sum once.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ember/ember.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_bf16.h"

namespace ember {
namespace {

struct GemmCase {
  int64_t m, n, k;
  bool a_transposed, b_transposed;
  int64_t spread = 1;  // both operands' elements `spread` apart in memory (no unit stride: the generic packing)
};

TEST(GemmBf16, MatchesFloat64SumsOfTheSameValues) {
  if (!cpu::supports(cpu::cpu_isa(), cpu::Isa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512_BF16 on this CPU (or capped)";
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  const std::vector<GemmCase> cases = {{1, 1, 1, false, true},
                                       {1, 37, 100, false, true},
                                       {3, 5000, 64, false, true},
                                       {4, 33, 1031, false, true},
                                       {5, 33, 3, false, false},
                                       {14, 32, 512, false, true},
                                       {15, 31, 513, true, false},
                                       {29, 65, 1030, false, true},
                                       {130, 70, 257, true, true},
                                       {113, 2100, 40, false, false},
                                       {20, 40, 67, false, true, 2},
                                       {17, 35, 66, true, false, 3},
                                       // AMX: several blocks of k (4096 each, C reloaded into the tiles; an odd block),
                                       // a second block of 256 rows, one and two 16-row tiles at the edges.
                                       {33, 40, 8999, false, true},
                                       {300, 70, 96, false, false},
                                       {16, 16, 32, false, true},
                                       {48, 47, 4097, true, false}};
  std::vector<cpu::Isa> levels = {cpu::Isa::kAvx512Bf16};
  if (cpu::supports(cpu::cpu_isa(), cpu::Isa::kAmx)) levels.push_back(cpu::Isa::kAmx);
  for (const GemmCase& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                 (c.a_transposed ? " A^T" : "") + (c.b_transposed ? " B^T" : ""));
    const int64_t s = c.spread;
    std::vector<BFloat16> a(static_cast<size_t>(c.m * c.k * s)), b(static_cast<size_t>(c.k * c.n * s));
    for (BFloat16& v : a) v = BFloat16(normal(rng));
    for (BFloat16& v : b) v = BFloat16(normal(rng));
    // A (m x k) stored row-major or as its transpose; B (k x n) likewise.
    const auto a_at = [&](int64_t i, int64_t p) {
      return c.a_transposed ? a[(p * c.m + i) * s] : a[(i * c.k + p) * s];
    };
    const auto b_at = [&](int64_t p, int64_t j) {
      return c.b_transposed ? b[(j * c.k + p) * s] : b[(p * c.n + j) * s];
    };
    const cpu::Bf16Matrix am{reinterpret_cast<const uint16_t*>(a.data()), (c.a_transposed ? 1 : c.k) * s,
                             (c.a_transposed ? c.m : 1) * s};
    // bt (n x k): B seen transposed.
    const cpu::Bf16Matrix bt{reinterpret_cast<const uint16_t*>(b.data()), (c.b_transposed ? c.k : 1) * s,
                             (c.b_transposed ? 1 : c.n) * s};
    std::vector<float> out(static_cast<size_t>(c.m * c.n), NAN);
    for (const auto& [isa, threads] : {std::pair{levels.front(), 1}, std::pair{levels.front(), 2},
                                       std::pair{levels.back(), 1}, std::pair{levels.back(), 2}}) {
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " threads=" + std::to_string(threads));
      std::fill(out.begin(), out.end(), NAN);
      cpu::gemm_bf16(am, bt, c.m, c.n, c.k, out.data(), threads, nullptr, isa);
      // Rounded by the GEMM tile by tile (into rows 3 values longer, with a bias): the float32 sums
      // rounded afterwards, bit for bit, and nothing written past a row.
      std::vector<float> bias(static_cast<size_t>(c.n));
      for (float& v : bias) v = normal(rng);
      const int64_t ld = c.n + 3;
      std::vector<uint16_t> rounded(static_cast<size_t>(c.m * ld), 0xffff), expected(rounded);
      std::vector<float> scratch(out.size(), NAN);
      const cpu::Bf16Output to{rounded.data(), ld, bias.data()};
      cpu::gemm_bf16(am, bt, c.m, c.n, c.k, scratch.data(), threads, &to, isa);
      cpu::round_to_bf16(out.data(), c.m, c.n, bias.data(), expected.data(), ld);
      ASSERT_EQ(rounded, expected);
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            const double term = static_cast<double>(static_cast<float>(a_at(i, p))) * static_cast<float>(b_at(p, j));
            sum += term;
            magnitude += std::fabs(term);
          }
          // float32 accumulation: a few ulps of the terms' magnitude
          ASSERT_NEAR(out[i * c.n + j], sum, 4e-7 * magnitude + 1e-30) << "at " << i << ", " << j;
        }
      }
    }
  }
}

TEST(GemmBf16, MatmulRoundsTheFloat32SumOnce) {
  manual_seed(10);
  const Tensor a = randn({37, 300}).to(kBFloat16);
  const Tensor w = randn({45, 300}).to(kBFloat16);
  const Tensor bias = randn({45}).to(kBFloat16);
  const Tensor y = linear(a, w, bias);
  ASSERT_EQ(y.dtype(), kBFloat16);
  const Tensor expected = linear(a.to(kFloat64), w.to(kFloat64), bias.to(kFloat64));
  // Within one bfloat16 rounding (2^-8 relative) plus the float32 sum's error.
  const Tensor error = abs(y.to(kFloat64) - expected);
  EXPECT_TRUE(le(error, abs(expected) * (1.0 / 256) + 1e-3).all().item<bool>());
  // A mat-vec product (the unpacked path, summed in another order) and a weight stored transposed
  // agree with the packed path within one bfloat16 rounding.
  const auto within_a_rounding = [](const Tensor& p, const Tensor& q) {
    const Tensor x32 = p.to(kFloat32), y32 = q.to(kFloat32);
    return le(abs(x32 - y32), abs(y32) * (1.0 / 128) + 1e-6).all().item<bool>();
  };
  EXPECT_TRUE(within_a_rounding(linear(a.slice(0, 0, 1), w), linear(a, w).slice(0, 0, 1)));
  EXPECT_TRUE(within_a_rounding(matmul(a, w.t().contiguous()), linear(a, w)));
}

}  // namespace
}  // namespace ember

// matmul, matmul_out and linear: what the golden data cannot show: big shapes against a naive loop,
// out= memory, independence from the thread count and the SIMD target, and error messages. Their
// golden forward cases and gradchecks are their registry entries (tests/ops_linalg.cpp).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "golden.h"
#include "test_util.h"

using ember::Tensor;

namespace {

// C = A @ B for 2-D tensors by the textbook triple loop, in double.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const double x = av[static_cast<size_t>(i * k + p)];
      for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * n + j)] += x * bv[static_cast<size_t>(p * n + j)];
    }
  }
  return ember::from_vector(c, ember::Shape{m, n});
}

// `rows` x `cols` random values stored as asked: "contiguous", "t" (column-major) or "strided"
// (every other column of a wider matrix).
Tensor matrix(int64_t rows, int64_t cols, const std::string& layout, ember::DType dtype) {
  if (layout == "t") return ember::randn({cols, rows}, dtype).t();
  if (layout == "strided") return ember::randn({rows, 2 * cols}, dtype).slice(1, std::nullopt, std::nullopt, 2);
  return ember::randn({rows, cols}, dtype);
}

using test_util::ThreadCountGuard;

using test_util::error_of;

}  // namespace

TEST(Matmul, LargeFloat64MatchesNaiveLoop) {
  // (300 x 500) @ (500 x 400): k > KC (256), two threads' row ranges; the sweep below covers the
  // partial tiles.
  ember::manual_seed(11);
  const Tensor a = ember::randn({300, 500}, ember::kFloat64), b = ember::randn({500, 400}, ember::kFloat64);
  const Tensor expected = naive_matmul(a, b);
  EXPECT_TRUE(golden::all_close(ember::matmul(a, b), expected, {1e-12, 1e-11}));
  // The same product with both operands stored transposed and with a row-strided A.
  const Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
  EXPECT_TRUE(golden::all_close(ember::matmul(at, bt), expected, {1e-12, 1e-11}));
  const Tensor wide = ember::zeros({600, 500}, ember::kFloat64);
  Tensor strided = wide.slice(0, std::nullopt, std::nullopt, 2);
  strided.copy_(a);
  EXPECT_TRUE(golden::all_close(ember::matmul(strided, b), expected, {1e-12, 1e-11}));
}

TEST(Matmul, ShapeAndLayoutSweepMatchesNaiveLoop) {
  // Every path (tiny, unpacked rows and dot products, packed, matrix-vector) with partial tiles
  // along m (% 6) and n (% 16 floats, % 8 doubles), k in one or several blocks, and every
  // layout of A and B.
  ember::manual_seed(19);
  const std::vector<std::vector<int64_t>> shapes = {{1, 1, 1},     {5, 7, 3},     {6, 16, 16},    {7, 300, 17},
                                                    {13, 257, 33}, {67, 45, 70},  {100, 30, 100}, {131, 260, 71},
                                                    {1, 500, 129}, {129, 500, 1}, {64, 8, 130},   {37, 600, 9}};
  const std::vector<std::string> layouts = {"contiguous", "t", "strided"};
  for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    for (const auto& shape : shapes) {
      const int64_t m = shape[0], k = shape[1], n = shape[2];
      for (const std::string& layout_a : layouts) {
        for (const std::string& layout_b : layouts) {
          const Tensor a = matrix(m, k, layout_a, dtype), b = matrix(k, n, layout_b, dtype);
          const Tensor expected = naive_matmul(a, b);
          const golden::Tolerance tol = dtype == ember::kFloat32
                                            ? golden::Tolerance{1e-5, 4e-6 * static_cast<double>(k)}
                                            : golden::Tolerance{1e-12, 1e-13 * static_cast<double>(k)};
          EXPECT_TRUE(golden::all_close(ember::matmul(a, b).to(ember::kFloat64), expected, tol))
              << dtype << " " << m << "x" << k << "x" << n << " " << layout_a << " @ " << layout_b;
          const Tensor bias = ember::randn({n}, dtype);
          EXPECT_TRUE(golden::all_close(ember::linear(a, b.t(), bias).to(ember::kFloat64),
                                        expected + bias.to(ember::kFloat64), tol))
              << "linear " << dtype << " " << m << "x" << k << "x" << n << " " << layout_a << " @ " << layout_b;
        }
      }
    }
  }
}

TEST(Matmul, LargeFloat32MatchesNaiveLoop) {
  // 130 x 260 @ 260 x 70 (k past one packed block), and n past a whole B panel of doubles (1024).
  ember::manual_seed(12);
  const Tensor a = ember::randn({130, 260}), b = ember::randn({260, 70});
  EXPECT_TRUE(golden::all_close(ember::matmul(a, b).to(ember::kFloat64), naive_matmul(a, b), {1e-5, 2e-6 * 260}));
  const Tensor c = ember::randn({20, 300}, ember::kFloat64), d = ember::randn({300, 1100}, ember::kFloat64);
  EXPECT_TRUE(golden::all_close(ember::matmul(c, d), naive_matmul(c, d), {1e-12, 1e-11}));
  const Tensor e = ember::randn({9, 40}), f = ember::randn({40, 2100});  // n past a B panel of floats (2048)
  EXPECT_TRUE(golden::all_close(ember::matmul(e, f).to(ember::kFloat64), naive_matmul(e, f), {1e-5, 1e-4}));
}

TEST(Matmul, BatchedMatchesPerBatchProducts) {
  ember::manual_seed(13);
  const Tensor a = ember::randn({2, 1, 37, 29}), b = ember::randn({3, 29, 41});
  const Tensor c = ember::matmul(a, b);
  ASSERT_EQ(c.shape(), (ember::Shape{2, 3, 37, 41}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const Tensor expected = naive_matmul(a.select(0, i).select(0, 0), b.select(0, j));
      EXPECT_TRUE(golden::all_close(c.select(0, i).select(0, j).to(ember::kFloat64), expected, {1e-5, 1e-4}));
    }
  }
  // Many small problems (threads over the batch) give what one problem at a time gives.
  const Tensor x = ember::randn({64, 8, 16}), y = ember::randn({64, 16, 8});
  const Tensor z = ember::matmul(x, y);
  for (int64_t i = 0; i < 64; i += 21) {
    EXPECT_TRUE(golden::all_close(z.select(0, i), ember::matmul(x.select(0, i), y.select(0, i)), {0, 0}));
  }
}

TEST(Matmul, OutWritesIntoOutsMemory) {
  ember::manual_seed(14);
  const Tensor a = ember::randn({70, 90}), b = ember::randn({90, 50});
  Tensor out = ember::full({70, 50}, 7.0);
  const void* memory = out.data_ptr();
  const uint32_t version = out.version();
  Tensor& returned = ember::matmul_out(out, a, b);
  EXPECT_EQ(&returned, &out);
  EXPECT_EQ(out.data_ptr(), memory);
  EXPECT_GT(out.version(), version);
  EXPECT_TRUE(golden::all_close(out, ember::matmul(a, b), {0, 0}));

  // A strided view of a bigger buffer: only the view's elements change.
  Tensor buffer = ember::zeros({70, 100});
  Tensor view = buffer.slice(1, 0, 100, 2);
  ember::matmul_out(view, a, b);
  EXPECT_TRUE(golden::all_close(buffer.slice(1, 0, 100, 2), ember::matmul(a, b), {0, 0}));
  EXPECT_TRUE(golden::all_close(buffer.slice(1, 1, 100, 2), ember::zeros({70, 50}), {0, 0}));

  // out aliasing an input: the product still reads the original values.
  Tensor square = ember::randn({40, 40});
  const Tensor expected = ember::matmul(square, square);
  ember::matmul_out(square, square, square.clone());
  EXPECT_TRUE(golden::all_close(square, expected, {0, 0}));

  // 1-D results and wrong shapes or dtypes.
  Tensor vector_out = ember::empty({70});
  ember::matmul_out(vector_out, a, b.select(1, 3));
  EXPECT_TRUE(golden::all_close(vector_out, ember::matmul(a, b).select(1, 3), {1e-6, 1e-5}));
  Tensor wrong_shape = ember::empty({50, 70});
  EXPECT_THROW(ember::matmul_out(wrong_shape, a, b), ember::Error);
  Tensor wrong_dtype = ember::empty({70, 50}, ember::kFloat64);
  EXPECT_THROW(ember::matmul_out(wrong_dtype, a, b), ember::Error);
  Tensor overlapping = ember::empty({50}).expand({70, 50});
  EXPECT_THROW(ember::matmul_out(overlapping, a, b), ember::Error);
}

TEST(Matmul, ResultDoesNotDependOnThreadCount) {
  ThreadCountGuard guard;
  ember::manual_seed(15);
  const std::vector<std::pair<Tensor, Tensor>> problems = {
      {ember::randn({300, 500}), ember::randn({500, 400})},      // packed, split along m
      {ember::randn({64, 784}), ember::randn({128, 784}).t()},   // packed, split along n
      {ember::randn({16, 70, 33}), ember::randn({16, 33, 45})},  // batched: threads over the batch
      {ember::randn({1, 3000}), ember::randn({3000, 700})},      // vector @ matrix
      {ember::randn({700, 3000}), ember::randn({3000, 1})},      // matrix @ vector
      {ember::randn({200, 300}, ember::kFloat64), ember::randn({300, 100}, ember::kFloat64)},
      {ember::randint(-50, 50, {200, 300}).to(ember::kInt32), ember::randint(-50, 50, {300, 100}).to(ember::kInt32)},
  };
  for (const auto& [a, b] : problems) {
    ember::set_num_threads(1);
    const Tensor one = ember::matmul(a, b);
    ember::set_num_threads(2);
    const Tensor two = ember::matmul(a, b);
    ember::set_num_threads(3);
    const Tensor three = ember::matmul(a, b);
    EXPECT_TRUE(golden::all_close(two, one, {0, 0})) << a.shape() << " @ " << b.shape();
    EXPECT_TRUE(golden::all_close(three, one, {0, 0})) << a.shape() << " @ " << b.shape();
  }
}

TEST(Matmul, EverySimdTargetAgrees) {
  // Forces each Highway target this CPU runs (AVX2, SSE4, scalar: 8, 4 and 1 float lanes) through
  // the packed path, the unpacked row and dot-product forms and a matrix-vector product.
  ember::manual_seed(16);
  const std::vector<std::pair<Tensor, Tensor>> problems = {
      {ember::randn({67, 300}, ember::kFloat64), ember::randn({300, 45}, ember::kFloat64)},
      {ember::randn({45, 300}, ember::kFloat64).t(), ember::randn({67, 45}, ember::kFloat64).t()},
      {ember::randn({5, 7}, ember::kFloat64), ember::randn({7, 3}, ember::kFloat64)},
      {ember::randn({41, 50}, ember::kFloat64), ember::randn({50, 30}, ember::kFloat64)},
      {ember::randn({9, 13}, ember::kFloat64), ember::randn({6, 13}, ember::kFloat64).t()},
      {ember::randn({31, 17}, ember::kFloat64), ember::randn({17, 1}, ember::kFloat64)},
  };
  const std::string compiled = "," + ember::build_info().simd_compiled + ",";
  const auto check_problems = [&] {
    for (const auto& [a, b] : problems) {
      const Tensor expected = naive_matmul(a, b);
      EXPECT_TRUE(golden::all_close(ember::matmul(a, b), expected, {1e-12, 1e-12}));
      EXPECT_TRUE(golden::all_close(ember::matmul(a.to(ember::kFloat32), b.to(ember::kFloat32)).to(ember::kFloat64),
                                    expected, {1e-5, 1e-4}));
      const Tensor bias = ember::randn({b.size(1)}, ember::kFloat64);
      EXPECT_TRUE(golden::all_close(ember::linear(a, b.t(), bias), expected + bias, {1e-12, 1e-12}));
    }
  };
  int tested = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    const std::string name = hwy::TargetName(target);
    if (compiled.find("," + name + ",") == std::string::npos) continue;  // not built into ember
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(name);
    ASSERT_EQ(ember::build_info().simd_target, name);
    ++tested;
    check_problems();
  }
  hwy::SetSupportedTargetsForTest(0);
  // Every x86 CPU runs at least SSE4 and scalar, unless EMBER_MAX_CPU_ISA=SCALAR leaves one or the
  // build compiled one target (the sanitizer builds).
  const char* cap = std::getenv("EMBER_MAX_CPU_ISA");
  const bool one_target = compiled.find(',', 1) == compiled.size() - 1;
  // A build of one target compiled for this machine (-march=native: AVX3_DL on an AVX-512 VNNI CPU)
  // may have a target this test's own Highway list does not generate: check the one ember runs.
  if (tested == 0 && one_target) {
    SCOPED_TRACE(ember::build_info().simd_target);
    ++tested;
    check_problems();
  }
  EXPECT_GE(tested, (cap != nullptr && std::string(cap) == "SCALAR") || one_target ? 1 : 2);
}

TEST(Matmul, HalfPrecisionRoundsOnce) {
  ember::manual_seed(17);
  for (const ember::DType dtype : {ember::kFloat16, ember::kBFloat16}) {
    const Tensor a = ember::randn({37, 300}).to(dtype), b = ember::randn({300, 29}).to(dtype);
    const Tensor in_float = ember::matmul(a.to(ember::kFloat32), b.to(ember::kFloat32)).to(dtype);
    EXPECT_TRUE(golden::all_close(ember::matmul(a, b), in_float, {0, 0})) << dtype;
  }
}

TEST(Matmul, IntegersWrapAround) {
  const Tensor a = ember::full({3, 300}, 100, ember::kInt8), b = ember::full({300, 2}, 3, ember::kInt8);
  // 300 * 300 = 90000 = 351 * 256 + 144, and 144 wraps to -112 in int8.
  EXPECT_TRUE(golden::all_close(ember::matmul(a, b), ember::full({3, 2}, -112, ember::kInt8), {0, 0}));
  const Tensor u = ember::full({2, 5}, 200, ember::kUInt8);
  EXPECT_TRUE(golden::all_close(ember::matmul(u, u.t()), ember::full({2, 2}, 64, ember::kUInt8), {0, 0}));
}

TEST(Linear, MatchesMatmulPlusBias) {
  ember::manual_seed(18);
  const Tensor x = ember::randn({4, 25, 300}), weight = ember::randn({70, 300}), bias = ember::randn({70});
  const Tensor expected = ember::matmul(x, weight.t()) + bias;
  EXPECT_TRUE(golden::all_close(ember::linear(x, weight, bias), expected, {1e-5, 1e-5}));
  // A bias that differs per row goes in as C (beta = 1) before the product is added.
  const Tensor rows_bias = ember::randn({25, 70});
  EXPECT_TRUE(
      golden::all_close(ember::linear(x, weight, rows_bias), ember::matmul(x, weight.t()) + rows_bias, {1e-5, 1e-5}));
  // x viewed with a transposed layout, and a strided bias.
  const Tensor xt = ember::randn({300, 25}).t();
  const Tensor strided_bias = ember::randn({140}).slice(0, std::nullopt, std::nullopt, 2);
  EXPECT_TRUE(golden::all_close(ember::linear(xt, weight, strided_bias), ember::matmul(xt, weight.t()) + strided_bias,
                                {1e-5, 1e-5}));
}

TEST(Linalg, ErrorsNameTheOpAndShapes) {
  const auto starts_with = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  const auto contains = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };

  std::string e = error_of([] { ember::matmul(ember::ones({2, 3}), ember::ones({4, 5})); });
  EXPECT_TRUE(starts_with(e, "[matmul]")) << e;
  EXPECT_TRUE(contains(e, "[2, 3]") && contains(e, "[4, 5]")) << e;

  e = error_of([] { ember::matmul(ember::ones({2, 3, 4}), ember::ones({3, 4, 5})); });
  EXPECT_TRUE(starts_with(e, "[matmul]")) << e;
  EXPECT_TRUE(contains(e, "[2]") && contains(e, "[3]")) << e;

  e = error_of([] { ember::matmul(ember::ones({}), ember::ones({3})); });
  EXPECT_TRUE(starts_with(e, "[matmul]") && contains(e, "[]") && contains(e, "[3]")) << e;

  e = error_of([] { ember::matmul(ember::ones({2, 3}), ember::ones({3, 4}, ember::kFloat64)); });
  EXPECT_TRUE(starts_with(e, "[matmul]") && contains(e, "float32") && contains(e, "float64")) << e;

  e = error_of([] { ember::matmul(ember::ones({2, 3}, ember::kBool), ember::ones({3, 4}, ember::kBool)); });
  EXPECT_TRUE(starts_with(e, "[matmul]") && contains(e, "bool")) << e;

  e = error_of([] {
    Tensor out = ember::empty({3, 3});
    ember::matmul_out(out, ember::ones({2, 3}), ember::ones({3, 4}));
  });
  EXPECT_TRUE(starts_with(e, "[matmul]") && contains(e, "[3, 3]") && contains(e, "[2, 4]")) << e;

  e = error_of([] { ember::linear(ember::ones({3, 5}), ember::ones({4, 6})); });
  EXPECT_TRUE(starts_with(e, "[linear]") && contains(e, "[3, 5]") && contains(e, "[4, 6]")) << e;

  e = error_of([] { ember::linear(ember::ones({3, 5}), ember::ones({4, 5}), ember::ones({5})); });
  EXPECT_TRUE(starts_with(e, "[linear]") && contains(e, "[5]") && contains(e, "[3, 4]")) << e;

  e = error_of([] { ember::linear(ember::ones({3, 5}), ember::ones({2, 4, 5})); });
  EXPECT_TRUE(starts_with(e, "[linear]") && contains(e, "[2, 4, 5]")) << e;

  e = error_of([] { ember::linear(ember::ones({3, 5}), ember::ones({4, 5}), ember::ones({4}, ember::kFloat64)); });
  EXPECT_TRUE(starts_with(e, "[linear]") && contains(e, "float64")) << e;
}

// A size-0 dim where a >= 3-D operand meets a 1-D or 2-D one: the gradients are zeros of the
// operands' shapes, as PyTorch (the backward once computed a (k, rows) x (rows, n) product with
// rows counted as 0).
TEST(Matmul, BackwardWithSizeZeroDims) {
  const std::vector<std::pair<ember::Shape, ember::Shape>> cases = {
      {{3, 7, 1}, {1, 0}}, {{3, 4, 0}, {0, 5}}, {{1, 3, 0}, {0, 3}}, {{3, 4, 1, 0}, {0}}};
  for (const auto& [sa, sb] : cases) {
    const Tensor a = ember::randn(sa).requires_grad_(), b = ember::randn(sb).requires_grad_();
    ember::matmul(a, b).sum().backward();
    ASSERT_TRUE(a.grad().defined() && b.grad().defined()) << sa << " @ " << sb;
    EXPECT_EQ(a.grad().shape(), sa);
    EXPECT_EQ(b.grad().shape(), sb);
    EXPECT_EQ(a.grad().abs().sum().item<float>(), 0.0f) << sa << " @ " << sb;
    if (b.numel() > 0) {
      EXPECT_EQ(b.grad().abs().sum().item<float>(), 0.0f) << sa << " @ " << sb;
    }
  }
}

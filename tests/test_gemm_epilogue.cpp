// The CPU GEMM kernel (kernels/cpu/gemm.h) against a double-precision triple loop: odd sizes that
// leave partial register tiles and cross packed blocks of k, every layout of A and B (row-major,
// transposed, strided), alpha and beta, every fused epilogue (bias, ReLU, both GELUs, SiLU,
// residual at any strides, scaling), both register-tile shapes (AVX2's 6 rows and AVX-512's 14,
// forced on this CPU), and independence from the thread count. Then linear_gelu: agreement with
// gelu(linear(...)) and its errors (its golden cases and gradchecks are its registry entry,
// tests/ops_linalg.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ember/nn/functional.h"
#include "ember/ops.h"
#include "golden.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm.h"
#include "test_util.h"

namespace {

using ember::Activation;
using ember::Tensor;
using ember::cpu::GemmArgs;

constexpr Activation kActivations[] = {Activation::kNone, Activation::kRelu, Activation::kGeluErf,
                                       Activation::kGeluTanh, Activation::kSilu};

const char* name_of(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSilu:
      return "silu";
  }
  return "?";
}

double activate(Activation activation, double v) {
  switch (activation) {
    case Activation::kNone:
      return v;
    case Activation::kRelu:
      return v < 0 ? 0 : v;
    case Activation::kGeluErf:
      return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case Activation::kSilu:
      return v / (1 + std::exp(-v));
  }
  return v;
}

// How a matrix is laid out in memory.
enum class Layout { kRowMajor, kTransposed, kStrided };

const char* name_of(Layout layout) {
  return layout == Layout::kRowMajor ? "row-major" : layout == Layout::kTransposed ? "transposed" : "strided";
}

// A rows x cols matrix of values in [-1, 1] stored in `layout` (strided: every other column of
// rows padded by one element, so neither stride is 1).
template <class T>
struct Matrix {
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;
  std::vector<T> storage;

  Matrix(int64_t r, int64_t c, Layout layout, std::mt19937& rng) : rows(r), cols(c) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    switch (layout) {
      case Layout::kRowMajor:
        row_stride = cols;
        col_stride = 1;
        break;
      case Layout::kTransposed:
        row_stride = 1;
        col_stride = rows;
        break;
      case Layout::kStrided:
        row_stride = 2 * cols + 1;
        col_stride = 2;
        break;
    }
    storage.resize(static_cast<size_t>(std::max<int64_t>(1, (rows - 1) * row_stride + (cols - 1) * col_stride + 1)));
    for (T& v : storage) v = static_cast<T>(dist(rng));
  }
  T& at(int64_t i, int64_t j) { return storage[static_cast<size_t>(i * row_stride + j * col_stride)]; }
  T at(int64_t i, int64_t j) const { return storage[static_cast<size_t>(i * row_stride + j * col_stride)]; }
};

// C (c, at the given strides) = A @ B: the GemmArgs with no epilogue yet.
template <class T>
GemmArgs product_args(const Matrix<T>& a, const Matrix<T>& b, T* c, int64_t c_row_stride, int64_t c_col_stride) {
  GemmArgs args;
  args.dtype = ember::dtype_of<T>();
  args.m = a.rows;
  args.n = b.cols;
  args.k = a.cols;
  args.a = a.storage.data();
  args.a_row_stride = a.row_stride;
  args.a_col_stride = a.col_stride;
  args.b = b.storage.data();
  args.b_row_stride = b.row_stride;
  args.b_col_stride = b.col_stride;
  args.c = c;
  args.c_row_stride = c_row_stride;
  args.c_col_stride = c_col_stride;
  return args;
}

// What one GEMM call adds on top of A @ B.
struct Epilogue {
  double alpha = 1.0;
  double beta = 0.0;
  bool bias = false;
  Activation activation = Activation::kNone;
  std::optional<Layout> residual;  // its layout, or none
};

std::string describe(int64_t m, int64_t n, int64_t k, Layout a, Layout b, const Epilogue& e) {
  return std::to_string(m) + "x" + std::to_string(k) + " @ " + std::to_string(k) + "x" + std::to_string(n) + ", A " +
         name_of(a) + ", B " + name_of(b) + ", alpha " + std::to_string(e.alpha) + ", beta " + std::to_string(e.beta) +
         (e.bias ? ", bias" : "") + ", " + name_of(e.activation) +
         (e.residual ? std::string(", residual ") + name_of(*e.residual) : "");
}

// Runs one GEMM on `threads` threads and checks every element of C against the double loop.
template <class T>
void check_gemm(int64_t m, int64_t n, int64_t k, Layout a_layout, Layout b_layout, const Epilogue& e, int threads = 2) {
  std::mt19937 rng(static_cast<uint32_t>(m * 1000003 + n * 1009 + k));
  const Matrix<T> a(m, k, a_layout, rng), b(k, n, b_layout, rng);
  Matrix<T> c(m, n, Layout::kRowMajor, rng);  // old values: beta reads them, beta == 0 must not
  const Matrix<T> residual(m, n, e.residual.value_or(Layout::kRowMajor), rng);
  std::vector<T> bias(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) bias[static_cast<size_t>(j)] = static_cast<T>(0.25 * std::sin(0.7 * j));
  if (e.beta == 0.0) {
    for (T& v : c.storage) v = std::numeric_limits<T>::quiet_NaN();
  }
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(a.at(i, p)) * static_cast<double>(b.at(p, j));
      double v = e.alpha * sum;
      if (e.beta != 0.0) v += e.beta * static_cast<double>(c.at(i, j));
      if (e.bias) v += static_cast<double>(bias[static_cast<size_t>(j)]);
      v = activate(e.activation, v);
      if (e.residual) v += static_cast<double>(residual.at(i, j));
      expected[static_cast<size_t>(i * n + j)] = v;
    }
  }

  GemmArgs args = product_args(a, b, c.storage.data(), c.row_stride, c.col_stride);
  args.alpha = e.alpha;
  args.beta = e.beta;
  args.bias = e.bias ? bias.data() : nullptr;
  args.activation = e.activation;
  if (e.residual) {
    args.residual = residual.storage.data();
    args.residual_row_stride = residual.row_stride;
    args.residual_col_stride = residual.col_stride;
  }
  {
    test_util::ThreadCountGuard guard;
    ember::set_num_threads(threads);
    ember::cpu::gemm(args);
  }
  // Sums of k products of values in [-1, 1]: float rounding grows with k.
  const double atol = (std::is_same_v<T, float> ? 2e-6 : 1e-14) * static_cast<double>(k + 4);
  const double rtol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  int64_t failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < n && failures < 5; ++j) {
      const double want = expected[static_cast<size_t>(i * n + j)];
      const double got = static_cast<double>(c.at(i, j));
      if (!(std::abs(got - want) <= atol + rtol * std::abs(want))) {
        ADD_FAILURE() << describe(m, n, k, a_layout, b_layout, e) << ": C[" << i << ", " << j << "] = " << got
                      << ", expected " << want;
        ++failures;
      }
    }
  }
}

// Forces the AVX-512 tile shape (14 rows) for the scope.
class WideTile {
 public:
  explicit WideTile(bool on) { ember::cpu::gemm_force_wide_tile_for_testing(on); }
  ~WideTile() { ember::cpu::gemm_force_wide_tile_for_testing(false); }
  WideTile(const WideTile&) = delete;
  WideTile& operator=(const WideTile&) = delete;
};

constexpr Layout kLayoutPairs[][2] = {{Layout::kRowMajor, Layout::kRowMajor},
                                      {Layout::kRowMajor, Layout::kTransposed},
                                      {Layout::kTransposed, Layout::kRowMajor},
                                      {Layout::kTransposed, Layout::kTransposed},
                                      {Layout::kStrided, Layout::kStrided}};

template <class T>
void odd_sizes(bool wide) {
  const WideTile tile(wide);
  for (int64_t m : {1, 7, 17, 33, 65, 129}) {
    for (int64_t n : {1, 7, 17, 33, 65, 129}) {
      for (int64_t k : {1, 17, 300}) {
        for (const auto& layouts : kLayoutPairs) check_gemm<T>(m, n, k, layouts[0], layouts[1], Epilogue{});
      }
    }
  }
}

TEST(GemmKernel, OddSizesEveryLayoutFloat) { odd_sizes<float>(false); }
TEST(GemmKernel, OddSizesEveryLayoutDouble) { odd_sizes<double>(false); }
TEST(GemmKernel, OddSizesEveryLayoutWideTileFloat) { odd_sizes<float>(true); }
TEST(GemmKernel, OddSizesEveryLayoutWideTileDouble) { odd_sizes<double>(true); }

TEST(GemmKernel, AlphaBeta) {
  for (bool wide : {false, true}) {
    const WideTile tile(wide);
    for (const auto& [alpha, beta] : std::vector<std::pair<double, double>>{{0.5, 0.0}, {1.0, 1.0}, {-2.0, 0.75}}) {
      Epilogue e;
      e.alpha = alpha;
      e.beta = beta;
      for (int64_t size : {5, 33, 129}) {
        check_gemm<float>(size, size + 2, 2 * size + 300, Layout::kRowMajor, Layout::kTransposed, e);
        check_gemm<double>(size, size + 2, size, Layout::kStrided, Layout::kRowMajor, e);
      }
    }
  }
}

// Every epilogue on every path: packed with several KC blocks (k = 600) and edge tiles, the
// unpacked path (small), narrow n (dot products, or the transposed problem), and a vector.
template <class T>
void every_epilogue(bool wide) {
  const WideTile tile(wide);
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{37, 45, 600}, {130, 70, 64}, {5, 9, 4}, {64, 3, 20}, {1, 50, 30}};
  for (Activation activation : kActivations) {
    for (bool bias : {false, true}) {
      for (std::optional<Layout> residual : {std::optional<Layout>(), std::optional<Layout>(Layout::kRowMajor),
                                             std::optional<Layout>(Layout::kTransposed)}) {
        Epilogue e;
        e.activation = activation;
        e.bias = bias;
        e.residual = residual;
        e.alpha = residual ? 0.75 : 1.0;  // scaling
        e.beta = bias ? 0.0 : 0.5;
        for (const Shape& s : shapes) {
          check_gemm<T>(s.m, s.n, s.k, Layout::kRowMajor, Layout::kTransposed, e);
          check_gemm<T>(s.m, s.n, s.k, Layout::kTransposed, Layout::kRowMajor, e);
        }
      }
    }
  }
}

TEST(GemmEpilogue, EveryEpilogueFloat) { every_epilogue<float>(false); }
TEST(GemmEpilogue, EveryEpilogueDouble) { every_epilogue<double>(false); }
TEST(GemmEpilogue, EveryEpilogueWideTileFloat) { every_epilogue<float>(true); }

TEST(GemmEpilogue, StridedResidualAndStridedC) {
  Epilogue e;
  e.activation = Activation::kSilu;
  e.bias = true;
  e.residual = Layout::kStrided;
  check_gemm<float>(65, 33, 300, Layout::kStrided, Layout::kStrided, e);
  check_gemm<double>(17, 129, 17, Layout::kRowMajor, Layout::kRowMajor, e);
}

// Every element of C is summed in the same order whatever the split of the work: one thread and
// two give the same bits, epilogue included.
TEST(GemmEpilogue, ThreadCountIndependent) {
  for (bool wide : {false, true}) {
    const WideTile tile(wide);
    for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {100, 200, 600}, {64, 128, 784}, {7, 300, 50}, {300, 5, 40}}) {
      std::mt19937 rng(3);
      const Matrix<float> a(m, k, Layout::kRowMajor, rng), b(k, n, Layout::kTransposed, rng),
          residual(m, n, Layout::kRowMajor, rng);
      std::vector<float> bias(static_cast<size_t>(n), 0.125f);
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2}) {
        std::vector<float> c(static_cast<size_t>(m * n));
        GemmArgs args = product_args(a, b, c.data(), n, 1);
        args.bias = bias.data();
        args.activation = Activation::kGeluErf;
        args.residual = residual.storage.data();
        args.residual_row_stride = residual.row_stride;
        args.residual_col_stride = residual.col_stride;
        test_util::ThreadCountGuard guard;
        ember::set_num_threads(threads);
        ember::cpu::gemm(args);
        results.push_back(c);
      }
      EXPECT_EQ(results[0], results[1]) << m << "x" << k << " @ " << k << "x" << n << ", wide tile " << wide;
    }
  }
}

TEST(GemmEpilogue, IntegerResidualAndActivationError) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, residual = {100, 200, 300, 400};
  std::vector<int32_t> c(4);
  GemmArgs args;
  args.dtype = ember::kInt32;
  args.m = args.n = args.k = 2;
  args.a = a.data();
  args.a_row_stride = 2;
  args.a_col_stride = 1;
  args.b = b.data();
  args.b_row_stride = 2;
  args.b_col_stride = 1;
  args.c = c.data();
  args.c_row_stride = 2;
  args.c_col_stride = 1;
  args.residual = residual.data();
  args.residual_row_stride = 1;  // the residual read transposed
  args.residual_col_stride = 2;
  ember::cpu::gemm(args);
  EXPECT_EQ(c, (std::vector<int32_t>{19 + 100, 22 + 300, 43 + 200, 50 + 400}));
  args.activation = Activation::kRelu;
  test_util::expect_error([&] { ember::cpu::gemm(args); }, {"[gemm]", "floating-point", "int32"});
}

// GemmPath's promise: a block of rows and columns of a product, solved alone on the whole call's
// path (GemmArgs::path), gives the whole call's bits (graph/executor.cpp relies on it to leave a
// mask's blocks out, Note [masked products]). Every path, k below and above one packed block,
// blocks across tile edges, with alpha.
TEST(GemmKernel, BlocksOnTheWholeCallsPathGetItsBits) {
  using ember::cpu::GemmPath;
  struct Case {
    int64_t m, n, k;
    Layout a, b;
  };
  const std::vector<Case> cases = {
      {512, 300, 64, Layout::kRowMajor, Layout::kTransposed}, {200, 180, 40, Layout::kRowMajor, Layout::kRowMajor},
      {77, 131, 300, Layout::kRowMajor, Layout::kTransposed}, {90, 12, 33, Layout::kRowMajor, Layout::kTransposed},
      {90, 3, 33, Layout::kTransposed, Layout::kStrided},     {40, 48, 70, Layout::kRowMajor, Layout::kRowMajor}};
  std::vector<GemmPath> seen;
  for (bool wide : {false, true}) {
    const WideTile tile(wide);
    for (const Case& c : cases) {
      std::mt19937 rng(11);
      const Matrix<float> a(c.m, c.k, c.a, rng), b(c.k, c.n, c.b, rng);
      std::vector<float> whole(static_cast<size_t>(c.m * c.n));
      GemmArgs args = product_args(a, b, whole.data(), c.n, 1);
      args.alpha = 0.125;
      const GemmPath path = ember::cpu::gemm_path(args);
      ASSERT_NE(path, GemmPath::kOther);
      seen.push_back(path);
      ember::cpu::gemm(args);
      int same = 0;
      std::uniform_int_distribution<int64_t> row(0, c.m - 1), col(0, c.n - 1);
      for (int trial = 0; trial < 24; ++trial) {
        int64_t r0 = row(rng), r1 = row(rng), c0 = col(rng), c1 = col(rng);
        if (r0 > r1) std::swap(r0, r1);
        if (c0 > c1) std::swap(c0, c1);
        if (trial == 0) r0 = c0 = 0;  // the whole call's rows over fewer columns, and so on
        if (trial == 1) r1 = c.m - 1, c1 = c.n - 1;
        GemmArgs block = args;
        block.m = r1 - r0 + 1;
        block.n = c1 - c0 + 1;
        block.a = a.storage.data() + r0 * a.row_stride;
        block.b = b.storage.data() + c0 * b.col_stride;
        std::vector<float> out(static_cast<size_t>(block.m * block.n), NAN);
        block.c = out.data();
        block.c_row_stride = block.n;
        same += ember::cpu::gemm_path(block) == path ? 1 : 0;
        block.path = path;  // the whole call's, whatever the block's own would be
        ember::cpu::gemm(block);
        for (int64_t i = 0; i < block.m; ++i) {
          for (int64_t j = 0; j < block.n; ++j) {
            ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(i * block.n + j)]),
                      std::bit_cast<uint32_t>(whole[static_cast<size_t>((r0 + i) * c.n + c0 + j)]))
                << c.m << "x" << c.n << "x" << c.k << " rows " << r0 << ".." << r1 << " columns " << c0 << ".." << c1
                << " at (" << i << ", " << j << "), wide tile " << wide;
          }
        }
      }
      EXPECT_GE(same, 2) << c.m << "x" << c.n << "x" << c.k;  // some blocks take it of their own accord
    }
  }
  for (GemmPath path :
       {GemmPath::kPacked, GemmPath::kUnpackedRows, GemmPath::kUnpackedDots, GemmPath::kUnpackedTransposedRows}) {
    // One-lane vectors are never too narrow for n: the scalar target has no transposed form.
    if (path == GemmPath::kUnpackedTransposedRows && ember::cpu::cpu_isa() == ember::cpu::Isa::kScalar) continue;
    EXPECT_NE(std::find(seen.begin(), seen.end(), path), seen.end()) << static_cast<int>(path);
  }
  // A path the strides cannot take is an error, not a wrong product.
  std::mt19937 rng(5);
  const Matrix<float> a(20, 30, Layout::kRowMajor, rng), b(30, 40, Layout::kTransposed, rng);
  std::vector<float> c(20 * 40);
  GemmArgs args = product_args(a, b, c.data(), 40, 1);
  args.path = GemmPath::kUnpackedRows;  // B's rows are not contiguous
  test_util::expect_error([&] { ember::cpu::gemm(args); }, {"[gemm]", "cannot take path"});
  args.path = GemmPath::kPacked;
  ember::cpu::gemm(args);
  EXPECT_NEAR(
      c[0],
      [&] {
        double sum = 0;
        for (int64_t k = 0; k < 30; ++k) sum += a.at(0, k) * b.at(k, 0);
        return sum;
      }(),
      1e-5);
}

// Note [B packed once]: a B packed ahead (gemm_pack_b) gives the bits of packing it per call, on
// both branches of the packed path (A in one block, m <= 140 on AVX-512; and A in several),
// across uneven k blocks (601 = 201 + 201 + 199), partial micro-panels, every layout of B, both
// tiles, 1 and 2 threads, with an epilogue. Problems off the packed path have nothing to pack.
template <class T>
void packed_b_keeps_the_bits() {
  int packed_problems = 0;
  for (bool wide : {false, true}) {
    const WideTile tile(wide);
    for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {128, 384, 384}, {64, 150, 601}, {300, 277, 601}, {500, 1100, 300}, {140, 97, 257}}) {
      for (Layout layout : {Layout::kRowMajor, Layout::kTransposed, Layout::kStrided}) {
        std::mt19937 rng(static_cast<uint32_t>(m + n + k));
        const Matrix<T> a(m, k, Layout::kRowMajor, rng), b(k, n, layout, rng);
        std::vector<T> bias(static_cast<size_t>(n), T(0.25));
        std::vector<T> expected(static_cast<size_t>(m * n)), got(expected.size());
        GemmArgs args = product_args(a, b, expected.data(), n, 1);
        args.bias = bias.data();
        args.activation = Activation::kRelu;
        const int64_t size = ember::cpu::gemm_packed_b_size(args);
        ASSERT_EQ(size > 0, ember::cpu::gemm_path(args) == ember::cpu::GemmPath::kPacked ||
                                ember::cpu::gemm_path(args) == ember::cpu::GemmPath::kPackedWide);
        if (size == 0) continue;
        ++packed_problems;
        ember::cpu::gemm(args);
        std::vector<T> packed(static_cast<size_t>(size) + 64 / sizeof(T));
        T* aligned = packed.data();
        while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
        ember::cpu::gemm_pack_b(args, aligned);
        for (int threads : {1, 2}) {
          test_util::ThreadCountGuard guard;
          ember::set_num_threads(threads);
          std::fill(got.begin(), got.end(), T(-7));
          GemmArgs packed_args = args;
          packed_args.c = got.data();
          packed_args.b_packed = aligned;
          ember::cpu::gemm(packed_args);
          ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin(),
                                 [](T x, T y) {
                                   return std::bit_cast<std::array<char, sizeof(T)>>(x) ==
                                          std::bit_cast<std::array<char, sizeof(T)>>(y);
                                 }))
              << m << "x" << k << " @ " << k << "x" << n << ", B " << name_of(layout) << ", wide tile " << wide << ", "
              << threads << " threads";
        }
      }
    }
  }
  EXPECT_GE(packed_problems, 20);  // of 30
  std::mt19937 rng(1);
  const Matrix<T> a(1, 64, Layout::kRowMajor, rng), b(64, 64, Layout::kRowMajor, rng);
  std::vector<T> c(64);
  const GemmArgs vector_times_matrix = product_args(a, b, c.data(), 64, 1);
  EXPECT_EQ(ember::cpu::gemm_packed_b_size(vector_times_matrix), 0);
  test_util::expect_error([&] { ember::cpu::gemm_pack_b(vector_times_matrix, c.data()); },
                          {"does not take the packed path"});
}

TEST(GemmKernel, PackedBKeepsTheBitsFloat) { packed_b_keeps_the_bits<float>(); }
TEST(GemmKernel, PackedBKeepsTheBitsDouble) { packed_b_keeps_the_bits<double>(); }

// A weight multiplied again at the same version is packed once and kept on its storage (Note [B
// packed once]): the third product reads the kept panels and gives the first one's bits; a write
// to the weight (in place, through a view) retires them, so the products follow the new values.
TEST(GemmKernel, KeptPackingOfAWeightFollowsItsWrites) {
  ember::manual_seed(4);
  const Tensor x = ember::randn({96, 200});
  Tensor w = ember::randn({150, 200});  // a linear's (out, in) weight: B is its transpose
  const Tensor bias = ember::randn({150});
  const auto reference = [&](const Tensor& weight) {
    return ember::nn::functional::linear(x, weight.clone(), bias);  // a fresh storage: packed per call
  };
  const Tensor first = ember::nn::functional::linear(x, w, bias);
  EXPECT_TRUE(golden::all_close(first, reference(w), {0, 0}));
  for (int call = 0; call < 3; ++call) {
    EXPECT_TRUE(golden::all_close(ember::nn::functional::linear(x, w, bias), first, {0, 0})) << "call " << call;
  }
  w.narrow(0, 10, 5).mul_(-3.0);  // a write through a view of the same storage
  const Tensor changed = reference(w);
  EXPECT_FALSE(golden::all_close(changed, first, {0, 0}));
  for (int call = 0; call < 3; ++call) {
    EXPECT_TRUE(golden::all_close(ember::nn::functional::linear(x, w, bias), changed, {0, 0})) << "call " << call;
  }
  // The same storage as B in another layout (w @ w.T reads w both ways) keeps a form of its own.
  const Tensor square = ember::matmul(w, w.t());
  EXPECT_TRUE(golden::all_close(ember::matmul(w, w.t()), square, {0, 0}));
  EXPECT_TRUE(golden::all_close(ember::matmul(w, w.t()), ember::matmul(w.clone(), w.clone().t()), {0, 0}));
}

TEST(GemmKernel, MicroKernelIsNamed) {
  const std::string name = ember::cpu::gemm_micro_kernel_name();
  EXPECT_FALSE(name.empty());
}

// --- linear_gelu ----------------------------------------------------------------------------------

TEST(LinearGelu, AgreesWithGeluOfLinear) {
  ember::manual_seed(5);
  for (const char* approximate : {"none", "tanh"}) {
    for (const auto& [rows, in, out] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 784, 128}, {37, 300, 45}, {3, 5, 7}, {1, 64, 33}}) {
      const Tensor x = ember::randn({rows, in});
      const Tensor w = ember::mul(ember::randn({out, in}), 0.05);
      const Tensor b = ember::randn({out});
      const Tensor fused = ember::nn::functional::linear_gelu(x, w, b, approximate);
      const Tensor reference = ember::gelu(ember::linear(x, w, b), approximate);
      EXPECT_TRUE(golden::all_close(fused, reference, {1e-5, 1e-5})) << approximate << " " << rows << "x" << in;
    }
  }
}

TEST(LinearGelu, Errors) {
  const Tensor x = ember::randn({3, 5}), w = ember::randn({4, 5});
  test_util::expect_error([&] { ember::linear_gelu(x, w, std::nullopt, "fast"); }, {"[linear_gelu]", "approximate"});
  test_util::expect_error([&] { ember::linear_gelu(x, ember::randn({4, 6})); }, {"[linear_gelu]", "features"});
  test_util::expect_error(
      [&] {
        ember::linear_gelu(ember::ones({3, 5}, ember::kInt64), ember::ones({4, 5}, ember::kInt64));
      },
      {"[linear_gelu]", "floating-point"});
  test_util::expect_error([&] { ember::linear_gelu(x, w, ember::randn({3})); }, {"[linear_gelu]", "broadcast"});
}

}  // namespace

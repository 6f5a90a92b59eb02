// The fast paths of the fused CPU kernels against plain double-precision references: softmax and
// log_softmax over short rows (vectorized across rows) and long rows, their fused backward, the
// vectorized cross-entropy and layer/RMS norm rows, and the blocked transposed copy. Sizes sit
// around the vector width, the short-row limit and the thread grain; special values (nan, +inf,
// rows of -inf) take the scalar fallbacks; results must not depend on the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "ember/autograd.h"
#include "ember/info.h"
#include "ember/nn/functional.h"
#include "ember/ops.h"
#include "test_util.h"

namespace {

using ember::Tensor;
namespace F = ember::nn::functional;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Values of t as doubles, row-major.
std::vector<double> values(const Tensor& t) { return t.to(ember::kFloat64).contiguous().to_vector<double>(); }

// Expects actual ~ expected elementwise, nan where expected is nan, equal infinities.
void expect_near(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e)) {
      ok = std::isnan(a);
    } else if (std::isinf(e)) {
      ok = a == e;
    } else {
      ok = std::abs(a - e) <= tol * (1 + std::abs(e));
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
    }
  }
}

// Softmax / log_softmax of each row of (rows, n) values, in double, with PyTorch's special rows.
std::vector<double> reference_softmax(const std::vector<double>& x, int64_t rows, int64_t n, bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * n;
    double m = -kInf;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      nan = nan || std::isnan(row[i]);
      m = std::max(m, row[i]);
    }
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(row[i] - m);
    for (int64_t i = 0; i < n; ++i) {
      const double v = log ? (row[i] - m) - std::log(s) : std::exp(row[i] - m) / s;
      y[r * n + i] = nan || !std::isfinite(m) ? kNan : v;
    }
  }
  return y;
}

Tensor random_matrix(int64_t rows, int64_t cols, ember::DType dtype, uint64_t seed) {
  ember::manual_seed(seed);
  return (ember::randn({rows, cols}) * 3.0).to(dtype);
}

TEST(SpeedPaths, SoftmaxRowsMatchReference) {
  for (ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    const double tol = dtype == ember::kFloat32 ? 2e-6 : 1e-13;
    for (int64_t n : {1, 3, 7, 8, 9, 10, 15, 16, 17, 31, 33, 100, 1024}) {
      for (int64_t rows : {1, 5, 8, 9, 17, 33, 1000}) {
        const Tensor x = random_matrix(rows, n, dtype, static_cast<uint64_t>(n * 1000 + rows));
        const std::vector<double> xv = values(x);
        for (bool log : {false, true}) {
          const Tensor y = log ? ember::log_softmax(x, 1) : ember::softmax(x, 1);
          expect_near(values(y), reference_softmax(xv, rows, n, log), tol,
                      std::string(log ? "log_softmax" : "softmax") + " n=" + std::to_string(n) +
                          " rows=" + std::to_string(rows));
        }
      }
    }
  }
}

TEST(SpeedPaths, SoftmaxSpecialRows) {
  // 12 rows: short rows go through blocks of 4 or 8 lanes, so special rows share blocks with
  // ordinary ones; the long rows cover the per-row path.
  for (int64_t n : {5, 10, 40}) {
    std::vector<double> x(static_cast<size_t>(12 * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i)) * 4;
    x[1 * n + 2] = kNan;                                   // nan: the whole row nan
    x[3 * n + 0] = kInf;                                   // +inf: nan
    for (int64_t i = 0; i < n; ++i) x[5 * n + i] = -kInf;  // every element -inf: nan
    x[7 * n + 1] = -kInf;                                  // some -inf with a finite max: ordinary
    x[7 * n + n - 1] = -kInf;
    x[9 * n + n - 1] = 1e30;  // a huge but finite max
    for (ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
      const Tensor t = ember::from_vector(x, ember::Shape{12, n}).to(dtype);
      const std::vector<double> xv = values(t);
      for (bool log : {false, true}) {
        const Tensor y = log ? ember::log_softmax(t, 1) : ember::softmax(t, 1);
        expect_near(values(y), reference_softmax(xv, 12, n, log), dtype == ember::kFloat32 ? 2e-6 : 1e-13,
                    std::string(log ? "log_softmax" : "softmax") + " special n=" + std::to_string(n));
      }
    }
  }
}

// Note [masked rows] in softmax.cpp: a row ending in a run of -inf (a causal or padding mask) sums
// and writes only up to the run, in whole steps of the main loop. The result must be the bits of
// the same row ending in -1e30 instead (a finite value whose exp is 0 too, which takes no shortcut):
// tails of every length around the vector width, rows of every length, each float dtype, softmax
// and log_softmax (where the prefix before the tail must match).
TEST(SpeedPaths, SoftmaxRowsEndingInMinusInfinityKeepTheirBits) {
  for (ember::DType dtype : {ember::kFloat32, ember::kFloat64, ember::kFloat16, ember::kBFloat16}) {
    for (int64_t n : {17, 40, 64, 100, 512}) {
      const int64_t rows = n;  // row r ends in n - 1 - r masked values: every tail length, none to all but one
      const Tensor x = random_matrix(rows, n, ember::kFloat32, static_cast<uint64_t>(n));
      const Tensor tail = ember::ones({rows, n}, ember::kBool).triu(1);
      const Tensor masked = x.masked_fill(tail, -kInf).to(dtype), huge = x.masked_fill(tail, -1e30).to(dtype);
      EXPECT_TRUE(test_util::bitwise_equal(ember::softmax(masked, 1), ember::softmax(huge, 1))) << dtype << " n=" << n;
      const std::vector<double> got = values(ember::log_softmax(masked, 1)), want = values(ember::log_softmax(huge, 1));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = static_cast<size_t>(r * n + j);
          if (j <= r) {
            ASSERT_EQ(got[at], want[at]) << dtype << " n=" << n << " row " << r << " column " << j;
          } else {
            ASSERT_EQ(got[at], -kInf) << dtype << " n=" << n << " row " << r << " column " << j;
          }
        }
      }
    }
  }
}

TEST(SpeedPaths, SoftmaxOfNonContiguousInput) {
  const Tensor base = random_matrix(20, 9, ember::kFloat32, 7);
  const Tensor x = base.t();  // (9, 20), strided
  const Tensor expected_in = x.contiguous();
  EXPECT_EQ(values(ember::softmax(x, 1)), values(ember::softmax(expected_in, 1)));
  EXPECT_EQ(values(ember::log_softmax(x, 0)), values(ember::log_softmax(expected_in, 0)));
}

TEST(SpeedPaths, SoftmaxBackwardMatchesReference) {
  for (ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    const double tol = dtype == ember::kFloat32 ? 1e-5 : 1e-12;
    for (int64_t n : {1, 7, 8, 9, 10, 33, 1000}) {
      const int64_t rows = 13;
      Tensor x = random_matrix(rows, n, dtype, static_cast<uint64_t>(n));
      x.requires_grad_();
      const Tensor g = random_matrix(rows, n, dtype, static_cast<uint64_t>(n + 1));
      for (bool log : {false, true}) {
        const Tensor y = log ? ember::log_softmax(x, -1) : ember::softmax(x, -1);
        const std::vector<double> dx = values(ember::autograd::grad({y}, {x}, {g})[0]);
        const std::vector<double> yv = values(y.detach()), gv = values(g);
        std::vector<double> expected(yv.size());
        for (int64_t r = 0; r < rows; ++r) {
          double total = 0;
          for (int64_t i = 0; i < n; ++i) total += log ? gv[r * n + i] : gv[r * n + i] * yv[r * n + i];
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = r * n + i;
            expected[k] = log ? gv[k] - std::exp(yv[k]) * total : yv[k] * (gv[k] - total);
          }
        }
        expect_near(dx, expected, tol,
                    std::string(log ? "log_softmax" : "softmax") + " backward n=" + std::to_string(n));
      }
    }
  }
}

// Cross-entropy per row in double: lse - x[t], smoothed; 0 for ignored rows.
std::vector<double> reference_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& target,
                                            int64_t classes, double smoothing, std::vector<double>* grad) {
  const int64_t rows = static_cast<int64_t>(target.size());
  std::vector<double> loss(static_cast<size_t>(rows));
  grad->assign(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * classes;
    double m = -kInf, total = 0;
    for (int64_t c = 0; c < classes; ++c) {
      m = std::max(m, row[c]);
      total += row[c];
    }
    double s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(row[c] - m);
    const double lse = m + std::log(s);
    const int64_t t = target[static_cast<size_t>(r)];
    if (t < 0) continue;
    loss[static_cast<size_t>(r)] =
        (1 - smoothing) * (lse - row[t]) + smoothing * (lse - total / static_cast<double>(classes));
    for (int64_t c = 0; c < classes; ++c) {
      (*grad)[r * classes + c] =
          std::exp(row[c] - lse) - smoothing / static_cast<double>(classes) - (c == t ? 1 - smoothing : 0.0);
    }
  }
  return loss;
}

TEST(SpeedPaths, CrossEntropyRowsMatchReference) {
  for (ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    const double tol = dtype == ember::kFloat32 ? 1e-5 : 1e-12;
    for (int64_t classes : {1, 7, 8, 9, 33, 1000}) {
      for (double smoothing : {0.0, 0.2}) {
        const int64_t rows = 37;
        const Tensor x = random_matrix(rows, classes, dtype, static_cast<uint64_t>(classes));
        std::vector<int64_t> target(rows);
        for (int64_t r = 0; r < rows; ++r) target[static_cast<size_t>(r)] = r % 5 == 3 ? -100 : (r * 7) % classes;
        std::vector<double> grad;
        const std::vector<double> per_row = reference_cross_entropy(values(x), target, classes, smoothing, &grad);
        const Tensor t = ember::from_vector(target);
        const std::string what = "classes=" + std::to_string(classes) + " smoothing=" + std::to_string(smoothing);
        expect_near(values(F::cross_entropy(x, t, -100, ember::nn::Reduction::kNone, smoothing)), per_row, tol, what);
        // Sum reduction: the gradient is the per-row gradient itself.
        Tensor xg = x.clone().requires_grad_();
        const Tensor loss = F::cross_entropy(xg, t, -100, ember::nn::Reduction::kSum, smoothing);
        expect_near(values(ember::autograd::grad({loss}, {xg})[0]), grad, tol, what + " grad");
      }
    }
  }
}

TEST(SpeedPaths, CrossEntropySpecialRows) {
  const int64_t classes = 20;
  std::vector<double> x(static_cast<size_t>(4 * classes), 0.5);
  x[0 * classes + 3] = kNan;
  for (int64_t c = 0; c < classes; ++c) x[1 * classes + c] = -kInf;
  x[2 * classes + 4] = kInf;
  x[3 * classes + 5] = -kInf;  // ordinary row with one -inf score
  const Tensor scores = ember::from_vector(x, ember::Shape{4, classes}).to(ember::kFloat32);
  const std::vector<double> loss =
      values(F::cross_entropy(scores, ember::tensor<int64_t>({1, 1, 1, 1}), -100, ember::nn::Reduction::kNone));
  EXPECT_TRUE(std::isnan(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));  // -inf - -inf
  EXPECT_TRUE(std::isinf(loss[2]) || std::isnan(loss[2]));
  EXPECT_NEAR(loss[3], std::log(19.0), 1e-5);
}

// Layer norm (center) or RMS norm of (rows, cols) with weight and bias, and its gradients, in double.
void reference_norm(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& g, int64_t rows, int64_t cols, bool center, double eps,
                    std::vector<double>* y, std::vector<double>* dx, std::vector<double>* dw, std::vector<double>* db) {
  y->assign(x.size(), 0);
  dx->assign(x.size(), 0);
  dw->assign(static_cast<size_t>(cols), 0);
  db->assign(static_cast<size_t>(cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = x.data() + r * cols;
    double m = 0, v = 0;
    if (center) {
      for (int64_t j = 0; j < cols; ++j) m += in[j];
      m /= static_cast<double>(cols);
    }
    for (int64_t j = 0; j < cols; ++j) v += (in[j] - m) * (in[j] - m);
    const double rs = 1 / std::sqrt(v / static_cast<double>(cols) + eps);
    double a = 0, c = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (in[j] - m) * rs, gj = g[r * cols + j];
      (*y)[r * cols + j] = xhat * w[j] + (center ? b[j] : 0.0);
      (*dw)[j] += gj * xhat;
      (*db)[j] += gj;
      a += gj * w[j];
      c += gj * w[j] * xhat;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (in[j] - m) * rs;
      (*dx)[r * cols + j] = rs * (g[r * cols + j] * w[j] - (center ? a / static_cast<double>(cols) : 0.0) -
                                  xhat * c / static_cast<double>(cols));
    }
  }
}

TEST(SpeedPaths, RowNormsMatchReference) {
  for (ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    const double tol = dtype == ember::kFloat32 ? 5e-5 : 1e-10;
    for (int64_t cols : {1, 7, 8, 9, 31, 33, 513, 1030}) {
      for (int64_t rows : {1, 3, 65, 130}) {
        for (bool center : {true, false}) {
          Tensor x = random_matrix(rows, cols, dtype, static_cast<uint64_t>(rows * 7 + cols)) + 2.0;
          Tensor w = random_matrix(1, cols, dtype, 11).reshape({cols});
          Tensor b = random_matrix(1, cols, dtype, 12).reshape({cols});
          const Tensor g = random_matrix(rows, cols, dtype, 13);
          x.requires_grad_();
          w.requires_grad_();
          b.requires_grad_();
          const double eps = 1e-5;
          const Tensor y = center ? F::layer_norm(x, {cols}, w, b, eps) : F::rms_norm(x, {cols}, w, eps);
          const std::vector<Tensor> grads =
              center ? ember::autograd::grad({y}, {x, w, b}, {g}) : ember::autograd::grad({y}, {x, w}, {g});
          std::vector<double> ey, edx, edw, edb;
          reference_norm(values(x.detach()), values(w.detach()), values(b.detach()), values(g), rows, cols, center, eps,
                         &ey, &edx, &edw, &edb);
          const std::string what = std::string(center ? "layer_norm" : "rms_norm") + " rows=" + std::to_string(rows) +
                                   " cols=" + std::to_string(cols);
          expect_near(values(y.detach()), ey, tol, what);
          expect_near(values(grads[0]), edx, tol * 10, what + " dx");
          expect_near(values(grads[1]), edw, tol * 10, what + " dweight");
          if (center) expect_near(values(grads[2]), edb, tol * 10, what + " dbias");
        }
      }
    }
  }
}

TEST(SpeedPaths, TransposedCopyMatchesIndexing) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},  {1, 9},   {9, 1},     {7, 9},   {8, 8},
                                                           {9, 33}, {64, 65}, {130, 257}, {300, 70}};
  for (ember::DType dtype :
       {ember::kFloat32, ember::kFloat64, ember::kInt16, ember::kUInt8, ember::kInt64, ember::kInt32}) {
    for (auto [rows, cols] : shapes) {
      const Tensor x = ember::arange(rows * cols).reshape({rows, cols}).to(dtype);
      const Tensor y = x.t().contiguous();
      ASSERT_TRUE(y.is_contiguous());
      const std::vector<double> v = values(y), source = values(x);
      bool ok = true;
      for (int64_t i = 0; i < cols && ok; ++i) {
        for (int64_t j = 0; j < rows && ok; ++j) ok = v[i * rows + j] == source[j * cols + i];
      }
      EXPECT_TRUE(ok) << dtype << " " << rows << "x" << cols;
    }
  }
  // A batched permute: (4, 30, 50) -> (50, 4, 30) and a sliced (non-unit outer stride) source.
  const Tensor x = ember::arange(4 * 30 * 50).reshape({4, 30, 50}).to(ember::kFloat32);
  const Tensor p = x.permute({2, 0, 1}).contiguous();
  const std::vector<double> pv = values(p);
  bool ok = true;
  for (int64_t c = 0; c < 50 && ok; ++c) {
    for (int64_t a = 0; a < 4 && ok; ++a) {
      for (int64_t b = 0; b < 30 && ok; ++b)
        ok = pv[(c * 4 + a) * 30 + b] == static_cast<double>((a * 30 + b) * 50 + c);
    }
  }
  EXPECT_TRUE(ok) << "permute";
  const Tensor wide = ember::arange(40 * 100).reshape({40, 100}).to(ember::kFloat32);
  const Tensor sliced = wide.narrow(1, 3, 90).t().contiguous();  // (90, 40) from columns 3..92
  const std::vector<double> sv = values(sliced);
  ok = true;
  for (int64_t i = 0; i < 90 && ok; ++i) {
    for (int64_t j = 0; j < 40 && ok; ++j) ok = sv[i * 40 + j] == static_cast<double>(j * 100 + i + 3);
  }
  EXPECT_TRUE(ok) << "sliced";
}

TEST(SpeedPaths, StreamingTransposedCopyMatchesIndexing) {
  // Copies of at least 16 MiB take the streaming form (Note [streaming transpose]): whole
  // 1024 x 16 blocks, a last block of rows that is not a multiple of 8 (2100 = 2 x 1024 + 52), a
  // batched permute, and a destination whose rows are not 64-byte aligned (they fall back).
  struct Case {
    std::vector<int64_t> shape, order;
  };
  for (const Case& c : {Case{{2064, 2100}, {1, 0}}, Case{{3, 1200, 1200}, {0, 2, 1}}, Case{{2100, 2058}, {1, 0}}}) {
    const int64_t n = c.shape[0] * c.shape[1] * (c.shape.size() == 3 ? c.shape[2] : 1);
    const Tensor x = ember::arange(n).reshape(c.shape).to(ember::kFloat32);
    const Tensor y = x.permute(c.order).contiguous();
    ASSERT_TRUE(y.is_contiguous());
    const Tensor expected = x.permute(c.order).to(ember::kFloat64).contiguous().to(ember::kFloat32);
    EXPECT_TRUE(test_util::bitwise_equal(y, expected)) << y.shape();
  }
}

TEST(SpeedPaths, ElementwiseAroundTheGrain) {
  for (int64_t n : {1, 7, 8, 9, 31, 33, 32767, 32768, 32769, 65537}) {
    const Tensor a = ember::arange(n).to(ember::kFloat32), b = ember::full({n}, 0.5);
    const std::vector<float> sum = (a + b).to_vector<float>(), prod = (a * b).to_vector<float>();
    const std::vector<float> r = ember::relu(a - 3.0).to_vector<float>();
    bool ok = true;
    for (int64_t i = 0; i < n && ok; ++i) {
      const float x = static_cast<float>(i);
      ok = sum[i] == x + 0.5f && prod[i] == x * 0.5f && r[i] == std::max(x - 3.0f, 0.0f);
    }
    EXPECT_TRUE(ok) << n;
    const double total = static_cast<double>(n) * static_cast<double>(n - 1) / 2;  // rounded in float32
    EXPECT_NEAR(ember::sum(a).item<double>(), total, total * 1e-6) << n;
  }
}

TEST(SpeedPaths, ThreadCountDoesNotChangeResults) {
  test_util::ThreadCountGuard guard;
  const Tensor x = random_matrix(300, 700, ember::kFloat32, 3);
  const Tensor short_rows = random_matrix(5000, 10, ember::kFloat32, 4);
  const Tensor w = random_matrix(1, 700, ember::kFloat32, 5).reshape({700});
  const Tensor g = random_matrix(300, 700, ember::kFloat32, 6);
  const Tensor target = ember::randint(0, 700, {300});
  auto run = [&] {
    std::vector<std::vector<double>> out;
    out.push_back(values(ember::softmax(x, 1)));
    out.push_back(values(ember::log_softmax(short_rows, 1)));
    out.push_back(values(x.t().contiguous()));
    Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_();
    const Tensor y = F::layer_norm(xg, {700}, wg, w);
    for (const Tensor& t : ember::autograd::grad({y}, {xg, wg}, {g})) out.push_back(values(t));
    out.push_back(values(y.detach()));
    Tensor sg = x.clone().requires_grad_();
    const Tensor loss = F::cross_entropy(sg, target);
    out.push_back(values(loss.detach()));
    out.push_back(values(ember::autograd::grad({loss}, {sg})[0]));
    Tensor lg = short_rows.clone().requires_grad_();
    out.push_back(values(ember::autograd::grad({ember::log_softmax(lg, 1)}, {lg}, {short_rows})[0]));
    return out;
  };
  ember::set_num_threads(1);
  const auto one = run();
  ember::set_num_threads(2);
  const auto two = run();
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "result " << i;
}

}  // namespace

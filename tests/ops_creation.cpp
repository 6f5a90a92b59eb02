// The copy and creation ops' registry entries: copy (to(dtype) against PyTorch, core.json), fill,
// arange and linspace (core.json), and the random draws rand, randn and randint, whose reference is
// their distribution: the checks assert the range and moments of many draws, and that a seed gives
// the same values whatever the thread count.
#include <cmath>
#include <vector>

#include "op_registry.h"
#include "test_util.h"

namespace op_registry {
namespace {

using ember::DType;
using golden::Case;

// --- fill ---------------------------------------------------------------------------------------

// full, fill_ and zero_ write the value into every element they reach, in every dtype, and into no
// other: the elements a strided view skips keep theirs.
void fill_writes_every_element_it_reaches() {
  for (const DType dtype : {ember::kFloat32, ember::kFloat64, ember::kFloat16, ember::kBFloat16, ember::kInt64,
                            ember::kInt32, ember::kInt8, ember::kUInt8}) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    EXPECT_EQ(ember::full({2, 3}, 7, dtype).to_vector<double>(), std::vector<double>(6, 7.0));
    Tensor t = ember::full({5}, 3, dtype);
    t.zero_();
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(5, 0.0));
  }
  EXPECT_EQ(ember::full({3}, true).to_vector<bool>(), std::vector<bool>(3, true));
  EXPECT_EQ(ember::full({}, 4.5, ember::kFloat64).item<double>(), 4.5);

  Tensor base = ember::zeros({4, 6});
  base.slice(1, 1, std::nullopt, 2).fill_(2.5);  // the odd columns
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(base.at<float>({i, j}), j % 2 == 1 ? 2.5f : 0.0f) << i << ", " << j;
  }
  Tensor transposed = ember::ones({3, 5}, ember::kFloat64).t();
  transposed.fill_(-1.25);
  EXPECT_EQ(transposed.to_vector<double>(), std::vector<double>(15, -1.25));

  // Large enough to be split across threads.
  const Tensor big = ember::full({1000, 1000}, -3.25);
  EXPECT_EQ(ember::amin(big).item<float>(), -3.25f);
  EXPECT_EQ(ember::amax(big).item<float>(), -3.25f);
}

// --- random draws -------------------------------------------------------------------------------

struct Moments {
  double mean = 0;
  double variance = 0;
};

Moments moments_of(const std::vector<double>& values) {
  Moments m;
  for (const double x : values) m.mean += x;
  m.mean /= static_cast<double>(values.size());
  for (const double x : values) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(values.size());
  return m;
}

// The draw `draw()` makes after manual_seed(seed) gives the same values with 1, 2 and 4 threads (and
// is large enough to be split among them).
template <class Draw>
void expect_seeded_and_thread_independent(Draw draw) {
  const test_util::ThreadCountGuard guard;
  ember::set_num_threads(1);
  ember::manual_seed(42);
  const Tensor one = draw();
  for (const int threads : {2, 4}) {
    ember::set_num_threads(threads);
    ember::manual_seed(42);
    EXPECT_TRUE(golden::all_close(draw(), one, {0, 0})) << threads << " threads";
  }
  EXPECT_FALSE(golden::all_close(draw(), one, {0, 0})) << "the next draw repeats the last";
}

// Uniform [0, 1): every value in range, mean 1/2 and variance 1/12 over 100000 draws.
void rand_is_uniform_and_seeded() {
  expect_seeded_and_thread_independent([] { return ember::rand({1000, 100}); });
  ember::manual_seed(7);
  for (const DType dtype : {ember::kFloat32, ember::kFloat64}) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    const std::vector<double> u = ember::rand({1000, 100}, dtype).to_vector<double>();
    for (const double x : u) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
    }
    const Moments m = moments_of(u);
    EXPECT_NEAR(m.mean, 0.5, 0.01);
    EXPECT_NEAR(m.variance, 1.0 / 12, 0.002);
  }
  EXPECT_NE(ember::rand({4}).to_vector<float>(), ember::rand({4}).to_vector<float>());
}

// Standard normal: mean 0, variance 1, and 68.3% of the draws within one standard deviation.
void randn_is_standard_normal_and_seeded() {
  expect_seeded_and_thread_independent([] { return ember::randn({1000, 100}); });
  ember::manual_seed(8);
  for (const DType dtype : {ember::kFloat32, ember::kFloat64}) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    const std::vector<double> n = ember::randn({100000}, dtype).to_vector<double>();
    const Moments m = moments_of(n);
    EXPECT_NEAR(m.mean, 0.0, 0.02);
    EXPECT_NEAR(m.variance, 1.0, 0.02);
    int64_t within_one = 0;
    for (const double x : n) {
      ASSERT_TRUE(std::isfinite(x));
      within_one += std::abs(x) < 1.0 ? 1 : 0;
    }
    EXPECT_NEAR(static_cast<double>(within_one) / 100000.0, 0.6827, 0.01);
  }
}

// [low, high) and nothing else, every value drawn about equally often.
void randint_covers_its_range_and_is_seeded() {
  expect_seeded_and_thread_independent([] { return ember::randint(-50, 50, {1000, 100}); });
  ember::manual_seed(9);
  const Tensor r = ember::randint(-3, 4, {10000});
  EXPECT_EQ(r.dtype(), ember::kInt64);
  int counts[7] = {};
  for (const int64_t x : r.to_vector<int64_t>()) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[x + 3];
  }
  for (const int c : counts) EXPECT_GT(c, 1200);  // 10000 / 7 = 1429 expected
  EXPECT_EQ(ember::randint(0, 5, {3}, ember::kInt32).dtype(), ember::kInt32);
}

// --- the entries --------------------------------------------------------------------------------

std::vector<Entry> creation_entries() {
  return {
      Entry{.name = "copy",
            .ops = {OpKind::kCopy},
            .golden = {{"to", "core", "to",
                        [](const Case& c) -> std::vector<Tensor> {
                          return {c.tensor(0).to(golden::dtype_from_name(c.attrs.at("dtype")))};
                        }}},
            .gradchecks = {reduction_gradcheck("make_contiguous", [](const Tensor& x) { return x.contiguous(); }),
                           reduction_gradcheck("clone", [](const Tensor& x) { return x.clone(); }),
                           {"copy_inplace",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = ember::zeros({3, 4}, ember::kFloat64);
                              y.copy_(x[0]);
                              return y;
                            },
                            {{"same_shape", {in_t({3, 4})}}, {"broadcast", {in({4})}}}},
                           {"copy_over_non_leaf",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = non_leaf(x[0]);
                              y.copy_(x[1]);
                              return y * x[0];  // the old value of y gets no gradient through copy_
                            },
                            {{"contiguous", {in({3, 4}), in({3, 4})}}}}}},
      Entry{.name = "fill",
            .ops = {OpKind::kFill},
            .checks = {{"fill", fill_writes_every_element_it_reaches}},
            .gradchecks = {{"fill_inplace",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = non_leaf(x[0]);
                              y.fill_(2.0);
                              return y * x[0];
                            },
                            {{"contiguous", {in({3, 4})}}}},
                           {"zero_inplace",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = non_leaf(x[0]);
                              y.zero_();
                              return y + x[0];
                            },
                            {{"contiguous", {in({3, 4})}}}}}},
      Entry{.name = "arange",
            .ops = {OpKind::kArange},
            .golden = {{"", "core", "arange",
                        [](const Case& c) -> std::vector<Tensor> {
                          if (c.inputs.size() == 1) return {ember::arange(c.scalar(0))};
                          if (c.inputs.size() == 2) return {ember::arange(c.scalar(0), c.scalar(1))};
                          return {ember::arange(c.scalar(0), c.scalar(1), c.scalar(2))};
                        }}}},
      Entry{.name = "linspace",
            .ops = {OpKind::kLinspace},
            .golden = {{"", "core", "linspace",
                        [](const Case& c) -> std::vector<Tensor> {
                          return {
                              ember::linspace(c.scalar(0).to_double(), c.scalar(1).to_double(), c.scalar(2).to_int())};
                        }}}},
      Entry{.name = "rand", .ops = {OpKind::kRandUniform}, .checks = {{"rand", rand_is_uniform_and_seeded}}},
      Entry{.name = "randn", .ops = {OpKind::kRandNormal}, .checks = {{"randn", randn_is_standard_normal_and_seeded}}},
      Entry{.name = "randint",
            .ops = {OpKind::kRandInt},
            .checks = {{"randint", randint_covers_its_range_and_is_seeded}}},
  };
}

[[maybe_unused]] const bool kCreationRegistered = add(creation_entries());

}  // namespace
}  // namespace op_registry

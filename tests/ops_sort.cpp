// The registry entries of the triangles, scans, sorting and sampling ops: tril, triu, cumsum, sort
// (and argsort), topk and multinomial. Golden forwards against PyTorch (tests/golden/sort.json, made
// by cases_sort.py); forward checks of large inputs against references built from other ops (the
// parallel and heap paths), of the error messages, and of multinomial by its statistics (PyTorch's
// random stream differs); float64 gradchecks on contiguous, transposed and 3-D inputs (sort and topk
// on distinct values, where the selection is locally constant).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "op_registry.h"
#include "test_util.h"

namespace op_registry {
namespace {

using ember::DType;
using ember::Shape;
using golden::Case;
using golden::json;

int64_t dim_of(const Case& c) { return c.attrs.at("dim").get<int64_t>(); }
bool flag(const Case& c, const char* name) { return c.attrs.at(name).get<bool>(); }

GoldenForward sort_golden(const std::string& op, golden::OpFn fn) { return {op, "sort", op, std::move(fn)}; }

// topk's result ordered best first along dim, tied values by index (sorted = false leaves the
// order unspecified): by index, then by value with a stable sort.
ember::ValuesAndIndices best_first(const ember::ValuesAndIndices& r, int64_t dim, bool largest) {
  if (r.values.numel() == 0) return r;
  const Tensor by_index = ember::argsort(r.indices, dim);
  const Tensor values = ember::gather(r.values, dim, by_index), indices = ember::gather(r.indices, dim, by_index);
  const Tensor order = ember::argsort(values, dim, largest, /*stable=*/true);
  return {ember::gather(values, dim, order), ember::gather(indices, dim, order)};
}

// --- forward checks of large inputs -----------------------------------------------------------

// tril / triu of a stack of matrices large enough to run on several threads, against the mask built
// from the row and column indices.
void triangles_match_their_masks() {
  ember::manual_seed(3);
  const Tensor x = ember::randn({3, 700, 300});
  const Tensor rows = ember::arange(700).reshape({700, 1}), cols = ember::arange(300).reshape({1, 300});
  for (const int64_t diagonal : {-50, 0, 7, 299, -700}) {
    SCOPED_TRACE(diagonal);
    const Tensor offset = cols - rows;
    EXPECT_TRUE(test_util::bitwise_equal(ember::tril(x, diagonal), ember::where(offset <= diagonal, x, 0.0)));
    EXPECT_TRUE(test_util::bitwise_equal(ember::triu(x, diagonal), ember::where(offset >= diagonal, x, 0.0)));
  }
  // A non-contiguous batch of int64 matrices.
  const Tensor y = ember::randint(-9, 9, {40, 50, 6}).permute({2, 1, 0});
  const Tensor expected = ember::where(ember::arange(40).reshape({1, 40}) - ember::arange(50).reshape({50, 1}) <= 1, y,
                                       ember::zeros({}, ember::kInt64));
  EXPECT_TRUE(test_util::bitwise_equal(ember::tril(y, 1), expected));
}

// cumsum of long lines along the last dim and along an outer dim (several column blocks and
// threads) against sums taken in double, as the kernel does for float32.
void cumsum_matches_double_sums() {
  ember::manual_seed(4);
  const Tensor x = ember::randn({6, 50000});
  const std::vector<float> in = x.to_vector<float>();
  for (const int64_t dim : {1, 0}) {
    SCOPED_TRACE(dim);
    const std::vector<float> out = ember::cumsum(x, dim).to_vector<float>();
    const int64_t rows = 6, cols = 50000;
    std::vector<double> sums(static_cast<size_t>(dim == 1 ? rows : cols), 0.0);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        double& sum = sums[static_cast<size_t>(dim == 1 ? i : j)];
        sum += in[static_cast<size_t>(i * cols + j)];
        mismatches += out[static_cast<size_t>(i * cols + j)] != static_cast<float>(sum) ? 1 : 0;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// topk over rows of a vocabulary-sized float32 tensor (the text-generation case: the heap path for
// small k, the partition for large k) against the sorted rows, on 1 and 4 threads; then topk with
// ties: values equal to the sorted ones, indices distinct and pointing at those values.
void topk_matches_sort() {
  const test_util::ThreadCountGuard guard;
  ember::manual_seed(5);
  const Tensor x = ember::randn({8, 30000});
  const ember::ValuesAndIndices sorted = ember::sort(x, -1, true);
  for (const int threads : {1, 4}) {
    ember::set_num_threads(threads);
    for (const int64_t k : {1, 50, 5000}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, k = " << k);
      const ember::ValuesAndIndices top = ember::topk(x, k);
      EXPECT_TRUE(test_util::bitwise_equal(top.values, sorted.values.narrow(1, 0, k)));
      EXPECT_TRUE(test_util::bitwise_equal(top.indices, sorted.indices.narrow(1, 0, k)));
      const ember::ValuesAndIndices unsorted = best_first(ember::topk(x, k, -1, true, false), -1, true);
      EXPECT_TRUE(test_util::bitwise_equal(unsorted.values, top.values));
      EXPECT_TRUE(test_util::bitwise_equal(unsorted.indices, top.indices));
    }
    // The smallest along dim 0 of the transposed tensor.
    const ember::ValuesAndIndices low = ember::topk(x.t(), 20, 0, false);
    EXPECT_TRUE(test_util::bitwise_equal(low.values, ember::sort(x.t(), 0).values.narrow(0, 0, 20)));
  }
  // Ties: small integers repeat, so which tied index is taken is not checked, only that the
  // indices name distinct elements holding the values.
  const Tensor ties = ember::randint(0, 5, {6, 300}).to(ember::kFloat32);
  const ember::ValuesAndIndices top = ember::topk(ties, 40);
  EXPECT_TRUE(test_util::bitwise_equal(top.values, ember::sort(ties, -1, true).values.narrow(1, 0, 40)));
  EXPECT_TRUE(test_util::bitwise_equal(ember::gather(ties, 1, top.indices), top.values));
  for (int64_t r = 0; r < 6; ++r) {
    const std::vector<int64_t> row = top.indices.select(0, r).to_vector<int64_t>();
    EXPECT_EQ(std::set<int64_t>(row.begin(), row.end()).size(), row.size()) << "row " << r;
  }
}

// The Tensor methods give the free functions' results.
void methods_match_the_functions() {
  ember::manual_seed(6);
  const Tensor x = ember::randn({5, 7});
  EXPECT_TRUE(test_util::bitwise_equal(x.tril(1), ember::tril(x, 1)));
  EXPECT_TRUE(test_util::bitwise_equal(x.triu(-1), ember::triu(x, -1)));
  EXPECT_TRUE(test_util::bitwise_equal(x.cumsum(0, ember::kFloat64), ember::cumsum(x, 0, ember::kFloat64)));
  EXPECT_TRUE(test_util::bitwise_equal(x.sort(0, true).indices, ember::sort(x, 0, true).indices));
  EXPECT_TRUE(test_util::bitwise_equal(x.argsort(), ember::argsort(x)));
  const auto [values, indices] = x.topk(3, 0, false);
  EXPECT_TRUE(test_util::bitwise_equal(values, ember::topk(x, 3, 0, false).values));
  EXPECT_TRUE(test_util::bitwise_equal(indices, ember::topk(x, 3, 0, false).indices));
}

// Bad input throws an ember::Error naming the op.
void errors_name_the_op() {
  const Tensor x = ember::ones({3, 4});
  test_util::expect_error([&] { ember::tril(ember::ones({4})); }, {"[tril]", "at least 2 dimensions"});
  test_util::expect_error([&] { ember::triu(ember::ones({})); }, {"[triu]"});
  test_util::expect_error([&] { ember::cumsum(x, 2); }, {"[cumsum]", "out of range"});
  test_util::expect_error([&] { ember::sort(x, -3); }, {"[sort]"});
  test_util::expect_error([&] { ember::argsort(x, 5); }, {"[sort]"});
  test_util::expect_error([&] { ember::topk(x, 5); }, {"[topk]", "k = 5", "size 4"});
  test_util::expect_error([&] { ember::topk(x, -1); }, {"[topk]"});
  test_util::expect_error([&] { ember::topk(x.to(ember::kBool), 1); }, {"[topk]", "bool"});
}

// --- multinomial --------------------------------------------------------------------------------

// Pearson's chi-square statistic of `counts` against the expected fractions `p` (categories with
// p = 0 must have no count at all).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t total = 0;
  for (const int64_t c : counts) total += c;
  double statistic = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "category " << i << " has weight 0";
      continue;
    }
    const double expected = p[i] * static_cast<double>(total);
    statistic += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return statistic;
}

// The chi-square statistic's bound: with at most 4 degrees of freedom it exceeds 40 with
// probability below 1e-7, while an implementation off by a category, or drawing uniformly, lands
// in the thousands at these sample sizes.
constexpr double kChiSquareBound = 40.0;

std::vector<int64_t> count_of(const Tensor& samples, int64_t categories) {
  std::vector<int64_t> counts(static_cast<size_t>(categories), 0);
  for (const int64_t s : samples.contiguous().to_vector<int64_t>()) {
    EXPECT_TRUE(s >= 0 && s < categories) << s;
    if (s >= 0 && s < categories) ++counts[static_cast<size_t>(s)];
  }
  return counts;
}

// With replacement: the frequencies of 200000 draws follow the normalized weights (zero weights
// never drawn), in float32, float64 and float16, 1-D and per row of 2-D weights (transposed too).
void multinomial_with_replacement_follows_the_weights() {
  ember::manual_seed(11);
  const std::vector<double> weights{1, 2, 3, 0, 4};
  const std::vector<double> p{0.1, 0.2, 0.3, 0.0, 0.4};
  for (const DType dtype : {ember::kFloat32, ember::kFloat64, ember::kFloat16}) {
    SCOPED_TRACE(ember::dtype_name(dtype));
    const Tensor w = ember::from_vector(weights).to(dtype);
    const Tensor samples = ember::multinomial(w, 200000, true);
    EXPECT_EQ(samples.dtype(), ember::kInt64);
    EXPECT_EQ(samples.shape(), Shape({200000}));
    EXPECT_LT(chi_square(count_of(samples, 5), p), kChiSquareBound);
  }
  // Rows with different weights, given transposed: (categories, rows) seen as (rows, categories).
  const Tensor columns =
      ember::from_vector(std::vector<double>{5, 0, 1, 1, 0, 1, 0, 2, 1, 3, 0, 1}, Shape{4, 3}).to(ember::kFloat32);
  const Tensor rows = columns.t();
  ASSERT_FALSE(rows.is_contiguous());
  const Tensor samples = ember::multinomial(rows, 60000, true);
  EXPECT_EQ(samples.shape(), Shape({3, 60000}));
  const std::vector<std::vector<double>> expected{
      {5.0 / 9, 1.0 / 9, 0, 3.0 / 9}, {0, 0, 1, 0}, {0.25, 0.25, 0.25, 0.25}};
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_LT(chi_square(count_of(samples.select(0, r), 4), expected[static_cast<size_t>(r)]), kChiSquareBound)
        << "row " << r;
  }
}

// Without replacement: no index repeats in a row; the first draw follows the weights and the
// second the weights of what is left, P(second = j) = sum over i != j of p_i p_j / (1 - p_i);
// drawing every category gives a permutation; zero weights come last, in index order.
void multinomial_without_replacement_draws_in_turn() {
  ember::manual_seed(12);
  const std::vector<double> p{0.1, 0.2, 0.3, 0.4};
  const int64_t rows = 40000;
  const Tensor w = ember::from_vector(std::vector<double>{1, 2, 3, 4}).reshape({1, 4}).expand({rows, 4});
  const Tensor samples = ember::multinomial(w, 2, false);
  ASSERT_EQ(samples.shape(), Shape({rows, 2}));
  const std::vector<int64_t> drawn = samples.to_vector<int64_t>();
  std::vector<int64_t> first(4, 0), second(4, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t a = drawn[static_cast<size_t>(2 * r)], b = drawn[static_cast<size_t>(2 * r + 1)];
    ASSERT_NE(a, b) << "row " << r << " repeats an index";
    ++first[static_cast<size_t>(a)];
    ++second[static_cast<size_t>(b)];
  }
  std::vector<double> p_second(4, 0.0);
  for (size_t j = 0; j < 4; ++j) {
    for (size_t i = 0; i < 4; ++i) {
      if (i != j) p_second[j] += p[i] * p[j] / (1 - p[i]);
    }
  }
  EXPECT_LT(chi_square(first, p), kChiSquareBound);
  EXPECT_LT(chi_square(second, p_second), kChiSquareBound);

  // Every category: a permutation of each row.
  const Tensor all = ember::multinomial(ember::rand({50, 30}) + 0.01, 30, false);
  for (int64_t r = 0; r < 50; ++r) {
    std::vector<int64_t> row = all.select(0, r).to_vector<int64_t>();
    std::sort(row.begin(), row.end());
    for (int64_t i = 0; i < 30; ++i) ASSERT_EQ(row[static_cast<size_t>(i)], i) << "row " << r;
  }
  // Zero weights after the positive ones, in index order.
  const Tensor sparse = ember::from_vector(std::vector<float>{0, 3, 0, 0, 1});
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<int64_t> s = ember::multinomial(sparse, 5, false).to_vector<int64_t>();
    EXPECT_EQ(std::set<int64_t>(s.begin(), s.begin() + 2), (std::set<int64_t>{1, 4}));
    EXPECT_EQ(std::vector<int64_t>(s.begin() + 2, s.end()), (std::vector<int64_t>{0, 2, 3}));
  }
  // A single row of a vocabulary's size (the text-generation case), float16 weights.
  const Tensor vocab = ember::softmax(ember::randn({1, 30000}), -1).to(ember::kFloat16);
  const std::vector<int64_t> picks = ember::multinomial(vocab, 100, false).to_vector<int64_t>();
  EXPECT_EQ(std::set<int64_t>(picks.begin(), picks.end()).size(), picks.size());
}

// A seed gives the same samples whatever the thread count; the next draw differs. Empty rows give
// an empty result; bad input names the op.
void multinomial_is_seeded_and_checks_its_input() {
  const test_util::ThreadCountGuard guard;
  const Tensor w = ember::rand({64, 500}) + 0.1;
  for (const bool replacement : {true, false}) {
    SCOPED_TRACE(replacement);
    ember::set_num_threads(1);
    ember::manual_seed(42);
    const Tensor one = ember::multinomial(w, 20, replacement);
    for (const int threads : {2, 4}) {
      ember::set_num_threads(threads);
      ember::manual_seed(42);
      EXPECT_TRUE(test_util::bitwise_equal(ember::multinomial(w, 20, replacement), one)) << threads << " threads";
    }
    EXPECT_FALSE(test_util::bitwise_equal(ember::multinomial(w, 20, replacement), one)) << "the next draw repeats";
  }
  EXPECT_EQ(ember::multinomial(ember::ones({0, 3}), 2).shape(), Shape({0, 2}));
  EXPECT_EQ(ember::multinomial(ember::ones({1}), 1).to_vector<int64_t>(), std::vector<int64_t>{0});

  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  test_util::expect_error(
      [] {
        ember::multinomial(ember::tensor({1.0, -1.0}), 1);
      },
      {"[multinomial]", "inf, nan or element < 0", "row 0", "-1"});
  test_util::expect_error([&] { ember::multinomial(ember::tensor({1.0, inf}), 1, true); }, {"[multinomial]", "inf"});
  test_util::expect_error(
      [&] {
        ember::multinomial(ember::tensor({nan, 1.0}, Shape{1, 2}), 1);
      },
      {"[multinomial]", "nan"});
  test_util::expect_error(
      [] {
        ember::multinomial(ember::tensor({1.0, 2.0, 0.0, 0.0}, Shape{2, 2}), 1);
      },
      {"[multinomial]", "sum of probabilities <= 0", "row 1"});
  test_util::expect_error([] { ember::multinomial(ember::ones({3}), 4, false); },
                          {"[multinomial]", "without replacement"});
  test_util::expect_error([] { ember::multinomial(ember::ones({3}), 0, true); }, {"[multinomial]", "<= 0"});
  test_util::expect_error(
      [] {
        ember::multinomial(ember::tensor<int64_t>({1, 2}), 1);
      },
      {"[multinomial]", "floating-point"});
  test_util::expect_error([] { ember::multinomial(ember::ones({2, 2, 2}), 1); }, {"[multinomial]", "1-D or 2-D"});
  test_util::expect_error([] { ember::multinomial(ember::ones({2, 0}), 1, true); }, {"[multinomial]", "categories"});
}

// --- the entries --------------------------------------------------------------------------------

Gradcheck triangle_gradcheck(std::string name, std::function<Tensor(const Tensor&)> op) {
  return {std::move(name),
          [op](const std::vector<Tensor>& x) { return op(x[0]); },
          {{"contiguous", {in({3, 4})}},
           {"transposed", {in_t({4, 3})}},
           {"batched", {in_t({2, 3, 4})}},
           {"size1", {in({1, 3})}}}};
}

std::vector<Entry> sort_entries() {
  return {
      Entry{.name = "tril",
            .ops = {OpKind::kTril},
            .golden = {sort_golden("tril",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     return {ember::tril(c.tensor(0), c.attrs.at("diagonal").get<int64_t>())};
                                   })},
            .checks = {{"tril_triu_large", triangles_match_their_masks}, {"sort_family_errors", errors_name_the_op}},
            .gradchecks = {triangle_gradcheck("tril", [](const Tensor& x) { return ember::tril(x); }),
                           triangle_gradcheck("tril_diagonal", [](const Tensor& x) { return ember::tril(x, -1); })}},
      Entry{.name = "triu",
            .ops = {OpKind::kTriu},
            .golden = {sort_golden("triu",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     return {ember::triu(c.tensor(0), c.attrs.at("diagonal").get<int64_t>())};
                                   })},
            .gradchecks = {triangle_gradcheck("triu", [](const Tensor& x) { return ember::triu(x); }),
                           triangle_gradcheck("triu_diagonal", [](const Tensor& x) { return ember::triu(x, 2); })}},
      Entry{.name = "cumsum",
            .ops = {OpKind::kCumsum},
            .golden = {sort_golden(
                "cumsum",
                [](const Case& c) -> std::vector<Tensor> {
                  const json& dtype = c.attrs.at("dtype");
                  return {ember::cumsum(c.tensor(0), dim_of(c),
                                        dtype.is_null()
                                            ? std::nullopt
                                            : std::optional<DType>(golden::dtype_from_name(dtype.get<std::string>())))};
                })},
            .checks = {{"cumsum_long", cumsum_matches_double_sums}},
            .gradchecks = {reduction_gradcheck("cumsum", [](const Tensor& x) { return ember::cumsum(x, -1); }),
                           {"cumsum_dim0",
                            [](const std::vector<Tensor>& x) { return ember::cumsum(x[0], 0); },
                            {{"contiguous", {in({3, 4})}},
                             {"transposed", {in_t({3, 4})}},
                             {"0d", {in({})}},
                             {"size1", {in({1, 4})}}}}}},
      Entry{.name = "sort",
            .ops = {OpKind::kSort},
            .golden = {sort_golden("sort",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     const ember::ValuesAndIndices r =
                                         ember::sort(c.tensor(0), dim_of(c), flag(c, "descending"), flag(c, "stable"));
                                     return {r.values, r.indices};
                                   }),
                       sort_golden("argsort",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     return {ember::argsort(c.tensor(0), dim_of(c), flag(c, "descending"),
                                                            flag(c, "stable"))};
                                   })},
            .checks = {{"sort_family_methods", methods_match_the_functions}},
            .gradchecks = {reduction_gradcheck(
                               "sort", [](const Tensor& x) { return ember::sort(x).values; }, kDistinct),
                           reduction_gradcheck(
                               "sort_descending_dim0", [](const Tensor& x) { return ember::sort(x, 0, true).values; },
                               kDistinct)}},
      Entry{.name = "topk",
            .ops = {OpKind::kTopK},
            .golden = {sort_golden("topk",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     const int64_t dim = dim_of(c);
                                     const bool largest = flag(c, "largest"), sorted = flag(c, "sorted");
                                     ember::ValuesAndIndices r =
                                         ember::topk(c.tensor(0), c.attrs.at("k").get<int64_t>(), dim, largest, sorted);
                                     if (!sorted) r = best_first(r, dim, largest);
                                     return {r.values, r.indices};
                                   }),
                       sort_golden("topk_values",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     return {ember::topk(c.tensor(0), c.attrs.at("k").get<int64_t>(), dim_of(c),
                                                         flag(c, "largest"), flag(c, "sorted"))
                                                 .values};
                                   })},
            .checks = {{"topk_large", topk_matches_sort}},
            .gradchecks = {reduction_gradcheck(
                               "topk", [](const Tensor& x) { return ember::topk(x, 2).values; }, kDistinct),
                           reduction_gradcheck(
                               "topk_smallest_dim0_unsorted",
                               [](const Tensor& x) { return ember::topk(x, 2, 0, false, false).values; }, kDistinct)}},
      Entry{.name = "multinomial",
            .ops = {OpKind::kMultinomial},
            .checks = {{"multinomial_with_replacement", multinomial_with_replacement_follows_the_weights},
                       {"multinomial_without_replacement", multinomial_without_replacement_draws_in_turn},
                       {"multinomial_seeded", multinomial_is_seeded_and_checks_its_input}}},
  };
}

[[maybe_unused]] const bool kSortRegistered = add(sort_entries());

}  // namespace
}  // namespace op_registry

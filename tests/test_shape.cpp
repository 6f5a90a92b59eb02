// Shape and indexing ops' behaviour that the golden data cannot show: split/chunk share storage,
// results are fresh, messages name the op, bad indices throw (never crash), and the threaded kernels
// agree with the single-threaded ones. Each op's golden forward cases and gradchecks are its registry
// entry (tests/ops_shape.cpp; split and chunk in tests/ops_views.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "golden.h"
#include "test_util.h"

using ember::Tensor;

namespace {

using test_util::error_of;

#define EXPECT_ERROR_PREFIX(prefix, expr)                                      \
  do {                                                                         \
    const std::string message = error_of([&] { (void)(expr); });               \
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << #expr << " threw: " << message; \
  } while (0)

// Runs fn with `threads` OpenMP threads, then restores the previous count.
template <class F>
auto with_threads(int threads, F&& fn) {
  const int before = ember::get_num_threads();
  ember::set_num_threads(threads);
  auto result = fn();
  ember::set_num_threads(before);
  return result;
}

}  // namespace

TEST(Shape, SplitAndChunkReturnViewsSharingStorage) {
  Tensor x = ember::arange(24).reshape({4, 6}).to(ember::kFloat32);
  std::vector<Tensor> parts = ember::split(x, 4, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(parts[0].shares_storage(x));
  EXPECT_TRUE(parts[1].shares_storage(x));
  EXPECT_EQ(parts[1].shape(), ember::Shape({4, 2}));
  EXPECT_EQ(parts[1].data_ptr(), x.select(1, 4).data_ptr());
  parts[1].fill_(-1);  // writes through the view
  EXPECT_EQ(x.at<float>({3, 5}), -1.0f);
  EXPECT_EQ(x.at<float>({3, 3}), 21.0f);

  const std::vector<Tensor> sized = ember::split(x, std::vector<int64_t>{1, 3}, 0);
  ASSERT_EQ(sized.size(), 2u);
  EXPECT_TRUE(sized[1].shares_storage(x));
  EXPECT_EQ(sized[1].data_ptr(), x.select(0, 1).data_ptr());

  const std::vector<Tensor> chunks = ember::chunk(x.t(), 3, 0);
  ASSERT_EQ(chunks.size(), 3u);
  for (const Tensor& c : chunks) {
    EXPECT_TRUE(c.shares_storage(x));
    EXPECT_EQ(c.shape(), ember::Shape({2, 4}));
  }
  EXPECT_EQ(chunks[2].at<float>({0, 1}), x.at<float>({1, 4}));
}

TEST(Shape, ResultsAreFreshAndNeverHaveNegativeStrides) {
  Tensor x = ember::arange(12).reshape({3, 4});
  for (const Tensor& y : {ember::flip(x, {0, 1}), ember::flip(x.t(), {1}), ember::roll(x, {1}, {0}),
                          ember::pad(x, {1, 1}), ember::repeat(x, {2, 1}), ember::cat({x, x}, 1)}) {
    EXPECT_FALSE(y.shares_storage(x));
    EXPECT_TRUE(y.is_contiguous());
    for (int64_t s : y.strides()) EXPECT_GE(s, 0);
  }
  const Tensor f = ember::flip(x, {-1});
  EXPECT_EQ(f.at<int64_t>({0, 0}), 3);
  EXPECT_EQ(f.at<int64_t>({2, 3}), 8);
}

TEST(Shape, ErrorsStartWithTheOpName) {
  const Tensor x = ember::ones({2, 3});
  EXPECT_ERROR_PREFIX("[cat]", ember::cat({}, 0));
  EXPECT_ERROR_PREFIX("[cat]", ember::cat({x, ember::ones({2, 4})}, 0));
  EXPECT_ERROR_PREFIX("[stack]", ember::stack({x, ember::ones({3, 2})}, 0));
  EXPECT_ERROR_PREFIX("[split]", ember::split(x, -1, 0));
  EXPECT_ERROR_PREFIX("[split]", ember::split(x, std::vector<int64_t>{1, 1}, 1));
  EXPECT_ERROR_PREFIX("[chunk]", ember::chunk(x, 0, 0));
  EXPECT_ERROR_PREFIX("[repeat]", ember::repeat(x, {2}));
  EXPECT_ERROR_PREFIX("[tile]", ember::tile(x, {-1}));
  EXPECT_ERROR_PREFIX("[flip]", ember::flip(x, {0, -2}));
  EXPECT_ERROR_PREFIX("[flip]", ember::flip(x, {2}));
  EXPECT_ERROR_PREFIX("[roll]", ember::roll(x, {1, 2}, {0}));
  EXPECT_ERROR_PREFIX("[roll]", ember::roll(x, std::vector<int64_t>(9, 1), std::vector<int64_t>(9, 0)));
  EXPECT_ERROR_PREFIX("[pad]", ember::pad(x, {1}));
  EXPECT_ERROR_PREFIX("[pad]", ember::pad(x, {1, 1, 1, 1, 1, 1}));
  EXPECT_ERROR_PREFIX("[pad]", ember::pad(ember::ones({3}, ember::kUInt8), {1, 1}, -1));
  const Tensor index = ember::tensor<int64_t>({0, 7});
  EXPECT_ERROR_PREFIX("[index_select]", ember::index_select(x, 1, index));
  EXPECT_ERROR_PREFIX("[index_select]", ember::index_select(x, 0, index.to(ember::kInt16)));
  EXPECT_ERROR_PREFIX("[gather]", ember::gather(x, 0, ember::tensor<float>({0, 1}, ember::Shape{1, 2})));
  EXPECT_ERROR_PREFIX("[scatter_add]", ember::scatter_add(x, 0, index.reshape({1, 2}), x.to(ember::kFloat64)));
  EXPECT_ERROR_PREFIX("[one_hot]", ember::one_hot(index.to(ember::kInt32)));
  EXPECT_ERROR_PREFIX("[embedding]", ember::embedding(ember::ones({3}), index));
  EXPECT_ERROR_PREFIX("[embedding]", ember::embedding(x, index));
}

TEST(Indexing, OutOfRangeMessageNamesIndexDimAndSize) {
  const Tensor x = ember::ones({2, 5});
  EXPECT_EQ(error_of([&] {
              ember::gather(x, 1, ember::tensor<int64_t>({0, 7}, ember::Shape{1, 2}));
            }),
            "[gather] index 7 is out of bounds for dimension 1 with size 5");
  EXPECT_EQ(error_of([&] { ember::index_select(x, -1, ember::tensor<int32_t>({-3})); }),
            "[index_select] index -3 is out of bounds for dimension 1 with size 5");
  EXPECT_EQ(error_of([&] {
              ember::scatter_add(x, 0, ember::tensor<int64_t>({2}, ember::Shape{1, 1}), x);
            }),
            "[scatter_add] index 2 is out of bounds for dimension 0 with size 2");
  EXPECT_EQ(error_of([&] {
              ember::embedding(x, ember::tensor<int64_t>({1, 2}));
            }),
            "[embedding] index 2 is out of bounds for dimension 0 with size 2");
}

TEST(Indexing, ExtremeIndicesThrowInsteadOfCrashing) {
  const int64_t extremes[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), -1,
                              int64_t{1} << 40};
  // Big enough that the kernels split the work across threads; the bad index sits near the end.
  const Tensor x = ember::rand({512, 300});
  for (int64_t bad : extremes) {
    SCOPED_TRACE(bad);
    Tensor rows = ember::randint(0, 512, {2000});
    rows.data_ptr<int64_t>()[1999] = bad;
    EXPECT_THROW(ember::index_select(x, 0, rows), ember::Error);
    EXPECT_THROW(ember::embedding(x, rows.reshape({40, 50})), ember::Error);
    if (bad == std::numeric_limits<int64_t>::max()) {
      EXPECT_THROW(ember::index_select(x, 0, rows.to(ember::kInt32)), ember::Error);  // wraps to -1
    }

    Tensor index = ember::randint(0, 512, {512, 300});
    index.data_ptr<int64_t>()[512 * 300 - 1] = bad;
    EXPECT_THROW(ember::gather(x, 0, index), ember::Error);
    EXPECT_THROW(ember::gather(x, 0, index.t().contiguous().t()), ember::Error);
    const Tensor before = x.clone();
    EXPECT_THROW(ember::scatter_add(x, 0, index, x), ember::Error);
    EXPECT_TRUE(golden::all_close(x, before, {0, 0}));  // out-of-place: the input is untouched

    Tensor classes = ember::randint(0, 10, {70000});
    classes.data_ptr<int64_t>()[69999] = bad;
    EXPECT_THROW(ember::one_hot(classes, 10), ember::Error);
  }
}

TEST(Indexing, ThreadedKernelsMatchOneThread) {
  ember::manual_seed(11);
  const Tensor x = ember::randn({300, 400});
  const Tensor rows = ember::randint(0, 300, {500});
  const Tensor index0 = ember::randint(0, 300, {300, 400});
  const Tensor index1 = ember::randint(0, 400, {300, 400});
  const Tensor src = ember::randn({300, 400});
  const Tensor classes = ember::randint(0, 7, {50000});
  auto run = [&] {
    return std::vector<Tensor>{ember::index_select(x, 0, rows),
                               ember::index_select(x.t(), 1, rows),
                               ember::gather(x, 0, index0),
                               ember::gather(x.t(), 1, index0.t()),
                               ember::gather(x, 1, index1),
                               ember::scatter_add(x, 0, index0, src),
                               ember::scatter_add(x, 1, index1, src.t().contiguous().t()),
                               ember::one_hot(classes),
                               ember::embedding(x, rows.reshape({25, 20}))};
  };
  const std::vector<Tensor> one = with_threads(1, run);
  const std::vector<Tensor> four = with_threads(4, run);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(golden::all_close(four[i], one[i], {0, 0}));  // same order of additions: bitwise equal
  }
  // Spot checks against the definition.
  EXPECT_EQ(one[0].at<float>({7, 9}), x.at<float>({rows.at<int64_t>({7}), 9}));
  EXPECT_EQ(one[2].at<float>({5, 6}), x.at<float>({index0.at<int64_t>({5, 6}), 6}));
  EXPECT_EQ(one[4].at<float>({5, 6}), x.at<float>({5, index1.at<int64_t>({5, 6})}));
  EXPECT_EQ(one[7].at<int64_t>({123, classes.at<int64_t>({123})}), 1);
}

TEST(Indexing, ScatterAddAccumulatesEveryDuplicate) {
  // 1000 rows all add into row 3: column sums, exactly (integers in float64).
  const Tensor src = ember::arange(4000).reshape({1000, 4}).to(ember::kFloat64);
  const Tensor index = ember::full({1000, 4}, 3, ember::kInt64);
  const Tensor out = ember::scatter_add(ember::zeros({5, 4}, ember::kFloat64), 0, index, src);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(out.at<double>({3, j}), 4.0 * 999.0 * 1000.0 / 2.0 + 1000.0 * static_cast<double>(j));
    EXPECT_EQ(out.at<double>({0, j}), 0.0);
  }
}

TEST(Shape, RepeatBeyondEightInterleavedDims) {
  // Eight dims, all repeated: 16 interleaved dims do not fit a Loop, so repeat copies in blocks.
  const Tensor x = ember::arange(256).reshape({2, 2, 2, 2, 2, 2, 2, 2});
  const ember::Shape reps = {2, 1, 3, 2, 1, 2, 2, 3};
  const Tensor y = ember::repeat(x.permute({7, 6, 5, 4, 3, 2, 1, 0}), reps);
  const Tensor xt = x.permute({7, 6, 5, 4, 3, 2, 1, 0});
  ASSERT_EQ(y.shape(), ember::Shape({4, 2, 6, 4, 2, 4, 4, 6}));
  const std::vector<int64_t> values = y.to_vector<int64_t>();
  const ember::Strides strides = ember::contiguous_strides(y.shape());
  for (int64_t linear = 0; linear < y.numel(); linear += 37) {
    ember::Shape at(8), source(8);
    for (int d = 0; d < 8; ++d) {
      at[d] = (linear / strides[d]) % y.shape()[d];
      source[d] = at[d] % 2;
    }
    ASSERT_EQ(values[static_cast<size_t>(linear)], xt.at<int64_t>(source)) << "at " << at;
  }
  EXPECT_TRUE(golden::all_close(ember::tile(x, {2}), ember::repeat(x, {1, 1, 1, 1, 1, 1, 1, 2}), {0, 0}));
}

TEST(Shape, LargeCopiesMatchPieces) {
  // Above the copy grain the work is split across threads; pieces must land where they belong.
  ember::manual_seed(5);
  const Tensor a = ember::randn({700, 300});
  const Tensor b = ember::randn({700, 200});
  const Tensor c = ember::cat({a, b.to(ember::kFloat64)}, 1);
  EXPECT_EQ(c.dtype(), ember::kFloat64);
  EXPECT_TRUE(golden::all_close(c.narrow(1, 300, 200), b.to(ember::kFloat64), {0, 0}));
  const Tensor f = ember::flip(a, {0});
  EXPECT_TRUE(golden::all_close(f.select(0, 0), a.select(0, 699), {0, 0}));
  const Tensor r = ember::roll(a, {-3, 10}, {0, 1});
  EXPECT_EQ(r.at<float>({0, 10}), a.at<float>({3, 0}));
  EXPECT_EQ(r.at<float>({699, 9}), a.at<float>({2, 299}));
  const Tensor p = ember::pad(a, {2, -1, -5, 3}, 9.5);
  EXPECT_EQ(p.shape(), ember::Shape({698, 301}));
  EXPECT_EQ(p.at<float>({0, 0}), 9.5f);
  EXPECT_EQ(p.at<float>({0, 2}), a.at<float>({5, 0}));
  EXPECT_EQ(p.at<float>({697, 300}), 9.5f);
  const std::vector<Tensor> parts = ember::chunk(a, 7, 0);
  EXPECT_TRUE(golden::all_close(ember::stack(parts, 0).reshape({700, 300}), a, {0, 0}));
}

// gather with an empty index still takes part in autograd (its result requires grad), like
// index_select: backward gives a zero gradient of the input's shape.
TEST(Indexing, GatherWithAnEmptyIndexIsDifferentiable) {
  const Tensor x = ember::randn({3, 4}).requires_grad_();
  const Tensor out = ember::gather(x, 0, ember::empty({0, 4}, ember::kInt64));
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(out.shape(), (ember::Shape{0, 4}));
  out.sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().abs().sum().item<float>(), 0.0f);
}

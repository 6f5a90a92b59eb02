// nn::functional's behaviour that the golden data cannot show: the errors and messages of bad
// arguments (conv2d's and conv_transpose2d's among them), batch_norm's running statistics,
// cross_entropy against its decomposition, and conv2d's gradients independent of the thread count.
// Each op's golden cases (outputs and gradients), gradchecks and dropout's statistics are its
// registry entry (tests/ops_nn.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/nn/functional.h"
#include "golden.h"
#include "test_util.h"

namespace {

namespace F = ember::nn::functional;
using ember::Tensor;
using ember::nn::Reduction;

using test_util::error_of;

TEST(NNFunctional, ErrorsNameTheOpAndTheValues) {
  const Tensor x = ember::zeros({2, 3, 6, 6});
  std::string what = error_of([&] { F::conv2d(x, ember::zeros({4, 2, 3, 3})); });
  EXPECT_NE(what.find("[conv2d]"), std::string::npos) << what;
  EXPECT_NE(what.find("3 channels"), std::string::npos) << what;
  what = error_of([&] { F::conv2d(x, ember::zeros({4, 3, 3, 3}, ember::kFloat64)); });
  EXPECT_NE(what.find("float64"), std::string::npos) << what;
  EXPECT_NE(error_of([&] {
              F::conv2d(x, ember::zeros({4, 3, 3, 3}), ember::zeros({3}));
            }).find("bias"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              F::conv2d(x, ember::zeros({4, 3, 3, 3}), std::nullopt, 0);
            }).find("stride"),
            std::string::npos);

  const Tensor scores = ember::zeros({3, 4});
  what = error_of([&] { F::cross_entropy(scores, ember::tensor<int64_t>({0, 7, 1})); });
  EXPECT_NE(what.find("[cross_entropy] target 7 at position 1"), std::string::npos) << what;
  what = error_of([&] { F::nll_loss(scores, ember::tensor<int64_t>({0, 1, -3})); });
  EXPECT_NE(what.find("[nll_loss] target -3"), std::string::npos) << what;
  what = error_of([&] { F::cross_entropy(scores, ember::tensor<float>({0, 1, 2})); });
  EXPECT_NE(what.find("int64"), std::string::npos) << what;
  EXPECT_THROW(F::cross_entropy(scores, ember::tensor<int64_t>({0, 1, 2}), -100, Reduction::kMean, 1.5), ember::Error);

  EXPECT_NE(error_of([&] { F::dropout(scores, 1.5); }).find("[dropout]"), std::string::npos);
  EXPECT_THROW(F::dropout(scores, -0.1), ember::Error);
  EXPECT_THROW(F::max_pool2d(ember::zeros({6, 6}), 2), ember::Error);
  EXPECT_THROW(F::max_pool2d(ember::zeros({1, 6, 6}, ember::kInt64), 2), ember::Error);
  EXPECT_THROW(F::batch_norm(scores, Tensor(), Tensor()), ember::Error);  // eval needs running statistics
  EXPECT_THROW(F::batch_norm(scores, ember::zeros({3}), ember::ones({3})), ember::Error);  // 4 channels, stats of 3
  EXPECT_THROW(F::layer_norm(scores, {3}), ember::Error);
  EXPECT_THROW(F::binary_cross_entropy_with_logits(scores, ember::zeros({4})), ember::Error);
}

TEST(NNFunctional, ConvTranspose2dErrorsNameTheOpAndTheShapes) {
  const Tensor x = ember::zeros({2, 3, 4, 4}), w = ember::zeros({3, 2, 3, 3});
  const auto expect_error = [](const std::function<void()>& fn, const std::vector<std::string>& parts) {
    const std::string what = error_of(fn);
    EXPECT_NE(what.find("[conv_transpose2d]"), std::string::npos) << what;
    for (const std::string& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
  };
  // output_padding must be smaller than stride or dilation: (2, 2) with stride 2, dilation 1 is not.
  expect_error([&] { F::conv_transpose2d(x, w, std::nullopt, 2, 0, 2); },
               {"output_padding (2, 2)", "stride (2, 2)", "dilation (1, 1)"});
  EXPECT_NO_THROW(F::conv_transpose2d(x, w, std::nullopt, 1, 0, 1, 1, 2));  // below the dilation is enough
  expect_error([&] { F::conv_transpose2d(x, w, std::nullopt, 2, 0, -1); }, {"non-negative"});
  expect_error(
      [&] {
        F::conv_transpose2d(x, ember::zeros({4, 2, 3, 3}));
      },
      {"[2, 3, 4, 4]", "[4, 2, 3, 3]", "3 channels"});
  expect_error(
      [&] {
        F::conv_transpose2d(ember::zeros({1, 4, 4, 4}), ember::zeros({4, 2, 3, 3}), std::nullopt, 1, 0, 0, 3);
      },
      {"divisible by groups (3)"});
  expect_error([&] { F::conv_transpose2d(x, w, ember::zeros({3})); }, {"bias of shape (2)", "[3]"});
  expect_error([&] { F::conv_transpose2d(x, w, ember::zeros({2}, ember::kFloat64)); }, {"float64"});
  expect_error([&] { F::conv_transpose2d(x, w.to(ember::kFloat64)); }, {"float64"});
  expect_error([&] { F::conv_transpose2d(ember::zeros({4, 4}), w); }, {"3-D", "[4, 4]"});
  expect_error([&] { F::conv_transpose2d(x, ember::zeros({3, 2, 3})); }, {"4-D weight", "[3, 2, 3]"});
  expect_error(
      [&] {
        F::conv_transpose2d(ember::zeros({1, 3, 1, 1}), ember::zeros({3, 1, 1, 1}), std::nullopt, 1, 1);
      },
      {"-1 x -1", "at least 1 x 1"});
  expect_error([&] { F::conv_transpose2d(x, w, std::nullopt, 0); }, {"stride"});
  expect_error([&] { F::conv_transpose2d(x, w, std::nullopt, 1, 0, 0, 1, 0); }, {"dilation"});
  expect_error([&] { F::conv_transpose2d(ember::zeros({2, 3, 4, 4}, ember::kInt64), w); }, {"floating-point"});
}

TEST(NNFunctional, Conv1dNamesWhatIsWrongInItsOwnTerms) {
  const Tensor x = ember::zeros({2, 3, 8}), w = ember::zeros({4, 3, 3});
  const auto expect_error = [](const std::function<void()>& fn, const std::vector<std::string>& parts) {
    const std::string what = error_of(fn);
    EXPECT_NE(what.find("[conv1d]"), std::string::npos) << what;
    for (const std::string& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
  };
  expect_error([&] { F::conv1d(ember::zeros({1, 2, 3, 8}), w); }, {"2-D (C, L) or 3-D (N, C, L)", "[1, 2, 3, 8]"});
  expect_error([&] { F::conv1d(x, ember::zeros({4, 3})); }, {"3-D weight (C_out, C_in / groups, k)", "[4, 3]"});
  expect_error([&] { F::conv1d(x, ember::zeros({4, 2, 3})); }, {"3 channels", "[4, 2, 3]"});
  expect_error([&] { F::conv1d(x, ember::zeros({4, 3, 9})); }, {"padded input (8,", "dilated kernel (9,"});
  expect_error([&] { F::conv1d(x, w, std::nullopt, 1, 0, 4); }, {"dilated kernel (9,"});
  expect_error([&] { F::conv1d(x, w, ember::zeros({3})); }, {"bias of shape (4)", "[3]"});
  expect_error([&] { F::conv1d(x, w, std::nullopt, 0); }, {"stride must be positive, got 0"});
  expect_error([&] { F::conv1d(x, w, std::nullopt, 1, -1); }, {"padding must be non-negative, got -1"});
  expect_error([&] { F::conv1d(x, w, std::nullopt, 1, 0, 1, 0); }, {"groups must be positive"});
  expect_error([&] { F::conv1d(x.to(ember::kInt64), w); }, {"floating-point"});
  // A size-0 batch and a size-1 length go through.
  EXPECT_EQ(F::conv1d(ember::zeros({0, 3, 8}), w).shape(), ember::Shape({0, 4, 6}));
  EXPECT_EQ(F::conv1d(ember::zeros({3, 1}), ember::zeros({4, 3, 1})).shape(), ember::Shape({4, 1}));
}

TEST(NNFunctional, BatchNormUpdatesRunningStatsWithoutRecording) {
  ember::manual_seed(11);
  const Tensor x = ember::randn({8, 2, 3}).requires_grad_();
  Tensor running_mean = ember::zeros({2}), running_var = ember::ones({2});
  const Tensor out = F::batch_norm(x, running_mean, running_var, std::nullopt, std::nullopt, true, 0.25);
  EXPECT_TRUE(out.requires_grad());
  EXPECT_FALSE(running_mean.requires_grad());
  EXPECT_FALSE(running_var.requires_grad());
  const Tensor batch_mean = x.detach().mean({0, 2});
  const Tensor batch_var = x.detach().var({0, 2});  // unbiased
  EXPECT_TRUE(golden::all_close(running_mean, batch_mean * 0.25, {1e-5, 1e-6}));
  EXPECT_TRUE(golden::all_close(running_var, batch_var * 0.25 + 0.75, {1e-5, 1e-6}));
  // Evaluation normalizes with the running statistics.
  const Tensor eval = F::batch_norm(x.detach(), running_mean, running_var, std::nullopt, std::nullopt, false);
  const Tensor expected = (x.detach() - running_mean.view({1, 2, 1})) / (running_var.view({1, 2, 1}) + 1e-5).sqrt();
  EXPECT_TRUE(golden::all_close(eval, expected, {1e-5, 1e-6}));
}

TEST(NNFunctional, CrossEntropyMatchesLogSoftmaxNll) {
  ember::manual_seed(12);
  const Tensor x = ember::randn({16, 10}, ember::kFloat64);
  const Tensor target = ember::randint(0, 10, {16});
  EXPECT_TRUE(
      golden::all_close(F::cross_entropy(x, target), F::nll_loss(ember::log_softmax(x, 1), target), {1e-12, 1e-14}));
  // float16 input: computed in float32, rounded once.
  const Tensor half = F::cross_entropy(x.to(ember::kFloat16), target);
  EXPECT_EQ(half.dtype(), ember::kFloat16);
  EXPECT_NEAR(half.item<double>(), F::cross_entropy(x, target).item<double>(), 2e-2);
}

using test_util::ThreadCountGuard;

TEST(NNFunctional, ConvGradientsDoNotDependOnTheThreadCount) {
  ThreadCountGuard guard;
  ember::manual_seed(13);
  const Tensor x = ember::randn({20, 3, 12, 12}), w = ember::randn({8, 3, 5, 5}), b = ember::randn({8});
  const Tensor cot = ember::randn({20, 8, 8, 8});
  std::vector<std::vector<Tensor>> results;
  for (const int threads : {1, 2, 3}) {
    ember::set_num_threads(threads);
    const Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(), bl = b.detach().requires_grad_();
    const Tensor out = F::conv2d(xl, wl, bl);
    out.backward(cot);
    results.push_back({out.detach(), xl.grad(), wl.grad(), bl.grad()});
  }
  for (size_t r = 1; r < results.size(); ++r) {
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(golden::all_close(results[r][i], results[0][i], {0, 0}));
  }
  // The batched result equals the images one at a time.
  EXPECT_TRUE(golden::all_close(F::conv2d(x.select(0, 7), w, b), results[0][0].select(0, 7), {1e-5, 1e-5}));
}

}  // namespace

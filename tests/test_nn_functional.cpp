// nn::functional against PyTorch (tests/golden/nn.json: outputs and the gradients of every input that
// requires grad, for float32 and float64), gradcheck in float64 of every op on contiguous and
// transposed inputs, dropout's statistics, and the errors and messages of bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ember/nn/functional.h"
#include "golden.h"
#include "test_util.h"

namespace {

namespace F = ember::nn::functional;
using ember::Shape;
using ember::Tensor;
using ember::nn::Pair;
using ember::nn::Reduction;
using golden::Case;

// --- reading cases ----------------------------------------------------------------------------------

Pair pair_of(const golden::json& j) { return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>()}; }

std::optional<Pair> optional_pair(const golden::json& j) {
  if (j.is_null()) return std::nullopt;
  return pair_of(j);
}

std::optional<Tensor> optional_tensor(const std::vector<Tensor>& inputs, size_t i) {
  if (!inputs[i].defined()) return std::nullopt;
  return inputs[i];
}

Reduction reduction_of(const Case& c) {
  const std::string r = c.attrs.at("reduction").get<std::string>();
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  return Reduction::kMean;
}

Shape shape_of(const golden::json& j) { return Shape(j.get<std::vector<int64_t>>()); }

// The case's inputs (undefined for null), the last one (the cotangent) left out, and the ones listed in
// attrs["grad"] made leaves that require grad, keeping their layout.
std::vector<Tensor> leaf_inputs(const Case& c) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) inputs.push_back(c.inputs[i].tensor.value_or(Tensor()));
  for (const int i : c.attrs.at("grad").get<std::vector<int>>()) {
    inputs[static_cast<size_t>(i)] = inputs[static_cast<size_t>(i)].detach().requires_grad_();
  }
  return inputs;
}

// Backpropagates the case's cotangent from `out`; returns {out, gradient of each listed input}.
std::vector<Tensor> output_and_grads(const Case& c, const std::vector<Tensor>& inputs, const Tensor& out) {
  out.backward(c.inputs.back().tensor.value());
  std::vector<Tensor> result{out.detach()};
  for (const int i : c.attrs.at("grad").get<std::vector<int>>()) {
    const Tensor& x = inputs[static_cast<size_t>(i)];
    result.push_back(x.grad().defined() ? x.grad() : ember::zeros_like(x));
  }
  return result;
}

// An op that runs a forward on the case's leaves; the harness adds the backward.
using Forward = std::function<Tensor(const Case&, const std::vector<Tensor>&)>;

golden::OpFn with_grads(const Forward& forward) {
  return [forward](const Case& c) {
    const std::vector<Tensor> inputs = leaf_inputs(c);
    return output_and_grads(c, inputs, forward(c, inputs));
  };
}

const std::map<std::string, golden::OpFn>& registry() {
  static const std::map<std::string, golden::OpFn> ops = {
      {"conv2d", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::conv2d(x[0], x[1], optional_tensor(x, 2), pair_of(c.attrs.at("stride")),
                          pair_of(c.attrs.at("padding")), pair_of(c.attrs.at("dilation")),
                          c.attrs.at("groups").get<int64_t>());
       })},
      {"max_pool2d", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::max_pool2d(x[0], pair_of(c.attrs.at("kernel")), optional_pair(c.attrs.at("stride")),
                              pair_of(c.attrs.at("padding")), pair_of(c.attrs.at("dilation")),
                              c.attrs.at("ceil_mode").get<bool>());
       })},
      {"avg_pool2d", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::avg_pool2d(x[0], pair_of(c.attrs.at("kernel")), optional_pair(c.attrs.at("stride")),
                              pair_of(c.attrs.at("padding")), c.attrs.at("ceil_mode").get<bool>(),
                              c.attrs.at("count_include_pad").get<bool>());
       })},
      {"adaptive_avg_pool2d", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::adaptive_avg_pool2d(x[0], pair_of(c.attrs.at("output_size")));
       })},
      {"layer_norm", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::layer_norm(x[0], shape_of(c.attrs.at("normalized_shape")), optional_tensor(x, 1),
                              optional_tensor(x, 2), c.attrs.at("eps").get<double>());
       })},
      {"rms_norm", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         const golden::json& eps = c.attrs.at("eps");
         return F::rms_norm(x[0], shape_of(c.attrs.at("normalized_shape")), optional_tensor(x, 1),
                            eps.is_null() ? std::nullopt : std::optional<double>(eps.get<double>()));
       })},
      {"cross_entropy", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::cross_entropy(x[0], x[1], c.attrs.at("ignore_index").get<int64_t>(), reduction_of(c),
                                 c.attrs.at("label_smoothing").get<double>());
       })},
      {"nll_loss", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::nll_loss(x[0], x[1], c.attrs.at("ignore_index").get<int64_t>(), reduction_of(c));
       })},
      {"mse_loss",
       with_grads([](const Case& c, const std::vector<Tensor>& x) { return F::mse_loss(x[0], x[1], reduction_of(c)); })},
      {"l1_loss",
       with_grads([](const Case& c, const std::vector<Tensor>& x) { return F::l1_loss(x[0], x[1], reduction_of(c)); })},
      {"binary_cross_entropy_with_logits", with_grads([](const Case& c, const std::vector<Tensor>& x) {
         return F::binary_cross_entropy_with_logits(x[0], x[1], optional_tensor(x, 2), optional_tensor(x, 3),
                                                    reduction_of(c));
       })},
      // batch_norm also returns the running statistics after their in-place update.
      {"batch_norm",
       [](const Case& c) {
         std::vector<Tensor> x = leaf_inputs(c);
         const bool stats = x[1].defined();
         if (stats) {  // the cached golden tensors must not change
           x[1] = x[1].clone();
           x[2] = x[2].clone();
         }
         const Tensor out = F::batch_norm(x[0], x[1], x[2], optional_tensor(x, 3), optional_tensor(x, 4),
                                          c.attrs.at("training").get<bool>(), c.attrs.at("momentum").get<double>(),
                                          c.attrs.at("eps").get<double>());
         std::vector<Tensor> result = output_and_grads(c, x, out);
         if (stats) {
           result.push_back(x[1]);
           result.push_back(x[2]);
         }
         return result;
       }},
  };
  return ops;
}

// Gradients sum a few dozen products: a little looser than one rounding.
golden::Tolerance tolerance(const Case& /*c*/, ember::DType dtype) {
  if (dtype == ember::kFloat32) return {1e-4, 2e-5};
  if (dtype == ember::kFloat64) return {1e-9, 1e-11};
  return golden::tolerance_for(dtype);
}

class GoldenNN : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenNN, MatchesPyTorch) { golden::run_cases("nn", GetParam(), registry().at(GetParam()), tolerance); }

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : registry()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ops, GoldenNN, ::testing::ValuesIn(op_names()), golden::OpName());

// --- gradcheck in float64, contiguous and transposed -------------------------------------------------

Tensor leaf(const Shape& shape, double low = -1.0, double high = 1.0) {
  return (ember::rand(shape, ember::kFloat64) * (high - low) + low).requires_grad_();
}

// The same values stored with the last two dims transposed: a non-contiguous leaf.
Tensor transposed_leaf(const Shape& shape, double low = -1.0, double high = 1.0) {
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor base = ember::rand(swapped, ember::kFloat64) * (high - low) + low;
  return base.transpose(-1, -2).requires_grad_();
}

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

// gradcheck with the first input contiguous, then the same with it transposed.
void check_both_layouts(const Shape& first_shape, const std::vector<Tensor>& rest, const GradFn& fn, double low = -1.0,
                        double high = 1.0) {
  for (const bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "transposed input" : "contiguous input");
    std::vector<Tensor> inputs{transposed ? transposed_leaf(first_shape, low, high) : leaf(first_shape, low, high)};
    inputs.insert(inputs.end(), rest.begin(), rest.end());
    EXPECT_FALSE(transposed && inputs[0].is_contiguous());
    try {
      EXPECT_TRUE(ember::autograd::gradcheck(fn, inputs));
    } catch (const ember::Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(NNGradcheck, Conv2d) {
  ember::manual_seed(1);
  check_both_layouts({2, 4, 5, 6}, {leaf({4, 2, 3, 2}), leaf({4})}, [](const std::vector<Tensor>& x) {
    return F::conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}, {1, 2}, 2);
  });
  check_both_layouts({3, 4, 4}, {leaf({2, 3, 1, 1})}, [](const std::vector<Tensor>& x) {
    return F::conv2d(x[0], x[1]);  // unbatched, pointwise, no bias
  });
}

TEST(NNGradcheck, Pools) {
  ember::manual_seed(2);
  check_both_layouts({2, 2, 5, 6}, {}, [](const std::vector<Tensor>& x) {
    return F::max_pool2d(x[0], 3, Pair(2), 1, 1, /*ceil_mode=*/true);
  });
  check_both_layouts({1, 2, 6, 6}, {}, [](const std::vector<Tensor>& x) { return F::max_pool2d(x[0], 2, 1, 0, 2); });
  check_both_layouts({2, 2, 5, 6}, {}, [](const std::vector<Tensor>& x) {
    return F::avg_pool2d(x[0], 3, Pair(2), 1, /*ceil_mode=*/true, /*count_include_pad=*/false);
  });
  check_both_layouts({2, 5, 7}, {}, [](const std::vector<Tensor>& x) {
    return F::avg_pool2d(x[0], {2, 3}, std::nullopt, {1, 1}, false, true);
  });
  check_both_layouts({1, 2, 5, 7}, {}, [](const std::vector<Tensor>& x) {
    return F::adaptive_avg_pool2d(x[0], {3, 4});
  });
}

TEST(NNGradcheck, BatchNorm) {
  ember::manual_seed(3);
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    const Tensor running_mean = ember::rand({3}, ember::kFloat64),
                 running_var = ember::rand({3}, ember::kFloat64) + 0.5;
    check_both_layouts({2, 3, 2, 3}, {leaf({3}), leaf({3})}, [&](const std::vector<Tensor>& x) {
      // Fresh copies of the running statistics: gradcheck runs the forward many times.
      return F::batch_norm(x[0], running_mean.clone(), running_var.clone(), x[1], x[2], training, 0.1, 1e-5);
    });
  }
  check_both_layouts({4, 3}, {}, [](const std::vector<Tensor>& x) {
    return F::batch_norm(x[0], Tensor(), Tensor(), std::nullopt, std::nullopt, true);
  });
}

TEST(NNGradcheck, LayerNormAndRmsNorm) {
  ember::manual_seed(4);
  check_both_layouts({3, 2, 4}, {leaf({2, 4}), leaf({2, 4})}, [](const std::vector<Tensor>& x) {
    return F::layer_norm(x[0], {2, 4}, x[1], x[2]);
  });
  check_both_layouts({3, 5}, {}, [](const std::vector<Tensor>& x) { return F::layer_norm(x[0], {5}); });
  check_both_layouts({3, 2, 4}, {leaf({4})}, [](const std::vector<Tensor>& x) { return F::rms_norm(x[0], {4}, x[1]); });
  check_both_layouts({4, 3}, {},
                     [](const std::vector<Tensor>& x) { return F::rms_norm(x[0], {3}, std::nullopt, 1e-3); });
}

TEST(NNGradcheck, Dropout) {
  ember::manual_seed(5);
  check_both_layouts({4, 5}, {}, [](const std::vector<Tensor>& x) {
    ember::manual_seed(42);  // the same mask on every call of the forward
    return F::dropout(x[0], 0.4, true);
  });
}

TEST(NNGradcheck, ClassLosses) {
  ember::manual_seed(6);
  const Tensor target = ember::tensor<int64_t>({2, 0, -100, 1});
  for (const Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    check_both_layouts({4, 3}, {}, [&](const std::vector<Tensor>& x) {
      return F::cross_entropy(x[0], target, -100, reduction, 0.15);
    });
    check_both_layouts({4, 3}, {},
                       [&](const std::vector<Tensor>& x) { return F::nll_loss(x[0], target, -100, reduction); });
  }
  const Tensor spatial = ember::tensor<int64_t>({0, 2, 1, 1, 0, 2}, Shape{2, 3});
  check_both_layouts({2, 3, 3}, {}, [&](const std::vector<Tensor>& x) {
    return F::cross_entropy(x[0], spatial, -100, Reduction::kMean, 0.0);
  });
}

TEST(NNGradcheck, RegressionAndBceLosses) {
  ember::manual_seed(7);
  for (const Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    check_both_layouts({3, 4}, {leaf({3, 4})},
                       [&](const std::vector<Tensor>& x) { return F::mse_loss(x[0], x[1], reduction); });
    check_both_layouts({3, 4}, {leaf({3, 4})},
                       [&](const std::vector<Tensor>& x) { return F::l1_loss(x[0], x[1], reduction); });
    check_both_layouts(
        {3, 4}, {leaf({3, 4}, 0.0, 1.0), leaf({4}, 0.5, 2.0), leaf({4}, 0.5, 2.0)},
        [&](const std::vector<Tensor>& x) {
          return F::binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], reduction);
        },
        -4.0, 4.0);
  }
}

// --- behaviour the golden data cannot show ------------------------------------------------------------

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "(no error)";
}

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

TEST(NNFunctional, DropoutKeepsTheExpectedFractionAndScales) {
  const Tensor x = ember::ones({200, 500});
  EXPECT_TRUE(F::dropout(x, 0.3, /*training=*/false).is_same(x));
  EXPECT_TRUE(F::dropout(x, 0.0, true).is_same(x));
  EXPECT_EQ(F::dropout(x, 1.0, true).sum().item<double>(), 0.0);

  ember::manual_seed(9);
  const Tensor y = F::dropout(x, 0.3, true);
  const double kept = ember::gt(y, 0.0).to(ember::kFloat64).mean().item<double>();
  EXPECT_NEAR(kept, 0.7, 0.005);  // 100000 draws: the standard deviation is 0.0015
  EXPECT_NEAR(ember::amax(y).item<double>(), 1.0 / 0.7, 1e-6);
  EXPECT_NEAR(y.mean().item<double>(), 1.0, 0.01);

  ember::manual_seed(9);
  EXPECT_TRUE(golden::all_close(F::dropout(x, 0.3, true), y, {0, 0}));  // the seed decides the mask

  // The gradient is the same scaled mask.
  const Tensor leaf = ember::ones({50, 40}).requires_grad_();
  ember::manual_seed(10);
  const Tensor z = F::dropout(leaf, 0.5, true);
  z.sum().backward();
  EXPECT_TRUE(golden::all_close(leaf.grad(), z.detach(), {0, 0}));
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

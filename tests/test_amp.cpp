// Automatic mixed precision (ember/amp.h): the autocast policy op by op, gradients reaching float32
// weights, guards nesting and staying on their thread; the MNIST CNN trained 50 steps under bfloat16
// autocast against PyTorch's CPU autocast, and GradScaler's schedule against PyTorch's on injected
// Inf and NaN gradients (tests/golden/make_amp_parity.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ember/amp.h"
#include "ember/data.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/optim.h"
#include "test_util.h"

namespace ember {
namespace {

namespace F = nn::functional;
using test_util::expect_error;

TEST(Autocast, LowerPrecisionAndFloat32Lists) {
  manual_seed(1);
  const Tensor x = randn({4, 8}), w = randn({5, 8}), b = randn({5});
  {
    amp::Autocast autocast(kBFloat16);
    EXPECT_EQ(matmul(x, w.t()).dtype(), kBFloat16);
    const Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), kBFloat16);
    EXPECT_EQ(relu(y).dtype(), kBFloat16);  // on neither list: runs in its input's dtype
    EXPECT_EQ(softmax(y, -1).dtype(), kFloat32);
    EXPECT_EQ(log_softmax(y, -1).dtype(), kFloat32);
    EXPECT_EQ(exp(y).dtype(), kFloat32);
    EXPECT_EQ(sum(y).dtype(), kFloat32);
    EXPECT_EQ(F::cross_entropy(y, tensor<int64_t>({0, 1, 2, 3})).dtype(), kFloat32);
    EXPECT_EQ(F::layer_norm(y, {5}).dtype(), kFloat32);
    EXPECT_EQ(F::conv2d(randn({1, 2, 5, 5}), randn({3, 2, 3, 3})).dtype(), kBFloat16);
    EXPECT_EQ(matmul(x.to(kFloat64), w.t().to(kFloat64)).dtype(), kFloat64);  // float64 is left alone
    {
      amp::Autocast inner(kFloat16);
      EXPECT_EQ(matmul(x, w.t()).dtype(), kFloat16);
      amp::Autocast off(kFloat16, /*enabled=*/false);
      EXPECT_EQ(matmul(x, w.t()).dtype(), kFloat32);
      EXPECT_FALSE(amp::autocast_dtype().has_value());
    }
    EXPECT_EQ(amp::autocast_dtype(), kBFloat16);
    // Another thread has no guard.
    DType other = kBool;
    std::thread([&] { other = matmul(x, w.t()).dtype(); }).join();
    EXPECT_EQ(other, kFloat32);
  }
  EXPECT_EQ(matmul(x, w.t()).dtype(), kFloat32);
  expect_error([] { amp::Autocast bad(kInt8); }, {"[Autocast] expected bfloat16 or float16, got int8"});
}

TEST(Autocast, GradientsReachFloat32WeightsInFloat32) {
  manual_seed(2);
  nn::Linear layer(8, 4);
  const Tensor x = randn({3, 8});
  Tensor loss;
  {
    amp::Autocast autocast(kBFloat16);
    loss = F::mse_loss(layer(x), zeros({3, 4}));
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  loss.backward();
  EXPECT_EQ(layer.weight.grad().dtype(), kFloat32);
  EXPECT_EQ(layer.bias.grad().dtype(), kFloat32);
  // Within bfloat16's precision of the float32 gradient.
  nn::Linear twin(8, 4);
  twin.load_state_dict(layer.state_dict());
  F::mse_loss(twin(x), zeros({3, 4})).backward();
  const double scale = twin.weight.grad().abs().max().item<double>();
  EXPECT_LT((layer.weight.grad() - twin.weight.grad()).abs().max().item<double>(), 0.03 * scale);
  EXPECT_GT((layer.weight.grad() - twin.weight.grad()).abs().max().item<double>(), 0.0);
}

const std::string kAmpParityDir = std::string(EMBER_GOLDEN_DIR) + "/parity/";

nlohmann::json amp_reference() {
  std::ifstream in(kAmpParityDir + "amp.json");
  return nlohmann::json::parse(in);
}

// 50 SGD-momentum steps of the MNIST CNN under bfloat16 autocast. The first steps agree with
// PyTorch to float32's precision (step 0's loss is bit for bit the same: the same products rounded
// to bfloat16 at the same places); later, a bfloat16 rounding that falls the other way now and then
// compounds, as between any two bfloat16 runs: within 5% over 50 steps (measured: 2.8% at worst),
// and the final weights within 0.01.
TEST(Autocast, MnistCnnTrainsLikePyTorchCpuAutocast) {
  const nlohmann::json ref = amp_reference()["cnn_bf16"];
  const nlohmann::json parity = [] {
    std::ifstream in(kAmpParityDir + "parity.json");
    return nlohmann::json::parse(in);
  }();
  const data::MNIST train(std::string(EMBER_DATA_DIR) + "/mnist", data::Split::kTrain);
  auto model = models::mnist_model("cnn");
  model->load_state_dict(load(kAmpParityDir + "cnn_init.safetensors"));
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = ref["lr"].get<double>(), .momentum = 0.9});
  const std::vector<double> losses = ref["losses"].get<std::vector<double>>();
  double worst = 0;
  for (size_t step = 0; step < losses.size(); ++step) {
    const Tensor index = from_vector(parity["models"]["cnn"]["batches"][step].get<std::vector<int64_t>>());
    sgd.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kBFloat16);
      const Tensor logits = (*model)(train.images().index_select(0, index));
      ASSERT_EQ(logits.dtype(), kBFloat16);
      loss = F::cross_entropy(logits, train.labels().index_select(0, index));
    }
    ASSERT_EQ(loss.dtype(), kFloat32);
    loss.backward();
    sgd.step();
    const double relative = std::abs(loss.item<double>() - losses[step]) / losses[step];
    worst = std::max(worst, relative);
    EXPECT_LT(relative, step < 10 ? 1e-4 : 0.05)
        << "step " << step << ": ember " << loss.item<double>() << ", PyTorch " << losses[step];
  }
  const StateDict expected = load(kAmpParityDir + "cnn_amp_bf16_final.safetensors");
  for (const auto& [name, value] : expected) {
    EXPECT_LT((model->state_dict().at(name) - value).abs().max().item<double>(), 0.01) << name;
  }
  std::printf("bf16 autocast CNN: largest relative loss difference to PyTorch %.2e\n", worst);
}

// Equal within float32 rounding (relative 1e-5).
bool allclose_values(const Tensor& a, const Tensor& b) {
  return le(abs(a - b), abs(b) * 1e-5 + 1e-7).all().item<bool>();
}

Tensor from_json(const nlohmann::json& values, Shape shape) {
  return from_vector(values.get<std::vector<float>>(), std::move(shape));
}

TEST(GradScaler, SkipsTheStepsPyTorchSkipsAndScalesAlike) {
  const nlohmann::json ref = amp_reference()["scaler"];
  nn::Linear model(4, 3);
  model.load_state_dict(
      {{"weight", from_json(ref["init"]["weight"], {3, 4})}, {"bias", from_json(ref["init"]["bias"], {3})}});
  optim::SGD sgd(model.parameters(), optim::SGDOptions{.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  const Tensor x = from_json(ref["x"], {8, 4}), target = from_json(ref["target"], {8, 3});
  for (int step = 0; step < 12; ++step) {
    sgd.zero_grad();
    Tensor loss = F::mse_loss(model(x), target);
    if (ref["poison"].contains(std::to_string(step))) {
      loss = loss * (ref["poison"][std::to_string(step)] == "inf" ? INFINITY : NAN);
    }
    EXPECT_EQ(scaler.get_scale(), ref["scales"][step].get<double>()) << "step " << step;
    scaler.scale(loss).backward();
    EXPECT_EQ(scaler.step(sgd), ref["stepped"][step].get<bool>()) << "step " << step;
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), ref["final_scale"].get<double>());
  EXPECT_EQ(scaler.growth_tracker(), ref["growth_tracker"].get<int64_t>());
  EXPECT_TRUE(allclose_values(model.weight, from_json(ref["final"]["weight"], {3, 4})));
}

TEST(GradScaler, UnscalesOnceStatesAndDisables) {
  nn::Linear model(2, 1);
  optim::SGD sgd(model.parameters(), optim::SGDOptions{.lr = 0.1});
  amp::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  const Tensor loss = model(ones({1, 2})).sum();
  scaler.scale(loss).backward();
  const Tensor scaled = model.weight.grad().clone();
  scaler.unscale_(sgd);
  EXPECT_TRUE(allclose_values(model.weight.grad(), scaled / 65536.0));
  expect_error([&] { scaler.unscale_(sgd); }, {"[GradScaler] unscale_() has already been called"});
  EXPECT_TRUE(scaler.step(sgd));  // already unscaled: steps without dividing again
  scaler.update();
  amp::GradScaler restored({.init_scale = 2.0});
  restored.load_state_dict(scaler.state_dict());
  EXPECT_EQ(restored.get_scale(), 65536.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  expect_error([&] { restored.load_state_dict({{"scale", full({}, -1.0, kFloat64)}}); }, {"has no \"growth_factor\""});
  amp::GradScaler off({.enabled = false});
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  EXPECT_EQ(off.get_scale(), 1.0);
  expect_error([] { amp::GradScaler bad({.backoff_factor = 1.5}); }, {"backoff_factor must be in (0, 1)"});
}

}  // namespace
}  // namespace ember

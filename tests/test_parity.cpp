// Training parity with PyTorch (reference runs by tests/golden/make_parity.py): the MLP and the
// default CNN of `ember train mnist`, from PyTorch's initial weights, replay the same 50 batches
// with SGD-momentum and with Adam; every step's loss and the final weights must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ember/data.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/optim.h"

namespace ember {
namespace {

const std::string kParityDir = std::string(EMBER_GOLDEN_DIR) + "/parity/";

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(kParityDir + "parity.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

const data::MNIST& train_split() {
  static const data::MNIST mnist(std::string(EMBER_DATA_DIR) + "/mnist", data::Split::kTrain);
  return mnist;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, const nlohmann::json& hyper,
                                                 const std::vector<Tensor>& params) {
  if (name == "sgd_momentum") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = hyper["lr"].get<double>(), .momentum = hyper["momentum"].get<double>()});
  }
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = hyper["lr"].get<double>()});
}

struct ParityCase {
  std::string model;
  std::string optimizer;
};

class Parity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(Parity, LossesAndFinalWeightsMatchPyTorch) {
  const ParityCase& c = GetParam();
  const nlohmann::json& ref = reference()["models"][c.model];
  const nlohmann::json& run = ref["optimizers"][c.optimizer];
  auto model = models::mnist_model(c.model);
  model->load_state_dict(load(kParityDir + c.model + "_init.safetensors"));
  auto optimizer = make_optimizer(c.optimizer, run["hyper"], model->parameters());

  const Tensor& images = train_split().images();
  const Tensor& labels = train_split().labels();
  const std::vector<double> losses = run["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), ref["batches"].size());
  double worst_loss = 0, worst_weight = 0;
  for (size_t step = 0; step < losses.size(); ++step) {
    const Tensor index = from_vector(ref["batches"][step].get<std::vector<int64_t>>());
    optimizer->zero_grad();
    const Tensor loss =
        nn::functional::cross_entropy((*model)(images.index_select(0, index)), labels.index_select(0, index));
    loss.backward();
    optimizer->step();
    const double expected = losses[step];
    worst_loss = std::max(worst_loss, std::abs(loss.item<double>() - expected) / std::abs(expected));
    EXPECT_LE(std::abs(loss.item<double>() - expected), 1e-4 * std::abs(expected))
        << c.model << "/" << c.optimizer << " step " << step << ": ember " << loss.item<double>() << ", PyTorch "
        << expected;
  }

  const StateDict final_weights = load(kParityDir + c.model + "_" + c.optimizer + "_final.safetensors");
  const StateDict ours = model->state_dict();
  ASSERT_EQ(ours.size(), final_weights.size());
  for (const auto& [name, expected] : final_weights) {
    ASSERT_TRUE(ours.count(name)) << name;
    const double max_diff = (ours.at(name) - expected).abs().max().item<double>();
    EXPECT_LE(max_diff, 1e-4) << c.model << "/" << c.optimizer << " final " << name;
    worst_weight = std::max(worst_weight, max_diff);
  }
  std::printf("%s/%s: largest relative loss difference %.2e, largest weight difference %.2e\n", c.model.c_str(),
              c.optimizer.c_str(), worst_loss, worst_weight);
}

INSTANTIATE_TEST_SUITE_P(Mnist, Parity,
                         ::testing::Values(ParityCase{"mlp", "sgd_momentum"}, ParityCase{"mlp", "adam"},
                                           ParityCase{"cnn", "sgd_momentum"}, ParityCase{"cnn", "adam"}),
                         [](const ::testing::TestParamInfo<ParityCase>& p) {
                           return p.param.model + "_" + p.param.optimizer;
                         });

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// After warm-up, a training step of the default CNN (forward, backward, Adam) takes every buffer
// from the caching allocator, and the graph of each step is freed (bytes in use return to the
// same level).
TEST(TrainingStep, SteadyStateMakesNoSystemAllocations) {
  manual_seed(0);
  auto model = models::mnist_cnn();
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  const Tensor x = randn({64, 1, 28, 28});
  const Tensor y = randint(0, 10, {64});
  auto step = [&] {
    optimizer.zero_grad();
    nn::functional::cross_entropy((*model)(x), y).backward();
    optimizer.step();
  };
  for (int i = 0; i < 3; ++i) step();
  const MemoryStats before = memory_stats();
  for (int i = 0; i < 5; ++i) step();
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GT(after.cache_hits, before.cache_hits);
}

}  // namespace
}  // namespace ember

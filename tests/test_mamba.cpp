// The Mamba language model (include/ember/models/mamba.h): 30 training steps against the reference
// model in PyTorch from the same initial weights over the same batches
// (tests/golden/make_mamba_parity.py), the recurrent step against the full forward, generation,
// and bad configs and inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/mamba.h"
#include "ember/optim.h"
#include "golden.h"
#include "test_util.h"

namespace {

using ember::Tensor;
using ember::models::Mamba;
using ember::models::MambaConfig;
using golden::with_prefix_removed;

const std::string kMambaParity = std::string(EMBER_GOLDEN_DIR) + "/mamba_parity.safetensors";

TEST(MambaParity, ThirtyStepsMatchPyTorch) {
  const ember::StateDict golden = ember::load(kMambaParity);
  const std::map<std::string, std::string> meta = ember::load_metadata(kMambaParity);
  const MambaConfig config{.vocab_size = std::stoll(meta.at("vocab_size")),
                           .d_model = std::stoll(meta.at("d_model")),
                           .n_layer = std::stoll(meta.at("n_layer")),
                           .d_state = std::stoll(meta.at("d_state")),
                           .d_conv = std::stoll(meta.at("d_conv")),
                           .expand = std::stoll(meta.at("expand")),
                           .scan_chunk = 7};  // a context of 24: three whole chunks and a partial one
  Mamba model(config);
  const ember::StateDict init = with_prefix_removed(golden, "init.");
  ASSERT_EQ(model.state_dict().size(), init.size());  // the same names, the tied weight stored once
  model.load_state_dict(init);
  ember::optim::AdamW optimizer({{model.decayed_parameters(), {{"weight_decay", std::stod(meta.at("weight_decay"))}}},
                                 {model.undecayed_parameters(), {{"weight_decay", 0.0}}}},
                                {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.0});
  const Tensor inputs = golden.at("inputs"), targets = golden.at("targets");
  const Tensor losses = golden.at("losses"), lrs = golden.at("lrs");
  const ember::StateDict first_grads = with_prefix_removed(golden, "grad.");
  for (int64_t step = 0; step < inputs.size(0); ++step) {
    for (ember::optim::ParamGroup& group : optimizer.param_groups()) group.set_lr(lrs.select(0, step).item<double>());
    const Tensor loss = model.loss(inputs.select(0, step), targets.select(0, step));
    optimizer.zero_grad();
    loss.backward();
    if (step == 0) {
      for (const auto& [name, parameter] : model.named_parameters()) {
        EXPECT_TRUE(golden::all_close(parameter.grad(), first_grads.at(name), {1e-4, 1e-6})) << name;
      }
    }
    ember::optim::clip_grad_norm_(model.parameters(), std::stod(meta.at("clip")));
    optimizer.step();
    const double expected = losses.select(0, step).item<double>();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-4 * std::abs(expected)) << "step " << step;
  }
  const ember::StateDict trained = model.state_dict();
  for (const auto& [name, expected] : with_prefix_removed(golden, "final.")) {
    EXPECT_TRUE(golden::all_close(trained.at(name), expected, {1e-4, 1e-4})) << name;
  }
}

MambaConfig tiny_mamba() { return {.vocab_size = 11, .d_model = 16, .n_layer = 2, .d_state = 4, .d_conv = 3}; }

TEST(Mamba, TheRecurrentStepGivesTheForwardsLogits) {
  ember::manual_seed(3);
  Mamba model(tiny_mamba());
  ember::autograd::NoGradGuard no_grad;
  model.eval();
  const Tensor idx = ember::from_vector(std::vector<int64_t>{1, 5, 2, 7, 3, 3, 9, 0, 10, 4, 4, 6}).view({2, 6});
  const Tensor full = model.forward(idx);
  std::vector<ember::models::MambaLayerState> state = model.make_state(2);
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < 6; ++t) steps.push_back(model.step(idx.select(1, t).contiguous(), state));
  EXPECT_TRUE(golden::all_close(ember::stack(steps, 1), full, {1e-5, 1e-5}));
  // The state stays the same size however long the text: d_conv - 1 inputs and d_state per channel.
  EXPECT_EQ(state[0].conv.shape(), ember::Shape({2, 32, 2}));
  EXPECT_EQ(state[0].ssm.shape(), ember::Shape({2, 32, 4}));
}

TEST(Mamba, ScanChunksDoNotChangeTheModel) {
  MambaConfig a = tiny_mamba(), b = tiny_mamba();
  a.scan_chunk = 64;
  b.scan_chunk = 3;
  ember::manual_seed(5);
  Mamba long_chunks(a);
  ember::manual_seed(5);
  Mamba short_chunks(b);
  const Tensor idx = ember::randint(0, 11, {2, 17});
  const Tensor targets = ember::randint(0, 11, {2, 17});
  const Tensor la = long_chunks.loss(idx, targets), lb = short_chunks.loss(idx, targets);
  la.backward();
  lb.backward();
  EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-6);
  const auto pa = long_chunks.named_parameters(), pb = short_chunks.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(golden::all_close(pa[i].second.grad(), pb[i].second.grad(), {1e-5, 1e-6})) << pa[i].first;
  }
}

TEST(Mamba, GenerationIsSeededAndHasNoContextLimit) {
  ember::manual_seed(6);
  Mamba model(tiny_mamba());
  const std::vector<int64_t> prompt = {1, 2, 3};
  const std::vector<int64_t> a = ember::models::generate(model, prompt, 200, {.temperature = 1.0, .seed = 9});
  const std::vector<int64_t> b = ember::models::generate(model, prompt, 200, {.temperature = 1.0, .seed = 9});
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 200u);
  for (const int64_t id : a) EXPECT_TRUE(id >= 0 && id < 11);
  // Greedy decoding follows the forward's most likely next token.
  const std::vector<int64_t> greedy = ember::models::generate(model, prompt, 1, {.temperature = 0.0});
  ember::autograd::NoGradGuard no_grad;
  model.eval();
  const Tensor logits = model.forward(ember::from_vector(prompt).view({1, 3})).select(1, 2);
  EXPECT_EQ(greedy[0], ember::argmax(logits, 1).item<int64_t>());
}

TEST(Mamba, ParametersAndTheirGroups) {
  Mamba model({.vocab_size = 84, .d_model = 32, .n_layer = 2});
  // Per layer: in_proj 32x128, conv 64x1x4 + 64, x_proj 64x34, dt_proj 2x64 + 64, A_log 64x16, D 64,
  // out_proj 64x32, norm 32; then the embedding 84x32 and norm_f 32.
  const int64_t layer = 32 * 128 + 64 * 4 + 64 + 64 * 34 + 2 * 64 + 64 + 64 * 16 + 64 + 64 * 32 + 32;
  EXPECT_EQ(model.num_parameters(), 2 * layer + 84 * 32 + 32);
  int64_t decayed = 0;
  for (const Tensor& p : model.decayed_parameters()) decayed += p.numel();
  int64_t undecayed = 0;
  for (const Tensor& p : model.undecayed_parameters()) undecayed += p.numel();
  EXPECT_EQ(decayed + undecayed, model.num_parameters());
  EXPECT_EQ(undecayed, 2 * (64 + 64 + 64 * 16 + 64 + 32) + 32);  // conv and dt biases, A_log, D, norms
  // A starts at -1..-d_state in every channel; D at 1.
  const Tensor a_log = model.state_dict().at("backbone.layers.1.mixer.A_log");
  EXPECT_FLOAT_EQ(a_log.select(0, 63).select(0, 15).item<float>(), std::log(16.0f));
}

TEST(Mamba, BadConfigsAndInputsAreErrors) {
  test_util::expect_error([] { Mamba({.d_model = 0}); }, {"[Mamba]", "positive"});
  test_util::expect_error([] { Mamba({.scan_chunk = 0}); }, {"[Mamba]", "scan_chunk"});
  Mamba model(tiny_mamba());
  test_util::expect_error([&] { model.forward(ember::zeros({2, 3})); }, {"[Mamba]", "int64"});
  test_util::expect_error([&] { model.forward(ember::zeros({2, 0}, ember::kInt64)); }, {"[Mamba]", "T >= 1"});
  test_util::expect_error(
      [&] {
        model.loss(ember::zeros({2, 3}, ember::kInt64), ember::zeros({2, 4}, ember::kInt64));
      },
      {"[Mamba]", "targets"});
  std::vector<ember::models::MambaLayerState> state = model.make_state(1);
  test_util::expect_error([&] { model.step(ember::zeros({2}, ember::kInt64), state); }, {"[Mamba]", "batch of 1"});
  test_util::expect_error([&] { ember::models::generate(model, {11}, 3, {}); }, {"[generate]", "token id 11"});
}

}  // namespace

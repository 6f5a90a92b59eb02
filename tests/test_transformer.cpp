// nn::MultiheadAttention, TransformerEncoderLayer and TransformerEncoder: PyTorch's parameter names,
// shapes and initialization; outputs, attention weights and the gradients of inputs and parameters
// against PyTorch (tests/golden/cases_transformer.py: weights loaded by their state-dict names);
// the flash path against the explicit one; dropout only in training; layer copies; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn.h"
#include "golden.h"
#include "test_util.h"

namespace ember {
namespace {

using nn::AttentionOutput;
using nn::MultiheadAttention;
using nn::MultiheadAttentionOptions;
using nn::TransformerEncoder;
using nn::TransformerEncoderLayer;
using nn::TransformerEncoderLayerOptions;
using std::make_shared;
using test_util::expect_error;

std::vector<std::string> parameter_names(const nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& [name, t] : module.named_parameters()) names.push_back(name);
  return names;
}

// --- against PyTorch ------------------------------------------------------------------------------

std::optional<Tensor> optional_input(const golden::Case& c, size_t i) { return c.inputs.at(i).tensor; }

Tensor leaf(const Tensor& t) {
  Tensor x = t.detach().clone();
  x.requires_grad_();
  return x;
}

// The case's parameters, inputs first..end, under attrs["param_names"].
StateDict case_state_dict(const golden::Case& c, size_t first) {
  StateDict state;
  const auto& names = c.attrs["param_names"];
  for (size_t i = 0; i < names.size(); ++i) state[names[i].get<std::string>()] = c.tensor(first + i);
  return state;
}

std::vector<Tensor> gradients_by_name(const nn::Module& module, const golden::Case& c) {
  std::map<std::string, Tensor> params;
  for (const auto& [name, t] : module.named_parameters()) params[name] = t;
  std::vector<Tensor> grads;
  for (const auto& name : c.attrs["param_names"]) grads.push_back(params.at(name.get<std::string>()).grad());
  return grads;
}

// inputs: query, key|null, value|null, key_padding_mask|null, attn_mask|null, grad, parameters...
TEST(TransformerGolden, MultiheadAttentionOutputsWeightsAndGradients) {
  golden::run_cases("transformer", "mha", [](const golden::Case& c) {
    const auto& a = c.attrs;
    MultiheadAttentionOptions options{.bias = a["bias"].get<bool>(), .batch_first = a["batch_first"].get<bool>()};
    if (!a["kdim"].is_null()) options.kdim = a["kdim"].get<int64_t>();
    if (!a["vdim"].is_null()) options.vdim = a["vdim"].get<int64_t>();
    auto mha = make_shared<MultiheadAttention>(a["embed_dim"].get<int64_t>(), a["num_heads"].get<int64_t>(), options);
    mha->to(c.tensor(0).dtype());
    mha->load_state_dict(case_state_dict(c, 6));
    mha->eval();

    const Tensor query = leaf(c.tensor(0));
    const bool cross = optional_input(c, 1).has_value();
    const Tensor key = cross ? leaf(c.tensor(1)) : query;
    const Tensor value = cross ? leaf(c.tensor(2)) : query;
    const bool need_weights = a["need_weights"].get<bool>();
    const auto [output, weights] =
        mha->forward(query, key, value, optional_input(c, 3), need_weights, optional_input(c, 4),
                     a["average_attn_weights"].get<bool>(), a["is_causal"].get<bool>());
    EXPECT_EQ(weights.defined(), need_weights);
    Tensor loss = (output * c.tensor(5)).sum();
    if (need_weights) loss = loss + (weights * weights).sum();
    loss.backward();

    std::vector<Tensor> out{output};
    if (need_weights) out.push_back(weights);
    out.push_back(query.grad());
    if (cross) {
      out.push_back(key.grad());
      out.push_back(value.grad());
    }
    for (const Tensor& g : gradients_by_name(*mha, c)) out.push_back(g);
    return out;
  });
}

// inputs: src, mask|null, src_key_padding_mask|null, grad, parameters...
TEST(TransformerGolden, EncoderLayersAndStacksOutputsAndGradients) {
  golden::run_cases("transformer", "encoder", [](const golden::Case& c) {
    const auto& a = c.attrs;
    const TransformerEncoderLayerOptions options{.dim_feedforward = a["dim_feedforward"].get<int64_t>(),
                                                 .dropout = 0.1,
                                                 .activation = a["activation"].get<std::string>(),
                                                 .batch_first = a["batch_first"].get<bool>(),
                                                 .norm_first = a["norm_first"].get<bool>(),
                                                 .bias = a["bias"].get<bool>()};
    const int64_t d_model = c.tensor(0).size(-1), nhead = a["nhead"].get<int64_t>();
    const auto num_layers = a["num_layers"].get<int64_t>();
    const Tensor src = leaf(c.tensor(0));
    const std::optional<Tensor> mask = optional_input(c, 1), padding = optional_input(c, 2);
    std::shared_ptr<nn::Module> module;
    Tensor output;
    if (num_layers == 0) {
      auto layer = make_shared<TransformerEncoderLayer>(d_model, nhead, options);
      module = layer;
      layer->to(src.dtype());
      layer->load_state_dict(case_state_dict(c, 4));
      layer->eval();
      output = layer->forward(src, mask, padding, a["is_causal"].get<bool>());
    } else {
      std::shared_ptr<nn::Module> norm;
      if (a["final_norm"].get<bool>()) norm = make_shared<nn::LayerNorm>(Shape{d_model});
      auto encoder = make_shared<TransformerEncoder>(
          [&] { return make_shared<TransformerEncoderLayer>(d_model, nhead, options); }, num_layers, norm);
      module = encoder;
      encoder->to(src.dtype());
      encoder->load_state_dict(case_state_dict(c, 4));
      encoder->eval();
      std::optional<bool> is_causal;
      if (!a["is_causal"].is_null()) is_causal = a["is_causal"].get<bool>();
      output = encoder->forward(src, mask, padding, is_causal);
    }
    (output * c.tensor(3)).sum().backward();
    std::vector<Tensor> out{output, src.grad()};
    for (const Tensor& g : gradients_by_name(*module, c)) out.push_back(g);
    return out;
  });
}

// --- parameters, names, initialization ------------------------------------------------------------

TEST(MultiheadAttention, ParametersHavePyTorchNamesShapesAndInitialization) {
  manual_seed(0);
  MultiheadAttention mha(8, 2);
  EXPECT_EQ(parameter_names(mha),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(mha.in_proj_bias.shape(), (Shape{24}));
  EXPECT_EQ(mha.out_proj->weight.shape(), (Shape{8, 8}));
  EXPECT_EQ(mha.head_dim, 4);
  // xavier_uniform_: fan_in 8, fan_out 24; zero biases; out_proj.weight as Linear's (bound 1/sqrt(8)).
  const double xavier = std::sqrt(6.0 / (8 + 24));
  EXPECT_LE(mha.in_proj_weight.abs().max().item<double>(), xavier);
  EXPECT_GT(mha.in_proj_weight.abs().max().item<double>(), 0.8 * xavier);
  EXPECT_EQ(mha.in_proj_bias.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(mha.out_proj->bias.abs().sum().item<double>(), 0.0);
  EXPECT_LE(mha.out_proj->weight.abs().max().item<double>(), 1.0 / std::sqrt(8.0));

  MultiheadAttention separate(8, 2, {.bias = false, .kdim = 6, .vdim = 4});
  EXPECT_EQ(parameter_names(separate),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}));
  EXPECT_EQ(separate.k_proj_weight.shape(), (Shape{8, 6}));
  EXPECT_EQ(separate.v_proj_weight.shape(), (Shape{8, 4}));
  EXPECT_FALSE(separate.in_proj_weight.defined());
  EXPECT_FALSE(separate.out_proj->bias.defined());
}

TEST(TransformerEncoder, StateDictKeysArePyTorchs) {
  auto layer = make_shared<TransformerEncoderLayer>(8, 2, TransformerEncoderLayerOptions{.dim_feedforward = 16});
  EXPECT_EQ(parameter_names(*layer),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  TransformerEncoder encoder(layer, 2, make_shared<nn::LayerNorm>(Shape{8}));
  const StateDict state = encoder.state_dict();
  EXPECT_EQ(state.size(), 2 * 12 + 2);
  for (const char* key : {"layers.0.self_attn.in_proj_weight", "layers.1.self_attn.out_proj.bias",
                          "layers.1.linear2.weight", "layers.0.norm2.bias", "norm.weight", "norm.bias"}) {
    EXPECT_EQ(state.count(key), 1u) << key;
  }
  EXPECT_EQ(state.at("layers.0.linear1.weight").shape(), (Shape{16, 8}));
}

TEST(TransformerEncoder, PrototypeIsCopiedIntoIndependentLayers) {
  auto layer = make_shared<TransformerEncoderLayer>(8, 2, TransformerEncoderLayerOptions{.dim_feedforward = 16});
  layer->to(kFloat64);
  layer->eval();
  TransformerEncoder encoder(layer, 3);
  ASSERT_EQ(encoder.layers->size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    const auto copy = encoder.layer(i);
    EXPECT_NE(copy, layer);
    EXPECT_FALSE(copy->is_training());
    EXPECT_EQ(copy->self_attn->in_proj_weight.dtype(), kFloat64);
    EXPECT_TRUE(test_util::bitwise_equal(copy->linear1->weight, layer->linear1->weight));
    EXPECT_FALSE(copy->linear1->weight.shares_storage(layer->linear1->weight));
  }
  EXPECT_EQ(encoder.norm, nullptr);

  // A factory makes each layer anew: different initial weights.
  TransformerEncoder fresh([] { return make_shared<TransformerEncoderLayer>(8, 2); }, 2);
  EXPECT_FALSE(test_util::bitwise_equal(fresh.layer(0)->linear1->weight, fresh.layer(1)->linear1->weight));
}

// --- behaviour ------------------------------------------------------------------------------------

TEST(MultiheadAttention, FlashPathMatchesExplicitWeightsPath) {
  manual_seed(3);
  MultiheadAttention mha(8, 2, {.batch_first = true});
  mha.to(kFloat64);
  const Tensor x = randn({3, 5, 8}, kFloat64);
  const Tensor padding = tensor<bool>(
      {false, false, false, true, true, false, true, false, false, false, false, false, false, false, true},
      Shape{3, 5});
  for (bool causal : {false, true}) {
    const Tensor attn = nn::generate_square_subsequent_mask(5, kFloat64);
    const Tensor slow = mha.forward(x, x, x, padding, true, attn, true, causal).output;
    const Tensor fast = mha.forward(x, x, x, padding, false, attn, true, causal).output;
    EXPECT_TRUE(golden::all_close(fast, slow, {1e-12, 1e-12})) << "causal " << causal;
    const Tensor causal_fast = mha.forward(x, x, x, std::nullopt, false, attn, true, true).output;
    const Tensor causal_slow = mha.forward(x, x, x, std::nullopt, true, attn, true, false).output;
    EXPECT_TRUE(golden::all_close(causal_fast, causal_slow, {1e-12, 1e-12}));
  }
  // The one-argument forward is unmasked self-attention, with the module's hooks.
  EXPECT_TRUE(golden::all_close(mha(x), mha.forward(x, x, x, std::nullopt, true).output, {1e-12, 1e-12}));
}

// A query whose every key is masked: the flash path gives zero attention (the output is
// out_proj's bias there), the explicit path NaN weights, as PyTorch's.
TEST(MultiheadAttention, FullyMaskedQueryRows) {
  manual_seed(4);
  MultiheadAttention mha(8, 2, {.batch_first = true});
  const Tensor x = randn({2, 3, 8});
  const Tensor padding = tensor<bool>({true, true, true, false, true, false}, Shape{2, 3});
  const Tensor out = mha.forward(x, x, x, padding, false).output;
  EXPECT_TRUE(golden::all_close(out.select(0, 0), mha.out_proj->bias.expand({3, 8}), {0, 0}));
  EXPECT_FALSE(any(isnan(out)).item<bool>());
  const AttentionOutput with_weights = mha.forward(x, x, x, padding, true);
  EXPECT_TRUE(all(isnan(with_weights.weights.select(0, 0))).item<bool>());
  EXPECT_FALSE(any(isnan(with_weights.weights.select(0, 1))).item<bool>());
}

TEST(MultiheadAttention, DropsAttentionWeightsOnlyInTraining) {
  manual_seed(5);
  MultiheadAttention mha(8, 2, {.dropout = 0.5});
  const Tensor x = randn({4, 2, 8});
  mha.train();
  const Tensor dropped = mha.forward(x, x, x, std::nullopt, true, std::nullopt, false).weights;  // (2, 2, 4, 4)
  const int64_t zeros = (dropped == 0.0).sum().item<int64_t>();
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, dropped.numel());
  EXPECT_FALSE(golden::all_close(mha(x), mha(x), {1e-6, 1e-6}));  // a fresh draw each call

  mha.eval();
  const Tensor weights = mha.forward(x, x, x, std::nullopt, true, std::nullopt, false).weights;
  EXPECT_EQ((weights == 0.0).sum().item<int64_t>(), 0);
  EXPECT_TRUE(golden::all_close(weights.sum({-1}), ones({2, 2, 4}), {1e-6, 1e-6}));
  EXPECT_TRUE(golden::all_close(mha(x), mha(x), {0, 0}));
}

TEST(TransformerEncoder, DetectsTheCausalMaskAndAcceptsItAsBool) {
  manual_seed(9);
  auto layer = make_shared<TransformerEncoderLayer>(8, 2, TransformerEncoderLayerOptions{.dim_feedforward = 16});
  layer->to(kFloat64);
  TransformerEncoder encoder(layer, 2);
  encoder.eval();
  const Tensor x = randn({6, 2, 8}, kFloat64);
  const Tensor float_mask = nn::generate_square_subsequent_mask(6, kFloat64);
  const Tensor bool_mask = isinf(float_mask);
  const Tensor detected = encoder.forward(x, float_mask);
  EXPECT_TRUE(golden::all_close(detected, encoder.forward(x, float_mask, std::nullopt, false), {1e-12, 1e-12}));
  EXPECT_TRUE(golden::all_close(encoder.forward(x, bool_mask), detected, {1e-12, 1e-12}));
  // Without the mask, later positions change earlier outputs.
  EXPECT_FALSE(golden::all_close(encoder.forward(x), detected, {1e-6, 1e-6}));
}

TEST(TransformerRepr, PrintsTheModuleTree) {
  EXPECT_EQ(MultiheadAttention(8, 2).repr(),
            "MultiheadAttention(\n"
            "  (out_proj): Linear(in_features=8, out_features=8, bias=true)\n"
            ")");
  TransformerEncoder encoder(
      make_shared<TransformerEncoderLayer>(8, 2, TransformerEncoderLayerOptions{.dim_feedforward = 16}), 1,
      make_shared<nn::LayerNorm>(Shape{8}));
  EXPECT_EQ(encoder.repr(),
            "TransformerEncoder(\n"
            "  (layers): ModuleList(\n"
            "    (0): TransformerEncoderLayer(\n"
            "      (self_attn): MultiheadAttention(\n"
            "        (out_proj): Linear(in_features=8, out_features=8, bias=true)\n"
            "      )\n"
            "      (linear1): Linear(in_features=8, out_features=16, bias=true)\n"
            "      (dropout): Dropout(p=0.1)\n"
            "      (linear2): Linear(in_features=16, out_features=8, bias=true)\n"
            "      (norm1): LayerNorm((8,), eps=1e-05, elementwise_affine=true, bias=true)\n"
            "      (norm2): LayerNorm((8,), eps=1e-05, elementwise_affine=true, bias=true)\n"
            "      (dropout1): Dropout(p=0.1)\n"
            "      (dropout2): Dropout(p=0.1)\n"
            "    )\n"
            "  )\n"
            "  (norm): LayerNorm((8,), eps=1e-05, elementwise_affine=true, bias=true)\n"
            ")");
}

// --- errors ---------------------------------------------------------------------------------------

TEST(MultiheadAttention, RejectsBadConfigurationsAndInputs) {
  expect_error([] { MultiheadAttention(10, 3); },
               {"[MultiheadAttention]", "embed_dim (10) must be divisible by num_heads (3)"});
  expect_error([] { MultiheadAttention(8, 0); }, {"[MultiheadAttention]", "must be positive"});
  expect_error([] { MultiheadAttention(8, 2, {.dropout = 1.0}); }, {"[MultiheadAttention]", "dropout"});

  MultiheadAttention mha(8, 2);
  const Tensor x = randn({5, 3, 8});  // (L, N, E)
  expect_error(
      [&] {
        mha.forward(x, x, x, std::nullopt, true, zeros({5, 6}, kBool));
      },
      {"[MultiheadAttention]", "attn_mask of shape [5, 5] or [6, 5, 5], got [5, 6]"});
  expect_error(
      [&] {
        mha.forward(x, x, x, std::nullopt, true, zeros({2, 5, 5}, kBool));
      },
      {"[MultiheadAttention]", "attn_mask"});
  expect_error(
      [&] {
        mha.forward(x, x, x, zeros({5, 3}, kBool));
      },
      {"[MultiheadAttention]", "key_padding_mask of shape [3, 5], got [5, 3]"});
  expect_error(
      [&] {
        mha.forward(x, x, x, zeros({3, 5}, kInt64));
      },
      {"[MultiheadAttention]", "only bool and floating key_padding_mask"});
  expect_error([&] { mha.forward(x, x, x, std::nullopt, false, std::nullopt, true, true); },
               {"[MultiheadAttention]", "is_causal", "needs attn_mask"});
  expect_error([&] { mha.forward(randn({5, 3, 6}), x, x); }, {"[MultiheadAttention]", "query features 8"});
  expect_error([&] { mha.forward(x, randn({5, 3, 8, 1}), x); }, {"[MultiheadAttention]", "same rank"});
  expect_error(
      [&] {
        mha.forward(x, randn({7, 2, 8}), randn({7, 2, 8}));
      },
      {"[MultiheadAttention]", "disagree in batch size"});
  expect_error([&] { mha.forward(randn({8}), randn({8}), randn({8})); }, {"[MultiheadAttention]", "2-D (unbatched)"});

  expect_error([] { TransformerEncoderLayer(8, 2, {.activation = "tanh"}); },
               {"[TransformerEncoderLayer]", "activation", "tanh"});
  expect_error([] { TransformerEncoderLayer(8, 3); }, {"[MultiheadAttention]", "divisible"});
  expect_error(
      [] {
        TransformerEncoder(
            make_shared<TransformerEncoderLayer>(8, 2, TransformerEncoderLayerOptions{.dim_feedforward = 4}), 0);
      },
      {"[TransformerEncoder]", "num_layers must be positive"});
}

}  // namespace
}  // namespace ember

// ember::nn: Module mechanics (registration, naming, traversal, modes, zero_grad, dtype conversion,
// state dicts), hooks, initialization, the layers and containers, and a small training run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn.h"
#include "golden.h"

namespace ember {
namespace {

using autograd::NoGradGuard;
using nn::Module;
using std::make_shared;
using ::testing::HasSubstr;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

std::vector<std::string> names_of(const nn::NamedModules& named) {
  std::vector<std::string> out;
  for (const auto& [name, m] : named) out.push_back(name);
  return out;
}

std::string thrown_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ember::Error";
  return "";
}

void expect_near(const Tensor& actual, const std::vector<double>& expected, double tol) {
  const std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

void expect_same_values(const Tensor& a, const Tensor& b, double tol = 0.0) {
  ASSERT_EQ(a.shape(), b.shape());
  expect_near(a, values(b), tol);
}

// Sets a tensor's values without recording anything (as a test fixture would).
void assign(const Tensor& target, const std::vector<double>& data) {
  NoGradGuard no_grad;
  Tensor t = target;
  t.copy_(from_vector(data, target.shape()));
}

// --- a nested model used by several tests --------------------------------------------------------

struct Block : Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::LayerNorm> norm;
  explicit Block(int64_t width) {
    fc = register_module("fc", make_shared<nn::Linear>(width, width));
    norm = register_module("norm", make_shared<nn::LayerNorm>(Shape{width}));
  }
  Tensor forward(const Tensor& x) override { return (*norm)(relu((*fc)(x))); }
};

struct Net : Module {
  Tensor scale;
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::BatchNorm1d> bn;
  std::shared_ptr<nn::Linear> head;
  Net() {
    scale = register_parameter("scale", ones({1}));
    features = register_module("features", make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 8),
                                                                       make_shared<nn::ReLU>(), make_shared<Block>(8)));
    bn = register_module("bn", make_shared<nn::BatchNorm1d>(8));
    head = register_module("head", make_shared<nn::Linear>(8, 3, /*bias=*/false));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*bn)((*features)(x))) * scale; }
};

// y = x * w + 0.5, built from ops whose backward is known: a module to test hooks with.
struct Affine : Module {
  Tensor w;
  explicit Affine(std::vector<double> weights) { w = register_parameter("w", from_vector(weights).to(kFloat64)); }
  Tensor forward(const Tensor& x) override { return x * w + 0.5; }
};

// --- registration, naming, traversal ------------------------------------------------------------

TEST(NnModule, NamedParametersFollowRegistrationOrderWithDottedNames) {
  auto net = make_shared<Net>();
  EXPECT_EQ(names_of(net->named_parameters()),
            (std::vector<std::string>{"scale", "features.0.weight", "features.0.bias", "features.2.fc.weight",
                                      "features.2.fc.bias", "features.2.norm.weight", "features.2.norm.bias",
                                      "bn.weight", "bn.bias", "head.weight"}));
  const std::vector<Tensor> params = net->parameters();
  ASSERT_EQ(params.size(), 10U);
  int64_t count = 0;
  for (const Tensor& p : params) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
    count += p.numel();
  }
  EXPECT_EQ(count, 1 + (32 + 8) + (64 + 8) + (8 + 8) + (8 + 8) + 24);
  // The handles a module keeps are the registered tensors themselves.
  EXPECT_TRUE(params[9].is_same(net->head->weight));
  EXPECT_EQ(net->head->weight.shape(), Shape({3, 8}));
  EXPECT_FALSE(net->head->bias.defined());

  EXPECT_EQ(names_of(net->named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(names_of(net->named_buffers()),
            (std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(net->buffers().size(), 3U);
  EXPECT_TRUE(net->buffers(/*recurse=*/false).empty());
  EXPECT_EQ(names_of(net->named_children()), (std::vector<std::string>{"features", "bn", "head"}));
  EXPECT_EQ(net->children().size(), 3U);
  EXPECT_EQ(names_of(net->named_modules()),
            (std::vector<std::string>{"", "features", "features.0", "features.1", "features.2", "features.2.fc",
                                      "features.2.norm", "bn", "head"}));
  EXPECT_EQ(net->modules().size(), 9U);
  EXPECT_EQ(net->modules(/*include_self=*/false).size(), 8U);
  EXPECT_EQ(net->modules()[0].get(), net.get());
}

TEST(NnModule, SharedParametersAndModulesAreListedOnce) {
  auto shared = make_shared<nn::Linear>(3, 3);
  auto root = make_shared<Module>();
  root->register_module("encoder", shared);
  root->register_module("decoder", shared);
  auto other = make_shared<Module>();
  other->register_parameter("tied", shared->weight);
  root->register_module("other", other);

  EXPECT_EQ(names_of(root->named_parameters()), (std::vector<std::string>{"encoder.weight", "encoder.bias"}));
  EXPECT_EQ(names_of(root->named_modules()), (std::vector<std::string>{"", "encoder", "other"}));
  // The state dict names every path, as PyTorch's does.
  const StateDict sd = root->state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, t] : sd) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"decoder.bias", "decoder.weight", "encoder.bias", "encoder.weight",
                                            "other.tied"}));
}

TEST(NnModule, RegistrationRejectsBadNamesAndNonLeafParameters) {
  Module m;
  m.register_parameter("w", zeros({2}));
  EXPECT_THAT(thrown_message([&] { m.register_buffer("w", zeros({2})); }), HasSubstr("already has"));
  EXPECT_THAT(thrown_message([&] { m.register_parameter("a.b", zeros({2})); }), HasSubstr("must not contain '.'"));
  EXPECT_THAT(thrown_message([&] { m.register_parameter("", zeros({2})); }), HasSubstr("[register_parameter]"));
  EXPECT_THAT(thrown_message([&] { m.register_module("child", std::shared_ptr<nn::ReLU>()); }), HasSubstr("is null"));
  Tensor leaf = ones({2}).requires_grad_();
  Tensor computed = leaf * 2.0;
  EXPECT_THAT(thrown_message([&] { m.register_parameter("c", computed); }), HasSubstr("leaf"));
  EXPECT_THAT(thrown_message([&] { m.register_parameter("i", zeros({2}, kInt64)); }), HasSubstr("floating point"));
  // An integer tensor can be a parameter that does not require grad, and an undefined one is skipped.
  m.register_parameter("steps", zeros({1}, kInt64), /*requires_grad=*/false);
  m.register_parameter("unused", Tensor());
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"w", "steps"}));
  // A module on the stack cannot list itself.
  EXPECT_THAT(thrown_message([&] { m.named_modules(); }), HasSubstr("std::shared_ptr"));
  EXPECT_TRUE(m.named_modules(/*include_self=*/false).empty());
  // A plain Module has no forward.
  EXPECT_THAT(thrown_message([&] { m(ones({1})); }), HasSubstr("[Module] has no forward"));
}

TEST(NnModule, TrainAndEvalPropagateToEveryDescendant) {
  auto net = make_shared<Net>();
  for (const auto& m : net->modules()) EXPECT_TRUE(m->is_training());
  net->eval();
  for (const auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  net->features->train();
  EXPECT_FALSE(net->is_training());
  EXPECT_TRUE((*net->features)[2]->is_training());
  net->train();
  for (const auto& m : net->modules()) EXPECT_TRUE(m->is_training());
}

TEST(NnModule, ApplyVisitsChildrenBeforeParents) {
  auto net = make_shared<Net>();
  std::vector<std::string> order;
  net->apply([&](Module& m) { order.push_back(m.name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "ReLU", "Linear", "LayerNorm", "Block", "Sequential",
                                             "BatchNorm1d", "Linear", "Net"}));
}

TEST(NnModule, ZeroGradDropsOrZeroesGradients) {
  auto net = make_shared<Net>();
  auto backward_through_params = [&] {
    Tensor total = zeros({});
    for (const Tensor& p : net->parameters()) total = total + (p * 3.0).sum();
    total.backward();
  };
  backward_through_params();
  for (const Tensor& p : net->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(values(p.grad().max()), std::vector<double>{3.0});
  }
  net->zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(values(p.grad().abs().max()), std::vector<double>{0.0});
  }
  backward_through_params();
  net->zero_grad();
  for (const Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
}

// --- dtype conversion -----------------------------------------------------------------------------

TEST(NnModule, ToFloat64ConvertsParametersBuffersAndGradsInPlace) {
  manual_seed(1);
  auto net = make_shared<Net>();
  const Tensor weight_handle = net->head->weight;  // an outside handle, like an optimizer's
  const std::vector<double> before = values(weight_handle);
  (net->head->weight * 2.0).sum().backward();

  nn::Module& same = net->to(kFloat64);
  EXPECT_EQ(&same, net.get());
  for (const auto& [name, p] : net->named_parameters()) EXPECT_EQ(p.dtype(), kFloat64) << name;
  EXPECT_EQ(net->bn->running_mean.dtype(), kFloat64);
  EXPECT_EQ(net->bn->running_var.dtype(), kFloat64);
  EXPECT_EQ(net->bn->num_batches_tracked.dtype(), kInt64);  // integer buffers keep their dtype
  // Every handle sees the conversion, values are kept, and the gradient follows.
  EXPECT_EQ(weight_handle.dtype(), kFloat64);
  EXPECT_TRUE(weight_handle.requires_grad());
  EXPECT_EQ(values(weight_handle), before);
  ASSERT_TRUE(weight_handle.grad().defined());
  EXPECT_EQ(weight_handle.grad().dtype(), kFloat64);
  EXPECT_EQ(values(weight_handle.grad()), std::vector<double>(24, 2.0));
  // The converted parameters keep accumulating gradients in float64.
  (net->head->weight * 1.0).sum().backward();
  EXPECT_EQ(values(weight_handle.grad()), std::vector<double>(24, 3.0));
  // The state dict reports float64 too.
  EXPECT_EQ(net->state_dict().at("features.0.weight").dtype(), kFloat64);
  EXPECT_THAT(thrown_message([&] { net->to(kInt32); }), HasSubstr("[Module::to]"));
}

// --- state dicts ----------------------------------------------------------------------------------

TEST(NnModule, StateDictRoundTrip) {
  manual_seed(2);
  auto source = make_shared<Net>();
  {
    NoGradGuard no_grad;
    source->bn->running_mean.fill_(0.25);
    source->bn->num_batches_tracked.fill_(7);
  }
  const StateDict sd = source->state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, t] : sd) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"bn.bias", "bn.num_batches_tracked", "bn.running_mean", "bn.running_var",
                                            "bn.weight", "features.0.bias", "features.0.weight", "features.2.fc.bias",
                                            "features.2.fc.weight", "features.2.norm.bias", "features.2.norm.weight",
                                            "head.weight", "scale"}));
  // Detached values that share the module's memory.
  const Tensor& w = sd.at("head.weight");
  EXPECT_FALSE(w.requires_grad());
  EXPECT_TRUE(w.shares_storage(source->head->weight));

  manual_seed(3);
  auto target = make_shared<Net>();
  const Tensor target_weight = target->head->weight;
  const nn::LoadStateDictResult result = target->load_state_dict(sd);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  for (const auto& [key, value] : target->state_dict()) expect_same_values(value, sd.at(key));
  // Loaded into the existing tensors: handles stay valid and parameters stay trainable leaves.
  EXPECT_TRUE(target_weight.is_same(target->head->weight));
  EXPECT_TRUE(target_weight.requires_grad());
  EXPECT_TRUE(target_weight.is_leaf());
  EXPECT_FALSE(target_weight.shares_storage(source->head->weight));
  EXPECT_EQ(target->bn->num_batches_tracked.item<int64_t>(), 7);

  // A non-persistent buffer stays out of the state dict.
  auto m = make_shared<Module>();
  m->register_buffer("cache", zeros({2}), /*persistent=*/false);
  m->register_buffer("kept", zeros({2}));
  EXPECT_EQ(m->state_dict().size(), 1U);
  EXPECT_EQ(m->state_dict().count("kept"), 1U);
  EXPECT_EQ(names_of(m->named_buffers()), (std::vector<std::string>{"cache", "kept"}));
}

TEST(NnModule, LoadStateDictConvertsDtypes) {
  auto a = make_shared<nn::Linear>(2, 2);
  auto b = make_shared<nn::Linear>(2, 2);
  b->to(kFloat64);
  a->load_state_dict(b->state_dict());
  EXPECT_EQ(a->weight.dtype(), kFloat32);
  expect_same_values(a->weight, b->weight, 1e-7);
}

TEST(NnModule, LoadStateDictNamesEveryProblemInOneError) {
  auto net = make_shared<Net>();
  StateDict sd = net->state_dict();
  sd.erase("features.0.bias");
  sd.erase("bn.running_var");
  sd["head.extra"] = zeros({1});
  sd["features.0.weight"] = zeros({8, 5});
  sd["head.weight"] = zeros({2, 8});
  const std::vector<double> before = values(net->features->at<nn::Linear>(0)->weight);

  const std::string message = thrown_message([&] { net->load_state_dict(sd); });
  EXPECT_THAT(message, HasSubstr("[load_state_dict]"));
  EXPECT_THAT(message, HasSubstr("Net"));
  EXPECT_THAT(message, HasSubstr("missing keys: \"features.0.bias\", \"bn.running_var\""));
  EXPECT_THAT(message, HasSubstr("unexpected keys: \"head.extra\""));
  EXPECT_THAT(message, HasSubstr("\"features.0.weight\": the state dict has [8, 5], the module has [8, 4]"));
  EXPECT_THAT(message, HasSubstr("\"head.weight\": the state dict has [2, 8], the module has [3, 8]"));
  // Nothing was loaded.
  EXPECT_EQ(values(net->features->at<nn::Linear>(0)->weight), before);

  // strict=false tolerates missing and unexpected keys (and reports them), not shape mismatches.
  const std::string non_strict = thrown_message([&] { net->load_state_dict(sd, /*strict=*/false); });
  EXPECT_THAT(non_strict, HasSubstr("[8, 5]"));
  EXPECT_THAT(non_strict, ::testing::Not(HasSubstr("missing keys")));
  sd["features.0.weight"] = ones({8, 4});
  sd["head.weight"] = ones({3, 8});
  const nn::LoadStateDictResult result = net->load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(result.missing_keys, (std::vector<std::string>{"features.0.bias", "bn.running_var"}));
  EXPECT_EQ(result.unexpected_keys, (std::vector<std::string>{"head.extra"}));
  EXPECT_EQ(values(net->head->weight), std::vector<double>(24, 1.0));
}

// --- hooks ----------------------------------------------------------------------------------------

TEST(NnModuleHooks, ForwardPreHookCanReplaceTheInput) {
  auto affine = make_shared<Affine>(std::vector<double>{2.0, 3.0});
  const Tensor x = from_vector(std::vector<double>{1.0, 1.0});
  int calls = 0;
  RemovableHandle handle = affine->register_forward_pre_hook([&](Module& m, const Tensor& input) {
    ++calls;
    EXPECT_EQ(&m, affine.get());
    return input * 10.0;
  });
  expect_near((*affine)(x), {20.5, 30.5}, 0);
  EXPECT_EQ(calls, 1);
  // forward() itself skips hooks.
  expect_near(affine->forward(x), {2.5, 3.5}, 0);
  // A hook returning void observes only.
  std::vector<double> seen;
  affine->register_forward_pre_hook([&](Module&, const Tensor& input) { seen = values(input); });
  (*affine)(x);
  EXPECT_EQ(seen, (std::vector<double>{10.0, 10.0}));  // hooks run in registration order
  handle.remove();
  EXPECT_FALSE(handle.active());
  expect_near((*affine)(x), {2.5, 3.5}, 0);
  EXPECT_EQ(calls, 2);
  handle.remove();  // a second remove does nothing
}

TEST(NnModuleHooks, ForwardHookSeesInputAndCanReplaceTheOutput) {
  auto affine = make_shared<Affine>(std::vector<double>{2.0, 3.0});
  const Tensor x = from_vector(std::vector<double>{1.0, -1.0});
  std::vector<double> seen_input, seen_output;
  RemovableHandle observer = affine->register_forward_hook([&](Module&, const Tensor& input, const Tensor& output) {
    seen_input = values(input);
    seen_output = values(output);
  });
  RemovableHandle replacer =
      affine->register_forward_hook([](Module&, const Tensor&, const Tensor& output) { return output + 100.0; });
  expect_near((*affine)(x), {102.5, 97.5}, 0);
  EXPECT_EQ(seen_input, (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(seen_output, (std::vector<double>{2.5, -2.5}));
  replacer.remove();
  expect_near((*affine)(x), {2.5, -2.5}, 0);
  observer.remove();
  seen_output.clear();
  (*affine)(x);
  EXPECT_TRUE(seen_output.empty());
}

TEST(NnModuleHooks, HooksOnChildrenRunInsideSequential) {
  auto first = make_shared<Affine>(std::vector<double>{2.0});
  auto second = make_shared<Affine>(std::vector<double>{3.0});
  auto seq = make_shared<nn::Sequential>(first, second);
  std::vector<std::string> events;
  seq->register_forward_pre_hook([&](Module& m, const Tensor&) { events.push_back("pre " + m.name()); });
  first->register_forward_hook([&](Module&, const Tensor&, const Tensor& out) {
    events.push_back("first -> " + std::to_string(out.item<double>()));
  });
  second->register_forward_pre_hook([&](Module&, const Tensor& in) {
    events.push_back("second <- " + std::to_string(in.item<double>()));
    return in * 0.0;
  });
  expect_near((*seq)(from_vector(std::vector<double>{1.0})), {0.5}, 0);
  EXPECT_EQ(events, (std::vector<std::string>{"pre Sequential", "first -> 2.500000", "second <- 2.500000"}));
}

TEST(NnModuleHooks, BackwardHookReceivesGradInputAndGradOutput) {
  // y = x * w + 0.5; loss = sum(y * c): grad_output = c, grad_input = c * w.
  auto affine = make_shared<Affine>(std::vector<double>{2.0, -3.0, 0.5});
  Tensor x = from_vector(std::vector<double>{1.0, 2.0, 3.0}).requires_grad_();
  const Tensor c = from_vector(std::vector<double>{1.0, 10.0, 100.0});
  int calls = 0;
  std::vector<double> grad_input, grad_output;
  RemovableHandle handle = affine->register_full_backward_hook([&](Module& m, const Tensor& gin, const Tensor& gout) {
    ++calls;
    EXPECT_EQ(&m, affine.get());
    ASSERT_TRUE(gin.defined());
    ASSERT_TRUE(gout.defined());
    grad_input = values(gin);
    grad_output = values(gout);
  });
  Tensor y = (*affine)(x);
  expect_near(y, {2.5, -5.5, 2.0}, 0);
  EXPECT_EQ(calls, 0);  // not before backward
  (y * c).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(grad_output, (std::vector<double>{1.0, 10.0, 100.0}));
  EXPECT_EQ(grad_input, (std::vector<double>{2.0, -30.0, 50.0}));
  // The hooks change no gradient they do not replace.
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2.0, -30.0, 50.0}));
  EXPECT_EQ(values(affine->w.grad()), (std::vector<double>{1.0, 20.0, 300.0}));

  handle.remove();
  (*affine)(x).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(NnModuleHooks, BackwardHookCanReplaceGradInput) {
  auto affine = make_shared<Affine>(std::vector<double>{2.0, 4.0});
  Tensor x = from_vector(std::vector<double>{1.0, 1.0}).requires_grad_();
  affine->register_full_backward_hook(
      [](Module&, const Tensor& grad_input, const Tensor&) { return grad_input * 0.5; });
  (*affine)(x).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1.0, 2.0}));
  // The parameters' gradients are not the hook's business.
  EXPECT_EQ(values(affine->w.grad()), (std::vector<double>{1.0, 1.0}));
}

TEST(NnModuleHooks, BackwardHookWhenTheInputNeedsNoGrad) {
  auto affine = make_shared<Affine>(std::vector<double>{2.0, 4.0});
  const Tensor x = from_vector(std::vector<double>{1.0, 1.0});
  int calls = 0;
  affine->register_full_backward_hook([&](Module&, const Tensor& grad_input, const Tensor& grad_output) {
    ++calls;
    EXPECT_FALSE(grad_input.defined());
    EXPECT_EQ(values(grad_output), (std::vector<double>{3.0, 3.0}));
  });
  ((*affine)(x)*3.0).sum().backward();
  EXPECT_EQ(calls, 1);
  // No graph, no hook.
  {
    NoGradGuard no_grad;
    (*affine)(x);
  }
  EXPECT_EQ(calls, 1);
}

TEST(NnModuleHooks, BackwardHooksOfNestedModulesSeeTheirOwnGradients) {
  // seq(x) = (x * 2 + 0.5) * 3 + 0.5; loss = sum(seq(x)).
  auto first = make_shared<Affine>(std::vector<double>{2.0});
  auto second = make_shared<Affine>(std::vector<double>{3.0});
  auto seq = make_shared<nn::Sequential>(first, second);
  std::vector<std::string> events;
  auto record = [&](const char* who) {
    return [&events, who](Module&, const Tensor& gin, const Tensor& gout) {
      events.push_back(std::string(who) + " " + std::to_string(gin.item<double>()) + " " +
                       std::to_string(gout.item<double>()));
    };
  };
  seq->register_full_backward_hook(record("seq"));
  first->register_full_backward_hook(record("first"));
  second->register_full_backward_hook(record("second"));
  Tensor x = from_vector(std::vector<double>{1.0}).requires_grad_();
  (*seq)(x).sum().backward();
  EXPECT_EQ(events,
            (std::vector<std::string>{"second 3.000000 1.000000", "first 6.000000 3.000000", "seq 6.000000 1.000000"}));
}

TEST(NnModuleHooks, GradInputIsTheModulesShareOnly) {
  // x also feeds a residual path: x.grad gets both parts, the hook's grad_input only the module's.
  auto affine = make_shared<Affine>(std::vector<double>{2.0});
  Tensor x = from_vector(std::vector<double>{1.0}).requires_grad_();
  std::vector<double> grad_input;
  affine->register_full_backward_hook([&](Module&, const Tensor& gin, const Tensor&) { grad_input = values(gin); });
  ((*affine)(x) + x * 5.0).sum().backward();
  EXPECT_EQ(grad_input, std::vector<double>{2.0});
  EXPECT_EQ(values(x.grad()), std::vector<double>{7.0});
}

// Returns its input unchanged, or one of its parameters: the unusual outputs for backward hooks.
struct PassThrough : Module {
  Tensor p;
  bool return_parameter = false;
  PassThrough() { p = register_parameter("p", from_vector(std::vector<double>{4.0, 5.0})); }
  Tensor forward(const Tensor& x) override { return return_parameter ? p : x; }
};

TEST(NnModuleHooks, BackwardHooksOnIdentityAndParameterOutputs) {
  auto module = make_shared<PassThrough>();
  int calls = 0;
  std::vector<double> grad_input, grad_output;
  module->register_full_backward_hook([&](Module&, const Tensor& gin, const Tensor& gout) {
    ++calls;
    grad_input = gin.defined() ? values(gin) : std::vector<double>{};
    grad_output = values(gout);
  });
  Tensor x = from_vector(std::vector<double>{1.0, 2.0}).requires_grad_();
  ((*module)(x)*3.0).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(grad_input, (std::vector<double>{3.0, 3.0}));
  EXPECT_EQ(grad_output, (std::vector<double>{3.0, 3.0}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3.0, 3.0}));

  module->return_parameter = true;
  const Tensor out = (*module)(from_vector(std::vector<double>{0.0, 0.0}));
  EXPECT_FALSE(out.is_leaf());  // an identity node in front of the parameter carries the hook
  (out * 2.0).sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(grad_input.empty());
  EXPECT_EQ(grad_output, (std::vector<double>{2.0, 2.0}));
  // The parameter's own gradient sink was not hooked: later graphs through it call nothing.
  (module->p * 1.0).sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(values(module->p.grad()), (std::vector<double>{3.0, 3.0}));
}

TEST(NnModuleHooks, BackwardHookNeedsASharedModule) {
  Affine on_stack(std::vector<double>{1.0});
  EXPECT_THAT(
      thrown_message([&] { on_stack.register_full_backward_hook([](Module&, const Tensor&, const Tensor&) {}); }),
      HasSubstr("std::shared_ptr"));
}

TEST(NnModuleHooks, AHookMayRemoveItselfWhileRunning) {
  auto affine = make_shared<Affine>(std::vector<double>{1.0});
  int calls = 0;
  RemovableHandle handle;
  handle = affine->register_forward_pre_hook([&](Module&, const Tensor&) {
    ++calls;
    handle.remove();
  });
  (*affine)(ones({1}, kFloat64));
  (*affine)(ones({1}, kFloat64));
  EXPECT_EQ(calls, 1);
}

// --- initialization -------------------------------------------------------------------------------

struct Stats {
  double min, max, mean, std;
};

Stats stats_of(const Tensor& t) {
  const std::vector<double> v = values(t);
  Stats s{v[0], v[0], 0.0, 0.0};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size() - 1));
  return s;
}

// Checks U(-bound, bound) statistics: in range, mean 0, std bound/sqrt(3) (to 2% and 0.01 bound).
void expect_uniform(const Tensor& t, double bound) {
  const Stats s = stats_of(t);
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  EXPECT_LT(s.min, -0.99 * bound);  // the range is used, not just bounded
  EXPECT_GT(s.max, 0.99 * bound);
  EXPECT_NEAR(s.mean, 0.0, 0.01 * bound);
  EXPECT_NEAR(s.std, bound / std::sqrt(3.0), 0.02 * bound / std::sqrt(3.0));
}

void expect_normal(const Tensor& t, double mean, double std) {
  const Stats s = stats_of(t);
  EXPECT_NEAR(s.mean, mean, 0.02 * std);
  EXPECT_NEAR(s.std, std, 0.02 * std);
}

TEST(NnInit, GainsAndFans) {
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("sigmoid"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("selu"), 0.75);
  EXPECT_THAT(thrown_message([] { nn::init::calculate_gain("swish"); }), HasSubstr("\"swish\""));

  const nn::init::Fans conv = nn::init::calculate_fan_in_and_fan_out(empty({64, 32, 3, 3}));
  EXPECT_EQ(conv.fan_in, 288);
  EXPECT_EQ(conv.fan_out, 576);
  const nn::init::Fans linear = nn::init::calculate_fan_in_and_fan_out(empty({10, 20}));
  EXPECT_EQ(linear.fan_in, 20);
  EXPECT_EQ(linear.fan_out, 10);
  EXPECT_THAT(thrown_message([] { nn::init::calculate_fan_in_and_fan_out(empty({5})); }), HasSubstr("at least 2 dims"));
  EXPECT_THAT(thrown_message([] {
                nn::init::kaiming_uniform_(empty({4, 4}), 0.0, "fan_avg");
              }),
              HasSubstr("\"fan_avg\""));
  EXPECT_THAT(thrown_message([] { nn::init::uniform_(empty({4}, kInt64)); }), HasSubstr("floating-point"));
}

TEST(NnInit, FillsHaveTheRequestedDistribution) {
  manual_seed(11);
  expect_uniform(nn::init::uniform_(empty({200000}), -2.5, 2.5), 2.5);
  const Stats shifted = stats_of(nn::init::uniform_(empty({200000}, kFloat64), 1.0, 3.0));
  EXPECT_GE(shifted.min, 1.0);
  EXPECT_LT(shifted.max, 3.0);
  EXPECT_NEAR(shifted.mean, 2.0, 0.01);
  expect_normal(nn::init::normal_(empty({200000}), 1.5, 2.0), 1.5, 2.0);
  EXPECT_EQ(values(nn::init::constant_(empty({3}), 0.25)), std::vector<double>(3, 0.25));
  EXPECT_EQ(values(nn::init::zeros_(ones({3}))), std::vector<double>(3, 0.0));
  EXPECT_EQ(values(nn::init::ones_(zeros({3}, kFloat64))), std::vector<double>(3, 1.0));

  // xavier: fan_in 500, fan_out 300.
  expect_uniform(nn::init::xavier_uniform_(empty({300, 500})), std::sqrt(6.0 / 800.0));
  expect_uniform(nn::init::xavier_uniform_(empty({300, 500}), 2.0), 2.0 * std::sqrt(6.0 / 800.0));
  expect_normal(nn::init::xavier_normal_(empty({300, 500})), 0.0, std::sqrt(2.0 / 800.0));
  // kaiming on a conv weight: fan_in 288, fan_out 576.
  expect_uniform(nn::init::kaiming_uniform_(empty({128, 32, 3, 3}), 0.0, "fan_in", "relu"),
                 std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(288.0));
  expect_normal(nn::init::kaiming_normal_(empty({128, 32, 3, 3}), 0.0, "fan_out", "relu"), 0.0,
                std::sqrt(2.0) / std::sqrt(1152.0));
  // PyTorch's Linear default: a = sqrt(5) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  expect_uniform(nn::init::kaiming_uniform_(empty({400, 625}), std::sqrt(5.0)), 1.0 / 25.0);
}

TEST(NnInit, WritesThroughViewsRecordsNoGraphAndFollowsTheSeed) {
  Tensor w = zeros({3, 4}).requires_grad_();
  nn::init::ones_(w.t());
  EXPECT_EQ(values(w), std::vector<double>(12, 1.0));
  nn::init::normal_(w);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());

  manual_seed(5);
  const std::vector<double> first = values(nn::init::kaiming_normal_(empty({8, 8})));
  manual_seed(5);
  const std::vector<double> second = values(nn::init::kaiming_normal_(empty({8, 8})));
  EXPECT_EQ(first, second);
  manual_seed(5);
  auto a = make_shared<nn::Linear>(6, 5);
  manual_seed(5);
  auto b = make_shared<nn::Linear>(6, 5);
  EXPECT_EQ(values(a->weight), values(b->weight));
  EXPECT_EQ(values(a->bias), values(b->bias));
}

TEST(NnInit, LayersStartFromPyTorchDefaults) {
  manual_seed(12);
  auto linear = make_shared<nn::Linear>(400, 500);
  expect_uniform(linear->weight, 1.0 / 20.0);
  const Stats bias = stats_of(linear->bias);
  EXPECT_GE(bias.min, -1.0 / 20.0);
  EXPECT_LE(bias.max, 1.0 / 20.0);
  EXPECT_NEAR(bias.std, 1.0 / 20.0 / std::sqrt(3.0), 0.15 / 20.0);

  auto conv = make_shared<nn::Conv2d>(64, 256, 3, 1, 0, 1, /*groups=*/4);
  EXPECT_EQ(conv->weight.shape(), Shape({256, 16, 3, 3}));
  expect_uniform(conv->weight, 1.0 / 12.0);  // fan_in = 16 * 9
  EXPECT_LE(stats_of(conv->bias).max, 1.0 / 12.0);
  // The transposed weight (in, out / groups, kH, kW): fan_in = 256 / 4 * 9, as PyTorch's.
  auto up = make_shared<nn::ConvTranspose2d>(64, 256, 3, 1, 0, 0, /*groups=*/4);
  EXPECT_EQ(up->weight.shape(), Shape({64, 64, 3, 3}));
  expect_uniform(up->weight, 1.0 / 24.0);
  EXPECT_LE(stats_of(up->bias).max, 1.0 / 24.0);
  EXPECT_GE(stats_of(up->bias).min, -1.0 / 24.0);

  auto embedding = make_shared<nn::Embedding>(1000, 100);
  expect_normal(embedding->weight, 0.0, 1.0);

  auto bn = make_shared<nn::BatchNorm2d>(5);
  EXPECT_EQ(values(bn->weight), std::vector<double>(5, 1.0));
  EXPECT_EQ(values(bn->bias), std::vector<double>(5, 0.0));
  EXPECT_EQ(values(bn->running_mean), std::vector<double>(5, 0.0));
  EXPECT_EQ(values(bn->running_var), std::vector<double>(5, 1.0));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_FALSE(bn->running_mean.requires_grad());
  auto ln = make_shared<nn::LayerNorm>(Shape{2, 3});
  EXPECT_EQ(ln->weight.shape(), Shape({2, 3}));
  EXPECT_EQ(values(ln->weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(values(ln->bias), std::vector<double>(6, 0.0));
  auto rms = make_shared<nn::RMSNorm>(Shape{4});
  EXPECT_EQ(values(rms->weight), std::vector<double>(4, 1.0));
  EXPECT_EQ(names_of(rms->named_parameters()), (std::vector<std::string>{"weight"}));
}

// --- layers ---------------------------------------------------------------------------------------

TEST(NnLayers, LinearForwardAndBackwardByHand) {
  auto linear = make_shared<nn::Linear>(3, 2);
  linear->to(kFloat64);
  assign(linear->weight, {1, 2, 3, 4, 5, 6});
  assign(linear->bias, {0.5, -1});
  Tensor x = from_vector(std::vector<double>{1, 0, -1, 2, 1, 0}, Shape{2, 3}).requires_grad_();
  Tensor y = (*linear)(x);
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  expect_near(y, {-1.5, -3.0, 4.5, 12.0}, 1e-12);
  // loss = sum(y * g): dW = g^T x, db = sum over rows of g, dx = g W.
  const Tensor g = from_vector(std::vector<double>{1, 2, 3, 4}, Shape{2, 2});
  (y * g).sum().backward();
  expect_near(linear->weight.grad(), {7, 3, -1, 10, 4, -2}, 1e-12);
  expect_near(linear->bias.grad(), {4, 6}, 1e-12);
  expect_near(x.grad(), {9, 12, 15, 19, 26, 33}, 1e-12);
  // A 1-D input and a batch of sequences.
  expect_near((*linear)(from_vector(std::vector<double>{1, 1, 1})), {6.5, 14.0}, 1e-12);
  EXPECT_EQ((*linear)(zeros({4, 5, 3}, kFloat64)).shape(), Shape({4, 5, 2}));
  // Without bias.
  auto no_bias = make_shared<nn::Linear>(3, 2, false);
  no_bias->load_state_dict({{"weight", linear->weight.detach()}});
  expect_near((*no_bias)(from_vector(std::vector<float>{1, 0, -1})), {-2, -2}, 1e-6);
}

TEST(NnLayers, LinearGradcheck) {
  manual_seed(21);
  auto linear = make_shared<nn::Linear>(4, 3);
  linear->to(kFloat64);
  auto fn = [&](const std::vector<Tensor>& in) { return (*linear)(in[0]); };
  Tensor x = randn({5, 4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(fn, {x}));
  Tensor xt = randn({4, 5}, kFloat64).t();
  xt.requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(fn, {xt}));
  // Gradients with respect to the parameters themselves, through the module.
  auto through_weight = [&](const std::vector<Tensor>& in) { return nn::functional::linear(x.detach(), in[0], in[1]); };
  EXPECT_TRUE(autograd::gradcheck(through_weight, {linear->weight, linear->bias}));
}

TEST(NnLayers, LinearRejectsMismatchedInput) {
  auto linear = make_shared<nn::Linear>(3, 2);
  EXPECT_THAT(thrown_message([&] { (*linear)(zeros({2, 4})); }), HasSubstr("[linear]"));
}

TEST(NnLayers, ActivationsMatchTheirFunctions) {
  manual_seed(22);
  const Tensor x = randn({3, 5});
  expect_same_values((*make_shared<nn::ReLU>())(x), relu(x));
  expect_same_values((*make_shared<nn::GELU>())(x), gelu(x));
  expect_same_values((*make_shared<nn::GELU>("tanh"))(x), gelu(x, "tanh"));
  expect_same_values((*make_shared<nn::SiLU>())(x), silu(x));
  expect_same_values((*make_shared<nn::Tanh>())(x), tanh(x));
  expect_same_values((*make_shared<nn::Sigmoid>())(x), sigmoid(x));
  expect_same_values((*make_shared<nn::Softmax>(1))(x), softmax(x, 1));
  expect_same_values((*make_shared<nn::LogSoftmax>(0))(x), log_softmax(x, 0));
  EXPECT_THAT(thrown_message([] { nn::GELU("fast"); }), HasSubstr("[GELU]"));
  // None of them has parameters.
  EXPECT_TRUE(make_shared<nn::ReLU>()->parameters().empty());
}

TEST(NnLayers, FlattenAndEmbedding) {
  const Tensor x = arange(0, 120).reshape({2, 3, 4, 5});
  EXPECT_EQ((*make_shared<nn::Flatten>())(x).shape(), Shape({2, 60}));
  EXPECT_EQ((*make_shared<nn::Flatten>(0, 2))(x).shape(), Shape({24, 5}));
  EXPECT_EQ((*make_shared<nn::Flatten>(2))(x).shape(), Shape({2, 3, 20}));

  auto embedding = make_shared<nn::Embedding>(5, 2);
  assign(embedding->weight, {0, 1, 10, 11, 20, 21, 30, 31, 40, 41});
  const Tensor indices = from_vector(std::vector<int64_t>{4, 0, 2, 2}, Shape{2, 2});
  const Tensor out = (*embedding)(indices);
  EXPECT_EQ(out.shape(), Shape({2, 2, 2}));
  EXPECT_EQ(values(out), (std::vector<double>{40, 41, 0, 1, 20, 21, 20, 21}));
}

TEST(NnLayers, DropoutFollowsTrainingMode) {
  manual_seed(28);
  auto dropout = make_shared<nn::Dropout>(0.25);
  const Tensor x = ones({100000});
  const std::vector<double> kept = values((*dropout)(x));
  int64_t zeros_seen = 0;
  for (double v : kept) {
    if (v == 0.0) {
      ++zeros_seen;
    } else {
      EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 100000.0, 0.25, 0.01);
  dropout->eval();
  EXPECT_TRUE((*dropout)(x).is_same(x));  // the identity in eval mode
  EXPECT_THAT(thrown_message([] { nn::Dropout(1.5); }), HasSubstr("[Dropout]"));
}

// ConvTranspose2d upsamples (stride 2, output_padding 1 doubles the size) and is the adjoint of
// conv2d with the same weight: <conv_transpose2d(x), z> = <x, conv2d(z)>.
TEST(NnLayers, ConvTranspose2dUpsamplesAsTheAdjointOfConv2d) {
  manual_seed(24);
  auto up = make_shared<nn::ConvTranspose2d>(4, 6, 3, 2, 1, 1, /*groups=*/2);
  EXPECT_EQ(up->weight.shape(), Shape({4, 3, 3, 3}));
  EXPECT_EQ(up->bias.shape(), Shape({6}));
  EXPECT_EQ(names_of(up->named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  up->to(kFloat64);
  const Tensor x = randn({2, 4, 5, 5}, kFloat64);
  const Tensor y = (*up)(x);
  EXPECT_EQ(y.shape(), Shape({2, 6, 10, 10}));  // (5 - 1) * 2 - 2 * 1 + 3 + 1
  expect_same_values(y, nn::functional::conv_transpose2d(x, up->weight, up->bias, 2, 1, 1, 2));
  expect_same_values((*up)(x.select(0, 1)), y.select(0, 1), 1e-12);  // unbatched

  NoGradGuard no_grad;
  const Tensor z = randn({2, 6, 10, 10}, kFloat64);
  const Tensor transposed = nn::functional::conv_transpose2d(x, up->weight, std::nullopt, 2, 1, 1, 2);
  const Tensor convolved = nn::functional::conv2d(z, up->weight, std::nullopt, 2, 1, 1, 2);
  EXPECT_EQ(convolved.shape(), x.shape());
  EXPECT_NEAR((transposed * z).sum().item<double>(), (x * convolved).sum().item<double>(), 1e-9);
  // The bias is added at every position, also in the last row and column only output_padding made.
  expect_same_values(y - transposed, up->bias.view({1, 6, 1, 1}).expand({2, 6, 10, 10}), 1e-12);

  auto plain = make_shared<nn::ConvTranspose2d>(2, 3, nn::Pair(2, 3), 1, 0, 0, 1, /*bias=*/false);
  EXPECT_FALSE(plain->bias.defined());
  EXPECT_EQ(names_of(plain->named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ((*plain)(randn({2, 4, 4})).shape(), Shape({3, 5, 6}));
  EXPECT_THAT(thrown_message([] { nn::ConvTranspose2d(4, 6, 3, 2, 0, 2); }), HasSubstr("output_padding (2, 2)"));
  EXPECT_THAT(thrown_message([] { nn::ConvTranspose2d(4, 6, 3, 1, 0, 0, 4); }), HasSubstr("divisible by groups"));
}

TEST(NnLayers, ConvAndPoolingModulesCallTheirFunctions) {
  manual_seed(23);
  const Tensor x = randn({2, 4, 9, 9});
  auto conv = make_shared<nn::Conv2d>(4, 6, nn::Pair(3, 2), 2, 1, 1, 2);
  EXPECT_EQ(conv->weight.shape(), Shape({6, 2, 3, 2}));
  const Tensor y = (*conv)(x);
  EXPECT_EQ(y.shape(), Shape({2, 6, 5, 5}));
  expect_same_values(y, nn::functional::conv2d(x, conv->weight, conv->bias, 2, 1, 1, 2), 1e-6);
  EXPECT_THAT(thrown_message([] { nn::Conv2d(4, 6, 3, 1, 0, 1, 4); }), HasSubstr("divisible by groups"));

  auto conv1d = make_shared<nn::Conv1d>(4, 6, 3, 2, 1, 2, 2);
  EXPECT_EQ(conv1d->weight.shape(), Shape({6, 2, 3}));
  const Tensor line = randn({2, 4, 11});
  expect_same_values((*conv1d)(line), nn::functional::conv1d(line, conv1d->weight, conv1d->bias, 2, 1, 2, 2), 1e-6);
  EXPECT_EQ((*conv1d)(line).shape(), Shape({2, 6, 5}));
  EXPECT_THAT(thrown_message([] { nn::Conv1d(4, 6, 3, 1, 0, 1, 4); }), HasSubstr("divisible by groups"));
  EXPECT_THAT(thrown_message([] { nn::Conv1d(4, 6, 0); }), HasSubstr("[Conv1d] kernel_size must be positive"));

  auto max_pool = make_shared<nn::MaxPool2d>(3, 2, 1);
  EXPECT_EQ(max_pool->stride, nn::Pair(2));
  expect_same_values((*max_pool)(x), nn::functional::max_pool2d(x, 3, 2, 1));
  auto avg_pool = make_shared<nn::AvgPool2d>(2);
  EXPECT_EQ(avg_pool->stride, nn::Pair(2));  // defaults to the kernel size
  EXPECT_EQ((*avg_pool)(x).shape(), Shape({2, 4, 4, 4}));
  expect_same_values((*avg_pool)(x), nn::functional::avg_pool2d(x, 2));
  auto adaptive = make_shared<nn::AdaptiveAvgPool2d>(nn::Pair(1, 1));
  const Tensor pooled = (*adaptive)(x);
  EXPECT_EQ(pooled.shape(), Shape({2, 4, 1, 1}));
  expect_same_values(pooled, x.mean({2, 3}, /*keepdim=*/true), 1e-6);
  EXPECT_THAT(thrown_message([] { nn::MaxPool2d(2, 2, 3); }), HasSubstr("[MaxPool2d]"));
}

TEST(NnLayers, BatchNormUpdatesRunningStatisticsInTrainingOnly) {
  // One channel-major batch: channel 0 holds {1, 2, 3, 6}, channel 1 holds {0, 0, 4, 4}.
  const Tensor x = from_vector(std::vector<float>{1, 0, 2, 0, 3, 4, 6, 4}, Shape{4, 2});
  auto bn = make_shared<nn::BatchNorm1d>(2);
  const Tensor y = (*bn)(x);
  // Batch mean (3, 2); unbiased variance (14/3, 16/3) feeds the running variance.
  expect_near(bn->running_mean, {0.3, 0.2}, 1e-6);
  expect_near(bn->running_var, {0.9 + 0.1 * 14.0 / 3.0, 0.9 + 0.1 * 16.0 / 3.0}, 1e-6);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  // Training output uses the biased batch variance (3.5, 4).
  expect_near(y.select(1, 0), {-2 / std::sqrt(3.5 + 1e-5), -1 / std::sqrt(3.5 + 1e-5), 0, 3 / std::sqrt(3.5 + 1e-5)},
              1e-5);

  bn->eval();
  const Tensor z = (*bn)(x);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  const double var0 = 0.9 + 0.1 * 14.0 / 3.0;
  expect_near(z.select(1, 0),
              {(1 - 0.3) / std::sqrt(var0 + 1e-5), (2 - 0.3) / std::sqrt(var0 + 1e-5),
               (3 - 0.3) / std::sqrt(var0 + 1e-5), (6 - 0.3) / std::sqrt(var0 + 1e-5)},
              1e-5);
}

TEST(NnLayers, BatchNormCumulativeAverageAndNoTracking) {
  // momentum = None: the running mean is the average of the batch means.
  auto bn = make_shared<nn::BatchNorm1d>(1, 1e-5, std::nullopt);
  (*bn)(from_vector(std::vector<float>{1, 3}, Shape{2, 1}));
  (*bn)(from_vector(std::vector<float>{5, 7}, Shape{2, 1}));
  (*bn)(from_vector(std::vector<float>{0, 0}, Shape{2, 1}));
  expect_near(bn->running_mean, {(2.0 + 6.0 + 0.0) / 3.0}, 1e-6);
  expect_near(bn->running_var, {(2.0 + 2.0 + 0.0) / 3.0}, 1e-6);  // unbiased batch variances 2, 2, 0
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 3);

  auto untracked = make_shared<nn::BatchNorm2d>(3, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(untracked->parameters().empty());
  EXPECT_TRUE(untracked->buffers().empty());
  EXPECT_TRUE(untracked->state_dict().empty());
  untracked->eval();
  manual_seed(24);
  const Tensor x = randn({4, 3, 2, 2});
  const Tensor y = (*untracked)(x);  // batch statistics even in eval
  expect_near(y.mean({0, 2, 3}), {0, 0, 0}, 1e-5);

  EXPECT_THAT(thrown_message([] { (*make_shared<nn::BatchNorm2d>(3))(zeros({4, 3})); }), HasSubstr("4-D"));
  EXPECT_THAT(thrown_message([] {
                (*make_shared<nn::BatchNorm1d>(3))(zeros({4, 2}));
              }),
              HasSubstr("expected 3 channels"));
}

TEST(NnLayers, LayerNormAndRMSNormModules) {
  manual_seed(25);
  const Tensor x = randn({3, 2, 4});
  auto ln = make_shared<nn::LayerNorm>(Shape{2, 4});
  nn::init::normal_(ln->weight);
  nn::init::normal_(ln->bias);
  expect_same_values((*ln)(x), nn::functional::layer_norm(x, {2, 4}, ln->weight, ln->bias), 1e-6);
  auto no_affine = make_shared<nn::LayerNorm>(Shape{4}, 1e-5, false);
  EXPECT_TRUE(no_affine->parameters().empty());
  expect_near((*no_affine)(x).mean({-1}), std::vector<double>(6, 0.0), 1e-5);

  auto rms = make_shared<nn::RMSNorm>(Shape{4}, 1e-6);
  nn::init::uniform_(rms->weight, 0.5, 1.5);
  expect_same_values((*rms)(x), nn::functional::rms_norm(x, {4}, rms->weight, 1e-6), 1e-6);
}

TEST(NnLayers, GroupNormAndUpsampleModules) {
  manual_seed(27);
  const Tensor x = randn({2, 6, 3, 4});
  auto gn = make_shared<nn::GroupNorm>(3, 6);
  EXPECT_EQ(names_of(gn->named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  nn::init::normal_(gn->weight);
  nn::init::normal_(gn->bias);
  expect_same_values((*gn)(x), nn::functional::group_norm(x, 3, gn->weight, gn->bias), 1e-6);
  // Without the affine map each (sample, group) comes out with mean 0 and variance 1.
  const Tensor normalized = (*make_shared<nn::GroupNorm>(3, 6, 1e-5, false))(x).reshape({2, 3, -1});
  expect_near(normalized.mean({2}).flatten(), std::vector<double>(6, 0.0), 1e-5);
  expect_near(normalized.var({2}, 0).flatten(), std::vector<double>(6, 1.0), 1e-3);
  EXPECT_THAT(thrown_message([] { nn::GroupNorm(4, 6); }), HasSubstr("divisible by num_groups"));
  EXPECT_EQ(gn->extra_repr(), "3, 6, eps=1e-05, affine=true");

  auto up = make_shared<nn::Upsample>(std::nullopt, std::vector<double>{2.0});
  const Tensor y = (*up)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 6, 8}));
  expect_same_values(y.slice(2, 0, 6, 2).slice(3, 0, 8, 2), x);  // nearest x2: each value four times
  EXPECT_EQ(up->extra_repr(), "scale_factor=(2), mode='nearest'");
  EXPECT_THAT(thrown_message([] { nn::Upsample(std::nullopt); }), HasSubstr("exactly one of size and scale_factor"));
}

// Empty batches pass through both (PyTorch's shapes; zero gradients for the parameters).
TEST(NnLayers, GroupNormAndInterpolateTakeEmptyBatches) {
  const Tensor x = zeros({0, 4, 3, 3}).requires_grad_();
  const Tensor w = ones({4}).requires_grad_(), b = zeros({4}).requires_grad_();
  Tensor y = nn::functional::group_norm(x, 2, w, b);
  EXPECT_EQ(y.shape(), x.shape());
  y.sum().backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  expect_near(w.grad(), std::vector<double>(4, 0.0), 0);
  const Tensor up = nn::functional::interpolate(x, std::vector<int64_t>{5, 6}, std::nullopt, "bilinear", false);
  EXPECT_EQ(up.shape(), (Shape{0, 4, 5, 6}));
  EXPECT_THAT(thrown_message([] {
                nn::functional::interpolate(zeros({1, 2, 0, 3}), std::vector<int64_t>{4, 4});
              }),
              HasSubstr("sizes should be greater than 0"));
}

// --- containers -----------------------------------------------------------------------------------

TEST(NnContainers, SequentialIndexingIterationAndForward) {
  manual_seed(26);
  auto seq = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 3), make_shared<nn::ReLU>());
  seq->push_back(make_shared<nn::Linear>(3, 2));
  EXPECT_EQ(seq->size(), 3U);
  EXPECT_EQ((*seq)[0]->name(), "Linear");
  EXPECT_EQ((*seq)[-1]->name(), "Linear");
  EXPECT_EQ((*seq)[-2]->name(), "ReLU");
  EXPECT_EQ(seq->at<nn::Linear>(2)->out_features, 2);
  EXPECT_THAT(thrown_message([&] { seq->at<nn::Linear>(1); }), HasSubstr("is a ReLU"));
  EXPECT_THAT(thrown_message([&] { (*seq)[3]; }), HasSubstr("index 3 is out of range for 3 modules"));
  std::vector<std::string> names;
  for (const auto& m : *seq) names.push_back(m->name());
  EXPECT_EQ(names, (std::vector<std::string>{"Linear", "ReLU", "Linear"}));
  EXPECT_EQ(names_of(seq->named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));

  const Tensor x = randn({5, 4});
  const Tensor expected = (*seq->at<nn::Linear>(2))(relu((*seq->at<nn::Linear>(0))(x)));
  expect_same_values((*seq)(x), expected);
  // An empty Sequential passes its input through.
  EXPECT_TRUE((*make_shared<nn::Sequential>())(x).is_same(x));
}

TEST(NnContainers, ModuleListRegistersButDoesNotCall) {
  auto list = make_shared<nn::ModuleList>();
  for (int i = 0; i < 3; ++i) list->push_back(make_shared<nn::Linear>(2, 2));
  list->extend({make_shared<nn::Tanh>()});
  EXPECT_EQ(list->size(), 4U);
  EXPECT_EQ(list->parameters().size(), 6U);
  EXPECT_EQ(names_of(list->named_children()), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_THAT(thrown_message([&] { (*list)(zeros({2})); }), HasSubstr("[ModuleList] has no forward"));
  Tensor x = ones({1, 2});
  for (const auto& m : *list) x = (*m)(x);
  EXPECT_EQ(x.shape(), Shape({1, 2}));
}

// --- training --------------------------------------------------------------------------------------

TEST(NnTraining, SmallMlpLearnsWithHandWrittenSgd) {
  manual_seed(27);
  auto model = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 16), make_shared<nn::Tanh>(),
                                           make_shared<nn::Linear>(16, 1));
  // Regression target: a fixed nonlinear function of the inputs.
  const Tensor x = randn({64, 4});
  const Tensor target = (x.select(1, 0) * x.select(1, 1) + x.select(1, 2).sin()).unsqueeze(1);
  auto loss_fn = [&] {
    const Tensor diff = (*model)(x)-target;
    return (diff * diff).mean();
  };
  const double initial = loss_fn().item<double>();
  const double lr = 0.1;
  double previous = initial;
  int decreases = 0;
  for (int step = 0; step < 100; ++step) {
    model->zero_grad();
    Tensor loss = loss_fn();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : model->parameters()) p.sub_(p.grad() * lr);
    }
    const double current = loss.item<double>();
    if (current < previous) ++decreases;
    previous = current;
  }
  const double final_loss = loss_fn().item<double>();
  EXPECT_LT(final_loss, 0.5 * initial) << "initial " << initial << ", final " << final_loss;
  EXPECT_GT(decreases, 90);
}

// --- against PyTorch (tests/golden/cases_nnmodule.py) ---------------------------------------------

TEST(NnGolden, BatchNorm2dOverTrainingBatchesThenEval) {
  golden::run_cases("nnmodule", "batch_norm2d", [](const golden::Case& c) {
    std::optional<double> momentum;
    if (!c.attrs["momentum"].is_null()) momentum = c.attrs["momentum"].get<double>();
    auto bn = make_shared<nn::BatchNorm2d>(c.tensor(0).size(1), 1e-5, momentum);
    bn->to(kFloat64);
    assign(bn->weight, values(c.tensor(4)));
    assign(bn->bias, values(c.tensor(5)));
    std::vector<Tensor> out;
    for (size_t i = 0; i < 3; ++i) out.push_back((*bn)(c.tensor(i)));
    bn->eval();
    out.push_back((*bn)(c.tensor(3)));
    out.push_back(bn->running_mean);
    out.push_back(bn->running_var);
    return out;
  });
}

TEST(NnGolden, LinearOutputAndGradients) {
  golden::run_cases("nnmodule", "linear", [](const golden::Case& c) {
    const Tensor& weight = c.tensor(1);
    auto linear = make_shared<nn::Linear>(weight.size(1), weight.size(0));
    linear->to(kFloat64);
    linear->load_state_dict({{"weight", weight}, {"bias", c.tensor(2)}});
    Tensor x = c.tensor(0).detach();
    x.requires_grad_();
    const Tensor y = (*linear)(x);
    (y * c.tensor(3)).sum().backward();
    return std::vector<Tensor>{y, linear->weight.grad(), linear->bias.grad(), x.grad()};
  });
}

TEST(NnGolden, MlpTrainedWithHandWrittenSgd) {
  golden::run_cases("nnmodule", "mlp_sgd", [](const golden::Case& c) {
    auto model = make_shared<nn::Sequential>(make_shared<nn::Linear>(4, 8), make_shared<nn::Tanh>(),
                                             make_shared<nn::Linear>(8, 3));
    model->to(kFloat64);
    const std::vector<Tensor> params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) assign(params[i], values(c.tensor(2 + i)));
    const double lr = c.attrs["lr"].get<double>();
    std::vector<Tensor> losses;
    for (int step = 0; step < c.attrs["steps"].get<int>(); ++step) {
      model->zero_grad();
      Tensor loss = nn::functional::cross_entropy((*model)(c.tensor(0)), c.tensor(1));
      loss.backward();
      NoGradGuard no_grad;
      for (Tensor p : params) p.sub_(p.grad() * lr);
      losses.push_back(loss.detach());
    }
    std::vector<Tensor> out{stack(losses)};
    out.insert(out.end(), params.begin(), params.end());
    return out;
  });
}

// --- printing -------------------------------------------------------------------------------------

TEST(NnRepr, LayersPrintLikePyTorch) {
  auto repr = [](const Module& m) {
    std::ostringstream out;
    out << m;
    return out.str();
  };
  EXPECT_EQ(repr(nn::Linear(784, 128)), "Linear(in_features=784, out_features=128, bias=true)");
  EXPECT_EQ(repr(nn::Linear(3, 2, false)), "Linear(in_features=3, out_features=2, bias=false)");
  EXPECT_EQ(repr(nn::Conv2d(1, 32, 3)), "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");
  EXPECT_EQ(repr(nn::Conv2d(16, 32, nn::Pair(3, 5), 2, 1, 1, 2, false)),
            "Conv2d(16, 32, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), groups=2, bias=false)");
  EXPECT_EQ(repr(nn::Conv2d(3, 8, 3, 1, 0, 2)), "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2))");
  EXPECT_EQ(repr(nn::Softplus(2.0, 5.0)), "Softplus(beta=2, threshold=5)");
  EXPECT_EQ(repr(nn::Conv1d(4, 8, 3)), "Conv1d(4, 8, kernel_size=(3,), stride=(1,))");
  EXPECT_EQ(repr(nn::Conv1d(6, 6, 4, 1, 3, 2, 6, false)),
            "Conv1d(6, 6, kernel_size=(4,), stride=(1,), padding=(3,), dilation=(2,), groups=6, bias=false)");
  EXPECT_EQ(repr(nn::ConvTranspose2d(16, 8, 4, 2, 1)),
            "ConvTranspose2d(16, 8, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1))");
  EXPECT_EQ(repr(nn::ConvTranspose2d(4, 6, nn::Pair(3, 2), 2, 0, 1, 2, false)),
            "ConvTranspose2d(4, 6, kernel_size=(3, 2), stride=(2, 2), output_padding=(1, 1), groups=2, bias=false)");
  EXPECT_EQ(repr(nn::ConvTranspose2d(3, 3, 3, 1, 0, 1, 1, true, 2)),
            "ConvTranspose2d(3, 3, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2), output_padding=(1, 1))");
  EXPECT_EQ(repr(nn::MaxPool2d(2)), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)");
  EXPECT_EQ(repr(nn::AvgPool2d(3, 2)), "AvgPool2d(kernel_size=3, stride=2, padding=0)");
  EXPECT_EQ(repr(nn::AdaptiveAvgPool2d(nn::Pair(7, 5))), "AdaptiveAvgPool2d(output_size=(7, 5))");
  EXPECT_EQ(repr(nn::BatchNorm2d(64)),
            "BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=true, bias=true, track_running_stats=true)");
  EXPECT_EQ(repr(nn::BatchNorm1d(8, 1e-3, std::nullopt)),
            "BatchNorm1d(8, eps=0.001, momentum=None, affine=true, bias=true, track_running_stats=true)");
  EXPECT_EQ(repr(nn::LayerNorm(Shape{128})), "LayerNorm((128,), eps=1e-05, elementwise_affine=true, bias=true)");
  EXPECT_EQ(repr(nn::LayerNorm(Shape{2, 3}, 1e-6, true, false)),
            "LayerNorm((2, 3), eps=1e-06, elementwise_affine=true, bias=false)");
  EXPECT_EQ(repr(nn::LayerNorm(Shape{4}, 1e-5, false)),
            "LayerNorm((4,), eps=1e-05, elementwise_affine=false, bias=false)");
  EXPECT_EQ(repr(nn::BatchNorm2d(3, 1e-5, 0.1, true, true, /*bias=*/false)),
            "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true, bias=false, track_running_stats=true)");
  EXPECT_EQ(repr(nn::RMSNorm(Shape{64})), "RMSNorm((64,), eps=None, elementwise_affine=true)");
  EXPECT_EQ(repr(nn::Embedding(10, 3)), "Embedding(10, 3)");
  EXPECT_EQ(repr(nn::Dropout(0.25)), "Dropout(p=0.25)");
  EXPECT_EQ(repr(nn::Flatten()), "Flatten(start_dim=1, end_dim=-1)");
  EXPECT_EQ(repr(nn::ReLU()), "ReLU()");
  EXPECT_EQ(repr(nn::GELU("tanh")), "GELU(approximate='tanh')");
  EXPECT_EQ(repr(nn::SiLU()), "SiLU()");
  EXPECT_EQ(repr(nn::Softmax(1)), "Softmax(dim=1)");
  EXPECT_EQ(repr(nn::LogSoftmax(-1)), "LogSoftmax(dim=-1)");
  EXPECT_EQ(repr(Module()), "Module()");
}

TEST(NnRepr, ModuleTreePrintsNestedChildren) {
  auto net = make_shared<Net>();
  EXPECT_EQ(net->repr(),
            "Net(\n"
            "  (features): Sequential(\n"
            "    (0): Linear(in_features=4, out_features=8, bias=true)\n"
            "    (1): ReLU()\n"
            "    (2): Block(\n"
            "      (fc): Linear(in_features=8, out_features=8, bias=true)\n"
            "      (norm): LayerNorm((8,), eps=1e-05, elementwise_affine=true, bias=true)\n"
            "    )\n"
            "  )\n"
            "  (bn): BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=true, bias=true, track_running_stats=true)\n"
            "  (head): Linear(in_features=8, out_features=3, bias=false)\n"
            ")");
}

}  // namespace
}  // namespace ember

// ember::compile: compiled calls equal eager ones (forward passes and whole training steps), the
// passes do what they say on small graphs, signatures recompile or refuse, and what a graph cannot
// capture is an error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "ember/amp.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/models/gpt.h"
#include "ember/models/mnist.h"
#include "ember/optim/adagrad.h"
#include "ember/optim/adam.h"
#include "ember/optim/rmsprop.h"
#include "ember/optim/sgd.h"
#include "kernels/cpu/conv_nchwc.h"
#include "test_util.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

void expect_same_parameters(const nn::Module& a, const nn::Module& b, double tol) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LE(max_abs_diff(pa[i].second, pb[i].second), tol) << pa[i].first;
  }
}

// Runs `steps` training steps (batches from make_batch(step)) of two copies of a model, eagerly
// and compiled, and compares the losses step by step (bits when tol is 0) and the final weights.
// With `dropout`, both runs start each step from the same generator state and must leave it in
// the same one. Returns the compiled function's statistics and explain().
template <class MakeModel, class MakeBatch>
std::pair<CompileStats, std::string> train_both(MakeModel make_model, MakeBatch make_batch, int steps,
                                                CompileOptions options, double tol, bool dropout) {
  manual_seed(7);
  auto eager_model = make_model();
  manual_seed(7);
  auto compiled_model = make_model();
  optim::Adam eager_opt(eager_model->parameters(), optim::AdamOptions{.lr = 1e-3});
  optim::Adam compiled_opt(compiled_model->parameters(), optim::AdamOptions{.lr = 1e-3});
  auto step_of = [](auto& model, optim::Optimizer& opt) {
    return [&model, &opt](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
  };
  auto eager_step = step_of(eager_model, eager_opt);
  auto compiled_step = compile(step_of(compiled_model, compiled_opt), options);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = make_batch(s);
    if (dropout) manual_seed(1000 + static_cast<uint64_t>(s));
    const double eager_loss = eager_step(x, y).template item<double>();
    const Tensor eager_next = rand({4});
    if (dropout) manual_seed(1000 + static_cast<uint64_t>(s));
    const double compiled_loss = compiled_step(x, y).template item<double>();
    if (dropout) {
      EXPECT_TRUE(test_util::bitwise_equal(rand({4}), eager_next)) << "step " << s << ", batch " << x.size(0);
    }
    if (tol == 0) {
      EXPECT_EQ(compiled_loss, eager_loss) << "step " << s << ", batch " << x.size(0);
    } else {
      EXPECT_NEAR(compiled_loss, eager_loss, tol * std::max(1.0, std::abs(eager_loss)))
          << "step " << s << ", batch " << x.size(0);
    }
  }
  expect_same_parameters(*eager_model, *compiled_model, tol);
  return {compiled_step.stats(), compiled_step.explain()};
}

// The same batch shape every step: one trace, then replays.
template <class MakeModel, class MakeBatch>
void compare_training(MakeModel make_model, MakeBatch make_batch, int steps, CompileOptions options, double tol,
                      bool dropout = false) {
  const CompileStats stats = train_both(make_model, make_batch, steps, options, tol, dropout).first;
  EXPECT_EQ(stats.compiles, 1);
  EXPECT_EQ(stats.replays, steps - 1);
}

std::pair<Tensor, Tensor> mnist_batch(int step, bool image) {
  manual_seed(100 + step);
  Tensor x = image ? randn({16, 1, 28, 28}) : randn({16, 784});
  Tensor y = randint(0, 10, {16});
  return {x, y};
}

TEST(Compile, MlpTrainingStepsMatchEagerBitwiseWithoutFusion) {
  CompileOptions o;
  o.fuse = false;
  compare_training([] { return models::mnist_mlp(); }, [](int s) { return mnist_batch(s, false); }, 50, o, 0.0);
}

TEST(Compile, MlpTrainingStepsMatchEager) {
  compare_training([] { return models::mnist_mlp(); }, [](int s) { return mnist_batch(s, false); }, 50, {}, 0.0);
}

TEST(Compile, CnnTrainingStepsMatchEager) {
  compare_training([] { return models::mnist_cnn(); }, [](int s) { return mnist_batch(s, true); }, 50, {}, 0.0, true);
}

models::GPTConfig tiny_gpt() {
  models::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

// One training step of `ember train gpt`: the loss, backward, clipping and the optimizer's step.
auto gpt_step(models::GPT& model, optim::Optimizer& opt) {
  return [&model, &opt](const Tensor& idx, const Tensor& targets) {
    opt.zero_grad();
    Tensor loss = model.loss(idx, targets);
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    return loss;
  };
}

// Runs `steps` GPT training steps (AdamW, gradient clipping) of two copies, eagerly and compiled,
// on the batches make_batch(step) returns; the losses equal eager's bit for bit step by step, and so
// do the final weights. Returns the compiled function's statistics and explain().
template <class MakeBatch>
std::pair<CompileStats, std::string> gpt_both(MakeBatch make_batch, int steps, CompileOptions options) {
  const models::GPTConfig c = tiny_gpt();
  manual_seed(11);
  models::GPT eager(c);
  manual_seed(11);
  models::GPT compiled(c);
  optim::AdamW eager_opt(eager.parameters(), optim::AdamWOptions{.lr = 1e-3});
  optim::AdamW compiled_opt(compiled.parameters(), optim::AdamWOptions{.lr = 1e-3});
  auto eager_step = gpt_step(eager, eager_opt);
  auto compiled_step = compile(gpt_step(compiled, compiled_opt), options);
  for (int s = 0; s < steps; ++s) {
    auto [idx, targets] = make_batch(s);
    const double eager_loss = eager_step(idx, targets).template item<double>();
    EXPECT_EQ(compiled_step(idx, targets).template item<double>(), eager_loss) << "step " << s << ", " << idx.shape();
  }
  expect_same_parameters(eager, compiled, 0);
  return {compiled_step.stats(), compiled_step.explain()};
}

TEST(Compile, GptTrainingStepsMatchEager) {
  auto make_batch = [](int step) {
    manual_seed(500 + static_cast<uint64_t>(step));
    Tensor idx = randint(0, 32, {4, 16});
    return std::pair<Tensor, Tensor>{idx, randint(0, 32, {4, 16})};
  };
  EXPECT_EQ(gpt_both(make_batch, 50, {}).first.compiles, 1);
}

// The GPT step with its batch dim dynamic: attention, layer norms, clipping and AdamW from a
// template at the sizes not traced. With the sequence length dynamic instead, arange(L) and the
// causal mask (L x L) do not scale with it: every length is traced, and still follows eager.
TEST(Compile, GptStepsWithDynamicDimsMatchEager) {
  const std::vector<int64_t> sizes = {4, 4, 3, 2, 5, 1, 4, 3, 6, 2};
  for (const bool dynamic_length : {false, true}) {
    auto make_batch = [&](int s) {
      const int64_t n = sizes[static_cast<size_t>(s)];
      const int64_t batch = dynamic_length ? 2 : n, length = dynamic_length ? 2 * n : 16;
      manual_seed(500 + static_cast<uint64_t>(s));
      Tensor idx = randint(0, 32, {batch, length});
      return std::pair<Tensor, Tensor>{idx, randint(0, 32, {batch, length})};
    };
    CompileOptions options;
    options.dynamic = dynamic_length ? std::vector<std::pair<int, int>>{{0, 1}, {1, 1}}
                                     : std::vector<std::pair<int, int>>{{0, 0}, {1, 0}};
    const auto [stats, explain] = gpt_both(make_batch, static_cast<int>(sizes.size()), options);
    if (dynamic_length) {
      EXPECT_EQ(stats.sized, 0);
      EXPECT_THAT(explain, HasSubstr("step 28 (arange) differs in more than its sizes"));
    } else {
      EXPECT_EQ(stats.compiles, 3);  // 4 (first call), 3 and 2
      EXPECT_EQ(stats.sized, 3);     // 5, 1 and 6
    }
  }
}

// A compiled step runs its optimizer's updates as one multi-tensor step (Note [multi-tensor updates]
// in graph/executor.h): bit for bit the eager updates, for each optimizer with an update kernel,
// with parameters of several pieces and of one, on 1 and 2 threads, and with a step the loss scaler
// skips (an Inf in the batch) changing no parameter.
TEST(Compile, MultiTensorUpdatesMatchEagerBitForBit) {
  test_util::ThreadCountGuard guard;
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd", [](auto p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9}); }},
      {"adamw", [](auto p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.amsgrad = true}); }},
      {"adagrad", [](auto p) { return std::make_unique<optim::Adagrad>(p); }},
      {"rmsprop",
       [](auto p) {
         return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.momentum = 0.5, .centered = true});
       }},
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& [name, make] : optimizers) {
      manual_seed(3);
      auto eager_model = models::mnist_mlp();  // 784 x 128 weights: seven pieces; biases: one each
      manual_seed(3);
      auto compiled_model = models::mnist_mlp();
      auto eager_opt = make(eager_model->parameters());
      auto compiled_opt = make(compiled_model->parameters());
      amp::GradScaler eager_scaler, compiled_scaler;
      auto step_of = [](auto& model, optim::Optimizer& opt, amp::GradScaler& scaler) {
        return [&model, &opt, &scaler](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = cross_entropy(model->forward(x), y);
          scaler.scale(loss).backward();
          scaler.step(opt);
          scaler.update();
          return loss;
        };
      };
      auto eager_step = step_of(eager_model, *eager_opt, eager_scaler);
      auto compiled_step = compile(step_of(compiled_model, *compiled_opt, compiled_scaler));
      for (int s = 0; s < 5; ++s) {
        auto [x, y] = mnist_batch(s, false);
        if (s == 3) x.select(0, 0).select(0, 0).fill_(INFINITY);  // the scaler skips this step
        const Tensor before = compiled_model->parameters()[0].clone();
        eager_step(x, y);
        compiled_step(x, y);
        if (s == 3) {
          EXPECT_TRUE(test_util::bitwise_equal(compiled_model->parameters()[0], before)) << name;
        }
        const auto pe = eager_model->parameters(), pc = compiled_model->parameters();
        for (size_t i = 0; i < pe.size(); ++i) {
          ASSERT_TRUE(test_util::bitwise_equal(pc[i], pe[i])) << name << " step " << s << " parameter " << i;
        }
      }
      // A second trace where the first step made the optimizer's state; the skipped step replays.
      EXPECT_GE(compiled_step.stats().replays, 3) << name;
    }
  }
}

TEST(Compile, ForwardPassesMatchEager) {
  manual_seed(1);
  auto mlp = models::mnist_mlp();
  auto cnn = models::mnist_cnn();
  mlp->eval();
  cnn->eval();
  autograd::NoGradGuard no_grad;
  auto f = compile([&](const Tensor& x) { return mlp->forward(x); });
  auto g = compile([&](const Tensor& x) { return cnn->forward(x); });
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({8, 784});
    EXPECT_LE(max_abs_diff(f(x), mlp->forward(x)), 1e-5);
    Tensor xi = randn({8, 1, 28, 28});
    EXPECT_LE(max_abs_diff(g(xi), cnn->forward(xi)), 1e-5);
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(g.stats().replays, 2);
}

TEST(Compile, ResultsAreFreshTensorsEachCall) {
  auto f = compile([](const Tensor& x) { return x * 2 + 1; });
  Tensor x = ones({4});
  Tensor a = f(x);
  Tensor b = f(x * 3);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 3, 3, 3}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{7, 7, 7, 7}));
}

TEST(Compile, NewShapesCompileAgainAndFixedSignaturesRefuse) {
  auto f = compile([](const Tensor& x) { return x.exp().sum(); });
  f(ones({3}));
  f(ones({3}));
  f(ones({5}));
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_THAT(f.explain(), HasSubstr("argument 0 is float32[5]"));
  // Each compile's time, split into the trace and the passes.
  EXPECT_THAT(f.explain(), HasSubstr("was float32[3] on cpu (traced in "));
  EXPECT_THAT(f.explain(), HasSubstr(" ms, 2 kernels -> "));
  EXPECT_GT(f.stats().trace_seconds, 0.0);
  EXPECT_GT(f.stats().pass_seconds, 0.0);
  EXPECT_NEAR(f(zeros({5})).item<double>(), 5.0, 1e-6);
  CompileOptions fixed;
  fixed.fixed_signature = true;
  auto g = compile([](const Tensor& x) { return x + 1; }, fixed);
  g(ones({3}));
  EXPECT_THAT(thrown([&] { g(ones({3}, kFloat64)); }), HasSubstr("fixed signature"));
  EXPECT_THAT(thrown([&] { g(ones({3}, kFloat64)); }), HasSubstr("argument 0 is float64[3]"));
}

// Training steps at batch sizes that change from call to call (Note [dynamic dims]): the first
// three distinct sizes are traced (the first call's trace differs from the later ones), the two
// warm traces make a template, and every other size, 1 and odd ones included, is built from it
// without a trace. Losses and parameters follow eager step by step.
template <class MakeModel>
CompileStats dynamic_training(MakeModel make_model, bool image, bool dropout, CompileOptions options, double tol) {
  const std::vector<int64_t> sizes = {16, 16, 9, 5, 12, 1, 7, 16, 3, 9, 12, 31};
  auto make_batch = [&](int s) {
    const int64_t b = sizes[static_cast<size_t>(s)];
    manual_seed(100 + static_cast<uint64_t>(s));
    Tensor x = image ? randn({b, 1, 28, 28}) : randn({b, 784});
    return std::pair<Tensor, Tensor>{x, randint(0, 10, {b})};
  };
  options.dynamic = {{0, 0}, {1, 0}};
  const auto [stats, explain] =
      train_both(make_model, make_batch, static_cast<int>(sizes.size()), options, tol, dropout);
  EXPECT_THAT(explain, HasSubstr("the traces at sizes 9 and 5 make a template"));
  EXPECT_THAT(explain, HasSubstr("(from the template, no trace: passes "));
  if (std::getenv("EMBER_TEST_SHOW_EXPLAIN")) std::cout << explain;
  return stats;
}

TEST(Compile, DynamicBatchSizesBuildPlansFromATemplate) {
  CompileOptions unfused;
  unfused.fuse = false;
  for (const CompileOptions& options : {CompileOptions{}, unfused}) {
    const CompileStats mlp = dynamic_training([] { return models::mnist_mlp(); }, false, false, options, 0.0);
    EXPECT_EQ(mlp.compiles, 3);  // 16 (the first call), 9 and 5
    EXPECT_EQ(mlp.sized, 5);     // 12, 1, 7, 3 and 31
    EXPECT_EQ(mlp.replays, 12 - 3);
  }
  // Convolutions, pooling and dropout's draws (whose blocks scale with the batch).
  const CompileStats cnn = dynamic_training([] { return models::mnist_cnn(); }, true, true, {}, 0.0);
  EXPECT_EQ(cnn.compiles, 3);
  EXPECT_EQ(cnn.sized, 5);
}

// Dropout's draws: a plan built from the template reserves as many generator blocks as eager
// draws at its size, so masks and the generator's state afterwards match eager's.
TEST(Compile, DynamicDimsScaleRandomDraws) {
  auto body = [](const Tensor& x) { return dropout(x * 2.0, 0.5).sum({1}); };
  auto f = compile(body, CompileOptions{.dynamic = {{0, 0}}});
  for (const int64_t n : {6, 6, 10, 4, 7, 1, 33}) {
    const Tensor x = randn({n, 8});  // an odd count of elements draws half a block more: see below
    manual_seed(50 + static_cast<uint64_t>(n));
    const Tensor want = body(x), want_next = rand({3});
    manual_seed(50 + static_cast<uint64_t>(n));
    EXPECT_TRUE(test_util::bitwise_equal(f(x), want)) << n;
    EXPECT_TRUE(test_util::bitwise_equal(rand({3}), want_next)) << n;
  }
  EXPECT_EQ(f.stats().compiles, 2);  // 6 and 10 (a function without state: its first trace is like the others)
  EXPECT_EQ(f.stats().sized, 4);
  // Dropout draws (numel + 1) / 2 blocks: with 9 columns, only sizes that keep it a multiple of the
  // size are built; the rest are traced.
  auto g = compile(body, CompileOptions{.dynamic = {{0, 0}}});
  for (const int64_t n : {6, 10, 4, 7, 8}) {
    const Tensor x = randn({n, 9});
    manual_seed(60);
    const Tensor want = body(x);
    manual_seed(60);
    EXPECT_TRUE(test_util::bitwise_equal(g(x), want)) << n;
  }
  EXPECT_EQ(g.stats().sized, 2);  // 4 and 8
  EXPECT_THAT(g.explain(), HasSubstr("would not be a whole number at size 7, so it is traced"));
}

// Plans built from a template are kept for the 16 sizes run last; a fixed signature admits new
// sizes of the dynamic dims and nothing else.
TEST(Compile, DynamicSizesKeepTheLastSixteenPlans) {
  auto body = [](const Tensor& x) { return (x * 2.0 + 1.0).sum({1}); };
  CompileOptions options;
  options.dynamic = {{0, 0}};
  options.fixed_signature = true;
  auto f = compile(body, options);
  auto run = [&](int64_t n) {
    const Tensor x = randn({n, 3});
    EXPECT_TRUE(test_util::bitwise_equal(f(x), body(x))) << n;
  };
  for (int64_t n = 2; n <= 30; ++n) run(n);  // 2 and 3 traced, 27 sizes built
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_EQ(f.stats().sized, 27);
  run(30);  // among the last 16: replayed
  EXPECT_EQ(f.stats().sized, 27);
  run(4);  // its plan made room for a later size: built again
  EXPECT_EQ(f.stats().sized, 28);
  run(2);  // traced, so kept
  EXPECT_EQ(f.stats().sized, 28);
  EXPECT_THAT(thrown([&] { f(randn({4, 5})); }), HasSubstr("besides the sizes of its dynamic dims"));
}

// A function that accumulates into a .grad: replacing the .grad makes the template stale as well
// as the plans; the next new size is traced, and the gradient sums what eager sums.
TEST(Compile, AStaleTemplateIsDroppedAndTheSizeTraced) {
  manual_seed(5);
  const Tensor w = randn({3}).requires_grad_(), w_eager = w.detach().clone().requires_grad_();
  auto body_of = [](const Tensor& weight) {
    return [weight](const Tensor& x) {
      Tensor loss = (x * weight).sum();
      loss.backward();
      return loss;
    };
  };
  auto f = compile(body_of(w), CompileOptions{.dynamic = {{0, 0}}});
  auto eager = body_of(w_eager);
  auto both = [&](int64_t n) {
    const Tensor x = randn({n, 3});
    EXPECT_TRUE(test_util::bitwise_equal(f(x), eager(x))) << n;
    EXPECT_TRUE(test_util::bitwise_equal(w.grad(), w_eager.grad())) << n;
  };
  for (const int64_t n : {4, 6, 5, 8}) both(n);  // 6 and 5 make the template, 8 is built
  EXPECT_EQ(f.stats().sized, 1);
  w.set_grad(zeros({3}));
  w_eager.set_grad(zeros({3}));
  both(9);  // built, found stale, traced
  both(10);
  EXPECT_EQ(f.stats().sized, 2);
  EXPECT_EQ(f.stats().compiles, 5);  // 4, 6, 5, 9 and 10: the template went with the old .grad
  both(8);                           // the plan built for 8 is stale too: traced again
  EXPECT_EQ(f.stats().compiles, 6);
}

TEST(Compile, DynamicDimsThatEnterTheGraphOtherwiseTraceEachSize) {
  CompileOptions options;
  options.dynamic = {{0, 0}};
  // A size squared: (n, n) is not a multiple of n.
  auto gram = compile([](const Tensor& x) { return matmul(x, x.transpose(0, 1)).relu(); }, options);
  // A size used as a value: 1 / n is an attribute of a fill.
  auto mean_by_hand = compile([](const Tensor& x) { return x.sum({0}) / static_cast<double>(x.size(0)); }, options);
  for (const int64_t n : {4, 6, 9, 3}) {
    const Tensor x = randn({n, 5});
    for (int call = 0; call < 2; ++call) {
      EXPECT_TRUE(test_util::bitwise_equal(gram(x), matmul(x, x.transpose(0, 1)).relu()));
      EXPECT_TRUE(test_util::bitwise_equal(mean_by_hand(x), x.sum({0}) / static_cast<double>(n)));
    }
  }
  EXPECT_EQ(gram.stats().compiles, 4);
  EXPECT_EQ(gram.stats().sized, 0);
  // (n, n) at 4 and 6 fits 10 n - 24, which the trace at 9 contradicts.
  EXPECT_THAT(gram.explain(), HasSubstr("does not hold at size 9"));
  EXPECT_EQ(mean_by_hand.stats().compiles, 4);
  EXPECT_THAT(mean_by_hand.explain(), HasSubstr("differs in more than its sizes"));
  // A size the template would halve into a fraction is traced; the others are built.
  auto pooled = compile([](const Tensor& x) { return max_pool2d(x.unsqueeze(0), 2).squeeze(0) + 1.0; },
                        CompileOptions{.dynamic = {{0, 2}}});
  for (const int64_t w : {8, 16, 12, 7, 20}) {
    const Tensor x = randn({3, 4, w});
    (void)pooled(x);
    EXPECT_TRUE(test_util::bitwise_equal(pooled(x), max_pool2d(x.unsqueeze(0), 2).squeeze(0) + 1.0)) << w;
  }
  EXPECT_EQ(pooled.stats().sized, 2);  // 12 and 20; 7 pools to 3 columns, not 3.5
  EXPECT_EQ(pooled.stats().compiles, 3);
  // Bad marks are errors that name them.
  auto f = compile([](const Tensor& x, const Tensor& y) { return x + y; }, CompileOptions{.dynamic = {{0, 0}, {1, 0}}});
  EXPECT_THAT(thrown([&] { f(ones({3, 2}), ones({4, 2})); }), HasSubstr("take one size per call"));
  auto g = compile([](const Tensor& x) { return x + 1; }, CompileOptions{.dynamic = {{0, 2}}});
  EXPECT_THAT(thrown([&] { g(ones({3, 2})); }), HasSubstr("marks dim 2 of argument 0, which has 2 dims"));
  auto h = compile([](const Tensor& x, double s) { return x * s; }, CompileOptions{.dynamic = {{1, 0}}});
  EXPECT_THAT(thrown([&] { h(ones({3}), 2.0); }), HasSubstr("which is not a tensor argument"));
}

// A decode step over a growing KV cache (Note [dynamic dims]): the new position's key and value
// are concatenated to caches of L positions, so the graph holds sizes L + 1 and strides
// (L + 1) * d, a multiple of L plus a constant. The lengths 1 (a size-1 dim keys a family of its
// own), 2, 3 and 4 are traced (4 confirms the template of 2 and 3), and every later length, a jump
// back included, is built from the template and gives eager's bits, on 1 and 2 threads.
TEST(Compile, AGrowingKvCacheBuildsEveryLaterLengthFromATemplate) {
  test_util::ThreadCountGuard guard;
  manual_seed(41);
  const int64_t batch = 2, heads = 2, head_dim = 8, embd = heads * head_dim;
  nn::LayerNorm ln(Shape{embd});
  nn::Linear qkv(embd, 3 * embd), proj(embd, embd);
  auto heads_of = [&](const Tensor& t) { return t.view({batch, 1, heads, head_dim}).transpose(1, 2); };
  // x (B, 1, C), keys and values (B, H, L, d) -> the new position's output, keys and values.
  auto step = [&](const Tensor& x, const Tensor& keys, const Tensor& values) {
    const std::vector<Tensor> parts = split(qkv(ln(x)), embd, 2);
    const Tensor k = cat({keys, heads_of(parts[1])}, 2), v = cat({values, heads_of(parts[2])}, 2);
    const Tensor y = scaled_dot_product_attention(heads_of(parts[0]), k, v);
    return std::vector<Tensor>{proj(y.transpose(1, 2).reshape({batch, 1, embd})) + x, k, v};
  };
  CompileOptions options;
  options.dynamic = {{1, 2}, {2, 2}};
  auto decode = compile(step, options);
  Tensor keys = randn({batch, heads, 1, head_dim}), values = randn({batch, heads, 1, head_dim});
  auto both = [&](const Tensor& x) {
    const std::vector<Tensor> got = decode(x, keys, values), want = step(x, keys, values);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(test_util::bitwise_equal(got[i], want[i])) << "length " << keys.size(2) << ", result " << i;
    keys = want[1];
    values = want[2];
  };
  for (int64_t length = 1; length <= 24; ++length) {
    set_num_threads(length % 2 == 0 ? 1 : 2);
    both(randn({batch, 1, embd}));
  }
  EXPECT_EQ(decode.stats().compiles, 4);
  EXPECT_EQ(decode.stats().sized, 20);
  EXPECT_THAT(decode.explain(), HasSubstr("the trace at size 4 follows the template from sizes 2 and 3"));
  keys = keys.narrow(2, 0, 5).contiguous();
  values = values.narrow(2, 0, 5).contiguous();
  both(randn({batch, 1, embd}));  // length 5's plan made room for a later one: built again
  EXPECT_EQ(decode.stats().compiles, 4);
  EXPECT_EQ(decode.stats().sized, 21);
}

TEST(Compile, ScalarArgumentsAreInTheSignature) {
  auto f = compile([](const Tensor& x, double s) { return x * s; });
  EXPECT_EQ(f(ones({2}), 2.0).to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(f(ones({2}), 3.0).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(f(ones({2}), 3.0).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(f.stats().compiles, 2);
}

TEST(Compile, ReadingAValueOnTheHostIsAnError) {
  auto f = compile([](const Tensor& x) {
    if (x.sum().item<double>() > 0) return x + 1;
    return x - 1;
  });
  EXPECT_THAT(thrown([&] { f(ones({3})); }), HasSubstr("item() reads a tensor's value on the host while tracing"));
}

// A host region (here the optimizer's step reading its skip flag) that reads an argument would
// replay the traced call's value: refused when traced.
TEST(Compile, AHostRegionReadingAnArgumentIsAnError) {
  Tensor p = ones({3}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{.lr = 0.1});
  auto f = compile([&](const Tensor& x, const Tensor& skip) {
    opt.zero_grad();
    (p * x).sum().backward();
    opt.step(skip);
    return p.sum();
  });
  EXPECT_THAT(thrown([&] { f(ones({3}), full({}, 0.0, kBool)); }),
              HasSubstr("reads an argument of the compiled function on the host"));
}

TEST(Compile, WritingAFoldedCapturedTensorIsDetected) {
  Tensor w = ones({4});
  // w * 2 depends only on w: folded into a constant, checked before each call.
  auto f = compile([&](const Tensor& x) { return x + w * 2; });
  EXPECT_EQ(f(zeros({4})).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(f(zeros({4})).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(f.stats().folded, 2);  // the scalar 2 and w * 2
  w.add_(1);
  EXPECT_EQ(f(zeros({4})).to_vector<float>(), (std::vector<float>{4, 4, 4, 4}));
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_THAT(f.explain(), HasSubstr("folded into a constant was written"));
}

TEST(Compile, EagerModeCallsTheFunction) {
  CompileOptions o;
  o.mode = CompileOptions::Mode::kEager;
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        return x + 1;
      },
      o);
  f(ones({2}));
  f(ones({2}));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(f.stats().compiles, 0);
}

TEST(Compile, TheGraphIsPrintedAfterEveryPass) {
  CompileOptions o;
  o.keep_pass_dumps = true;
  auto f = compile([](const Tensor& x) { return (x * 1.0).sigmoid() * x + 1; }, o);
  f(ones({8}));
  const auto stages = f.graph_stages();
  std::vector<std::string> names;
  for (const auto& [name, text] : stages) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"trace", "fold_constants", "simplify", "cse", "dce", "fuse_gelu", "fuse_silu",
                                      "fuse_attention", "fuse_epilogues", "threshold_pooled", "recompute_for_backward",
                                      "fuse_elementwise", "block_activations", "plan_memory"}));
  EXPECT_THAT(stages.front().second.dump(), HasSubstr("= mul("));
  // x * 1.0 simplified away, sigmoid(x) * x is silu(x).
  EXPECT_THAT(stages.back().second.dump(), HasSubstr("fused(silu, add)"));
  EXPECT_THAT(stages.back().second.dot(), HasSubstr("digraph ember"));
  EXPECT_EQ(f.graph().dump(), stages.back().second.dump());
}

TEST(Compile, TheEnvironmentChoosesTheDefaultMode) {
  setenv("EMBER_COMPILE", "0", 1);
  auto eager = compile([](const Tensor& x) { return x + 1; });
  setenv("EMBER_COMPILE", "sometimes", 1);
  EXPECT_THAT(thrown([] { compile([](const Tensor& x) { return x + 1; })(ones({1})); }),
              HasSubstr("EMBER_COMPILE must be 0, 1 or check, got 'sometimes'"));
  unsetenv("EMBER_COMPILE");
  eager(ones({2}));
  eager(ones({2}));
  EXPECT_EQ(eager.stats().compiles, 0);
  auto compiled = compile([](const Tensor& x) { return x + 1; });
  compiled(ones({2}));
  EXPECT_EQ(compiled.stats().compiles, 1);
}

TEST(Compile, CheckModeComparesWithEager) {
  CompileOptions o;
  o.mode = CompileOptions::Mode::kCheck;
  auto f = compile([](const Tensor& x, const Tensor& y) { return (x * y.sigmoid() + y).sum({1}); }, o);
  for (int i = 0; i < 3; ++i) {
    Tensor out = f(randn({8, 16}), randn({8, 16}));
    EXPECT_EQ(out.shape(), Shape({8}));
  }
  EXPECT_EQ(f.stats().replays, 2);
}

TEST(Compile, TrainingStepsMakeNoSystemAllocationsAfterWarmUp) {
  manual_seed(2);
  auto model = models::mnist_mlp();
  optim::Adam opt(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  auto step = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  });
  Tensor x = randn({32, 784});
  Tensor y = randint(0, 10, {32});
  for (int i = 0; i < 3; ++i) step(x, y);
  const int64_t before = memory_stats().system_allocations;
  for (int i = 0; i < 10; ++i) step(x, y);
  EXPECT_EQ(memory_stats().system_allocations, before);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Peak bytes in use during a training step, eager and compiled, after warm-up (parameters,
// gradients and optimizer state included in both).
template <class Step>
int64_t step_peak(Step& step, const Tensor& x, const Tensor& y) {
  for (int i = 0; i < 2; ++i) step(x, y);
  reset_peak_memory_stats();
  step(x, y);
  return memory_stats().peak_bytes_in_use;
}

// Note [thresholds before unpooling]: a ReLU's backward after a max-pool's runs on the pooled
// values, before the unpooling. The input gradient keeps eager's bits with overlapping windows
// (kernel 3, stride 2: a position reached by several windows), padding, dilation, ceil mode, zeros
// and NaNs among the inputs, float32 and float64; a pool whose output is written in place keeps
// the eager order.
TEST(Compile, ThresholdsMovedBeforeUnpoolingKeepTheGradientsBits) {
  struct Case {
    Pair kernel, stride, padding, dilation;
    bool ceil;
  };
  const std::vector<Case> cases = {{2, 2, 0, 1, false},
                                   {3, 2, 1, 1, false},
                                   {3, 1, 1, 1, false},
                                   {{2, 3}, {1, 2}, {1, 0}, 2, true},
                                   {3, 2, 0, 1, true}};
  for (const DType dtype : {kFloat32, kFloat64}) {
    for (const Case& c : cases) {
      manual_seed(9);
      Tensor x = randn({3, 4, 11, 10}, TensorOptions(dtype));
      x.view({-1}).narrow(0, 0, 40).zero_();               // ties at 0 in the windows
      x.view({-1}).narrow(0, 100, 3).fill_(std::nan(""));  // a NaN maximum
      const Tensor weight = randn({1, 4, 1, 1}, TensorOptions(dtype));
      auto grad_of = [&](const Tensor& input) {
        const Tensor leaf = input.detach().requires_grad_();
        const Tensor pooled = max_pool2d(relu(leaf * 2.0), c.kernel, c.stride, c.padding, c.dilation, c.ceil);
        (pooled * weight).sum().backward();
        return leaf.grad();
      };
      auto compiled = compile(grad_of);
      (void)compiled(x);
      EXPECT_TRUE(test_util::bitwise_equal(compiled(x), grad_of(x)))
          << dtype << " kernel " << c.kernel.h << "x" << c.kernel.w << " stride " << c.stride.h;
      EXPECT_EQ(compiled.stats().pooled_thresholds, 1);
    }
  }
  // The pool's output written in place after the pool (which eager allows: nothing saved it): the
  // threshold stays after the unpooling, where it reads the ReLU's output.
  const Tensor scale = randn({2, 3, 4, 4});
  auto in_place = [&](const Tensor& input) {
    const Tensor leaf = input.detach().requires_grad_();
    Tensor pooled = max_pool2d(relu(leaf * 2.0), 2);
    const Tensor loss = (pooled * scale).sum();
    {
      autograd::NoGradGuard no_grad;
      pooled.sub_(5.0);
    }
    loss.backward();
    return std::vector<Tensor>{leaf.grad(), pooled};
  };
  auto compiled = compile(in_place);
  const Tensor x = randn({2, 3, 8, 8});
  (void)compiled(x);
  EXPECT_TRUE(test_util::bitwise_equal(compiled(x)[0], in_place(x)[0]));
  EXPECT_EQ(compiled.stats().pooled_thresholds, 0);
}

// Note [recomputed activations]: a transformer block's GELU output, the transposed copy of its
// attention output and its layer norms' outputs are made again for the backward. The gradients
// keep eager's bits (float32 and float64, 1 and 2 threads); an input written in place between the
// forward and the backward keeps the kernel from running again.
TEST(Compile, RecomputedActivationsKeepTheGradientsBits) {
  test_util::ThreadCountGuard guard;
  for (const DType dtype : {kFloat32, kFloat64}) {
    manual_seed(12);
    const TensorOptions on(dtype);
    const int64_t batch = 8, length = 32, width = 64, heads = 4;
    const Tensor ln_w = randn({width}, on).requires_grad_(), ln_b = randn({width}, on).requires_grad_();
    const Tensor qkv_w = (randn({3 * width, width}, on) * 0.1).detach().requires_grad_();
    const Tensor proj_w = (randn({width, width}, on) * 0.1).detach().requires_grad_();
    const Tensor fc_w = (randn({4 * width, width}, on) * 0.1).detach().requires_grad_();
    const Tensor out_w = (randn({width, 4 * width}, on) * 0.1).detach().requires_grad_();
    const std::vector<Tensor> params = {ln_w, ln_b, qkv_w, proj_w, fc_w, out_w};
    const Tensor probe = randn({batch, length, width}, on);
    auto block = [&](const Tensor& x) {
      const Tensor h = layer_norm(x, Shape{width}, ln_w, ln_b);
      const std::vector<Tensor> qkv = split(linear(h, qkv_w), width, 2);
      auto heads_of = [&](const Tensor& t) { return t.view({batch, length, heads, -1}).transpose(1, 2); };
      const Tensor y =
          scaled_dot_product_attention(heads_of(qkv[0]), heads_of(qkv[1]), heads_of(qkv[2]), std::nullopt, 0.0, true);
      const Tensor r = x + linear(y.transpose(1, 2).contiguous().view({batch, length, width}), proj_w);
      const Tensor m = r + linear(gelu(linear(layer_norm(r, Shape{width}, ln_w, ln_b), fc_w)), out_w);
      return autograd::grad({(m * probe).sum()}, params);
    };
    auto compiled = compile(block);
    for (const int threads : {1, 2}) {
      set_num_threads(threads);
      const Tensor x = randn({batch, length, width}, on);
      (void)compiled(x);
      const std::vector<Tensor> got = compiled(x), want = block(x);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(test_util::bitwise_equal(got[i], want[i])) << dtype << " parameter " << i << ", " << threads;
    }
    // Both layer norms, the attention copy and GELU.
    EXPECT_EQ(compiled.stats().recomputed, 4) << compiled.explain();
  }
  // GELU's input written in place after the forward: its output is kept, not made again.
  const Tensor w = randn({256, 256}).requires_grad_();
  auto in_place = [&](const Tensor& x) {
    w.set_grad(Tensor());
    Tensor pre = x * 2.0;
    const Tensor loss = linear(gelu(pre), w).sum();
    {
      autograd::NoGradGuard no_grad;
      pre.add_(1.0);
    }
    loss.backward();
    return std::vector<Tensor>{w.grad().clone(), pre};
  };
  auto compiled = compile(in_place);
  const Tensor x = randn({128, 256});
  (void)compiled(x);
  EXPECT_TRUE(test_util::bitwise_equal(compiled(x)[0], in_place(x)[0]));
  EXPECT_EQ(compiled.stats().recomputed, 0);
}

// Memory at the peak of a step (parameters, gradients and optimizer state included), eager and
// compiled. The MLP's activations are small next to its weights: the arena costs about what eager's
// temporaries do at its peak. The CNN keeps 0.8x of eager's (Note [thresholds before unpooling])
// and the GPT of `ember train gpt` too (Note [recomputed activations]).
TEST(Compile, CompiledTrainingStepsPeakBelowEager) {
  // `before`: the bytes in use before the model was made (what earlier tests left is not the step's).
  auto compare = [](const char* name, auto& step, const Tensor& x, const Tensor& y, double most, int64_t before) {
    const int64_t eager = step_peak(step, x, y) - before;
    auto compiled = compile(step);
    const int64_t peak = step_peak(compiled, x, y) - before;
    std::cout << name << " training step peak: eager " << eager << " bytes, compiled " << peak << " bytes ("
              << static_cast<double>(peak) / static_cast<double>(eager) << "x); arena " << compiled.stats().arena_bytes
              << " for " << compiled.stats().temp_bytes << " of temporaries\n";
    EXPECT_LE(static_cast<double>(peak), most * static_cast<double>(eager)) << name;
  };
  for (const bool cnn : {false, true}) {
    manual_seed(4);
    const int64_t before = memory_stats().bytes_in_use;
    auto model = cnn ? models::mnist_cnn() : models::mnist_mlp();
    optim::Adam opt(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    compare(cnn ? "cnn" : "mlp", step, cnn ? randn({64, 1, 28, 28}) : randn({64, 784}), randint(0, 10, {64}),
            cnn ? 0.8 : 1.1, before);
  }
  const models::GPTConfig c{.vocab_size = 84, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 192};
  manual_seed(11);
  const int64_t before = memory_stats().bytes_in_use;
  models::GPT gpt(c);
  optim::AdamW opt(gpt.parameters(), optim::AdamWOptions{.lr = 1e-3});
  auto step = gpt_step(gpt, opt);
  const Tensor idx = randint(0, 84, {16, 128}), targets = randint(0, 84, {16, 128});
  compare("gpt", step, idx, targets, 0.8, before);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

TEST(Compile, TheProfilerSeesKernelsAndFusedGroupsOfAReplay) {
  auto f = compile([](const Tensor& x, const Tensor& y) { return matmul(x * x.sigmoid() + y, y); });
  const Tensor x = randn({64, 64}), y = randn({64, 64});
  f(x, y);
  profiler::Profiler prof;
  f(x, y);
  prof.stop();
  bool fused = false, matmul_seen = false;
  for (const profiler::Event& e : prof.events()) {
    if (e.name == "fused(silu, add)") {  // x * sigmoid(x) is silu(x)
      fused = true;
      EXPECT_TRUE(e.has_cost);
      EXPECT_EQ(e.flops, 64.0 * 64 * (11 + 1));
      EXPECT_EQ(e.bytes, 3.0 * 64 * 64 * 4);  // x and y read, the sum written: nothing between
    }
    if (e.name == "matmul") {
      matmul_seen = true;
      EXPECT_EQ(e.flops, 2.0 * 64 * 64 * 64);
    }
  }
  EXPECT_TRUE(fused);
  EXPECT_TRUE(matmul_seen);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Edge cases drawn on purpose: empty and size-1 dims, non-contiguous, broadcast and overlapping
// arguments, results that are arguments or views of them.
TEST(Compile, EdgeCasesMatchEager) {
  auto f = compile([](const Tensor& a, const Tensor& b) { return std::vector<Tensor>{a * b.sigmoid() + 1, a.sum()}; });
  auto check = [&](const Tensor& a, const Tensor& b) {
    for (int call = 0; call < 2; ++call) {
      const std::vector<Tensor> got = f(a, b);
      const Tensor want0 = a * b.sigmoid() + 1, want1 = a.sum();
      ASSERT_EQ(got[0].shape(), want0.shape());
      if (want0.numel() > 0) {
        EXPECT_EQ((got[0] - want0).abs().max().item<double>(), 0.0);
      }
      EXPECT_EQ(got[1].item<double>(), want1.item<double>());
    }
  };
  check(randn({0, 5}), randn({0, 5}));              // empty
  check(randn({1, 1}), randn({1, 1}));              // size 1
  check(randn({7, 5}).t(), randn({5, 7}));          // non-contiguous argument
  check(randn({5, 7}), randn({7}).expand({5, 7}));  // broadcast (stride 0) argument
  const Tensor base = randn({12});
  check(base.slice(0, 0, 8).view({2, 4}), base.slice(0, 4, 12).view({2, 4}));  // overlapping memory
  check(base.view({3, 4}), base.view({3, 4}));                                 // the same tensor twice
  check(base.slice(0, 0, 8).view({2, 4}), base.slice(0, 2, 10).view({2, 4}));  // another overlap
  EXPECT_GE(f.stats().compiles, 6);
}

TEST(Compile, ResultsMayBeArgumentsOrTheirViews) {
  auto f = compile([](const Tensor& a) { return std::vector<Tensor>{a, a.t(), a.slice(1, 1, 3)}; });
  const Tensor x = randn({3, 4});
  f(x);
  const Tensor y = randn({3, 4});
  const std::vector<Tensor> r = f(y);
  EXPECT_TRUE(r[0].is_same(y) || r[0].data_ptr() == y.data_ptr());
  EXPECT_EQ((r[1] - y.t()).abs().max().item<double>(), 0.0);
  EXPECT_EQ((r[2] - y.slice(1, 1, 3)).abs().max().item<double>(), 0.0);
  EXPECT_EQ(r[2].data_ptr(), y.slice(1, 1, 3).data_ptr());
}

// A weight the plan writes (an optimizer step inside a compiled function) moves its version, so
// what eager products kept from it (Note [B packed once], a packed weight) is not read again:
// eager linears after the compiled write give the new weight's bits.
TEST(Compile, PlanWritesRetireFormsKeptOutside) {
  manual_seed(12);
  const Tensor x = randn({200, 300});
  Tensor w = randn({64, 300});
  auto step = compile([](const Tensor& weight) {
    Tensor t = weight;
    t.mul_(-0.5);
    return weight.sum();
  });
  for (int round = 0; round < 3; ++round) {
    for (int call = 0; call < 3; ++call) (void)nn::functional::linear(x, w);  // packed from the second
    step(w);
    const Tensor fresh = nn::functional::linear(x, w.clone());
    EXPECT_TRUE(test_util::bitwise_equal(nn::functional::linear(x, w), fresh)) << "round " << round;
    EXPECT_TRUE(test_util::bitwise_equal(nn::functional::linear(x, w), fresh)) << "round " << round;
  }
}

TEST(Compile, InPlaceWritesToArgumentsReplay) {
  auto f = compile([](const Tensor& a) {
    Tensor t = a;
    t.mul_(2).add_(1);
    return a.sum();
  });
  Tensor x = ones({4});
  f(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3, 3, 3, 3}));
  Tensor y = zeros({4});
  EXPECT_EQ(f(y).item<double>(), 4.0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A linear, a GELU or SiLU and a residual add, compiled (the activation and the add one strip
// pass after the GEMM: fuse_epilogues keeps GELU and SiLU out of the GEMM), bit for bit as eager,
// in float32 and float64, with edge tiles (37 rows, 80 columns), several k blocks (k = 600), 1 and
// 2 threads.
TEST(Compile, LinearActivationResidualMatchesEagerBitForBit) {
  manual_seed(79);
  const test_util::ThreadCountGuard guard;
  const int threads = get_num_threads();
  for (const DType dtype : {kFloat32, kFloat64}) {
    const Tensor w = randn({80, 600}, dtype), b = randn({80}, dtype);
    const std::vector<std::function<Tensor(const Tensor&)>> activations = {
        [](const Tensor& t) { return gelu(t, "tanh"); }, [](const Tensor& t) { return gelu(t); },
        [](const Tensor& t) { return silu(t); }};
    for (size_t a = 0; a < activations.size(); ++a) {
      const auto body = [&](const Tensor& x, const Tensor& r) {
        return std::vector<Tensor>{activations[a](linear(x, w, b)) + r};
      };
      auto f = compile(body);
      autograd::NoGradGuard no_grad;
      for (const int n : {threads, 1}) {
        set_num_threads(n);
        const Tensor x = randn({37, 600}, dtype), r = randn({37, 80}, dtype);
        EXPECT_TRUE(test_util::bitwise_equal(f(x, r)[0], body(x, r)[0]))
            << dtype << " activation " << a << " threads " << n;
      }
      set_num_threads(threads);
    }
  }
}

// A residual in the GEMM's epilogue over inputs with batch dims: the product is the one tall GEMM
// the unfused linear solves, so the bits are eager's, with a residual laid out like the result, one
// broadcast along the batch (added after the GEMM), float32 and float64; a bfloat16 residual stays
// its own add (the epilogue would round once where eager rounds twice).
TEST(Compile, ResidualEpiloguesOverBatchDimsMatchEagerBitForBit) {
  manual_seed(80);
  for (const DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    const Tensor w = randn({48, 64}, dtype);
    const auto body = [&](const Tensor& x, const Tensor& r) { return linear(x, w) + r; };
    for (const bool broadcast : {false, true}) {
      auto f = compile(body);
      autograd::NoGradGuard no_grad;
      // 32 x 64 x 48 per batch takes another GEMM path than the tall 256 x 64 x 48.
      const Tensor x = randn({8, 32, 64}, dtype);
      const Tensor r = broadcast ? randn({32, 48}, dtype).expand({8, 32, 48}) : randn({8, 32, 48}, dtype);
      (void)f(x, r);
      EXPECT_TRUE(test_util::bitwise_equal(f(x, r), body(x, r))) << dtype << (broadcast ? " broadcast" : "");
      EXPECT_EQ(f.stats().epilogues, dtype == kBFloat16 ? 0 : 1) << dtype;
    }
  }
}

// A product scaled by a constant takes the scale as the GEMM's alpha where the GEMM sums k whole
// (kGemmWholeSumDepth): attention's scores keep eager's bits, float32 and float64, batched, 1 and 2
// threads; over a longer k, or by a scale that is not one constant value, the mul stays.
TEST(Compile, ScaledProductsTakeTheScaleAsAlphaBitForBit) {
  test_util::ThreadCountGuard guard;
  manual_seed(81);
  for (const DType dtype : {kFloat32, kFloat64}) {
    for (const int64_t k : {64, 256, 257, 600}) {
      const auto scores = [](const Tensor& q, const Tensor& key) { return matmul(q, key.transpose(-2, -1)) * 0.37; };
      auto f = compile(scores);
      autograd::NoGradGuard no_grad;
      for (const int threads : {2, 1}) {
        set_num_threads(threads);
        const Tensor q = randn({2, 3, 45, k}, dtype), key = randn({2, 3, 70, k}, dtype);
        (void)f(q, key);
        EXPECT_TRUE(test_util::bitwise_equal(f(q, key), scores(q, key))) << dtype << " k " << k << ", " << threads;
      }
      EXPECT_EQ(f.stats().epilogues, k <= 256 ? 1 : 0) << dtype << " k " << k;
    }
  }
  const Tensor per_column = randn({70});
  auto g = compile([&](const Tensor& a, const Tensor& b) { return matmul(a, b) * per_column; });
  const Tensor a = randn({45, 64}), b = randn({64, 70});
  (void)g(a, b);
  EXPECT_TRUE(test_util::bitwise_equal(g(a, b), matmul(a, b) * per_column));
  EXPECT_EQ(g.stats().epilogues, 0);
}

TEST(Compile, ReturnedResultsOfFusedEpiloguesReplay) {
  const Tensor w = randn({16, 8}), b = randn({16});
  auto f = compile([&](const Tensor& x, const Tensor& r) {
    return std::vector<Tensor>{gelu(linear(x, w, b)), relu(matmul(x, w.t())) + r};
  });
  autograd::NoGradGuard no_grad;
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({4, 8}), r = randn({4, 16});
    const std::vector<Tensor> got = f(x, r);
    EXPECT_LE((got[0] - gelu(linear(x, w, b))).abs().max().item<double>(), 1e-5);
    EXPECT_LE((got[1] - (relu(matmul(x, w.t())) + r)).abs().max().item<double>(), 1e-5);
  }
  EXPECT_GE(f.stats().epilogues, 2);  // relu and the residual
}

// A ResNet block's convolutions take their epilogues (Conv2dAttrs): relu(conv + bias), then
// relu(conv + residual), bit for bit as eager, on the blocked path (64 channels) and on im2col
// (3 channels, and float64); a relu before the add stays out of the residual's epilogue.
TEST(Compile, ConvolutionEpiloguesMatchEagerBitForBit) {
  manual_seed(63);
  for (const auto& [channels, dtype] : {std::pair{int64_t{64}, kFloat32}, std::pair{int64_t{3}, kFloat32},
                                        std::pair{int64_t{14}, kFloat32}, std::pair{int64_t{64}, kFloat64}}) {
    SCOPED_TRACE(::testing::Message() << channels << " channels, " << dtype);
    const Tensor w1 = randn({channels, channels, 3, 3}, dtype), b1 = randn({channels}, dtype);
    const Tensor w2 = randn({channels, channels, 3, 3}, dtype);
    const auto block = [&](const Tensor& x) {
      const Tensor h = relu(conv2d(x, w1, b1, 1, 1));
      return std::vector<Tensor>{relu(conv2d(h, w2, std::nullopt, 1, 1) + x),
                                 relu(conv2d(x, w2, std::nullopt, 1, 1)) + x};
    };
    auto f = compile(block);
    autograd::NoGradGuard no_grad;
    for (int call = 0; call < 2; ++call) {
      const Tensor x = randn({2, channels, 9, 14}, dtype);
      const std::vector<Tensor> got = f(x), want = block(x);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ((got[i] - want[i]).abs().max().item<double>(), 0.0) << i;
    }
    EXPECT_EQ(f.stats().epilogues, 4);  // two relus and a residual; not the add after the last relu
  }
}

// Every activation the convolution's epilogue takes (GELU both ways, SiLU, also written out as
// ONNX exports it, ReLU), after the bias alone and after a residual, gives eager's bits on each
// convolution path: the blocked one (with 60 output channels, so a tile's last four go through the
// leftover path), over patches (an image's first layer), the direct one, depthwise, im2col (stride
// 3 and dilation 2, two groups), and in float64 (where the erf GELU has no vector form and runs
// lane by lane); the blocked one also over one image and three (tasks over bands of rows), 7 x 7
// maps (two rows per tile) and 30-wide rows (several tiles per row, the activation every few rows).
TEST(Compile, ConvolutionActivationsMatchEagerBitForBit) {
  struct Case {
    int64_t in, out, kernel, stride, padding, dilation, groups;
    DType dtype;
    int64_t batch = 2, height = 11, width = 13;
  };
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> activations = {
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"x * sigmoid(x)", [](const Tensor& x) { return x * sigmoid(x); }},  // an exported SiLU (fuse_silu)
      {"relu", [](const Tensor& x) { return relu(x); }}};
  manual_seed(64);
  for (const Case& c :
       {Case{64, 60, 3, 1, 1, 1, 1, kFloat32}, Case{3, 16, 7, 2, 3, 1, 1, kFloat32},
        Case{3, 8, 3, 1, 1, 1, 1, kFloat32}, Case{16, 16, 3, 1, 1, 1, 16, kFloat32},
        Case{8, 8, 3, 3, 2, 2, 2, kFloat32}, Case{16, 16, 3, 2, 1, 1, 16, kFloat64},
        Case{8, 8, 3, 3, 2, 2, 2, kFloat64}, Case{3, 8, 3, 1, 1, 1, 1, kFloat64},
        Case{64, 60, 3, 1, 1, 1, 1, kFloat32, 1, 7, 7}, Case{64, 64, 3, 1, 1, 1, 1, kFloat32, 3, 24, 30}}) {
    const Tensor w = randn({c.out, c.in / c.groups, c.kernel, c.kernel}, c.dtype), b = randn({c.out}, c.dtype);
    for (const auto& [name, act] : activations) {
      SCOPED_TRACE(::testing::Message() << name << ", " << c.in << " -> " << c.out << " channels, kernel " << c.kernel
                                        << ", stride " << c.stride << ", groups " << c.groups << ", " << c.dtype);
      const auto conv = [&](const Tensor& x) { return conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups); };
      const auto body = [&](const Tensor& x, const Tensor& y, const Tensor& r) {
        return std::vector<Tensor>{act(conv(x)), act(conv(y) + r)};
      };
      auto f = compile(body);
      autograd::NoGradGuard no_grad;
      for (int call = 0; call < 2; ++call) {
        // Values past +-5 reach the activations' far ends (SiLU's and GELU's saturation).
        const Tensor x = randn({c.batch, c.in, c.height, c.width}, c.dtype) * 2.0;
        const Tensor y = randn({c.batch, c.in, c.height, c.width}, c.dtype) * 2.0;
        const Tensor r = randn(conv(x).shape(), c.dtype);
        const std::vector<Tensor> got = f(x, y, r), want = body(x, y, r);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test_util::bitwise_equal(got[i], want[i])) << i;
      }
      EXPECT_EQ(f.stats().epilogues, 3);  // the two activations and the residual
    }
  }
}

// For inference a convolution takes the 2 x 2 max pooling after its activation where the direct
// kernel pools as it stores (Note [pooled convolution]): MNIST's first layer, an odd-sized map with
// padding and a residual, float64; eager's bits. Not when the pooling keeps its indices for a
// backward, nor for other windows. (Conv2dPooled in test_conv.cpp: the paths that do not pool as
// they store.)
TEST(Compile, ConvolutionTakesTheMaxPoolingAfterIt) {
  struct Case {
    int64_t in, out, height, width, padding;
    DType dtype;
  };
  manual_seed(66);
  for (const Case& c :
       {Case{1, 16, 28, 28, 0, kFloat32}, Case{2, 9, 15, 21, 1, kFloat32}, Case{1, 8, 12, 12, 2, kFloat64}}) {
    SCOPED_TRACE(::testing::Message() << c.in << " -> " << c.out << " channels, " << c.height << " x " << c.width
                                      << ", " << c.dtype);
    const Tensor w1 = randn({c.out, c.in, 5, 5}, c.dtype), w2 = randn({c.out, c.in, 5, 5}, c.dtype);
    const Tensor w3 = randn({c.out, c.in, 5, 5}, c.dtype), b = randn({c.out}, c.dtype);
    const auto body = [&](const Tensor& x, const Tensor& r) {
      return std::vector<Tensor>{max_pool2d(relu(conv2d(x, w1, b, 1, c.padding)), 2),
                                 max_pool2d(conv2d(x, w2, std::nullopt, 1, c.padding) + r, 2),
                                 max_pool2d(relu(conv2d(x, w3, b, 1, c.padding)), 3)};
    };
    auto f = compile(body);
    for (const bool grad : {false, true}) {
      const Tensor x = randn({3, c.in, c.height, c.width}, c.dtype).requires_grad_(grad);
      const Tensor r = randn(conv2d(x.detach(), w1, b, 1, c.padding).shape(), c.dtype);
      std::optional<autograd::NoGradGuard> no_grad;
      if (!grad) no_grad.emplace();
      const std::vector<Tensor> got = f(x, r), want = body(x, r);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(test_util::bitwise_equal(got[i].detach(), want[i].detach())) << i;
      if (!grad) {
        // Two relus and the add; then the two 2 x 2 poolings where the kernel takes them.
        EXPECT_EQ(f.stats().epilogues, 5);
      }
    }
  }
}

// A ResNet-like run of convolutions keeps its activations in the blocked layout (Note [blocked
// activations]) where the CPU has the blocked kernel: a stem run over its patches and its max
// pooling written blocked, a blocked input padded more than its reader needs (the 1 x 1 shortcut), a
// blocked residual, and ReLU, GELU and SiLU written blocked. Channels past a whole block (60 and
// 120), rows of one tile, several tiles and two rows per tile (the 5 x 5 maps), both of the blocked
// forward's ways to split a batch (2 and 3 images on 2 threads). The results equal eager's bit for
// bit.
TEST(Compile, ConvolutionsKeepTheirActivationsBlocked) {
  test_util::ThreadCountGuard guard;
  manual_seed(67);
  const int64_t c = 60, d = 120;
  const auto weight = [](int64_t out, int64_t in, int64_t k) { return randn({out, in, k, k}) * (1.0 / (3 * in)); };
  const Tensor w0 = weight(c, 3, 7), w1 = weight(c, c, 3), w2 = weight(c, c, 3), w3 = weight(d, c, 3);
  const Tensor wd = weight(d, c, 1), w4 = weight(d, d, 3), w5 = weight(d, d, 5), w6 = weight(d, d, 3);
  const Tensor b0 = randn({c}), b1 = randn({c}), b2 = randn({c}), b3 = randn({d}), b4 = randn({d}), b5 = randn({d});
  const auto body = [&](const Tensor& image) {
    const Tensor stem = relu(conv2d(image, w0, b0, 2, 3));  // over its patches; blocked, unpadded
    const Tensor x = max_pool2d(stem, 3, 2, 1);             // blocked, padded by 1
    const Tensor h = relu(conv2d(x, w1, b1, 1, 1));         // blocked, padded by 1
    const Tensor y = relu(conv2d(h, w2, b2, 1, 1) + x);     // blocked residual; blocked, padded by 1
    const Tensor s = conv2d(y, wd, std::nullopt, 2, 0);     // reads y from its padding of 1; blocked
    const Tensor z = gelu(conv2d(y, w3, b3, 2, 1));         // blocked, padded by 2
    const Tensor u = relu(conv2d(z, w4, b4, 1, 2, 2) + s);  // blocked residual; NCHW (returned)
    const Tensor v = silu(conv2d(u, w5, b5, 1, 2));         // NCHW (read by a multiply)
    return std::vector<Tensor>{u, v * 2, conv2d(v, w6, std::nullopt, 1, 1)};
  };
  cpu::Conv2dGeometry geometry;  // the first convolution's
  geometry.in_channels = geometry.out_channels = c;
  const bool blocked_kernel = cpu::nchwc_takes(geometry);
  autograd::NoGradGuard no_grad;
  for (const int64_t size : {40, 80}) {  // maps of 10 x 10 and 20 x 20 after the stem and the pooling
    for (const int64_t batch : {2, 3}) {
      auto f = compile(body);
      f(randn({batch, 3, size, size}));  // the trace (an eager run)
      for (const int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << size << " x " << size << ", batch " << batch << ", " << threads << " threads");
        set_num_threads(threads);
        const Tensor image = randn({batch, 3, size, size});
        const std::vector<Tensor> got = f(image), want = body(image);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test_util::bitwise_equal(got[i], want[i])) << i;
        EXPECT_EQ(f.stats().replays, threads);
        EXPECT_EQ(f.stats().blocked, blocked_kernel ? 6 : 0);
      }
    }
  }
}

TEST(Compile, AttentionDropoutDrawsANewMaskEachCall) {
  const Tensor q = randn({1, 2, 8, 4}), k = randn({1, 2, 8, 4}), v = randn({1, 2, 8, 4});
  auto f = compile([&](const Tensor& x) { return scaled_dot_product_attention(x, k, v, std::nullopt, 0.5); });
  for (int call = 0; call < 3; ++call) {
    manual_seed(40 + call);
    const Tensor got = f(q);
    manual_seed(40 + call);
    const Tensor want = scaled_dot_product_attention(q, k, v, std::nullopt, 0.5);
    EXPECT_EQ((got - want).abs().max().item<double>(), 0.0) << "call " << call;
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

TEST(Compile, ACompiledFunctionInsideAnotherTraceIsAnError) {
  auto inner = compile([](const Tensor& x) { return x * 2; });
  inner(ones({2}));
  auto outer = compile([&](const Tensor& x) { return inner(x) + 1; });
  EXPECT_THAT(thrown([&] { outer(ones({2})); }), HasSubstr("was called while another one was being traced"));
}

}  // namespace
}  // namespace ember

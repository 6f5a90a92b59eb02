// Thread safety (docs/reliability.md, "Thread safety"): what may be shared across threads, tested
// by running it from several threads at once and comparing with serial runs bit for bit.
// - One model serves several threads: the MNIST CNN and a GPT (forward and generate) in eval mode,
//   each thread with its own inputs, under NoGradGuard and with grad mode on.
// - One compiled function called from several threads (calls take turns), and traced while other
//   threads run the same model eagerly.
// - Separate models trained on separate threads, eagerly and compiled, give serial training's
//   weights.
// - The caching allocator under concurrent allocation, cross-thread frees and empty_cache; the
//   global generator under concurrent draws; a profiler started and stopped while other threads
//   run ops; grad mode, anomaly mode, autocast and the phase are per thread.
// Every test also runs under ThreadSanitizer (scripts/test --tsan, with tests/test_parallel.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <latch>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ember/amp.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/models/gpt.h"
#include "ember/models/mnist.h"
#include "ember/nn/quantize.h"
#include "ember/optim/adam.h"
#include "ember/profiler.h"
#include "test_util.h"

namespace ember {
namespace {

using test_util::bitwise_equal;
using test_util::ThreadCountGuard;

constexpr int kThreads = 4;

// Runs body(t) for t in [0, threads) on that many threads released at once; rethrows the first
// exception a thread threw.
void run_concurrently(int threads, const std::function<void(int)>& body) {
  std::latch start(threads);
  std::mutex mutex;
  std::exception_ptr failure;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        body(t);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

// Two threads in the pool, whatever the machine: concurrent callers then compete for it, and a
// caller that finds it busy runs its parallel loops on its own thread.
class ThreadSafety : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(2); }

 private:
  ThreadCountGuard guard_;
};

// --- one model, several threads ---------------------------------------------------------------

TEST_F(ThreadSafety, OneCnnServesSeveralThreads) {
  manual_seed(3);
  const auto model = models::mnist_cnn();
  model->eval();
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(randn({4, 1, 28, 28}));
  {
    autograd::NoGradGuard no_grad;
    for (const Tensor& x : inputs) expected.push_back((*model)(x));
  }
  std::atomic<int> mismatches{0};
  run_concurrently(kThreads, [&](int t) {
    autograd::NoGradGuard no_grad;  // per thread, like grad mode itself
    for (int round = 0; round < 3; ++round) {
      if (!bitwise_equal((*model)(inputs[t]), expected[t])) mismatches.fetch_add(1);
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
}

// Runs `model` on inputs[t] in thread t, three times each, all threads at once, after marking every
// weight written (so each derived copy is stale and the threads race to remake it); returns how
// many results differ from the same model's answers computed first on one thread.
int mismatches_when_shared(nn::Module& model, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> expected;
  {
    autograd::NoGradGuard no_grad;
    for (const Tensor& x : inputs) expected.push_back(model(x));
  }
  for (const auto& [name, weight] : model.named_parameters()) weight.bump_version();
  std::atomic<int> mismatches{0};
  run_concurrently(static_cast<int>(inputs.size()), [&](int t) {
    autograd::NoGradGuard no_grad;
    for (int round = 0; round < 3; ++round) {
      if (!bitwise_equal(model(inputs[t]), expected[t])) mismatches.fetch_add(1);
    }
  });
  return mismatches.load();
}

// Quantized Linear layers multiply through interleaved copies of their weights, remade on the first
// product after the weights change: here by every thread at once.
TEST_F(ThreadSafety, OneQuantizedModelServesSeveralThreads) {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 96), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(96, 40));
  quant::quantize(*model, {.dtype = kQ4_0});
  std::vector<Tensor> inputs;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(randn({3, 64}));
  EXPECT_EQ(mismatches_when_shared(*model, inputs), 0);
}

// A convolution's packed weight is kept on the weight's storage (Note [derived forms]), remade on
// the first call after the weight changes: here by every thread at once.
TEST_F(ThreadSafety, OneConvolutionModelServesSeveralThreads) {
  manual_seed(6);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(32, 32, 3));
  std::vector<Tensor> inputs;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(randn({2, 16, 9, 12}));
  EXPECT_EQ(mismatches_when_shared(*model, inputs), 0);
}

models::GPTConfig small_gpt() { return {.vocab_size = 32, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}; }

TEST_F(ThreadSafety, OneGptServesSeveralThreads) {
  manual_seed(4);
  models::GPT model(small_gpt());
  model.eval();
  std::vector<Tensor> inputs, expected;
  std::vector<std::vector<int64_t>> prompts, texts;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(randint(0, 32, {2, 16}));
    prompts.push_back({t, t + 1, 2 * t + 3});
  }
  const models::SamplingOptions greedy{.temperature = 0.0};
  {
    autograd::NoGradGuard no_grad;
    for (const Tensor& idx : inputs) expected.push_back(model(idx));
  }
  for (const auto& prompt : prompts) texts.push_back(models::generate(model, prompt, 12, greedy));
  std::atomic<int> mismatches{0};
  run_concurrently(kThreads, [&](int t) {
    autograd::NoGradGuard no_grad;
    if (!bitwise_equal(model(inputs[t]), expected[t])) mismatches.fetch_add(1);
    // generate() sets eval mode (already set: nothing is written) and keeps its cache per call.
    if (models::generate(model, prompts[t], 12, greedy) != texts[t]) mismatches.fetch_add(1);
  });
  EXPECT_EQ(mismatches.load(), 0);
}

// With grad mode on, each thread's forward records its own graph over the shared parameters (their
// gradient accumulators are made on first use, by whichever thread comes first), and
// autograd::grad, which writes no .grad, may run on all of them at once.
TEST_F(ThreadSafety, GradientsOfOneModelOnSeveralThreadsAtOnce) {
  auto make = [] {
    manual_seed(5);
    return models::mnist_mlp();
  };
  const auto reference = make();
  std::vector<Tensor> inputs, targets;
  std::vector<std::vector<Tensor>> expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(randn({8, 784}));
    targets.push_back(randint(0, 10, {8}));
  }
  const std::vector<Tensor> reference_params = reference->parameters();
  for (int t = 0; t < kThreads; ++t) {
    expected.push_back(autograd::grad({cross_entropy((*reference)(inputs[t]), targets[t])}, reference_params));
  }
  std::atomic<int> mismatches{0};
  for (int round = 0; round < 2; ++round) {  // fresh parameters each round
    const auto shared = make();
    const std::vector<Tensor> params = shared->parameters();
    run_concurrently(kThreads, [&](int t) {
      const std::vector<Tensor> grads = autograd::grad({cross_entropy((*shared)(inputs[t]), targets[t])}, params);
      for (size_t p = 0; p < grads.size(); ++p) {
        if (!bitwise_equal(grads[p], expected[t][p])) mismatches.fetch_add(1);
      }
    });
    for (const Tensor& p : params) EXPECT_FALSE(p.grad().defined());
  }
  EXPECT_EQ(mismatches.load(), 0);
}

// Views of the same leaves recorded on several threads at once (no allocation in between, so
// nothing else orders the threads): every view's node must lead to the leaf's one gradient
// accumulator, made by whichever thread comes first, so the gradient counts every view.
TEST_F(ThreadSafety, ViewsOfSharedLeavesRecordedAtOnceShareOneAccumulator) {
  for (int round = 0; round < 4; ++round) {
    std::vector<Tensor> leaves;
    for (int i = 0; i < 32; ++i) leaves.push_back(ones({4}, TensorOptions().with_requires_grad(true)));
    std::vector<std::vector<Tensor>> views(kThreads);
    run_concurrently(kThreads, [&](int t) {
      for (const Tensor& leaf : leaves) views[t].push_back(leaf.view({2, 2}));
    });
    std::vector<Tensor> sums;
    for (const auto& thread_views : views) {
      for (const Tensor& v : thread_views) sums.push_back(v.sum());
    }
    const std::vector<Tensor> grads = autograd::grad({stack(sums).sum()}, leaves);
    for (const Tensor& g : grads) EXPECT_TRUE(bitwise_equal(g, full({4}, double{kThreads})));
  }
}

// --- compiled functions ---------------------------------------------------------------------------

TEST_F(ThreadSafety, OneCompiledFunctionServesSeveralThreads) {
  manual_seed(6);
  const auto model = models::mnist_cnn();
  model->eval();
  const CompileOptions compiled{.mode = CompileOptions::Mode::kCompiled};
  auto forward = compile(
      [&](const Tensor& x) {
        autograd::NoGradGuard no_grad;
        return (*model)(x);
      },
      compiled);
  std::vector<Tensor> inputs, expected;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(randn({4, 1, 28, 28}));
  forward(inputs[0]);  // the trace
  for (const Tensor& x : inputs) expected.push_back(forward(x));
  std::atomic<int> mismatches{0};
  run_concurrently(kThreads, [&](int t) {
    for (int round = 0; round < 3; ++round) {
      // Each call's result is its own tensor: a later call on another thread does not overwrite it.
      const Tensor out = forward(inputs[t]);
      std::this_thread::yield();
      if (!bitwise_equal(out, expected[t])) mismatches.fetch_add(1);
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(forward.stats().compiles, 1);
  EXPECT_EQ(forward.stats().calls, 1 + kThreads + kThreads * 3);

  // Traced on one thread while the others run the same model eagerly: the trace holds its own
  // thread's kernels only.
  auto traced_in_company = compile(
      [&](const Tensor& x) {
        autograd::NoGradGuard no_grad;
        return (*model)(x);
      },
      compiled);
  run_concurrently(kThreads, [&](int t) {
    autograd::NoGradGuard no_grad;
    if (t == 0) {
      traced_in_company(inputs[0]);
    } else {
      for (int round = 0; round < 3; ++round) (*model)(inputs[t]);
    }
  });
  EXPECT_EQ(traced_in_company.stats().traced_kernels, forward.stats().traced_kernels);
  EXPECT_EQ(traced_in_company.stats().steps, forward.stats().steps);
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(bitwise_equal(traced_in_company(inputs[t]), expected[t])) << t;
}

// --- separate models, separate threads ------------------------------------------------------------

// Trains a fresh CNN (seed `seed`) for a few steps on its own batches; eagerly or compiled.
std::vector<Tensor> train_cnn(uint64_t seed, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                              bool compiled) {
  std::shared_ptr<nn::Sequential> model;
  {
    // Weights come from the global generator: made one model at a time (see the rules).
    static std::mutex init;
    const std::lock_guard<std::mutex> lock(init);
    manual_seed(seed);
    model = models::mnist_cnn();
  }
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  auto step = compile(
      [&](const Tensor& x, const Tensor& y) {
        optimizer.zero_grad();
        Tensor loss = cross_entropy((*model)(x), y);
        loss.backward();
        optimizer.step();
        return loss;
      },
      {.mode = compiled ? CompileOptions::Mode::kCompiled : CompileOptions::Mode::kEager});
  for (size_t s = 0; s < xs.size(); ++s) step(xs[s], ys[s]);
  return model->parameters();
}

void expect_concurrent_training_matches_serial(bool compiled) {
  std::vector<std::vector<Tensor>> xs(kThreads), ys(kThreads), expected;
  manual_seed(7);
  for (int t = 0; t < kThreads; ++t) {
    for (int s = 0; s < 4; ++s) {
      xs[t].push_back(randn({4, 1, 28, 28}));
      ys[t].push_back(randint(0, 10, {4}));
    }
  }
  for (int t = 0; t < kThreads; ++t) expected.push_back(train_cnn(100 + t, xs[t], ys[t], compiled));
  std::vector<std::vector<Tensor>> trained(kThreads);
  run_concurrently(kThreads, [&](int t) { trained[t] = train_cnn(100 + t, xs[t], ys[t], compiled); });
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(trained[t].size(), expected[t].size());
    for (size_t p = 0; p < trained[t].size(); ++p) {
      EXPECT_TRUE(bitwise_equal(trained[t][p], expected[t][p])) << "thread " << t << ", parameter " << p;
    }
  }
}

TEST_F(ThreadSafety, SeparateModelsTrainOnSeparateThreads) { expect_concurrent_training_matches_serial(false); }

TEST_F(ThreadSafety, SeparateCompiledStepsTraceAndTrainOnSeparateThreads) {
  expect_concurrent_training_matches_serial(true);
}

// --- process-wide services ------------------------------------------------------------------------

TEST_F(ThreadSafety, TheAllocatorCountsExactlyUnderConcurrentUse) {
  const int64_t in_use = memory_stats().bytes_in_use;
  std::mutex handoff_mutex;
  std::vector<Tensor> handoff;  // tensors made on one thread and freed on another
  std::atomic<int> clashes{0};
  run_concurrently(kThreads, [&](int t) {
    for (int round = 0; round < 400; ++round) {
      const int64_t n = 1 + (round * 37 + t * 1001) % 3000;
      Tensor mine = full({n}, static_cast<double>(t + 1));
      std::this_thread::yield();
      // A block handed to two threads at once would hold another thread's value by now.
      if (mine.sum().item<double>() != static_cast<double>(n * (t + 1))) clashes.fetch_add(1);
      const std::lock_guard<std::mutex> lock(handoff_mutex);
      if (round % 3 == 0) {
        handoff.push_back(std::move(mine));
      } else if (!handoff.empty()) {
        handoff.pop_back();
      }
      if (t == 0 && round % 50 == 0) empty_cache();
    }
  });
  handoff.clear();
  EXPECT_EQ(clashes.load(), 0);
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.bytes_in_use, in_use);
  EXPECT_GE(after.bytes_reserved, after.bytes_in_use);
  EXPECT_GE(after.peak_bytes_in_use, after.bytes_in_use);
  empty_cache();
  EXPECT_EQ(memory_stats().bytes_reserved, memory_stats().bytes_in_use);
}

TEST_F(ThreadSafety, ConcurrentDrawsTakeDistinctNumbersFromTheGenerator) {
  constexpr int kDraws = 16;
  auto bytes = [](const Tensor& t) {
    return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * sizeof(float));
  };
  manual_seed(8);
  std::multiset<std::string> serial;
  for (int d = 0; d < kThreads * kDraws; ++d) serial.insert(bytes(randn({64})));
  const Tensor serial_next = randn({64});

  manual_seed(8);
  std::vector<std::vector<Tensor>> drawn(kThreads);
  run_concurrently(kThreads, [&](int t) {
    for (int d = 0; d < kDraws; ++d) drawn[t].push_back(randn({64}));
  });
  // Which thread got which numbers depends on the timing; which numbers were drawn does not.
  std::multiset<std::string> concurrent;
  for (const auto& draws : drawn) {
    for (const Tensor& x : draws) concurrent.insert(bytes(x));
  }
  EXPECT_EQ(concurrent, serial);
  EXPECT_TRUE(bitwise_equal(randn({64}), serial_next));
}

TEST_F(ThreadSafety, AProfilerStartsAndStopsWhileOtherThreadsRunOps) {
  std::atomic<bool> done{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&] {
      const Tensor a = randn({32, 32});
      ready.fetch_add(1);
      while (!done.load()) (void)relu(matmul(a, a)).sum();
    });
  }
  while (ready.load() < 2) std::this_thread::yield();
  for (int round = 0; round < 3; ++round) {
    profiler::Profiler prof;
    (void)exp(randn({16}));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    prof.stop();
    const int threads = prof.summary().threads;
    EXPECT_GE(threads, 1);
    for (const profiler::Event& e : prof.events()) {
      EXPECT_GE(e.thread, 0);
      EXPECT_LT(e.thread, threads);
    }
  }
  done.store(true);
  for (std::thread& w : workers) w.join();
}

TEST_F(ThreadSafety, ModesArePerThread) {
  autograd::NoGradGuard no_grad;
  autograd::DetectAnomalyGuard anomaly;
  amp::Autocast autocast(kBFloat16);
  PhaseGuard phase(Phase::kOptimizer);
  std::thread other([] {
    EXPECT_TRUE(autograd::is_grad_enabled());
    EXPECT_FALSE(autograd::is_anomaly_enabled());
    EXPECT_FALSE(amp::autocast_dtype().has_value());
    EXPECT_EQ(current_phase(), Phase::kForward);
    const Tensor w = ones({2, 2}, TensorOptions().with_requires_grad(true));
    EXPECT_TRUE((w * 2).requires_grad());
    EXPECT_EQ(matmul(w, w).dtype(), kFloat32);
  });
  other.join();
  EXPECT_FALSE(autograd::is_grad_enabled());
  EXPECT_TRUE(autograd::is_anomaly_enabled());
  EXPECT_EQ(amp::autocast_dtype(), kBFloat16);
  EXPECT_EQ(current_phase(), Phase::kOptimizer);
}

}  // namespace
}  // namespace ember

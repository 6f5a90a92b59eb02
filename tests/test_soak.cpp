// Memory over long runs (docs/reliability.md): 1,100 training steps of the MNIST CNN and of a small
// GPT, eagerly and through ember::compile. Once warm (kWarmUp steps), the caching allocator's
// counters must not move between steps at all: bytes in use, bytes reserved, calls to the system
// allocator and frees (DESIGN: a steady-state step makes no system allocation). The process's
// resident memory may grow by at most kRssBound over the next 1,000 steps, and once the run's
// model, optimizer and batches are gone, bytes in use are back where they started and
// empty_cache() gives the cache back to the system: resident memory drops by about the bytes it
// held. The figures are printed ("[soak] ...") for docs/reliability.md.
//
// Skipped under the sanitizers (scripts/test --sanitize, --tsan): their allocators and shadow
// memory make resident memory say nothing about ember's, and the steps run many times slower.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/models/gpt.h"
#include "ember/models/mnist.h"
#include "ember/optim/adam.h"
#include "ember/optim/clip_grad.h"
#include "test_util.h"

namespace ember {
namespace {

constexpr int kWarmUp = 100;
constexpr int kSteps = 1100;  // kWarmUp, then 1,000 steps whose memory must stay flat
constexpr int kBatches = 8;   // a small in-memory data set, cycled

// How much the resident memory may grow over the 1,000 steps after warm-up. Everything a step
// allocates through ember's allocator is checked exactly above; what remains is the small
// metadata that comes from malloc (autograd nodes, their std::function and vectors, the shared_ptr
// blocks of the header pool's misses), all freed each step. Leaking one step's autograd graph
// (tens of nodes, several KiB) would add megabytes over 1,000 steps; 512 KiB is 128 pages, which
// malloc's own arenas (a worker thread's, the trim threshold) move by without any leak, and is
// reached by a leak of about 520 bytes per step.
constexpr int64_t kRssBound = 512 * 1024;

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// One training run: step(s) trains on batch s % kBatches and returns the loss. Everything the run
// owns (model, optimizer, batches, compiled plans) dies with the function.
using Run = std::function<Tensor(int)>;

Run cnn_run(bool compiled) {
  manual_seed(1);
  std::shared_ptr<nn::Sequential> model = models::mnist_cnn();
  auto optimizer = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  auto batches = std::make_shared<std::vector<std::pair<Tensor, Tensor>>>();
  for (int b = 0; b < kBatches; ++b) batches->emplace_back(randn({16, 1, 28, 28}), randint(0, 10, {16}));
  auto train = [model, optimizer](const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    optimizer->step();
    return loss;
  };
  if (!compiled) {
    return [train, batches](int s) {
      const auto& [x, y] = (*batches)[s % kBatches];
      return train(x, y);
    };
  }
  return [step = compile(train, {.mode = CompileOptions::Mode::kCompiled}), batches](int s) mutable {
    const auto& [x, y] = (*batches)[s % kBatches];
    return step(x, y);
  };
}

Run gpt_run(bool compiled) {
  manual_seed(2);
  const models::GPTConfig config{.vocab_size = 32, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  auto model = std::make_shared<models::GPT>(config);
  auto optimizer = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-3});
  auto batches = std::make_shared<std::vector<std::pair<Tensor, Tensor>>>();
  for (int b = 0; b < kBatches; ++b) batches->emplace_back(randint(0, 32, {8, 32}), randint(0, 32, {8, 32}));
  auto train = [model, optimizer](const Tensor& idx, const Tensor& targets) {
    optimizer->zero_grad();
    Tensor loss = model->loss(idx, targets);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    optimizer->step();
    return loss;
  };
  if (!compiled) {
    return [train, batches](int s) {
      const auto& [idx, targets] = (*batches)[s % kBatches];
      return train(idx, targets);
    };
  }
  return [step = compile(train, {.mode = CompileOptions::Mode::kCompiled}), batches](int s) mutable {
    const auto& [idx, targets] = (*batches)[s % kBatches];
    return step(idx, targets);
  };
}

bool same_counters(const MemoryStats& a, const MemoryStats& b) {
  return a.bytes_in_use == b.bytes_in_use && a.bytes_reserved == b.bytes_reserved &&
         a.system_allocations == b.system_allocations && a.system_frees == b.system_frees;
}

std::string counters(const MemoryStats& s) {
  return "in use " + std::to_string(s.bytes_in_use) + ", reserved " + std::to_string(s.bytes_reserved) +
         ", system allocations " + std::to_string(s.system_allocations) + ", frees " + std::to_string(s.system_frees);
}

void soak(const char* name, const std::function<Run()>& make_run) {
#ifdef EMBER_TEST_SANITIZED
  GTEST_SKIP() << "resident memory means little under a sanitizer";
#endif
  empty_cache();
  const MemoryStats start = memory_stats();
  const int64_t rss_start = resident_bytes();
  int64_t rss_warm = 0, rss_max = 0, rss_end = 0;
  MemoryStats warm;
  double first_losses = 0, last_losses = 0;
  {
    Run run = make_run();
    for (int s = 0; s < kWarmUp; ++s) {
      const double loss = run(s).item<double>();
      if (s < kBatches) first_losses += loss;
    }
    warm = memory_stats();
    rss_warm = rss_max = resident_bytes();
    for (int s = kWarmUp; s < kSteps; ++s) {
      const double loss = run(s).item<double>();
      if (s >= kSteps - kBatches) last_losses += loss;
      const MemoryStats now = memory_stats();
      ASSERT_TRUE(same_counters(now, warm))
          << name << " step " << s << ": " << counters(now) << "; after warm-up " << counters(warm);
      if (s % 50 == 0) rss_max = std::max(rss_max, resident_bytes());
    }
    rss_end = resident_bytes();
    rss_max = std::max(rss_max, rss_end);
  }
  // The run learns (its batches, at least): it is training, not idling.
  EXPECT_LT(last_losses, 0.5 * first_losses) << name;
  EXPECT_LE(rss_max - rss_warm, kRssBound)
      << name << ": resident memory grew from " << rss_warm << " to " << rss_max << " bytes after warm-up";

  // Everything the run allocated is free again and only cached; empty_cache returns it.
  const MemoryStats done = memory_stats();
  EXPECT_EQ(done.bytes_in_use, start.bytes_in_use) << name;
  const int64_t rss_full = resident_bytes();
  empty_cache();
  const MemoryStats emptied = memory_stats();
  const int64_t rss_emptied = resident_bytes();
  EXPECT_EQ(emptied.bytes_reserved, emptied.bytes_in_use) << name;
  // Whole pages only: the smallest blocks (64 bytes up) share pages with malloc's other data.
  const int64_t released = done.bytes_reserved - emptied.bytes_reserved;
  EXPECT_GE(rss_full - rss_emptied, released * 4 / 5)
      << name << ": empty_cache released " << released << " bytes but resident memory fell only from " << rss_full
      << " to " << rss_emptied;

  std::printf(
      "[soak] %s: resident %.1f MiB at start, %.1f after warm-up, %.1f after %d steps (largest growth %+.0f KiB); "
      "allocator: %.1f MiB in use, %.1f reserved, %lld system allocations, flat after step %d; empty_cache: "
      "resident %.1f -> %.1f MiB (%.1f MiB released)\n",
      name, mib(rss_start), mib(rss_warm), mib(rss_end), kSteps, static_cast<double>(rss_max - rss_warm) / 1024.0,
      mib(warm.bytes_in_use - start.bytes_in_use), mib(warm.bytes_reserved - start.bytes_reserved),
      static_cast<long long>(warm.system_allocations - start.system_allocations), kWarmUp, mib(rss_full),
      mib(rss_emptied), mib(released));
}

TEST(MemorySoak, CnnEager) {
  soak("MNIST CNN, eager", [] { return cnn_run(false); });
}
TEST(MemorySoak, CnnCompiled) {
  soak("MNIST CNN, compiled", [] { return cnn_run(true); });
}
TEST(MemorySoak, GptEager) {
  soak("GPT, eager", [] { return gpt_run(false); });
}
TEST(MemorySoak, GptCompiled) {
  soak("GPT, compiled", [] { return gpt_run(true); });
}

}  // namespace
}  // namespace ember

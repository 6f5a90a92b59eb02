// The thread pool (kernels/cpu/parallel.h): every task runs exactly once whatever the thread
// count, nested and concurrent callers finish, a team's members run at once on distinct threads,
// and a GEMM split into tasks gives the same bits on any number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "kernels/cpu/parallel.h"
#include "test_util.h"

namespace {

using ember::cpu::parallel_for;
using ember::cpu::parallel_for_threads;
using ember::cpu::parallel_tasks;
using test_util::bitwise_equal;
using test_util::expect_error;
using test_util::ThreadCountGuard;

TEST(Parallel, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t count : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
      parallel_tasks(count, threads, [&](int64_t t) { runs[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < count; ++t) {
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << "task " << t << " of " << count << ", " << threads;
      }
    }
  }
}

TEST(Parallel, RangesCoverTheRangeOnceInCutsThatDependOnlyOnTheArguments) {
  for (int threads : {1, 2, 5}) {
    for (int64_t n : {0, 1, 5, 100, 100003}) {
      for (int64_t grain : {1, 7, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::pair<int64_t, int64_t>> cuts_a, cuts_b;
        std::mutex mutex;
        for (auto* cuts : {&cuts_a, &cuts_b}) {
          parallel_for_threads(threads, 3, 3 + n, grain, [&](int64_t b, int64_t e) {
            ASSERT_LT(b, e);
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - 3)].fetch_add(1);
            std::lock_guard<std::mutex> lock(mutex);
            cuts->emplace_back(b, e);
          });
          std::sort(cuts->begin(), cuts->end());
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 2) << i;
        EXPECT_EQ(cuts_a, cuts_b);
        if (n < 2 * grain) {
          EXPECT_LE(cuts_a.size(), 1u) << "a range under two grains stays on one thread";
        }
        EXPECT_LE(static_cast<int64_t>(cuts_a.size()), threads * ember::cpu::kTasksPerThread);
      }
    }
  }
}

TEST(Parallel, ANestedLoopRunsOnItsTasksThread) {
  ThreadCountGuard guard;
  ember::set_num_threads(2);
  std::atomic<int64_t> total{0};
  parallel_tasks(8, 2, [&](int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(0, 1 << 20, 1, [&](int64_t b, int64_t e) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      total.fetch_add(e - b);
    });
  });
  EXPECT_EQ(total.load(), 8 << 20);
}

TEST(Parallel, CallersOnSeveralThreadsAllFinish) {
  ThreadCountGuard guard;
  ember::set_num_threads(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), int64_t{4} * 200 * 100000);
}

TEST(Parallel, OpsFromSeveralThreadsGiveTheSingleThreadedResult) {
  ThreadCountGuard guard;
  ember::set_num_threads(2);
  const ember::Tensor a = ember::randn({256, 300});
  const ember::Tensor b = ember::randn({300, 200});
  const ember::Tensor expected = ember::matmul(a, b);
  std::vector<std::thread> callers;
  std::atomic<int> mismatches{0};
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        if (!bitwise_equal(ember::matmul(a, b), expected)) mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Parallel, ATeamRunsOnDistinctThreadsAtOnce) {
  for (int threads : {1, 2, 3}) {
    std::atomic<int> arrived{0};
    std::mutex mutex;
    std::set<std::thread::id> ids;
    const auto member = [&](int64_t) {
      arrived.fetch_add(1);
      while (arrived.load() < threads) std::this_thread::yield();  // all members run at once
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    };
    ember::cpu::run_team(
        threads, [](const void* c, int64_t t) noexcept { (*static_cast<decltype(member)*>(c))(t); }, &member);
    EXPECT_EQ(static_cast<int>(ids.size()), threads);
  }
}

TEST(Parallel, AJobWaitsOnlyForTasksThatWereClaimed) {
  // A caller whose pool is held by another thread's long job runs its own work alone, at once.
  ThreadCountGuard guard;
  ember::set_num_threads(2);
  std::atomic<bool> release{false}, started{false};
  std::thread holder([&] {
    parallel_tasks(2, 2, [&](int64_t) {
      started = true;
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!started.load()) std::this_thread::yield();
  int64_t sum = 0;
  parallel_for(0, 1 << 20, 1, [&](int64_t b, int64_t e) { sum += e - b; });  // not parallel: no race
  EXPECT_EQ(sum, 1 << 20);
  release = true;
  holder.join();
}

TEST(Parallel, ThreadCountsOutOfRangeAreRefused) {
  ThreadCountGuard guard;
  expect_error([] { ember::set_num_threads(0); }, {"[set_num_threads]", "got 0"});
  expect_error([] { ember::set_num_threads(5000); }, {"[set_num_threads]", "got 5000"});
  ember::set_num_threads(3);
  EXPECT_EQ(ember::get_num_threads(), 3);
  EXPECT_STREQ(ember::num_threads_source(), "set_num_threads");
}

TEST(Parallel, GemmGivesTheSameBitsOnAnyNumberOfThreads) {
  // Both task shapes of Note [GEMM tasks] (m within one A block, and beyond), with a k of several
  // blocks, so a task split that changed the summation order would show.
  ThreadCountGuard guard;
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{64, 784, 128}, {300, 600, 500}, {1, 900, 70}}) {
    const ember::Tensor a = ember::randn({m, k});
    const ember::Tensor b = ember::randn({k, n});
    ember::set_num_threads(1);
    const ember::Tensor one = ember::matmul(a, b);
    for (int threads : {2, 3, 7}) {
      ember::set_num_threads(threads);
      EXPECT_TRUE(bitwise_equal(ember::matmul(a, b), one)) << m << "x" << k << "x" << n << " on " << threads;
    }
  }
}

}  // namespace

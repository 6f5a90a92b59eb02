// Measures this machine's limits (see ember/peaks.h): the FMA peak with a register-resident loop,
// and the streaming bandwidth of c = a + b from DRAM and from L2. The loops are compiled for every
// Highway target and the best one for this CPU runs, so the peak is that of the widest vectors
// ember's kernels can use here.

// clang-format off: foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "profiler/peaks.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace ember::profiler {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `iterations` rounds of 12 independent a = a * m + c chains. Zen 3 and Intel cores retire two
// FMAs per cycle with a latency of 4 or 5 cycles, so 8 to 10 chains in flight keep both ports
// busy; 12 leaves headroom and, with m and c, still fits in 16 AVX2 registers (no spills). m < 1
// makes every chain converge to c / (1 - m): no overflow, no denormals. Returns the FLOPs done and
// stores the chains' sum in *sink so the compiler cannot drop the loop.
template <class T>
double FmaChains(int64_t iterations, double* sink) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const V m = hn::Set(d, static_cast<T>(0.999999));
  const V c = hn::Set(d, static_cast<T>(1e-6));
  V a0 = hn::Set(d, T(0)), a1 = hn::Set(d, T(1)), a2 = hn::Set(d, T(2)), a3 = hn::Set(d, T(3));
  V a4 = hn::Set(d, T(4)), a5 = hn::Set(d, T(5)), a6 = hn::Set(d, T(6)), a7 = hn::Set(d, T(7));
  V a8 = hn::Set(d, T(8)), a9 = hn::Set(d, T(9)), a10 = hn::Set(d, T(10)), a11 = hn::Set(d, T(11));
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
    a10 = hn::MulAdd(a10, m, c);
    a11 = hn::MulAdd(a11, m, c);
  }
  const V total = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                          hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  HWY_ALIGN T lanes[hn::MaxLanes(d)];
  hn::Store(total, d, lanes);
  double sum = 0;
  for (size_t i = 0; i < hn::Lanes(d); ++i) sum += static_cast<double>(lanes[i]);
  *sink = sum;
  constexpr int kChains = 12;
  return 2.0 * kChains * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

double FmaF32(int64_t iterations, double* sink) { return FmaChains<float>(iterations, sink); }
double FmaF64(int64_t iterations, double* sink) { return FmaChains<double>(iterations, sink); }

// c[i] = a[i] + b[i], four vectors per step (the loads of one step are independent).
void AddF32(const float* a, const float* b, float* c, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    const auto x0 = hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i));
    const auto x1 = hn::Add(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes));
    const auto x2 = hn::Add(hn::LoadU(d, a + i + 2 * lanes), hn::LoadU(d, b + i + 2 * lanes));
    const auto x3 = hn::Add(hn::LoadU(d, a + i + 3 * lanes), hn::LoadU(d, b + i + 3 * lanes));
    hn::StoreU(x0, d, c + i);
    hn::StoreU(x1, d, c + i + lanes);
    hn::StoreU(x2, d, c + i + 2 * lanes);
    hn::StoreU(x3, d, c + i + 3 * lanes);
  }
  for (; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::profiler
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/info.h"
#include "ember/peaks.h"
#include "kernels/cpu/parallel.h"

namespace ember::profiler {

HWY_EXPORT(FmaF32);
HWY_EXPORT(FmaF64);
HWY_EXPORT(AddF32);

namespace {

using Clock = std::chrono::steady_clock;

// Each measurement is scaled to last about this long, then repeated kRuns times; the best run is
// kept (the one least disturbed by other processes on a shared machine).
constexpr double kTargetSeconds = 0.01;
constexpr int kRuns = 10;

volatile double g_sink = 0;  // results of the loops, so the compiler keeps them

// A reusable barrier for the `count` threads of one team, spinning (a team is the only work).
class SpinBarrier {
 public:
  explicit SpinBarrier(int count) : count_(count) {}
  void arrive_and_wait() {
    const int generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation) std::this_thread::yield();
  }

 private:
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

// Runs body(thread_index, team_size) on `threads` threads at once and returns the seconds from
// when all threads are ready to when the last one finishes (starting the team is not timed).
template <class Body>
double timed_parallel(int threads, const Body& body) {
  Clock::time_point start;
  Clock::time_point end;
  SpinBarrier barrier(threads);
  const auto member = [&](int64_t thread) {
    barrier.arrive_and_wait();
    if (thread == 0) start = Clock::now();
    barrier.arrive_and_wait();
    body(static_cast<int>(thread), threads);
    barrier.arrive_and_wait();
    if (thread == 0) end = Clock::now();
  };
  cpu::run_team(
      threads, [](const void* context, int64_t t) noexcept { (*static_cast<decltype(member)*>(context))(t); }, &member);
  return std::chrono::duration<double>(end - start).count();
}

// The best rate (work per second) of run(units), which does `units` units of work and returns
// {work done, seconds}. A first short run calibrates `units` so a run takes about kTargetSeconds.
template <class Run>
double best_rate(int64_t units, const Run& run) {
  for (;;) {  // grow until a run is long enough to time reliably
    const auto [work, seconds] = run(units);
    if (seconds >= kTargetSeconds / 20) {
      units = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(units) * kTargetSeconds / seconds));
      break;
    }
    units *= 8;
  }
  double best = 0;
  for (int r = 0; r < kRuns; ++r) {
    const auto [work, seconds] = run(units);
    best = std::max(best, work / seconds);
  }
  return best;
}

struct Timed {
  double work;
  double seconds;
};

double fma_gflops(int threads, double (*fma)(int64_t, double*)) {
  std::vector<double> sinks(static_cast<size_t>(threads), 0.0);
  const double rate = best_rate(int64_t{100000}, [&](int64_t iterations) {
    std::vector<double> flops(static_cast<size_t>(threads), 0.0);
    const double seconds = timed_parallel(threads, [&](int thread, int) {
      flops[static_cast<size_t>(thread)] = fma(iterations, &sinks[static_cast<size_t>(thread)]);
    });
    double total = 0;
    for (const double f : flops) total += f;
    return Timed{total, seconds};
  });
  for (const double s : sinks) g_sink = g_sink + s;
  return rate / 1e9;
}

// c = a + b over n float32 elements split evenly across the threads, each thread touching only its
// own part (first touch at initialization places the pages near that thread).
double dram_gbps(int threads) {
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB per array, far beyond any L3
  hwy::AlignedFreeUniquePtr<float[]> a = hwy::AllocateAligned<float>(kElements);
  hwy::AlignedFreeUniquePtr<float[]> b = hwy::AllocateAligned<float>(kElements);
  hwy::AlignedFreeUniquePtr<float[]> c = hwy::AllocateAligned<float>(kElements);
  EMBER_CHECK(a && b && c, "[measure_peaks] cannot allocate 3 x 64 MiB for the bandwidth test");
  auto part = [](int thread, int team) {
    return std::pair<int64_t, int64_t>{kElements * thread / team, kElements * (thread + 1) / team};
  };
  timed_parallel(threads, [&](int thread, int team) {
    const auto [begin, end] = part(thread, team);
    for (int64_t i = begin; i < end; ++i) {
      a[i] = 1.0f;
      b[i] = 2.0f;
      c[i] = 0.0f;
    }
  });
  double best = 0;
  for (int r = 0; r < kRuns; ++r) {  // a pass lasts ~10-20 ms: no calibration needed
    const double seconds = timed_parallel(threads, [&](int thread, int team) {
      const auto [begin, end] = part(thread, team);
      HWY_DYNAMIC_DISPATCH(AddF32)(a.get() + begin, b.get() + begin, c.get() + begin, end - begin);
    });
    best = std::max(best, 12.0 * static_cast<double>(kElements) / seconds);
  }
  g_sink = g_sink + c[kElements - 1];
  return best / 1e9;
}

// The L2 size of cpu0 from sysfs (the unified or data cache of level 2), or 512 KiB.
int64_t l2_bytes() {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level");
    std::ifstream type_file(dir + "type");
    std::ifstream size_file(dir + "size");
    int level = 0;
    std::string type;
    std::string size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) break;
    if (level != 2 || type == "Instruction") continue;
    try {
      size_t digits = 0;
      int64_t value = std::stoll(size, &digits);
      const char unit = digits < size.size() ? size[digits] : 'B';
      if (unit == 'K') value <<= 10;
      if (unit == 'M') value <<= 20;
      if (value >= (int64_t{16} << 10)) return value;
    } catch (const std::exception&) {
      // An unreadable size: use the fallback.
    }
    break;
  }
  return int64_t{512} << 10;
}

// c = a + b repeated on per-thread arrays that together take half of the L2, so they stay there
// (the other half leaves room for the code, the stack and the hardware's own use).
double l2_gbps(int threads) {
  const int64_t elements = std::max<int64_t>(1024, l2_bytes() / 2 / 3 / static_cast<int64_t>(sizeof(float)));
  std::vector<hwy::AlignedFreeUniquePtr<float[]>> buffers;
  for (int t = 0; t < 3 * threads; ++t) buffers.push_back(hwy::AllocateAligned<float>(elements));
  for (auto& buffer : buffers) {
    EMBER_CHECK(buffer != nullptr, "[measure_peaks] cannot allocate the L2 bandwidth test's buffers");
    std::fill(buffer.get(), buffer.get() + elements, 1.0f);
  }
  const double rate = best_rate(int64_t{64}, [&](int64_t repeats) {
    int used_threads = threads;
    const double seconds = timed_parallel(threads, [&](int thread, int team) {
      if (thread == 0) used_threads = team;
      const size_t t = static_cast<size_t>(thread);
      for (int64_t r = 0; r < repeats; ++r) {
        HWY_DYNAMIC_DISPATCH(AddF32)
        (buffers[3 * t].get(), buffers[3 * t + 1].get(), buffers[3 * t + 2].get(), elements);
      }
    });
    return Timed{12.0 * static_cast<double>(elements) * static_cast<double>(repeats) * used_threads, seconds};
  });
  g_sink = g_sink + buffers[2][0];
  return rate / 1e9;
}

}  // namespace

std::string cpu_model() {
  // The model name alone does not tell CPU generations apart: virtual machines on Zen 4 and Zen 5
  // both say "AMD EPYC", yet Zen 5's FMA peak is twice Zen 4's. The family and model numbers do.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, name, family, model;
  const auto value = [&line]() {
    const size_t colon = line.find(':');
    const size_t first = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? std::string() : line.substr(first);
  };
  while (std::getline(cpuinfo, line) && (name.empty() || family.empty() || model.empty())) {
    if (line.rfind("model name", 0) == 0) {
      name = value();
    } else if (line.rfind("cpu family", 0) == 0) {
      family = value();
    } else if (line.rfind("model", 0) == 0 && line.find_first_of(" \t:") == 5) {
      model = value();
    }
  }
  if (name.empty()) return "unknown";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

MachinePeaks measure_peaks(int threads) {
  EMBER_CHECK(threads >= 0, "[measure_peaks] threads must be >= 0 (0: ember's thread count), got ", threads);
  MachinePeaks peaks;
  peaks.cpu = cpu_model();
  peaks.threads = threads > 0 ? threads : get_num_threads();
  // A first region wakes the thread pool, so no measurement pays for creating threads.
  timed_parallel(peaks.threads, [](int, int) {});
  peaks.fma_gflops_f32 = fma_gflops(peaks.threads, HWY_DYNAMIC_DISPATCH(FmaF32));
  peaks.fma_gflops_f64 = fma_gflops(peaks.threads, HWY_DYNAMIC_DISPATCH(FmaF64));
  peaks.dram_gbps = dram_gbps(peaks.threads);
  peaks.l2_gbps = l2_gbps(peaks.threads);
  return peaks;
}

}  // namespace ember::profiler
#endif  // HWY_ONCE

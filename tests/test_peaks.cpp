// measure_peaks: the machine's FMA peak and bandwidths come back positive and plausible, with the
// thread count and CPU model filled in, and bad input is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/error.h"
#include "ember/info.h"
#include "ember/peaks.h"

namespace {

TEST(Peaks, MeasuresEveryNumberOnOneThread) {
  const ember::profiler::MachinePeaks peaks = ember::profiler::measure_peaks(1);
  EXPECT_FALSE(peaks.cpu.empty());
  EXPECT_EQ(peaks.threads, 1);
  for (const double value : {peaks.fma_gflops_f32, peaks.fma_gflops_f64, peaks.dram_gbps, peaks.l2_gbps}) {
    EXPECT_TRUE(std::isfinite(value));
    // Loose floors that any x86-64 or ARM core clears even on a loaded machine (one SSE2 core at
    // 1 GHz does 4 GFLOP/s of f32 FMA-equivalent work); zero would mean an empty or skipped loop.
    EXPECT_GT(value, 0.1);
  }
  // Far above any real machine: a bigger number means the work was counted wrong.
  EXPECT_LT(peaks.fma_gflops_f32, 1e5);
  EXPECT_LT(peaks.dram_gbps, 1e4);
}

TEST(Peaks, ZeroThreadsMeansEmbersThreadCount) {
  // Only the bookkeeping is checked here; the measurement itself is covered above.
  const int before = ember::get_num_threads();
  ember::set_num_threads(1);
  const ember::profiler::MachinePeaks peaks = ember::profiler::measure_peaks(0);
  ember::set_num_threads(before);
  EXPECT_EQ(peaks.threads, 1);
}

TEST(Peaks, RejectsNegativeThreads) {
  try {
    ember::profiler::measure_peaks(-1);
    FAIL() << "expected ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[measure_peaks]"), std::string::npos) << e.what();
  }
}

}  // namespace

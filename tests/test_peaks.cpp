// measure_peaks: the machine's FMA peak and bandwidths come back positive and plausible, with the
// thread count and CPU model filled in, and bad input is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

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

TEST(Peaks, CpuModelNamesTheFamilyAndModelWhereCpuinfoHasThem) {
  // Two CPU generations behind one model name ("AMD EPYC" on Zen 4 and on Zen 5) must not share a
  // cached peak or a benchmark baseline: the family and model numbers tell them apart.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, family, model;
  while (std::getline(cpuinfo, line) && (family.empty() || model.empty())) {
    const std::string value = line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 2);
    if (line.rfind("cpu family", 0) == 0) family = value;
    if (line.rfind("model\t", 0) == 0 || line.rfind("model ", 0) == 0) model = value;
  }
  const std::string cpu = ember::profiler::cpu_model();
  EXPECT_EQ(ember::profiler::measure_peaks(1).cpu, cpu);
  if (family.empty() || model.empty() || cpu == "unknown")
    GTEST_SKIP() << "/proc/cpuinfo lists no family and model here";
  EXPECT_NE(cpu.find(" (family " + family + ", model " + model + ")"), std::string::npos) << cpu;
  EXPECT_EQ(cpu.find("model name"), std::string::npos) << cpu;
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

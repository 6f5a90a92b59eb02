// This machine's limits, measured: the FMA throughput of all threads and the streaming bandwidth
// of DRAM and of the L2 caches. The benchmark (`ember bench`, scripts/bench) and the roofline
// (`ember roofline`) compare what ember reaches against these numbers.
//
//   ember::profiler::MachinePeaks peaks = ember::profiler::measure_peaks();
//   std::cout << peaks.fma_gflops_f32 << " GFLOP/s, " << peaks.dram_gbps << " GB/s\n";
//
// Each number is the best of a few short runs (the machine may be shared, and the best run is
// the one least disturbed), so a measurement takes well under two seconds.
#pragma once

#include <string>

namespace ember::profiler {

struct MachinePeaks {
  std::string cpu;            // the CPU model, family and model number: cpu_model()
  int threads = 1;            // threads the numbers were measured with
  double fma_gflops_f32 = 0;  // a register-resident fused multiply-add loop on every thread
  double fma_gflops_f64 = 0;  // the same in float64
  double dram_gbps = 0;       // c = a + b on float32 arrays far larger than the last-level cache
  double l2_gbps = 0;         // the same add on per-thread arrays that fit in the L2 cache
};

// Measures this machine's peaks with `threads` threads (0: ember's thread count, get_num_threads()).
// Bandwidths count 12 bytes per float32 element of c = a + b (two reads, one write; the write's
// cache-line fill is not counted, as in STREAM). Throws ember::Error if threads < 0.
MachinePeaks measure_peaks(int threads = 0);

// This CPU's model name as /proc/cpuinfo gives it, with its family and model numbers where it
// lists them ("AMD EPYC (family 26, model 2)"; "unknown" where there is no model name): the key of
// the peaks cache and the `cpu` of measure_peaks().
std::string cpu_model();

}  // namespace ember::profiler

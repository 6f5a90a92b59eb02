// `ember roofline`: this machine's roofline (measured peaks) with ops from a profile trace or
// workloads from the benchmark results, as text, JSON or a self-contained SVG.
#pragma once

#include <string>

namespace ember::cli {

struct RooflineOptions {
  bool json = false;
  std::string svg_path;    // write the plot here
  std::string from_trace;  // a Chrome trace from `ember train ... --profile` or Profiler::export_chrome_trace
  std::string from_bench;  // bench/results/latest.json from scripts/bench
  bool refresh = false;    // measure the peaks again instead of reading the cache
  int threads = 0;         // 0: all cores
};

// Prints (and draws) the roofline; returns the process exit code. Throws ember::Error on bad input.
int run_roofline(const RooflineOptions& options);

}  // namespace ember::cli

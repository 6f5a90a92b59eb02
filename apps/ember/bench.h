// `ember bench`: times ember on the workloads of the performance harness (scripts/bench runs the
// same workloads in PyTorch and NumPy and compares; see docs/performance.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ember::cli {

struct BenchOptions {
  std::string filter;                   // a regular expression searched in each workload's name; empty: all
  bool quick = false;                   // shorter samples, fewer of them
  bool list = false;                    // print the workloads instead of running them
  bool json = false;                    // one JSON object per line
  bool machine = false;                 // measure this machine's peaks (ember/peaks.h) instead
  int threads = 0;                      // 0: ember's default (all cores)
  int repeats = 5;                      // samples per workload (the median is reported)
  double latency = 0;                   // > 0: time single calls for this many seconds instead (median, p99)
  std::string data_dir = "data/mnist";  // for train_mnist_epoch
};

// Runs the benchmark and prints; returns the process exit code. Throws ember::Error on bad input.
int run_bench(const BenchOptions& options);

// One workload, set up and ready to time. flops and bytes describe one call of run() (the
// conventions are in docs/performance.md).
struct Workload {
  double flops = 0;
  double bytes = 0;
  std::function<void()> run{};     // one call: this is what is timed
  std::function<void()> warmup{};  // run before timing; empty: run() once
};

struct WorkloadSpec {
  std::string name;
  bool slow = false;                // scripts/bench --quick skips it unless the filter names it exactly
  std::function<Workload()> setup;  // makes the inputs (not timed)
};

// Every workload of the harness, in the order of the table.
std::vector<WorkloadSpec> bench_workloads(const BenchOptions& options);

}  // namespace ember::cli

// The workloads `ember bench` times (bench/workloads.cpp), each set up once and then called
// repeatedly; scripts/bench runs the same workloads in PyTorch and NumPy and compares.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ember::bench {

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

// Every workload of the harness, in the order of the table; train_mnist_epoch reads MNIST from
// mnist_dir.
std::vector<WorkloadSpec> workloads(const std::string& mnist_dir);

}  // namespace ember::bench

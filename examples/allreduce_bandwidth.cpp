// Measures all_reduce over the ranks of a job for a range of sizes, as nccl-tests does: the median
// time of 10 rounds, the algorithm bandwidth (bytes / time) and the bus bandwidth of a ring
// (2 (N - 1) / N x bytes / time), the number the cost model in docs/distributed.md uses.
//   tests/dist/run_ranks.sh mpi 2 build/allreduce_bandwidth
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ember/dist.h"
#include "ember/ops.h"

int main() {
  const auto group = ember::dist::init_process_group();
  const int world = group->world_size();
  if (group->rank() == 0) {
    std::printf("all_reduce over %d ranks (%s), float32, median of 10\n%12s %12s %14s %14s\n", world,
                ember::dist::backend_name(group->backend()), "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)");
  }
  for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= 4) {
    const ember::Tensor t = ember::ones({bytes / 4});
    group->all_reduce(t)->wait();  // warm-up
    std::vector<double> seconds;
    for (int round = 0; round < 10; ++round) {
      group->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      group->all_reduce(t)->wait();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + 5, seconds.end());
    const double median = seconds[5];
    const double algbw = static_cast<double>(bytes) / median / 1e9;
    if (group->rank() == 0) {
      std::printf("%12lld %12.1f %14.2f %14.2f\n", static_cast<long long>(bytes), median * 1e6, algbw,
                  algbw * 2.0 * (world - 1) / world);
    }
  }
  return 0;
}

// parallel_for on OpenMP and the thread count of ember/threads.h (kernels/cpu/parallel.h).
#include "kernels/cpu/parallel.h"

#include <atomic>

#include "ember/error.h"
#include "ember/threads.h"

namespace ember {
namespace {
std::atomic<int> g_num_threads{0};  // 0: not set, use the default
}  // namespace

int get_num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void set_num_threads(int num_threads) {
  EMBER_CHECK(num_threads >= 1, "[set_num_threads] expected at least 1 thread, got ", num_threads);
  g_num_threads.store(num_threads, std::memory_order_relaxed);
}

namespace cpu {
int num_threads() { return get_num_threads(); }
}  // namespace cpu

}  // namespace ember

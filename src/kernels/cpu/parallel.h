// parallel_for over [begin, end) with a grain size: ranges smaller than `grain` run on the calling
// thread, so small tensors never pay for an OpenMP region.
// `f` must not throw: an exception leaving an OpenMP region terminates the process. Kernels that
// can meet bad input (an index out of range) record it and let the caller throw after the loop.
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ember::cpu {

int num_threads();

// Elements below which elementwise kernels stay on one thread.
inline constexpr int64_t kElementwiseGrain = 32768;

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int threads =
      static_cast<int>(std::min<int64_t>(num_threads(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1))));
  if (threads <= 1) {
    f(begin, end);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
  {
    const int64_t tid = omp_get_thread_num();
    const int64_t chunk = (n + threads - 1) / threads;
    const int64_t b = begin + tid * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) f(b, e);
  }
#else
  f(begin, end);
#endif
}

}  // namespace ember::cpu

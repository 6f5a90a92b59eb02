#include "ember/info.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "0.0.0"
#endif
#ifndef EMBER_BUILD_TYPE
#define EMBER_BUILD_TYPE "unknown"
#endif

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

BuildInfo build_info() {
  BuildInfo info;
  info.version = EMBER_VERSION;
#if defined(__clang__)
  info.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info.compiler = std::string("gcc ") + __VERSION__;
#else
  info.compiler = "unknown";
#endif
  info.simd_target = cpu::simd_target_name();
  info.simd_compiled = cpu::simd_compiled_targets();
  info.gemm_kernel = cpu::gemm_micro_kernel_name();
  info.num_threads = get_num_threads();
#ifdef _OPENMP
  info.openmp = true;
#endif
#ifdef EMBER_WITH_CUDA
  info.cuda = true;
#endif
  info.blas = "none";
  info.build_type = EMBER_BUILD_TYPE;
  return info;
}

}  // namespace ember

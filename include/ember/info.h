// Build and run-time facts about this ember: version, compiler, SIMD target, threads, options.
#pragma once

#include <string>

namespace ember {

struct BuildInfo {
  std::string version;
  std::string compiler;
  std::string simd_target;    // the Highway target chosen at run time on this CPU
  std::string simd_compiled;  // every target compiled into the binary
  std::string gemm_kernel;    // the GEMM's register tile on this CPU, e.g. "AVX-512 14x32"
  int num_threads = 1;
  bool openmp = false;
  bool cuda = false;
  std::string blas;  // "none": ember's own GEMM
  std::string build_type;
};

BuildInfo build_info();

// Threads used by CPU kernels (defaults to the number of cores).
int get_num_threads();
void set_num_threads(int num_threads);

}  // namespace ember

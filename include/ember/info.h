// Build and run-time facts about this ember: version, compiler, SIMD target, threads, options.
#pragma once

#include <string>
#include <vector>

#include "ember/threads.h"

namespace ember {

struct BuildInfo {
  std::string version;
  std::string compiler;
  std::string simd_target;    // the Highway target chosen at run time on this CPU
  std::string simd_compiled;  // every target compiled into the binary
  std::string gemm_kernel;    // the GEMM's register tile on this CPU, e.g. "AVX-512 14x32"
  std::string dot_isa;        // the int8 / bfloat16 dot-product kernels' level, e.g. "AVX512_BF16"
  int num_threads = 1;
  std::string num_threads_source;  // see ember/threads.h
  bool cuda = false;
  std::string blas;  // "none": ember's own GEMM
  std::string build_type;
};

BuildInfo build_info();

// One row of the op table (`ember info --ops`): every op of the primitive table.
struct OpTableRow {
  std::string name;
  std::string sort;                      // "primitive" (runs a kernel), "view" or "composite" (made of other ops)
  std::vector<std::string> cpu_dtypes;   // the dtypes the CPU kernel takes; empty: no CPU kernel
  std::vector<std::string> cuda_dtypes;  // the same for CUDA
  bool differentiable = false;           // records a backward
  bool has_cost_rule = false;            // the profiler knows its FLOPs and bytes
};
std::vector<OpTableRow> op_table();

}  // namespace ember

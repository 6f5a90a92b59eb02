// Build facts (ember info) and the op table: every op with its backends, dtypes, backward and cost
// rule (ember info --ops).
#include "ember/info.h"

#include "ember/primitives.h"
#include "ember/threads.h"
#include "kernels/cpu/registry.h"
#include "ops/cost.h"
#include "ops/dispatch.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "0.0.0"
#endif
#ifndef EMBER_BUILD_TYPE
#define EMBER_BUILD_TYPE "unknown"
#endif

namespace ember {

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
  const cpu::BackendInfo cpu_backend = cpu::backend_info();
  info.simd_target = cpu_backend.simd_target;
  info.simd_compiled = cpu_backend.simd_compiled;
  info.gemm_kernel = cpu_backend.gemm_tile;
  info.dot_isa = cpu_backend.dot_isa;
  info.num_threads = get_num_threads();
  info.num_threads_source = num_threads_source();
#ifdef EMBER_WITH_CUDA
  info.cuda = true;
#endif
  info.blas = "none";
  info.build_type = EMBER_BUILD_TYPE;
  return info;
}

std::vector<OpTableRow> op_table() {
  const KernelTable& kernels = dispatch::kernel_table();
  const OpRuleTable& rules = op_rules();
  std::vector<OpTableRow> rows;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind kind = static_cast<OpKind>(i);
    OpTableRow row;
    row.name = std::string(op_name(kind));
    row.sort = has_trait(kind, kView) ? "view" : has_trait(kind, kComposite) ? "composite" : "primitive";
    row.differentiable = has_trait(kind, kDifferentiable);
    row.has_cost_rule = rules.cost(kind) != nullptr;
    for (DeviceType device : {DeviceType::kCPU, DeviceType::kCUDA}) {
      const KernelEntry& entry = kernels.at(kind, device);
      std::vector<std::string> dtypes;
      for (int d = 0; d < kNumDTypes; ++d) {
        if (entry.fn != nullptr && entry.dtypes.contains(static_cast<DType>(d))) {
          dtypes.emplace_back(dtype_name(static_cast<DType>(d)));
        }
      }
      (device == DeviceType::kCPU ? row.cpu_dtypes : row.cuda_dtypes) = std::move(dtypes);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ember

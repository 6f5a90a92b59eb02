// The CPU backend's kernel table: each family registers its kernels (kernels/cpu/registry.h).
#include "kernels/cpu/registry.h"

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

namespace ember::cpu {

void register_kernels(KernelTable& table) {
  register_elementwise_kernels(table);
  register_threshold_kernels(table);
  register_scan_kernels(table);
  register_random_kernels(table);
  register_reduce_kernels(table);
  register_softmax_kernels(table);
  register_gemm_kernels(table);
  register_conv_kernels(table);
  register_pool_kernels(table);
  register_norm_kernels(table);
  register_attention_kernels(table);
  register_loss_kernels(table);
  register_indexing_kernels(table);
  register_optim_kernels(table);
  register_triangle_kernels(table);
  register_cumsum_kernels(table);
  register_sort_kernels(table);
  register_quant_kernels(table);
  register_rope_kernels(table);
}

BackendInfo backend_info() {
  return {simd_target_name(), simd_compiled_targets(), gemm_micro_kernel_name(), isa_name(cpu_isa())};
}

}  // namespace ember::cpu

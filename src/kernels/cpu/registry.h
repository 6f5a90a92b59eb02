// The CPU kernel registry: every CPU kernel's entry, registered in the CPU column of the kernel
// table that the dispatch seam (src/ops/dispatch.h) reads. An entry unpacks a KernelCall (raw
// operands and typed attributes) into its kernel's typed call. Each family registers its entries in
// its own kernel file; registry.cpp calls them all.
#pragma once

#include "base/kernel.h"

namespace ember::cpu {

// Fills the CPU column of `table` with every CPU kernel.
void register_kernels(KernelTable& table);

// What the CPU backend chose on this machine (for `ember info`).
struct BackendInfo {
  const char* simd_target;    // the Highway target chosen at run time
  const char* simd_compiled;  // every target compiled in
  const char* gemm_tile;      // the GEMM's register tile, e.g. "AVX-512 14x32"
  const char* dot_isa;        // the hand-written dot-product kernels' level (cpu_isa.h)
};
BackendInfo backend_info();

void register_elementwise_kernels(KernelTable& table);  // elementwise.cpp
void register_threshold_kernels(KernelTable& table);    // threshold.cpp
void register_scan_kernels(KernelTable& table);         // scan.cpp
void register_random_kernels(KernelTable& table);       // random.cpp
void register_reduce_kernels(KernelTable& table);       // reduce.cpp
void register_softmax_kernels(KernelTable& table);      // softmax.cpp
void register_gemm_kernels(KernelTable& table);         // gemm.cpp
void register_conv_kernels(KernelTable& table);         // conv.cpp
void register_pool_kernels(KernelTable& table);         // pool.cpp
void register_norm_kernels(KernelTable& table);         // norm.cpp
void register_attention_kernels(KernelTable& table);    // attention.cpp
void register_loss_kernels(KernelTable& table);         // loss.cpp
void register_indexing_kernels(KernelTable& table);     // indexing.cpp
void register_optim_kernels(KernelTable& table);        // optim.cpp
void register_triangle_kernels(KernelTable& table);     // triangle.cpp
void register_cumsum_kernels(KernelTable& table);       // cumsum.cpp
void register_sort_kernels(KernelTable& table);         // sort.cpp
void register_quant_kernels(KernelTable& table);        // quant.cpp
void register_rope_kernels(KernelTable& table);         // rope.cpp

}  // namespace ember::cpu

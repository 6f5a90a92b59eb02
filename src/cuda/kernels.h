// The CUDA kernels' registry entries (kernels.cpp, matmul.cpp), which register_backend adds to the
// kernel table in a build with CUDA.
#pragma once

#include <initializer_list>

#include "base/kernel.h"
#include "cuda/launch.h"

namespace ember::cuda {

// Fills the CUDA column of `table`: the elementwise ops, reductions, softmax and the matrix
// product. Nothing in a build without CUDA.
void register_kernels(KernelTable& table);

#ifdef EMBER_WITH_CUDA
// The matrix product through cuBLASLt, loaded at its first use (matmul.cpp).
void register_matmul_kernel(KernelTable& table);
// Throws an ember::Error naming the op when `ran` is false (a type the kernel does not take) or
// the last launch failed.
void check_launch(const KernelCall& call, bool ran, DType dtype);
// The operands' common shape (the first operand's; the others broadcast to it, as on the CPU), with
// their strides, size-1 dims dropped and neighbouring dims merged where every operand allows it.
launch::Layout layout_of(std::initializer_list<const Operand*> operands);
// Convolutions through cuDNN, loaded at their first use (conv.cpp); none where the build found no
// cuDNN header.
void register_conv_kernels(KernelTable& table);
// The kernels' element type for `dtype`; an ember::Error naming `op` for one they do not take.
launch::Type launch_type(DType dtype, const char* op);
#endif

}  // namespace ember::cuda

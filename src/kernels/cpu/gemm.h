// The CPU GEMM interface: C = alpha * A @ B + beta * C (+ bias per column) over raw pointers with a
// row and a column stride per matrix, so transposed and strided operands reach the kernel as
// they are and the packing routines absorb the layout (no transpose copies). See gemm.cpp for
// the blocking and the micro-kernel.
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember::cpu {

// One problem. Element (i, j) of a matrix lives at data[i * row_stride + j * col_stride]; strides
// are in elements and may be 0 on the inputs (a broadcast row or column). C must not overlap A, B
// or bias, and two of its elements must not share memory.
struct GemmArgs {
  DType dtype = kFloat32;  // of A, B, C and bias alike
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;  // (m, k)
  int64_t a_row_stride = 0;
  int64_t a_col_stride = 0;
  const void* b = nullptr;  // (k, n)
  int64_t b_row_stride = 0;
  int64_t b_col_stride = 0;
  void* c = nullptr;  // (m, n)
  int64_t c_row_stride = 0;
  int64_t c_col_stride = 0;
  // Integer dtypes take alpha and beta as whole numbers and wrap around like their C++ unsigned
  // counterparts (PyTorch's behaviour). beta == 0 means C is write-only: its old values, NaN
  // included, are never read.
  double alpha = 1.0;
  double beta = 0.0;
  // (n) or null: bias[j * bias_stride] is added to column j while C is written (the linear
  // epilogue); 16-bit floats add it in float32 and round once.
  const void* bias = nullptr;
  int64_t bias_stride = 1;
};

// Solves one problem, using up to ember's thread count when it is big enough to pay for them.
// float32 and float64 run the packed SIMD kernel; float16 and bfloat16 are computed in float32
// and rounded once; integer dtypes use a plain loop with wraparound; bool throws.
//
// The result never depends on the thread count: every element of C is summed in the same order
// whatever the split of the work.
void gemm(const GemmArgs& args);

// `batch` problems that share sizes, strides, alpha, beta and bias, and differ by where A, B and C
// start: problem i reads args.a + a_offsets[i] (in elements), and so on. C blocks of different
// problems must not overlap. Threads go over the batch or inside each problem, whichever suits
// the shape; the result is the same either way.
void gemm_batched(const GemmArgs& args, int64_t batch, const int64_t* a_offsets, const int64_t* b_offsets,
                  const int64_t* c_offsets);

}  // namespace ember::cpu

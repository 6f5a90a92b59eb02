// The CPU GEMM interface: C = act(alpha * A @ B + beta * C + bias) + residual over raw pointers
// with a row and a column stride per matrix, so transposed and strided operands reach the kernel
// as they are and the packing routines absorb the layout (no transpose copies). The bias, the
// activation and the residual are the fused epilogue: applied to each tile of C while it is still
// in registers, not in a second pass over C. See gemm.cpp for the blocking and the micro-kernels.
#pragma once

#include <cstdint>

#include "ember/attrs.h"
#include "ember/dtype.h"

namespace ember::cpu {

// The elementwise function of the epilogue is ember::Activation (ember/attrs.h): PyTorch's relu,
// gelu(approximate="none"|"tanh"), silu.

// float32 and float64 products of up to this many terms are summed whole before alpha scales them,
// on every path (the packed one cuts a longer k into blocks, and scales each block's sums): there,
// alpha * (A @ B) has the bits of (A @ B) * alpha (graph/passes.cpp folds such a scale).
inline constexpr int64_t kGemmWholeSumDepth = 256;

// The ways a float32/float64 problem is solved; the shape and strides alone choose (never the
// thread count). Within one path an element of C sums its terms in one order whatever m and n are
// and wherever in C it falls: its own chain over k (k blocks that depend on k alone on the packed
// paths, vector lanes along k on the dots path), then alpha, beta and the bias. So a caller that
// cuts a product without an activation into blocks of rows and columns and solves each on the
// whole call's path (GemmArgs::path) gets the whole call's bits (graph/executor.cpp does, Note
// [masked products]).
// An activation is not covered: a tile at C's edge applies its scalar form, which may differ from
// the vector form of a whole tile in the last bit.
enum class GemmPath : uint8_t {
  kAuto,                    // (GemmArgs::path) whichever the shape and strides choose
  kEmpty,                   // m or n is 0
  kNoTerms,                 // k is 0
  kUnpackedRows,            // B's rows read in place, tiles of rows x vectors
  kUnpackedTransposedRows,  // the same on the transposed problem
  kUnpackedDots,            // dot products along k
  kPacked,                  // the packed blocks and this CPU's register tile
  kPackedWide,              // the same with the AVX-512 tile on another CPU (testing)
  kOther,                   // not float32/float64: paths this does not describe
};

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
  // Applied after alpha, beta and the bias. Floating dtypes only (integers throw).
  Activation activation = Activation::kNone;
  // (m, n) or null: added elementwise after the activation, C[i, j] += R[i, j] with R at any strides
  // (0 broadcasts). Must not overlap C.
  const void* residual = nullptr;
  int64_t residual_row_stride = 0;
  int64_t residual_col_stride = 0;
  // float32/float64: the path to take, as gemm_path gave it for the problem this one is a block of
  // (with the same strides and epilogue); kAuto: the shape's own. A path these strides cannot take
  // is an error.
  GemmPath path = GemmPath::kAuto;
  // float32/float64: B already packed by gemm_pack_b for this problem (the same k, n, strides and
  // path), or null to pack it per call. One matrix: not with per-problem B offsets.
  const void* b_packed = nullptr;
};

// Solves one problem, using up to ember's thread count when it is big enough to pay for them.
// float32 and float64 run the packed SIMD kernel; float16 and bfloat16 are computed in float32
// and rounded once; integer dtypes use a plain loop with wraparound; bool throws.
//
// The result never depends on the thread count: every element of C is summed in the same order
// whatever the split of the work.
void gemm(const GemmArgs& args);

// `batch` problems that share sizes, strides, alpha, beta, bias and epilogue, and differ by where
// A, B, C (and the residual) start: problem i reads args.a + a_offsets[i] (in elements), and so
// on; null offsets mean 0 for every problem. C blocks of different problems must not overlap.
// Threads go over the batch or inside each problem, whichever suits the shape; the result is the
// same either way.
void gemm_batched(const GemmArgs& args, int64_t batch, const int64_t* a_offsets, const int64_t* b_offsets,
                  const int64_t* c_offsets, const int64_t* residual_offsets = nullptr);

// The path a float32/float64 problem takes (its own `path` when set; kOther for other dtypes).
GemmPath gemm_path(const GemmArgs& args);

// B's packed form for a problem (Note [B packed once] in gemm.cpp): its size in elements, 0 when
// the problem does not take the packed path (then there is nothing to pack), and the packing into
// `packed` (that many elements, aligned to 64 bytes). The form belongs to the instruction set
// that made it: `panel_width` (if given) receives its micro-panels' width, which tells the
// layouts of different instruction sets apart.
int64_t gemm_packed_b_size(const GemmArgs& args, int64_t* panel_width = nullptr);
void gemm_pack_b(const GemmArgs& args, void* packed);

// The rows of C one register tile of the packed path holds on this CPU (14 or 6).
int64_t gemm_tile_rows();

// The register tile of the packed path is chosen per instruction set: 6 x 2 vectors (6 x 16
// floats) on AVX2 and SSE4, 14 x 2 vectors (14 x 32 floats) on AVX-512. For tests: run the
// AVX-512 tile shape (14 rows) on whatever vectors this CPU has, so its packing, edge tiles and
// epilogue are exercised on machines without AVX-512; it also keeps the problems that AVX-512
// takes unpacked with a wide tile (Note [wide unpacked tile]) on the packed path. Not
// thread-safe; tests reset it.
void gemm_force_wide_tile_for_testing(bool on);

// The name of the tile the packed path uses on this CPU, e.g. "AVX2 6x16" (for `ember info` and tests).
const char* gemm_micro_kernel_name();

}  // namespace ember::cpu

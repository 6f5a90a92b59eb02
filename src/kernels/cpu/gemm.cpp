// Packed, blocked GEMM for every Highway target (SSE4, AVX2, AVX-512, scalar):
// C = act(alpha * A @ B + beta * C + bias) + residual, with A, B, C and the residual at any row
// and column strides (gemm.h).
//
// The loops are Goto's and BLIS's:
//
//   for jc in [0, n) step NC                          B panel, KC x NC: L3, shared by the threads
//     for pc in [0, k) step KC (equal blocks of at most KC)
//       pack B[pc:+KC, jc:+NC] into NR-wide micro-panels     (tasks split the packing)
//       for ic in [0, m) step MC (a task each)        A block, MC x KC: L2, one per thread
//         pack A[ic:+MC, pc:+KC] into MR-high micro-panels
//         for jr in the panel's micro-panels                   B micro-panel, KC x NR: L1
//           for ir in [0, MC) step MR
//             micro-kernel: an MR x NR tile of C held in registers takes KC rank-1 updates
//             (hn::MulAdd), then goes to C through the epilogue (below).
//
// Packing reads any strides, so a transposed or strided operand needs no copy of its own (a B
// stored transposed, or an A stored row-major, is packed through in-register 8 x 8 transposes),
// and pads partial micro-panels with zeros, so the micro-kernel always runs full tiles; an edge
// tile, or a C whose rows are not contiguous, is written back element by element.
//
// Note [GEMM epilogue]: a tile leaves the registers as
//   first KC block:  alpha * sums + beta * C + bias      later blocks:  C + alpha * sums
//   last KC block, then:  act(...) + residual
// so the bias, the activation and the residual cost no pass over C in memory: they run on the
// tile while it is in registers (the last block's C values were just loaded into L1 for the add).
// The activation runs once, on the finished sum, whatever the number of KC blocks.
//
// Note [GEMM blocking]: the sizes, for a typical x86 core (32-48 KiB L1d, 256 KiB-2 MiB L2,
// a few MiB of shared L3 per core):
// - MR x NR, per target. AVX2/SSE4 (16 vector registers): 6 x (2 vectors) = 12 accumulators + 2
//   vectors of B + 1 broadcast of A = 15 of 16. Each k step feeds 12 independent FMAs from 2
//   loads and 6 broadcasts: more than the 2 FMA units x 4-5 cycles of latency need, and fewer
//   loads than the 2-3 load ports can serve. AVX-512 (32 registers): 14 x (2 vectors), 14 x 32
//   floats = 28 accumulators + 2 of B + 1 broadcast = 31 of 32; 28 FMAs per 2 loads and 14
//   broadcasts (which AVX-512 folds into the FMA as a memory operand).
// - KC = 256 at most (k is cut into equal blocks: 784 = 4 x 196): the B micro-panel (256 x 16
//   floats, or 256 x 8 doubles on AVX2, = 16 KiB) fills half of L1 and stays there while the A
//   micro-panels (6 KiB each) stream past it. The AVX-512 tile's micro-panel is 256 x 32 floats,
//   32 KiB; KC = 128 for it measured slower on Zen 4 (2048^3: 157-183 against 189-199 GFLOP/s).
//   The k blocks depend on k alone (not on the dtype, target, tile or thread count) because they
//   alone decide the order in which each element of C is summed: the result never depends on how
//   the work is split among threads.
// - MC: the A block is about 144 KiB (144 float rows, 72 double rows): it stays in L2 (512 KiB
//   on Zen 3, 1-2 MiB on recent Intel) while every B micro-panel of the panel sweeps over it.
// - NC: the B panel is about 2 MiB (2048 floats, 1024 doubles wide): a share of L3 that holds
//   the panel while every thread runs all of its A blocks against it.
// What limits it (Zen 4, 2 threads, AVX-512 tile): on a quiet machine, interleaved with the
// previous build, 1024^3 takes 10.35-10.42 ms and 2048^3 83.8-84.1 ms: 0.87-0.89 of the measured
// FMA peak (232-235 GFLOP/s), level with NumPy's OpenBLAS, short of 0.90. This VM exposes no
// hardware counters (`perf stat -e cycles` is not supported), so the last tenth cannot be split
// between the micro-kernel's issue rate and the packing; a profile by sampling puts the packing
// of A and B at about a tenth of the cycles for small sizes (64^3). A full benchmark run on a busy
// machine reads 0.76-0.81.
//
// Problems too small to pay for packing, and matrix-vector shapes, take an unpacked path that
// reads A and B in place (the same epilogue, on vectors); float16/bfloat16 are converted to
// float32, multiplied, and rounded once at the end; integer dtypes take a plain loop that wraps
// around as PyTorch's does. Only the float32/float64 SIMD paths are compiled per target; the
// dtype dispatch, the batch loop and the 16-bit and integer paths are compiled once (HWY_ONCE,
// at the end).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"
#include "kernels/cpu/scalar_math.h"

// Target-independent helpers, compiled once (this file is included once per Highway target).
#ifndef EMBER_KERNELS_CPU_GEMM_SHARED
#define EMBER_KERNELS_CPU_GEMM_SHARED
namespace ember::cpu::gemm_detail {

// See Note [GEMM blocking]. The tile height (MR) is per target, further down.
inline constexpr int64_t kNrVectors = 2;                  // width of the register tile, in vectors
inline constexpr int64_t kKc = kGemmWholeSumDepth;        // depth of one packed block
inline constexpr int64_t kBlockABytes = 144 * 1024;       // an MC x KC block of A
inline constexpr int64_t kPanelBBytes = 2 * 1024 * 1024;  // a KC x NC panel of B
// The vectorized A packing stores whole 8-lane vectors and may write this many elements past
// the packed block (overwritten later, or slack at the end of the buffer).
inline constexpr int64_t kPackSlack = 16;
// Problems with fewer multiply-adds than this skip packing, which would cost more than it saves
// (measured on Zen 3: the unpacked path wins up to about 64^3 unless k is tiny, when writing C
// dominates and the packed tiles write it faster); below kTinyWork everything is call overhead.
inline constexpr double kUnpackedWork = 64.0 * 64.0 * 64.0;
inline constexpr int64_t kUnpackedMinK = 16;
inline constexpr double kTinyWork = 16.0 * 16.0 * 16.0;
// Problems with fewer multiply-adds than this run on one thread: about 20 us of work on one core,
// against a few us to hand tasks to the pool's threads and join them. 64^3 on both threads
// measured 3.6-3.9 against 5.5-5.7 us quiet (Zen 4), but beside a one-core load its mean went
// from 5.8-7.1 to 8.6-10.9 us: a task claimed by a thread that then loses its core holds the
// call for a time slice, a cost that 1.8 us tasks cannot amortize.
inline constexpr double kParallelWork = 128.0 * 128.0 * 64.0;

// A number no other GEMM call shares (the packed path's threads recognize their call by it).
inline uint64_t next_call_id() {
  static std::atomic<uint64_t> calls{0};
  return calls.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Tasks per thread the packed path aims for when A has several blocks, and the fewest B
// micro-panels a task takes, since each task packs its A block again (Note [GEMM tasks]).
inline constexpr int64_t kGemmTasksPerThread = 8;
inline constexpr int64_t kGemmMinPanelsPerTask = 4;

// gemm_force_wide_tile_for_testing (gemm.h).
inline std::atomic<bool> force_wide_tile{false};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

enum class Scratch : int { kPackedA, kPackedB, kOwnB, kBias, kConvertedA, kConvertedB, kResult, kCount };

// Grow-only, 64-byte aligned memory owned by the calling thread, one buffer per use, so repeated
// GEMMs never go back to the allocator. The pool's threads live as long as the process and so do
// their buffers (at most one A block and one group of B micro-panels each, plus one B panel and
// one packed A for a calling thread).
inline void* scratch(Scratch slot, int64_t bytes) {
  constexpr int kSlots = static_cast<int>(Scratch::kCount);
  thread_local hwy::AlignedFreeUniquePtr<uint8_t[]> buffers[kSlots];
  thread_local int64_t sizes[kSlots] = {};
  const int i = static_cast<int>(slot);
  if (sizes[i] < bytes) {
    buffers[i] = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(bytes));
    EMBER_CHECK(buffers[i] != nullptr, "[gemm] out of memory allocating ", bytes, " bytes of workspace");
    sizes[i] = bytes;
  }
  return buffers[i].get();
}

// What happens to a finished sum on its way to C (Note [GEMM epilogue]); bias is contiguous (n)
// or null, the residual (m, n) at its strides or null.
template <class T>
struct Epilogue {
  T alpha, beta;
  const T* bias;
  Activation activation;
  const T* residual;
  int64_t residual_row_stride, residual_col_stride;
};

// One problem with typed pointers (see GemmArgs).
template <class T>
struct Problem {
  int64_t m, n, k;
  const T* a;
  int64_t a_row_stride, a_col_stride;
  const T* b;
  int64_t b_row_stride, b_col_stride;
  T* c;
  int64_t c_row_stride, c_col_stride;
  Epilogue<T> epilogue;
  GemmPath path = GemmPath::kAuto;  // GemmArgs::path
  const T* b_packed = nullptr;      // GemmArgs::b_packed
};

// The value stored in C[i, j] (at `c`), whose share of the product (one KC block's, or all of
// it) is `sum` (Note [GEMM epilogue]).
template <class T>
inline T finish(T sum, const T* c, bool first, bool last, const Epilogue<T>& e, int64_t i, int64_t j) {
  T v = e.alpha * sum;
  if (!first) {
    v += *c;
  } else {
    if (e.beta != T(0)) v = std::fma(e.beta, *c, v);
    if (e.bias != nullptr) v += e.bias[j];
  }
  if (last) {
    v = scalar::activate(e.activation, v);
    if (e.residual != nullptr) v += e.residual[i * e.residual_row_stride + j * e.residual_col_stride];
  }
  return v;
}

// Integers (no activation: gemm_batched checks): a plain loop that accumulates in uint64_t. Unsigned arithmetic wraps
// modulo 2^64, and truncating that to T gives exactly T's two's-complement wraparound, which is what PyTorch's integer
// matmul returns on overflow.
template <class T>
void integer_gemm(const GemmArgs& g, const T* a, const T* b, T* c, const T* residual, int threads) {
  const auto widen = [](T v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
  const uint64_t alpha = static_cast<uint64_t>(static_cast<int64_t>(g.alpha));
  const uint64_t beta = static_cast<uint64_t>(static_cast<int64_t>(g.beta));
  const T* bias = static_cast<const T*>(g.bias);
  parallel_for_threads(threads, 0, g.m, 1, [&](int64_t row_begin, int64_t row_end) {
    std::vector<uint64_t> sums(static_cast<size_t>(g.n));
    for (int64_t i = row_begin; i < row_end; ++i) {
      std::fill(sums.begin(), sums.end(), 0);
      for (int64_t p = 0; p < g.k; ++p) {
        const uint64_t x = widen(a[i * g.a_row_stride + p * g.a_col_stride]);
        const T* b_row = b + p * g.b_row_stride;
        for (int64_t j = 0; j < g.n; ++j) sums[static_cast<size_t>(j)] += x * widen(b_row[j * g.b_col_stride]);
      }
      for (int64_t j = 0; j < g.n; ++j) {
        T* out = c + i * g.c_row_stride + j * g.c_col_stride;
        uint64_t v = alpha * sums[static_cast<size_t>(j)];
        if (beta != 0) v += beta * widen(*out);
        if (bias != nullptr) v += widen(bias[j * g.bias_stride]);
        if (residual != nullptr) v += widen(residual[i * g.residual_row_stride + j * g.residual_col_stride]);
        *out = static_cast<T>(v);
      }
    }
  });
}

}  // namespace ember::cpu::gemm_detail
#endif  // EMBER_KERNELS_CPU_GEMM_SHARED

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace gemm_detail;  // NOLINT(google-build-using-namespace)

// The vector forms of the activations, shared with the elementwise ops (so linear_gelu and
// gelu(linear) agree): vec::Relu, vec::GeluErf, ... (with functors-inl.h).
#include "kernels/cpu/activation-inl.h"
#include "kernels/cpu/partial_vector-inl.h"  // load_part: tails that read nothing past their end
#include "kernels/cpu/transpose-inl.h"

// The tile height of the packed path on this target (Note [GEMM blocking]): 14 rows where there
// are 32 vector registers (AVX-512), 6 where there are 16.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int64_t kMr = 14;
inline constexpr const char* kMicroKernelName = "AVX-512 14x32";
#elif HWY_TARGET == HWY_AVX2
inline constexpr int64_t kMr = 6;
inline constexpr const char* kMicroKernelName = "AVX2 6x16";
#else
inline constexpr int64_t kMr = 6;
inline constexpr const char* kMicroKernelName = "generic 6x(2 vectors)";
#endif
// The AVX-512 tile's height, which gemm_force_wide_tile_for_testing runs on any target.
inline constexpr int64_t kWideMr = 14;

// The last part of the epilogue on a vector of finished sums, C[i, j : j + lanes]: the activation,
// then the residual.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> finish_last(D d, const Epilogue<T>& e, hn::Vec<D> x, int64_t i, int64_t j) {
  x = activate(d, e.activation, x);
  if (e.residual != nullptr) {
    const T* r = e.residual + i * e.residual_row_stride + j * e.residual_col_stride;
    if (e.residual_col_stride == 1) {
      x = hn::Add(x, hn::LoadU(d, r));
    } else {
      HWY_ALIGN T lanes[hn::MaxLanes(d)];
      for (size_t v = 0; v < hn::Lanes(d); ++v) lanes[v] = r[static_cast<int64_t>(v) * e.residual_col_stride];
      x = hn::Add(x, hn::Load(d, lanes));
    }
  }
  return x;
}

// Where a micro-kernel's MR x NR tile goes: rows [row, row + rows) and columns [col, col + cols)
// of C, starting at `c`.
template <class T>
struct Tile {
  T* c;
  int64_t row_stride, col_stride;
  int64_t row, col;
  int64_t rows, cols;
  bool first;  // the first KC block: bring in beta * C and the bias
  bool last;   // the last KC block: apply the activation and the residual
  const Epilogue<T>* epilogue;
};

// Writes an MR x (2 vectors) tile of sums, acc0[r] and acc1[r] holding row r, to C through the
// epilogue: from registers when the tile is whole and C's rows are contiguous, element by element
// otherwise.
template <int64_t MR, class D, class V = hn::Vec<D>, class T = hn::TFromD<D>>
HWY_INLINE void write_tile(D d, const V* acc0, const V* acc1, const Tile<T>& t) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = kNrVectors * lanes;
  const Epilogue<T>& e = *t.epilogue;
  if (t.rows == MR && t.cols == nr && t.col_stride == 1) {
    const V alpha = hn::Set(d, e.alpha), beta = hn::Set(d, e.beta);
    const bool finishing = t.last && (e.activation != Activation::kNone || e.residual != nullptr);
#pragma GCC unroll 16
    for (int64_t r = 0; r < MR; ++r) {
      T* c = t.c + r * t.row_stride;
      V x0 = hn::Mul(alpha, acc0[r]), x1 = hn::Mul(alpha, acc1[r]);
      if (!t.first) {
        x0 = hn::Add(hn::LoadU(d, c), x0);
        x1 = hn::Add(hn::LoadU(d, c + lanes), x1);
      } else {
        if (e.beta != T(0)) {
          x0 = hn::MulAdd(beta, hn::LoadU(d, c), x0);
          x1 = hn::MulAdd(beta, hn::LoadU(d, c + lanes), x1);
        }
        if (e.bias != nullptr) {
          x0 = hn::Add(x0, hn::LoadU(d, e.bias + t.col));
          x1 = hn::Add(x1, hn::LoadU(d, e.bias + t.col + lanes));
        }
      }
      if (finishing) {
        x0 = finish_last(d, e, x0, t.row + r, t.col);
        x1 = finish_last(d, e, x1, t.row + r, t.col + lanes);
      }
      hn::StoreU(x0, d, c);
      hn::StoreU(x1, d, c + lanes);
    }
    return;
  }
  HWY_ALIGN T sums[MR * kNrVectors * hn::MaxLanes(d)];
  for (int64_t r = 0; r < MR; ++r) {
    hn::Store(acc0[r], d, sums + r * nr);
    hn::Store(acc1[r], d, sums + r * nr + lanes);
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t j = 0; j < t.cols; ++j) {
      T* c = t.c + r * t.row_stride + j * t.col_stride;
      *c = finish(sums[r * nr + j], c, t.first, t.last, e, t.row + r, t.col + j);
    }
  }
}

// The register-tiled micro-kernel: the MR x NR tile (NR = 2 vectors) of A micro-panel (MR x kc,
// packed as kc groups of MR) @ B micro-panel (kc x NR, packed as kc rows of NR), accumulated in
// 2 * MR vector registers, then written to C. The loops over r are unrolled completely, so the
// accumulator arrays live in registers (6 x 2 on AVX2, 14 x 2 on AVX-512: Note [GEMM blocking]).
template <int64_t MR, class D, class T = hn::TFromD<D>>
HWY_INLINE void micro_kernel(D d, int64_t kc, const T* HWY_RESTRICT a, const T* HWY_RESTRICT b, const Tile<T>& tile) {
  using V = hn::Vec<D>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // The tile of C is written after kc steps: start bringing it in now (a C row of the tile is
  // 2 vectors, at most 3 cache lines).
  for (int64_t r = 0; r < tile.rows; ++r) {
    const T* row = tile.c + r * tile.row_stride;
    hwy::Prefetch(row);
    hwy::Prefetch(row + (tile.cols - 1) * tile.col_stride);
  }
  V acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int64_t r = 0; r < MR; ++r) {
    acc0[r] = hn::Zero(d);
    acc1[r] = hn::Zero(d);
  }
  for (int64_t p = 0; p < kc; ++p) {
    const V b0 = hn::Load(d, b), b1 = hn::Load(d, b + lanes);
#pragma GCC unroll 16
    for (int64_t r = 0; r < MR; ++r) {
      const V x = hn::Set(d, a[r]);
      acc0[r] = hn::MulAdd(x, b0, acc0[r]);
      acc1[r] = hn::MulAdd(x, b1, acc1[r]);
    }
    a += MR;
    b += kNrVectors * lanes;
  }
  write_tile<MR>(d, acc0, acc1, tile);
}

#if HWY_TARGET != HWY_SCALAR
// The 4 x 4 form for four doubles in 256 bits (two 128-bit halves of two lanes); transpose_8x8
// (transpose-inl.h) is the float one.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void transpose_4x4(D d, V& r0, V& r1, V& r2, V& r3) {
  // t: a0 b0 | a2 b2 and a1 b1 | a3 b3 for each pair of rows (a, b).
  const V t0 = hn::InterleaveLower(d, r0, r1), t1 = hn::InterleaveUpper(d, r0, r1);
  const V t2 = hn::InterleaveLower(d, r2, r3), t3 = hn::InterleaveUpper(d, r2, r3);
  r0 = hn::ConcatLowerLower(d, t2, t0);
  r2 = hn::ConcatUpperUpper(d, t2, t0);
  r1 = hn::ConcatLowerLower(d, t3, t1);
  r3 = hn::ConcatUpperUpper(d, t3, t1);
}
#endif  // HWY_TARGET != HWY_SCALAR

// Packs the first `cols` columns of a panel whose columns are contiguous (B stored transposed):
// dst[p * nr + j] = src[j * col_stride + p]. Square blocks go through a register transpose
// (8 x 8 floats, 4 x 4 doubles) where 256-bit vectors exist; the rest element by element.
template <class T>
void pack_b_columns(const T* src, int64_t col_stride, int64_t kc, int64_t cols, int64_t nr, T* HWY_RESTRICT dst) {
  int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
  if constexpr (sizeof(T) == 4) {
    const hn::CappedTag<T, 8> d;
    if constexpr (hn::MaxLanes(d) == 8) {
      for (; j + 8 <= cols; j += 8) {
        const T* c = src + j * col_stride;
        const int64_t s = col_stride;
        int64_t p = 0;
        for (; p + 8 <= kc; p += 8) {
          auto r0 = hn::LoadU(d, c + p), r1 = hn::LoadU(d, c + s + p), r2 = hn::LoadU(d, c + 2 * s + p);
          auto r3 = hn::LoadU(d, c + 3 * s + p), r4 = hn::LoadU(d, c + 4 * s + p), r5 = hn::LoadU(d, c + 5 * s + p);
          auto r6 = hn::LoadU(d, c + 6 * s + p), r7 = hn::LoadU(d, c + 7 * s + p);
          transpose_8x8(d, r0, r1, r2, r3, r4, r5, r6, r7);
          store_8_rows(d, dst + p * nr + j, nr, r0, r1, r2, r3, r4, r5, r6, r7);
        }
        for (; p < kc; ++p) {
          for (int64_t q = 0; q < 8; ++q) dst[p * nr + j + q] = c[q * s + p];
        }
      }
    }
  } else if constexpr (sizeof(T) == 8) {
    const hn::CappedTag<T, 4> d;
    if constexpr (hn::MaxLanes(d) == 4) {
      for (; j + 4 <= cols; j += 4) {
        const T* c = src + j * col_stride;
        const int64_t s = col_stride;
        int64_t p = 0;
        for (; p + 4 <= kc; p += 4) {
          auto r0 = hn::LoadU(d, c + p), r1 = hn::LoadU(d, c + s + p), r2 = hn::LoadU(d, c + 2 * s + p);
          auto r3 = hn::LoadU(d, c + 3 * s + p);
          transpose_4x4(d, r0, r1, r2, r3);
          T* out = dst + p * nr + j;
          hn::StoreU(r0, d, out);
          hn::StoreU(r1, d, out + nr);
          hn::StoreU(r2, d, out + 2 * nr);
          hn::StoreU(r3, d, out + 3 * nr);
        }
        for (; p < kc; ++p) {
          for (int64_t q = 0; q < 4; ++q) dst[p * nr + j + q] = c[q * s + p];
        }
      }
    }
  }
#endif
  for (; j < cols; ++j) {
    const T* column = src + j * col_stride;
    for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = column[p];
  }
}

// Packs panels [panel_begin, panel_end) of the kc x nc block of B at `b`: panel q holds, for each
// p, the NR values B[p, q*NR : q*NR + NR] side by side, zeros past column nc.
template <class D, class T = hn::TFromD<D>>
void pack_b(D d, const T* b, int64_t row_stride, int64_t col_stride, int64_t kc, int64_t nc, int64_t panel_begin,
            int64_t panel_end, T* HWY_RESTRICT packed) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = kNrVectors * lanes;
  for (int64_t q = panel_begin; q < panel_end; ++q) {
    const int64_t cols = std::min(nr, nc - q * nr);
    const T* src = b + q * nr * col_stride;
    T* dst = packed + q * nr * kc;
    if (col_stride == 1 && cols == nr) {  // rows of B are contiguous: copy vectors
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t v = 0; v < kNrVectors; ++v) {
          hn::Store(hn::LoadU(d, src + p * row_stride + v * lanes), d, dst + p * nr + v * lanes);
        }
      }
    } else if (row_stride == 1) {  // columns of B are contiguous (a transposed B)
      pack_b_columns(src, col_stride, kc, cols, nr, dst);
      for (int64_t j = cols; j < nr; ++j) {
        for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = T(0);
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t j = 0; j < nr; ++j) dst[p * nr + j] = j < cols ? src[p * row_stride + j * col_stride] : T(0);
      }
    }
  }
}

// MR contiguous values from src to dst, as whole vectors: for MR below the vector width, one
// masked load (AVX2 and AVX-512 masked loads never touch the lanes left out) and one whole store,
// which writes up to MaxLanes - MR values past dst + MR; otherwise whole vectors, the last one
// ending at the last value (overlapping the one before). The copy of one column of a transposed A
// into a micro-panel: std::copy_n called memmove for each 56 bytes (4% of a GPT training step's
// samples).
template <int64_t MR, class T>
HWY_INLINE void copy_column(const T* HWY_RESTRICT src, T* HWY_RESTRICT dst) {
  const hn::ScalableTag<T> d;
  constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(d));
  if constexpr (MR >= kLanes) {
    int64_t r = 0;
    for (; r + kLanes <= MR; r += kLanes) hn::StoreU(hn::LoadU(d, src + r), d, dst + r);
    if (r < MR) hn::StoreU(hn::LoadU(d, src + MR - kLanes), d, dst + MR - kLanes);
  } else {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    hn::StoreU(hn::MaskedLoad(hn::FirstN(d, MR), d, src), d, dst);
#else
    std::copy_n(src, MR, dst);
#endif
  }
}

// Packs the mc x kc block of A at `a` into MR-high micro-panels: for each p, the MR values
// A[r0 : r0 + MR, p] side by side, zeros past row mc. May write up to kPackSlack elements past
// the block (see below).
template <int64_t MR, class T>
void pack_a(const T* a, int64_t row_stride, int64_t col_stride, int64_t mc, int64_t kc, T* HWY_RESTRICT packed) {
  for (int64_t r0 = 0; r0 < mc; r0 += MR) {
    const int64_t rows = std::min(MR, mc - r0);
    const T* src = a + r0 * row_stride;
    T* dst = packed + r0 * kc;
    if (rows < MR) {  // the last, partial micro-panel
      for (int64_t p = 0; p < kc; ++p) {
        for (int64_t r = 0; r < MR; ++r) dst[p * MR + r] = r < rows ? src[r * row_stride + p * col_stride] : T(0);
      }
      continue;
    }
    int64_t p = 0;
#if HWY_TARGET != HWY_SCALAR
    if constexpr (sizeof(T) == 4) {
      const hn::CappedTag<T, 8> d8;
      if constexpr (hn::MaxLanes(d8) == 8) {
        if (col_stride == 1) {
          // Rows contiguous along k (a row-major A): 8 rows x 8 values of k at a time through an
          // 8 x 8 register transpose, each column stored as a whole vector at dst + q * MR + 8g.
          // A group with fewer than 8 rows (MR = 6, or rows 8..13 of MR = 14) reloads its first
          // row in place of the missing ones, and its store runs into the next column's slots:
          // the groups go last to first, so group 0's stores then overwrite that garbage, and
          // the last column's spills into the next block (or the next micro-panel, or the slack),
          // which is written afterwards.
          constexpr int64_t kGroups = (MR + 7) / 8;
          for (; p + 8 <= kc; p += 8) {
            for (int64_t g = kGroups - 1; g >= 0; --g) {
              const int64_t valid = std::min<int64_t>(8, MR - 8 * g);
              const T* base = src + 8 * g * row_stride + p;
              const auto row = [&](int64_t r)
                                   HWY_ATTR { return hn::LoadU(d8, base + (r < valid ? r : 0) * row_stride); };
              auto v0 = row(0), v1 = row(1), v2 = row(2), v3 = row(3), v4 = row(4), v5 = row(5), v6 = row(6),
                   v7 = row(7);
              transpose_8x8(d8, v0, v1, v2, v3, v4, v5, v6, v7);
              store_8_rows(d8, dst + p * MR + 8 * g, MR, v0, v1, v2, v3, v4, v5, v6, v7);
            }
          }
        }
      }
    }
#endif
    if (row_stride == 1) {  // columns contiguous (a transposed A): MR values in a row
      // A store past the MR values lands in the next column's slots, the next micro-panel's or
      // the slack, each written afterwards.
      for (; p < kc; ++p) copy_column<MR>(src + p * col_stride, dst + p * MR);
    } else {
      for (; p < kc; ++p) {
        for (int64_t r = 0; r < MR; ++r) dst[p * MR + r] = src[r * row_stride + p * col_stride];
      }
    }
  }
}

// Runs the micro-kernel over rows [0, mc) of a packed A block (at a_packed, row ic of C) against
// packed B micro-panels [0, panels) (at b_packed, column j0 of C), for the k block at pc.
template <int64_t MR, class D, class T = hn::TFromD<D>>
HWY_INLINE void block_times_panels(D d, const Problem<T>& p, int64_t ic, int64_t mc, int64_t j0, int64_t panels,
                                   int64_t pc, int64_t kc, const T* a_packed, const T* b_packed) {
  const int64_t nr = kNrVectors * static_cast<int64_t>(hn::Lanes(d));
  for (int64_t q = 0; q < panels; ++q) {
    const int64_t j = j0 + q * nr;
    for (int64_t r0 = 0; r0 < mc; r0 += MR) {
      const Tile<T> tile{p.c + (ic + r0) * p.c_row_stride + j * p.c_col_stride,
                         p.c_row_stride,
                         p.c_col_stride,
                         ic + r0,
                         j,
                         std::min(MR, mc - r0),
                         std::min(nr, p.n - j),
                         pc == 0,
                         pc + kc == p.k,
                         &p.epilogue};
      micro_kernel<MR>(d, kc, a_packed + r0 * kc, b_packed + q * nr * kc, tile);
    }
  }
}

// The packed path (see the top of the file) with an MR-row tile, on up to `threads` threads.
//
// Note [GEMM tasks]: the threads share the work as tasks they claim one at a time (Note [thread
// pool]), never as fixed shares, so a thread that loses its core holds up one task, not half
// the product. Two shapes:
// - A fits one A block (m <= MC, the MLP's and attention's shapes): each task takes a group of B
//   micro-panels (about kTasksPerThread tasks per thread), packs them into its own buffer and
//   multiplies all of A by them, every k block. Each thread packs all of A once, at its first
//   task, into its own buffer (A packed once by tasks and shared by the threads measured slower:
//   87 against 77 us for the MLP's 64 x 784 x 128). B is packed once in all, and nobody waits
//   between k blocks.
// - Otherwise, per KC x NC panel of B: tasks pack its micro-panels into a buffer all threads
//   read, then tasks over blocks of rows (times groups of micro-panels, when there are too few
//   row blocks to go round) pack their A block and multiply it by the panel. Row blocks are as
//   tall as MC allows and differ by at most one tile; the tasks come from splitting the panel's
//   columns, about kGemmTasksPerThread per thread, so the last task leaves little imbalance
//   (with 4 tasks per thread, 1024^3 took 4-5% longer than fixed halves did), but never fewer
//   than kGemmMinPanelsPerTask micro-panels per task, as each task packs its A block again.
// The k blocks, and with them the summation order, never depend on the tasks.
template <int64_t MR, class T>
void packed_gemm(const Problem<T>& p, int threads) {
  const hn::ScalableTag<T> d;
  const int64_t nr = kNrVectors * static_cast<int64_t>(hn::Lanes(d));
  constexpr int64_t kBytes = static_cast<int64_t>(sizeof(T));
  // k in equal blocks of at most KC (784 = 4 x 196, not 3 x 256 + 16): no thin last block. The
  // split depends on k alone, so the summation order still never depends on the threads.
  const int64_t kc_block = ceil_div(p.k, ceil_div(p.k, kKc)), k_blocks = ceil_div(p.k, kc_block);
  const int64_t mc_max = std::max<int64_t>(MR, kBlockABytes / (kKc * kBytes) / MR * MR);
  const int64_t nc_max = std::max<int64_t>(nr, kPanelBBytes / (kKc * kBytes) / nr * nr);
  const int64_t nc_block = std::min(nc_max, round_up(p.n, nr));
  const int64_t tasks_wanted = threads > 1 ? threads * kTasksPerThread : 1;
  const auto block_kc = [&](int64_t block) { return std::min(kc_block, p.k - block * kc_block); };

  if (p.m <= mc_max) {
    const int64_t mc = round_up(p.m, MR), a_stride = mc * kc_block + kPackSlack;
    const uint64_t call = next_call_id();
    const int64_t panels = ceil_div(p.n, nr);
    const int64_t groups = std::min(panels, tasks_wanted), per_group = ceil_div(panels, groups);
    parallel_tasks(ceil_div(panels, per_group), threads, [&](int64_t group) HWY_ATTR {
      // Each thread packs all of A once, at its first task of this call, into its own buffer
      // (A then sits in this core's L2 for all its tasks).
      T* a_all = static_cast<T*>(scratch(Scratch::kPackedA, k_blocks * a_stride * kBytes));
      thread_local uint64_t packed_for = 0;
      if (packed_for != call) {
        for (int64_t block = 0; block < k_blocks; ++block) {
          pack_a<MR>(p.a + block * kc_block * p.a_col_stride, p.a_row_stride, p.a_col_stride, p.m, block_kc(block),
                     a_all + block * a_stride);
        }
        packed_for = call;
      }
      const int64_t q0 = group * per_group, count = std::min(per_group, panels - q0), j0 = q0 * nr;
      T* b_own = p.b_packed ? nullptr : static_cast<T*>(scratch(Scratch::kOwnB, count * nr * kc_block * kBytes));
      for (int64_t block = 0; block < k_blocks; ++block) {
        const int64_t pc = block * kc_block, kc = block_kc(block);
        const T* b_panels = b_own;
        if (p.b_packed != nullptr) {
          b_panels = p.b_packed + pc * panels * nr + q0 * nr * kc;
        } else {
          pack_b(d, p.b + pc * p.b_row_stride + j0 * p.b_col_stride, p.b_row_stride, p.b_col_stride, kc,
                 std::min(p.n - j0, count * nr), 0, count, b_own);
        }
        block_times_panels<MR>(d, p, 0, p.m, j0, count, pc, kc, a_all + block * a_stride, b_panels);
      }
    });
    return;
  }

  T* b_packed = p.b_packed ? nullptr : static_cast<T*>(scratch(Scratch::kPackedB, kc_block * nc_block * kBytes));
  const int64_t all_panels = ceil_div(p.n, nr);
  // Row blocks as even as whole tiles allow (a short last block would leave one thread idle).
  const int64_t row_tiles = ceil_div(p.m, MR);
  const int64_t row_blocks = ceil_div(row_tiles, mc_max / MR);
  const auto block_rows = [&](int64_t b) {
    const int64_t begin = b * row_tiles / row_blocks * MR, end = (b + 1) * row_tiles / row_blocks * MR;
    return std::pair{begin, std::min(p.m, end) - begin};
  };
  for (int64_t jc = 0; jc < p.n; jc += nc_block) {
    const int64_t nc = std::min(nc_block, p.n - jc), panels = ceil_div(nc, nr);
    const int64_t groups = std::clamp<int64_t>(ceil_div(kGemmTasksPerThread * threads, row_blocks), 1,
                                               std::max<int64_t>(1, panels / kGemmMinPanelsPerTask));
    const int64_t per_group = ceil_div(panels, groups), col_groups = ceil_div(panels, per_group);
    const int64_t pack_per_task = ceil_div(panels, std::min(panels, tasks_wanted));
    for (int64_t block = 0; block < k_blocks; ++block) {
      const int64_t pc = block * kc_block, kc = block_kc(block);
      const T* b_panels = b_packed;
      if (p.b_packed != nullptr) {
        b_panels = p.b_packed + pc * all_panels * nr + jc * kc;
      } else {
        parallel_tasks(ceil_div(panels, pack_per_task), threads, [&](int64_t t) HWY_ATTR {
          pack_b(d, p.b + pc * p.b_row_stride + jc * p.b_col_stride, p.b_row_stride, p.b_col_stride, kc, nc,
                 t * pack_per_task, std::min(panels, (t + 1) * pack_per_task), b_packed);
        });
      }
      parallel_tasks(row_blocks * col_groups, threads, [&](int64_t t) HWY_ATTR {
        const auto [ic, mc] = block_rows(t / col_groups);
        const int64_t q0 = (t % col_groups) * per_group, count = std::min(per_group, panels - q0);
        T* a_packed = static_cast<T*>(scratch(Scratch::kPackedA, (mc_max * kc_block + kPackSlack) * kBytes));
        pack_a<MR>(p.a + ic * p.a_row_stride + pc * p.a_col_stride, p.a_row_stride, p.a_col_stride, mc, kc, a_packed);
        block_times_panels<MR>(d, p, ic, mc, jc + q0 * nr, count, pc, kc, a_packed, b_panels + q0 * nr * kc);
      });
    }
  }
}

// Writes `count` (<= lanes) finished sums of row i of C, starting at column j, from one vector.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE void store_sums(D d, const Problem<T>& p, int64_t i, int64_t j, hn::Vec<D> sums, int64_t count) {
  T* c = p.c + i * p.c_row_stride + j * p.c_col_stride;
  const Epilogue<T>& e = p.epilogue;
  if (count == static_cast<int64_t>(hn::Lanes(d)) && p.c_col_stride == 1) {
    auto x = hn::Mul(hn::Set(d, e.alpha), sums);
    if (e.beta != T(0)) x = hn::MulAdd(hn::Set(d, e.beta), hn::LoadU(d, c), x);
    if (e.bias != nullptr) x = hn::Add(x, hn::LoadU(d, e.bias + j));
    if (e.activation != Activation::kNone || e.residual != nullptr) x = finish_last(d, e, x, i, j);
    hn::StoreU(x, d, c);
    return;
  }
  HWY_ALIGN T lanes[hn::MaxLanes(d)];
  hn::Store(sums, d, lanes);
  for (int64_t v = 0; v < count; ++v) {
    T* out = c + v * p.c_col_stride;
    *out = finish(lanes[v], out, true, true, e, i, j + v);
  }
}

// Unpacked, B's rows contiguous, one row of C at a time over columns [col_begin, col_end): two
// vectors of columns, then one (the last one partial), summing A[i, k] * B[k, j:...] over k.
template <class D, class T = hn::TFromD<D>>
void unpacked_row(D d, const Problem<T>& p, int64_t i, int64_t col_begin, int64_t col_end) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const T* a_row = p.a + i * p.a_row_stride;
  int64_t j = col_begin;
  for (; j + 2 * lanes <= col_end; j += 2 * lanes) {
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    for (int64_t k = 0; k < p.k; ++k) {
      const auto x = hn::Set(d, a_row[k * p.a_col_stride]);
      const T* b_row = p.b + k * p.b_row_stride + j;
      s0 = hn::MulAdd(x, hn::LoadU(d, b_row), s0);
      s1 = hn::MulAdd(x, hn::LoadU(d, b_row + lanes), s1);
    }
    store_sums(d, p, i, j, s0, lanes);
    store_sums(d, p, i, j + lanes, s1, lanes);
  }
  for (; j < col_end; j += lanes) {
    const int64_t valid = std::min(lanes, col_end - j);
    auto s = hn::Zero(d);
    for (int64_t k = 0; k < p.k; ++k) {
      const T* b_row = p.b + k * p.b_row_stride + j;
      s = hn::MulAdd(hn::Set(d, a_row[k * p.a_col_stride]), load_part(d, b_row, valid), s);
    }
    store_sums(d, p, i, j, s, valid);
  }
}

// Note [wide unpacked tile]: with 32 vector registers the unpacked path takes 4 rows x 4 vectors
// of C (16 accumulators, 4 loads of B and 4 broadcasts of A per 16 FMAs), and then it is faster
// than packing up to 256^3 multiply-adds where B's rows are contiguous and m and n span the tile
// (Python, 5 rounds, 2 threads, packed -> unpacked: 128^3 29 -> 17 us, 64 x 784 x 128 95 -> 62,
// 256^3 124 -> 101, 64 x 4096 x 64 217 -> 117; but 384^3 395 -> 472 and 512^3 878 -> 1150, where
// each tile of 4 rows reading all of B from L2 costs more than packing). The 4 x 2 tile below
// stays for 16 registers, and for the last columns. matmul_f32_64 (64^3, on the edge of the
// old rule, packed): 5.4 -> 3.9 us.
inline constexpr double kWideUnpackedWork = 256.0 * 256.0 * 256.0;

// The wide tile's vectors across n: 4 with 512-bit vectors (32 registers), none narrower.
template <class D>
constexpr int wide_unpacked_vectors(D d) {
  return hn::MaxLanes(d) * sizeof(hn::TFromD<D>) >= 64 ? 4 : 0;
}

// Rows i..i+3 of C, columns j.. (NV whole vectors), as unpacked_rows's tile but NV vectors wide.
template <int NV, class D, class T = hn::TFromD<D>>
HWY_INLINE void unpacked_wide_tile(D d, const Problem<T>& p, int64_t i, int64_t j) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ars = p.a_row_stride, acs = p.a_col_stride;
  const T* a0 = p.a + i * ars;
  hn::Vec<D> acc[4][NV];
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t k = 0; k < p.k; ++k) {
    const T* b_row = p.b + k * p.b_row_stride + j;
    hn::Vec<D> b[NV];
    for (int v = 0; v < NV; ++v) b[v] = hn::LoadU(d, b_row + v * lanes);
    const T* a = a0 + k * acs;
    for (int r = 0; r < 4; ++r) {
      const auto x = hn::Set(d, a[r * ars]);
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(x, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < NV; ++v) store_sums(d, p, i + r, j + v * lanes, acc[r][v], lanes);
  }
}

// Unpacked, B's rows contiguous: blocks of 4 rows x 2 vectors of C (8 accumulators: enough
// independent FMAs to fill both FMA units; 4 x 4 vectors first with 32 registers) read A in place
// (broadcast) and B rows as vectors; then 4 rows x 1 vector for the last columns, and leftover
// rows one at a time.
template <class D, class T = hn::TFromD<D>>
void unpacked_rows(D d, const Problem<T>& p, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ars = p.a_row_stride, acs = p.a_col_stride;
  constexpr int kWide = wide_unpacked_vectors(D());
  int64_t i = row_begin;
  for (; i + 4 <= row_end; i += 4) {
    const T* a0 = p.a + i * ars;
    int64_t j = col_begin;
    if constexpr (kWide > 0) {
      for (; j + kWide * lanes <= col_end; j += kWide * lanes) unpacked_wide_tile<kWide>(d, p, i, j);
    }
    for (; j + 2 * lanes <= col_end; j += 2 * lanes) {
      auto c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
      auto c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
      for (int64_t k = 0; k < p.k; ++k) {
        const T* b_row = p.b + k * p.b_row_stride + j;
        const auto b0 = hn::LoadU(d, b_row), b1 = hn::LoadU(d, b_row + lanes);
        const T* a = a0 + k * acs;
        auto x = hn::Set(d, a[0]);
        c00 = hn::MulAdd(x, b0, c00);
        c01 = hn::MulAdd(x, b1, c01);
        x = hn::Set(d, a[ars]);
        c10 = hn::MulAdd(x, b0, c10);
        c11 = hn::MulAdd(x, b1, c11);
        x = hn::Set(d, a[2 * ars]);
        c20 = hn::MulAdd(x, b0, c20);
        c21 = hn::MulAdd(x, b1, c21);
        x = hn::Set(d, a[3 * ars]);
        c30 = hn::MulAdd(x, b0, c30);
        c31 = hn::MulAdd(x, b1, c31);
      }
      store_sums(d, p, i, j, c00, lanes);
      store_sums(d, p, i, j + lanes, c01, lanes);
      store_sums(d, p, i + 1, j, c10, lanes);
      store_sums(d, p, i + 1, j + lanes, c11, lanes);
      store_sums(d, p, i + 2, j, c20, lanes);
      store_sums(d, p, i + 2, j + lanes, c21, lanes);
      store_sums(d, p, i + 3, j, c30, lanes);
      store_sums(d, p, i + 3, j + lanes, c31, lanes);
    }
    for (; j < col_end; j += lanes) {  // the last columns: 4 rows x 1 vector, maybe partial
      const int64_t valid = std::min(lanes, col_end - j);
      auto c0 = hn::Zero(d), c1 = hn::Zero(d), c2 = hn::Zero(d), c3 = hn::Zero(d);
      for (int64_t k = 0; k < p.k; ++k) {
        const T* b_row = p.b + k * p.b_row_stride + j;
        const auto b0 = load_part(d, b_row, valid);
        const T* a = a0 + k * acs;
        c0 = hn::MulAdd(hn::Set(d, a[0]), b0, c0);
        c1 = hn::MulAdd(hn::Set(d, a[ars]), b0, c1);
        c2 = hn::MulAdd(hn::Set(d, a[2 * ars]), b0, c2);
        c3 = hn::MulAdd(hn::Set(d, a[3 * ars]), b0, c3);
      }
      store_sums(d, p, i, j, c0, valid);
      store_sums(d, p, i + 1, j, c1, valid);
      store_sums(d, p, i + 2, j, c2, valid);
      store_sums(d, p, i + 3, j, c3, valid);
    }
  }
  for (; i < row_end; ++i) unpacked_row(d, p, i, col_begin, col_end);
}

// Unpacked, A's rows and B's columns contiguous along k: C[i, j] is a dot product, computed
// for four columns at a time so each load of A serves four FMAs.
template <class D, class T = hn::TFromD<D>>
void unpacked_dots(D d, const Problem<T>& p, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t body = p.k / lanes * lanes, tail = p.k - body;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const T* a_row = p.a + i * p.a_row_stride;
    T* c_row = p.c + i * p.c_row_stride;
    int64_t j = col_begin;
    for (; j + 4 <= col_end; j += 4) {
      const T* b0 = p.b + j * p.b_col_stride;
      const T* b1 = b0 + p.b_col_stride;
      const T* b2 = b1 + p.b_col_stride;
      const T* b3 = b2 + p.b_col_stride;
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
      for (int64_t k = 0; k < body; k += lanes) {
        const auto x = hn::LoadU(d, a_row + k);
        s0 = hn::MulAdd(x, hn::LoadU(d, b0 + k), s0);
        s1 = hn::MulAdd(x, hn::LoadU(d, b1 + k), s1);
        s2 = hn::MulAdd(x, hn::LoadU(d, b2 + k), s2);
        s3 = hn::MulAdd(x, hn::LoadU(d, b3 + k), s3);
      }
      if (body < p.k) {
        const auto x = load_part(d, a_row + body, tail);
        s0 = hn::MulAdd(x, load_part(d, b0 + body, tail), s0);
        s1 = hn::MulAdd(x, load_part(d, b1 + body, tail), s1);
        s2 = hn::MulAdd(x, load_part(d, b2 + body, tail), s2);
        s3 = hn::MulAdd(x, load_part(d, b3 + body, tail), s3);
      }
      const T sums[4] = {hn::GetLane(hn::SumOfLanes(d, s0)), hn::GetLane(hn::SumOfLanes(d, s1)),
                         hn::GetLane(hn::SumOfLanes(d, s2)), hn::GetLane(hn::SumOfLanes(d, s3))};
      for (int64_t v = 0; v < 4; ++v) {
        T* c = c_row + (j + v) * p.c_col_stride;
        *c = finish(sums[v], c, true, true, p.epilogue, i, j + v);
      }
    }
    for (; j < col_end; ++j) {
      const T* b0 = p.b + j * p.b_col_stride;
      auto s = hn::Zero(d);
      for (int64_t k = 0; k < body; k += lanes) s = hn::MulAdd(hn::LoadU(d, a_row + k), hn::LoadU(d, b0 + k), s);
      if (body < p.k) s = hn::MulAdd(load_part(d, a_row + body, tail), load_part(d, b0 + body, tail), s);
      T* c = c_row + j * p.c_col_stride;
      *c = finish(hn::GetLane(hn::SumOfLanes(d, s)), c, true, true, p.epilogue, i, j);
    }
  }
}

enum class Unpacked { kRows, kDots };

// Runs an unpacked form on up to `threads` threads, splitting rows, or columns when there are
// too few rows to go round (a vector times a matrix). The rows form splits whole tiles: groups of
// 4 rows, and columns by its widest tile, so that no thread is left rows or columns that only the
// one-row or narrow tiles take (4 x 2048 x 2048 split 2 rows a thread: 2.0-4.5 ms, at one
// multiply-add chain per vector; split by columns: 0.42-0.44 ms).
template <class T>
void unpacked_gemm(Unpacked form, const Problem<T>& p, int threads) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const bool rows = form == Unpacked::kRows;
  const int64_t row_unit = rows ? 4 : 1;
  const int64_t column_unit = rows ? std::max(2, wide_unpacked_vectors(d)) * lanes : 4;
  const auto run = [&](int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) HWY_ATTR {
    if (rows) {
      unpacked_rows(d, p, row_begin, row_end, col_begin, col_end);
    } else {
      unpacked_dots(d, p, row_begin, row_end, col_begin, col_end);
    }
  };
  if (p.m >= row_unit * threads) {
    parallel_for_threads(threads, 0, ceil_div(p.m, row_unit), 1, [&](int64_t begin, int64_t end) {
      run(begin * row_unit, std::min(p.m, end * row_unit), 0, p.n);
    });
  } else {
    parallel_for_threads(threads, 0, ceil_div(p.n, column_unit), 1, [&](int64_t begin, int64_t end) {
      run(0, p.m, std::min(p.n, begin * column_unit), std::min(p.n, end * column_unit));
    });
  }
}

// C^T = B^T A^T: the same problem seen from its transpose (valid without a bias, which is per
// column; the activation and the residual are elementwise and follow the transpose).
template <class T>
Problem<T> transposed(const Problem<T>& p) {
  Problem<T> t = p;
  t.m = p.n;
  t.n = p.m;
  t.a = p.b;
  t.a_row_stride = p.b_col_stride;
  t.a_col_stride = p.b_row_stride;
  t.b = p.a;
  t.b_row_stride = p.a_col_stride;
  t.b_col_stride = p.a_row_stride;
  t.c_row_stride = p.c_col_stride;
  t.c_col_stride = p.c_row_stride;
  t.epilogue.bias = nullptr;
  t.epilogue.residual_row_stride = p.epilogue.residual_col_stride;
  t.epilogue.residual_col_stride = p.epilogue.residual_row_stride;
  return t;
}

// float32 / float64: the path the shape and strides alone choose (never the thread count, so the
// summation order, and the result, do not depend on it), with p's size-1 dims' strides set to 1.
template <class T>
GemmPath choose_path(Problem<T>& p) {
  if (p.m == 0 || p.n == 0) return GemmPath::kEmpty;
  if (p.k == 0) return GemmPath::kNoTerms;
  // A size-1 dim's stride is never used to step: call it 1 so more problems find a fast form.
  if (p.m == 1) p.a_row_stride = p.c_row_stride = p.epilogue.residual_row_stride = 1;
  if (p.n == 1) p.b_col_stride = p.c_col_stride = p.epilogue.residual_col_stride = 1;
  if (p.k == 1) p.a_col_stride = p.b_row_stride = 1;
  const double work = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  const bool rows_ok = p.b_col_stride == 1;
  const bool dots_ok = p.a_col_stride == 1 && p.b_row_stride == 1;
  const bool transposed_rows_ok = p.epilogue.bias == nullptr && p.a_row_stride == 1;
  if (p.path != GemmPath::kAuto) return p.path;  // the path of the problem this is a block of (path_fits)
  if (p.n < lanes) {                             // too narrow for vectors across n: go along k, or along m
    if (dots_ok) return GemmPath::kUnpackedDots;
    if (transposed_rows_ok) return GemmPath::kUnpackedTransposedRows;
  }
  if (p.m == 1 || work < kTinyWork || (work < kUnpackedWork && p.k >= kUnpackedMinK)) {
    if (rows_ok) return GemmPath::kUnpackedRows;
    if (dots_ok) return GemmPath::kUnpackedDots;
  }
  const bool forced = force_wide_tile.load(std::memory_order_relaxed);
  constexpr int kWide = wide_unpacked_vectors(hn::ScalableTag<T>());
  if (kWide > 0 && !forced && rows_ok && p.m >= 4 && p.k >= kUnpackedMinK && p.n >= kWide * lanes &&
      work <= kWideUnpackedWork) {
    return GemmPath::kUnpackedRows;  // Note [wide unpacked tile]
  }
  return kMr != kWideMr && forced ? GemmPath::kPackedWide : GemmPath::kPacked;
}

template <class T>
void solve(Problem<T> p, int threads) {
  const GemmPath path = choose_path(p);
  const double work = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const int used = work >= kParallelWork ? threads : 1;
  switch (path) {
    case GemmPath::kNoTerms:  // no products: C = act(beta * C + bias) + residual
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          T* c = p.c + i * p.c_row_stride + j * p.c_col_stride;
          *c = finish(T(0), c, true, true, p.epilogue, i, j);
        }
      }
      return;
    case GemmPath::kUnpackedRows:
      return unpacked_gemm(Unpacked::kRows, p, used);
    case GemmPath::kUnpackedTransposedRows:
      return unpacked_gemm(Unpacked::kRows, transposed(p), used);
    case GemmPath::kUnpackedDots:
      return unpacked_gemm(Unpacked::kDots, p, used);
    case GemmPath::kPackedWide:
      return packed_gemm<kWideMr>(p, used);
    case GemmPath::kPacked:
      return packed_gemm<kMr>(p, used);
    default:
      return;
  }
}

// B packed ahead (Note [B packed once], at the registry entry): the micro-panels of every k block, as
// packed_gemm reads them: block b (rows [b KC, b KC + kc) of B, KC = the k blocking) holds every
// micro-panel of the n columns, panel q at (b KC) * panels * NR + q * NR * kc. Elements; 0 when the
// problem does not take the packed path.
template <class T>
int64_t packed_b_size(Problem<T> p, int64_t* panel_width) {
  const int64_t nr = kNrVectors * static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  *panel_width = nr;
  const GemmPath path = choose_path(p);
  if (path != GemmPath::kPacked && path != GemmPath::kPackedWide) return 0;
  return p.k * round_up(p.n, nr);
}

template <class T>
void pack_all_of_b(Problem<T> p, T* HWY_RESTRICT packed) {
  (void)choose_path(p);  // the strides of size-1 dims, as solve sees them
  const hn::ScalableTag<T> d;
  const int64_t nr = kNrVectors * static_cast<int64_t>(hn::Lanes(d)), panels = ceil_div(p.n, nr);
  const int64_t kc_block = ceil_div(p.k, ceil_div(p.k, kKc));
  for (int64_t pc = 0; pc < p.k; pc += kc_block) {
    pack_b(d, p.b + pc * p.b_row_stride, p.b_row_stride, p.b_col_stride, std::min(kc_block, p.k - pc), p.n, 0, panels,
           packed + pc * panels * nr);
  }
}

// The per-target entry points.
int64_t PackedBSizeFloat(const Problem<float>& p, int64_t* panel_width) { return packed_b_size(p, panel_width); }
int64_t PackedBSizeDouble(const Problem<double>& p, int64_t* panel_width) { return packed_b_size(p, panel_width); }
void PackBFloat(const Problem<float>& p, float* packed) { pack_all_of_b(p, packed); }
void PackBDouble(const Problem<double>& p, double* packed) { pack_all_of_b(p, packed); }
void SolveFloat(const Problem<float>& p, int threads) { solve(p, threads); }
void SolveDouble(const Problem<double>& p, int threads) { solve(p, threads); }
GemmPath PathFloat(Problem<float> p) { return choose_path(p); }
GemmPath PathDouble(Problem<double> p) { return choose_path(p); }
int64_t TileRows() { return force_wide_tile.load(std::memory_order_relaxed) ? kWideMr : kMr; }
const char* MicroKernelName() { return kMicroKernelName; }

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {
namespace gemm_detail {

HWY_EXPORT(SolveFloat);
HWY_EXPORT(SolveDouble);
HWY_EXPORT(PackedBSizeFloat);
HWY_EXPORT(PackedBSizeDouble);
HWY_EXPORT(PackBFloat);
HWY_EXPORT(PackBDouble);
HWY_EXPORT(MicroKernelName);
HWY_EXPORT(PathFloat);
HWY_EXPORT(PathDouble);
HWY_EXPORT(TileRows);

void solve_simd(const Problem<float>& p, int threads) { HWY_DYNAMIC_DISPATCH(SolveFloat)(p, threads); }
void solve_simd(const Problem<double>& p, int threads) { HWY_DYNAMIC_DISPATCH(SolveDouble)(p, threads); }
const char* micro_kernel_name() { return HWY_DYNAMIC_DISPATCH(MicroKernelName)(); }
int64_t tile_rows() { return HWY_DYNAMIC_DISPATCH(TileRows)(); }

// out (rows x cols, contiguous) = the float32 values of src at the given strides, walked along
// whichever dim is contiguous in memory.
template <class S>
void convert_to_float(const S* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, float* out) {
  if (col_stride == 1 || row_stride != 1) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(src[i * row_stride + j * col_stride]);
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) out[i * cols + j] = static_cast<float>(src[i + j * col_stride]);
  }
}

// float16 / bfloat16: multiply in float32 (bfloat16 pairs on AVX512_BF16, gemm_bf16.h; otherwise A
// and B converted to float32), and apply the epilogue in float32, rounding once.
template <class S>
void solve_half(const GemmArgs& g, const S* a, const S* b, S* c, const S* residual, int threads) {
  const int64_t m = g.m, n = g.n, k = g.k;
  float* c32 = static_cast<float*>(scratch(Scratch::kResult, std::max<int64_t>(m * n, 1) * 4));
  const S* bias = static_cast<const S*>(g.bias);
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  if (std::is_same_v<S, BFloat16> && supports(cpu_isa(), Isa::kAvx512Bf16)) {
    const auto* a16 = reinterpret_cast<const uint16_t*>(a);
    const auto* b16 = reinterpret_cast<const uint16_t*>(b);
    // The common epilogue (a bias at most) is rounded by the GEMM, tile by tile.
    const bool simple = alpha == 1.0f && beta == 0.0f && g.activation == Activation::kNone && residual == nullptr &&
                        g.c_col_stride == 1;
    std::vector<float> bias32;
    if (simple && bias != nullptr) {
      bias32.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) bias32[static_cast<size_t>(j)] = static_cast<float>(bias[j * g.bias_stride]);
    }
    const Bf16Output rounded{reinterpret_cast<uint16_t*>(c), g.c_row_stride, bias != nullptr ? bias32.data() : nullptr};
    gemm_bf16({a16, g.a_row_stride, g.a_col_stride}, {b16, g.b_col_stride, g.b_row_stride}, m, n, k, c32, threads,
              simple ? &rounded : nullptr);
    if (simple) return;
  } else {
    // Converted in the order the operands lie in memory (a transposed weight is read along its rows).
    float* a32 = static_cast<float*>(scratch(Scratch::kConvertedA, std::max<int64_t>(m * k, 1) * 4));
    float* b32 = static_cast<float*>(scratch(Scratch::kConvertedB, std::max<int64_t>(k * n, 1) * 4));
    convert_to_float(a, m, k, g.a_row_stride, g.a_col_stride, a32);
    convert_to_float(b, k, n, g.b_row_stride, g.b_col_stride, b32);
    const Epilogue<float> none{1.0f, 0.0f, nullptr, Activation::kNone, nullptr, 0, 0};
    solve_simd(Problem<float>{m, n, k, a32, k, 1, b32, n, 1, c32, n, 1, none}, threads);
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      S* out = c + i * g.c_row_stride + j * g.c_col_stride;
      float v = alpha * c32[i * n + j];
      if (beta != 0.0f) v = std::fma(beta, static_cast<float>(*out), v);
      if (bias != nullptr) v += static_cast<float>(bias[j * g.bias_stride]);
      v = scalar::activate(g.activation, v);
      if (residual != nullptr) v += static_cast<float>(residual[i * g.residual_row_stride + j * g.residual_col_stride]);
      *out = S(v);
    }
  }
}

// One problem of the batch, at the given element offsets, on up to `threads` threads.
template <class T>
void solve_one(const GemmArgs& g, int64_t a_offset, int64_t b_offset, int64_t c_offset, int64_t residual_offset,
               int threads) {
  const T* a = static_cast<const T*>(g.a) + a_offset;
  const T* b = static_cast<const T*>(g.b) + b_offset;
  T* c = static_cast<T*>(g.c) + c_offset;
  const T* residual = g.residual ? static_cast<const T*>(g.residual) + residual_offset : nullptr;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const T* bias = static_cast<const T*>(g.bias);
    if (bias != nullptr && g.bias_stride != 1 && g.n > 1) {  // the tiles read the bias as vectors
      T* contiguous = static_cast<T*>(scratch(Scratch::kBias, g.n * static_cast<int64_t>(sizeof(T))));
      for (int64_t j = 0; j < g.n; ++j) contiguous[j] = bias[j * g.bias_stride];
      bias = contiguous;
    }
    const Epilogue<T> epilogue{static_cast<T>(g.alpha), static_cast<T>(g.beta), bias, g.activation, residual,
                               g.residual_row_stride,   g.residual_col_stride};
    solve_simd(Problem<T>{g.m, g.n, g.k, a, g.a_row_stride, g.a_col_stride, b, g.b_row_stride, g.b_col_stride, c,
                          g.c_row_stride, g.c_col_stride, epilogue, g.path, static_cast<const T*>(g.b_packed)},
               threads);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    solve_half(g, a, b, c, residual, threads);
  } else {
    const double work = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    integer_gemm(g, a, b, c, residual, work >= kParallelWork ? threads : 1);
  }
}

// Can a problem with these strides take the path it asks for (GemmArgs::path)? As choose_path
// sees them: a size-1 dim's stride counts as 1.
bool path_fits(const GemmArgs& g) {
  const int64_t a_row = g.m == 1 ? 1 : g.a_row_stride, a_col = g.k == 1 ? 1 : g.a_col_stride;
  const int64_t b_row = g.k == 1 ? 1 : g.b_row_stride, b_col = g.n == 1 ? 1 : g.b_col_stride;
  switch (g.path) {
    case GemmPath::kAuto:
      return true;
    case GemmPath::kPacked:
    case GemmPath::kPackedWide:
      return g.dtype == kFloat32 || g.dtype == kFloat64;
    case GemmPath::kUnpackedRows:
      return (g.dtype == kFloat32 || g.dtype == kFloat64) && b_col == 1;
    case GemmPath::kUnpackedDots:
      return (g.dtype == kFloat32 || g.dtype == kFloat64) && a_col == 1 && b_row == 1;
    case GemmPath::kUnpackedTransposedRows:
      return (g.dtype == kFloat32 || g.dtype == kFloat64) && g.bias == nullptr && a_row == 1;
    default:
      return false;
  }
}

}  // namespace gemm_detail

void gemm(const GemmArgs& args) { gemm_batched(args, 1, nullptr, nullptr, nullptr, nullptr); }

void gemm_batched(const GemmArgs& g, int64_t batch, const int64_t* a_offsets, const int64_t* b_offsets,
                  const int64_t* c_offsets, const int64_t* residual_offsets) {
  using namespace gemm_detail;  // NOLINT(google-build-using-namespace)
  if (batch <= 0 || g.m <= 0 || g.n <= 0) return;
  EMBER_CHECK(path_fits(g), "[gemm] a ", g.dtype, " problem with these strides cannot take path ",
              static_cast<int>(g.path));
  EMBER_CHECK(g.b_packed == nullptr || b_offsets == nullptr || batch == 1,
              "[gemm] a packed B serves one matrix, not a batch of ", batch);
  dispatch_dtype(g.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL("[gemm] has no kernel for bool");
    } else {
      const double work =
          static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(std::max<int64_t>(g.k, 1));
      const int threads = num_threads();
      const auto offset = [](const int64_t* offsets, int64_t i) { return offsets ? offsets[i] : 0; };
      const auto solve_at = [&](int64_t i, int used) {
        solve_one<T>(g, offset(a_offsets, i), offset(b_offsets, i), offset(c_offsets, i), offset(residual_offsets, i),
                     used);
      };
      if constexpr (!std::is_floating_point_v<T> && !std::is_same_v<T, Half> && !std::is_same_v<T, BFloat16>) {
        // Checked here, before any thread starts: an exception must not leave a task.
        EMBER_CHECK(g.activation == Activation::kNone, "[gemm] a fused activation needs a floating-point dtype, got ",
                    g.dtype);
      }
      // Threads over the batch when the problems are too small to split, or when there are enough
      // of them to keep every thread busy; otherwise inside each problem.
      const bool over_batch = batch > 1 && threads > 1 && work * static_cast<double>(batch) >= kParallelWork &&
                              (work < kParallelWork || batch >= 4 * threads);
      if (over_batch) {
        parallel_for_threads(threads, 0, batch, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) solve_at(i, 1);
        });
        return;
      }
      for (int64_t i = 0; i < batch; ++i) solve_at(i, threads);
    }
  });
}

void gemm_force_wide_tile_for_testing(bool on) { gemm_detail::force_wide_tile.store(on); }

const char* gemm_micro_kernel_name() { return gemm_detail::micro_kernel_name(); }

GemmPath gemm_path(const GemmArgs& g) {
  using namespace gemm_detail;  // NOLINT(google-build-using-namespace)
  const auto path = [&](auto tag, auto fn) {
    using T = typename decltype(tag)::type;
    const Epilogue<T> epilogue{
        static_cast<T>(g.alpha),           static_cast<T>(g.beta), static_cast<const T*>(g.bias), g.activation,
        static_cast<const T*>(g.residual), g.residual_row_stride,  g.residual_col_stride};
    return fn(Problem<T>{g.m, g.n, g.k, static_cast<const T*>(g.a), g.a_row_stride, g.a_col_stride,
                         static_cast<const T*>(g.b), g.b_row_stride, g.b_col_stride, static_cast<T*>(g.c),
                         g.c_row_stride, g.c_col_stride, epilogue, g.path});
  };
  if (g.dtype == kFloat32) return path(TypeTag<float>{}, HWY_DYNAMIC_DISPATCH(PathFloat));
  if (g.dtype == kFloat64) return path(TypeTag<double>{}, HWY_DYNAMIC_DISPATCH(PathDouble));
  return GemmPath::kOther;
}

int64_t gemm_tile_rows() { return gemm_detail::tile_rows(); }

namespace {

template <class T>
gemm_detail::Problem<T> problem_of(const GemmArgs& g) {
  const gemm_detail::Epilogue<T> epilogue{
      static_cast<T>(g.alpha),           static_cast<T>(g.beta), static_cast<const T*>(g.bias), g.activation,
      static_cast<const T*>(g.residual), g.residual_row_stride,  g.residual_col_stride};
  return {g.m,
          g.n,
          g.k,
          static_cast<const T*>(g.a),
          g.a_row_stride,
          g.a_col_stride,
          static_cast<const T*>(g.b),
          g.b_row_stride,
          g.b_col_stride,
          static_cast<T*>(g.c),
          g.c_row_stride,
          g.c_col_stride,
          epilogue,
          g.path};
}

}  // namespace

int64_t gemm_packed_b_size(const GemmArgs& g, int64_t* panel_width) {
  using namespace gemm_detail;  // NOLINT(google-build-using-namespace)
  int64_t width = 0;
  int64_t size = 0;
  if (g.m > 0 && g.n > 0 && g.k > 0 && g.dtype == kFloat32) {
    size = HWY_DYNAMIC_DISPATCH(PackedBSizeFloat)(problem_of<float>(g), &width);
  }
  if (g.m > 0 && g.n > 0 && g.k > 0 && g.dtype == kFloat64) {
    size = HWY_DYNAMIC_DISPATCH(PackedBSizeDouble)(problem_of<double>(g), &width);
  }
  if (panel_width != nullptr) *panel_width = width;
  return size;
}

void gemm_pack_b(const GemmArgs& g, void* packed) {
  using namespace gemm_detail;  // NOLINT(google-build-using-namespace)
  EMBER_CHECK(gemm_packed_b_size(g) > 0, "[gemm] this problem does not take the packed path: nothing to pack");
  if (g.dtype == kFloat32) HWY_DYNAMIC_DISPATCH(PackBFloat)(problem_of<float>(g), static_cast<float*>(packed));
  if (g.dtype == kFloat64) HWY_DYNAMIC_DISPATCH(PackBDouble)(problem_of<double>(g), static_cast<double*>(packed));
}

// --- registry entry --------------------------------------------------------------------------------

namespace {

// c += residual over c's shape, each at its strides.
template <class T>
void add_residual(const Operand& c, const Operand& residual) {
  T* out = c.ptr<T>();
  const T* r = residual.ptr<T>();
  const int nd = c.dim();
  const int64_t n = c.size(-1), rows = c.numel() / n, c_step = c.stride(-1), r_step = residual.stride(-1);
  int64_t index[kMaxDims] = {};
  int64_t c_offset = 0, r_offset = 0;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t j = 0; j < n; ++j) out[c_offset + j * c_step] += r[r_offset + j * r_step];
    for (int d = nd - 2; d >= 0; --d) {  // the next row, the last dim before the columns fastest
      c_offset += c.stride(d);
      r_offset += residual.stride(d);
      if (++index[d] < c.size(d)) break;
      c_offset -= c.stride(d) * c.size(d);
      r_offset -= residual.stride(d) * c.size(d);
      index[d] = 0;
    }
  }
}

// Note [B packed once]: a B that is multiplied again at the same version (a weight in inference:
// every token batch, every image) keeps the packed path's panels on its storage (Note [derived
// forms] in ember/tensor.h), so later products skip packing it: onnx_minilm_b1_s128 spent 11% of
// its time in pack_b. The panels are made at the second product of a version, not the first: a
// training step multiplies each weight once forward (W^T) and once backward (W) per version, and
// deriving there would only add an allocation of the weight's size per product. The first product
// leaves a marker (no allocation) under the key's "seen" variant. A compiled plan's temporaries
// have no storage and keep nothing. The panels take B's memory again (columns rounded up to a
// panel): a float32 model in inference holds its weights twice, as the convolutions' packed
// weights do.
constexpr int64_t kDerivedPackedB = 101;

std::shared_ptr<const void> kept_packing_of_b(const GemmArgs& args, const Operand& b) {
  if (b.storage == nullptr || (args.dtype != kFloat32 && args.dtype != kFloat64)) return nullptr;
  int64_t panel_width = 0;  // the packing's layout: another instruction set packs differently
  const int64_t size = gemm_packed_b_size(args, &panel_width);
  if (size == 0) return nullptr;
  const auto first = static_cast<int64_t>(reinterpret_cast<intptr_t>(b.data));  // views of one storage differ here
  const DerivedKey key{
      kDerivedPackedB, first, args.k, args.n, args.b_row_stride, args.b_col_stride, static_cast<int64_t>(args.dtype),
      panel_width};
  return derived_form_on_reuse(b, key, [&] {
    const size_t bytes = static_cast<size_t>(size) * dtype_size(args.dtype);
    std::shared_ptr<void> form(hwy::AllocateAlignedBytes(bytes, nullptr, nullptr),
                               [](void* p) { hwy::FreeAlignedBytes(p, nullptr, nullptr); });
    EMBER_CHECK(form != nullptr, "[matmul] out of memory allocating ", bytes, " bytes for a packed weight");
    gemm_pack_b(args, form.get());
    return std::shared_ptr<const void>(std::move(form));
  });
}

// Matmul. inputs: a (batch..., m, k), b (batch..., k, n), bias (n), (1) or () or absent, residual
// (batch..., m, n) or absent; outputs: c (batch..., m, n). a, b and the residual have c's batch dims,
// stepping by 0 where they are broadcast; c must not overlap the inputs (the front-end sees to both).
// A b shared by the whole batch whose a and c rows can be laid end to end (x of any rank times a
// 2-D matrix: the linear case) is one tall GEMM; other batches go to gemm_batched with per-problem
// offsets.
void matmul_kernel(const KernelCall& call) {
  const Operand &a = call.inputs[0], &b = call.inputs[1], &bias = call.inputs[2], &residual = call.inputs[3];
  const Operand& c = call.outputs[0];
  if (c.numel() == 0) return;
  const MatmulAttrs& attrs = call.get<MatmulAttrs>();
  GemmArgs args;
  args.dtype = c.dtype;
  args.m = c.size(-2);
  args.n = c.size(-1);
  args.k = a.size(-1);
  args.a = a.data;
  args.a_row_stride = a.stride(-2);
  args.a_col_stride = a.stride(-1);
  args.b = b.data;
  args.b_row_stride = b.stride(-2);
  args.b_col_stride = b.stride(-1);
  args.c = c.data;
  args.c_row_stride = c.stride(-2);
  args.c_col_stride = c.stride(-1);
  args.alpha = attrs.alpha;
  args.beta = attrs.beta;
  args.activation = attrs.activation;
  if (bias.defined()) {
    args.bias = bias.data;
    args.bias_stride = bias.dim() == 0 || bias.size(0) == 1 ? 0 : bias.stride(0);  // size 1: broadcast
  }
  if (residual.defined()) {
    args.residual = residual.data;
    args.residual_row_stride = residual.stride(-2);
    args.residual_col_stride = residual.stride(-1);
  }

  const int nb = c.dim() - 2;
  const int64_t* batch = c.shape->data();
  bool b_shared = true;
  for (int d = 0; d < nb; ++d) b_shared = b_shared && (b.stride(d) == 0 || batch[d] == 1);
  if (b_shared) {
    // One matrix on the right: lay the rows of every batch end to end if a, c and the residual
    // allow it. The tall GEMM is also the problem the unfused call (a linear, then the add) solves,
    // so a residual in the epilogue keeps its summation order, and its bits.
    int64_t rows[kMaxDims], a_rows[kMaxDims], c_rows[kMaxDims], r_rows[kMaxDims];
    for (int d = 0; d <= nb; ++d) {
      rows[d] = batch[d];
      a_rows[d] = a.stride(d);
      c_rows[d] = c.stride(d);
      r_rows[d] = residual.defined() ? residual.stride(d) : 0;
    }
    const std::optional<int64_t> a_stride = merged_stride(rows, a_rows, nb + 1);
    const std::optional<int64_t> c_stride = merged_stride(rows, c_rows, nb + 1);
    const std::optional<int64_t> r_stride = residual.defined() ? merged_stride(rows, r_rows, nb + 1) : 0;
    // A residual that does not lay out so (one broadcast along the batch) is added after the tall
    // GEMM, as the unfused add would.
    const bool add_after = !r_stride && (c.dtype == kFloat32 || c.dtype == kFloat64);
    if (a_stride && c_stride && (r_stride || add_after)) {
      int64_t m = 1;
      for (int d = 0; d <= nb; ++d) m *= rows[d];
      args.m = m;
      args.a_row_stride = *a_stride;
      args.c_row_stride = *c_stride;
      if (r_stride) args.residual_row_stride = *r_stride;
      if (add_after) args.residual = nullptr;
      const std::shared_ptr<const void> packed = kept_packing_of_b(args, b);
      args.b_packed = packed.get();
      gemm(args);
      if (add_after && c.dtype == kFloat32) add_residual<float>(c, residual);
      if (add_after && c.dtype == kFloat64) add_residual<double>(c, residual);
      return;
    }
  }
  int64_t count = 1;
  for (int d = 0; d < nb; ++d) count *= batch[d];
  std::vector<int64_t> offsets(static_cast<size_t>(4 * count));
  int64_t* a_offsets = offsets.data();
  int64_t* b_offsets = a_offsets + count;
  int64_t* c_offsets = b_offsets + count;
  int64_t* r_offsets = c_offsets + count;
  int64_t index[kMaxDims] = {};
  int64_t a_offset = 0, b_offset = 0, c_offset = 0, r_offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    a_offsets[i] = a_offset;
    b_offsets[i] = b_offset;
    c_offsets[i] = c_offset;
    r_offsets[i] = r_offset;
    for (int d = nb - 1; d >= 0; --d) {  // step the batch index, last dim fastest
      a_offset += a.stride(d);
      b_offset += b.stride(d);
      c_offset += c.stride(d);
      if (residual.defined()) r_offset += residual.stride(d);
      if (++index[d] < batch[d]) break;
      a_offset -= a.stride(d) * batch[d];
      b_offset -= b.stride(d) * batch[d];
      c_offset -= c.stride(d) * batch[d];
      if (residual.defined()) r_offset -= residual.stride(d) * batch[d];
      index[d] = 0;
    }
  }
  gemm_batched(args, count, a_offsets, b_offsets, c_offsets, residual.defined() ? r_offsets : nullptr);
}

}  // namespace

void register_gemm_kernels(KernelTable& table) {
  table.add(OpKind::kMatmul, DeviceType::kCPU, matmul_kernel, DTypeSet::all().without(kBool));
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

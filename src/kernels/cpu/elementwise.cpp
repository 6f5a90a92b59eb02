// Elementwise kernels (unary, binary, where, copy/convert, fill): the layout engine walks rows
// (Loop) across threads; a contiguous float/double row goes to the SIMD row kernels
// (elementwise_simd.cpp), everything else runs the scalar functors of scalar_math.h. Compiled once:
// only the SIMD rows are compiled per target.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"
#include "kernels/cpu/scalar_math.h"

namespace ember::cpu {
namespace {

// Whether the front-end can ever send T to op: float-only ops get floats, kNoBool ops no bools.
template <OpKind op, class T>
constexpr bool kAccepts = !(has_trait(op, kFloatResult) && !is_floating(dtype_of<T>())) &&
                          !(has_trait(op, kNoBool) && std::is_same_v<T, bool>);

// The float types with SIMD rows (the 16-bit ones computed in float32 there, rounded once).
template <class T>
constexpr bool kSimdType =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <OpKind op, class F>
void run_unary(DType dtype, void* out, const void* in, const Loop& loop) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kAccepts<op, T>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", dtype);
    } else {
      using C = compute_t<T>;
      using Out = std::conditional_t<has_trait(op, kBoolResult), bool, T>;
      const F f;
      char* base[2] = {static_cast<char*>(out), static_cast<char*>(const_cast<void*>(in))};
      const int64_t sizes[2] = {sizeof(Out), sizeof(T)};
      const int64_t so = loop.inner_stride(0), si = loop.inner_stride(1);
      parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for_each_row<2>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
          Out* o = reinterpret_cast<Out*>(p[0]);
          const T* x = reinterpret_cast<const T*>(p[1]);
          int64_t i = 0;
          if constexpr (kSimdType<T> && std::is_same_v<Out, T>) {
            if (so == 1 && si == 1) i = simd::unary_row(op, dtype, o, x, n);
          }
          for (; i < n; ++i) o[i * so] = static_cast<Out>(f(static_cast<C>(x[i * si])));
        });
      });
    }
  });
}

template <OpKind op, class F>
void run_binary(DType dtype, void* out, const void* a, const void* b, const Loop& loop) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kAccepts<op, T>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", dtype);
    } else {
      using C = compute_t<T>;
      using Out = std::conditional_t<has_trait(op, kBoolResult), bool, T>;
      const F f;
      char* base[3] = {static_cast<char*>(out), static_cast<char*>(const_cast<void*>(a)),
                       static_cast<char*>(const_cast<void*>(b))};
      const int64_t sizes[3] = {sizeof(Out), sizeof(T), sizeof(T)};
      const int64_t so = loop.inner_stride(0), sa = loop.inner_stride(1), sb = loop.inner_stride(2);
      parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for_each_row<3>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
          Out* o = reinterpret_cast<Out*>(p[0]);
          const T* x = reinterpret_cast<const T*>(p[1]);
          const T* y = reinterpret_cast<const T*>(p[2]);
          int64_t i = 0;
          if constexpr (kSimdType<T> && std::is_same_v<Out, T>) {
            if (so == 1 && (sa == 0 || sa == 1) && (sb == 0 || sb == 1)) {
              i = simd::binary_row(op, dtype, o, x, sa == 0, y, sb == 0, n);
            }
          }
          for (; i < n; ++i) o[i * so] = static_cast<Out>(f(static_cast<C>(x[i * sa]), static_cast<C>(y[i * sb])));
        });
      });
    }
  });
}

// Conversion without undefined behaviour: NaN gives 0, floats go to integers through int64 (so
// negative values wrap into unsigned types as on x86 hardware), out-of-range values saturate at the
// int64 limits first; anything to bool is "nonzero".
template <class To, class From>
To convert(From value) {
  using C = compute_t<From>;
  const C v = static_cast<C>(value);
  if constexpr (std::is_same_v<To, bool>) {
    return v != C(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<C>) {
    if (v != v) return 0;
    if (v >= static_cast<C>(9.2233720368547758e18)) return static_cast<To>(std::numeric_limits<int64_t>::max());
    if (v <= static_cast<C>(-9.2233720368547758e18)) return static_cast<To>(std::numeric_limits<int64_t>::min());
    return static_cast<To>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(static_cast<compute_t<To>>(v));
  }
}

}  // namespace

void unary(OpKind op, DType dtype, void* out, const void* in, const Loop& loop) {
  switch (op) {
#define EMBER_UNARY_CASE(kind, ...) \
  case OpKind::k##kind:             \
    return run_unary<OpKind::k##kind, scalar::kind>(dtype, out, in, loop);
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a unary elementwise primitive");
}

void binary(OpKind op, DType dtype, void* out, const void* a, const void* b, const Loop& loop) {
  switch (op) {
#define EMBER_BINARY_CASE(kind, ...) \
  case OpKind::k##kind:              \
    return run_binary<OpKind::k##kind, scalar::kind>(dtype, out, a, b, loop);
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a binary elementwise primitive");
}

namespace {

// Note [branchless select]
// where() selects through a mask instead of a branch: a condition drawn from data (relu's backward
// selects on y <= 0, half of a random tensor) mispredicts every other element, which measured
// 2.4 ns per element, 1.9 ms for one 16 x 64 x 28 x 28 gradient; as a mask, the unit-stride rows
// below compile to vector blends (with a check for overlap, as an in-place where may write x).
template <class T>
T select(bool c, T x, T y) {
  const T mask = T(0) - static_cast<T>(c);
  return static_cast<T>((x & mask) | (y & static_cast<T>(~mask)));
}

// A row with a contiguous output and condition, and each value contiguous or one broadcast scalar.
template <bool kDenseX, bool kDenseY, class T>
void select_row(T* o, const bool* c, const T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = select(c[i], x[kDenseX ? i : 0], y[kDenseY ? i : 0]);
}

}  // namespace

void where(DType dtype, void* out, const bool* cond, const void* a, const void* b, const Loop& loop) {
  // Only the element size matters for a select: run it on same-sized unsigned integers.
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    char* base[4] = {static_cast<char*>(out), reinterpret_cast<char*>(const_cast<bool*>(cond)),
                     static_cast<char*>(const_cast<void*>(a)), static_cast<char*>(const_cast<void*>(b))};
    const int64_t sizes[4] = {sizeof(T), sizeof(bool), sizeof(T), sizeof(T)};
    const int64_t so = loop.inner_stride(0), sc = loop.inner_stride(1), sa = loop.inner_stride(2),
                  sb = loop.inner_stride(3);
    parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for_each_row<4>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
        T* o = reinterpret_cast<T*>(p[0]);
        const bool* c = reinterpret_cast<const bool*>(p[1]);
        const T* x = reinterpret_cast<const T*>(p[2]);
        const T* y = reinterpret_cast<const T*>(p[3]);
        if (so == 1 && sc == 1 && (sa | 1) == 1 && (sb | 1) == 1) {
          const int64_t i = simd::select_row(sizeof(T), o, c, x, sa == 0, y, sb == 0, n);
          o += i, c += i, n -= i;
          if (sa == 1) x += i;
          if (sb == 1) y += i;
          if (sa == 1 && sb == 1) return select_row<true, true>(o, c, x, y, n);
          if (sa == 1) return select_row<true, false>(o, c, x, y, n);
          if (sb == 1) return select_row<false, true>(o, c, x, y, n);
          return select_row<false, false>(o, c, x, y, n);
        }
        for (int64_t i = 0; i < n; ++i) o[i * so] = select(c[i * sc], x[i * sa], y[i * sb]);
      });
    });
  };
  switch (dtype_size(dtype)) {
    case 1:
      return run(TypeTag<uint8_t>{});
    case 2:
      return run(TypeTag<uint16_t>{});
    case 4:
      return run(TypeTag<uint32_t>{});
    default:
      return run(TypeTag<uint64_t>{});
  }
}

namespace {

// Note [transposed copy]
// A copy whose destination is contiguous along its inner dim while the source is contiguous along
// another dim (x.t().contiguous(), permutes) would read the source with a large stride: every
// element a new cache line. It runs instead over kTransposeBlock x kTransposeBlock blocks of that
// pair of dims, each block read and written in register tiles (transpose_block_32, for 4-byte
// elements) or a plain loop, so every cache line is used whole while it is in L1. Threads split the
// blocks.
//
// Note [streaming transpose]: a copy too large for the caches (kStreamBytes) is bound by memory
// traffic, and two things waste it. (1) Source rows a power of two apart (16 KiB for 4096 floats)
// all map to the same few L1 sets (4 KiB aliasing): a 64 x 64 block's 64 rows cannot stay in an
// 8-way L1 while its tiles are read, so each line comes from L2 again and again. The block is
// therefore copied row by row into a contiguous buffer first, each source line read once. (2) An
// ordinary store first reads the line it writes (read-for-ownership): a third of the traffic.
// Non-temporal stores of whole 64-byte lines skip that read and do not evict the source from the
// caches; the destination is not wanted in cache anyway, as it is too large to stay there.
constexpr int64_t kTransposeBlock = 64;
constexpr int64_t kStreamBytes = int64_t{16} << 20;
constexpr int64_t kStreamRows = 1024, kStreamCols = 16;

// The source's unit-stride dim when the copy is a transposed one (see above), else -1.
int transposed_dim(DType dst_dtype, DType src_dtype, const Loop& loop) {
  if (dst_dtype != src_dtype || loop.ndim < 2 || loop.inner_stride(0) != 1 || loop.inner_stride(1) == 1) return -1;
  for (int d = loop.ndim - 2; d >= 0; --d) {
    if (loop.strides[1][d] == 1 && loop.sizes[d] > 1) return d;
  }
  return -1;
}

template <class T>
void transpose_block(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t rows, int64_t cols,
                     bool stream) {
  if constexpr (sizeof(T) == 4) {
    if (simd::transpose_block_32(dst, dst_stride, src, src_stride, rows, cols, stream)) return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * dst_stride + c] = src[c * src_stride + r];
  }
}

// dst[..., r, ..., c] = src[..., r, ..., c] where r walks `dim` (unit stride in src) and c the inner
// dim (unit stride in dst); the other dims of the loop are batches.
template <class T>
void transposed_copy(T* dst, const T* src, const Loop& loop, int dim) {
  const int inner = loop.ndim - 1;
  const int64_t rows = loop.sizes[dim], cols = loop.sizes[inner];
  const int64_t dst_row_stride = loop.strides[0][dim], src_col_stride = loop.strides[1][inner];
  // The batch dims: every loop dim but `dim` and the inner one.
  int64_t batch_sizes[kMaxDims], batch_dst[kMaxDims], batch_src[kMaxDims];
  int batch_ndim = 0;
  int64_t batches = 1;
  for (int d = 0; d < inner; ++d) {
    if (d == dim) continue;
    batch_sizes[batch_ndim] = loop.sizes[d];
    batch_dst[batch_ndim] = loop.strides[0][d];
    batch_src[batch_ndim++] = loop.strides[1][d];
    batches *= loop.sizes[d];
  }
  const bool stream = batches * rows * cols * static_cast<int64_t>(sizeof(T)) >= kStreamBytes;
  const int64_t row_block = stream ? kStreamRows : kTransposeBlock, col_block = stream ? kStreamCols : kTransposeBlock;
  const int64_t row_blocks = (rows + row_block - 1) / row_block;
  const int64_t col_blocks = (cols + col_block - 1) / col_block;
  const int64_t blocks = batches * row_blocks * col_blocks;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (row_block * col_block));
  parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t cb = block % col_blocks, rb = (block / col_blocks) % row_blocks;
      int64_t batch = block / (col_blocks * row_blocks), dst_offset = 0, src_offset = 0;
      for (int d = batch_ndim - 1; d >= 0; --d) {
        const int64_t index = batch % batch_sizes[d];
        batch /= batch_sizes[d];
        dst_offset += index * batch_dst[d];
        src_offset += index * batch_src[d];
      }
      const int64_t r = rb * row_block, c = cb * col_block;
      transpose_block(dst + dst_offset + r * dst_row_stride + c, dst_row_stride,
                      src + src_offset + c * src_col_stride + r, src_col_stride, std::min(row_block, rows - r),
                      std::min(col_block, cols - c), stream);
    }
  });
}

}  // namespace

void copy(DType dst_dtype, DType src_dtype, void* dst, const void* src, const Loop& loop) {
  if (const int dim = transposed_dim(dst_dtype, src_dtype, loop); dim >= 0) {
    // Only the element size matters for a copy.
    switch (dtype_size(dst_dtype)) {
      case 1:
        return transposed_copy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), loop, dim);
      case 2:
        return transposed_copy(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), loop, dim);
      case 4:
        return transposed_copy(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), loop, dim);
      case 8:
        return transposed_copy(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), loop, dim);
      default:
        break;
    }
  }
  const int64_t dsize = dtype_size(dst_dtype), ssize = dtype_size(src_dtype);
  char* base[2] = {static_cast<char*>(dst), static_cast<char*>(const_cast<void*>(src))};
  const int64_t sizes[2] = {dsize, ssize};
  const int64_t sd = loop.inner_stride(0), ss = loop.inner_stride(1);
  if (dst_dtype == src_dtype && sd == 1 && ss == 1) {
    parallel_for(0, loop.numel, kElementwiseGrain * 4, [&](int64_t begin, int64_t end) {
      for_each_row<2>(loop, base, sizes, begin, end,
                      [&](char* const* p, int64_t n) { std::memcpy(p[0], p[1], static_cast<size_t>(n * dsize)); });
    });
    return;
  }
  const bool contiguous = sd == 1 && ss == 1;
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for_each_row<2>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
          To* o = reinterpret_cast<To*>(p[0]);
          const From* s = reinterpret_cast<const From*>(p[1]);
          int64_t i = contiguous ? simd::convert_row(dst_dtype, src_dtype, o, s, n) : 0;
          for (; i < n; ++i) o[i * sd] = convert<To>(s[i * ss]);
        });
      });
    });
  });
}

void fill(DType dtype, void* out, const Scalar& value, const Loop& loop) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.is_floating() ? convert<T>(value.to_double()) : convert<T>(value.to_int());
    char* base[1] = {static_cast<char*>(out)};
    const int64_t sizes[1] = {sizeof(T)};
    const int64_t so = loop.inner_stride(0);
    parallel_for(0, loop.numel, kElementwiseGrain * 4, [&](int64_t begin, int64_t end) {
      for_each_row<1>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i * so] = v;
      });
    });
  });
}

// --- registry entries ----------------------------------------------------------------------------
//
// Operands: outputs[0] is the result, inputs broadcast to its shape. Unary and binary ops compute in
// their inputs' dtype (the front-end has promoted them); the output is bool for kBoolResult ops.

namespace {

void unary_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &x = c.inputs[0];
  if (out.numel() == 0) return;
  unary(c.kind, x.dtype, out.data, x.data, make_loop({&out, &x}));
}

void binary_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &a = c.inputs[0], &b = c.inputs[1];
  if (out.numel() == 0) return;
  binary(c.kind, a.dtype, out.data, a.data, b.data, make_loop({&out, &a, &b}));
}

// inputs: condition (bool), a, b (the result's dtype).
void where_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &cond = c.inputs[0], &a = c.inputs[1], &b = c.inputs[2];
  if (out.numel() == 0) return;
  where(out.dtype, out.data, cond.ptr<const bool>(), a.data, b.data, make_loop({&out, &cond, &a, &b}));
}

// outputs[0] = inputs[0], converted to the output's dtype.
void copy_kernel(const KernelCall& c) {
  const Operand &dst = c.outputs[0], &src = c.inputs[0];
  if (dst.numel() == 0) return;
  copy(dst.dtype, src.dtype, dst.data, src.data, make_loop({&dst, &src}));
}

void fill_kernel(const KernelCall& c) {
  const Operand& out = c.outputs[0];
  if (out.numel() == 0) return;
  fill(out.dtype, out.data, c.get<FillAttrs>().value, make_loop({&out}));
}

}  // namespace

void register_elementwise_kernels(KernelTable& table) {
#define EMBER_REGISTER_UNARY(kind, ...) table.add(OpKind::k##kind, DeviceType::kCPU, unary_kernel, DTypeSet::all());
  EMBER_UNARY_PRIMITIVES(EMBER_REGISTER_UNARY)
#undef EMBER_REGISTER_UNARY
#define EMBER_REGISTER_BINARY(kind, ...) table.add(OpKind::k##kind, DeviceType::kCPU, binary_kernel, DTypeSet::all());
  EMBER_BINARY_PRIMITIVES(EMBER_REGISTER_BINARY)
#undef EMBER_REGISTER_BINARY
  table.add(OpKind::kWhere, DeviceType::kCPU, where_kernel, DTypeSet::all());
  table.add(OpKind::kCopy, DeviceType::kCPU, copy_kernel, DTypeSet::all());
  table.add(OpKind::kFill, DeviceType::kCPU, fill_kernel, DTypeSet::all());
}

}  // namespace ember::cpu

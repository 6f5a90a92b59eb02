// Contiguous float rows (float16 and bfloat16 computed in float32) of the elementwise ops, for every Highway target
// (see elementwise_simd.h). Only the vector forms live here, so this file stays small to compile. foreach_target.h must
// come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/elementwise_simd.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/scalar_math.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/float_vector-inl.h"  // load_vector, store_vector
#include "kernels/cpu/functors-inl.h"
#include "kernels/cpu/transpose-inl.h"

// T is the element type; vectors hold compute_t<T> (float for the 16-bit floats, loaded and
// stored through float_vector-inl.h: computed in float32 and rounded once, as the scalar path).
template <class F, class T>
int64_t unary_vectors(void* out_ptr, const void* in_ptr, int64_t n) {
  using C = compute_t<T>;
  if constexpr (!F::template kVector<C>) {
    return 0;
  } else {
    T* out = static_cast<T*>(out_ptr);
    const T* in = static_cast<const T*>(in_ptr);
    const hn::ScalableTag<C> d;
    const F f;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) store_vector(d, f(d, load_vector(d, in + i)), out + i);
    if (i < n) {
      // The tail takes the same vector path through a padded copy, so an element's result does
      // not depend on where it falls in the row (scalar and vector math differ in the last ulp).
      alignas(HWY_MAX_BYTES) C buf[HWY_MAX_BYTES / sizeof(C)] = {};
      std::copy(in + i, in + n, buf);
      hn::Store(f(d, hn::Load(d, buf)), d, buf);
      std::copy(buf, buf + (n - i), out + i);
    }
    return n;
  }
}

template <class F, class T>
int64_t binary_vectors(void* out_ptr, const void* a_ptr, bool a_scalar, const void* b_ptr, bool b_scalar, int64_t n) {
  using C = compute_t<T>;
  if constexpr (!F::template kVector<C>) {
    return 0;
  } else {
    T* out = static_cast<T*>(out_ptr);
    const T* a = static_cast<const T*>(a_ptr);
    const T* b = static_cast<const T*>(b_ptr);
    const hn::ScalableTag<C> d;
    const F f;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    if (!a_scalar && !b_scalar) {
      for (; i + lanes <= n; i += lanes) store_vector(d, f(d, load_vector(d, a + i), load_vector(d, b + i)), out + i);
    } else if (!a_scalar) {
      const auto vb = hn::Set(d, static_cast<C>(*b));
      for (; i + lanes <= n; i += lanes) store_vector(d, f(d, load_vector(d, a + i), vb), out + i);
    } else if (!b_scalar) {
      const auto va = hn::Set(d, static_cast<C>(*a));
      for (; i + lanes <= n; i += lanes) store_vector(d, f(d, va, load_vector(d, b + i)), out + i);
    } else {
      return 0;
    }
    if (i < n) {  // the tail through padded copies, as in unary_vectors
      alignas(HWY_MAX_BYTES) C buf_a[HWY_MAX_BYTES / sizeof(C)] = {};
      alignas(HWY_MAX_BYTES) C buf_b[HWY_MAX_BYTES / sizeof(C)] = {};
      if (a_scalar)
        std::fill(buf_a, buf_a + lanes, static_cast<C>(*a));
      else
        std::copy(a + i, a + n, buf_a);
      if (b_scalar)
        std::fill(buf_b, buf_b + lanes, static_cast<C>(*b));
      else
        std::copy(b + i, b + n, buf_b);
      hn::Store(f(d, hn::Load(d, buf_a), hn::Load(d, buf_b)), d, buf_a);
      std::copy(buf_a, buf_a + (n - i), out + i);
    }
    return n;
  }
}

template <class F, class T>
constexpr simd::UnaryRowFn unary_fn() {
  if constexpr (F::template kVector<compute_t<T>>) {
    return &unary_vectors<F, T>;
  } else {
    return nullptr;
  }
}
template <class F, class T>
constexpr simd::BinaryRowFn binary_fn() {
  if constexpr (F::template kVector<compute_t<T>>) {
    return &binary_vectors<F, T>;
  } else {
    return nullptr;
  }
}

simd::UnaryRowFn UnaryRowFnFor(OpKind op, DType dtype) {
  switch (op) {
#define EMBER_UNARY_CASE(kind, ...)                                 \
  case OpKind::k##kind:                                             \
    if (dtype == kFloat32) return unary_fn<vec::kind, float>();     \
    if (dtype == kFloat64) return unary_fn<vec::kind, double>();    \
    if (dtype == kBFloat16) return unary_fn<vec::kind, BFloat16>(); \
    if (dtype == kFloat16) return unary_fn<vec::kind, Half>();      \
    return nullptr;
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    default:
      return nullptr;
  }
}

simd::BinaryRowFn BinaryRowFnFor(OpKind op, DType dtype) {
  switch (op) {
#define EMBER_BINARY_CASE(kind, ...)                                 \
  case OpKind::k##kind:                                              \
    if (dtype == kFloat32) return binary_fn<vec::kind, float>();     \
    if (dtype == kFloat64) return binary_fn<vec::kind, double>();    \
    if (dtype == kBFloat16) return binary_fn<vec::kind, BFloat16>(); \
    if (dtype == kFloat16) return binary_fn<vec::kind, Half>();      \
    return nullptr;
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      return nullptr;
  }
}

int64_t UnaryRow(OpKind op, DType dtype, void* out, const void* in, int64_t n) {
  const simd::UnaryRowFn f = UnaryRowFnFor(op, dtype);
  return f != nullptr ? f(out, in, n) : 0;
}

int64_t BinaryRow(OpKind op, DType dtype, void* out, const void* a, bool a_scalar, const void* b, bool b_scalar,
                  int64_t n) {
  const simd::BinaryRowFn f = BinaryRowFnFor(op, dtype);
  return f != nullptr ? f(out, a, a_scalar, b, b_scalar, n) : 0;
}

// --- conversions ---------------------------------------------------------------------------------

// Whole vectors of a contiguous row from From to To through float (store_vector rounds to the
// 16-bit floats bit for bit as BFloat16 and Half do), or between float and double (Highway's
// conversions round to nearest even and quiet a NaN, as static_cast does).
template <class To, class From>
int64_t convert_vectors(To* out, const From* in, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<To, double> || std::is_same_v<From, double>) {
#if HWY_HAVE_FLOAT64 && HWY_TARGET != HWY_SCALAR  // the scalar target's DemoteTo clamps to +-FLT_MAX
    const hn::ScalableTag<double> d64;
    const hn::Rebind<float, decltype(d64)> d32;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d64));
    for (; i + lanes <= n; i += lanes) {
      if constexpr (std::is_same_v<To, double>) {
        hn::StoreU(hn::PromoteTo(d64, hn::LoadU(d32, in + i)), d64, out + i);
      } else {
        hn::StoreU(hn::DemoteTo(d32, hn::LoadU(d64, in + i)), d32, out + i);
      }
    }
#else
    (void)out, (void)in, (void)n;
#endif
  } else {
    const hn::ScalableTag<float> d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    for (; i + lanes <= n; i += lanes) store_vector(d, load_vector(d, in + i), out + i);
  }
  return i;
}

int64_t ConvertRow(DType to, DType from, void* out, const void* in, int64_t n) {
  if (to == kBFloat16 && from == kFloat32) {
    return convert_vectors(static_cast<BFloat16*>(out), static_cast<const float*>(in), n);
  }
  if (to == kFloat32 && from == kBFloat16) {
    return convert_vectors(static_cast<float*>(out), static_cast<const BFloat16*>(in), n);
  }
  if (to == kFloat16 && from == kFloat32) {
    return convert_vectors(static_cast<Half*>(out), static_cast<const float*>(in), n);
  }
  if (to == kFloat32 && from == kFloat16) {
    return convert_vectors(static_cast<float*>(out), static_cast<const Half*>(in), n);
  }
  if (to == kFloat64 && from == kFloat32) {
    return convert_vectors(static_cast<double*>(out), static_cast<const float*>(in), n);
  }
  if (to == kFloat32 && from == kFloat64) {
    return convert_vectors(static_cast<float*>(out), static_cast<const double*>(in), n);
  }
  return 0;
}

// --- transposed copy of 4-byte elements ---------------------------------------------------------------

// Transposes the k x k tile of 32-bit lanes held in v[0..k) (v[c] = row c) in registers, k = Lanes(d)
// of 4 (one 128-bit vector: two rounds of interleaves) or 8 (transpose_8x8, transpose-inl.h).
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
template <class D, class V>
HWY_INLINE void transpose_registers(D d, V* v) {
  const hn::Repartition<uint64_t, D> d64;
  const size_t k = hn::Lanes(d);
  if (k == 4) {
    const V t0 = hn::InterleaveLower(d, v[0], v[1]), t1 = hn::InterleaveLower(d, v[2], v[3]);
    const V t2 = hn::InterleaveUpper(d, v[0], v[1]), t3 = hn::InterleaveUpper(d, v[2], v[3]);
    v[0] = hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, t0), hn::BitCast(d64, t1)));
    v[1] = hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, t0), hn::BitCast(d64, t1)));
    v[2] = hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, t2), hn::BitCast(d64, t3)));
    v[3] = hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, t2), hn::BitCast(d64, t3)));
    return;
  }
  transpose_8x8(d, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}
#endif

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// The streaming form (Note [streaming transpose]): each 8 x 16 piece of dst (two 8 x 8 tiles) is
// written with non-temporal stores, a row's two halves one after the other so that they fill one
// 64-byte line. Needs 8 lanes, 64-byte aligned dst rows, rows a multiple of 8 and cols of 16.
template <class D>
bool stream_block(D d, uint32_t* dst, int64_t dst_stride, const uint32_t* src, int64_t src_stride, int64_t rows,
                  int64_t cols) {
  using V = hn::Vec<D>;
  if (hn::Lanes(d) != 8 || rows % 8 != 0 || cols % 16 != 0 || dst_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(dst) % 64 != 0) {
    return false;
  }
  for (int64_t c = 0; c < cols; c += 16) {
    for (int64_t r = 0; r < rows; r += 8) {
      V lo[8], hi[8];
      for (int64_t j = 0; j < 8; ++j) {
        lo[j] = hn::LoadU(d, src + (c + j) * src_stride + r);
        hi[j] = hn::LoadU(d, src + (c + 8 + j) * src_stride + r);
      }
      transpose_8x8(d, lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7]);
      transpose_8x8(d, hi[0], hi[1], hi[2], hi[3], hi[4], hi[5], hi[6], hi[7]);
      for (int64_t j = 0; j < 8; ++j) {
        uint32_t* line = dst + (r + j) * dst_stride + c;
        hn::Stream(lo[j], d, line);
        hn::Stream(hi[j], d, line + 8);
      }
    }
  }
  hwy::FlushStream();
  return true;
}
#endif

// dst[r * dst_stride + c] = src[c * src_stride + r] for r < rows, c < cols (4-byte elements), in
// k x k register tiles; returns false when this target has no tile (k not 4 or 8).
bool TransposeBlock32(void* dst_ptr, int64_t dst_stride, const void* src_ptr, int64_t src_stride, int64_t rows,
                      int64_t cols, bool stream) {
#if HWY_TARGET == HWY_SCALAR || HWY_HAVE_SCALABLE
  (void)dst_ptr, (void)dst_stride, (void)src_ptr, (void)src_stride, (void)rows, (void)cols, (void)stream;
  return false;
#else
  const hn::CappedTag<uint32_t, 8> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t k = static_cast<int64_t>(hn::Lanes(d));
  if (k != 4 && k != 8) return false;
  uint32_t* dst = static_cast<uint32_t*>(dst_ptr);
  const uint32_t* src = static_cast<const uint32_t*>(src_ptr);
  if (stream && stream_block(d, dst, dst_stride, src, src_stride, rows, cols)) return true;
  const int64_t full_rows = rows / k * k, full_cols = cols / k * k;
  for (int64_t r = 0; r < full_rows; r += k) {
    for (int64_t c = 0; c < full_cols; c += k) {
      V v[8];
      for (int64_t j = 0; j < k; ++j) v[j] = hn::LoadU(d, src + (c + j) * src_stride + r);
      transpose_registers(d, v);
      for (int64_t j = 0; j < k; ++j) hn::StoreU(v[j], d, dst + (r + j) * dst_stride + c);
    }
    for (int64_t j = r; j < r + k; ++j) {
      for (int64_t c = full_cols; c < cols; ++c) dst[j * dst_stride + c] = src[c * src_stride + j];
    }
  }
  for (int64_t r = full_rows; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * dst_stride + c] = src[c * src_stride + r];
  }
  return true;
#endif
}

// Whole vectors of a select (elementwise_simd.h): each condition byte widened to a lane mask.
template <class T>
int64_t select_vectors(T* out, const bool* cond, const T* a, bool a_scalar, const T* b, bool b_scalar, int64_t n) {
  const hn::ScalableTag<T> d;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto broadcast_a = hn::Set(d, *a), broadcast_b = hn::Set(d, *b);
  const uint8_t* c = reinterpret_cast<const uint8_t*>(cond);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto mask = hn::Ne(hn::PromoteTo(d, hn::LoadU(d8, c + i)), hn::Zero(d));
    const auto x = a_scalar ? broadcast_a : hn::LoadU(d, a + i);
    const auto y = b_scalar ? broadcast_b : hn::LoadU(d, b + i);
    hn::StoreU(hn::IfThenElse(mask, x, y), d, out + i);
  }
  return i;
}

int64_t SelectRow(int element_bytes, void* out, const bool* cond, const void* a, bool a_scalar, const void* b,
                  bool b_scalar, int64_t n) {
#if HWY_TARGET == HWY_SCALAR
  (void)element_bytes, (void)out, (void)cond, (void)a, (void)a_scalar, (void)b, (void)b_scalar, (void)n;
  return 0;
#else
  if (element_bytes == 4) {
    return select_vectors(static_cast<uint32_t*>(out), cond, static_cast<const uint32_t*>(a), a_scalar,
                          static_cast<const uint32_t*>(b), b_scalar, n);
  }
  if (element_bytes == 2) {
    return select_vectors(static_cast<uint16_t*>(out), cond, static_cast<const uint16_t*>(a), a_scalar,
                          static_cast<const uint16_t*>(b), b_scalar, n);
  }
  return 0;
#endif
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>

#include "kernels/cpu/kernels.h"

namespace ember::cpu {

HWY_EXPORT(UnaryRow);
HWY_EXPORT(BinaryRow);
HWY_EXPORT(ConvertRow);
HWY_EXPORT(TargetName);
HWY_EXPORT(TransposeBlock32);
HWY_EXPORT(SelectRow);
HWY_EXPORT(UnaryRowFnFor);
HWY_EXPORT(BinaryRowFnFor);

namespace simd {
int64_t unary_row(OpKind op, DType dtype, void* out, const void* in, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(UnaryRow)(op, dtype, out, in, n);
}
int64_t binary_row(OpKind op, DType dtype, void* out, const void* a, bool a_scalar, const void* b, bool b_scalar,
                   int64_t n) {
  return HWY_DYNAMIC_DISPATCH(BinaryRow)(op, dtype, out, a, a_scalar, b, b_scalar, n);
}
int64_t convert_row(DType to, DType from, void* out, const void* in, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ConvertRow)(to, from, out, in, n);
}
UnaryRowFn unary_row_fn(OpKind op, DType dtype) { return HWY_DYNAMIC_DISPATCH(UnaryRowFnFor)(op, dtype); }
BinaryRowFn binary_row_fn(OpKind op, DType dtype) { return HWY_DYNAMIC_DISPATCH(BinaryRowFnFor)(op, dtype); }
int64_t select_row(int element_bytes, void* out, const bool* cond, const void* a, bool a_scalar, const void* b,
                   bool b_scalar, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SelectRow)(element_bytes, out, cond, a, a_scalar, b, b_scalar, n);
}
bool transpose_block_32(void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows, int64_t cols,
                        bool stream) {
  return HWY_DYNAMIC_DISPATCH(TransposeBlock32)(dst, dst_stride, src, src_stride, rows, cols, stream);
}
}  // namespace simd

namespace {

// EMBER_MAX_CPU_ISA (cpu_isa.h) caps the SIMD target every kernel dispatches to (as oneDNN's
// ONEDNN_MAX_CPU_ISA): to compare code paths on one machine, or to test the AVX2 kernels on an
// AVX-512 one. Applied once when the library loads; Highway orders targets so that every better
// target has a lower bit, so the cap disables all bits below the named one. The levels above
// AVX512 (VNNI, BF16, AMX) concern the hand-written kernels only: Highway's AVX3 is their base.
const bool kIsaCapApplied = [] {
  int64_t cap = 0;
  switch (max_isa()) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
      return false;
    case Isa::kAvx512Vnni:
    case Isa::kAvx512:
      cap = HWY_AVX3;
      break;
    case Isa::kAvx2:
      cap = HWY_AVX2;
      break;
    case Isa::kSse4:
      cap = HWY_SSE4;
      break;
    case Isa::kScalar:
      cap = HWY_SCALAR;
      break;
  }
  hwy::DisableTargets(cap - 1);
  return true;
}();

}  // namespace

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
const char* simd_compiled_targets() {
  static const std::string names = [] {
    std::string s;
    for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
      if (!s.empty()) s += ",";
      s += hwy::TargetName(targets & -targets);
    }
    return s;
  }();
  return names.c_str();
}

}  // namespace ember::cpu
#endif

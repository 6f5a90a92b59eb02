// Contiguous float/double rows of the elementwise ops, for every Highway target (see
// elementwise_simd.h). Only the vector forms live here, so this file stays small to compile.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <limits>
#include <type_traits>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/scalar_math.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/functors-inl.h"

template <class F, class T>
int64_t unary_vectors(void* out_ptr, const void* in_ptr, int64_t n) {
  if constexpr (!F::template kVector<T>) {
    return 0;
  } else {
    T* out = static_cast<T*>(out_ptr);
    const T* in = static_cast<const T*>(in_ptr);
    const hn::ScalableTag<T> d;
    const F f;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, in + i)), d, out + i);
    return i;
  }
}

template <class F, class T>
int64_t binary_vectors(void* out_ptr, const void* a_ptr, bool a_scalar, const void* b_ptr, bool b_scalar, int64_t n) {
  if constexpr (!F::template kVector<T>) {
    return 0;
  } else {
    T* out = static_cast<T*>(out_ptr);
    const T* a = static_cast<const T*>(a_ptr);
    const T* b = static_cast<const T*>(b_ptr);
    const hn::ScalableTag<T> d;
    const F f;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    if (!a_scalar && !b_scalar) {
      for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
    } else if (!a_scalar) {
      const auto vb = hn::Set(d, *b);
      for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, a + i), vb), d, out + i);
    } else if (!b_scalar) {
      const auto va = hn::Set(d, *a);
      for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, va, hn::LoadU(d, b + i)), d, out + i);
    }
    return i;
  }
}

int64_t UnaryRow(OpKind op, DType dtype, void* out, const void* in, int64_t n) {
  switch (op) {
#define EMBER_UNARY_CASE(kind, name, traits, flops, functor)                 \
  case OpKind::kind:                                                         \
    if (dtype == kFloat32) return unary_vectors<vec::functor, float>(out, in, n); \
    if (dtype == kFloat64) return unary_vectors<vec::functor, double>(out, in, n); \
    return 0;
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    default:
      return 0;
  }
}

int64_t BinaryRow(OpKind op, DType dtype, void* out, const void* a, bool a_scalar, const void* b, bool b_scalar,
                  int64_t n) {
  switch (op) {
#define EMBER_BINARY_CASE(kind, name, traits, flops, functor)                                       \
  case OpKind::kind:                                                                                \
    if (dtype == kFloat32) return binary_vectors<vec::functor, float>(out, a, a_scalar, b, b_scalar, n);  \
    if (dtype == kFloat64) return binary_vectors<vec::functor, double>(out, a, a_scalar, b, b_scalar, n); \
    return 0;
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      return 0;
  }
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
HWY_EXPORT(TargetName);

namespace simd {
int64_t unary_row(OpKind op, DType dtype, void* out, const void* in, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(UnaryRow)(op, dtype, out, in, n);
}
int64_t binary_row(OpKind op, DType dtype, void* out, const void* a, bool a_scalar, const void* b, bool b_scalar,
                   int64_t n) {
  return HWY_DYNAMIC_DISPATCH(BinaryRow)(op, dtype, out, a, a_scalar, b, b_scalar, n);
}
}  // namespace simd

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

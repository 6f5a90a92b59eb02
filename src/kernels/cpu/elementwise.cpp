// Elementwise kernels (unary, binary, where, copy/convert, fill) for every Highway target.
// The math lives in functors-inl.h; this file only walks memory: a contiguous (or broadcast
// scalar) inner row runs the vector form, anything else the scalar form, rows from Loop.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <type_traits>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/functors-inl.h"

template <class F, class T>
using unary_result_t = decltype(std::declval<F>()(std::declval<compute_t<T>>()));

// out[i] = f(in[i]) over one row.
template <class F, class T, class Out>
void unary_row(const F& f, Out* out, int64_t out_stride, const T* in, int64_t in_stride, int64_t n) {
  using C = compute_t<T>;
  int64_t i = 0;
  if constexpr (F::template kVector<T> && std::is_same_v<Out, T>) {
    if (out_stride == 1 && in_stride == 1) {
      const hn::ScalableTag<T> d;
      const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
      for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, in + i)), d, out + i);
    }
  }
  for (; i < n; ++i) out[i * out_stride] = static_cast<Out>(f(static_cast<C>(in[i * in_stride])));
}

// out[i] = f(a[i], b[i]) over one row; a or b may be a broadcast scalar (stride 0).
template <class F, class T, class Out>
void binary_row(const F& f, Out* out, int64_t so, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  using C = compute_t<T>;
  int64_t i = 0;
  if constexpr (F::template kVector<T> && std::is_same_v<Out, T>) {
    if (so == 1 && (sa == 1 || sa == 0) && (sb == 1 || sb == 0)) {
      const hn::ScalableTag<T> d;
      const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
      if (sa == 1 && sb == 1) {
        for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
      } else if (sa == 1) {
        const auto vb = hn::Set(d, *b);
        for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, a + i), vb), d, out + i);
      } else if (sb == 1) {
        const auto va = hn::Set(d, *a);
        for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, va, hn::LoadU(d, b + i)), d, out + i);
      }
    }
  }
  for (; i < n; ++i) {
    out[i * so] = static_cast<Out>(f(static_cast<C>(a[i * sa]), static_cast<C>(b[i * sb])));
  }
}

// Whether the front-end can ever send T to op: float-only ops get floats, kNoBool ops no bools.
template <OpKind op, class T>
constexpr bool kAccepts = !(has_trait(op, kFloatResult) && !is_floating(dtype_of<T>())) &&
                          !(has_trait(op, kNoBool) && std::is_same_v<T, bool>);

template <OpKind op, class F>
void run_unary(DType dtype, void* out, const void* in, const Loop& loop) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kAccepts<op, T>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", dtype);
    } else {
    using R = unary_result_t<F, T>;
    using Out = std::conditional_t<std::is_same_v<R, bool>, bool, T>;
    const F f;
    char* base[2] = {static_cast<char*>(out), static_cast<char*>(const_cast<void*>(in))};
    const int64_t sizes[2] = {sizeof(Out), sizeof(T)};
    const int64_t so = loop.inner_stride(0), si = loop.inner_stride(1);
    parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for_each_row<2>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
        unary_row(f, reinterpret_cast<Out*>(p[0]), so, reinterpret_cast<const T*>(p[1]), si, n);
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
    using R = decltype(std::declval<F>()(std::declval<C>(), std::declval<C>()));
    using Out = std::conditional_t<std::is_same_v<R, bool>, bool, T>;
    const F f;
    char* base[3] = {static_cast<char*>(out), static_cast<char*>(const_cast<void*>(a)),
                     static_cast<char*>(const_cast<void*>(b))};
    const int64_t sizes[3] = {sizeof(Out), sizeof(T), sizeof(T)};
    const int64_t so = loop.inner_stride(0), sa = loop.inner_stride(1), sb = loop.inner_stride(2);
    parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for_each_row<3>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
        binary_row(f, reinterpret_cast<Out*>(p[0]), so, reinterpret_cast<const T*>(p[1]), sa,
                   reinterpret_cast<const T*>(p[2]), sb, n);
      });
    });
    }
  });
}

void UnaryKernel(OpKind op, DType dtype, void* out, const void* in, const Loop& loop) {
  switch (op) {
#define EMBER_UNARY_CASE(kind, name, traits, flops, functor) \
  case OpKind::kind:                                         \
    return run_unary<OpKind::kind, fn::functor>(dtype, out, in, loop);
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a unary elementwise primitive");
}

void BinaryKernel(OpKind op, DType dtype, void* out, const void* a, const void* b, const Loop& loop) {
  switch (op) {
#define EMBER_BINARY_CASE(kind, name, traits, flops, functor) \
  case OpKind::kind:                                          \
    return run_binary<OpKind::kind, fn::functor>(dtype, out, a, b, loop);
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a binary elementwise primitive");
}

void WhereKernel(DType dtype, void* out, const bool* cond, const void* a, const void* b, const Loop& loop) {
  dispatch_dtype(dtype, [&](auto tag) {
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
        for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? x[i * sa] : y[i * sb];
      });
    });
  });
}

// Float to integer conversion without undefined behaviour: NaN gives 0, values wrap through
// int64 as on x86 hardware, and out-of-range values saturate at the int64 limits first.
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

void CopyKernel(DType dst_dtype, DType src_dtype, void* dst, const void* src, const Loop& loop) {
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
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      parallel_for(0, loop.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        for_each_row<2>(loop, base, sizes, begin, end, [&](char* const* p, int64_t n) {
          To* o = reinterpret_cast<To*>(p[0]);
          const From* s = reinterpret_cast<const From*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i * sd] = convert<To>(s[i * ss]);
        });
      });
    });
  });
}

void FillKernel(DType dtype, void* out, const Scalar& value, const Loop& loop) {
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

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(UnaryKernel);
HWY_EXPORT(BinaryKernel);
HWY_EXPORT(WhereKernel);
HWY_EXPORT(CopyKernel);
HWY_EXPORT(FillKernel);
HWY_EXPORT(TargetName);

void unary(OpKind op, DType dtype, void* out, const void* in, const Loop& loop) {
  HWY_DYNAMIC_DISPATCH(UnaryKernel)(op, dtype, out, in, loop);
}
void binary(OpKind op, DType dtype, void* out, const void* a, const void* b, const Loop& loop) {
  HWY_DYNAMIC_DISPATCH(BinaryKernel)(op, dtype, out, a, b, loop);
}
void where(DType dtype, void* out, const bool* cond, const void* a, const void* b, const Loop& loop) {
  HWY_DYNAMIC_DISPATCH(WhereKernel)(dtype, out, cond, a, b, loop);
}
void copy(DType dst_dtype, DType src_dtype, void* dst, const void* src, const Loop& loop) {
  HWY_DYNAMIC_DISPATCH(CopyKernel)(dst_dtype, src_dtype, dst, src, loop);
}
void fill(DType dtype, void* out, const Scalar& value, const Loop& loop) {
  HWY_DYNAMIC_DISPATCH(FillKernel)(dtype, out, value, loop);
}
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

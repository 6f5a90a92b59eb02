// Elementwise kernels (unary, binary, where, copy/convert, fill): the layout engine walks rows
// (Loop) across threads; a contiguous float/double row goes to the SIMD row kernels
// (elementwise_simd.cpp), everything else runs the scalar functors of scalar_math.h. Compiled once:
// only the SIMD rows are compiled per target.
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scalar_math.h"

namespace ember::cpu {
namespace {

// Whether the front-end can ever send T to op: float-only ops get floats, kNoBool ops no bools.
template <OpKind op, class T>
constexpr bool kAccepts = !(has_trait(op, kFloatResult) && !is_floating(dtype_of<T>())) &&
                          !(has_trait(op, kNoBool) && std::is_same_v<T, bool>);

template <class T>
constexpr bool kSimdType = std::is_same_v<T, float> || std::is_same_v<T, double>;

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
#define EMBER_UNARY_CASE(kind, name, traits, flops, functor) \
  case OpKind::kind:                                         \
    return run_unary<OpKind::kind, scalar::functor>(dtype, out, in, loop);
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a unary elementwise primitive");
}

void binary(OpKind op, DType dtype, void* out, const void* a, const void* b, const Loop& loop) {
  switch (op) {
#define EMBER_BINARY_CASE(kind, name, traits, flops, functor) \
  case OpKind::kind:                                          \
    return run_binary<OpKind::kind, scalar::functor>(dtype, out, a, b, loop);
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a binary elementwise primitive");
}

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
        for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? x[i * sa] : y[i * sb];
      });
    });
  };
  switch (dtype_size(dtype)) {
    case 1: return run(TypeTag<uint8_t>{});
    case 2: return run(TypeTag<uint16_t>{});
    case 4: return run(TypeTag<uint32_t>{});
    default: return run(TypeTag<uint64_t>{});
  }
}

void copy(DType dst_dtype, DType src_dtype, void* dst, const void* src, const Loop& loop) {
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

}  // namespace ember::cpu

// Elementwise math, one functor per primitive, in scalar form: every dtype, computed in
// compute_t<T> (float for float16/bfloat16). The Highway vector forms of the same functors live in
// functors-inl.h and derive from these, so the scalar form is the reference for the vector one.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/attrs.h"

namespace ember::cpu::scalar {

template <class C>
C erf_gelu(C x) {
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + std::erf(x * static_cast<C>(0.70710678118654752440)));
}
template <class C>
C tanh_gelu(C x) {
  const C inner = static_cast<C>(0.79788456080286535588) * (x + static_cast<C>(0.044715) * x * x * x);
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + std::tanh(inner));
}
// exp(-|x|) never overflows; NaN stays NaN.
template <class C>
C sigmoid(C x) {
  const C e = std::exp(-std::abs(x));
  return x >= 0 ? static_cast<C>(1) / (static_cast<C>(1) + e) : x < 0 ? e / (static_cast<C>(1) + e) : x;
}

#define EMBER_UNARY(Name, expr)    \
  struct Name {                    \
    template <class C>             \
    C operator()(C x) const {      \
      return static_cast<C>(expr); \
    }                              \
  };
EMBER_UNARY(Neg, -x)
EMBER_UNARY(Exp, std::exp(x))
EMBER_UNARY(Expm1, std::expm1(x))
EMBER_UNARY(Erf, std::erf(x))
EMBER_UNARY(Log, std::log(x))
EMBER_UNARY(Log1p, std::log1p(x))
EMBER_UNARY(Sqrt, std::sqrt(x))
EMBER_UNARY(Rsqrt, C(1) / std::sqrt(x))
EMBER_UNARY(Sin, std::sin(x))
EMBER_UNARY(Cos, std::cos(x))
EMBER_UNARY(Tanh, std::tanh(x))
EMBER_UNARY(Sigmoid, sigmoid(x))
EMBER_UNARY(Relu, x < C(0) ? C(0) : x)  // keeps NaN, unlike max(x, 0)
EMBER_UNARY(GeluErf, erf_gelu(x))
EMBER_UNARY(GeluTanh, tanh_gelu(x))
EMBER_UNARY(Silu, x* sigmoid(x))
#undef EMBER_UNARY

// An epilogue's activation (ember::Activation) on one value, computed in C.
template <class C>
C activate(Activation activation, C v) {
  switch (activation) {
    case Activation::kNone:
      return v;
    case Activation::kRelu:
      return Relu()(v);
    case Activation::kGeluErf:
      return GeluErf()(v);
    case Activation::kGeluTanh:
      return GeluTanh()(v);
    case Activation::kSilu:
      return Silu()(v);
  }
  return v;
}

struct Abs {
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else if constexpr (std::is_floating_point_v<C>) {
      return std::abs(x);  // clears the sign of -0 too
    } else {
      return static_cast<C>(x < 0 ? -x : x);
    }
  }
};
struct Sign {  // NaN gives 0, as PyTorch
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) {
      return x;
    } else {
      return static_cast<C>((C(0) < x) - (x < C(0)));
    }
  }
};
struct Square {
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(x * x);
  }
};
struct LogicalNot {
  template <class C>
  bool operator()(C x) const {
    return !(x != C(0));
  }
};
struct IsNan {
  template <class C>
  bool operator()(C x) const {
    return x != x;
  }
};
struct IsInf {
  template <class C>
  bool operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::isinf(x);
    } else {
      return false;
    }
  }
};

struct Add {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else {
      return static_cast<C>(a + b);
    }
  }
};
struct Sub {
  template <class C>
  C operator()(C a, C b) const {
    return static_cast<C>(a - b);
  }
};
struct Mul {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else {
      return static_cast<C>(a * b);
    }
  }
};
struct Div {
  template <class C>
  C operator()(C a, C b) const {
    return static_cast<C>(a / b);
  }
};
struct Pow {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::pow(a, b);
    } else if constexpr (std::is_same_v<C, bool>) {
      return a || !b;
    } else {
      // Integer power by squaring; negative exponents follow integer division semantics.
      if (b < 0) {
        if (a == 1) return 1;
        if (a == -1) return static_cast<C>((b % 2 == 0) ? 1 : -1);
        return 0;
      }
      using Wide = std::conditional_t<std::is_signed_v<C>, int64_t, uint64_t>;
      Wide result = 1, base = a;
      uint64_t e = static_cast<uint64_t>(b);
      while (e) {
        if (e & 1u) result = static_cast<Wide>(static_cast<uint64_t>(result) * static_cast<uint64_t>(base));
        base = static_cast<Wide>(static_cast<uint64_t>(base) * static_cast<uint64_t>(base));
        e >>= 1u;
      }
      return static_cast<C>(result);
    }
  }
};
struct Minimum {  // propagates NaN
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
struct Maximum {  // propagates NaN
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
};
#define EMBER_PREDICATE(Name, expr)   \
  struct Name {                       \
    template <class C>                \
    bool operator()(C a, C b) const { \
      return expr;                    \
    }                                 \
  };
EMBER_PREDICATE(Eq, a == b)
EMBER_PREDICATE(Ne, a != b)
EMBER_PREDICATE(Lt, a < b)
EMBER_PREDICATE(Le, a <= b)
EMBER_PREDICATE(Gt, a > b)
EMBER_PREDICATE(Ge, a >= b)
EMBER_PREDICATE(LogicalAnd, (a != C(0)) && (b != C(0)))
EMBER_PREDICATE(LogicalOr, (a != C(0)) || (b != C(0)))
#undef EMBER_PREDICATE

}  // namespace ember::cpu::scalar

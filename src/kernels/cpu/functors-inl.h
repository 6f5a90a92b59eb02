// Elementwise math, written once per op as a functor with a scalar form (every dtype, computed in
// compute_t<T>) and, where it pays, a Highway vector form for float and double.
// Included inside each Highway target's namespace by elementwise.cpp; no include guard on purpose.

namespace fn {

template <class T>
inline constexpr bool kIsFloat = std::is_same_v<T, float> || std::is_same_v<T, double>;

// Scalar helpers shared by the functors.
template <class C>
C scalar_erf_gelu(C x) {
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + std::erf(x * static_cast<C>(0.70710678118654752440)));
}
template <class C>
C scalar_tanh_gelu(C x) {
  const C inner = static_cast<C>(0.79788456080286535588) * (x + static_cast<C>(0.044715) * x * x * x);
  return static_cast<C>(0.5) * x * (static_cast<C>(1) + std::tanh(inner));
}
template <class C>
C scalar_sigmoid(C x) {
  const C e = std::exp(-std::abs(x));
  return x >= 0 ? static_cast<C>(1) / (static_cast<C>(1) + e) : e / (static_cast<C>(1) + e);
}

// exp(-|x|) based sigmoid: the argument of Exp is never positive, so it cannot overflow.
template <class D, class V>
V vec_sigmoid(D d, V x) {
  const V one = hn::Set(d, 1);
  const V e = hn::Exp(d, hn::Neg(hn::Abs(x)));
  const V r = hn::Div(one, hn::Add(one, e));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, r), r));
}

// Highway's Exp/Expm1 are valid up to ~104 (f32) / ~706 (f64); beyond the overflow point the answer is +inf.
template <class D, class V>
V overflow_point(D d) {
  using T = hn::TFromD<D>;
  return hn::Set(d, std::is_same_v<T, float> ? static_cast<T>(88.72283935546875) : static_cast<T>(709.782712893384));
}
template <class D, class V>
V vec_exp(D d, V x) {
  const V limit = overflow_point<D, V>(d);
  const V r = hn::Exp(d, hn::Min(x, limit));
  const V inf = hn::Set(d, std::numeric_limits<hn::TFromD<D>>::infinity());
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Gt(x, limit), inf, r));
}

// Sin and Cos are accurate for |x| < 39000; lanes outside (or non-finite) are redone in scalar.
template <class D, class V, class Vec, class Scalar>
V trig(D d, V x, const Vec& vec, const Scalar& scalar) {
  using T = hn::TFromD<D>;
  const auto in_range = hn::Lt(hn::Abs(x), hn::Set(d, static_cast<T>(39000)));
  V r = vec(d, x);
  if (!hn::AllTrue(d, in_range)) {
    HWY_ALIGN T lanes[hn::MaxLanes(d)];
    HWY_ALIGN T results[hn::MaxLanes(d)];
    hn::Store(x, d, lanes);
    hn::Store(r, d, results);
    for (size_t i = 0; i < hn::Lanes(d); ++i) {
      if (!(std::abs(lanes[i]) < static_cast<T>(39000))) results[i] = scalar(lanes[i]);
    }
    r = hn::Load(d, results);
  }
  return r;
}

template <class D, class V>
V vec_erf_f32(D d, V x) {
  // erfc(|x|) = t * exp(-x^2 + P(t)), t = 1 / (1 + |x|/2): a Chebyshev fit with relative error
  // below 1.2e-7 everywhere, good to float precision. erf = sign(x) * (1 - erfc(|x|)).
  const V ax = hn::Abs(x);
  const V one = hn::Set(d, 1.0f);
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.5f), ax, one));
  V p = hn::Set(d, 0.17087277f);
  p = hn::MulAdd(p, t, hn::Set(d, -0.82215223f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.48851587f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.13520398f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.27886807f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.18628806f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.09678418f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.37409196f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.00002368f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.26551223f));
  const V exponent = hn::Sub(p, hn::Mul(ax, ax));
  const V erfc = hn::Mul(t, hn::Exp(d, hn::Max(exponent, hn::Set(d, -100.0f))));
  const V magnitude = hn::Sub(one, erfc);
  return hn::CopySign(magnitude, x);
}

#define EMBER_SCALAR_UNARY(expr) \
  template <class C>             \
  C operator()(C x) const {      \
    return static_cast<C>(expr); \
  }

struct Neg {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(-x)
  template <class D, class V> V operator()(D, V x) const { return hn::Neg(x); }
};
struct Abs {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool> || std::is_unsigned_v<C>) {
      return x;
    } else {
      return static_cast<C>(x < 0 ? -x : x);
    }
  }
  template <class D, class V> V operator()(D, V x) const { return hn::Abs(x); }
};
struct Sign {
  template <class T> static constexpr bool kVector = false;
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) {
      return x;
    } else {  // NaN gives 0, as PyTorch
      return static_cast<C>((C(0) < x) - (x < C(0)));
    }
  }
};
struct Exp {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::exp(x))
  template <class D, class V> V operator()(D d, V x) const { return vec_exp(d, x); }
};
struct Expm1 {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::expm1(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    const V limit = overflow_point<D, V>(d);
    const V r = hn::Expm1(d, hn::Min(x, limit));
    const V inf = hn::Set(d, std::numeric_limits<hn::TFromD<D>>::infinity());
    return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Gt(x, limit), inf, r));
  }
};
// Log and Log1p: Highway is valid on the open domain; the edges (0 or -1, negatives, inf, nan)
// are patched to IEEE answers.
struct Log {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::log(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    using T = hn::TFromD<D>;
    const V zero = hn::Zero(d);
    const V safe = hn::IfThenElse(hn::Gt(x, zero), x, hn::Set(d, 1));
    V r = hn::Log(d, safe);
    r = hn::IfThenElse(hn::Eq(x, zero), hn::Set(d, -std::numeric_limits<T>::infinity()), r);
    r = hn::IfThenElse(hn::Eq(x, hn::Set(d, std::numeric_limits<T>::infinity())), x, r);
    const auto invalid = hn::Or(hn::IsNaN(x), hn::Lt(x, zero));
    return hn::IfThenElse(invalid, hn::Set(d, std::numeric_limits<T>::quiet_NaN()), r);
  }
};
struct Log1p {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::log1p(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    using T = hn::TFromD<D>;
    const V minus_one = hn::Set(d, -1);
    const V safe = hn::IfThenElse(hn::Gt(x, minus_one), x, hn::Zero(d));
    V r = hn::Log1p(d, safe);
    r = hn::IfThenElse(hn::Eq(x, minus_one), hn::Set(d, -std::numeric_limits<T>::infinity()), r);
    r = hn::IfThenElse(hn::Eq(x, hn::Set(d, std::numeric_limits<T>::infinity())), x, r);
    const auto invalid = hn::Or(hn::IsNaN(x), hn::Lt(x, minus_one));
    return hn::IfThenElse(invalid, hn::Set(d, std::numeric_limits<T>::quiet_NaN()), r);
  }
};
struct Sqrt {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::sqrt(x))
  template <class D, class V> V operator()(D, V x) const { return hn::Sqrt(x); }
};
struct Rsqrt {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(C(1) / std::sqrt(x))
  template <class D, class V> V operator()(D d, V x) const { return hn::Div(hn::Set(d, 1), hn::Sqrt(x)); }
};
struct Square {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) {
      return x;
    } else {
      return static_cast<C>(x * x);
    }
  }
  template <class D, class V> V operator()(D, V x) const { return hn::Mul(x, x); }
};
struct Sin {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::sin(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    return trig(d, x, [](D dd, V v) { return hn::Sin(dd, v); }, [](auto s) { return std::sin(s); });
  }
};
struct Cos {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::cos(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    return trig(d, x, [](D dd, V v) { return hn::Cos(dd, v); }, [](auto s) { return std::cos(s); });
  }
};
struct Tanh {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(std::tanh(x))
  template <class D, class V> V operator()(D d, V x) const { return hn::Tanh(d, x); }
};
struct Sigmoid {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(scalar_sigmoid(x))
  template <class D, class V> V operator()(D d, V x) const { return vec_sigmoid(d, x); }
};
struct Relu {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(x < C(0) ? C(0) : x)
  // x < 0 ? 0 : x keeps NaN, unlike a max instruction.
  template <class D, class V> V operator()(D d, V x) const { return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Zero(d), x); }
};
struct GeluErf {
  template <class T> static constexpr bool kVector = std::is_same_v<T, float>;
  EMBER_SCALAR_UNARY(scalar_erf_gelu(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    const V half = hn::Set(d, 0.5f);
    const V erf = vec_erf_f32(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)));
    return hn::Mul(hn::Mul(half, x), hn::Add(hn::Set(d, 1.0f), erf));
  }
};
struct GeluTanh {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(scalar_tanh_gelu(x))
  template <class D, class V>
  V operator()(D d, V x) const {
    const V x3 = hn::Mul(hn::Mul(x, x), x);
    const V inner = hn::Mul(hn::Set(d, 0.79788456080286535588), hn::MulAdd(hn::Set(d, 0.044715), x3, x));
    return hn::Mul(hn::Mul(hn::Set(d, 0.5), x), hn::Add(hn::Set(d, 1), hn::Tanh(d, inner)));
  }
};
struct Silu {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_UNARY(x * scalar_sigmoid(x))
  template <class D, class V> V operator()(D d, V x) const { return hn::Mul(x, vec_sigmoid(d, x)); }
};
struct LogicalNot {
  template <class T> static constexpr bool kVector = false;
  template <class C> bool operator()(C x) const { return !(x != C(0)); }
};
struct IsNan {
  template <class T> static constexpr bool kVector = false;
  template <class C> bool operator()(C x) const { return x != x; }
};
struct IsInf {
  template <class T> static constexpr bool kVector = false;
  template <class C>
  bool operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::isinf(x);
    } else {
      return false;
    }
  }
};
#undef EMBER_SCALAR_UNARY

#define EMBER_SCALAR_BINARY(expr)   \
  template <class C>                \
  C operator()(C a, C b) const {    \
    return static_cast<C>(expr);    \
  }

struct Add {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else {
      return static_cast<C>(a + b);
    }
  }
  template <class D, class V> V operator()(D, V a, V b) const { return hn::Add(a, b); }
};
struct Sub {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_BINARY(a - b)
  template <class D, class V> V operator()(D, V a, V b) const { return hn::Sub(a, b); }
};
struct Mul {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else {
      return static_cast<C>(a * b);
    }
  }
  template <class D, class V> V operator()(D, V a, V b) const { return hn::Mul(a, b); }
};
struct Div {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  EMBER_SCALAR_BINARY(a / b)
  template <class D, class V> V operator()(D, V a, V b) const { return hn::Div(a, b); }
};
struct Pow {
  template <class T> static constexpr bool kVector = false;
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
struct Minimum {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
  template <class D, class V>
  V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
  }
};
struct Maximum {
  template <class T> static constexpr bool kVector = kIsFloat<T>;
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
  template <class D, class V>
  V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
  }
};
#define EMBER_COMPARISON(Name, expr)                             \
  struct Name {                                                  \
    template <class T> static constexpr bool kVector = false;    \
    template <class C> bool operator()(C a, C b) const { return expr; } \
  };
EMBER_COMPARISON(Eq, a == b)
EMBER_COMPARISON(Ne, a != b)
EMBER_COMPARISON(Lt, a < b)
EMBER_COMPARISON(Le, a <= b)
EMBER_COMPARISON(Gt, a > b)
EMBER_COMPARISON(Ge, a >= b)
EMBER_COMPARISON(LogicalAnd, (a != C(0)) && (b != C(0)))
EMBER_COMPARISON(LogicalOr, (a != C(0)) || (b != C(0)))
#undef EMBER_COMPARISON
#undef EMBER_SCALAR_BINARY

}  // namespace fn

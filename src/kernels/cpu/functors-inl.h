// Highway vector forms of the elementwise functors in scalar_math.h (same names), for float and
// double rows; kVector says whether a vector form exists. Included
// inside each Highway target's namespace by elementwise_simd.cpp; no include guard on purpose.

#include "kernels/cpu/exp_nonpositive-inl.h"  // exp_nonpositive(_with_subnormals), exp_avx512

namespace vec {

// Highway's Exp/Expm1 are valid up to ~104 (f32) / ~706 (f64); past the overflow point the answer is +inf.
template <class D>
hn::Vec<D> overflow_point(D d) {
  using T = hn::TFromD<D>;
  return hn::Set(d, std::is_same_v<T, float> ? static_cast<T>(88.72283935546875) : static_cast<T>(709.782712893384));
}
template <class D, class V>
V exp(D d, V x) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<hn::TFromD<D>, float> && hn::MaxLanes(d) == 16) {
    return exp_avx512<true>(d, x);  // Note [attention exp]
  }
#endif
  const V limit = overflow_point(d);
  const V r = hn::Exp(d, hn::Min(x, limit));
  const V inf = hn::Set(d, std::numeric_limits<hn::TFromD<D>>::infinity());
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Gt(x, limit), inf, r));
}
// exp(-|x|) based sigmoid: the argument of Exp is never positive, so it cannot overflow. Note
// [sigmoid's exp]: in float, exp_nonpositive (attention's exp), and Highway's Exp in the lanes below
// -87.3, where exp_nonpositive gives 0 and Highway's Exp goes on into the subnormals (to -104):
// exp_nonpositive_with_subnormals (with AVX-512, p 2^n rounded into the subnormals instead). Each
// lane's choice is its own, so a value's bits do not depend on its neighbours. As accurate as with
// Highway's Exp (within 1.73e-7 relative over [-110, 110], against 1.81e-7), and on a Zen 4 core (16
// lanes, 16K floats in L2, one thread, 4 alternated runs) sigmoid 8.5 -> 6.6 ns a vector, SiLU 9.0 ->
// 7.0 (then 4.8-5.0 and 5.2-5.4 with vscalefps, Note [attention exp]). kSubnormals false: 0 where
// sigmoid is below float's normal range (GELU's tanh form).
template <bool kSubnormals = true, class D, class V>
V sigmoid(D d, V x) {
  const V one = hn::Set(d, 1);
  const V minus_abs = hn::Neg(hn::Abs(x));
  V e;
  if constexpr (!std::is_same_v<hn::TFromD<D>, float>) {
    e = hn::Exp(d, minus_abs);
  } else if constexpr (kSubnormals) {
    e = exp_nonpositive_with_subnormals(d, minus_abs);
  } else {
    e = exp_nonpositive(d, minus_abs);
  }
  const V r = hn::Div(one, hn::Add(one, e));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, r), r));
}
// Sin and Cos are accurate for |x| < 39000; lanes outside (or non-finite) are redone in scalar.
template <class D, class V, class VecFn, class ScalarFn>
V trig(D d, V x, const VecFn& vector_form, const ScalarFn& scalar_form) {
  using T = hn::TFromD<D>;
  V r = vector_form(d, x);
  if (!hn::AllTrue(d, hn::Lt(hn::Abs(x), hn::Set(d, static_cast<T>(39000))))) {
    HWY_ALIGN T lanes[hn::MaxLanes(d)];
    HWY_ALIGN T results[hn::MaxLanes(d)];
    hn::Store(x, d, lanes);
    hn::Store(r, d, results);
    for (size_t i = 0; i < hn::Lanes(d); ++i) {
      if (!(std::abs(lanes[i]) < static_cast<T>(39000))) results[i] = scalar_form(lanes[i]);
    }
    r = hn::Load(d, results);
  }
  return r;
}
// erfc(|x|) = t * exp(-x^2 + P(t)), t = 1 / (1 + |x|/2): a Chebyshev fit with relative error below
// 1.2e-7 everywhere, float precision. erf = sign(x) * (1 - erfc(|x|)).
template <class D, class V>
V erf_f32(D d, V x) {
  const V ax = hn::Abs(x);
  const V one = hn::Set(d, 1.0f);
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.5f), ax, one));
  V p = hn::Set(d, 0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                  1.00002368f, -1.26551223f}) {
    p = hn::MulAdd(p, t, hn::Set(d, c));
  }
  const V exponent = hn::Sub(p, hn::Mul(ax, ax));
  const V erfc = hn::Mul(t, hn::Exp(d, hn::Max(exponent, hn::Set(d, -100.0f))));
  return hn::CopySign(hn::Sub(one, erfc), x);
}

// Note [GELU's erf]: GELU adds 1 to erf, so there only erf's absolute error counts, and it needs
// neither erf_f32's exp nor its relative accuracy near 0. x P(x^2) / Q(x^2), P and Q of degree 5 (a
// minimax fit on [0, 3.92], tests/golden/fit_gelu_erf.py), and 1 past 3.92, where erf is 1 within
// 2.4e-8: within 3.5e-7 of erf everywhere in float32 (erf_f32: 2.5e-7), for a division and 10
// multiply-adds instead of a division, 10 multiply-adds and an exp. A NaN x gives +-1 here and NaN
// in GELU and its gradient, which multiply by x. On a Zen 4 core (16 lanes, a loop over 16K floats
// in L2): GELU 55.6 -> 28.3 cycles a vector, its gradient 81.3 -> 39.1 with exp_nonpositive for its
// density.
template <class D, class V>
V erf_for_gelu(D d, V x) {
  const V clamp = hn::Set(d, 3.92f);
  const V one = hn::Set(d, 1.0f);
  const V ax = hn::Min(hn::Abs(x), clamp);
  const V u = hn::Mul(ax, ax);
  V p = hn::Set(d, 2.0345371467556106e-06f);
  for (float c : {0.00028745195595547557f, 0.003867959138005972f, 0.05305930972099304f, 0.19275809824466705f,
                  1.128378987312317f}) {
    p = hn::MulAdd(p, u, hn::Set(d, c));
  }
  V q = hn::Set(d, 3.806713721132837e-05f);
  for (float c : {0.0011879893718287349f, 0.01517158467322588f, 0.1150818020105362f, 0.5041590929031372f, 1.0f}) {
    q = hn::MulAdd(q, u, hn::Set(d, c));
  }
  const V r = hn::Min(hn::Div(hn::Mul(ax, p), q), one);
  return hn::CopySign(hn::IfThenElse(hn::Ge(ax, clamp), one, r), x);
}

template <class T>
inline constexpr bool kFloatOrDouble = std::is_same_v<T, float> || std::is_same_v<T, double>;

// A functor with no vector form.
#define EMBER_SCALAR_ONLY(Name)            \
  struct Name {                            \
    template <class T>                     \
    static constexpr bool kVector = false; \
  };
// A functor whose vector form is `expr` over lanes x (unary) or a, b (binary), in tag d.
#define EMBER_VECTOR_UNARY(Name, expr)                 \
  struct Name {                                        \
    template <class T>                                 \
    static constexpr bool kVector = kFloatOrDouble<T>; \
    template <class D, class V>                        \
    V operator()(D d, V x) const {                     \
      (void)d;                                         \
      return expr;                                     \
    }                                                  \
  };
#define EMBER_VECTOR_BINARY(Name, expr)                \
  struct Name {                                        \
    template <class T>                                 \
    static constexpr bool kVector = kFloatOrDouble<T>; \
    template <class D, class V>                        \
    V operator()(D d, V a, V b) const {                \
      (void)d;                                         \
      return expr;                                     \
    }                                                  \
  };

EMBER_VECTOR_UNARY(Neg, hn::Neg(x))
EMBER_VECTOR_UNARY(Abs, hn::Abs(x))
EMBER_SCALAR_ONLY(Sign)
EMBER_VECTOR_UNARY(Exp, exp(d, x))
EMBER_VECTOR_UNARY(Sqrt, hn::Sqrt(x))
EMBER_VECTOR_UNARY(Rsqrt, hn::Div(hn::Set(d, 1), hn::Sqrt(x)))
EMBER_VECTOR_UNARY(Square, hn::Mul(x, x))
EMBER_VECTOR_UNARY(Tanh, hn::Tanh(d, x))
EMBER_VECTOR_UNARY(Sigmoid, sigmoid(d, x))
EMBER_VECTOR_UNARY(Relu, hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Zero(d), x))  // keeps NaN
EMBER_VECTOR_UNARY(Silu, hn::Mul(x, sigmoid(d, x)))
EMBER_VECTOR_UNARY(Sin, trig(
                            d, x, [](D dd, V v) { return hn::Sin(dd, v); }, [](auto s) { return std::sin(s); }))
EMBER_VECTOR_UNARY(Cos, trig(
                            d, x, [](D dd, V v) { return hn::Cos(dd, v); }, [](auto s) { return std::cos(s); }))
// Note [GELU's tanh form]: x/2 (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the
// same function through sigmoid's exp (Note [sigmoid's exp]), without the cancellation of 1 + tanh(u)
// for u far below 0 (PyTorch's float32 form loses every digit there by x = -5), and 0 (-0 for x < 0,
// as PyTorch's form gives) where 2u < -87.3, x below about -10. On a Zen 4 core (16 lanes, 16K floats
// of 4 randn() in L2, one thread, 5 alternated runs): 12.5 -> 8.6 ns a vector; with the gradient (in
// threshold.cpp) 29.9 -> 20.0.
EMBER_VECTOR_UNARY(GeluTanh,
                   hn::Mul(x,
                           sigmoid<false>(d, hn::Mul(hn::Set(d, 1.59576912160573071176),
                                                     hn::MulAdd(hn::Set(d, 0.044715), hn::Mul(hn::Mul(x, x), x), x)))))
EMBER_SCALAR_ONLY(LogicalNot)
EMBER_SCALAR_ONLY(IsNan)
EMBER_SCALAR_ONLY(IsInf)

struct Expm1 {
  template <class T>
  static constexpr bool kVector = kFloatOrDouble<T>;
  template <class D, class V>
  V operator()(D d, V x) const {
    const V limit = overflow_point(d);
    const V r = hn::Expm1(d, hn::Min(x, limit));
    const V inf = hn::Set(d, std::numeric_limits<hn::TFromD<D>>::infinity());
    return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenElse(hn::Gt(x, limit), inf, r));
  }
};
// Log and Log1p: Highway is valid on the open domain; the edges (0 or -1, negatives, inf, nan)
// are patched to IEEE answers.
template <class D, class V, class F>
V patched_log(D d, V x, V edge, const F& log_form) {
  using T = hn::TFromD<D>;
  const V safe = hn::IfThenElse(hn::Gt(x, edge), x, hn::Add(edge, hn::Set(d, 1)));
  V r = log_form(d, safe);
  r = hn::IfThenElse(hn::Eq(x, edge), hn::Set(d, -std::numeric_limits<T>::infinity()), r);
  r = hn::IfThenElse(hn::Eq(x, hn::Set(d, std::numeric_limits<T>::infinity())), x, r);
  return hn::IfThenElse(hn::Or(hn::IsNaN(x), hn::Lt(x, edge)), hn::Set(d, std::numeric_limits<T>::quiet_NaN()), r);
}
EMBER_VECTOR_UNARY(Log, patched_log(d, x, hn::Zero(d), [](D dd, V v) { return hn::Log(dd, v); }))
EMBER_VECTOR_UNARY(Log1p, patched_log(d, x, hn::Set(d, -1), [](D dd, V v) { return hn::Log1p(dd, v); }))

// erf itself, to a relative error below 2.5e-7 everywhere: below |x| = 0.5, where 1 - erfc(|x|)
// would lose the small result's digits (erf(1e-8) = 1.128e-8), the Taylor series x * P(x^2) to x^13
// (the next term is below 1e-9 of the result); erf_f32 above. GELU takes erf_for_gelu (Note
// [GELU's erf]).
struct Erf {
  template <class T>
  static constexpr bool kVector = std::is_same_v<T, float>;  // double keeps std::erf's accuracy
  template <class D, class V>
  V operator()(D d, V x) const {
    const V x2 = hn::Mul(x, x);
    // 2/sqrt(pi) * (-1)^n / (n! (2n + 1)), n = 6 .. 0.
    V p = hn::Set(d, 1.2055332981789664e-4f);
    for (float c : {-8.5483270234508510e-4f, 5.2239776254421878e-3f, -2.6866170645131252e-2f, 1.1283791670955126e-1f,
                    -3.7612638903183754e-1f, 1.1283791670955126f}) {
      p = hn::MulAdd(p, x2, hn::Set(d, c));
    }
    return hn::IfThenElse(hn::Lt(hn::Abs(x), hn::Set(d, 0.5f)), hn::Mul(x, p), erf_f32(d, x));
  }
};
struct GeluErf {
  template <class T>
  static constexpr bool kVector = std::is_same_v<T, float>;  // double keeps std::erf's accuracy
  template <class D, class V>
  V operator()(D d, V x) const {
    const V erf = erf_for_gelu(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)));
    return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), erf));
  }
};

EMBER_VECTOR_BINARY(Add, hn::Add(a, b))
EMBER_VECTOR_BINARY(Sub, hn::Sub(a, b))
EMBER_VECTOR_BINARY(Mul, hn::Mul(a, b))
EMBER_VECTOR_BINARY(Div, hn::Div(a, b))
EMBER_SCALAR_ONLY(Pow)
EMBER_VECTOR_BINARY(Minimum, hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b))))
EMBER_VECTOR_BINARY(Maximum, hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b))))
EMBER_SCALAR_ONLY(Eq)
EMBER_SCALAR_ONLY(Ne)
EMBER_SCALAR_ONLY(Lt)
EMBER_SCALAR_ONLY(Le)
EMBER_SCALAR_ONLY(Gt)
EMBER_SCALAR_ONLY(Ge)
EMBER_SCALAR_ONLY(LogicalAnd)
EMBER_SCALAR_ONLY(LogicalOr)

#undef EMBER_SCALAR_ONLY
#undef EMBER_VECTOR_UNARY
#undef EMBER_VECTOR_BINARY

}  // namespace vec

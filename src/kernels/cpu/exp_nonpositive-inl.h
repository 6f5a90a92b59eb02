// exp of x <= 0 in float vectors (Note [attention exp]), shared by attention's softmax
// (attention.cpp), GELU's gradient (threshold.cpp), sigmoid (functors-inl.h), softmax (softmax.cpp)
// and cross-entropy (loss.cpp). Included inside each Highway target's namespace, after `hn` is
// defined; no include guard on purpose (one copy per target).

// Note [attention exp]: every exp of the softmax takes x <= 0 (a score minus its row's max, an
// old max minus a new one; -inf for a masked score). float: Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, e^r by 1 + r + c2 r^2 + ... + c6 r^6 with c2..c6 fit for the least maximum relative
// error (tests/golden/fit_exp_nonpositive.py: 3.1e-9 on the interval; the degree-6 Taylor polynomial
// first used here: 1.2e-7), 2^n from the exponent bits, 0 below -87.3 (where float's normal range
// ends), NaN for NaN. Within 0.88 ulp of e^x over [-87.3, 0] in float32 (the Taylor polynomial: 2.7),
// at the same cost; sigmoid through it within 2.5e-7 relative (Attention.ExpOfNonPositiveScores,
// and sigmoid_against_libm in tests/ops_elementwise.cpp). It saves Highway's Exp its second scaling
// step (for inputs of any size) and clamping: sdpa_f32_b4h8l1024d64 33.7 -> 31.25 ms, with the
// backward 110.9 -> 107.8 ms (3 interleaved rounds, 2 threads). double: Highway's Exp.
// Tried on a later Zen 4 and not kept, each alternated 3 times against this code (sdpa_f32 46.0-47.2
// ms, with the backward 158.7-159.9 ms): n from one add of 1.5 * 2^23 instead of Round and
// ConvertTo (five instructions fewer per vector, the same bits on every float in [-88, 0]) 46.6-46.8
// and 157.7-158.0 ms; the polynomial by Estrin's scheme (a chain of 16 cycles instead of 24) 46.5-46.7
// and 157.3-157.8 ms. Products are 82% of this forward's time (`perf`), at 95% of the FMA peak.
// With AVX-512, p 2^n is one vscalefps instead of ConvertTo, an add, a shift and a multiply: exact
// where the result is normal (the same bits as the product with 2^n's exponent bits), rounded once
// where it is subnormal, inf where it overflows. So exp_avx512 serves every x: the subnormal form
// (instead of Highway's Exp there), the selective scan's decay and the exp op (vec::exp, instead of
// Highway's Exp with its overflow and NaN patches). Over 16K floats in L1 on one Zen 4 core:
// exp_nonpositive 5.3 -> 4.4 ns a 16-lane vector, the subnormal form 5.6 -> 4.2, vec::exp 7.4-8.5 ->
// 3.8; sigmoid 6.2-6.7 -> 4.8-5.0.

// e^x = p 2^n with |r| <= ln2/2 reduced from x = n ln2 + r (float): returns p, sets n.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V exp_mantissa(D d, V x, V& n) {
  n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  V r = hn::MulAdd(n, hn::Set(d, -0.693359375f), x);  // ln 2 in two parts; n * 0.693359375 is exact
  r = hn::MulAdd(n, hn::Set(d, 2.12194440e-4f), r);
  V p = hn::Set(d, 0.0013814588310196996f);  // tests/golden/fit_exp_nonpositive.py
  p = hn::MulAdd(p, r, hn::Set(d, 0.008368715643882751f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.04166838899254799f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.1666652113199234f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.4999999403953552f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  return hn::MulAdd(p, r, hn::Set(d, 1.0f));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V exp_nonpositive(D d, V x) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    V n;
    const V p = exp_mantissa(d, x, n);
    const auto flushed = hn::Lt(x, hn::Set(d, -87.3f));  // -inf too (whose p is NaN)
#if HWY_TARGET <= HWY_AVX3
    if constexpr (hn::MaxLanes(d) == 16) {  // p 2^n in one instruction (Note [attention exp])
      return hn::IfThenZeroElse(flushed, V{_mm512_scalef_ps(p.raw, n.raw)});
    }
#endif
    const hn::RebindToSigned<D> di;
    const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
    return hn::IfThenZeroElse(flushed, hn::Mul(p, scale));
  } else {
    return hn::Exp(d, x);
  }
}

#if HWY_TARGET <= HWY_AVX3
// e^x in 16 float lanes with AVX-512: x clamped at -104 (-inf too: p 2^n rounds to 0 there) and, with
// kAnySign, at 89 (+inf too: p 2^n overflows to inf, as for every x past 88.72); maxps and minps
// return their second operand, x, when either is NaN, so NaN stays NaN. vscalefps rounds p 2^n once
// into the subnormals (within one least subnormal of e^x).
template <bool kAnySign, class D, class V = hn::Vec<D>>
HWY_INLINE V exp_avx512(D d, V x) {
  __m512 clamped = _mm512_max_ps(_mm512_set1_ps(-104.0f), x.raw);
  if constexpr (kAnySign) clamped = _mm512_min_ps(_mm512_set1_ps(89.0f), clamped);
  V n;
  const V p = exp_mantissa(d, V{clamped}, n);
  return V{_mm512_scalef_ps(p.raw, n.raw)};
}
#endif

// exp_nonpositive where e^x is a normal float, and in the lanes where it is a subnormal (x in
// [-104, -87.3)) Highway's Exp, lane by lane, or with AVX-512 p 2^n rounded once into the subnormals
// (within one least subnormal of e^x): for every x <= 0 (-inf included) the values Highway's Exp
// covers (0 below -104), at exp_nonpositive's cost or less. double: Highway's Exp.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V exp_nonpositive_with_subnormals(D d, V x) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
#if HWY_TARGET <= HWY_AVX3
    if constexpr (hn::MaxLanes(d) == 16) return exp_avx512<false>(d, x);
#endif
    V e = exp_nonpositive(d, x);
    const auto subnormal = hn::And(hn::Lt(x, hn::Set(d, -87.3f)), hn::Ge(x, hn::Set(d, -104.0f)));
    if (!hn::AllFalse(d, subnormal)) e = hn::IfThenElse(subnormal, hn::Exp(d, x), e);
    return e;
  } else {
    return hn::Exp(d, x);
  }
}

// e^x for any x: exp_nonpositive_with_subnormals, and Highway's Exp in the lanes (if any) where
// x > 0, lane by lane (with AVX-512, exp_avx512 in every lane). For the selective scan's decay
// exp(delta A), whose argument is <= 0 whenever delta >= 0 and A <= 0, as in Mamba (A = -exp(A_log),
// delta from a softplus). double: Highway's Exp.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V exp_mostly_nonpositive(D d, V x) {
  if constexpr (!std::is_same_v<hn::TFromD<D>, float>) {
    return hn::Exp(d, x);
  } else {
#if HWY_TARGET <= HWY_AVX3
    if constexpr (hn::MaxLanes(d) == 16) return exp_avx512<true>(d, x);
#endif
    V e = exp_nonpositive_with_subnormals(d, x);
    const auto positive = hn::Gt(x, hn::Zero(d));
    if (!hn::AllFalse(d, positive)) e = hn::IfThenElse(positive, hn::Exp(d, x), e);
    return e;
  }
}

// The epilogue activations (ember::Activation) on a vector: the elementwise ops' vector form where
// it exists for T, lane by lane through the scalar form where it does not (the double GELU keeps
// std::erf, as the elementwise op does), so an activation fused into a GEMM or a convolution gives
// each value the bits the op gives it alone. Included inside each Highway target's namespace, with
// the functors it applies (functors-inl.h, which a file then does not include again); no include
// guard on purpose.

#include "kernels/cpu/functors-inl.h"

// f on every lane, through memory.
template <class D, class F, class V = hn::Vec<D>>
HWY_INLINE V lanewise(D d, V x, const F& f) {
  using T = hn::TFromD<D>;
  HWY_ALIGN T lanes[hn::MaxLanes(d)];
  hn::Store(x, d, lanes);
  for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = f(lanes[i]);
  return hn::Load(d, lanes);
}

template <class F, class SF, class D, class V = hn::Vec<D>>
HWY_INLINE V activate_with(D d, V x) {
  if constexpr (F::template kVector<hn::TFromD<D>>) {
    return F()(d, x);
  } else {
    return lanewise(d, x, SF());
  }
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V activate(D d, Activation activation, V x) {
  switch (activation) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:
      return activate_with<vec::Relu, scalar::Relu>(d, x);
    case Activation::kGeluErf:
      return activate_with<vec::GeluErf, scalar::GeluErf>(d, x);
    case Activation::kGeluTanh:
      return activate_with<vec::GeluTanh, scalar::GeluTanh>(d, x);
    case Activation::kSilu:
      return activate_with<vec::Silu, scalar::Silu>(d, x);
  }
  return x;
}

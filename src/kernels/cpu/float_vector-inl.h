// Loads and stores between a float type T (float, double, float16, bfloat16) and vectors of
// compute_t<T>, shared by the reductions' vector row loops (reduce-inl.h) and softmax (softmax.cpp).
// Included inside each Highway target's namespace, after `hn` is defined; no include guard on
// purpose (one copy per target).

// The 16-bit floats, which vectors hold as float.
template <class T>
inline constexpr bool kHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Whether this target loads T into vectors of compute_t<T>. Highway converts float16 with F16C
// from AVX2 up; its emulation on older targets turns inf and nan into finite numbers.
template <class T>
inline constexpr bool kVectorLoad = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                    std::is_same_v<T, BFloat16> ||
                                    (std::is_same_v<T, Half> && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2);

// Lanes(d) elements of T, from p on, as a vector of compute_t<T> (float16 converted one lane at a
// time where kVectorLoad is false, so that every target computes the same values).
template <class D, class T>
HWY_INLINE hn::Vec<D> load_vector(D d, const T* p) {
  if constexpr (std::is_same_v<T, Half> && !kVectorLoad<T>) {
    HWY_ALIGN hn::TFromD<D> lanes[hn::MaxLanes(d)];
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = static_cast<float>(p[i]);
    return hn::Load(d, lanes);
  } else if constexpr (std::is_same_v<T, Half>) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const hn::Rebind<hwy::bfloat16_t, D> db;
    return hn::PromoteTo(d, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else {
    return hn::LoadU(d, p);
  }
}

// Stores a vector of compute_t<T> as T, rounding 16-bit floats to nearest even like Half/BFloat16
// (bfloat16 in vector integer steps, bit for bit detail::float_to_bfloat16_bits, nan included;
// float16 with F16C where kVectorLoad, its NaNs replaced by detail::float_to_half_bits' quiet NaN,
// which keeps the sign and drops the payload).
template <class D, class T>
HWY_INLINE void store_vector(D d, hn::Vec<D> v, T* p) {
  if constexpr (std::is_same_v<T, Half> && kVectorLoad<T>) {
    // A float quiet NaN with no payload converts to exactly that NaN (sign | 0x7e00).
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto quiet = hn::CopySign(hn::BitCast(d, hn::Set(hn::RebindToUnsigned<D>(), 0x7fc00000u)), v);
    hn::StoreU(hn::DemoteTo(dh, hn::IfThenElse(hn::IsNaN(v), quiet, v)), dh, reinterpret_cast<hwy::float16_t*>(p));
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    const hn::RebindToSigned<D> di;
    const auto bits = hn::BitCast(di, v);
    const auto high = hn::And(hn::ShiftRight<16>(bits), hn::Set(di, 0xffff));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(di, 0x7fff), hn::And(high, hn::Set(di, 1)))));
    const auto quiet_nan = hn::Or(high, hn::Set(di, 0x40));
    const auto out = hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), quiet_nan, hn::And(rounded, hn::Set(di, 0xffff)));
    const hn::Rebind<uint16_t, D> du16;
    hn::StoreU(hn::DemoteTo(du16, out), du16, reinterpret_cast<uint16_t*>(p));
  } else if constexpr (kHalfType<T>) {
    HWY_ALIGN hn::TFromD<D> lanes[hn::MaxLanes(d)];
    hn::Store(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = T(lanes[i]);
  } else {
    hn::StoreU(v, d, p);
  }
}

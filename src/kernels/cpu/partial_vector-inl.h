// Loads and stores of the first `count` lanes of a vector, touching no memory past them, shared by
// the direct convolution (conv_direct.cpp) and pooling (pool.cpp). Included inside each Highway
// target's namespace, after `hn` is defined; no include guard on purpose (one copy per target).

// The `count` (<= lanes) values at p, zeros after them; reads nothing past p + count (a masked
// load where the target has one that cannot fault, else through a small buffer).
template <class D, class T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> load_part(D d, const T* p, int64_t count) {
  if (count == static_cast<int64_t>(hn::Lanes(d))) return hn::LoadU(d, p);
#if !HWY_MEM_OPS_MIGHT_FAULT
  return hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(count)), d, p);
#endif
  HWY_ALIGN T lanes[hn::MaxLanes(d)] = {};
  for (int64_t i = 0; i < count; ++i) lanes[i] = p[i];
  return hn::Load(d, lanes);
}

template <class D, class T = hn::TFromD<D>>
HWY_INLINE void store_part(D d, hn::Vec<D> v, T* p, int64_t count) {
  if (count == static_cast<int64_t>(hn::Lanes(d))) return hn::StoreU(v, d, p);
#if !HWY_MEM_OPS_MIGHT_FAULT
  return hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(count)), d, p);
#endif
  HWY_ALIGN T lanes[hn::MaxLanes(d)];
  hn::Store(v, d, lanes);
  for (int64_t i = 0; i < count; ++i) p[i] = lanes[i];
}

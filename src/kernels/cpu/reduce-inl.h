// The reductions' vector path for one Highway target, over the target-independent walkers of
// reduce_walkers.h: the vector forms of Sum, Prod, Amax and Amin, the vector row loops that use them
// and run_vector. Shared by reduce_simd.cpp (which runs it, and instantiates it for Sum and Prod)
// and reduce_extreme_simd.cpp (which instantiates it for Amax and Amin). Included inside each
// Highway target's namespace, after `hn`, reduce_walkers.h and float_vector-inl.h, and outside any
// unnamed namespace, since run_vector's instantiations are shared between the two files; no include
// guard on purpose (one copy per target).

// --- vector forms of the reductions: videntity, vcombine, vreduce (the lanes combined) ---------------

template <class R>
struct VectorForm;

template <bool kProduct>
struct VectorForm<reduction::SumOrProd<kProduct>> {
  template <class D>
  static hn::Vec<D> videntity(D d) {
    return hn::Set(d, hn::TFromD<D>(kProduct ? 1 : 0));
  }
  template <class D, class V>
  static V vcombine(D, V a, V b) {
    if constexpr (kProduct) {
      return hn::Mul(a, b);
    } else {
      return hn::Add(a, b);
    }
  }
  template <class D, class V>
  static hn::TFromD<D> vreduce(D d, V v) {
    if constexpr (kProduct) {
      HWY_ALIGN hn::TFromD<D> lanes[hn::MaxLanes(d)];
      hn::Store(v, d, lanes);
      hn::TFromD<D> result = lanes[0];
      for (size_t i = 1; i < hn::Lanes(d); ++i) result *= lanes[i];
      return result;
    } else {
      return hn::GetLane(hn::SumOfLanes(d, v));
    }
  }
};

template <bool kMax>
struct VectorForm<reduction::Extreme<kMax>> {
  template <class D>
  static hn::Vec<D> videntity(D d) {
    return hn::Set(d, reduction::Extreme<kMax>::template identity<hn::TFromD<D>>());
  }
  // Highway leaves Min/Max of nan unspecified: where either lane is nan, a + b gives nan.
  template <class D, class V>
  static V vcombine(D, V a, V b) {
    const V m = kMax ? hn::Max(a, b) : hn::Min(a, b);
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), m);
  }
  template <class D, class V>
  static hn::TFromD<D> vreduce(D d, V v) {
    if (!hn::AllFalse(d, hn::IsNaN(v))) return std::numeric_limits<hn::TFromD<D>>::quiet_NaN();
    return hn::GetLane(kMax ? hn::MaxOfLanes(d, v) : hn::MinOfLanes(d, v));
  }
};

// R over n elements in the order of VectorRows::contiguous: four vector accumulators over steps of
// four vectors, each block of kBlockSteps steps joining a cascade through its lanes, then one over
// the whole vectors left, then the last elements one by one. The elements come from `four(i, v)`
// (v[0..3] = the vectors at i, i + lanes, i + 2 lanes and i + 3 lanes), `one(i)` (the vector at i)
// and `element(i)`, each called in increasing i: a row loaded from memory, or computed in registers
// (Note [register chains] in graph/fused.h).
template <class R, class D, class Four, class One, class Element>
HWY_INLINE hn::TFromD<D> accumulate_vectors(D d, int64_t n, const Four& four, const One& one, const Element& element) {
  using C = hn::TFromD<D>;
  using V = hn::Vec<D>;
  using F = VectorForm<R>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t step = 4 * lanes;
  reduction::Cascade<R, C> cascade;
  int64_t i = 0;
  while (i + step <= n) {
    const int64_t end = i + std::min(reduction::kBlockSteps * step, (n - i) / step * step);
    V a0 = F::videntity(d), a1 = a0, a2 = a0, a3 = a0;
    for (; i < end; i += step) {
      V v[4];
      four(i, v);
      a0 = F::vcombine(d, a0, v[0]);
      a1 = F::vcombine(d, a1, v[1]);
      a2 = F::vcombine(d, a2, v[2]);
      a3 = F::vcombine(d, a3, v[3]);
    }
    cascade.push(F::vreduce(d, F::vcombine(d, F::vcombine(d, a0, a1), F::vcombine(d, a2, a3))));
  }
  if (i < n) {
    V a0 = F::videntity(d);
    for (; i + lanes <= n; i += lanes) a0 = F::vcombine(d, a0, one(i));
    C tail = F::vreduce(d, a0);
    for (; i < n; ++i) tail = R::combine(tail, element(i));
    cascade.push(tail);
  }
  return cascade.result(static_cast<C>(R::template identity<C>()));
}

// The vector row loops (see reduction::ScalarRows) for a float type T this target loads.
template <class R, class T>
struct VectorRows {
  using C = compute_t<T>;
  using F = VectorForm<R>;
  static_assert(std::is_same_v<reduction::AccOf<R, T>, C>, "vector reductions accumulate in compute_t<T>");
  static constexpr bool kContiguous = true;

  // Four vector accumulators; each block of kBlockSteps steps joins a cascade through its lanes
  // (accumulate_vectors below).
  static C contiguous(const T* p, int64_t n) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    return accumulate_vectors<R>(
        d, n,
        [&](int64_t i, V* v) HWY_ATTR {
          for (int j = 0; j < 4; ++j) v[j] = load_vector(d, p + i + j * lanes);
        },
        [&](int64_t i) HWY_ATTR { return load_vector(d, p + i); },
        [&](int64_t i) { return R::template load<T>(p[i], i); });
  }

  // Columns in registers: a strip of up to four vectors of acc stays in registers while all
  // `count` rows pass, four at a time (acc + ((x0 + x1) + (x2 + x3))), the last few one by one.
  static int64_t accumulate(C* acc, const T* const* rows, int count, int64_t n) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const int whole = count / 4 * 4;
    const auto quad = [&](const T* const* r, int64_t j) HWY_ATTR {
      const V x01 = F::vcombine(d, load_vector(d, r[0] + j), load_vector(d, r[1] + j));
      const V x23 = F::vcombine(d, load_vector(d, r[2] + j), load_vector(d, r[3] + j));
      return F::vcombine(d, x01, x23);
    };
    int64_t j = 0;
    for (; j + 4 * lanes <= n; j += 4 * lanes) {
      V a0 = hn::LoadU(d, acc + j), a1 = hn::LoadU(d, acc + j + lanes), a2 = hn::LoadU(d, acc + j + 2 * lanes),
        a3 = hn::LoadU(d, acc + j + 3 * lanes);
      for (int g = 0; g < whole; g += 4) {
        a0 = F::vcombine(d, a0, quad(rows + g, j));
        a1 = F::vcombine(d, a1, quad(rows + g, j + lanes));
        a2 = F::vcombine(d, a2, quad(rows + g, j + 2 * lanes));
        a3 = F::vcombine(d, a3, quad(rows + g, j + 3 * lanes));
      }
      for (int g = whole; g < count; ++g) {
        a0 = F::vcombine(d, a0, load_vector(d, rows[g] + j));
        a1 = F::vcombine(d, a1, load_vector(d, rows[g] + j + lanes));
        a2 = F::vcombine(d, a2, load_vector(d, rows[g] + j + 2 * lanes));
        a3 = F::vcombine(d, a3, load_vector(d, rows[g] + j + 3 * lanes));
      }
      hn::StoreU(a0, d, acc + j);
      hn::StoreU(a1, d, acc + j + lanes);
      hn::StoreU(a2, d, acc + j + 2 * lanes);
      hn::StoreU(a3, d, acc + j + 3 * lanes);
    }
    for (; j + lanes <= n; j += lanes) {
      V a = hn::LoadU(d, acc + j);
      for (int g = 0; g < whole; g += 4) a = F::vcombine(d, a, quad(rows + g, j));
      for (int g = whole; g < count; ++g) a = F::vcombine(d, a, load_vector(d, rows[g] + j));
      hn::StoreU(a, d, acc + j);
    }
    return j;
  }
};

// Runs R with vector row loops when it has a vector form and this target loads in_dtype; false
// when it does neither.
template <class R>
bool run_vector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  if constexpr (!R::kVectorForm) {
    return false;
  } else {
    return dispatch_dtype(in_dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!kVectorLoad<T>) {
        return false;
      } else {
        reduction::run_typed<R, T, VectorRows>(op, out_dtype, out, in, layout);
        return true;
      }
    });
  }
}

// reduce_simd.h's row function for R from T into Out.
template <class R, class T, class Out>
void reduce_row_vectors(void* out, const void* in, int64_t n) {
  *static_cast<Out*>(out) = reduction::reduce_contiguous<R, T, Out, VectorRows>(static_cast<const T*>(in), n);
}

// R's row function from in_dtype into out_dtype on this target, or nullptr where run_vector would
// not take the reduction (no vector form, or a type this target does not load).
template <class R>
simd::ReduceRowFn reduce_row_fn_for(DType in_dtype, DType out_dtype) {
  if constexpr (!R::kVectorForm) {
    return nullptr;
  } else {
    return dispatch_dtype(in_dtype, [&](auto tag) -> simd::ReduceRowFn {
      using T = typename decltype(tag)::type;
      if constexpr (!kVectorLoad<T>) {
        return nullptr;
      } else {
        using Out = typename R::template Out<T>;
        using AltOut = typename R::template AltOut<T>;
        if (out_dtype == dtype_of<Out>()) return &reduce_row_vectors<R, T, Out>;
        if constexpr (!std::is_void_v<AltOut>) {
          if (out_dtype == dtype_of<AltOut>()) return &reduce_row_vectors<R, T, AltOut>;
        }
        return nullptr;
      }
    });
  }
}

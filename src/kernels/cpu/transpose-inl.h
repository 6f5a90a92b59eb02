// In-register transposes shared by the GEMM's packing (gemm.cpp) and the transposed copy
// (elementwise_simd.cpp). Included inside each Highway target's namespace, after `hn` is
// defined; no include guard on purpose (one copy per target).

#if HWY_TARGET != HWY_SCALAR
// 8 x 8 of 32-bit lanes held in 256-bit vectors (two 128-bit halves, as on AVX2 and AVX-512): on
// return, vector q holds what was lane q of every input.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void transpose_8x8(D d, V& r0, V& r1, V& r2, V& r3, V& r4, V& r5, V& r6, V& r7) {
  const hn::Repartition<uint64_t, D> d64;
  const auto pairs = [d, d64](V x, V y, bool upper) HWY_ATTR {  // 64-bit interleave of 32-bit pairs
    const auto x64 = hn::BitCast(d64, x), y64 = hn::BitCast(d64, y);
    return hn::BitCast(d, upper ? hn::InterleaveUpper(d64, x64, y64) : hn::InterleaveLower(d64, x64, y64));
  };
  // t: a0 b0 a1 b1 | a4 b4 a5 b5 and a2 b2 a3 b3 | a6 b6 a7 b7 for each pair of rows (a, b).
  const V t0 = hn::InterleaveLower(d, r0, r1), t1 = hn::InterleaveUpper(d, r0, r1);
  const V t2 = hn::InterleaveLower(d, r2, r3), t3 = hn::InterleaveUpper(d, r2, r3);
  const V t4 = hn::InterleaveLower(d, r4, r5), t5 = hn::InterleaveUpper(d, r4, r5);
  const V t6 = hn::InterleaveLower(d, r6, r7), t7 = hn::InterleaveUpper(d, r6, r7);
  // u: lanes q and q + 4 of four rows.
  const V u0 = pairs(t0, t2, false), u1 = pairs(t0, t2, true), u2 = pairs(t1, t3, false), u3 = pairs(t1, t3, true);
  const V u4 = pairs(t4, t6, false), u5 = pairs(t4, t6, true), u6 = pairs(t5, t7, false), u7 = pairs(t5, t7, true);
  r0 = hn::ConcatLowerLower(d, u4, u0);
  r4 = hn::ConcatUpperUpper(d, u4, u0);
  r1 = hn::ConcatLowerLower(d, u5, u1);
  r5 = hn::ConcatUpperUpper(d, u5, u1);
  r2 = hn::ConcatLowerLower(d, u6, u2);
  r6 = hn::ConcatUpperUpper(d, u6, u2);
  r3 = hn::ConcatLowerLower(d, u7, u3);
  r7 = hn::ConcatUpperUpper(d, u7, u3);
}

// Eight rows `stride` elements apart, transposed: on return, vector q holds element q of each row.
template <class D, class T, class V = hn::Vec<D>>
HWY_INLINE void load_8_rows_transposed(D d, const T* in, int64_t stride, V& r0, V& r1, V& r2, V& r3, V& r4, V& r5,
                                       V& r6, V& r7) {
  r0 = hn::LoadU(d, in);
  r1 = hn::LoadU(d, in + stride);
  r2 = hn::LoadU(d, in + 2 * stride);
  r3 = hn::LoadU(d, in + 3 * stride);
  r4 = hn::LoadU(d, in + 4 * stride);
  r5 = hn::LoadU(d, in + 5 * stride);
  r6 = hn::LoadU(d, in + 6 * stride);
  r7 = hn::LoadU(d, in + 7 * stride);
  transpose_8x8(d, r0, r1, r2, r3, r4, r5, r6, r7);
}

// The eight vectors to eight rows `stride` elements apart.
template <class D, class T, class V = hn::Vec<D>>
HWY_INLINE void store_8_rows(D d, T* out, int64_t stride, V r0, V r1, V r2, V r3, V r4, V r5, V r6, V r7) {
  hn::StoreU(r0, d, out);
  hn::StoreU(r1, d, out + stride);
  hn::StoreU(r2, d, out + 2 * stride);
  hn::StoreU(r3, d, out + 3 * stride);
  hn::StoreU(r4, d, out + 4 * stride);
  hn::StoreU(r5, d, out + 5 * stride);
  hn::StoreU(r6, d, out + 6 * stride);
  hn::StoreU(r7, d, out + 7 * stride);
}
#endif  // HWY_TARGET != HWY_SCALAR

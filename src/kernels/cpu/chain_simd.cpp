// Register chains (elementwise_simd.h's chain_row_fn, Note [register chains] in graph/fused.h) for
// every Highway target. Apart from elementwise_simd.cpp, whose row functions instantiate the same
// functors one op at a time, so that neither file dominates the build. foreach_target.h must come
// first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/chain_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/reduce_simd.h"
#include "kernels/cpu/reduce_walkers.h"
#include "kernels/cpu/scalar_math.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "kernels/cpu/float_vector-inl.h"
#include "kernels/cpu/functors-inl.h"
#include "kernels/cpu/reduce-inl.h"

namespace {

// Vectors a chain carries through its steps at once: the step's dispatch is paid once per block. Four,
// the step of the vector sums' four accumulators (accumulate_vectors in reduce-inl.h), so that a
// chain ending in a row sum fills their step with one block.
constexpr int kBlock = 4;

// B vectors v (at element i of the row) through one unary op F.
template <class F, int B, class D, class V>
HWY_INLINE void unary_block(D d, V* v) {
  const F f;
  for (int j = 0; j < B; ++j) v[j] = f(d, v[j]);
}

// ... through one binary op F with the step's other operand.
template <class F, int B, class D, class V>
HWY_INLINE void binary_block(D d, const simd::ChainStep& s, V* v, int64_t i) {
  using T = hn::TFromD<D>;
  const F f;
  const T* other = static_cast<const T*>(s.other);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (other == nullptr) {
    for (int j = 0; j < B; ++j) v[j] = f(d, v[j], v[j]);
  } else if (s.other_scalar) {
    const V o = hn::Set(d, *other);
    if (s.value_first) {
      for (int j = 0; j < B; ++j) v[j] = f(d, v[j], o);
    } else {
      for (int j = 0; j < B; ++j) v[j] = f(d, o, v[j]);
    }
  } else if (s.value_first) {
    for (int j = 0; j < B; ++j) v[j] = f(d, v[j], hn::LoadU(d, other + i + j * lanes));
  } else {
    for (int j = 0; j < B; ++j) v[j] = f(d, hn::LoadU(d, other + i + j * lanes), v[j]);
  }
}

// B vectors through one step. Only ops of a few instructions: a case's registers must not push
// the block's values out to the stack (heavier ops gain nothing from a chain: their arithmetic, not
// their loads and stores, sets their speed).
#define EMBER_CHAIN_UNARY(X) X(Neg) X(Abs) X(Sqrt) X(Rsqrt) X(Square) X(Relu)
#define EMBER_CHAIN_BINARY(X) X(Add) X(Sub) X(Mul) X(Div) X(Minimum) X(Maximum)
template <int B, class D, class V>
HWY_INLINE void chain_step(D d, const simd::ChainStep& s, V* v, int64_t i) {
  switch (s.op) {
#define EMBER_UNARY_CASE(kind)       \
  case OpKind::k##kind:              \
    unary_block<vec::kind, B>(d, v); \
    return;
    EMBER_CHAIN_UNARY(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
#define EMBER_BINARY_CASE(kind)             \
  case OpKind::k##kind:                     \
    binary_block<vec::kind, B>(d, s, v, i); \
    return;
    EMBER_CHAIN_BINARY(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    default:
      return;  // not reached: the fusion pass chains only the ops above (simd::chains)
  }
}

// One row of a chain: its steps, input, output (nullptr: not stored) and length.
template <class T>
struct ChainRow {
  const simd::ChainStep* steps;
  int count;
  const T* in;
  T* out;
  int64_t n;

  // v[0..B) = the chain's vectors at i, i + lanes, ..., storing what the steps and out ask for.
  template <int B, class D, class V>
  HWY_INLINE void vectors(D d, int64_t i, V* v) const {
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    for (int j = 0; j < B; ++j) v[j] = hn::LoadU(d, in + i + j * lanes);
    for (int k = 0; k < count; ++k) {
      chain_step<B>(d, steps[k], v, i);
      if (T* store = static_cast<T*>(steps[k].store)) {
        for (int j = 0; j < B; ++j) hn::StoreU(v[j], d, store + i + j * lanes);
      }
    }
    if (out != nullptr) {
      for (int j = 0; j < B; ++j) hn::StoreU(v[j], d, out + i + j * lanes);
    }
  }

  // buf[0, n - i) = the chain's last elements (fewer than a vector) from i, through padded copies as
  // the row functions take them, so that an element's result does not depend on where it falls.
  template <class D>
  void tail(D d, int64_t i, T* buf) const {
    using V = hn::Vec<D>;
    alignas(HWY_MAX_BYTES) T padded_in[HWY_MAX_BYTES / sizeof(T)] = {};
    std::copy(in + i, in + n, padded_in);
    V v[1] = {hn::Load(d, padded_in)};
    alignas(HWY_MAX_BYTES) T lanes[HWY_MAX_BYTES / sizeof(T)];
    for (int k = 0; k < count; ++k) {
      simd::ChainStep s = steps[k];
      const T* other = static_cast<const T*>(s.other);
      alignas(HWY_MAX_BYTES) T padded[HWY_MAX_BYTES / sizeof(T)] = {};
      if (other != nullptr && !s.other_scalar) {
        std::copy(other + i, other + n, padded);
        s.other = padded;
      }
      chain_step<1>(d, s, v, 0);
      if (T* store = static_cast<T*>(s.store)) {
        hn::Store(v[0], d, lanes);
        std::copy(lanes, lanes + (n - i), store + i);
      }
    }
    hn::Store(v[0], d, lanes);
    std::copy(lanes, lanes + (n - i), buf);
    if (out != nullptr) std::copy(lanes, lanes + (n - i), out + i);
  }

  // The whole row, block by block.
  void run() const {
    const hn::ScalableTag<T> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t i = 0;
    for (; i + kBlock * lanes <= n; i += kBlock * lanes) {
      V v[kBlock];
      vectors<kBlock>(d, i, v);
    }
    for (; i + lanes <= n; i += lanes) {
      V v[1];
      vectors<1>(d, i, v);
    }
    alignas(HWY_MAX_BYTES) T buf[HWY_MAX_BYTES / sizeof(T)];
    if (i < n) tail(d, i, buf);
  }
};

template <class T>
int64_t chain_vectors(void* out, const void* in, const simd::ChainStep* steps, int count, int64_t n, void* sum) {
  ChainRow<T> row{steps, count, static_cast<const T*>(in), static_cast<T*>(out), n};
  if (sum == nullptr) {
    row.run();
    return n;
  }
  using Sum = reduction::Sum;
  if (n <= reduction::kSmallReduce || n > reduction::kChunk) {
    // The values, then the sum over them in the order the kernel takes for that length.
    std::vector<T> values;
    T few[reduction::kSmallReduce];
    if (row.out == nullptr) {
      if (n > reduction::kSmallReduce) values.resize(static_cast<size_t>(n));
      row.out = n > reduction::kSmallReduce ? values.data() : few;
    }
    row.run();
    *static_cast<T*>(sum) = reduction::reduce_contiguous<Sum, T, T, VectorRows>(row.out, n);
    return n;
  }
  // The sum as VectorRows::contiguous takes it over the stored row, from the values in registers.
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  alignas(HWY_MAX_BYTES) T last[HWY_MAX_BYTES / sizeof(T)];
  int64_t last_at = -1;
  *static_cast<T*>(sum) = accumulate_vectors<Sum>(
      d, n, [&](int64_t i, V* v) HWY_ATTR { row.template vectors<kBlock>(d, i, v); },
      [&](int64_t i) HWY_ATTR {
        V v[1];
        row.template vectors<1>(d, i, v);
        return v[0];
      },
      [&](int64_t i) {
        if (last_at < 0) {
          last_at = i;
          row.tail(d, i, last);
        }
        return last[i - last_at];
      });
  return n;
}

}  // namespace

simd::ChainRowFn ChainRowFnFor(DType dtype) {
  if (dtype == kFloat32) return &chain_vectors<float>;
#if HWY_HAVE_FLOAT64
  if (dtype == kFloat64) return &chain_vectors<double>;
#endif
  return nullptr;
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(ChainRowFnFor);

namespace simd {
ChainRowFn chain_row_fn(DType dtype) { return HWY_DYNAMIC_DISPATCH(ChainRowFnFor)(dtype); }
bool chains(OpKind op) {
  switch (op) {
#define EMBER_CHAIN_CASE(kind) case OpKind::k##kind:
    EMBER_CHAIN_UNARY(EMBER_CHAIN_CASE)
    EMBER_CHAIN_BINARY(EMBER_CHAIN_CASE)
#undef EMBER_CHAIN_CASE
    return true;
    default:
      return false;
  }
}
}  // namespace simd

}  // namespace ember::cpu
#endif

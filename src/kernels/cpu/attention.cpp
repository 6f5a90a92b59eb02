// Flash attention on the CPU: scaled dot-product attention forward and backward, compiled for
// every Highway target and chosen at run time.
// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/philox.h"
#include "ember/error.h"
#include "kernels/cpu/parallel.h"

// Note [flash attention]
// The forward cuts the queries of each (batch, head) into tiles of kBlockQ rows and walks the keys
// in tiles of kBlockK. For each pair it computes the scores S = (scale Q) K^T (kBlockQ x kBlockK,
// in a buffer that stays in L1/L2), masks them, and folds them into the running softmax of each
// row: the row max m, the sum l of exp(s - m) and the unnormalized output acc = sum exp(s - m) v,
// rescaled by exp(m_old - m_new) when the max grows. At the end out = acc / l and the row's
// log-sum-exp m + log l is kept for the backward. Memory: O(tile) per thread, never O(L S).
// Under a causal mask, key tiles above the diagonal are skipped (half the work).
//
// Tasks are (batch x head x query tile) and, when those are too few for the threads (a single
// query decoding against a long cache), each is split over chunks of keys (split-KV): every chunk
// keeps its own (m, l, acc) and a second pass merges them.
//
// The backward (FlashAttention-2's order) recomputes each score tile from Q, K and the saved lse,
// so P = exp(s - lse) exactly as the forward normalized it, and with D_i = dO_i . O_i:
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q.
// Tasks are (batch x key/value head x key chunk): a task owns its rows of dK and dV (summed over
// the query heads that share them under grouped-query attention) and adds into dQ, which is
// private to the task when the keys are in one chunk and otherwise summed from per-chunk buffers.
//
// All seven products (two forward, five backward) are one register-tiled micro-kernel: C (m x n)
// (+)= A (m x k) B (k x n) with A read through any two strides (so P^T and dS^T are never
// transposed) and B row-major. K and V tiles are packed transposed once per tile for the products
// that need K^T and V^T.

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

#include "kernels/cpu/exp_nonpositive-inl.h"  // exp_nonpositive, Note [attention exp]
#include "kernels/cpu/transpose-inl.h"        // load_8_rows_transposed, store_8_rows

constexpr int64_t kBlockQ = 64;  // query rows per tile
constexpr int64_t kBlockK = 64;  // keys per tile
constexpr int kRows = 6;         // register tile rows of the micro-kernel

// Vectors per register tile row: four on 512-bit vectors, two on narrower ones (16 registers).
template <class D>
constexpr int tile_vectors(D d) {
  return hn::MaxLanes(d) * sizeof(hn::TFromD<D>) >= 64 ? 4 : 2;
}

// C[0, R) x [0, NV vectors) (+)= A B over k.
template <int R, int NV, bool kAccumulate, class T>
HWY_INLINE void register_tile(const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c, int64_t ldc,
                              int64_t k) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = kAccumulate ? hn::LoadU(d, c + r * ldc + v * lanes) : hn::Zero(d);
  }
  for (int64_t p = 0; p < k; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, b + p * ldb + v * lanes);
    for (int r = 0; r < R; ++r) {
      const V av = hn::Set(d, a[r * a_rs + p * a_cs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], d, c + r * ldc + v * lanes);
  }
}

// R rows of C over all n columns: full register tiles, then narrower ones, then scalar columns.
template <int R, bool kAccumulate, class T>
HWY_INLINE void tile_rows(const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t n,
                          int64_t k) {
  const hn::ScalableTag<T> d;
  constexpr int kVectors = tile_vectors(hn::ScalableTag<T>());
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + kVectors * lanes <= n; j += kVectors * lanes) {
    register_tile<R, kVectors, kAccumulate>(a, a_rs, a_cs, b + j, ldb, c + j, ldc, k);
  }
  const int64_t rest = (n - j) / lanes;
  if constexpr (kVectors == 4) {
    if (rest == 3) register_tile<R, 3, kAccumulate>(a, a_rs, a_cs, b + j, ldb, c + j, ldc, k);
  }
  if (rest == 2) register_tile<R, 2, kAccumulate>(a, a_rs, a_cs, b + j, ldb, c + j, ldc, k);
  if (rest == 1) register_tile<R, 1, kAccumulate>(a, a_rs, a_cs, b + j, ldb, c + j, ldc, k);
  j += rest * lanes;
  // The last columns one at a time, each term by the vectors' multiply-add in a one-lane vector: a
  // plain `sum += a * b` is vectorized over k by the compiler (products rounded, then added) with
  // its remainder fused, so a column's rounding would depend on k (Note [causal diagonal tiles]).
  const hn::CappedTag<T, 1> d1;
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      auto sum = hn::Set(d1, kAccumulate ? c[r * ldc + j] : T(0));
      for (int64_t p = 0; p < k; ++p) {
        sum = hn::MulAdd(hn::Set(d1, a[r * a_rs + p * a_cs]), hn::Set(d1, b[p * ldb + j]), sum);
      }
      c[r * ldc + j] = hn::GetLane(sum);
    }
  }
}

// Note [causal diagonal tiles]: under the causal mask a tile whose first query and first key have
// the same index (the diagonal: kBlockQ == kBlockK, and tiles start at multiples of it) needs
// only its lower triangle, query r >= key c. Its products skip the rest by blocks of the register
// tile's rows, each block taking only the columns or terms that one of its rows can need:
//   kColumnsUpTo: rows are queries, columns keys (S = Q K^T, dP = dO V^T): columns [0, i + R),
//                 up to a whole vector;
//   kColumnsFrom: rows are keys, columns queries (St = K Q^T): columns from i, down to a vector;
//   kTermsUpTo:   rows are queries, terms keys (O += P V, dQ += dS K): terms [0, i + R);
//   kTermsFrom:   rows are keys, terms queries (dV += P^T dO, dK += dS^T Q): terms from i.
// Every element skipped is a masked score (set to -inf by the mask after the product) or a term
// whose weight is exactly 0 (exp(-inf), or dS, which the backward zeroes past the diagonal), so the
// sums are the full tile's, bit for bit, for finite inputs (Attention.CausalDiagonalTilesMatch...).
// The GPT step's attention (16 x 4 heads, L = 128, E = 48: three tile pairs a head, two of them
// diagonal), forward and backward on one thread, 5 alternated runs: median paired time ratio 0.84;
// at L = 1024 (16 of 136 tile pairs a head diagonal) within the runs' spread.
enum class Diagonal { kAll, kColumnsUpTo, kColumnsFrom, kTermsUpTo, kTermsFrom };
static_assert(kBlockQ == kBlockK, "diagonal tiles need square tiles (Note [causal diagonal tiles])");

// C (m x n) (+)= A (m x k) B (k x n): A(i, p) = a[i a_rs + p a_cs], B(p, j) = b[p ldb + j],
// C(i, j) = c[i ldc + j]; on a causal diagonal tile only what `part` says (Note [causal diagonal
// tiles]).
template <bool kAccumulate, class T>
void tile_gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t ldb, T* c,
               int64_t ldc, Diagonal part = Diagonal::kAll) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  // Rows [i, i + R) of C.
  const auto block = [&](auto rows, int64_t i) {
    constexpr int R = decltype(rows)::value;
    int64_t n0 = 0, n1 = n, k0 = 0, k1 = k;
    switch (part) {
      case Diagonal::kAll:
        break;
      case Diagonal::kColumnsUpTo:  // whole vectors: a column's sums do not depend on the tile that has it
        n1 = std::min(n, (i + R + lanes - 1) / lanes * lanes);
        break;
      case Diagonal::kColumnsFrom:
        n0 = std::min(n, i / lanes * lanes);
        break;
      case Diagonal::kTermsUpTo:
        k1 = std::min(k, i + R);
        break;
      case Diagonal::kTermsFrom:
        k0 = std::min(k, i);
        break;
    }
    tile_rows<R, kAccumulate>(a + i * a_rs + k0 * a_cs, a_rs, a_cs, b + k0 * ldb + n0, ldb, c + i * ldc + n0, ldc,
                              n1 - n0, k1 - k0);
  };
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) block(std::integral_constant<int, kRows>(), i);
  switch (m - i) {
    case 5:
      block(std::integral_constant<int, 5>(), i);
      break;
    case 4:
      block(std::integral_constant<int, 4>(), i);
      break;
    case 3:
      block(std::integral_constant<int, 3>(), i);
      break;
    case 2:
      block(std::integral_constant<int, 2>(), i);
      break;
    case 1:
      block(std::integral_constant<int, 1>(), i);
      break;
    default:
      break;
  }
}

// dst (cols x rows, leading dimension ld) = src (rows x cols, row stride src_rs, contiguous
// columns) transposed.
template <class T>
void pack_transposed(const T* src, int64_t src_rs, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = src + r * src_rs;
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = row[c];
  }
}

// The problem's operands, typed, and the masks' per-element rules.
template <class T>
struct Attention {
  const AttentionProblem& p;
  const T* q;
  const T* k;
  const T* v;
  int64_t group;  // query heads per key/value head
  detail::PhiloxDraw draw;
  float keep_below;
  T keep_scale;

  explicit Attention(const AttentionProblem& problem)
      : p(problem),
        q(static_cast<const T*>(problem.q)),
        k(static_cast<const T*>(problem.k)),
        v(static_cast<const T*>(problem.v)),
        group(problem.heads / problem.kv_heads),
        draw(detail::philox_draw(problem.seed, problem.first_block)),
        keep_below(static_cast<float>(1.0 - problem.dropout_p)),
        keep_scale(static_cast<T>(1.0 / (1.0 - problem.dropout_p))) {}

  int64_t bh(int64_t b, int64_t h) const { return b * p.heads + h; }
  const T* q_row(int64_t b, int64_t h, int64_t i) const {
    return q + b * p.q_strides[0] + h * p.q_strides[1] + i * p.q_strides[2];
  }
  const T* k_row(int64_t b, int64_t hk, int64_t j) const {
    return k + b * p.k_strides[0] + hk * p.k_strides[1] + j * p.k_strides[2];
  }
  const T* v_row(int64_t b, int64_t hk, int64_t j) const {
    return v + b * p.v_strides[0] + hk * p.v_strides[1] + j * p.v_strides[2];
  }

  // Qs (rows x E, contiguous) = scale * q rows [i0, i0 + rows) of (b, h).
  void load_scaled_queries(int64_t b, int64_t h, int64_t i0, int64_t rows, T* qs) const {
    const int64_t e = p.features;
    const T scale = static_cast<T>(p.scale);
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = q_row(b, h, i0 + r);
      for (int64_t c = 0; c < e; ++c) qs[r * e + c] = scale * src[c];
    }
  }

  // qt (E x padded, ld kBlockQ) = scale * q rows [i0, i0 + rows) of (b, h), transposed; the
  // columns from rows to padded are zeros.
  void load_queries_transposed(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t padded, T* qt) const {
    const int64_t e = p.features;
    const T scale = static_cast<T>(p.scale);
    int64_t r = 0;
#if HWY_TARGET != HWY_SCALAR
    // Blocks of 8 queries x 8 features through a register transpose (floats in 256-bit vectors).
    if constexpr (sizeof(T) == 4) {
      const hn::CappedTag<T, 8> d;
      if constexpr (hn::MaxLanes(d) == 8) {
        const int64_t ld = p.q_strides[2];
        const auto vs = hn::Set(d, scale);
        for (; r + 8 <= rows; r += 8) {
          const T* src = q_row(b, h, i0 + r);
          int64_t c = 0;
          for (; c + 8 <= e; c += 8) {
            hn::Vec<decltype(d)> v0, v1, v2, v3, v4, v5, v6, v7;
            load_8_rows_transposed(d, src + c, ld, v0, v1, v2, v3, v4, v5, v6, v7);
            store_8_rows(d, qt + c * kBlockQ + r, kBlockQ, hn::Mul(vs, v0), hn::Mul(vs, v1), hn::Mul(vs, v2),
                         hn::Mul(vs, v3), hn::Mul(vs, v4), hn::Mul(vs, v5), hn::Mul(vs, v6), hn::Mul(vs, v7));
          }
          for (int64_t i = 0; i < 8; ++i) {
            for (int64_t x = c; x < e; ++x) qt[x * kBlockQ + r + i] = scale * src[i * ld + x];
          }
        }
      }
    }
#endif
    for (; r < rows; ++r) {
      const T* src = q_row(b, h, i0 + r);
      for (int64_t c = 0; c < e; ++c) qt[c * kBlockQ + r] = scale * src[c];
    }
    for (int64_t c = 0; c < e; ++c) std::fill(qt + c * kBlockQ + rows, qt + c * kBlockQ + padded, T(0));
  }

  // mask_scores for transposed scores st (cols keys x rows queries, ld).
  void mask_scores_transposed(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* st,
                              int64_t ld) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (p.causal) {
      for (int64_t c = 0; c < cols; ++c) {  // key j0 + c is masked for queries i < j0 + c
        const int64_t first_kept = std::min<int64_t>(std::max<int64_t>(j0 + c - i0, 0), rows);
        std::fill(st + c * ld, st + c * ld + first_kept, kNegInf);
      }
      return;
    }
    if (p.mask == nullptr) return;
    const int64_t* ms = p.mask_strides;
    const int64_t base = b * ms[0] + h * ms[1] + i0 * ms[2] + j0 * ms[3];
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t column = base + c * ms[3];
      T* sc = st + c * ld;
      if (p.mask_dtype == kBool) {
        const bool* mk = static_cast<const bool*>(p.mask) + column;
        for (int64_t r = 0; r < rows; ++r) {
          if (!mk[r * ms[2]]) sc[r] = kNegInf;
        }
      } else {
        const T* mk = static_cast<const T*>(p.mask) + column;
        for (int64_t r = 0; r < rows; ++r) sc[r] += mk[r * ms[2]];
      }
    }
  }

  // Applies the mask (or the causal rule) to the score tile s (rows x cols, ld) of queries from i0
  // and keys from j0: masked scores become -inf, a float mask is added.
  void mask_scores(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* s, int64_t ld) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (p.causal) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t first_masked = std::max<int64_t>(i0 + r + 1 - j0, 0);
        for (int64_t c = first_masked; c < cols; ++c) s[r * ld + c] = kNegInf;
      }
      return;
    }
    if (p.mask == nullptr) return;
    const int64_t* ms = p.mask_strides;
    const int64_t base = b * ms[0] + h * ms[1];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = base + (i0 + r) * ms[2] + j0 * ms[3];
      if (p.mask_dtype == kBool) {
        const bool* m = static_cast<const bool*>(p.mask) + row;
        for (int64_t c = 0; c < cols; ++c) {
          if (!m[c * ms[3]]) s[r * ld + c] = kNegInf;
        }
      } else {
        const T* m = static_cast<const T*>(p.mask) + row;
        for (int64_t c = 0; c < cols; ++c) s[r * ld + c] += m[c * ms[3]];
      }
    }
  }

  // The dropout factors (1 / (1 - p) kept, 0 dropped) of row i of (b, h), keys [j0, j0 + cols).
  void dropout_row(int64_t bh_index, int64_t i, int64_t j0, int64_t cols, T* factor) const {
    const uint64_t first = static_cast<uint64_t>((bh_index * p.length + i) * p.keys + j0);
    uint64_t block = ~uint64_t{0};
    std::array<uint32_t, 4> words{};
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t index = first + static_cast<uint64_t>(c);
      if (index / 2 != block) {
        block = index / 2;
        words = detail::philox_block(draw, block);
      }
      const float u = static_cast<float>(words[2 * (index & 1)] >> 8) * (1.0f / 16777216.0f);
      factor[c] = u < keep_below ? keep_scale : T(0);
    }
  }
};

// x[j] = exp(x[j] - shift) (0 where x is -inf); returns the sum.
template <class T>
T exp_shifted(T* x, int64_t n, T shift) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, shift);
  auto vsum = hn::Zero(d);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto e = exp_nonpositive(d, hn::Sub(hn::LoadU(d, x + j), vs));
    hn::StoreU(e, d, x + j);
    vsum = hn::Add(vsum, e);
  }
  T sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  for (; j < n; ++j) {
    x[j] = std::exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

template <class T>
void scale_row(T* x, int64_t n, T factor) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vf = hn::Set(d, factor);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), vf), d, x + j);
  for (; j < n; ++j) x[j] *= factor;
}

template <class T>
int64_t round_up_to_lanes(int64_t n) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  return (n + lanes - 1) / lanes * lanes;
}

// One key tile of the online softmax over transposed scores st (cols keys x `padded` queries, ld),
// a query per lane: folds the tile's max into m, replaces the scores by exp(s - m_new), updates the
// sums l and writes each query's rescale factor exp(m_old - m_new) to alpha. A query with no key
// so far (m = -inf) keeps weights 0 and factor 1... as exp(-inf - 0) = 0 against a safe max of 0.
// Returns whether any factor differs from 1.
template <class T>
bool online_softmax_columns(T* st, int64_t ld, int64_t cols, int64_t padded, T* m, T* l, T* alpha) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<T>::infinity());
  const auto one = hn::Set(d, T(1));
  bool rescale = false;
  for (int64_t r = 0; r < padded; r += lanes) {
    const auto m_old = hn::LoadU(d, m + r);
    auto m_new = m_old;
    for (int64_t c = 0; c < cols; ++c) m_new = hn::Max(m_new, hn::LoadU(d, st + c * ld + r));
    const auto safe = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const auto a = exp_nonpositive(d, hn::Sub(m_old, safe));
    auto sum = hn::Mul(hn::LoadU(d, l + r), a);
    for (int64_t c = 0; c < cols; ++c) {
      const auto e = exp_nonpositive(d, hn::Sub(hn::LoadU(d, st + c * ld + r), safe));
      hn::StoreU(e, d, st + c * ld + r);
      sum = hn::Add(sum, e);
    }
    hn::StoreU(m_new, d, m + r);
    hn::StoreU(sum, d, l + r);
    hn::StoreU(a, d, alpha + r);
    rescale = rescale || !hn::AllTrue(d, hn::Eq(a, one));
  }
  return rescale;
}

// Per-thread buffers, grown as needed and kept between calls.
template <class T>
T* scratch(std::vector<T>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// The split of the work: tasks over (bh, query tile, key chunk).
struct ForwardPlan {
  int64_t query_tiles, key_tiles, chunks, tiles_per_chunk, tasks;
};

ForwardPlan plan_forward(const AttentionProblem& p) {
  ForwardPlan plan{};
  plan.query_tiles = (p.length + kBlockQ - 1) / kBlockQ;
  plan.key_tiles = (p.keys + kBlockK - 1) / kBlockK;
  const int64_t base = p.batch * p.heads * plan.query_tiles;
  plan.chunks = 1;
  // Split the keys only when the other dims leave threads idle and the keys are long (decode), and
  // never under a mask: a masked call is a prompt processed in chunks through a cache, whose rows
  // must sum as the causal pass over the whole prompt does (which is never split), whatever the
  // thread count, so that a prompt's keys and values do not depend on how it was cut.
  if (p.threads > 1 && base < 2 * p.threads && plan.key_tiles >= 4 && !p.causal && p.mask == nullptr) {
    plan.chunks = std::min<int64_t>(plan.key_tiles / 2, (2 * p.threads + base - 1) / base);
  }
  plan.tiles_per_chunk = (plan.key_tiles + plan.chunks - 1) / std::max<int64_t>(plan.chunks, 1);
  plan.chunks = plan.key_tiles == 0 ? 1 : (plan.key_tiles + plan.tiles_per_chunk - 1) / plan.tiles_per_chunk;
  plan.tasks = base * plan.chunks;
  return plan;
}

template <class T>
void forward_typed(const AttentionProblem& p, T* out, T* lse) {
  const Attention<T> at(p);
  const ForwardPlan plan = plan_forward(p);
  const int64_t e = p.features, ev = p.value_features, length = p.length;
  const bool split = plan.chunks > 1;
  // Split-KV partials: per chunk, per (bh, row): m, l and acc (Ev).
  std::vector<T> part_ml, part_acc;
  if (split) {
    part_ml.resize(static_cast<size_t>(plan.chunks * p.batch * p.heads * length * 2));
    part_acc.resize(static_cast<size_t>(plan.chunks * p.batch * p.heads * length * ev));
  }
  parallel_tasks(plan.tasks, p.threads, [&](int64_t task) {
    thread_local std::vector<T> qs_buf, s_buf, kt_buf, acc_buf, ml_buf, drop_buf;
    const int64_t chunk = task % plan.chunks;
    const int64_t tile = (task / plan.chunks) % plan.query_tiles;
    const int64_t bh = task / (plan.chunks * plan.query_tiles);
    const int64_t b = bh / p.heads, h = bh % p.heads, hk = h / at.group;
    const int64_t i0 = tile * kBlockQ, rows = std::min(kBlockQ, length - i0);
    // The scores are kept transposed, keys by queries (St, ld kBlockQ), so that K is read in place
    // and the softmax runs down columns with a query per lane: no horizontal reductions.
    T* qt = scratch(qs_buf, e * kBlockQ);
    T* st = scratch(s_buf, kBlockK * kBlockQ);
    T* acc = scratch(acc_buf, kBlockQ * ev);
    T* state = scratch(ml_buf, 3 * kBlockQ);  // m, l and the rescale factor per query
    T* factor = p.dropout_p > 0 ? scratch(drop_buf, kBlockK) : nullptr;
    T* m = state;
    T* l = state + kBlockQ;
    T* alpha = state + 2 * kBlockQ;
    std::fill(m, m + kBlockQ, -std::numeric_limits<T>::infinity());
    std::fill(l, l + kBlockQ, T(0));
    std::fill(acc, acc + rows * ev, T(0));
    const int64_t padded = round_up_to_lanes<T>(rows);  // whole vectors of queries
    at.load_queries_transposed(b, h, i0, rows, padded, qt);

    int64_t j_begin = chunk * plan.tiles_per_chunk * kBlockK;
    int64_t j_end = std::min(p.keys, (chunk + 1) * plan.tiles_per_chunk * kBlockK);
    if (p.causal) j_end = std::min(j_end, i0 + rows);  // keys past the tile's last query are masked
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, j_end - j0);
      // St = K (scale Q)^T
      const bool diagonal = p.causal && j0 == i0;  // Note [causal diagonal tiles]
      tile_gemm<false>(cols, padded, e, at.k_row(b, hk, j0), p.k_strides[2], 1, qt, kBlockQ, st, kBlockQ,
                       diagonal ? Diagonal::kColumnsFrom : Diagonal::kAll);
      at.mask_scores_transposed(b, h, i0, rows, j0, cols, st, kBlockQ);
      const bool rescale = online_softmax_columns(st, kBlockQ, cols, padded, m, l, alpha);
      if (rescale) {
        for (int64_t r = 0; r < rows; ++r) {
          if (alpha[r] != T(1)) scale_row(acc + r * ev, ev, alpha[r]);
        }
      }
      if (factor != nullptr) {
        for (int64_t r = 0; r < rows; ++r) {
          at.dropout_row(bh, i0 + r, j0, cols, factor);
          for (int64_t c = 0; c < cols; ++c) st[c * kBlockQ + r] *= factor[c];
        }
      }
      // acc += P V, P read through St
      tile_gemm<true>(rows, ev, cols, st, 1, kBlockQ, at.v_row(b, hk, j0), p.v_strides[2], acc, ev,
                      diagonal ? Diagonal::kTermsUpTo : Diagonal::kAll);
    }

    if (!split) {
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = bh * length + i0 + r;
        T* o = out + row * ev;
        if (l[r] > T(0)) {
          const T inv = T(1) / l[r];
          for (int64_t c = 0; c < ev; ++c) o[c] = acc[r * ev + c] * inv;
          lse[row] = m[r] + std::log(l[r]);
        } else {
          std::fill(o, o + ev, T(0));
          lse[row] = std::numeric_limits<T>::infinity();
        }
      }
    } else {
      const int64_t rows_total = p.batch * p.heads * length;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = bh * length + i0 + r;
        T* pm = part_ml.data() + (chunk * rows_total + row) * 2;
        pm[0] = m[r];
        pm[1] = l[r];
        std::copy(acc + r * ev, acc + (r + 1) * ev, part_acc.data() + (chunk * rows_total + row) * ev);
      }
    }
  });
  if (!split) return;
  // Merge the chunks: weights exp(m_c - M).
  const int64_t rows_total = p.batch * p.heads * length;
  parallel_for_threads(p.threads, 0, rows_total, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      T big = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < plan.chunks; ++c) big = std::max(big, part_ml[(c * rows_total + row) * 2]);
      T* o = out + row * ev;
      std::fill(o, o + ev, T(0));
      if (big == -std::numeric_limits<T>::infinity()) {
        lse[row] = std::numeric_limits<T>::infinity();
        continue;
      }
      T total = 0;
      for (int64_t c = 0; c < plan.chunks; ++c) {
        const T* pm = part_ml.data() + (c * rows_total + row) * 2;
        if (pm[1] == T(0)) continue;
        const T w = std::exp(pm[0] - big);
        total += pm[1] * w;
        const T* a = part_acc.data() + (c * rows_total + row) * ev;
        for (int64_t x = 0; x < ev; ++x) o[x] += w * a[x];
      }
      const T inv = T(1) / total;
      for (int64_t x = 0; x < ev; ++x) o[x] *= inv;
      lse[row] = big + std::log(total);
    }
  });
}

template <class T>
void backward_typed(const AttentionProblem& p, const T* out, const T* lse, const T* grad_out, T* grad_q, T* grad_k,
                    T* grad_v) {
  const Attention<T> at(p);
  const int64_t e = p.features, ev = p.value_features, length = p.length, keys = p.keys;
  const int64_t rows_total = p.batch * p.heads * length;
  // D_i = dO_i . O_i
  std::vector<T> dot(static_cast<size_t>(rows_total));
  parallel_for_threads(p.threads, 0, rows_total, 256, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      T sum = 0;
      for (int64_t c = 0; c < ev; ++c) sum += grad_out[row * ev + c] * out[row * ev + c];
      dot[static_cast<size_t>(row)] = sum;
    }
  });
  const int64_t key_tiles = (keys + kBlockK - 1) / kBlockK;
  const int64_t base = p.batch * p.kv_heads;
  int64_t chunks = 1;
  if (p.threads > 1 && base < 2 * p.threads && key_tiles >= 2) {
    chunks = std::min<int64_t>(key_tiles, (2 * p.threads + base - 1) / base);
  }
  const int64_t tiles_per_chunk = key_tiles == 0 ? 1 : (key_tiles + chunks - 1) / chunks;
  if (key_tiles > 0) chunks = (key_tiles + tiles_per_chunk - 1) / tiles_per_chunk;
  const int64_t q_elements = rows_total * e;
  std::vector<T> dq_parts;
  if (chunks > 1) dq_parts.assign(static_cast<size_t>((chunks - 1) * q_elements), T(0));  // chunks 1...
  std::fill(grad_q, grad_q + q_elements, T(0));
  std::fill(grad_k, grad_k + p.batch * p.kv_heads * keys * e, T(0));
  std::fill(grad_v, grad_v + p.batch * p.kv_heads * keys * ev, T(0));

  parallel_tasks(base * chunks, p.threads, [&](int64_t task) {
    thread_local std::vector<T> qs_buf, kt_buf, vt_buf, s_buf, dp_buf, pd_buf, dk_buf, dv_buf, drop_buf;
    const int64_t chunk = task % chunks;
    const int64_t b = (task / chunks) / p.kv_heads, hk = (task / chunks) % p.kv_heads;
    T* qs = scratch(qs_buf, kBlockQ * e);
    T* kt = scratch(kt_buf, e * kBlockK);
    T* vt = scratch(vt_buf, ev * kBlockK);
    T* s = scratch(s_buf, kBlockQ * kBlockK);
    T* dp = scratch(dp_buf, kBlockQ * kBlockK);
    T* pd = p.dropout_p > 0 ? scratch(pd_buf, kBlockQ * kBlockK) : s;  // the dropped weights
    T* factor = p.dropout_p > 0 ? scratch(drop_buf, kBlockK) : nullptr;
    T* dk = scratch(dk_buf, kBlockK * e);
    T* dv = scratch(dv_buf, kBlockK * ev);
    T* dq_base = chunk == 0 ? grad_q : dq_parts.data() + (chunk - 1) * q_elements;  // chunk 0: grad_q
    const int64_t j_begin = chunk * tiles_per_chunk * kBlockK;
    const int64_t j_end = std::min(keys, (chunk + 1) * tiles_per_chunk * kBlockK);
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, j_end - j0);
      pack_transposed(at.k_row(b, hk, j0), p.k_strides[2], cols, e, kt, kBlockK);
      pack_transposed(at.v_row(b, hk, j0), p.v_strides[2], cols, ev, vt, kBlockK);
      std::fill(dk, dk + cols * e, T(0));
      std::fill(dv, dv + cols * ev, T(0));
      for (int64_t h = hk * at.group; h < (hk + 1) * at.group; ++h) {
        const int64_t bh = at.bh(b, h);
        const int64_t i_first = p.causal ? (j0 / kBlockQ) * kBlockQ : 0;
        for (int64_t i0 = i_first; i0 < length; i0 += kBlockQ) {
          const int64_t rows = std::min(kBlockQ, length - i0);
          const int64_t row0 = bh * length + i0;
          at.load_scaled_queries(b, h, i0, rows, qs);
          const bool diagonal = p.causal && i0 == j0;  // Note [causal diagonal tiles]
          const auto part = [diagonal](Diagonal d) { return diagonal ? d : Diagonal::kAll; };
          tile_gemm<false>(rows, cols, e, qs, e, 1, kt, kBlockK, s, kBlockK, part(Diagonal::kColumnsUpTo));
          at.mask_scores(b, h, i0, rows, j0, cols, s, kBlockK);
          for (int64_t r = 0; r < rows; ++r) {  // P = exp(s - lse)
            T* sr = s + r * kBlockK;
            exp_shifted(sr, cols, lse[row0 + r]);
            if (factor != nullptr) {
              at.dropout_row(bh, i0 + r, j0, cols, factor);
              for (int64_t c = 0; c < cols; ++c) pd[r * kBlockK + c] = sr[c] * factor[c];
            }
          }
          const T* go = grad_out + row0 * ev;
          // dV += Pd^T dO
          tile_gemm<true>(cols, ev, rows, pd, 1, kBlockK, go, ev, dv, ev, part(Diagonal::kTermsFrom));
          // dP = dO V^T
          tile_gemm<false>(rows, cols, ev, go, ev, 1, vt, kBlockK, dp, kBlockK, part(Diagonal::kColumnsUpTo));
          // dS = P (dP factor - D); 0 past the diagonal, where dP was not computed
          for (int64_t r = 0; r < rows; ++r) {
            const T d_row = dot[static_cast<size_t>(row0 + r)];
            T* dr = dp + r * kBlockK;
            const T* sr = s + r * kBlockK;
            const int64_t kept = diagonal ? std::min(cols, r + 1) : cols;
            if (factor != nullptr) {
              at.dropout_row(bh, i0 + r, j0, cols, factor);
              for (int64_t c = 0; c < kept; ++c) dr[c] = sr[c] * (dr[c] * factor[c] - d_row);
            } else {
              for (int64_t c = 0; c < kept; ++c) dr[c] = sr[c] * (dr[c] - d_row);
            }
            std::fill(dr + kept, dr + cols, T(0));
          }
          // dK += dS^T (scale Q)
          tile_gemm<true>(cols, e, rows, dp, 1, kBlockK, qs, e, dk, e, part(Diagonal::kTermsFrom));
          // dQ += dS K (times scale once at the end)
          tile_gemm<true>(rows, e, cols, dp, kBlockK, 1, at.k_row(b, hk, j0), p.k_strides[2], dq_base + row0 * e, e,
                          part(Diagonal::kTermsUpTo));
        }
      }
      const int64_t kv_row = (b * p.kv_heads + hk) * keys + j0;
      std::copy(dk, dk + cols * e, grad_k + kv_row * e);
      std::copy(dv, dv + cols * ev, grad_v + kv_row * ev);
    }
  });
  const T scale = static_cast<T>(p.scale);
  parallel_for_threads(p.threads, 0, q_elements, 1 << 14, [&](int64_t x0, int64_t x1) {
    for (int64_t c = 1; c < chunks; ++c) {
      const T* part = dq_parts.data() + (c - 1) * q_elements;
      for (int64_t x = x0; x < x1; ++x) grad_q[x] += part[x];
    }
    scale_row(grad_q + x0, x1 - x0, scale);
  });
}

}  // namespace

void AttentionForward(const AttentionProblem& p, void* out, void* lse) {
  if (p.dtype == kFloat32) {
    forward_typed(p, static_cast<float*>(out), static_cast<float*>(lse));
  } else {
    forward_typed(p, static_cast<double*>(out), static_cast<double*>(lse));
  }
}

void AttentionBackward(const AttentionProblem& p, const void* out, const void* lse, const void* grad_out, void* grad_q,
                       void* grad_k, void* grad_v) {
  if (p.dtype == kFloat32) {
    backward_typed(p, static_cast<const float*>(out), static_cast<const float*>(lse),
                   static_cast<const float*>(grad_out), static_cast<float*>(grad_q), static_cast<float*>(grad_k),
                   static_cast<float*>(grad_v));
  } else {
    backward_typed(p, static_cast<const double*>(out), static_cast<const double*>(lse),
                   static_cast<const double*>(grad_out), static_cast<double*>(grad_q), static_cast<double*>(grad_k),
                   static_cast<double*>(grad_v));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "base/kernel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {

HWY_EXPORT(AttentionForward);
HWY_EXPORT(AttentionBackward);

void attention_forward(const AttentionProblem& p, void* out, void* lse) {
  EMBER_CHECK(p.dtype == kFloat32 || p.dtype == kFloat64,
              "[scaled_dot_product_attention] the CPU kernel takes float32 or float64, got ", p.dtype);
  if (p.batch * p.heads * p.length == 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionForward)(p, out, lse);
}

void attention_backward(const AttentionProblem& p, const void* out, const void* lse, const void* grad_out, void* grad_q,
                        void* grad_k, void* grad_v) {
  EMBER_CHECK(p.dtype == kFloat32 || p.dtype == kFloat64,
              "[scaled_dot_product_attention] the CPU kernel takes float32 or float64, got ", p.dtype);
  if (p.batch * p.kv_heads == 0) return;  // every gradient is empty
  HWY_DYNAMIC_DISPATCH(AttentionBackward)(p, out, lse, grad_out, grad_q, grad_k, grad_v);
}

// --- registry entries ----------------------------------------------------------------------------

namespace {

// The problem of a call: inputs q, k, v (4-D, last dim contiguous), mask (4-D or undefined).
AttentionProblem problem_of(const KernelCall& c) {
  const Operand &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2], &mask = c.inputs[3];
  const AttentionAttrs& a = c.get<AttentionAttrs>();
  AttentionProblem p;
  p.dtype = q.dtype;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.kv_heads = k.size(1);
  p.length = q.size(2);
  p.keys = k.size(2);
  p.features = q.size(3);
  p.value_features = v.size(3);
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  for (int d = 0; d < 3; ++d) {
    p.q_strides[d] = q.stride(d);
    p.k_strides[d] = k.stride(d);
    p.v_strides[d] = v.stride(d);
  }
  if (mask.defined()) {
    p.mask = mask.data;
    p.mask_dtype = mask.dtype;
    for (int d = 0; d < 4; ++d) p.mask_strides[d] = mask.stride(d);
  }
  p.scale = a.scale;
  p.causal = a.is_causal;
  p.dropout_p = a.dropout_p;
  p.seed = a.seed;
  p.first_block = a.first_block;
  // Threads only when the products are worth a hand-out (a decode step of a small model is not).
  const double flops = 2.0 * static_cast<double>(p.batch * p.heads * p.length) * static_cast<double>(p.keys) *
                       static_cast<double>(p.features + p.value_features);
  p.threads = flops < 2e5 ? 1 : num_threads();
  return p;
}

// inputs: q, k, v, mask; outputs: out, lse.
void attention_kernel(const KernelCall& c) { attention_forward(problem_of(c), c.outputs[0].data, c.outputs[1].data); }

// inputs: q, k, v, mask, out, lse, grad_out; outputs: grad_q, grad_k, grad_v.
void attention_backward_kernel(const KernelCall& c) {
  attention_backward(problem_of(c), c.inputs[4].data, c.inputs[5].data, c.inputs[6].data, c.outputs[0].data,
                     c.outputs[1].data, c.outputs[2].data);
}

}  // namespace

void register_attention_kernels(KernelTable& table) {
  table.add(OpKind::kScaledDotProductAttention, DeviceType::kCPU, attention_kernel, kFloat32Or64);
  table.add(OpKind::kAttentionGrad, DeviceType::kCPU, attention_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

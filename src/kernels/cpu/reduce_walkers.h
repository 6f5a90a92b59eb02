// The reductions (sum, prod, amax, amin, argmax, argmin, all, any) as small functors (identity,
// load, combine) and the walkers that run them over a ReduceLayout (Note [reduction paths]),
// cutting the work by sizes alone (Note [deterministic reductions]). Target-independent: the scalar
// path (run_scalar: scalar row loops, every dtype) is instantiated in reduce.cpp and
// reduce_extreme.cpp, the vector path (reduce-inl.h's row loops, float types) per Highway target in
// reduce_simd.cpp and reduce_extreme_simd.cpp. Include it before HWY_BEFORE_NAMESPACE, never inside
// a target's namespace: its code is then compiled for the baseline target in every file, so
// whichever copy of an instantiation the linker keeps runs on every CPU.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"

// Note [reduction paths]
// After make_reduce_layout a reduction takes one of three paths:
//  (a) inner: the innermost reduced dim has unit stride. Each output reduces contiguous rows with
//      four vector accumulators (horizontal accumulation), then combines the lanes.
//  (b) outer: the innermost kept dim has unit stride and no reduced dim does. A tile of adjacent
//      outputs accumulates whole input rows, four at a time (vertical: acc[j] op= row[j]).
//  (c) strided: neither; path (a)'s walk with strided scalar rows.
// Reductions of at most kSmallReduce elements per output skip the machinery: a plain loop each.
//
// Note [deterministic reductions]
// The reduced elements of an output are cut into pieces (vector blocks, rows, chunks of kChunk
// elements, blocks of kRowBlock rows) by their sizes alone, and the pieces' partial results are
// combined in a fixed order as a balanced binary tree (Cascade). So on a given CPU (the vector
// width is part of the cut) a result is bitwise the same for any number of threads, and the
// rounding error of a float sum grows with log n (plus one fixed-size block) instead of with n.

namespace ember::cpu::reduction {

// Elements of one output's reduction that one task reduces (path a), and the least work per task
// when path (b) splits rows.
inline constexpr int64_t kChunk = int64_t{1} << 15;
// Elements below which a reduction stays on one thread.
inline constexpr int64_t kReduceGrain = 32768;
// Four-vector steps one set of vector accumulators takes before its lanes join the cascade.
inline constexpr int64_t kBlockSteps = 32;
// Elements one scalar float accumulator takes before joining the cascade.
inline constexpr int64_t kScalarBlock = 32;
// Rows a vertical float-sum tile accumulates before joining the cascade, and the tile's width.
inline constexpr int64_t kRowBlock = 32;
inline constexpr int64_t kTile = 2048;
// Path (b)'s narrowest tile (four AVX-512 vectors of float) and the tiles it aims for.
inline constexpr int64_t kMinTile = 64;
inline constexpr int64_t kTilesWanted = 16;
// Path (b) splits the rows of few, tall tiles until it has this many tasks.
inline constexpr int64_t kMinTasks = 16;
// Reductions this short per output run as one plain loop.
inline constexpr int64_t kSmallReduce = 16;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// --- the reductions ----------------------------------------------------------------------------------
// Each gives: Acc<T> (accumulator type), Out<T> (default output type) and AltOut<T> (another output
// type it can write, or void), kAccepts<T>, kPairwise<T> (whether the order of combining changes
// the rounding, so pieces must stay small), kVectorForm (whether reduce-inl.h has a vector form for
// float types), identity<T>(), load<T>(x, index) (an element at position `index` along
// the reduced dim, as an accumulator), combine(a, b) (a holds earlier elements than b) and
// finish<Out>(acc).

inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

struct PlainFinish {
  template <class Out, class A>
  static Out finish(A a) {
    return static_cast<Out>(a);
  }
};

// Sum and Prod: floats accumulate in compute_t<T>, integers and bool in int64 (wrapping);
// float16/bfloat16 may also write float32.
template <bool kProduct>
struct SumOrProd : PlainFinish {
  template <class T>
  using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;
  template <class T>
  using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
  template <class T>
  using AltOut = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, void>;
  template <class T>
  static constexpr bool kAccepts = true;
  template <class T>
  static constexpr bool kPairwise = std::is_floating_point_v<Acc<T>>;
  static constexpr bool kVectorForm = true;

  template <class T>
  static Acc<T> identity() {
    return Acc<T>(kProduct ? 1 : 0);
  }
  template <class T>
  static Acc<T> load(T x, int64_t) {
    return static_cast<Acc<T>>(static_cast<compute_t<T>>(x));
  }
  template <class A>
  static A combine(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return kProduct ? wrap_mul(a, b) : wrap_add(a, b);
    } else {
      return kProduct ? a * b : a + b;
    }
  }
};
using Sum = SumOrProd<false>;
using Prod = SumOrProd<true>;

// Amax (kMax) and Amin: NaN wins.
template <bool kMax>
struct Extreme : PlainFinish {
  template <class T>
  using Acc = compute_t<T>;
  template <class T>
  using Out = T;
  template <class T>
  using AltOut = void;
  template <class T>
  static constexpr bool kAccepts = true;
  template <class T>
  static constexpr bool kPairwise = false;
  static constexpr bool kVectorForm = true;

  template <class T>
  static Acc<T> identity() {
    using A = Acc<T>;
    if constexpr (std::is_floating_point_v<A>) {
      return kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    } else {
      return kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
    }
  }
  template <class T>
  static Acc<T> load(T x, int64_t) {
    return static_cast<Acc<T>>(x);
  }
  template <class A>
  static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    if constexpr (kMax) {
      return b > a ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
};

// All (kAll) and Any: element != 0 (nan counts as true). uint8 inputs may ask for uint8 output.
// The accumulator is a uint8_t 0/1 and combines bitwise: loops over it vectorize, over bool not.
template <bool kAll>
struct Truth : PlainFinish {
  template <class T>
  using Acc = uint8_t;
  template <class T>
  using Out = bool;
  template <class T>
  using AltOut = std::conditional_t<std::is_same_v<T, uint8_t>, uint8_t, void>;
  template <class T>
  static constexpr bool kAccepts = true;
  template <class T>
  static constexpr bool kPairwise = false;
  static constexpr bool kVectorForm = false;

  template <class T>
  static uint8_t identity() {
    return kAll ? 1 : 0;
  }
  template <class T>
  static uint8_t load(T x, int64_t) {
    return static_cast<compute_t<T>>(x) != compute_t<T>(0) ? 1 : 0;
  }
  static uint8_t combine(uint8_t a, uint8_t b) { return static_cast<uint8_t>(kAll ? (a & b) : (a | b)); }
};

template <class C>
struct ArgAcc {
  C value;
  int64_t index;  // -1: nothing seen yet
};

// Argmax (kMax) and Argmin: the first index of the extreme value; the first NaN wins.
template <bool kMax>
struct Arg {
  template <class T>
  using Acc = ArgAcc<compute_t<T>>;
  template <class T>
  using Out = int64_t;
  template <class T>
  using AltOut = void;
  template <class T>
  static constexpr bool kAccepts = !std::is_same_v<T, bool>;
  template <class T>
  static constexpr bool kPairwise = false;
  static constexpr bool kVectorForm = false;

  template <class T>
  static Acc<T> identity() {
    return {compute_t<T>(0), -1};
  }
  template <class T>
  static Acc<T> load(T x, int64_t index) {
    return {static_cast<compute_t<T>>(x), index};
  }
  template <class C>
  static ArgAcc<C> combine(ArgAcc<C> a, ArgAcc<C> b) {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if constexpr (std::is_floating_point_v<C>) {
      if (a.value != a.value) return a;
      if (b.value != b.value) return b;
    }
    const bool b_wins = kMax ? b.value > a.value : b.value < a.value;
    return b_wins ? b : a;
  }
  template <class Out, class C>
  static Out finish(ArgAcc<C> a) {
    return a.index;
  }
};

template <class R, class T>
using AccOf = typename R::template Acc<T>;

// --- walking and combining -------------------------------------------------------------------------

// Combines values pushed in order as a balanced binary tree: level k holds the combination of 2^k
// consecutive pushes, merged like a binary counter's carries (Note [deterministic reductions]).
//
// Its members are always inlined: the vector row loops (reduce-inl.h) call them, and an
// out-of-line copy is compiled once, for the baseline target, in legacy SSE encoding, which after
// the caller's 256- and 512-bit instructions costs a state transition per call (a sum over rows of
// 64 floats measured 160 us for 2048 rows on AVX-512 against 27 us on SSE4).
template <class R, class A>
class Cascade {
 public:
  [[gnu::always_inline]] void push(A value) {
    int level = 0;
    for (uint64_t count = count_; (count & 1u) != 0; count >>= 1u, ++level) value = R::combine(levels_[level], value);
    levels_[level] = value;
    ++count_;
  }
  // Every pushed value combined, oldest first; `identity` when nothing was pushed.
  [[gnu::always_inline]] A result(A identity) const {
    A total = identity;
    bool first = true;
    for (int level = std::bit_width(count_) - 1; level >= 0; --level) {
      if (((count_ >> level) & 1u) == 0) continue;
      total = first ? levels_[level] : R::combine(total, levels_[level]);
      first = false;
    }
    return total;
  }

 private:
  static constexpr int kLevels = 64;
  A levels_[kLevels];
  uint64_t count_ = 0;
};

// Walks the offsets of a group of dims (outermost first) in row-major order.
class Walker {
 public:
  Walker(int ndim, const int64_t* sizes, const int64_t* strides) : ndim_(ndim), sizes_(sizes), strides_(strides) {}
  void seek(int64_t linear) {
    offset_ = 0;
    for (int d = ndim_ - 1; d >= 0; --d) {
      index_[d] = linear % sizes_[d];
      linear /= sizes_[d];
      offset_ += index_[d] * strides_[d];
    }
  }
  void next() {
    for (int d = ndim_ - 1; d >= 0; --d) {
      if (++index_[d] < sizes_[d]) {
        offset_ += strides_[d];
        return;
      }
      offset_ -= (sizes_[d] - 1) * strides_[d];
      index_[d] = 0;
    }
  }
  int64_t offset() const { return offset_; }

 private:
  int ndim_;
  const int64_t* sizes_;
  const int64_t* strides_;
  int64_t index_[kMaxDims] = {};
  int64_t offset_ = 0;
};

// The row loops a walker can hand off. Rows<R, T> gives kContiguous and contiguous(p, n) (n
// contiguous elements reduced), and accumulate(acc, rows, count, n): acc[j] = combine(acc[j],
// rows[0][j], ..., rows[count - 1][j]) for the leading columns it handles, returning how many; the
// walker does the rest. ScalarRows leaves everything to the walker; VectorRows (reduce-inl.h, per
// Highway target) runs Highway loops.
template <class R, class T>
struct ScalarRows {
  static constexpr bool kContiguous = false;
  static AccOf<R, T> contiguous(const T*, int64_t) { return R::template identity<T>(); }
  static int64_t accumulate(AccOf<R, T>*, const T* const*, int, int64_t) { return 0; }
};

// --- path (a) and (c): rows along the innermost reduced dim -----------------------------------------

// n elements p[0], p[stride], ... at positions first, first + 1, ... along the reduced dim.
template <class R, class T, template <class, class> class Rows>
AccOf<R, T> reduce_row(const T* p, int64_t stride, int64_t n, int64_t first) {
  if constexpr (Rows<R, T>::kContiguous) {
    if (stride == 1) return Rows<R, T>::contiguous(p, n);
  }
  using A = AccOf<R, T>;
  const int64_t block = R::template kPairwise<T> ? kScalarBlock : std::max<int64_t>(n, 1);
  Cascade<R, A> cascade;
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t end = std::min(n, begin + block);
    A acc = R::template identity<T>();
    if (stride == 1) {  // a constant stride lets the compiler vectorize integer reductions
      for (int64_t i = begin; i < end; ++i) acc = R::combine(acc, R::template load<T>(p[i], first + i));
    } else {
      for (int64_t i = begin; i < end; ++i) acc = R::combine(acc, R::template load<T>(p[i * stride], first + i));
    }
    cascade.push(acc);
  }
  return cascade.result(R::template identity<T>());
}

// Few elements per output: one plain loop each.
template <class R, class T, class Out>
void reduce_small(const ReduceLayout& layout, Out* out, const T* in) {
  const int64_t total = layout.reduce_size;
  parallel_for(0, layout.num_outputs, std::max<int64_t>(1, kReduceGrain / total), [&](int64_t begin, int64_t end) {
    Walker kept(layout.kept_ndim, layout.kept_sizes, layout.kept_strides);
    Walker elements(layout.reduced_ndim, layout.reduced_sizes, layout.reduced_strides);
    kept.seek(begin);
    for (int64_t o = begin; o < end; ++o, kept.next()) {
      const T* base = in + kept.offset();
      AccOf<R, T> acc = R::template identity<T>();
      if (layout.reduced_ndim == 1) {
        const int64_t stride = layout.reduced_strides[0];
        for (int64_t i = 0; i < total; ++i) acc = R::combine(acc, R::template load<T>(base[i * stride], i));
      } else {
        elements.seek(0);
        for (int64_t i = 0; i < total; ++i, elements.next())
          acc = R::combine(acc, R::template load<T>(base[elements.offset()], i));
      }
      out[o] = R::template finish<Out>(acc);
    }
  });
}

template <class R, class T, class Out, template <class, class> class Rows>
void reduce_inner(const ReduceLayout& layout, Out* out, const T* in) {
  using A = AccOf<R, T>;
  const int rows_ndim = layout.reduced_ndim - 1;
  const int64_t row_size = layout.reduced_sizes[rows_ndim];
  const int64_t row_stride = layout.reduced_strides[rows_ndim];
  const int64_t total = layout.reduce_size;
  // Elements [begin, end) of the reduced index space of the output whose first element is `base`.
  auto reduce_range = [&](const T* base, int64_t begin, int64_t end) {
    Walker rows(rows_ndim, layout.reduced_sizes, layout.reduced_strides);
    rows.seek(begin / row_size);
    int64_t column = begin % row_size;
    Cascade<R, A> cascade;
    for (int64_t position = begin; position < end; rows.next()) {
      const int64_t n = std::min(row_size - column, end - position);
      cascade.push(reduce_row<R, T, Rows>(base + rows.offset() + column * row_stride, row_stride, n, column));
      position += n;
      column = 0;
    }
    return cascade.result(R::template identity<T>());
  };
  const int64_t outputs = layout.num_outputs;
  const int64_t chunks = ceil_div(total, kChunk);
  if (chunks == 1) {
    parallel_for(0, outputs, std::max<int64_t>(1, kReduceGrain / total), [&](int64_t begin, int64_t end) {
      Walker kept(layout.kept_ndim, layout.kept_sizes, layout.kept_strides);
      kept.seek(begin);
      for (int64_t o = begin; o < end; ++o, kept.next()) {
        out[o] = R::template finish<Out>(reduce_range(in + kept.offset(), 0, total));
      }
    });
    return;
  }
  // Long reductions: every (output, chunk) pair is a task; the chunks' partials are combined after.
  const std::unique_ptr<A[]> partials(new A[static_cast<size_t>(outputs * chunks)]);
  parallel_for(0, outputs * chunks, 1, [&](int64_t begin, int64_t end) {
    Walker kept(layout.kept_ndim, layout.kept_sizes, layout.kept_strides);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t chunk = task % chunks;
      kept.seek(task / chunks);
      partials[task] = reduce_range(in + kept.offset(), chunk * kChunk, std::min(total, (chunk + 1) * kChunk));
    }
  });
  for (int64_t o = 0; o < outputs; ++o) {
    Cascade<R, A> cascade;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) cascade.push(partials[o * chunks + chunk]);
    out[o] = R::template finish<Out>(cascade.result(R::template identity<T>()));
  }
}

// One output over the n unit-stride elements at p, as reduce_typed computes an output whose
// reduced elements are one such row (reduce_small's loop up to kSmallReduce, else reduce_inner's
// chunks of kChunk): a caller that reduces rows one at a time gets each row's bits from reduce().
template <class R, class T, class Out, template <class, class> class Rows>
Out reduce_contiguous(const T* p, int64_t n) {
  using A = AccOf<R, T>;
  if (n == 0) return R::template finish<Out>(R::template identity<T>());
  if (n <= kSmallReduce) {
    A acc = R::template identity<T>();
    for (int64_t i = 0; i < n; ++i) acc = R::combine(acc, R::template load<T>(p[i], i));
    return R::template finish<Out>(acc);
  }
  // A chunk as reduce_inner's reduce_range: one row, through its cascade.
  auto chunk = [&](int64_t begin) {
    Cascade<R, A> cascade;
    cascade.push(reduce_row<R, T, Rows>(p + begin, 1, std::min(n, begin + kChunk) - begin, begin));
    return cascade.result(R::template identity<T>());
  };
  if (n <= kChunk) return R::template finish<Out>(chunk(0));
  Cascade<R, A> chunks;
  for (int64_t begin = 0; begin < n; begin += kChunk) chunks.push(chunk(begin));
  return R::template finish<Out>(chunks.result(R::template identity<T>()));
}

// --- path (b): vertical accumulation of whole rows -------------------------------------------------

template <class R, class T, class Out, template <class, class> class Rows>
void reduce_outer(const ReduceLayout& layout, Out* out, const T* in) {
  using A = AccOf<R, T>;
  const int outer_ndim = layout.kept_ndim - 1;
  const int64_t width = layout.kept_sizes[outer_ndim];  // adjacent outputs, unit stride in the input
  const int64_t outer = layout.num_outputs / width;
  const int64_t rows = layout.reduce_size;
  // Tiles of whole vector strips (kMinTile columns, or a multiple), narrow enough that there are
  // kTilesWanted of them when the rows are wide: tasks over columns need no partial results.
  // Which columns a tile holds does not change any column's summation order.
  const int64_t tile_width =
      std::min(width, std::clamp(ceil_div(width, kTilesWanted * kMinTile) * kMinTile, kMinTile, kTile));
  const int64_t tiles = ceil_div(width, tile_width);
  // Few tall tiles: split their rows into chunks so that there are enough tasks (sizes decide).
  int64_t row_chunks = 1;
  if (outer * tiles < kMinTasks && rows * tile_width > 2 * kChunk) {
    row_chunks = std::min(ceil_div(kMinTasks, outer * tiles), ceil_div(rows * tile_width, kChunk));
  }
  const int64_t rows_per_chunk = ceil_div(ceil_div(rows, row_chunks), kRowBlock) * kRowBlock;
  row_chunks = ceil_div(rows, rows_per_chunk);
  const int64_t row_block = R::template kPairwise<T> ? kRowBlock : rows_per_chunk;
  int levels = 1;
  while ((int64_t{1} << (levels - 1)) < ceil_div(rows_per_chunk, row_block)) ++levels;
  const A identity = R::template identity<T>();

  const std::unique_ptr<A[]> partials(row_chunks > 1 ? new A[static_cast<size_t>(outer * row_chunks * width)]
                                                     : nullptr);
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, rows_per_chunk * tile_width));
  parallel_for(0, outer * tiles * row_chunks, grain, [&](int64_t begin, int64_t end) {
    // block: the rows of the current row block; level l: the cascade of row blocks, per column.
    const std::unique_ptr<A[]> buffer(new A[static_cast<size_t>((levels + 1) * tile_width)]);
    A* block = buffer.get();
    A* level_base = buffer.get() + tile_width;
    Walker kept(outer_ndim, layout.kept_sizes, layout.kept_strides);
    Walker row_walker(layout.reduced_ndim, layout.reduced_sizes, layout.reduced_strides);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t chunk = task % row_chunks;
      const int64_t tile = (task / row_chunks) % tiles;
      const int64_t k = task / (row_chunks * tiles);
      const int64_t column = tile * tile_width;
      const int64_t n = std::min(tile_width, width - column);
      kept.seek(k);
      const T* base = in + kept.offset() + column;
      const int64_t row_end = std::min(rows, (chunk + 1) * rows_per_chunk);
      uint64_t count = 0;
      for (int64_t r0 = chunk * rows_per_chunk; r0 < row_end; r0 += row_block) {
        std::fill(block, block + n, identity);
        row_walker.seek(r0);
        const int64_t r1 = std::min(row_end, r0 + row_block);
        for (int64_t r = r0; r < r1;) {  // row_block rows at a time (kRowBlock, or fewer)
          const T* group[kRowBlock];
          int group_size = 0;
          for (; group_size < kRowBlock && r + group_size < r1; ++group_size, row_walker.next()) {
            group[group_size] = base + row_walker.offset();
          }
          const int64_t done = Rows<R, T>::accumulate(block, group, group_size, n);
          for (int g = 0; g < group_size; ++g) {  // row by row: simple loops the compiler can vectorize
            const T* row = group[g];
            for (int64_t j = done; j < n; ++j) block[j] = R::combine(block[j], R::template load<T>(row[j], r + g));
          }
          r += group_size;
        }
        int level = 0;
        for (uint64_t c = count; (c & 1u) != 0; c >>= 1u, ++level) {
          const A* older = level_base + level * tile_width;
          for (int64_t j = 0; j < n; ++j) block[j] = R::combine(older[j], block[j]);
        }
        std::copy(block, block + n, level_base + level * tile_width);
        ++count;
      }
      // The tile's result, oldest rows first, into block.
      std::fill(block, block + n, identity);
      for (int level = levels - 1; level >= 0; --level) {
        if (((count >> level) & 1u) == 0) continue;
        const A* newer = level_base + level * tile_width;
        for (int64_t j = 0; j < n; ++j) block[j] = R::combine(block[j], newer[j]);
      }
      if (row_chunks == 1) {
        for (int64_t j = 0; j < n; ++j) out[k * width + column + j] = R::template finish<Out>(block[j]);
      } else {
        std::copy(block, block + n, partials.get() + (k * row_chunks + chunk) * width + column);
      }
    }
  });
  if (row_chunks == 1) return;
  parallel_for(0, outer * width, std::max<int64_t>(1, kReduceGrain / row_chunks), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const int64_t k = o / width, j = o % width;
      Cascade<R, A> cascade;
      for (int64_t chunk = 0; chunk < row_chunks; ++chunk) cascade.push(partials[(k * row_chunks + chunk) * width + j]);
      out[o] = R::template finish<Out>(cascade.result(identity));
    }
  });
}

template <class R, class T, class Out, template <class, class> class Rows>
void reduce_typed(const ReduceLayout& layout, void* out_ptr, const void* in_ptr) {
  Out* out = static_cast<Out*>(out_ptr);
  const T* in = static_cast<const T*>(in_ptr);
  if (layout.num_outputs == 0) return;
  if (layout.reduce_size == 0) {
    const Out value = R::template finish<Out>(R::template identity<T>());
    std::fill(out, out + layout.num_outputs, value);
    return;
  }
  const int inner = layout.reduced_ndim - 1, kept_inner = layout.kept_ndim - 1;
  const bool inner_unit = layout.reduced_strides[inner] == 1 && layout.reduced_sizes[inner] > 1;
  const bool outer_unit = layout.kept_strides[kept_inner] == 1 && layout.kept_sizes[kept_inner] > 1;
  if (outer_unit && !inner_unit) {
    reduce_outer<R, T, Out, Rows>(layout, out, in);
  } else if (layout.reduce_size <= kSmallReduce) {
    reduce_small<R, T, Out>(layout, out, in);
  } else {
    reduce_inner<R, T, Out, Rows>(layout, out, in);
  }
}

// Runs R on input type T into whichever output type out_dtype names (Out<T> or AltOut<T>).
template <class R, class T, template <class, class> class Rows>
void run_typed(OpKind op, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  using Out = typename R::template Out<T>;
  using AltOut = typename R::template AltOut<T>;
  if (out_dtype == dtype_of<Out>()) return reduce_typed<R, T, Out, Rows>(layout, out, in);
  if constexpr (!std::is_void_v<AltOut>) {
    if (out_dtype == dtype_of<AltOut>()) return reduce_typed<R, T, AltOut, Rows>(layout, out, in);
  }
  EMBER_FAIL("[", op_info(op).name, "] has no kernel from ", dtype_of<T>(), " to ", out_dtype);
}

// The scalar path of R: the walkers with scalar row loops, for every dtype R accepts.
template <class R>
void run_scalar(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  dispatch_dtype(in_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!R::template kAccepts<T>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", in_dtype);
    } else {
      run_typed<R, T, ScalarRows>(op, out_dtype, out, in, layout);
    }
  });
}

}  // namespace ember::cpu::reduction

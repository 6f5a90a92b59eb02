// Reduction kernels (sum, prod, amax, amin, argmax, argmin, all, any) and softmax / log_softmax.
// Each reduction is a small functor (identity, load, combine); three walkers share them (Note
// [reduction paths]) and cut the work by sizes alone (Note [deterministic reductions]). The walkers
// and the scalar functors are compiled once; per Highway target come only the vector forms, the
// vector row loops that use them (float types: Sum, Prod, Amax, Amin) and softmax.
// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/parallel.h"

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

// --- target-independent: the functors and walkers, compiled once -----------------------------------
#ifndef EMBER_KERNELS_CPU_REDUCE_ONCE
#define EMBER_KERNELS_CPU_REDUCE_ONCE

namespace ember::cpu::reduction {
namespace {

// Elements of one output's reduction that one task reduces (path a), and the least work per task
// when path (b) splits rows.
constexpr int64_t kChunk = int64_t{1} << 15;
// Elements below which a reduction stays on one thread.
constexpr int64_t kReduceGrain = 32768;
// Four-vector steps one set of vector accumulators takes before its lanes join the cascade.
constexpr int64_t kBlockSteps = 32;
// Elements one scalar float accumulator takes before joining the cascade.
constexpr int64_t kScalarBlock = 32;
// Rows a vertical float-sum tile accumulates before joining the cascade, and the tile's width.
constexpr int64_t kRowBlock = 32;
constexpr int64_t kTile = 2048;
// Path (b) splits the rows of few, tall tiles until it has this many tasks.
constexpr int64_t kMinTasks = 64;
// Reductions this short per output run as one plain loop.
constexpr int64_t kSmallReduce = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class T>
inline constexpr bool kHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// --- the reductions ----------------------------------------------------------------------------------
// Each gives: Acc<T> (accumulator type), Out<T> (default output type) and AltOut<T> (another output
// type it can write, or void), kAccepts<T>, kPairwise<T> (whether the order of combining changes
// the rounding, so pieces must stay small), kVectorForm (whether the per-target part has a vector
// form for float types), identity<T>(), load<T>(x, index) (an element at position `index` along
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

// Sum and Prod: floats accumulate in compute_t<T>, integers and bool in int64 (wrapping).
template <bool kProduct>
struct SumOrProd : PlainFinish {
  template <class T>
  using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;
  template <class T>
  using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
  template <class T>
  using AltOut = std::conditional_t<kHalfType<T>, float, void>;
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
template <class R, class A>
class Cascade {
 public:
  void push(A value) {
    int level = 0;
    for (uint64_t count = count_; (count & 1u) != 0; count >>= 1u, ++level) value = R::combine(levels_[level], value);
    levels_[level] = value;
    ++count_;
  }
  // Every pushed value combined, oldest first; `identity` when nothing was pushed.
  A result(A identity) const {
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
// walker does the rest. ScalarRows leaves everything to the walker; the per-target VectorRows
// runs Highway loops.
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

// --- path (b): vertical accumulation of whole rows -------------------------------------------------

template <class R, class T, class Out, template <class, class> class Rows>
void reduce_outer(const ReduceLayout& layout, Out* out, const T* in) {
  using A = AccOf<R, T>;
  const int outer_ndim = layout.kept_ndim - 1;
  const int64_t width = layout.kept_sizes[outer_ndim];  // adjacent outputs, unit stride in the input
  const int64_t outer = layout.num_outputs / width;
  const int64_t rows = layout.reduce_size;
  const int64_t tiles = ceil_div(width, kTile);
  const int64_t tile_width = std::min(width, kTile);
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
      const int64_t column = tile * kTile;
      const int64_t n = std::min(kTile, width - column);
      kept.seek(k);
      const T* base = in + kept.offset() + column;
      const int64_t row_end = std::min(rows, (chunk + 1) * rows_per_chunk);
      uint64_t count = 0;
      for (int64_t r0 = chunk * rows_per_chunk; r0 < row_end; r0 += row_block) {
        std::fill(block, block + n, identity);
        row_walker.seek(r0);
        const int64_t r1 = std::min(row_end, r0 + row_block);
        for (int64_t r = r0; r < r1;) {
          const T* group[4];
          int group_size = 0;
          for (; group_size < 4 && r + group_size < r1; ++group_size, row_walker.next()) {
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

// Every reduction with scalar row loops: what the per-target kernels hand on when they have no
// vector form for the op and dtype.
void reduce_scalar(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  switch (op) {
    case OpKind::kSum:
      return run_scalar<Sum>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kProd:
      return run_scalar<Prod>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmax:
      return run_scalar<Extreme<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAmin:
      return run_scalar<Extreme<false>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kArgmax:
      return run_scalar<Arg<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kArgmin:
      return run_scalar<Arg<false>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAll:
      return run_scalar<Truth<true>>(op, in_dtype, out_dtype, out, in, layout);
    case OpKind::kAny:
      return run_scalar<Truth<false>>(op, in_dtype, out_dtype, out, in, layout);
    default:
      break;
  }
  EMBER_FAIL("[", op_info(op).name, "] is not a reduction primitive");
}

}  // namespace
}  // namespace ember::cpu::reduction
#endif  // EMBER_KERNELS_CPU_REDUCE_ONCE

// --- per Highway target: vector forms, vector row loops, softmax -------------------------------------

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

#include "kernels/cpu/functors-inl.h"  // vec::exp

using reduction::AccOf;
using reduction::kHalfType;

// Softmax: columns per vertical tile, and elements below which it stays on one thread.
constexpr int64_t kSoftmaxTile = 256;
constexpr int64_t kSoftmaxGrain = 8192;

// Whether this target loads T into vectors of compute_t<T>. Highway converts float16 with F16C
// from AVX2 up; its emulation on older targets turns inf and nan into finite numbers.
template <class T>
inline constexpr bool kVectorLoad = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                    std::is_same_v<T, BFloat16> ||
                                    (std::is_same_v<T, Half> && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2);

template <class D, class T>
HWY_INLINE hn::Vec<D> load_vector(D d, const T* p) {
  if constexpr (std::is_same_v<T, Half>) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const hn::Rebind<hwy::bfloat16_t, D> db;
    return hn::PromoteTo(d, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else {
    return hn::LoadU(d, p);
  }
}

// Stores a vector of compute_t<T> as T, rounding 16-bit floats to nearest even like Half/BFloat16.
template <class D, class T>
HWY_INLINE void store_vector(D d, hn::Vec<D> v, T* p) {
  if constexpr (kHalfType<T>) {
    HWY_ALIGN hn::TFromD<D> lanes[hn::MaxLanes(d)];
    hn::Store(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = T(lanes[i]);
  } else {
    hn::StoreU(v, d, p);
  }
}

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

// The vector row loops (see reduction::ScalarRows) for a float type T this target loads.
template <class R, class T>
struct VectorRows {
  using C = compute_t<T>;
  using F = VectorForm<R>;
  static_assert(std::is_same_v<AccOf<R, T>, C>, "vector reductions accumulate in compute_t<T>");
  static constexpr bool kContiguous = true;

  // Four vector accumulators; each block of kBlockSteps steps joins a cascade through its lanes.
  static C contiguous(const T* p, int64_t n) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const int64_t step = 4 * lanes;
    reduction::Cascade<R, C> cascade;
    int64_t i = 0;
    while (i + step <= n) {
      const int64_t end = i + std::min(reduction::kBlockSteps * step, (n - i) / step * step);
      V a0 = F::videntity(d), a1 = a0, a2 = a0, a3 = a0;
      for (; i < end; i += step) {
        a0 = F::vcombine(d, a0, load_vector(d, p + i));
        a1 = F::vcombine(d, a1, load_vector(d, p + i + lanes));
        a2 = F::vcombine(d, a2, load_vector(d, p + i + 2 * lanes));
        a3 = F::vcombine(d, a3, load_vector(d, p + i + 3 * lanes));
      }
      cascade.push(F::vreduce(d, F::vcombine(d, F::vcombine(d, a0, a1), F::vcombine(d, a2, a3))));
    }
    if (i < n) {
      V a0 = F::videntity(d);
      for (; i + lanes <= n; i += lanes) a0 = F::vcombine(d, a0, load_vector(d, p + i));
      C tail = F::vreduce(d, a0);
      for (; i < n; ++i) tail = R::combine(tail, R::template load<T>(p[i], i));
      cascade.push(tail);
    }
    return cascade.result(R::template identity<T>());
  }

  static int64_t accumulate(C* acc, const T* const* rows, int count, int64_t n) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    int64_t j = 0;
    if (count == 4) {
      for (; j + lanes <= n; j += lanes) {
        const V x01 = F::vcombine(d, load_vector(d, rows[0] + j), load_vector(d, rows[1] + j));
        const V x23 = F::vcombine(d, load_vector(d, rows[2] + j), load_vector(d, rows[3] + j));
        hn::StoreU(F::vcombine(d, hn::LoadU(d, acc + j), F::vcombine(d, x01, x23)), d, acc + j);
      }
    } else {
      for (; j + lanes <= n; j += lanes) {
        V a = hn::LoadU(d, acc + j);
        for (int g = 0; g < count; ++g) a = F::vcombine(d, a, load_vector(d, rows[g] + j));
        hn::StoreU(a, d, acc + j);
      }
    }
    return j;
  }
};

// Runs R with vector row loops when it has a vector form and this target loads in_dtype; false
// when it does neither.
template <class R>
bool reduce_vector(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
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

// --- softmax ------------------------------------------------------------------------------------------

// Note [softmax special rows]
// PyTorch's softmax of a row that holds a nan, or whose max is not finite (+inf, or every element
// -inf), is nan everywhere: x - max or the sum turns nan. The last-dim kernels find such rows in
// their max pass and fill them with nan; every other row has x - max in [-inf, 0], where Highway's
// Exp is exact to 1 ulp without the overflow and nan patches of vec::exp (which maps nan to 0).

// Rows at most this long are vectorized across rows (one lane per row) instead of along them.
constexpr int64_t kShortRow = 16;

template <class T>
void fill_nan(T* y, int64_t n) {
  std::fill(y, y + n, static_cast<T>(std::numeric_limits<compute_t<T>>::quiet_NaN()));
}

// The max of x[0, n) and whether any element is nan.
template <class T>
compute_t<T> row_max(const T* x, int64_t n, bool* has_nan) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  bool nan = false;
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    V m0 = hn::Set(d, m), m1 = m0, m2 = m0, m3 = m0;
    auto bad = hn::Ne(hn::Zero(d), hn::Zero(d));  // all false
    for (; i + 4 * lanes <= n; i += 4 * lanes) {
      const V x0 = load_vector(d, x + i), x1 = load_vector(d, x + i + lanes);
      const V x2 = load_vector(d, x + i + 2 * lanes), x3 = load_vector(d, x + i + 3 * lanes);
      m0 = hn::Max(m0, x0);
      m1 = hn::Max(m1, x1);
      m2 = hn::Max(m2, x2);
      m3 = hn::Max(m3, x3);
      bad = hn::Or(bad, hn::Or(hn::Or(hn::IsNaN(x0), hn::IsNaN(x1)), hn::Or(hn::IsNaN(x2), hn::IsNaN(x3))));
    }
    for (; i + lanes <= n; i += lanes) {
      const V x0 = load_vector(d, x + i);
      m0 = hn::Max(m0, x0);
      bad = hn::Or(bad, hn::IsNaN(x0));
    }
    nan = !hn::AllFalse(d, bad);
    m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  }
  for (; i < n; ++i) {
    const C v = static_cast<C>(x[i]);
    nan = nan || v != v;
    m = std::max(m, v);
  }
  *has_nan = nan;
  return m;
}

// sum(exp(x[i] - m)) over x[0, n); with kStore, exp(x[i] - m) is also written to y[i].
template <bool kStore, class T>
compute_t<T> sum_exp(const T* x, int64_t n, compute_t<T> m, T* y) {
  using C = compute_t<T>;
  C s = 0;
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    using V = hn::Vec<decltype(d)>;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const V vm = hn::Set(d, m);
    V s0 = hn::Zero(d), s1 = s0;
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
      const V e0 = hn::Exp(d, hn::Sub(load_vector(d, x + i), vm));
      const V e1 = hn::Exp(d, hn::Sub(load_vector(d, x + i + lanes), vm));
      if constexpr (kStore) {
        store_vector(d, e0, y + i);
        store_vector(d, e1, y + i + lanes);
      }
      s0 = hn::Add(s0, e0);
      s1 = hn::Add(s1, e1);
    }
    for (; i + lanes <= n; i += lanes) {
      const V e0 = hn::Exp(d, hn::Sub(load_vector(d, x + i), vm));
      if constexpr (kStore) store_vector(d, e0, y + i);
      s0 = hn::Add(s0, e0);
    }
    s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  }
  for (; i < n; ++i) {
    const C e = std::exp(static_cast<C>(x[i]) - m);
    if constexpr (kStore) y[i] = static_cast<T>(e);
    s += e;
  }
  return s;
}

// One row: max, then the sum of exp(x - max) (softmax stores the exps: the row is in L1), then the
// output: softmax exp(x - max) / sum, log_softmax (x - max) - log(sum), as PyTorch's vector kernel.
// 16-bit softmax recomputes the exps from x rather than reading back rounded ones.
template <bool kLog, class T>
void softmax_row(T* y, const T* x, int64_t n) {
  using C = compute_t<T>;
  constexpr bool kStoreExp = !kLog && !kHalfType<T>;
  bool has_nan = false;
  const C m = row_max(x, n, &has_nan);
  if (has_nan || !(std::abs(m) < std::numeric_limits<C>::infinity())) return fill_nan(y, n);
  const C s = sum_exp<kStoreExp>(x, n, m, y);
  const C factor = kLog ? std::log(s) : C(1) / s;
  int64_t i = 0;
  if constexpr (kVectorLoad<T>) {
    const hn::ScalableTag<C> d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const auto vm = hn::Set(d, m), vf = hn::Set(d, factor);
    for (; i + lanes <= n; i += lanes) {
      if constexpr (kLog) {
        store_vector(d, hn::Sub(hn::Sub(load_vector(d, x + i), vm), vf), y + i);
      } else if constexpr (kStoreExp) {
        hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vf), d, y + i);
      } else {
        store_vector(d, hn::Mul(hn::Exp(d, hn::Sub(load_vector(d, x + i), vm)), vf), y + i);
      }
    }
  }
  for (; i < n; ++i) {
    if constexpr (kLog) {
      y[i] = static_cast<T>((static_cast<C>(x[i]) - m) - factor);
    } else if constexpr (kStoreExp) {
      y[i] = y[i] * factor;
    } else {
      y[i] = static_cast<T>(std::exp(static_cast<C>(x[i]) - m) * factor);
    }
  }
}

// Lanes(d) short rows of n <= kShortRow elements at once, one row per lane: the columns are
// copied into `buffer` (n vectors), reduced and transformed there, and written back row by row.
// Returns false, writing nothing, when a row is special (Note [softmax special rows]).
template <bool kLog, class C>
bool softmax_short_rows(C* y, const C* x, int64_t n) {
  const hn::ScalableTag<C> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN C buffer[kShortRow * hn::MaxLanes(d)];
  // A plain transposing copy into the buffer: cheaper than n gathers on current x86 cores.
  for (int64_t l = 0; l < lanes; ++l) {
    for (int64_t k = 0; k < n; ++k) buffer[k * lanes + l] = x[l * n + k];
  }
  V m = hn::Set(d, -std::numeric_limits<C>::infinity());
  auto bad = hn::Ne(hn::Zero(d), hn::Zero(d));
  for (int64_t k = 0; k < n; ++k) {
    const V column = hn::Load(d, buffer + k * lanes);
    m = hn::Max(m, column);
    bad = hn::Or(bad, hn::IsNaN(column));
  }
  if (!hn::AllFalse(d, bad) || !hn::AllTrue(d, hn::IsFinite(m))) return false;
  V s = hn::Zero(d);
  for (int64_t k = 0; k < n; ++k) {
    const V e = hn::Exp(d, hn::Sub(hn::Load(d, buffer + k * lanes), m));
    if constexpr (!kLog) hn::Store(e, d, buffer + k * lanes);
    s = hn::Add(s, e);
  }
  const V factor = kLog ? hn::Log(d, s) : hn::Div(hn::Set(d, C(1)), s);
  for (int64_t k = 0; k < n; ++k) {
    const V v = hn::Load(d, buffer + k * lanes);
    hn::Store(kLog ? hn::Sub(hn::Sub(v, m), factor) : hn::Mul(v, factor), d, buffer + k * lanes);
  }
  for (int64_t l = 0; l < lanes; ++l) {
    for (int64_t k = 0; k < n; ++k) y[l * n + k] = buffer[k * lanes + l];
  }
  return true;
}

template <bool kLog, class T>
void softmax_last_dim(T* out, const T* in, int64_t rows, int64_t n) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (n <= kShortRow) {
      const hn::ScalableTag<T> d;
      const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
      const int64_t blocks = reduction::ceil_div(rows, lanes);
      parallel_for(0, blocks, std::max<int64_t>(1, kSoftmaxGrain / (n * lanes)), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t first = b * lanes, count = std::min(lanes, rows - first);
          if (count == lanes && softmax_short_rows<kLog>(out + first * n, in + first * n, n)) continue;
          for (int64_t r = first; r < first + count; ++r) softmax_row<kLog>(out + r * n, in + r * n, n);
        }
      });
      return;
    }
  }
  parallel_for(0, rows, std::max<int64_t>(1, kSoftmaxGrain / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) softmax_row<kLog>(out + r * n, in + r * n, n);
  });
}

// Backward over the last dim, one row at a time: softmax dx = y (g - sum(g y)); log_softmax
// dx = g - exp(y) sum(g), as PyTorch.
template <bool kLog, class T>
void softmax_backward_row(T* dx, const T* g, const T* y, int64_t n) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V a0 = hn::Zero(d), a1 = a0;
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const V g0 = hn::LoadU(d, g + i), g1 = hn::LoadU(d, g + i + lanes);
    if constexpr (kLog) {
      a0 = hn::Add(a0, g0);
      a1 = hn::Add(a1, g1);
    } else {
      a0 = hn::MulAdd(g0, hn::LoadU(d, y + i), a0);
      a1 = hn::MulAdd(g1, hn::LoadU(d, y + i + lanes), a1);
    }
  }
  T total = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (int64_t j = i; j < n; ++j) total += kLog ? g[j] : g[j] * y[j];
  const V vt = hn::Set(d, total);
  i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V gv = hn::LoadU(d, g + i), yv = hn::LoadU(d, y + i);
    hn::StoreU(kLog ? hn::NegMulAdd(vec::exp(d, yv), vt, gv) : hn::Mul(yv, hn::Sub(gv, vt)), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = kLog ? g[i] - std::exp(y[i]) * total : y[i] * (g[i] - total);
}

// Softmax over the middle dim when inner > 1, for a tile of adjacent columns at a time: the column
// max, then the sum of exp(x - max), then the output (exp taken once per element except for
// 16-bit outputs, which are recomputed from x rather than read back rounded). A column of only
// -inf, or holding +inf or nan, gets nan through x - max or the sum, as PyTorch.
template <bool kLog, class T>
void softmax_middle_dim(T* out, const T* in, int64_t outer, int64_t dim_size, int64_t inner) {
  using C = compute_t<T>;
  constexpr bool kStoreExp = !kLog && !kHalfType<T>;  // pass 2 writes exp(x - max), pass 3 scales it
  const int64_t tiles = reduction::ceil_div(inner, kSoftmaxTile);
  const int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / (dim_size * std::min(inner, kSoftmaxTile)));
  parallel_for(0, outer * tiles, grain, [&](int64_t begin, int64_t end) {
    HWY_ALIGN C m[kSoftmaxTile];
    HWY_ALIGN C s[kSoftmaxTile];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / tiles, column = (task % tiles) * kSoftmaxTile;
      const int64_t n = std::min(kSoftmaxTile, inner - column);
      const T* x = in + o * dim_size * inner + column;
      T* y = out + o * dim_size * inner + column;
      std::fill(m, m + n, -std::numeric_limits<C>::infinity());
      std::fill(s, s + n, C(0));
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) hn::Store(hn::Max(hn::Load(d, m + j), load_vector(d, row + j)), d, m + j);
        }
        for (; j < n; ++j) m[j] = std::max(m[j], static_cast<C>(row[j]));
      }
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        T* dst = y + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) {
            const auto e = vec::exp(d, hn::Sub(load_vector(d, row + j), hn::Load(d, m + j)));
            if constexpr (kStoreExp) hn::StoreU(e, d, dst + j);
            hn::Store(hn::Add(hn::Load(d, s + j), e), d, s + j);
          }
        }
        for (; j < n; ++j) {
          const C e = std::exp(static_cast<C>(row[j]) - m[j]);
          if constexpr (kStoreExp) dst[j] = e;
          s[j] += e;
        }
      }
      for (int64_t j = 0; j < n; ++j) s[j] = kLog ? std::log(s[j]) : C(1) / s[j];
      for (int64_t k = 0; k < dim_size; ++k) {
        const T* row = x + k * inner;
        T* dst = y + k * inner;
        int64_t j = 0;
        if constexpr (kVectorLoad<T>) {
          const hn::ScalableTag<C> d;
          const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
          for (; j + lanes <= n; j += lanes) {
            const auto factor = hn::Load(d, s + j);
            if constexpr (kStoreExp) {
              hn::StoreU(hn::Mul(hn::LoadU(d, dst + j), factor), d, dst + j);
            } else {
              const auto centered = hn::Sub(load_vector(d, row + j), hn::Load(d, m + j));
              store_vector(d, kLog ? hn::Sub(centered, factor) : hn::Mul(vec::exp(d, centered), factor), dst + j);
            }
          }
        }
        for (; j < n; ++j) {
          if constexpr (kStoreExp) {
            dst[j] = dst[j] * s[j];
          } else {
            const C centered = static_cast<C>(row[j]) - m[j];
            dst[j] = static_cast<T>(kLog ? centered - s[j] : std::exp(centered) * s[j]);
          }
        }
      }
    }
  });
}

}  // namespace

void ReduceKernel(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  bool done = false;
  switch (op) {
    case OpKind::kSum:
      done = reduce_vector<reduction::Sum>(op, in_dtype, out_dtype, out, in, layout);
      break;
    case OpKind::kProd:
      done = reduce_vector<reduction::Prod>(op, in_dtype, out_dtype, out, in, layout);
      break;
    case OpKind::kAmax:
      done = reduce_vector<reduction::Extreme<true>>(op, in_dtype, out_dtype, out, in, layout);
      break;
    case OpKind::kAmin:
      done = reduce_vector<reduction::Extreme<false>>(op, in_dtype, out_dtype, out, in, layout);
      break;
    default:
      break;
  }
  if (!done) reduction::reduce_scalar(op, in_dtype, out_dtype, out, in, layout);
}

void SoftmaxKernel(OpKind op, DType dtype, void* out, const void* in, int64_t outer, int64_t dim_size, int64_t inner) {
  EMBER_CHECK(op == OpKind::kSoftmax || op == OpKind::kLogSoftmax, "[", op_info(op).name,
              "] is not a softmax primitive");
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      EMBER_FAIL("[", op_info(op).name, "] has no kernel for ", dtype);
    } else {
      T* y = static_cast<T*>(out);
      const T* x = static_cast<const T*>(in);
      const bool log = op == OpKind::kLogSoftmax;
      if (inner == 1) {
        log ? softmax_last_dim<true>(y, x, outer, dim_size) : softmax_last_dim<false>(y, x, outer, dim_size);
      } else {
        log ? softmax_middle_dim<true>(y, x, outer, dim_size, inner)
            : softmax_middle_dim<false>(y, x, outer, dim_size, inner);
      }
    }
  });
}

void SoftmaxBackwardKernel(OpKind op, DType dtype, void* grad_in, const void* grad_out, const void* out, int64_t rows,
                           int64_t n) {
  EMBER_CHECK(op == OpKind::kSoftmax || op == OpKind::kLogSoftmax, "[", op_info(op).name,
              "] is not a softmax primitive");
  const bool log = op == OpKind::kLogSoftmax;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    T* dx = static_cast<T*>(grad_in);
    const T* g = static_cast<const T*>(grad_out);
    const T* y = static_cast<const T*>(out);
    parallel_for(0, rows, std::max<int64_t>(1, kSoftmaxGrain / n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        log ? softmax_backward_row<true>(dx + r * n, g + r * n, y + r * n, n)
            : softmax_backward_row<false>(dx + r * n, g + r * n, y + r * n, n);
      }
    });
  };
  if (dtype == kFloat32) {
    run(float{});
  } else if (dtype == kFloat64) {
    run(double{});
  } else {
    EMBER_FAIL("[", op_info(op).name, "] the backward kernel takes float32 or float64, got ", dtype);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ember::cpu {

HWY_EXPORT(ReduceKernel);
HWY_EXPORT(SoftmaxKernel);
HWY_EXPORT(SoftmaxBackwardKernel);

ReduceLayout make_reduce_layout(const Shape& shape, const Strides& strides, const bool* reduced) {
  ReduceLayout layout;
  int order[kMaxDims];
  int num_reduced = 0;
  for (int d = 0; d < shape.size(); ++d) {
    (reduced[d] ? layout.reduce_size : layout.num_outputs) *= shape[d];
    if (shape[d] == 1) continue;
    if (reduced[d]) {
      order[num_reduced++] = d;
      continue;
    }
    // Kept dims keep their order (the output walks them row-major); merge when the input allows.
    const int last = layout.kept_ndim - 1;
    if (last >= 0 && layout.kept_strides[last] == shape[d] * strides[d]) {
      layout.kept_sizes[last] *= shape[d];
      layout.kept_strides[last] = strides[d];
    } else {
      layout.kept_sizes[layout.kept_ndim] = shape[d];
      layout.kept_strides[layout.kept_ndim++] = strides[d];
    }
  }
  // Reduced dims in any order: largest stride first (broadcast dims outermost), then merged.
  auto key = [&](int d) { return strides[d] == 0 ? std::numeric_limits<int64_t>::max() : std::abs(strides[d]); };
  std::stable_sort(order, order + num_reduced, [&](int a, int b) { return key(a) > key(b); });
  for (int i = 0; i < num_reduced; ++i) {
    const int d = order[i], last = layout.reduced_ndim - 1;
    if (last >= 0 && layout.reduced_strides[last] == shape[d] * strides[d]) {
      layout.reduced_sizes[last] *= shape[d];
      layout.reduced_strides[last] = strides[d];
    } else {
      layout.reduced_sizes[layout.reduced_ndim] = shape[d];
      layout.reduced_strides[layout.reduced_ndim++] = strides[d];
    }
  }
  if (layout.kept_ndim == 0) layout.kept_sizes[layout.kept_ndim++] = 1;
  if (layout.reduced_ndim == 0) layout.reduced_sizes[layout.reduced_ndim++] = 1;
  return layout;
}

void reduce(OpKind op, DType in_dtype, DType out_dtype, void* out, const void* in, const ReduceLayout& layout) {
  HWY_DYNAMIC_DISPATCH(ReduceKernel)(op, in_dtype, out_dtype, out, in, layout);
}

void softmax(OpKind op, DType dtype, void* out, const void* in, int64_t outer, int64_t dim_size, int64_t inner) {
  if (outer * dim_size * inner == 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxKernel)(op, dtype, out, in, outer, dim_size, inner);
}

void softmax_backward(OpKind op, DType dtype, void* grad_in, const void* grad_out, const void* out, int64_t rows,
                      int64_t n) {
  if (rows * n == 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardKernel)(op, dtype, grad_in, grad_out, out, rows, n);
}

}  // namespace ember::cpu
#endif

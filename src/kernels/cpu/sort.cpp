// Sorting and selection along one dim of a contiguous (outer, size, inner) buffer: sort, topk, and
// multinomial, which samples by selection. Plain C++ rather than Highway: comparison sorts and heaps
// branch on the data. Lines run in parallel; each is handled by one thread in a fixed order, so
// results (and random draws) do not depend on the thread count.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "base/philox.h"
#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

// Note [sort order]
// Values compare in their compute type (16-bit floats as float, which is exact). NaN ranks above
// every number: last in an ascending sort, first in a descending one and in topk(largest). Values
// that compare equal (and NaNs among themselves) keep their index order, the lower first, in both
// directions. The order is then total, so std::sort gives the stable sort's result (what
// PyTorch's stable=true gives), and topk's choice among ties is the lowest indices.

template <class C>
struct Item {
  C value;
  int64_t index;
};

template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// a ranks before b in an ascending order (Note [sort order]).
struct Ascending {
  template <class C>
  bool operator()(const Item<C>& a, const Item<C>& b) const {
    if (a.value < b.value) return true;
    if (b.value < a.value) return false;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return b_nan;  // a number before NaN
    return a.index < b.index;
  }
};

// a ranks before b in a descending order (Note [sort order]).
struct Descending {
  template <class C>
  bool operator()(const Item<C>& a, const Item<C>& b) const {
    if (a.value > b.value) return true;
    if (b.value > a.value) return false;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return a_nan;  // NaN before a number
    return a.index < b.index;
  }
};

// A selection keeps a heap of the k best when k is at most 1/kHeapRatio of the line: most elements
// then cost one comparison against the heap's worst. Larger k partition the whole line instead.
constexpr int64_t kHeapRatio = 16;

// The k best items (by `before`) of the n items get(0..n-1) into `items`, best first when sorted.
// Calls get(i) once for each i, in increasing order.
template <class C, class Before, class Get>
void select_best(int64_t n, int64_t k, bool sorted, const Before& before, const Get& get, std::vector<Item<C>>& items) {
  items.clear();
  if (k * kHeapRatio <= n) {
    for (int64_t i = 0; i < k; ++i) items.push_back({get(i), i});
    std::make_heap(items.begin(), items.end(), before);  // the worst of the k on top
    for (int64_t i = k; i < n; ++i) {
      const Item<C> item{get(i), i};
      if (before(item, items.front())) {
        std::pop_heap(items.begin(), items.end(), before);
        items.back() = item;
        std::push_heap(items.begin(), items.end(), before);
      }
    }
    if (sorted) std::sort_heap(items.begin(), items.end(), before);
    return;
  }
  for (int64_t i = 0; i < n; ++i) items.push_back({get(i), i});
  if (k < n) std::nth_element(items.begin(), items.begin() + k, items.end(), before);
  items.resize(static_cast<size_t>(k));
  if (sorted) std::sort(items.begin(), items.end(), before);
}

// The geometry of a contiguous operand seen as (outer, size, inner) around dim d (a 0-dim operand
// is one line of one element).
struct Lines {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
  int64_t count() const { return outer * inner; }
  // The offset of element 0 of line `line`.
  int64_t start(int64_t line) const { return line / inner * size * inner + line % inner; }
};

Lines lines_of(const Operand& t, int d) {
  Lines g;
  if (t.dim() == 0) return g;
  for (int k = 0; k < d; ++k) g.outer *= t.size(k);
  g.size = t.size(d);
  for (int k = d + 1; k < t.dim(); ++k) g.inner *= t.size(k);
  return g;
}

// Lines per task: enough that a task does about kElementwiseGrain element visits (a comparison sort
// visits each element about log2(n) times).
int64_t line_grain(int64_t visits_per_line) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, visits_per_line));
}

int64_t log2_ceil(int64_t n) {
  int64_t bits = 1;
  while ((int64_t{1} << bits) < n && bits < 62) ++bits;
  return bits;
}

// inputs: x (contiguous); outputs: values (x's shape and dtype), indices (int64), contiguous.
void sort_kernel(const KernelCall& c) {
  const SortAttrs& attrs = c.get<SortAttrs>();
  const Operand &x = c.inputs[0], &values = c.outputs[0], &indices = c.outputs[1];
  if (x.numel() == 0) return;
  const Lines g = lines_of(x, static_cast<int>(attrs.dim));
  dispatch_dtype(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = x.ptr<const T>();
    T* out = values.ptr<T>();
    int64_t* index = indices.ptr<int64_t>();
    const auto sort_with = [&](const auto& before) {
      parallel_for(0, g.count(), line_grain(g.size * log2_ceil(g.size)), [&](int64_t begin, int64_t end) {
        std::vector<Item<C>> items(static_cast<size_t>(g.size));
        for (int64_t line = begin; line < end; ++line) {
          const int64_t at = g.start(line);
          for (int64_t i = 0; i < g.size; ++i) items[i] = {static_cast<C>(in[at + i * g.inner]), i};
          std::sort(items.begin(), items.end(), before);
          for (int64_t i = 0; i < g.size; ++i) {
            out[at + i * g.inner] = in[at + items[i].index * g.inner];
            index[at + i * g.inner] = items[i].index;
          }
        }
      });
    };
    if (attrs.descending) {
      sort_with(Descending{});
    } else {
      sort_with(Ascending{});
    }
  });
}

// inputs: x (contiguous); outputs: values and indices (int64) with k along dim, contiguous.
void topk_kernel(const KernelCall& c) {
  const TopKAttrs& attrs = c.get<TopKAttrs>();
  const Operand &x = c.inputs[0], &values = c.outputs[0], &indices = c.outputs[1];
  if (values.numel() == 0) return;
  const int d = static_cast<int>(attrs.dim);
  const Lines g = lines_of(x, d), o = lines_of(values, d);
  const int64_t k = attrs.k;
  dispatch_dtype(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = x.ptr<const T>();
    T* out = values.ptr<T>();
    int64_t* index = indices.ptr<int64_t>();
    const auto select_with = [&](const auto& before) {
      parallel_for(0, g.count(), line_grain(g.size), [&](int64_t begin, int64_t end) {
        std::vector<Item<C>> items;
        items.reserve(static_cast<size_t>(k * kHeapRatio <= g.size ? k : g.size));
        for (int64_t line = begin; line < end; ++line) {
          const T* src = in + g.start(line);
          select_best(
              g.size, k, attrs.sorted, before, [&](int64_t i) { return static_cast<C>(src[i * g.inner]); }, items);
          const int64_t at = o.start(line);
          for (int64_t r = 0; r < k; ++r) {
            out[at + r * o.inner] = src[items[r].index * g.inner];
            index[at + r * o.inner] = items[r].index;
          }
        }
      });
    };
    if (attrs.largest) {
      select_with(Descending{});
    } else {
      select_with(Ascending{});
    }
  });
}

// --- multinomial ---------------------------------------------------------------------------------
//
// Row r of the weights draws from the Philox counter blocks first_block + r * blocks_per_row on:
// with replacement, sample s takes the uniform double u (53 bits) from half of block s / 2 and is
// the category whose cumulative-weight interval holds u * total (zero weights have empty intervals);
// without replacement, category c takes u_c from half of block c / 2 and races an exponential
// clock, key -log(1 - u_c) / w_c; the samples are the num_samples smallest keys in increasing order,
// which is drawing one category at a time in proportion to the weights left (zero weights have the
// key +inf: they come last, in index order).

// The counter blocks each row of a multinomial draw uses (two uniform doubles per block).
int64_t multinomial_blocks_per_row(int64_t categories, const MultinomialAttrs& attrs) {
  return ((attrs.replacement ? attrs.num_samples : categories) + 1) / 2;
}

// A uniform double in [0, 1) from two 32-bit words.
inline double unit_double(uint32_t lo, uint32_t hi) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

// Whether the row of weights is a valid distribution: every weight finite and >= 0, a positive sum.
bool valid_weight(double w) { return w >= 0 && std::isfinite(w); }

template <class T>
void multinomial_rows(const T* weights, int64_t* out, int64_t rows, int64_t categories, const MultinomialAttrs& attrs,
                      std::atomic<bool>& invalid) {
  const detail::PhiloxDraw draw = detail::philox_draw(attrs.seed, attrs.first_block);
  const int64_t blocks_per_row = multinomial_blocks_per_row(categories, attrs);
  const int64_t samples = attrs.num_samples;
  const int64_t visits = categories + (attrs.replacement ? samples * log2_ceil(categories) : 0);
  parallel_for(0, rows, line_grain(visits), [&](int64_t begin, int64_t end) {
    std::vector<double> cumulative;
    std::vector<Item<double>> items;
    for (int64_t r = begin; r < end; ++r) {
      const T* w = weights + r * categories;
      int64_t* dst = out + r * samples;
      const uint64_t first = static_cast<uint64_t>(r * blocks_per_row);
      double total = 0;
      bool valid = true;
      for (int64_t c = 0; c < categories && valid; ++c) {
        const double v = static_cast<double>(static_cast<compute_t<T>>(w[c]));
        valid = valid_weight(v);
        total += v;
      }
      if (!valid || !(total > 0)) {
        invalid.store(true, std::memory_order_relaxed);
        continue;
      }
      if (attrs.replacement) {
        cumulative.resize(static_cast<size_t>(categories));
        double running = 0;
        int64_t last_positive = 0;
        for (int64_t c = 0; c < categories; ++c) {
          const double v = static_cast<double>(static_cast<compute_t<T>>(w[c]));
          running += v;
          cumulative[c] = running;
          if (v > 0) last_positive = c;
        }
        for (int64_t s = 0; s < samples; s += 2) {
          const auto words = detail::philox_block(draw, first + static_cast<uint64_t>(s / 2));
          for (int64_t j = 0; j < 2 && s + j < samples; ++j) {
            const double target = unit_double(words[2 * j], words[2 * j + 1]) * running;
            const int64_t c = std::upper_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin();
            dst[s + j] = std::min(c, last_positive);  // u * total rounded up to the total: the last one
          }
        }
      } else {
        // select_best asks for the keys in index order: one block serves two categories.
        std::array<uint32_t, 4> words{};
        const auto key = [&](int64_t c) {
          if (c % 2 == 0) words = detail::philox_block(draw, first + static_cast<uint64_t>(c / 2));
          const double v = static_cast<double>(static_cast<compute_t<T>>(w[c]));
          if (v == 0) return HUGE_VAL;
          const int64_t j = c % 2;
          return -std::log1p(-unit_double(words[2 * j], words[2 * j + 1])) / v;
        };
        select_best(categories, samples, true, Ascending{}, key, items);
        for (int64_t s = 0; s < samples; ++s) dst[s] = items[s].index;
      }
    }
  });
}

// The first invalid row's fault, as an error (run after the parallel loop found one).
template <class T>
[[noreturn]] void fail_multinomial(const KernelCall& c, const T* weights, int64_t rows, int64_t categories) {
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t k = 0; k < categories; ++k) {
      const double v = static_cast<double>(static_cast<compute_t<T>>(weights[r * categories + k]));
      EMBER_CHECK(valid_weight(v), "[", c.name(), "] probability tensor contains either inf, nan or element < 0: row ",
                  r, " holds ", v, " at category ", k);
      total += v;
    }
    EMBER_CHECK(total > 0, "[", c.name(), "] invalid multinomial distribution (sum of probabilities <= 0): the ",
                categories, " weights of row ", r, " sum to ", total);
  }
  EMBER_FAIL("[", c.name(), "] invalid weights");
}

// inputs: weights (rows, categories), contiguous float; outputs: (rows, num_samples) int64.
void multinomial_kernel(const KernelCall& c) {
  const MultinomialAttrs& attrs = c.get<MultinomialAttrs>();
  const Operand &weights = c.inputs[0], &out = c.outputs[0];
  const int64_t rows = weights.size(0), categories = weights.size(1);
  if (rows == 0 || attrs.num_samples == 0) return;
  dispatch_dtype(weights.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_of<T>())) {
      std::atomic<bool> invalid{false};
      multinomial_rows(weights.ptr<const T>(), out.ptr<int64_t>(), rows, categories, attrs, invalid);
      if (invalid.load()) fail_multinomial(c, weights.ptr<const T>(), rows, categories);
    } else {
      EMBER_FAIL("[", c.name(), "] expects floating-point weights, got ", weights.dtype);
    }
  });
}

}  // namespace

void register_sort_kernels(KernelTable& table) {
  table.add(OpKind::kSort, DeviceType::kCPU, sort_kernel, DTypeSet::all());
  table.add(OpKind::kTopK, DeviceType::kCPU, topk_kernel, DTypeSet::all().without(kBool));
  table.add(OpKind::kMultinomial, DeviceType::kCPU, multinomial_kernel, {kInt64});
}

}  // namespace ember::cpu

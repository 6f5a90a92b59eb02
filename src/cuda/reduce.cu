// Reductions along dims, softmax and log-softmax with their gradients, and the matrix product's
// epilogue. A reduction gives each output one block, whose threads stride over its reduced
// elements and combine through warp shuffles and shared memory; when there are too few outputs to
// fill the GPU (a whole-tensor sum), each output is cut into a fixed number of pieces by its size
// alone, reduced into a workspace and combined by a second pass, so a result does not depend on
// timing. Float16/bfloat16 accumulate in float.
#include <cfloat>
#include <cmath>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

inline constexpr int kReduceThreads = 256;
// Elements one block reduces, at least, when an output is split over several blocks.
inline constexpr int64_t kPieceElements = int64_t{1} << 16;
inline constexpr int64_t kMaxPieces = 1024;

template <class T>
using acc_t = std::conditional_t<kIsFloat<T>, compute_t<T>, int64_t>;

// A value and where it was (the index along the reduced dim; argmax/argmin only).
template <class A>
struct Item {
  A value;
  int64_t index;
};

// How op combines two partial results (a comes first in the reduced order).
template <Reduce op, class A>
__device__ __forceinline__ Item<A> combine(Item<A> a, Item<A> b) {
  if constexpr (op == Reduce::kSum) return {static_cast<A>(a.value + b.value), 0};
  if constexpr (op == Reduce::kProd) return {static_cast<A>(a.value * b.value), 0};
  if constexpr (op == Reduce::kAll) return {static_cast<A>(a.value && b.value), 0};
  if constexpr (op == Reduce::kAny) return {static_cast<A>(a.value || b.value), 0};
  if constexpr (op == Reduce::kAmax || op == Reduce::kAmin) {
    if (a.value != a.value) return a;  // NaN propagates
    if (b.value != b.value) return b;
    return (op == Reduce::kAmax ? b.value > a.value : b.value < a.value) ? b : a;
  }
  if constexpr (op == Reduce::kArgmax || op == Reduce::kArgmin) {
    // The first NaN wins; among equal values, the first index.
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index) ? a : b;
    const bool better = op == Reduce::kArgmax ? b.value > a.value : b.value < a.value;
    if (better || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
}

template <Reduce op, class A>
__device__ __forceinline__ Item<A> identity() {
  if constexpr (op == Reduce::kProd || op == Reduce::kAll) return {A(1), 0};
  return {A(0), -1};
}

template <class V>
__device__ __forceinline__ V shfl_down(V v, int offset) {
  if constexpr (std::is_same_v<V, bool>) {
    return __shfl_down_sync(0xffffffffu, static_cast<int>(v), offset) != 0;
  } else {
    return __shfl_down_sync(0xffffffffu, v, offset);
  }
}

// Combines the items of a block; thread 0 gets the result.
template <Reduce op, class A>
__device__ Item<A> block_combine(Item<A> item, bool valid) {
  __shared__ A values[kReduceThreads / 32];
  __shared__ int64_t indices[kReduceThreads / 32];
  __shared__ bool valids[kReduceThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    const Item<A> other{shfl_down(item.value, offset), shfl_down(item.index, offset)};
    const bool other_valid = shfl_down(valid, offset);
    if (lane + offset < 32 && other_valid) {
      item = valid ? combine<op>(item, other) : other;
      valid = true;
    }
  }
  if (lane == 0) {
    values[warp] = item.value;
    indices[warp] = item.index;
    valids[warp] = valid;
  }
  __syncthreads();
  if (warp == 0) {
    const bool in_range = lane < kReduceThreads / 32;
    item = in_range ? Item<A>{values[lane], indices[lane]} : Item<A>{A(0), 0};
    valid = in_range && valids[lane];
    for (int offset = 16; offset > 0; offset /= 2) {
      const Item<A> other{shfl_down(item.value, offset), shfl_down(item.index, offset)};
      const bool other_valid = shfl_down(valid, offset);
      if (lane + offset < 32 && other_valid) {
        item = valid ? combine<op>(item, other) : other;
        valid = true;
      }
    }
  }
  return item;
}

template <class A, class T>
__device__ __forceinline__ A load_as(const T* p) {
  if constexpr (std::is_same_v<A, float> && (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)) {
    return static_cast<float>(*p);
  } else {
    return static_cast<A>(*p);
  }
}

// Reduces elements [begin, end) of output `o`'s reduced set; returns whether any was seen.
template <Reduce op, class T, class A>
__device__ Item<A> reduce_range(const T* in, const ReduceShape& s, int64_t o, int64_t begin, int64_t end, bool* seen) {
  // The kept offset of output o (its dims row-major).
  int64_t base = 0, rest = o;
  for (int d = s.kept_ndim - 1; d >= 0; --d) {
    const int64_t q = rest / s.kept_sizes[d];
    base += (rest - q * s.kept_sizes[d]) * s.kept_strides[d];
    rest = q;
  }
  Item<A> acc = identity<op, A>();
  *seen = false;
  if (s.reduced_ndim == 1) {
    // One reduced dim: no division per element, and four loads in flight per thread.
    const int64_t rs = s.reduced_strides[0], step = blockDim.x;
    int64_t j = begin + threadIdx.x;
    for (; j + 3 * step < end; j += 4 * step) {
      A v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = load_as<A>(in + base + (j + u * step) * rs);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const Item<A> x{v[u], j + u * step};
        acc = *seen ? combine<op>(acc, x) : x;
        *seen = true;
      }
    }
    for (; j < end; j += step) {
      const Item<A> x{load_as<A>(in + base + j * rs), j};
      acc = *seen ? combine<op>(acc, x) : x;
      *seen = true;
    }
    return acc;
  }
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    int64_t offset = base, r = j;
    for (int d = s.reduced_ndim - 1; d >= 0; --d) {
      const int64_t q = r / s.reduced_sizes[d];
      offset += (r - q * s.reduced_sizes[d]) * s.reduced_strides[d];
      r = q;
    }
    const Item<A> x{load_as<A>(in + offset), j};
    acc = *seen ? combine<op>(acc, x) : x;
    *seen = true;
  }
  return acc;
}

template <class Out, class A>
__device__ __forceinline__ Out store_as(A value) {
  return convert<Out>(value);
}

// One block per (output, piece). pieces == 1: the result goes to out; else to the workspace.
template <Reduce op, class T, class A, class Out>
__global__ void reduce_kernel(Out* out, Item<A>* partial, const T* in, ReduceShape s, int64_t pieces) {
  const int64_t o = blockIdx.x / pieces, piece = blockIdx.x % pieces;
  const int64_t per = (s.reduce_size + pieces - 1) / pieces;
  const int64_t begin = piece * per, end = begin + per < s.reduce_size ? begin + per : s.reduce_size;
  bool seen = false;
  Item<A> item = reduce_range<op, T, A>(in, s, o, begin, end, &seen);
  item = block_combine<op, A>(item, seen);
  if (threadIdx.x != 0) return;
  if (pieces > 1) {
    partial[blockIdx.x] = item;
  } else if constexpr (op == Reduce::kArgmax || op == Reduce::kArgmin) {
    out[o] = static_cast<Out>(item.index);
  } else {
    out[o] = store_as<Out>(item.value);
  }
}

// Combines each output's pieces in order.
template <Reduce op, class A, class Out>
__global__ void finish_kernel(Out* out, const Item<A>* partial, int64_t pieces) {
  const int64_t o = blockIdx.x;
  Item<A> acc = identity<op, A>();
  bool seen = false;
  for (int64_t p = threadIdx.x; p < pieces; p += blockDim.x) {
    const Item<A> x = partial[o * pieces + p];
    acc = seen ? combine<op>(acc, x) : x;
    seen = true;
  }
  acc = block_combine<op, A>(acc, seen);
  if (threadIdx.x != 0) return;
  if constexpr (op == Reduce::kArgmax || op == Reduce::kArgmin) {
    out[o] = static_cast<Out>(acc.index);
  } else {
    out[o] = store_as<Out>(acc.value);
  }
}

int64_t pieces_for(Reduce op, const ReduceShape& s) {
  if (s.num_outputs >= 264 || s.reduce_size < 2 * kPieceElements) return 1;  // 264: 2 blocks per SM
  int64_t pieces = s.reduce_size / kPieceElements;
  const int64_t wanted = (1056 + s.num_outputs - 1) / s.num_outputs;  // ~8 blocks per SM in all
  if (pieces > wanted) pieces = wanted;
  return pieces > kMaxPieces ? kMaxPieces : pieces;
}

template <Reduce op, class T, class Out>
void run_reduce(void* out, const void* in, const ReduceShape& s, void* workspace, cudaStream_t stream) {
  using A = std::conditional_t<op == Reduce::kAll || op == Reduce::kAny, bool, acc_t<T>>;
  const int64_t pieces = pieces_for(op, s);
  auto* partial = static_cast<Item<A>*>(workspace);
  reduce_kernel<op, T, A, Out><<<static_cast<unsigned>(s.num_outputs * pieces), kReduceThreads, 0, stream>>>(
      static_cast<Out*>(out), partial, static_cast<const T*>(in), s, pieces);
  if (pieces > 1) {
    finish_kernel<op, A, Out>
        <<<static_cast<unsigned>(s.num_outputs), kReduceThreads, 0, stream>>>(static_cast<Out*>(out), partial, pieces);
  }
}

template <Reduce op>
bool reduce_op(Type in_type, Type out_type, void* out, const void* in, const ReduceShape& s, void* workspace,
               cudaStream_t stream) {
  bool ran = false;
  with_type(in_type, [&](auto in_tag) {
    using T = decltype(in_tag);
    with_type(out_type, [&](auto out_tag) {
      using Out = decltype(out_tag);
      constexpr bool arg = op == Reduce::kArgmax || op == Reduce::kArgmin;
      constexpr bool truth = op == Reduce::kAll || op == Reduce::kAny;
      constexpr bool sum = op == Reduce::kSum || op == Reduce::kProd;
      constexpr bool ok =
          arg     ? std::is_same_v<Out, int64_t> && !std::is_same_v<T, bool>
          : truth ? std::is_same_v<Out, bool>
          : sum ? (kIsFloat<T> ? (std::is_same_v<Out, T> || std::is_same_v<Out, float>) : std::is_same_v<Out, int64_t>)
                : std::is_same_v<Out, T> && !std::is_same_v<T, bool>;
      if constexpr (ok) {
        run_reduce<op, T, Out>(out, in, s, workspace, stream);
        ran = true;
      }
    });
  });
  return ran;
}

// --- softmax -------------------------------------------------------------------------------------

template <class T>
using sm_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class A>
__device__ A block_max(A x) {
  __shared__ A shared[kReduceThreads / 32];
  for (int o = 16; o > 0; o /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
  __syncthreads();
  x = shared[0];
  for (int w = 1; w < kReduceThreads / 32; ++w) x = fmax(x, shared[w]);
  __syncthreads();
  return x;
}

// One block per row of a last-dim softmax. A row holding NaN or +inf, or only -inf, gives NaN.
template <bool log, class T>
__global__ void softmax_rows(T* out, const T* in, int64_t n) {
  using A = sm_t<T>;
  const T* x = in + blockIdx.x * n;
  T* y = out + blockIdx.x * n;
  A m = -INFINITY;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const A v = static_cast<A>(x[i]);
    bad = bad || v != v || v == INFINITY;
    m = fmax(m, v);
  }
  m = block_max(m);
  const bool any_bad = __syncthreads_or(bad) || m == -INFINITY;
  A sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += exp(static_cast<A>(x[i]) - m);
  sum = block_sum<kReduceThreads>(sum);
  const A nan = NAN;
  if constexpr (log) {
    const A lse = m + ::log(sum);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = convert<T>(any_bad ? nan : static_cast<A>(x[i]) - lse);
  } else {
    const A inv = A(1) / sum;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      y[i] = convert<T>(any_bad ? nan : exp(static_cast<A>(x[i]) - m) * inv);
    }
  }
}

// The same with the row kept in shared memory (rows of up to kCachedRow floats): one read of the
// input from device memory instead of three.
inline constexpr int64_t kCachedRow = 12 * 1024;
template <bool log, class T>
__global__ void softmax_rows_cached(T* out, const T* in, int64_t n) {
  using A = sm_t<T>;
  extern __shared__ unsigned char cache_bytes[];
  A* cache = reinterpret_cast<A*>(cache_bytes);
  const T* x = in + blockIdx.x * n;
  T* y = out + blockIdx.x * n;
  A m = -INFINITY;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const A v = static_cast<A>(x[i]);
    cache[i] = v;
    bad = bad || v != v || v == INFINITY;
    m = fmax(m, v);
  }
  m = block_max(m);
  const bool any_bad = __syncthreads_or(bad) || m == -INFINITY;
  A sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += exp(cache[i] - m);
  sum = block_sum<kReduceThreads>(sum);
  const A nan = NAN;
  if constexpr (log) {
    const A lse = m + ::log(sum);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = convert<T>(any_bad ? nan : cache[i] - lse);
  } else {
    const A inv = A(1) / sum;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = convert<T>(any_bad ? nan : exp(cache[i] - m) * inv);
  }
}

// Softmax over a middle dim: one thread per (outer, inner) column.
template <bool log, class T>
__global__ void softmax_columns(T* out, const T* in, int64_t outer, int64_t size, int64_t inner) {
  using A = sm_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * size * inner + c % inner;
  A m = -INFINITY;
  bool bad = false;
  for (int64_t i = 0; i < size; ++i) {
    const A v = static_cast<A>(in[base + i * inner]);
    bad = bad || v != v || v == INFINITY;
    m = fmax(m, v);
  }
  bad = bad || m == -INFINITY;
  A sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += exp(static_cast<A>(in[base + i * inner]) - m);
  const A nan = NAN;
  for (int64_t i = 0; i < size; ++i) {
    const A v = static_cast<A>(in[base + i * inner]);
    out[base + i * inner] = convert<T>(bad ? nan : log ? v - m - ::log(sum) : exp(v - m) / sum);
  }
}

template <bool log, class T>
__global__ void softmax_backward_rows(T* dx, const T* dy, const T* y, int64_t n) {
  using A = sm_t<T>;
  const int64_t row = blockIdx.x;
  const T* g = dy + row * n;
  const T* out = y + row * n;
  A dot = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    dot += log ? static_cast<A>(g[i]) : static_cast<A>(g[i]) * static_cast<A>(out[i]);
  }
  dot = block_sum<kReduceThreads>(dot);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const A gi = static_cast<A>(g[i]), yi = static_cast<A>(out[i]);
    dx[row * n + i] = convert<T>(log ? gi - exp(yi) * dot : yi * (gi - dot));
  }
}

// --- the matrix product's epilogue ---------------------------------------------------------------

template <class T>
__global__ void epilogue_kernel(T* c, int64_t rows, int64_t cols, int64_t ldc, const T* bias, int64_t bias_stride,
                                int activation, const T* residual, int64_t r_row, int64_t r_col) {
  using A = compute_t<T>;
  const int64_t total = rows * cols, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / cols, j = i % cols;
    A v = static_cast<A>(c[r * ldc + j]);
    if (bias != nullptr) v += static_cast<A>(bias[j * bias_stride]);
    if (activation == 1) v = v < A(0) ? A(0) : v;
    if (activation == 2) v = A(0.5) * v * (A(1) + erf(v * A(0.70710678118654752440)));
    if (activation == 3) v = A(0.5) * v * (A(1) + tanh(A(0.79788456080286535588) * (v + A(0.044715) * v * v * v)));
    if (activation == 4) v = v / (A(1) + exp(-v));
    if (residual != nullptr) v += static_cast<A>(residual[r * r_row + j * r_col]);
    c[r * ldc + j] = convert<T>(v);
  }
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

int64_t reduce_workspace_bytes(Reduce op, Type in_type, const ReduceShape& s) {
  const int64_t pieces = pieces_for(op, s);
  return pieces > 1 ? s.num_outputs * pieces * 16 : 0;  // an Item of at most 16 bytes
}

bool reduce(Reduce op, Type in_type, Type out_type, void* out, const void* in, const ReduceShape& s, void* workspace,
            void* stream) {
  if (s.num_outputs == 0) return true;
  switch (op) {
// clang-format off
#define EMBER_CASE(name) \
  case Reduce::name:     \
    return reduce_op<Reduce::name>(in_type, out_type, out, in, s, workspace, as_stream(stream));
    EMBER_CASE(kSum)
    EMBER_CASE(kProd)
    EMBER_CASE(kAmax)
    EMBER_CASE(kAmin)
    EMBER_CASE(kArgmax)
    EMBER_CASE(kArgmin)
    EMBER_CASE(kAll)
    EMBER_CASE(kAny)
#undef EMBER_CASE
    // clang-format on
  }
  return false;
}

bool softmax(bool log, Type type, void* out, const void* in, int64_t outer, int64_t size, int64_t inner, void* stream) {
  if (outer * size * inner == 0) return true;
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      T* y = static_cast<T*>(out);
      const T* x = static_cast<const T*>(in);
      if (inner == 1 && size <= kCachedRow && size * sizeof(sm_t<T>) <= 48 * 1024) {
        auto kernel = log ? softmax_rows_cached<true, T> : softmax_rows_cached<false, T>;
        kernel<<<static_cast<unsigned>(outer), kReduceThreads, size * sizeof(sm_t<T>), as_stream(stream)>>>(y, x, size);
      } else if (inner == 1) {
        auto kernel = log ? softmax_rows<true, T> : softmax_rows<false, T>;
        kernel<<<static_cast<unsigned>(outer), kReduceThreads, 0, as_stream(stream)>>>(y, x, size);
      } else {
        auto kernel = log ? softmax_columns<true, T> : softmax_columns<false, T>;
        kernel<<<grid_for(outer * inner), kThreads, 0, as_stream(stream)>>>(y, x, outer, size, inner);
      }
      ran = true;
    }
  });
  return ran;
}

bool softmax_backward(bool log, Type type, void* dx, const void* dy, const void* y, int64_t rows, int64_t n,
                      void* stream) {
  if (rows * n == 0) return true;
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      auto kernel = log ? softmax_backward_rows<true, T> : softmax_backward_rows<false, T>;
      kernel<<<static_cast<unsigned>(rows), kReduceThreads, 0, as_stream(stream)>>>(
          static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), n);
      ran = true;
    }
  });
  return ran;
}

bool matmul_epilogue(Type type, void* c, int64_t rows, int64_t cols, int64_t ldc, const void* bias, int64_t bias_stride,
                     int activation, const void* residual, int64_t r_row, int64_t r_col, void* stream) {
  if (rows * cols == 0) return true;
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      epilogue_kernel<T><<<grid_for(rows * cols), kThreads, 0, as_stream(stream)>>>(
          static_cast<T*>(c), rows, cols, ldc, static_cast<const T*>(bias), bias_stride, activation,
          static_cast<const T*>(residual), r_row, r_col);
      ran = true;
    }
  });
  return ran;
}

}  // namespace ember::cuda::launch

// Elementwise CUDA kernels: unary and binary math, where, copy/convert and fill. Each op is a
// functor computing in compute_t<T> (float for float16/bfloat16, rounded once on the store), with
// the CPU's semantics (relu keeps NaN, maximum/minimum propagate it, sign(NaN) is 0). Two walks:
// contiguous operands (broadcast scalars allowed) move 16 bytes per thread per load; anything
// else walks the merged strided layout element by element.
#include <cmath>
#include <cstdio>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

// --- functors ------------------------------------------------------------------------------------

template <Unary op>
struct UnaryFn {
  template <class C>
  __device__ __forceinline__ auto operator()(C x) const {
    if constexpr (op == Unary::kNeg) return static_cast<C>(-x);
    if constexpr (op == Unary::kAbs) {
      if constexpr (std::is_floating_point_v<C>) {
        return static_cast<C>(fabs(x));
      } else {
        return static_cast<C>(x < 0 ? -x : x);
      }
    }
    if constexpr (op == Unary::kSign) {
      if constexpr (std::is_same_v<C, bool>) {
        return x;
      } else {
        return static_cast<C>((C(0) < x) - (x < C(0)));
      }
    }
    if constexpr (op == Unary::kSquare) return static_cast<C>(x * x);
    if constexpr (op == Unary::kRelu) return x < C(0) ? C(0) : x;
    if constexpr (op == Unary::kExp) return static_cast<C>(exp(x));
    if constexpr (op == Unary::kLog) return static_cast<C>(log(x));
    if constexpr (op == Unary::kLog1p) return static_cast<C>(log1p(x));
    if constexpr (op == Unary::kExpm1) return static_cast<C>(expm1(x));
    if constexpr (op == Unary::kErf) return static_cast<C>(erf(x));
    if constexpr (op == Unary::kSqrt) return static_cast<C>(sqrt(x));
    if constexpr (op == Unary::kRsqrt) return static_cast<C>(C(1) / sqrt(x));
    if constexpr (op == Unary::kSin) return static_cast<C>(sin(x));
    if constexpr (op == Unary::kCos) return static_cast<C>(cos(x));
    if constexpr (op == Unary::kTanh) return static_cast<C>(tanh(x));
    if constexpr (op == Unary::kSigmoid) return sigmoid(x);
    if constexpr (op == Unary::kSilu) return static_cast<C>(x * sigmoid(x));
    if constexpr (op == Unary::kGeluErf)
      return static_cast<C>(C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440))));
    if constexpr (op == Unary::kGeluTanh) {
      const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
      return static_cast<C>(C(0.5) * x * (C(1) + tanh(inner)));
    }
    if constexpr (op == Unary::kLogicalNot) return !(x != C(0));
    if constexpr (op == Unary::kIsNan) return x != x;
    if constexpr (op == Unary::kIsInf) {
      if constexpr (std::is_floating_point_v<C>) {
        return static_cast<bool>(isinf(x));
      } else {
        return false;
      }
    }
  }
  // exp(-|x|) never overflows; NaN stays NaN.
  template <class C>
  __device__ __forceinline__ static C sigmoid(C x) {
    const C e = exp(-fabs(x));
    return x >= C(0) ? C(1) / (C(1) + e) : x < C(0) ? e / (C(1) + e) : x;
  }
};

template <Binary op>
struct BinaryFn {
  template <class C>
  __device__ __forceinline__ auto operator()(C a, C b) const {
    if constexpr (op == Binary::kAdd) {
      if constexpr (std::is_same_v<C, bool>) {
        return a || b;
      } else {
        return static_cast<C>(a + b);
      }
    }
    if constexpr (op == Binary::kSub) return static_cast<C>(a - b);
    if constexpr (op == Binary::kMul) {
      if constexpr (std::is_same_v<C, bool>) {
        return a && b;
      } else {
        return static_cast<C>(a * b);
      }
    }
    if constexpr (op == Binary::kDiv) return static_cast<C>(a / b);
    if constexpr (op == Binary::kPow) {
      if constexpr (std::is_floating_point_v<C>) {
        return static_cast<C>(pow(a, b));
      } else {
        return static_cast<C>(pow(static_cast<double>(a), static_cast<double>(b)));
      }
    }
    if constexpr (op == Binary::kMaximum) return (a != a) ? a : (b != b) ? b : (a > b ? a : b);
    if constexpr (op == Binary::kMinimum) return (a != a) ? a : (b != b) ? b : (a < b ? a : b);
    if constexpr (op == Binary::kEq) return a == b;
    if constexpr (op == Binary::kNe) return a != b;
    if constexpr (op == Binary::kLt) return a < b;
    if constexpr (op == Binary::kLe) return a <= b;
    if constexpr (op == Binary::kGt) return a > b;
    if constexpr (op == Binary::kGe) return a >= b;
    if constexpr (op == Binary::kLogicalAnd) return (a != C(0)) && (b != C(0));
    if constexpr (op == Binary::kLogicalOr) return (a != C(0)) || (b != C(0));
    if constexpr (op == Binary::kThresholdBackward) return b > C(0) ? a : C(0);
    // GELU's slope at b (the CPU's gelu_slope, kernels/cpu/threshold.cpp) times the gradient a.
    if constexpr (op == Binary::kGeluGradErf) {
      return a * (C(0.5) * (C(1) + erf(b * C(0.70710678118654752440))) +
                  b * C(0.39894228040143267794) * exp(C(-0.5) * b * b));
    }
    if constexpr (op == Binary::kGeluGradTanh) {
      const C b2 = b * b, k = C(0.79788456080286535588), c = C(0.044715);
      const C t = tanh(k * b * (C(1) + c * b2));
      return a * (C(0.5) * (C(1) + t) + C(0.5) * b * (C(1) - t * t) * k * (C(1) + C(3) * c * b2));
    }
  }
};

// --- walks ---------------------------------------------------------------------------------------

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// out[i] = f(in_0[i], ...) over contiguous operands; an input with `scalar` set is one element
// broadcast to all. V elements per thread per step, loaded as one vector when `vectorized`.
template <int V, bool vectorized, class Out, class In, int N, class F>
__global__ void contiguous_kernel(Out* out, F f, int64_t numel, unsigned scalar_mask, const In* in0, const In* in1) {
  const In* ins[2] = {in0, in1};
  const int64_t vectors = numel / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    In x[N][V];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (scalar_mask & (1u << k)) {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = ins[k][0];
      } else if constexpr (vectorized) {
        const Vec<In, V> loaded = reinterpret_cast<const Vec<In, V>*>(ins[k])[v];
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = loaded.v[j];
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = ins[k][v * V + j];
      }
    }
    Vec<Out, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (N == 1) result.v[j] = f(x[0][j]);
      if constexpr (N == 2) result.v[j] = f(x[0][j], x[1][j]);
    }
    if constexpr (vectorized) {
      reinterpret_cast<Vec<Out, V>*>(out)[v] = result;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) out[v * V + j] = result.v[j];
    }
  }
  // The tail: fewer than V elements, by the first block.
  if (blockIdx.x == 0) {
    for (int64_t i = vectors * V + threadIdx.x; i < numel; i += blockDim.x) {
      const In a = (scalar_mask & 1u) ? ins[0][0] : ins[0][i];
      if constexpr (N == 1) {
        out[i] = f(a);
      } else {
        const In b = (scalar_mask & 2u) ? ins[1][0] : ins[1][i];
        out[i] = f(a, b);
      }
    }
  }
}

template <class I, class Out, class In, int N, class F>
__global__ void strided_kernel(Out* out, F f, Layout l, const In* in0, const In* in1) {
  const I numel = static_cast<I>(l.numel), stride = static_cast<I>(gridDim.x * blockDim.x);
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < numel; i += stride) {
    const Offsets<N + 1, I> o = offsets_of<N + 1, I>(l, i, l.ndim);
    if constexpr (N == 1) out[o.at[0]] = f(in0[o.at[1]]);
    if constexpr (N == 2) out[o.at[0]] = f(in0[o.at[1]], in1[o.at[2]]);
  }
}

// Rows of a layout whose innermost dim has unit or zero stride in every operand, V elements of a
// row per thread per step: the row's offsets are found once per V elements, and operands with unit
// stride load and store V elements as one vector (the host checks the alignment). An operand with
// stride 0 along the row loads one element for the V.
template <int V, class Out, class In, int N, class F>
__global__ void rows_kernel(Out* out, F f, Layout l, const In* in0, const In* in1) {
  const In* ins[2] = {in0, in1};
  const int inner_dim = l.ndim - 1;
  const int32_t inner = static_cast<int32_t>(l.sizes[inner_dim]);
  const int32_t vectors = static_cast<int32_t>(l.numel / V), stride = static_cast<int32_t>(gridDim.x * blockDim.x);
  for (int32_t v = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); v < vectors; v += stride) {
    const int32_t i = v * V, row = i / inner, col = i - row * inner;
    const Offsets<N + 1, int32_t> o = offsets_of<N + 1, int32_t>(l, row, inner_dim);
    In x[N][V];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const In* p = ins[k] + o.at[k + 1];
      if (l.strides[k + 1][inner_dim] == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = p[0];
      } else {
        const Vec<In, V> loaded = *reinterpret_cast<const Vec<In, V>*>(p + col);
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = loaded.v[j];
      }
    }
    Vec<Out, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (N == 1) result.v[j] = f(x[0][j]);
      if constexpr (N == 2) result.v[j] = f(x[0][j], x[1][j]);
    }
    *reinterpret_cast<Vec<Out, V>*>(out + o.at[0] + col) = result;
  }
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Runs f over N inputs of type In into out, choosing the walk from the layout.
template <class Out, class In, int N, class F>
void run(F f, Out* out, const In* in0, const In* in1, const Layout& l, cudaStream_t stream) {
  if (l.numel == 0) return;
  const In* ins[2] = {in0, in1};
  bool contiguous = l.ndim <= 1 && (l.ndim == 0 || l.strides[0][0] == 1);
  unsigned scalar_mask = 0;
  for (int k = 0; k < N && contiguous; ++k) {
    const int64_t s = l.ndim == 0 ? 0 : l.strides[k + 1][0];
    if (s == 0) scalar_mask |= 1u << k;
    contiguous = s == 0 || s == 1;
  }
  constexpr int V = 16 / sizeof(In) > 8 ? 8 : 16 / sizeof(In);
  if (!contiguous) {
    const bool small = fits_32_bits(l);
    // The rows walk: unit or zero inner strides, whole vectors per row, aligned rows.
    bool rows = small && l.ndim >= 2 && l.sizes[l.ndim - 1] % V == 0 && l.strides[0][l.ndim - 1] == 1 &&
                aligned(out, sizeof(Out) * V);
    for (int k = 0; k <= N && rows; ++k) {
      const int64_t inner = l.strides[k][l.ndim - 1];
      rows = inner == 0 || inner == 1;
      if (inner == 1) {
        for (int d = 0; d + 1 < l.ndim; ++d) rows = rows && l.strides[k][d] % V == 0;
        if (k > 0) rows = rows && aligned(ins[k - 1], 16);
      }
    }
    if (rows) {
      rows_kernel<V, Out, In, N><<<grid_for(l.numel / V), kThreads, 0, stream>>>(out, f, l, in0, in1);
    } else if (small) {
      strided_kernel<int32_t, Out, In, N><<<grid_for(l.numel), kThreads, 0, stream>>>(out, f, l, in0, in1);
    } else {
      strided_kernel<int64_t, Out, In, N><<<grid_for(l.numel), kThreads, 0, stream>>>(out, f, l, in0, in1);
    }
    return;
  }
  bool vectorized = aligned(out, sizeof(Out) * V);
  for (int k = 0; k < N; ++k) vectorized = vectorized && ((scalar_mask >> k) & 1u || aligned(ins[k], 16));
  const unsigned grid = grid_for((l.numel + V - 1) / V);
  if (vectorized) {
    contiguous_kernel<V, true, Out, In, N><<<grid, kThreads, 0, stream>>>(out, f, l.numel, scalar_mask, in0, in1);
  } else {
    contiguous_kernel<V, false, Out, In, N><<<grid, kThreads, 0, stream>>>(out, f, l.numel, scalar_mask, in0, in1);
  }
}

// Applies F in compute_t<T> and rounds the result back to T (or passes a bool through).
template <class T, class F>
struct InCompute {
  F f;
  template <class... X>
  __device__ __forceinline__ auto operator()(X... x) const {
    using C = compute_t<T>;
    using R = decltype(f(static_cast<C>(x)...));
    if constexpr (std::is_same_v<R, bool>) {
      return f(static_cast<C>(x)...);
    } else {
      return convert<T>(f(static_cast<C>(x)...));
    }
  }
};

template <Unary op>
constexpr bool kBoolResult = op == Unary::kLogicalNot || op == Unary::kIsNan || op == Unary::kIsInf;
// Ops the front-end sends integers to (the others get floats only).
template <Unary op>
constexpr bool kTakesIntegers = op == Unary::kNeg || op == Unary::kAbs || op == Unary::kSign || op == Unary::kSquare ||
                                op == Unary::kRelu || kBoolResult<op>;

template <Unary op>
bool unary_op(Type type, void* out, const void* in, const Layout& l, cudaStream_t stream) {
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T> || (kTakesIntegers<op> && (op != Unary::kNeg || !std::is_same_v<T, bool>))) {
      using Out = std::conditional_t<kBoolResult<op>, bool, T>;
      run<Out, T, 1>(InCompute<T, UnaryFn<op>>{}, static_cast<Out*>(out), static_cast<const T*>(in), nullptr, l,
                     stream);
      ran = true;
    }
  });
  return ran;
}

template <Binary op>
constexpr bool kComparison =
    op == Binary::kEq || op == Binary::kNe || op == Binary::kLt || op == Binary::kLe || op == Binary::kGt ||
    op == Binary::kGe || op == Binary::kLogicalAnd || op == Binary::kLogicalOr;

template <Binary op>
bool binary_op(Type type, void* out, const void* a, const void* b, const Layout& l, cudaStream_t stream) {
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr bool float_only =
        op == Binary::kDiv || op == Binary::kPow || op == Binary::kGeluGradErf || op == Binary::kGeluGradTanh;
    constexpr bool no_bool = op == Binary::kSub || op == Binary::kThresholdBackward;
    if constexpr ((kIsFloat<T> || !float_only) && !(no_bool && std::is_same_v<T, bool>)) {
      using Out = std::conditional_t<kComparison<op>, bool, T>;
      run<Out, T, 2>(InCompute<T, BinaryFn<op>>{}, static_cast<Out*>(out), static_cast<const T*>(a),
                     static_cast<const T*>(b), l, stream);
      ran = true;
    }
  });
  return ran;
}

template <class T>
__global__ void where_kernel(T* out, const bool* cond, const T* a, const T* b, Layout l) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.numel; i += stride) {
    const Offsets<4, int64_t> o = offsets_of<4, int64_t>(l, i, l.ndim);
    out[o.at[0]] = cond[o.at[1]] ? a[o.at[2]] : b[o.at[3]];
  }
}

template <class To>
struct ConvertTo {
  template <class From>
  __device__ __forceinline__ To operator()(From x) const {
    return convert<To>(x);
  }
};

template <class T>
__global__ void fill_kernel(T* out, T value, Layout l) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.numel; i += stride) {
    out[offsets_of<1, int64_t>(l, i, l.ndim).at[0]] = value;
  }
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

bool unary(Unary op, Type type, void* out, const void* in, const Layout& l, void* stream) {
  switch (op) {
// clang-format off
#define EMBER_CASE(name) \
  case Unary::name:      \
    return unary_op<Unary::name>(type, out, in, l, as_stream(stream));
    EMBER_CASE(kNeg)
    EMBER_CASE(kAbs)
    EMBER_CASE(kSign)
    EMBER_CASE(kExp)
    EMBER_CASE(kLog)
    EMBER_CASE(kLog1p)
    EMBER_CASE(kExpm1)
    EMBER_CASE(kErf)
    EMBER_CASE(kSqrt)
    EMBER_CASE(kRsqrt)
    EMBER_CASE(kSquare)
    EMBER_CASE(kSin)
    EMBER_CASE(kCos)
    EMBER_CASE(kTanh)
    EMBER_CASE(kSigmoid)
    EMBER_CASE(kRelu)
    EMBER_CASE(kSilu)
    EMBER_CASE(kGeluErf)
    EMBER_CASE(kGeluTanh)
    EMBER_CASE(kLogicalNot)
    EMBER_CASE(kIsNan)
    EMBER_CASE(kIsInf)
#undef EMBER_CASE
    // clang-format on
  }
  return false;
}

bool binary(Binary op, Type type, void* out, const void* a, const void* b, const Layout& l, void* stream) {
  switch (op) {
// clang-format off
#define EMBER_CASE(name) \
  case Binary::name:     \
    return binary_op<Binary::name>(type, out, a, b, l, as_stream(stream));
    EMBER_CASE(kAdd)
    EMBER_CASE(kSub)
    EMBER_CASE(kMul)
    EMBER_CASE(kDiv)
    EMBER_CASE(kPow)
    EMBER_CASE(kMinimum)
    EMBER_CASE(kMaximum)
    EMBER_CASE(kEq)
    EMBER_CASE(kNe)
    EMBER_CASE(kLt)
    EMBER_CASE(kLe)
    EMBER_CASE(kGt)
    EMBER_CASE(kGe)
    EMBER_CASE(kLogicalAnd)
    EMBER_CASE(kLogicalOr)
    EMBER_CASE(kThresholdBackward)
    EMBER_CASE(kGeluGradErf)
    EMBER_CASE(kGeluGradTanh)
#undef EMBER_CASE
    // clang-format on
  }
  return false;
}

void where(Type type, void* out, const bool* cond, const void* a, const void* b, const Layout& l, void* stream) {
  if (l.numel == 0) return;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    where_kernel<T><<<grid_for(l.numel), kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(out), cond, static_cast<const T*>(a), static_cast<const T*>(b), l);
  });
}

void copy(Type out_type, Type in_type, void* out, const void* in, const Layout& l, void* stream) {
  with_type(out_type, [&](auto out_tag) {
    using To = decltype(out_tag);
    with_type(in_type, [&](auto in_tag) {
      using From = decltype(in_tag);
      run<To, From, 1>(ConvertTo<To>{}, static_cast<To*>(out), static_cast<const From*>(in), nullptr, l,
                       as_stream(stream));
    });
  });
}

void fill(Type type, void* out, double value, int64_t int_value, const Layout& l, void* stream) {
  if (l.numel == 0) return;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bool>) {
      v = value != 0 || int_value != 0;
    } else if constexpr (std::is_integral_v<T>) {
      v = static_cast<T>(int_value);
    } else {
      v = convert<T>(static_cast<compute_t<T>>(value));
    }
    fill_kernel<T><<<grid_for(l.numel), kThreads, 0, as_stream(stream)>>>(static_cast<T*>(out), v, l);
  });
}

const char* last_error() {
  static thread_local char text[256];
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return "";
  snprintf(text, sizeof(text), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return text;
}

}  // namespace ember::cuda::launch

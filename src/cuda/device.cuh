// What every CUDA kernel file shares: the element types and their conversions, the type switch,
// the strided-layout walker and the launch shape. Device code only; included by the .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/launch.h"

namespace ember::cuda::launch {

using bf16 = __nv_bfloat16;
using f16 = __half;

// The type arithmetic happens in: float for the 16-bit floats.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bf16> || std::is_same_v<T, f16>, float, T>;

template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Conversions between element types, as C++'s static_cast with the 16-bit floats rounded to
// nearest even; float to integer saturates and NaN gives 0, as on the CPU. Host code uses it too
// (fill converts its value on the host): a __device__-only function called from the host compiles
// to a stub that exits the process.
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bf16> || std::is_same_v<From, f16>) {
    return convert<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, f16>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (x != x) return To(0);
    const double lo = -9.2233720368547758e18, hi = 9.2233720368547748e18;
    const double clamped = static_cast<double>(x) < lo ? lo : static_cast<double>(x) > hi ? hi : static_cast<double>(x);
    return static_cast<To>(static_cast<int64_t>(clamped));
  } else {
    return static_cast<To>(x);
  }
}

// Calls fn(T{}) with the C++ type of `type`.
template <class Fn>
void with_type(Type type, Fn&& fn) {
  switch (type) {
    case Type::kF32:
      return fn(float{});
    case Type::kF64:
      return fn(double{});
    case Type::kF16:
      return fn(f16{});
    case Type::kBF16:
      return fn(bf16{});
    case Type::kI64:
      return fn(int64_t{});
    case Type::kI32:
      return fn(int32_t{});
    case Type::kBool:
      return fn(bool{});
  }
}

// Calls fn(T{}) for float32 (float) and float64 (double) and returns true; false, calling nothing,
// for any other type (the kernels that take those two alone).
template <class Fn>
bool with_float32_or_64(Type type, Fn&& fn) {
  if (type == Type::kF32) return fn(float{}), true;
  if (type == Type::kF64) return fn(double{}), true;
  return false;
}

// The sum of x over a block of kBlockThreads threads (a multiple of 32); every thread gets it. All
// of the block's threads must call it.
template <int kBlockThreads, class A>
__device__ A block_sum(A x) {
  __shared__ A shared[kBlockThreads / 32];
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
  __syncthreads();
  x = shared[0];
  for (int w = 1; w < kBlockThreads / 32; ++w) x += shared[w];
  __syncthreads();  // the next call reuses `shared`
  return x;
}

// Threads per block of the elementwise kernels, and a grid that covers `work` items with at most
// a few waves of blocks (each thread then strides over the rest).
inline constexpr int kThreads = 256;
inline unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = int64_t{132} * 32;  // 32 blocks on each of an H100/H200's SMs
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Element offsets of linear index i in each of N operands of a strided layout, over its first
// `ndim` dims. I is the index type: 32-bit where every index and offset fits (fits_32_bits), as
// a 32-bit division costs a fraction of a 64-bit one.
template <int N, class I>
struct Offsets {
  I at[N];
};
template <int N, class I>
__device__ __forceinline__ Offsets<N, I> offsets_of(const Layout& l, I i, int ndim) {
  Offsets<N, I> o{};
  for (int d = ndim - 1; d >= 0; --d) {
    const I size = static_cast<I>(l.sizes[d]);
    const I q = i / size, r = i - q * size;
    i = q;
#pragma unroll
    for (int k = 0; k < N; ++k) o.at[k] += r * static_cast<I>(l.strides[k][d]);
  }
  return o;
}

// Whether every linear index and every operand's offset of the layout fits in an int32.
inline bool fits_32_bits(const Layout& l) {
  if (l.numel > INT32_MAX) return false;
  for (int k = 0; k < l.operands; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < l.ndim; ++d) {
      const int64_t s = l.strides[k][d] < 0 ? -l.strides[k][d] : l.strides[k][d];
      reach += (l.sizes[d] - 1) * s;
    }
    if (reach > INT32_MAX) return false;
  }
  return true;
}

}  // namespace ember::cuda::launch

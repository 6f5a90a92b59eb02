// Random draws (rand, randn, randint, dropout) and arange on the GPU: Philox4x32-10 with the CPU
// kernels' counter layout (two elements per block), so a draw of a given key and block gives the
// CPU's numbers.
#include <cmath>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

struct Words {
  uint32_t w[4];
};

__device__ __forceinline__ Words philox(uint64_t seed, uint64_t block) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1, n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from the top 24 (float) or 53 (double) bits, as the CPU's to_unit.
__device__ __forceinline__ double to_unit(uint32_t lo, uint32_t hi, bool wide) {
  if (wide) return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<double>(lo >> 8) * (1.0 / 16777216.0);
}

template <class T>
__global__ void random_float_kernel(Draw draw, T* out, int64_t n, uint64_t seed, uint64_t first_block) {
  const bool wide = std::is_same_v<T, double>;
  const int64_t blocks = (n + 1) / 2, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const Words w = philox(seed, first_block + static_cast<uint64_t>(b));
    double v[2];
    if (draw == Draw::kUniform) {
      v[0] = to_unit(w.w[0], w.w[1], wide);
      v[1] = to_unit(w.w[2], w.w[3], wide);
    } else {  // Box-Muller: one block gives two uniform pairs, hence two normals
      const double u1 = 1.0 - to_unit(w.w[0], w.w[1], wide), u2 = to_unit(w.w[2], w.w[3], wide);
      const double r = sqrt(-2.0 * log(u1));
      v[0] = r * cos(2.0 * M_PI * u2);
      v[1] = r * sin(2.0 * M_PI * u2);
    }
    for (int j = 0; j < 2 && 2 * b + j < n; ++j) out[2 * b + j] = convert<T>(static_cast<compute_t<T>>(v[j]));
  }
}

__global__ void random_int_kernel(int64_t* out, int64_t n, int64_t low, uint64_t range, uint64_t seed,
                                  uint64_t first_block) {
  const int64_t blocks = (n + 1) / 2, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const Words w = philox(seed, first_block + static_cast<uint64_t>(b));
    for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
      const uint64_t r = (static_cast<uint64_t>(w.w[2 * j + 1]) << 32) | w.w[2 * j];
      out[2 * b + j] = low + static_cast<int64_t>(r % range);
    }
  }
}

template <class T>
__global__ void dropout_kernel(T* y, T* mask, const T* x, int64_t n, float keep_below, T kept, uint64_t seed,
                               uint64_t first_block) {
  using C = compute_t<T>;
  const int64_t blocks = (n + 1) / 2, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const Words w = philox(seed, first_block + static_cast<uint64_t>(b));
    for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
      const float u = static_cast<float>(to_unit(w.w[2 * j], w.w[2 * j + 1], false));
      const int64_t i = 2 * b + j;
      const T m = u < keep_below ? kept : convert<T>(C(0));
      mask[i] = m;
      y[i] = convert<T>(static_cast<C>(x[i]) * static_cast<C>(m));
    }
  }
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step, int64_t int_start, int64_t int_step,
                              bool integral) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (!kIsFloat<T>) {
      if (integral) {
        out[i] = static_cast<T>(int_start + i * int_step);
        continue;
      }
    }
    out[i] = convert<T>(static_cast<compute_t<T>>(start + static_cast<double>(i) * step));
  }
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

bool random_float(Draw draw, Type type, void* out, int64_t n, uint64_t seed, uint64_t first_block, void* stream) {
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      if (n > 0) {
        random_float_kernel<T><<<grid_for((n + 1) / 2), kThreads, 0, as_stream(stream)>>>(draw, static_cast<T*>(out), n,
                                                                                          seed, first_block);
      }
      ran = true;
    }
  });
  return ran;
}

bool random_int(int64_t* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t first_block, void* stream) {
  if (n > 0) {
    const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
    random_int_kernel<<<grid_for((n + 1) / 2), kThreads, 0, as_stream(stream)>>>(out, n, low, range, seed, first_block);
  }
  return true;
}

bool dropout(Type type, void* y, void* mask, const void* x, int64_t n, double p, uint64_t seed, uint64_t first_block,
             void* stream) {
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      const T kept = convert<T>(static_cast<compute_t<T>>(1.0 / (1.0 - p)));
      if (n > 0) {
        dropout_kernel<T><<<grid_for((n + 1) / 2), kThreads, 0, as_stream(stream)>>>(
            static_cast<T*>(y), static_cast<T*>(mask), static_cast<const T*>(x), n, static_cast<float>(1.0 - p), kept,
            seed, first_block);
      }
      ran = true;
    }
  });
  return ran;
}

bool arange(Type type, void* out, int64_t n, double start, double step, int64_t int_start, int64_t int_step,
            bool integral, void* stream) {
  bool ran = false;
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      if (n > 0) {
        arange_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
            static_cast<T*>(out), n, start, step, int_start, int_step, integral && !kIsFloat<T>);
      }
      ran = true;
    }
  });
  return ran;
}

}  // namespace ember::cuda::launch

// The training kernels: cross-entropy forward and backward (one block per position, the block's
// threads over its classes) and the optimizers' updates (one thread per element), with the CPU
// kernels' formulas (src/kernels/cpu/loss.cpp, optim.cpp).
#include <cmath>

#include "cuda/device.cuh"

namespace ember::cuda::launch {
namespace {

inline constexpr int kLossThreads = 128;

template <class A>
__device__ A block_reduce(A x, bool max) {
  __shared__ A shared[kLossThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const A y = __shfl_xor_sync(0xffffffffu, x, o);
    x = max ? (x != x ? x : y != y ? y : fmax(x, y)) : x + y;
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
  __syncthreads();
  x = shared[0];
  for (int w = 1; w < kLossThreads / 32; ++w) x = max ? (x != x ? x : fmax(x, shared[w])) : x + shared[w];
  __syncthreads();
  return x;
}

template <class T>
__global__ void ce_forward_kernel(ClassLoss a, const T* scores, T* loss, T* lse, unsigned long long* bad) {
  const int64_t p = blockIdx.x, o = p / a.inner, i = p % a.inner;
  const T* row = scores + o * a.classes * a.inner + i;
  T m = -INFINITY, total = 0;
  for (int64_t c = threadIdx.x; c < a.classes; c += blockDim.x) {
    const T v = row[c * a.inner];
    m = v != v ? v : fmax(m, v);
    total += v;
  }
  m = block_reduce(m, true);
  total = block_reduce(total, false);
  // A row of -inf (or with +inf) has no finite max to shift by.
  const T shift = isfinite(m) ? m : T(0);
  T sum_exp = 0;
  for (int64_t c = threadIdx.x; c < a.classes; c += blockDim.x) sum_exp += exp(row[c * a.inner] - shift);
  sum_exp = block_reduce(sum_exp, false);
  if (threadIdx.x != 0) return;
  const T log_sum = log(sum_exp) + shift;
  lse[p] = log_sum;
  const int64_t t = a.target[p];
  if (t == a.ignore_index) {
    loss[p] = 0;
    return;
  }
  if (t < 0 || t >= a.classes) {
    atomicMin(bad, static_cast<unsigned long long>(p));
    loss[p] = NAN;
    return;
  }
  T value = log_sum - row[t * a.inner];
  const T smoothing = static_cast<T>(a.label_smoothing);
  if (smoothing != T(0)) value = (1 - smoothing) * value + smoothing * (log_sum - total / static_cast<T>(a.classes));
  loss[p] = value;
}

template <class T>
__global__ void ce_backward_kernel(ClassLoss a, const T* scores, const T* lse, const T* scale, int64_t scale_stride,
                                   T* grad) {
  const int64_t p = blockIdx.x, o = p / a.inner, i = p % a.inner;
  const int64_t start = o * a.classes * a.inner + i;
  const T* row = scores + start;
  T* out = grad + start;
  const int64_t t = a.target[p];
  const T smoothing = static_cast<T>(a.label_smoothing), off_target = smoothing / static_cast<T>(a.classes);
  const T s = scale[p * scale_stride], log_sum = lse[p];
  for (int64_t c = threadIdx.x; c < a.classes; c += blockDim.x) {
    T g = 0;
    if (t != a.ignore_index) {
      g = s * (exp(row[c * a.inner] - log_sum) - off_target);
      if (c == t) g -= s * (1 - smoothing);
    }
    out[c * a.inner] = g;
  }
}

template <class T>
__global__ void sgd_kernel(SgdStep s, T* param, const T* grad, T* buf, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T p = param[i];
    T g = grad[i];
    if (s.weight_decay != 0) g = g + static_cast<T>(s.weight_decay) * p;
    if (s.momentum != 0) {
      T b = g;
      if (!s.first_step) b = buf[i] * static_cast<T>(s.momentum) + static_cast<T>(1.0 - s.dampening) * g;
      buf[i] = b;
      g = s.nesterov ? g + static_cast<T>(s.momentum) * b : b;
    }
    param[i] = p + static_cast<T>(-s.lr) * g;
  }
}

template <class T>
__global__ void adam_kernel(AdamStep s, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                            int64_t n) {
  const T weight1 = static_cast<T>(1.0 - s.beta1);
  const T one_minus_weight1 = static_cast<T>(1.0 - static_cast<double>(weight1));
  const bool weight1_is_small = fabs(static_cast<double>(weight1)) < 0.5;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    T p = param[i], g = grad[i];
    if (s.weight_decay != 0) {
      if (s.decoupled_weight_decay) {
        p = p * static_cast<T>(1.0 - s.lr * s.weight_decay);
      } else {
        g = g + static_cast<T>(s.weight_decay) * p;
      }
    }
    // torch.lerp: exact at both ends of [0, 1].
    const T diff = g - exp_avg[i];
    const T m = weight1_is_small ? exp_avg[i] + weight1 * diff : g - diff * one_minus_weight1;
    const T v = exp_avg_sq[i] * static_cast<T>(s.beta2) + static_cast<T>(1.0 - s.beta2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T v_hat = v;
    if (max_exp_avg_sq != nullptr) {
      const T old = max_exp_avg_sq[i];
      v_hat = old != old ? old : v != v ? v : fmax(old, v);
      max_exp_avg_sq[i] = v_hat;
    }
    const T denom = sqrt(v_hat) / static_cast<T>(s.bias_correction2_sqrt) + static_cast<T>(s.eps);
    param[i] = p + static_cast<T>(-s.step_size) * m / denom;
  }
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

bool cross_entropy_forward(Type type, const ClassLoss& a, const void* scores, void* loss, void* lse,
                           int64_t* bad_target, void* stream) {
  const int64_t positions = a.outer * a.inner;
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (positions == 0) return;
    ce_forward_kernel<T><<<static_cast<unsigned>(positions), kLossThreads, 0, as_stream(stream)>>>(
        a, static_cast<const T*>(scores), static_cast<T*>(loss), static_cast<T*>(lse),
        reinterpret_cast<unsigned long long*>(bad_target));
  });
}

bool cross_entropy_backward(Type type, const ClassLoss& a, const void* scores, const void* lse, const void* scale,
                            int64_t scale_stride, void* grad, void* stream) {
  const int64_t positions = a.outer * a.inner;
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (positions == 0) return;
    ce_backward_kernel<T><<<static_cast<unsigned>(positions), kLossThreads, 0, as_stream(stream)>>>(
        a, static_cast<const T*>(scores), static_cast<const T*>(lse), static_cast<const T*>(scale), scale_stride,
        static_cast<T*>(grad));
  });
}

bool sgd_step(Type type, const SgdStep& s, void* param, const void* grad, void* momentum_buffer, int64_t n,
              void* stream) {
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    sgd_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
        s, static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum_buffer), n);
  });
}

bool adam_step(Type type, const AdamStep& s, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, int64_t n, void* stream) {
  return with_float32_or_64(type, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    adam_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
        s, static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq),
        static_cast<T*>(max_exp_avg_sq), n);
  });
}

}  // namespace ember::cuda::launch

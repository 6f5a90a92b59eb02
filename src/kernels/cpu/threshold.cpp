// The activations' fused backwards (threshold.h) for every Highway target and float type (float16
// and bfloat16 computed in float32 vectors, rounded once): ReLU's (one read of grad
// and of the saved output, one write, instead of gt() into a bool tensor and where() over three
// operands) and GELU's (one pass instead of the nine elementwise ops of its decomposition).
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/threshold.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/threshold.h"

#include <cmath>
#include <cstdint>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {
#include "kernels/cpu/float_vector-inl.h"  // load_vector, store_vector
#include "kernels/cpu/functors-inl.h"      // vec::erf_for_gelu, exp_nonpositive
}  // namespace

// float16 and bfloat16 are computed in float32 vectors (float_vector-inl.h) and rounded once.
template <class T>
void relu_backward_range(const T* grad, const T* out, T* result, int64_t begin, int64_t end) {
  using C = compute_t<T>;
  int64_t i = begin;
  const hn::ScalableTag<C> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  // Le is false for NaN, so a NaN output lets the gradient through (PyTorch's `out <= 0 ? 0 : g`).
  for (; i + lanes <= end; i += lanes) {
    store_vector(d, hn::IfThenZeroElse(hn::Le(load_vector(d, out + i), zero), load_vector(d, grad + i)), result + i);
  }
  for (; i < end; ++i) result[i] = static_cast<C>(out[i]) <= C(0) ? T(C(0)) : grad[i];
}

void ReluBackwardF32(const float* grad, const float* out, float* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
}
void ReluBackwardF64(const double* grad, const double* out, double* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
}
void ReluBackwardF16(const Half* grad, const Half* out, Half* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
}
void ReluBackwardBF16(const BFloat16* grad, const BFloat16* out, BFloat16* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCoefficient = 0.044715;

// d/dx of x Phi(x): Phi(x) + x phi(x); of the tanh form x/2 (1 + t), t = tanh(u),
// u = sqrt(2/pi) (x + c x^3): (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 c x^2).
template <class T>
T gelu_slope(T x, bool tanh_form) {
  if (tanh_form) {
    const T x2 = x * x;
    const T t = std::tanh(T(kSqrt2OverPi) * x * (T(1) + T(kTanhCoefficient) * x2));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kTanhCoefficient) * x2);
  }
  return T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
}

template <class T>
void gelu_backward_range(const T* grad, const T* x, T* result, int64_t begin, int64_t end, bool tanh_form) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) {
    const auto v = load_vector(d, x + i);
    const auto v2 = hn::Mul(v, v);
    hn::Vec<decltype(d)> slope;
    if (tanh_form) {
      // Note [GELU's tanh form]: with s = sigmoid(2u) = (1 + t)/2, the slope is s + 2 x s (1 - s) du.
      const auto k = hn::Set(d, static_cast<float>(kSqrt2OverPi));
      const auto s = vec::sigmoid<false>(
          d, hn::Mul(hn::Set(d, static_cast<float>(2 * kSqrt2OverPi)),
                     hn::Mul(v, hn::MulAdd(hn::Set(d, static_cast<float>(kTanhCoefficient)), v2, one))));
      const auto du = hn::Mul(k, hn::MulAdd(hn::Set(d, static_cast<float>(3 * kTanhCoefficient)), v2, one));
      slope = hn::MulAdd(hn::Mul(hn::Add(v, v), hn::Mul(s, hn::Sub(one, s))), du, s);
    } else {
      // Note [GELU's erf]; the density's exponent is never positive.
      const auto cdf =
          hn::Mul(half, hn::Add(one, vec::erf_for_gelu(d, hn::Mul(v, hn::Set(d, static_cast<float>(kInvSqrt2))))));
      const auto pdf =
          hn::Mul(hn::Set(d, static_cast<float>(kInvSqrt2Pi)), exp_nonpositive(d, hn::Mul(hn::Set(d, -0.5f), v2)));
      slope = hn::MulAdd(v, pdf, cdf);
    }
    store_vector(d, hn::Mul(load_vector(d, grad + i), slope), result + i);
  }
  for (; i < end; ++i) result[i] = T(static_cast<float>(grad[i]) * gelu_slope(static_cast<float>(x[i]), tanh_form));
}

void GeluBackwardF32(const float* grad, const float* x, float* result, int64_t begin, int64_t end, bool tanh_form) {
  gelu_backward_range(grad, x, result, begin, end, tanh_form);
}
void GeluBackwardF16(const Half* grad, const Half* x, Half* result, int64_t begin, int64_t end, bool tanh_form) {
  gelu_backward_range(grad, x, result, begin, end, tanh_form);
}
void GeluBackwardBF16(const BFloat16* grad, const BFloat16* x, BFloat16* result, int64_t begin, int64_t end,
                      bool tanh_form) {
  gelu_backward_range(grad, x, result, begin, end, tanh_form);
}

// float64 keeps the standard library's erf, exp and tanh.
void GeluBackwardF64(const double* grad, const double* x, double* result, int64_t begin, int64_t end, bool tanh_form) {
  for (int64_t i = begin; i < end; ++i) result[i] = grad[i] * gelu_slope(x[i], tanh_form);
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {

HWY_EXPORT(ReluBackwardF32);
HWY_EXPORT(ReluBackwardF64);
HWY_EXPORT(ReluBackwardF16);
HWY_EXPORT(ReluBackwardBF16);
HWY_EXPORT(GeluBackwardF32);
HWY_EXPORT(GeluBackwardF64);
HWY_EXPORT(GeluBackwardF16);
HWY_EXPORT(GeluBackwardBF16);

namespace {

// Calls fn(T*) with the element type of dtype, one of the float types.
template <class Fn>
void with_float_type(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case kFloat32:
      return fn(static_cast<float*>(nullptr));
    case kFloat64:
      return fn(static_cast<double*>(nullptr));
    case kFloat16:
      return fn(static_cast<Half*>(nullptr));
    case kBFloat16:
      return fn(static_cast<BFloat16*>(nullptr));
    default:
      EMBER_FAIL("[", op, "] the CPU kernel takes a float type, got ", dtype);
  }
}

}  // namespace

void relu_backward(DType dtype, const void* grad, const void* out, void* result, int64_t n) {
  with_float_type(dtype, "threshold_backward", [&]<class T>(T*) {
    const auto* g = static_cast<const T*>(grad);
    const auto* y = static_cast<const T*>(out);
    auto* r = static_cast<T*>(result);
    parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) HWY_DYNAMIC_DISPATCH(ReluBackwardF32)(g, y, r, begin, end);
      if constexpr (std::is_same_v<T, double>) HWY_DYNAMIC_DISPATCH(ReluBackwardF64)(g, y, r, begin, end);
      if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(ReluBackwardF16)(g, y, r, begin, end);
      if constexpr (std::is_same_v<T, BFloat16>) HWY_DYNAMIC_DISPATCH(ReluBackwardBF16)(g, y, r, begin, end);
    });
  });
}

void gelu_backward(DType dtype, const void* grad, const void* x, void* result, int64_t n, bool tanh_form) {
  with_float_type(dtype, "gelu_grad", [&]<class T>(T*) {
    const auto* g = static_cast<const T*>(grad);
    const auto* in = static_cast<const T*>(x);
    auto* r = static_cast<T*>(result);
    parallel_for(0, n, kElementwiseGrain / 4, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) HWY_DYNAMIC_DISPATCH(GeluBackwardF32)(g, in, r, begin, end, tanh_form);
      if constexpr (std::is_same_v<T, double>) HWY_DYNAMIC_DISPATCH(GeluBackwardF64)(g, in, r, begin, end, tanh_form);
      if constexpr (std::is_same_v<T, Half>) HWY_DYNAMIC_DISPATCH(GeluBackwardF16)(g, in, r, begin, end, tanh_form);
      if constexpr (std::is_same_v<T, BFloat16>) {
        HWY_DYNAMIC_DISPATCH(GeluBackwardBF16)(g, in, r, begin, end, tanh_form);
      }
    });
  });
}

namespace {

// inputs: the output gradient and gelu's input (contiguous, same shape and dtype); outputs: the
// input gradient.
void gelu_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &x = c.inputs[1];
  gelu_backward(x.dtype, grad.data, x.data, c.outputs[0].data, x.numel(),
                c.get<ActivationAttrs>().activation == Activation::kGeluTanh);
}

// inputs: the output gradient and relu's output (contiguous, same shape and dtype); outputs: the
// input gradient.
void threshold_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &out = c.inputs[1];
  relu_backward(out.dtype, grad.data, out.data, c.outputs[0].data, out.numel());
}

}  // namespace

void register_threshold_kernels(KernelTable& table) {
  table.add(OpKind::kThresholdBackward, DeviceType::kCPU, threshold_backward_kernel, kFloatTypes);
  table.add(OpKind::kGeluGrad, DeviceType::kCPU, gelu_backward_kernel, kFloatTypes);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

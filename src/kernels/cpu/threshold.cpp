// ReLU's fused backward (threshold.h) for every Highway target: one read of grad and of the saved
// output, one write, instead of gt() into a bool tensor and where() over three operands.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/threshold.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/threshold.h"

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void relu_backward_range(const T* grad, const T* out, T* result, int64_t begin, int64_t end) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  int64_t i = begin;
  // Le is false for NaN, so a NaN output lets the gradient through (PyTorch's `out <= 0 ? 0 : g`).
  for (; i + lanes <= end; i += lanes) {
    hn::StoreU(hn::IfThenZeroElse(hn::Le(hn::LoadU(d, out + i), zero), hn::LoadU(d, grad + i)), d, result + i);
  }
  for (; i < end; ++i) result[i] = out[i] <= T(0) ? T(0) : grad[i];
}

void ReluBackwardF32(const float* grad, const float* out, float* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
}
void ReluBackwardF64(const double* grad, const double* out, double* result, int64_t begin, int64_t end) {
  relu_backward_range(grad, out, result, begin, end);
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

void relu_backward(DType dtype, const void* grad, const void* out, void* result, int64_t n) {
  if (dtype == kFloat32) {
    const auto* g = static_cast<const float*>(grad);
    const auto* y = static_cast<const float*>(out);
    auto* r = static_cast<float*>(result);
    parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      HWY_DYNAMIC_DISPATCH(ReluBackwardF32)(g, y, r, begin, end);
    });
  } else if (dtype == kFloat64) {
    const auto* g = static_cast<const double*>(grad);
    const auto* y = static_cast<const double*>(out);
    auto* r = static_cast<double*>(result);
    parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      HWY_DYNAMIC_DISPATCH(ReluBackwardF64)(g, y, r, begin, end);
    });
  } else {
    EMBER_FAIL("[threshold_backward] the CPU kernel takes float32 or float64, got ", dtype);
  }
}

namespace {

// inputs: the output gradient and relu's output (contiguous, same shape and dtype); outputs: the
// input gradient.
void threshold_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &out = c.inputs[1];
  relu_backward(out.dtype, grad.data, out.data, c.outputs[0].data, out.numel());
}

}  // namespace

void register_threshold_kernels(KernelTable& table) {
  table.add(OpKind::kThresholdBackward, DeviceType::kCPU, threshold_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

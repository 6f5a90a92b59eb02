// Autocast's op lists (ops/autocast.h, documented in docs/amp.md).
//
// As PyTorch's autocast (CUDA lists, which the CPU ones are a subset of): matrix products,
// convolutions and attention run in the lower precision; softmax, log_softmax, the norms, the
// losses, exp and log, and the reductions that sum many values run in float32. Ops on neither list
// run in the dtype of their inputs (elementwise ops on bfloat16 inputs compute in float32 registers
// and round once). A cast is an ordinary differentiable copy, so gradients reach float32 master
// weights as float32.
#include "ops/autocast.h"

namespace ember::amp {

namespace {

thread_local std::optional<DType> t_dtype;

enum class Policy { kNone, kLower, kFloat32 };

Policy policy(OpKind kind) {
  switch (kind) {
    case OpKind::kMatmul:
    case OpKind::kLinear:
    case OpKind::kLinearGelu:
    case OpKind::kConv1d:
    case OpKind::kConv2d:
    case OpKind::kConvTranspose2d:
    case OpKind::kScaledDotProductAttention:
      return Policy::kLower;
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kLayerNorm:
    case OpKind::kGroupNorm:
    case OpKind::kSelectiveScan:
    case OpKind::kSoftplus:
    case OpKind::kRmsNorm:
    case OpKind::kCrossEntropy:
    case OpKind::kNllLoss:
    case OpKind::kMseLoss:
    case OpKind::kL1Loss:
    case OpKind::kBceWithLogits:
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kVar:
    case OpKind::kStd:
    case OpKind::kLogSumExp:
    case OpKind::kNorm:
      return Policy::kFloat32;
    default:
      return Policy::kNone;
  }
}

}  // namespace

std::optional<DType> autocast_dtype() { return t_dtype; }
void set_autocast_dtype(std::optional<DType> dtype) { t_dtype = dtype; }

Tensor cast(OpKind kind, const Tensor& t) {
  if (!t_dtype || !t.defined()) return t;
  switch (policy(kind)) {
    case Policy::kLower:
      return t.dtype() == kFloat32 ? t.to(*t_dtype) : t;
    case Policy::kFloat32:
      return t.dtype() == kFloat16 || t.dtype() == kBFloat16 ? t.to(kFloat32) : t;
    case Policy::kNone:
      break;
  }
  return t;
}

std::optional<Tensor> cast(OpKind kind, const std::optional<Tensor>& t) {
  if (!t) return t;
  return cast(kind, *t);
}

}  // namespace ember::amp

// Autocast (ops/autocast.h, documented in docs/amp.md). Each op's policy is a trait of its row in
// the op table: kAmpLower ops (matrix products, convolutions, attention) run in the lower
// precision, kAmpFloat32 ops (softmax, the norms, the losses, exp, log, the reductions that sum
// many values) in float32, as PyTorch's CUDA lists, which its CPU ones are a subset of. Other ops
// run in the dtype of their inputs (elementwise ops on bfloat16 inputs compute in float32 registers
// and round once). A cast is an ordinary differentiable copy, so gradients reach float32 master
// weights as float32.
#include "ops/autocast.h"

namespace ember::amp {

namespace {

thread_local std::optional<DType> t_dtype;

}  // namespace

std::optional<DType> autocast_dtype() { return t_dtype; }
void set_autocast_dtype(std::optional<DType> dtype) { t_dtype = dtype; }

Tensor cast(OpKind kind, const Tensor& t) {
  if (!t_dtype || !t.defined()) return t;
  if (has_trait(kind, kAmpLower)) return t.dtype() == kFloat32 ? t.to(*t_dtype) : t;
  if (has_trait(kind, kAmpFloat32)) return t.dtype() == kFloat16 || t.dtype() == kBFloat16 ? t.to(kFloat32) : t;
  return t;
}

std::optional<Tensor> cast(OpKind kind, const std::optional<Tensor>& t) {
  if (!t) return t;
  return cast(kind, *t);
}

}  // namespace ember::amp

// Autocast's policy (ember/amp.h): which ops run in the lower precision and which in float32 while
// an amp::Autocast guard is alive on this thread. The policy is the kAmpLower/kAmpFloat32 trait of
// each op's row (ember/op_list.h); the front-ends of the ops that have one pass their tensor inputs
// through cast() first.
#pragma once

#include <optional>

#include "ember/primitives.h"
#include "ember/tensor.h"

namespace ember::amp {

// The lower-precision dtype of the innermost Autocast guard on this thread, if any.
std::optional<DType> autocast_dtype();
void set_autocast_dtype(std::optional<DType> dtype);

// `t` as op `kind` takes it under autocast: float32 inputs of the lower-precision ops become the
// guard's dtype; float16 and bfloat16 inputs of the float32 ops become float32; anything else (no
// guard, another op, integer tensors, float64) is returned as it is.
Tensor cast(OpKind kind, const Tensor& t);
std::optional<Tensor> cast(OpKind kind, const std::optional<Tensor>& t);

}  // namespace ember::amp

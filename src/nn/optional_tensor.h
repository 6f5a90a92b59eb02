// An optional argument of the functional ops from a module's tensor that may be undefined (a layer
// built without a bias, an attention without a mask).
#pragma once

#include <optional>

#include "ember/tensor.h"

namespace ember::nn {

inline std::optional<Tensor> optional_tensor(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

}  // namespace ember::nn

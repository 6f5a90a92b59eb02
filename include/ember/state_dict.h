// StateDict: named tensors, as saved in checkpoints (modules' parameters and buffers, optimizer
// state). Keys are dotted paths ("features.0.weight"); std::map keeps them sorted, as
// safetensors stores them.
#pragma once

#include <map>
#include <string>

#include "ember/tensor.h"

namespace ember {

using StateDict = std::map<std::string, Tensor>;

}  // namespace ember

// Dropout: the identity in eval mode, functional::dropout in training mode.
#include "ember/nn/modules.h"
#include "nn/repr.h"

namespace ember::nn {

Dropout::Dropout(double probability) : p(probability) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "[Dropout] probability p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) { return functional::dropout(input, p, is_training()); }

std::string Dropout::extra_repr() const { return repr::concat("p=", p); }

}  // namespace ember::nn

// Flatten's and the activation modules' options (their forward is inline in modules.h).
#include "ember/nn/modules.h"
#include "nn/repr.h"

namespace ember::nn {

std::string Flatten::extra_repr() const { return repr::concat("start_dim=", start_dim, ", end_dim=", end_dim); }

std::string GELU::extra_repr() const { return repr::concat("approximate='", approximate, "'"); }
std::string Softplus::extra_repr() const { return repr::concat("beta=", beta, ", threshold=", threshold); }
std::string Softmax::extra_repr() const { return repr::concat("dim=", dim); }
std::string LogSoftmax::extra_repr() const { return repr::concat("dim=", dim); }

GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", "[GELU] approximate must be \"none\" or \"tanh\", got \"",
              approximate, "\"");
}

}  // namespace ember::nn

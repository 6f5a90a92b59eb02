// ember::nn::init: in-place parameter initialization, as torch.nn.init. Every function fills the
// tensor it is given (any layout; views write through) under NoGradGuard, draws from ember's global
// generator (ember::manual_seed makes it repeatable) and returns the tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ember/tensor.h"

namespace ember::nn::init {

// The recommended gain for a nonlinearity: 1 for "linear", "identity", "sigmoid" and the
// "conv*"/"conv_transpose*" names; 5/3 for "tanh"; sqrt(2) for "relu"; sqrt(2 / (1 + slope^2))
// for "leaky_relu" (param is the negative slope, default 0.01); 3/4 for "selu".
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, where the receptive
// field is the product of the dims after the first two. Needs at least 2 dims.
struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0);  // U(low, high)
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);   // N(mean, std^2)
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

// Glorot: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)); N(0, gain^2 * 2 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);

// He: std = calculate_gain(nonlinearity, a) / sqrt(fan), fan chosen by mode ("fan_in" or
// "fan_out"); uniform draws from U(-sqrt(3) std, sqrt(3) std). PyTorch's Linear and Conv2d use
// kaiming_uniform_(w, sqrt(5)), which gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu");
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, std::string_view mode = "fan_in",
                       std::string_view nonlinearity = "leaky_relu");

}  // namespace ember::nn::init

// Parameter initialization (torch.nn.init): gains, fans, and the fills built on ember::rand/randn.
#include "ember/nn/init.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::nn::init {
namespace {

void check_fillable(const Tensor& tensor, const char* op) {
  EMBER_CHECK(tensor.defined(), "[", op, "] got an undefined tensor");
  EMBER_CHECK(tensor.is_floating_point(), "[", op, "] needs a floating-point tensor, got ", tensor.dtype());
}

// The standard deviation kaiming_* use.
double kaiming_std(const Tensor& tensor, double a, std::string_view mode, std::string_view nonlinearity,
                   const char* op) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  int64_t fan = 0;
  if (mode == "fan_in") {
    fan = fans.fan_in;
  } else if (mode == "fan_out") {
    fan = fans.fan_out;
  } else {
    EMBER_FAIL("[", op, "] mode must be \"fan_in\" or \"fan_out\", got \"", mode, "\"");
  }
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}

}  // namespace

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  constexpr std::string_view kUnitGain[] = {"linear",           "identity",         "sigmoid",
                                            "conv1d",           "conv2d",           "conv3d",
                                            "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"};
  for (std::string_view name : kUnitGain) {
    if (nonlinearity == name) return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  EMBER_FAIL("[calculate_gain] unsupported nonlinearity \"", nonlinearity,
             "\"; expected linear, identity, sigmoid, conv1d/2d/3d, conv_transpose1d/2d/3d, tanh, relu, leaky_relu "
             "or selu");
}

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  EMBER_CHECK(tensor.defined() && tensor.dim() >= 2, "[calculate_fan_in_and_fan_out] needs a tensor with at least 2 ",
              "dims, got shape ", tensor.defined() ? tensor.shape() : Shape{});
  int64_t receptive_field = 1;
  for (int d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return Fans{tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(Tensor tensor, double low, double high) {
  check_fillable(tensor, "uniform_");
  EMBER_CHECK(low <= high, "[uniform_] low (", low, ") must not exceed high (", high, ")");
  autograd::NoGradGuard no_grad;
  tensor.copy_(ember::rand(tensor.shape(), tensor.dtype()) * (high - low) + low);
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std_dev) {
  check_fillable(tensor, "normal_");
  EMBER_CHECK(std_dev >= 0.0, "[normal_] std must be non-negative, got ", std_dev);
  autograd::NoGradGuard no_grad;
  tensor.copy_(ember::randn(tensor.shape(), tensor.dtype()) * std_dev + mean);
  return tensor;
}

Tensor constant_(Tensor tensor, double value) {
  check_fillable(tensor, "constant_");
  autograd::NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

Tensor xavier_uniform_(Tensor tensor, double gain) {
  check_fillable(tensor, "xavier_uniform_");
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor xavier_normal_(Tensor tensor, double gain) {
  check_fillable(tensor, "xavier_normal_");
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  const double std_dev = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return normal_(std::move(tensor), 0.0, std_dev);
}

Tensor kaiming_uniform_(Tensor tensor, double a, std::string_view mode, std::string_view nonlinearity) {
  check_fillable(tensor, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;  // nothing to fill, and the fans may be zero
  const double bound = std::sqrt(3.0) * kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_");
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor kaiming_normal_(Tensor tensor, double a, std::string_view mode, std::string_view nonlinearity) {
  check_fillable(tensor, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  const double std_dev = kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_");
  return normal_(std::move(tensor), 0.0, std_dev);
}

}  // namespace ember::nn::init

// The models `ember train mnist` trains, built from nn layers so their parameter names match the
// same torch.nn.Sequential in PyTorch ("1.weight", ...), which the parity test relies on.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ember/nn.h"

namespace ember::models {

// Which of the two models: "mlp" or "cnn".
struct MnistConfig {
  std::string model = "cnn";
  bool operator==(const MnistConfig&) const = default;
};

// Flatten, Linear(784, 128), ReLU, Linear(128, 10).
std::shared_ptr<nn::Sequential> mnist_mlp();

// LeNet-style: Conv2d(1, 16, 5), ReLU, MaxPool2d(2), Conv2d(16, 32, 5), ReLU, MaxPool2d(2), Flatten,
// Linear(512, 10). Input (N, 1, 28, 28).
std::shared_ptr<nn::Sequential> mnist_cnn();

// "mlp" or "cnn"; anything else is an ember::Error listing the choices.
std::shared_ptr<nn::Sequential> mnist_model(std::string_view name);

}  // namespace ember::models

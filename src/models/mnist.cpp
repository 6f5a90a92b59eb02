#include "ember/models/mnist.h"

namespace ember::models {

std::shared_ptr<nn::Sequential> mnist_mlp() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(784, 128));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(128, 10));
  return net;
}

std::shared_ptr<nn::Sequential> mnist_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 16, 5));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::Conv2d>(16, 32, 5));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(512, 10));
  return net;
}

std::shared_ptr<nn::Sequential> mnist_model(std::string_view name) {
  if (name == "mlp") return mnist_mlp();
  if (name == "cnn") return mnist_cnn();
  EMBER_FAIL("[mnist_model] unknown model \"", name, "\"; choose cnn or mlp");
}

}  // namespace ember::models

// The README's training example: an MLP learns which side of a circle 2-D points fall on, with
// autograd, nn layers and AdamW, as the same loop would read in PyTorch.
#include <ember/ember.h>

#include <cstdio>

int main() {
  namespace nn = ember::nn;
  ember::manual_seed(0);
  ember::Tensor x = ember::rand({512, 2}) * 4.0 - 2.0;              // points in [-2, 2)^2
  ember::Tensor y = (x.square().sum({1}) < 1.5).to(ember::kInt64);  // class 1 inside the circle

  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(2, 32));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(32, 2));
  ember::optim::AdamW optimizer(model->parameters(), {.lr = 0.02});

  for (int step = 1; step <= 200; ++step) {
    optimizer.zero_grad();
    ember::Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    loss.backward();
    optimizer.step();
    if (step % 50 == 0) std::printf("step %d  loss %.4f\n", step, loss.item<double>());
  }
  ember::autograd::NoGradGuard no_grad;
  const double accuracy = (*model)(x).argmax(1).eq(y).to(ember::kFloat32).mean().item<double>();
  std::printf("accuracy %.3f\n", accuracy);
  ember::save(model->state_dict(), "train_mlp.safetensors");  // atomic; loads in Python's safetensors
  model->load_state_dict(ember::load("train_mlp.safetensors"));
}

// The README's example, built and run by the tests so it stays true.
#include <ember/ember.h>

#include <iostream>

int main() {
  ember::manual_seed(0);
  ember::Tensor x = ember::randn({64, 784});  // float32
  ember::Tensor w = ember::randn({128, 784}) * 0.05;
  ember::Tensor b = ember::zeros({128});
  ember::Tensor h = ember::relu(ember::linear(x, w, b));  // (64, 128)
  ember::Tensor p = ember::softmax(h, -1);
  std::cout << p.sum(/*dims=*/{1}).slice(0, 0, 4) << "\n";  // tensor([1.0000, 1.0000, ...])
  std::cout << h.t().is_contiguous() << " " << h.argmax(1).dtype() << "\n";
  try {
    ember::add(ember::ones({2, 3}), ember::ones({4}));
  } catch (const ember::Error& e) {
    std::cout << e.what() << "\n";  // [add] shapes [2, 3] and [4] cannot be broadcast: ...
  }
}

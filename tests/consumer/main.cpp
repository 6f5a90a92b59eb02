#include <ember/ember.h>

#include <iostream>

int main() {
  ember::Tensor a = ember::arange(6).reshape({2, 3}).to(ember::kFloat32);
  ember::Tensor b = ember::exp(a) + 1;
  std::cout << b << "\n";
  return b.at<float>({0, 0}) == 2.0f ? 0 : 1;
}

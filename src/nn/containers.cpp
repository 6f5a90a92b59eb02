// ModuleList and Sequential: children named by their index.
#include <string>

#include "ember/nn/modules.h"

namespace ember::nn {
namespace detail {

void IndexedModules::push_back(std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, "[", name(), "] cannot add a null module (at index ", modules_.size(), ")");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

void IndexedModules::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) push_back(module);
}

const std::shared_ptr<Module>& IndexedModules::operator[](int64_t index) const {
  const auto size = static_cast<int64_t>(modules_.size());
  EMBER_CHECK(index >= -size && index < size, "[", name(), "] index ", index, " is out of range for ", size,
              " modules");
  return modules_[static_cast<size_t>(index < 0 ? index + size : index)];
}

}  // namespace detail

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& module : *this) x = (*module)(x);
  return x;
}

}  // namespace ember::nn

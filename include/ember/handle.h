// RemovableHandle: returned by every register_*_hook; remove() unregisters the hook. Removing twice,
// or after the owner is gone, does nothing.
#pragma once

#include <functional>
#include <utility>

namespace ember {

class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove() {
    if (remover_) std::exchange(remover_, nullptr)();
  }
  bool active() const { return static_cast<bool>(remover_); }

 private:
  std::function<void()> remover_;
};

}  // namespace ember

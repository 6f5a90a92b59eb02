// Internals shared by the graph and the engine.
#pragma once

#include <functional>
#include <memory>

#include "ember/autograd.h"

namespace ember::autograd {

// The sink of a leaf's gradient: adds what arrives into the leaf's .grad. Holds the leaf weakly
// (the leaf owns it), so a graph never keeps a dead leaf's memory alive.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::vector<Tensor> apply(const Tensor& grad) override;

  // Hooks run after each accumulation, given the leaf (register_post_accumulate_grad_hook).
  uint64_t add_post_hook(std::function<void(const Tensor& leaf)> hook);
  void remove_post_hook(uint64_t id);

 private:
  std::weak_ptr<TensorImpl> leaf_;
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_hooks_;
  uint64_t next_post_hook_id_ = 0;
};

// slot += grad (or slot = grad, kept without a copy when nothing else refers to it).
void accumulate_into(std::shared_ptr<TensorImpl>& slot, const Tensor& grad, const Tensor& owner);

// The name of the node whose backward is running (for error messages), or "an op".
const char* current_node_name();

// Anomaly mode: throws if a gradient computed by `node` holds NaN or Inf.
void check_gradient_finite(const Node& node, const Tensor& grad);

}  // namespace ember::autograd

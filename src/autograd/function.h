// What ops use to take part in autograd: record a node for an output, save tensors for backward,
// and run in-place ops on tensors that are part of a graph.
//
//   Tensor mul(const Tensor& a, const Tensor& b) {
//     Tensor out = ...forward...;
//     if (autograd::needs_grad(a, b)) {
//       autograd::record(OpKind::kMul, {}, out, {&a, &b},
//           [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g, GradMask needs) -> Grads {
//             return {needs[0] ? g * sb.get() : Tensor(), needs[1] ? g * sa.get() : Tensor()};
//           });
//     }
//     return out;
//   }
//
// Gradients may have the output's shape where an input was broadcast and the output's dtype: the
// engine sums them back to each input's shape and casts them to its dtype. Backward functions run
// with grad mode off, so the ops they call record nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "ember/autograd.h"
#include "ember/tensor.h"

namespace ember::autograd {

using Grads = std::vector<Tensor>;

// Which inputs of a node need a gradient (bit i for input i); skip the work for the others.
class GradMask {
 public:
  explicit GradMask(uint64_t bits) : bits_(bits) {}
  bool operator[](size_t i) const { return i < 64 && ((bits_ >> i) & 1U) != 0; }

 private:
  uint64_t bits_;
};

using BackwardFn = std::function<Grads(const Tensor& grad, GradMask needs)>;

// True when grad mode is on and any of the tensors requires grad: the one check an op pays when
// autograd is not involved.
template <class... Ts>
bool needs_grad(const Ts&... tensors) {
  // The flags first: they are plain loads, the grad mode is a thread-local behind a call.
  if (!((tensors.defined() && tensors.requires_grad()) || ...)) return false;
  return is_grad_enabled();
}
bool any_requires_grad(const std::vector<Tensor>& tensors);

// Makes `out` the differentiable result of op `kind` with attributes `attrs` (the op's attribute
// type) on `inputs` (undefined inputs have no edge). Does nothing for non-floating outputs, or when
// `out` is one of the inputs (an identity).
void record(OpKind kind, const Attrs& attrs, const Tensor& out, std::initializer_list<const Tensor*> inputs,
            BackwardFn backward);
void record(OpKind kind, const Attrs& attrs, const Tensor& out, const std::vector<Tensor>& inputs, BackwardFn backward);

// A tensor kept for backward. get() throws if it was modified in place after it was saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor get() const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;  // an alias without autograd links (so saving an output makes no cycle)
  uint32_t version_ = 0;
};

// In-place op `name` on `self` when autograd is involved: computes `compute(copy_of_self)` out of
// place (recording its graph), writes the result into self and makes self the graph's output.
// Throws for a leaf that requires grad and for views (use the out-of-place op there).
Tensor& inplace(const char* name, Tensor& self, const std::function<Tensor(const Tensor& self_copy)>& compute);

// Zeros shaped `shape` with the gradient's dtype and device: where a backward scatters a gradient.
Tensor zeros_for(const Shape& shape, const Tensor& grad);

// The gradient `grad` summed over the dimensions that were broadcast from `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace ember::autograd

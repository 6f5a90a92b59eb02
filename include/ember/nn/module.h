// ember::nn::Module: the base class of every layer and model, as torch.nn.Module. A module owns
// named parameters (tensors that require grad), buffers (state that is saved but not trained, such
// as BatchNorm's running statistics) and child modules, in registration order. Modules are held by
// std::shared_ptr (make them with std::make_shared) so that children can be shared and hooks can
// refer back to them.
//
//   struct Net : ember::nn::Module {
//     std::shared_ptr<ember::nn::Linear> fc1, fc2;
//     Net() {
//       fc1 = register_module("fc1", std::make_shared<ember::nn::Linear>(784, 128));
//       fc2 = register_module("fc2", std::make_shared<ember::nn::Linear>(128, 10));
//     }
//     ember::Tensor forward(const ember::Tensor& x) override { return (*fc2)(ember::relu((*fc1)(x))); }
//   };
//
// Calling a module, `(*net)(x)`, runs its forward pre-hooks, forward() and forward hooks, and sets
// up its backward hooks; calling forward() directly skips all hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/dtype.h"
#include "ember/handle.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::nn {

class Module;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// Hooks. A hook returning a defined Tensor replaces the value it was given (the input, the output
// or the gradient with respect to the input); returning an undefined Tensor keeps it. The
// register_*_hook templates also accept callables returning void.
//
// Runs before forward(input).
using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
// Runs after forward; `input` is what forward received.
using ForwardHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
// Runs during backward once the gradients with respect to the module's input and output are known.
// grad_input is undefined when the input does not require grad.
using BackwardHook = std::function<Tensor(Module& module, const Tensor& grad_input, const Tensor& grad_output)>;

namespace detail {
struct ModuleHooks;  // the registered hooks of one module (module.cpp)
}

// What load_state_dict(..., strict=false) skipped.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // expected by the module, absent from the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, unknown to the module
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module();
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // --- computing --------------------------------------------------------------------------------
  // The module's computation. The default throws: containers such as ModuleList have none.
  virtual Tensor forward(const Tensor& input);
  // forward() with hooks: forward pre-hooks, forward, forward hooks; backward hooks when any are
  // registered and grad mode is on. With no hooks registered this costs one branch over forward().
  Tensor operator()(const Tensor& input);

  // --- printing ---------------------------------------------------------------------------------
  // The type's name, e.g. "Linear". The default is the class name without namespaces.
  virtual std::string name() const;
  // The arguments printed inside the parentheses, e.g. "in_features=784, out_features=128, bias=true".
  virtual std::string extra_repr() const;
  // The module tree, as PyTorch's repr.
  std::string repr() const;

  // --- registration -----------------------------------------------------------------------------
  // Adds a parameter (it is made to require grad when requires_grad) and returns it. Names are
  // unique among a module's parameters, buffers and children, and contain no '.'.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  // Adds a buffer; an undefined tensor is allowed (a slot not in use). Non-persistent buffers are
  // left out of state_dict().
  Tensor register_buffer(std::string name, Tensor tensor, bool persistent = true);
  // Adds a child module and returns it with its own type.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module needs a Module");
    add_child(std::move(name), module);
    return module;
  }

  // --- traversal --------------------------------------------------------------------------------
  // Parameters in registration order, this module's first, then each child's (depth first); a
  // parameter reachable under several names (shared between modules) is listed once, under the
  // first. recurse=false lists this module's own only.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  // Buffers in the same order (defined ones only).
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  // Direct children.
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  // Calls fn(name, child) for each direct child, in registration order, without copying the list
  // (nor the children's shared_ptrs: their use counts stay what their holders make them).
  template <class F>
  void for_each_child(F&& fn) const {
    for (const auto& [child_name, child] : children_) fn(child_name, child);
  }
  // This module (named "") and every descendant, depth first, each once. Including the module
  // itself needs it to be held by a std::shared_ptr.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  NamedModules named_modules(bool include_self = true);
  // Calls fn on every descendant, children first, then on this module (PyTorch's Module.apply).
  Module& apply(const std::function<void(Module&)>& fn);
  // This module as a derived type, or nullptr.
  template <class M>
  M* as() {
    return dynamic_cast<M*>(this);
  }

  // --- modes and state --------------------------------------------------------------------------
  // Sets training mode here and in every descendant (Dropout and BatchNorm read it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Are forward or backward hooks registered on this module (not its children)?
  bool has_hooks() const;

  // Clears the parameters' gradients: drops them (set_to_none) or fills them with zeros.
  void zero_grad(bool set_to_none = true);

  // Converts every floating-point parameter and buffer (and each parameter's .grad) to dtype. The
  // conversion happens inside the existing tensors, as torch's `param.data = ...`: every handle to
  // a parameter (the module's members, an optimizer's list) sees the new dtype.
  Module& to(DType dtype);
  // Moves every parameter and buffer (and each parameter's .grad) to `device`, inside the existing
  // tensors as to(dtype) does. An optimizer made before the move keeps working, but its state
  // (momentum, Adam's moments) must be made after it, as in PyTorch.
  Module& to(Device device);

  // Parameters and persistent buffers under dotted names ("features.0.weight"), detached (they
  // share memory with the module). Shared tensors appear under every name, as in PyTorch.
  StateDict state_dict() const;
  // Copies values into the existing parameters and buffers (under NoGradGuard, converting dtypes).
  // Checks everything first and throws one ember::Error that lists every missing key, every
  // unexpected key (both only when strict) and every shape mismatch with both shapes; on error
  // nothing is modified.
  LoadStateDictResult load_state_dict(const StateDict& state_dict, bool strict = true);

  // --- hooks (each returns a handle whose remove() unregisters the hook) -------------------------
  template <class F>
  RemovableHandle register_forward_pre_hook(F hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&>>) {
      return add_forward_pre_hook([fn = std::move(hook)](Module& m, const Tensor& input) mutable {
        fn(m, input);
        return Tensor();
      });
    } else {
      return add_forward_pre_hook(ForwardPreHook(std::move(hook)));
    }
  }
  template <class F>
  RemovableHandle register_forward_hook(F hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&, const Tensor&>>) {
      return add_forward_hook([fn = std::move(hook)](Module& m, const Tensor& input, const Tensor& output) mutable {
        fn(m, input, output);
        return Tensor();
      });
    } else {
      return add_forward_hook(ForwardHook(std::move(hook)));
    }
  }
  // The module must be held by a std::shared_ptr (the backward pass refers back to it).
  template <class F>
  RemovableHandle register_full_backward_hook(F hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&, const Tensor&>>) {
      return add_backward_hook(
          [fn = std::move(hook)](Module& m, const Tensor& grad_input, const Tensor& grad_output) mutable {
            fn(m, grad_input, grad_output);
            return Tensor();
          });
    } else {
      return add_backward_hook(BackwardHook(std::move(hook)));
    }
  }

 protected:
  // Turns parameter `name` into a persistent buffer holding `value` (a quantized weight), keeping
  // the tensor's identity: the module's member handle sees the new data, optimizers built before
  // keep a tensor that no longer requires grad.
  void convert_parameter_to_buffer(const std::string& name, const Tensor& value);

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };

  void check_new_name(const std::string& name, const char* what) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  RemovableHandle add_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle add_forward_hook(ForwardHook hook);
  RemovableHandle add_backward_hook(BackwardHook hook);
  detail::ModuleHooks& hooks();
  Tensor call_with_hooks(const Tensor& input);
  // Runs the backward hooks; returns the (possibly replaced) gradient with respect to the input.
  Tensor run_backward_hooks(const Tensor& grad_input, const Tensor& grad_output);
  // Appends (prefix + name, tensor) for every parameter and persistent buffer, keeping duplicates.
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  // Lists (prefix + name, tensor) for every parameter (or buffer), each tensor once.
  NamedTensors collect_tensors(bool parameters, bool recurse) const;

  NamedTensors parameters_;
  std::vector<Buffer> buffers_;
  NamedModules children_;
  bool training_ = true;
  std::shared_ptr<detail::ModuleHooks> hooks_;  // null until a hook is registered
};

std::ostream& operator<<(std::ostream& out, const Module& module);

}  // namespace ember::nn

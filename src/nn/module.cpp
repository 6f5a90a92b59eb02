// Module: registration, traversal, modes, dtype conversion, state dicts, printing, and the call
// operator with its hooks.
//
// Backward hooks follow PyTorch's BackwardHook: when a module with backward hooks is called in grad
// mode, its input passes through an identity node, so that the gradient reaching that node is the
// gradient with respect to the module's input alone (not mixed with uses of the same tensor
// outside the module). The gradient with respect to the output is caught first, by a pre-hook on
// the node that made the output (everything the module computed lies between the two); the input's
// node then runs the hooks with both, passing on what they return. When the input does not require
// grad there is no input node, and the output's pre-hook runs the hooks with an undefined
// grad_input.
#include "ember/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "autograd/function.h"
#include "ember/autograd.h"
#include "ember/profiler.h"
#include "ops/dispatch.h"

namespace ember::nn {

namespace detail {

template <class Hook>
using HookList = std::vector<std::pair<uint64_t, Hook>>;

struct ModuleHooks {
  uint64_t next_id = 0;
  HookList<ForwardPreHook> forward_pre;
  HookList<ForwardHook> forward;
  HookList<BackwardHook> backward;

  bool empty() const { return forward_pre.empty() && forward.empty() && backward.empty(); }
};

}  // namespace detail

namespace {

// The state one call of a module with backward hooks shares between its two identity nodes.
struct BackwardHookCall {
  std::weak_ptr<Module> module;
  Tensor grad_output;
  bool input_hooked = false;  // the input's node will run the hooks
};

template <class Hook>
RemovableHandle add_hook(const std::shared_ptr<detail::ModuleHooks>& hooks,
                         detail::HookList<Hook> detail::ModuleHooks::*list, Hook hook) {
  const uint64_t id = hooks->next_id++;
  ((*hooks).*list).emplace_back(id, std::move(hook));
  return RemovableHandle([weak = std::weak_ptr<detail::ModuleHooks>(hooks), list, id] {
    if (auto h = weak.lock()) std::erase_if((*h).*list, [id](const auto& entry) { return entry.first == id; });
  });
}

// "ember::nn::Linear" -> "Linear"; namespaces inside template arguments are kept.
std::string demangled_class_name(const char* mangled) {
  int status = 0;
  char* raw = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = (status == 0 && raw != nullptr) ? raw : mangled;
  std::free(raw);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle allocates with malloc
  const size_t template_start = std::min(full.find('<'), full.size());
  const size_t last_colons = full.rfind("::", template_start);
  return last_colons == std::string::npos ? full : full.substr(last_colons + 2);
}

// Indents every line but the first by two spaces (PyTorch's _addindent).
std::string indent_continuation_lines(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

// Makes `target` hold `source`'s data (storage, layout, dtype), keeping its identity: every handle
// to the target sees the change. This is what torch's `param.data = new_data` does.
void replace_data(const Tensor& target, const Tensor& source) {
  TensorImpl& impl = target.impl();
  const TensorImpl& src = source.impl();
  impl.storage = src.storage;
  impl.set_geometry(src.shape, src.strides, src.offset);
  impl.dtype = src.dtype;
  impl.is_view = false;
}

}  // namespace

Module::Module() = default;
Module::~Module() = default;

// --- computing ------------------------------------------------------------------------------------

Tensor Module::forward(const Tensor& /*input*/) {
  EMBER_FAIL("[", name(), "] has no forward(Tensor); override Module::forward, or call its children directly");
}

Tensor Module::operator()(const Tensor& input) {
  // While profiling, the forward is a range named after the module's type ("Conv2d").
  const profiler::LazyRange range([this] { return name(); }, /*is_module=*/true);
  if (!hooks_ || hooks_->empty()) [[likely]] {
    return forward(input);
  }
  return call_with_hooks(input);
}

Tensor Module::call_with_hooks(const Tensor& input) {
  // Keep the hooks alive and stable while they run: a hook may remove itself or register others.
  const std::shared_ptr<detail::ModuleHooks> hooks = hooks_;

  Tensor x = input;
  if (!hooks->forward_pre.empty()) {
    const auto pre_hooks = hooks->forward_pre;
    for (const auto& [id, hook] : pre_hooks) {
      Tensor replaced = hook(*this, x);
      if (replaced.defined()) x = std::move(replaced);
    }
  }

  std::shared_ptr<BackwardHookCall> call;
  if (!hooks->backward.empty() && autograd::is_grad_enabled()) {
    call = std::make_shared<BackwardHookCall>();
    call->module = weak_from_this();
    if (x.defined() && x.requires_grad()) {
      Tensor wrapped = x.detach();
      dispatch::view(OpKind::kBackwardHook, {}, x, wrapped);
      autograd::record(OpKind::kBackwardHook, {}, wrapped, {&x},
                       [call](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                         const std::shared_ptr<Module> module = call->module.lock();
                         if (!module) return {grad};
                         Tensor grad_input = module->run_backward_hooks(grad, call->grad_output);
                         return {grad_input.defined() ? grad_input : grad};
                       });
      x = std::move(wrapped);
      call->input_hooked = true;
    }
  }

  Tensor output = forward(x);

  if (!hooks->forward.empty()) {
    const auto forward_hooks = hooks->forward;
    for (const auto& [id, hook] : forward_hooks) {
      Tensor replaced = hook(*this, x, output);
      if (replaced.defined()) output = std::move(replaced);
    }
  }

  if (call && output.defined() && output.requires_grad()) {
    // Learns grad_output; runs the hooks now when no input node will.
    auto on_grad_output = [call](const Tensor& grad) {
      call->grad_output = grad;
      if (!call->input_hooked) {
        if (const std::shared_ptr<Module> module = call->module.lock()) module->run_backward_hooks(Tensor(), grad);
      }
    };
    if (!output.is_leaf()) {
      // The output's own node sees the whole gradient with respect to the output before it runs: a
      // hook there is enough, and cheaper than another node.
      output.grad_fn()->add_pre_hook([on_grad_output](const Tensor& grad) {
        on_grad_output(grad);
        return Tensor();
      });
    } else {
      // A leaf (forward returned a parameter): its gradient sink outlives this graph, so hook an
      // identity node instead.
      Tensor wrapped = output.detach();
      dispatch::view(OpKind::kBackwardHook, {}, output, wrapped);
      autograd::record(OpKind::kBackwardHook, {}, wrapped, {&output},
                       [on_grad_output](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                         on_grad_output(grad);
                         return {grad};
                       });
      output = std::move(wrapped);
    }
  }
  return output;
}

Tensor Module::run_backward_hooks(const Tensor& grad_input, const Tensor& grad_output) {
  if (!hooks_) return grad_input;
  const auto backward_hooks = hooks_->backward;
  Tensor current = grad_input;
  for (const auto& [id, hook] : backward_hooks) {
    Tensor replaced = hook(*this, current, grad_output);
    if (!replaced.defined()) continue;
    EMBER_CHECK(current.defined(), "[", name(),
                "] a backward hook returned a gradient for an input that does not require grad");
    EMBER_CHECK(replaced.shape() == current.shape(), "[", name(), "] a backward hook returned grad_input of shape ",
                replaced.shape(), ", expected ", current.shape());
    current = std::move(replaced);
  }
  return current;
}

bool Module::has_hooks() const { return hooks_ && !hooks_->empty(); }

detail::ModuleHooks& Module::hooks() {
  if (!hooks_) hooks_ = std::make_shared<detail::ModuleHooks>();
  return *hooks_;
}

RemovableHandle Module::add_forward_pre_hook(ForwardPreHook hook) {
  hooks();
  return add_hook(hooks_, &detail::ModuleHooks::forward_pre, std::move(hook));
}

RemovableHandle Module::add_forward_hook(ForwardHook hook) {
  hooks();
  return add_hook(hooks_, &detail::ModuleHooks::forward, std::move(hook));
}

RemovableHandle Module::add_backward_hook(BackwardHook hook) {
  EMBER_CHECK(!weak_from_this().expired(), "[register_full_backward_hook] the ", name(),
              " module must be held by a std::shared_ptr (make it with std::make_shared): its backward pass refers "
              "back to it");
  hooks();
  return add_hook(hooks_, &detail::ModuleHooks::backward, std::move(hook));
}

// --- printing -------------------------------------------------------------------------------------

std::string Module::name() const { return demangled_class_name(typeid(*this).name()); }

std::string Module::extra_repr() const { return ""; }

std::string Module::repr() const {
  std::vector<std::string> lines;
  const std::string extra = extra_repr();
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  for (const auto& [child_name, child] : children_) {
    lines.push_back("(" + child_name + "): " + indent_continuation_lines(child->repr()));
  }
  std::string out = name() + "(";
  if (lines.size() == 1 && children_.empty()) {
    out += lines[0];
  } else if (!lines.empty()) {
    for (const std::string& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.repr(); }

// --- registration ---------------------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  EMBER_CHECK(!name.empty(), "[", what, "] the name must not be empty");
  EMBER_CHECK(name.find('.') == std::string::npos, "[", what, "] the name \"", name, "\" must not contain '.'");
  const auto same = [&](const auto& entry) { return entry.first == name; };
  const bool taken = std::any_of(parameters_.begin(), parameters_.end(), same) ||
                     std::any_of(children_.begin(), children_.end(), same) ||
                     std::any_of(buffers_.begin(), buffers_.end(), [&](const Buffer& b) { return b.name == name; });
  EMBER_CHECK(!taken, "[", what, "] ", this->name(), " already has a parameter, buffer or module named \"", name, "\"");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (tensor.defined()) {
    EMBER_CHECK(tensor.is_leaf(), "[register_parameter] parameter \"", name,
                "\" must be a leaf tensor (it was computed by ", tensor.grad_fn()->name(),
                "); register its detach() or create it under NoGradGuard");
    if (requires_grad) {
      EMBER_CHECK(tensor.is_floating_point(), "[register_parameter] parameter \"", name,
                  "\" must be floating point to require grad, got ", tensor.dtype());
      tensor.requires_grad_(true);
    }
  }
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor, bool persistent) {
  check_new_name(name, "register_buffer");
  buffers_.push_back(Buffer{std::move(name), tensor, persistent});
  return tensor;
}

void Module::convert_parameter_to_buffer(const std::string& name, const Tensor& value) {
  const auto it = std::find_if(parameters_.begin(), parameters_.end(), [&](const auto& p) { return p.first == name; });
  EMBER_CHECK(it != parameters_.end(), "[", this->name(), "] has no parameter \"", name, "\"");
  const Tensor target = it->second;
  parameters_.erase(it);
  target.impl().requires_grad = false;
  target.impl().grad = nullptr;
  replace_data(target, value);
  buffers_.push_back(Buffer{name, target, true});
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  EMBER_CHECK(module != nullptr, "[register_module] module \"", name, "\" is null");
  EMBER_CHECK(module.get() != this, "[register_module] a module cannot be its own child (\"", name, "\")");
  children_.emplace_back(std::move(name), std::move(module));
}

// --- traversal ------------------------------------------------------------------------------------

NamedTensors Module::collect_tensors(bool parameters, bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen_tensors;
  std::unordered_set<const Module*> seen_modules;
  auto visit = [&](auto&& self, const Module& module, const std::string& prefix) -> void {
    if (!seen_modules.insert(&module).second) return;
    auto add = [&](const std::string& name, const Tensor& t) {
      if (t.defined() && seen_tensors.insert(t.impl_ptr().get()).second) out.emplace_back(prefix + name, t);
    };
    if (parameters) {
      for (const auto& [name, t] : module.parameters_) add(name, t);
    } else {
      for (const Buffer& b : module.buffers_) add(b.name, b.tensor);
    }
    if (!recurse) return;
    for (const auto& [name, child] : module.children_) self(self, *child, prefix + name + ".");
  };
  visit(visit, *this, "");
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const { return collect_tensors(true, recurse); }

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : collect_tensors(true, recurse)) out.push_back(std::move(t));
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const { return collect_tensors(false, recurse); }

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : collect_tensors(false, recurse)) out.push_back(std::move(t));
  return out;
}

NamedModules Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

NamedModules Module::named_modules(bool include_self) {
  NamedModules out;
  std::unordered_set<const Module*> seen{this};
  if (include_self) {
    std::shared_ptr<Module> self = weak_from_this().lock();
    EMBER_CHECK(self != nullptr, "[named_modules] ", name(),
                " is not held by a std::shared_ptr, so it cannot list itself; pass include_self=false");
    out.emplace_back("", std::move(self));
  }
  auto visit = [&](auto&& recurse, const Module& module, const std::string& prefix) -> void {
    for (const auto& [child_name, child] : module.children_) {
      if (!seen.insert(child.get()).second) continue;
      out.emplace_back(prefix + child_name, child);
      recurse(recurse, *child, prefix + child_name + ".");
    }
  };
  visit(visit, *this, "");
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, module] : named_modules(include_self)) out.push_back(std::move(module));
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [name, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

// --- modes and state ------------------------------------------------------------------------------

Module& Module::train(bool on) {
  // A module already in the mode is not written: eval() on a model in eval mode (generate() and
  // the samplers call it) may run while other threads call the model.
  if (training_ != on) training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    if (!p.impl().grad) continue;
    if (set_to_none) {
      p.impl().grad.reset();
    } else {
      p.grad().zero_();
    }
  }
}

Module& Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "[Module::to] modules convert to floating-point dtypes only, got ", dtype);
  autograd::NoGradGuard no_grad;
  NamedTensors tensors = collect_tensors(true, true);
  for (auto& entry : collect_tensors(false, true)) tensors.push_back(std::move(entry));
  for (const auto& [name, t] : tensors) {
    // Integer buffers (BatchNorm's num_batches_tracked) keep their dtype, as in PyTorch.
    if (!t.is_floating_point() || t.dtype() == dtype) continue;
    replace_data(t, t.to(dtype));
    if (t.impl().grad) t.impl().grad = t.grad().to(dtype).impl_ptr();
  }
  return *this;
}

Module& Module::to(Device device) {
  autograd::NoGradGuard no_grad;
  NamedTensors tensors = collect_tensors(true, true);
  for (auto& entry : collect_tensors(false, true)) tensors.push_back(std::move(entry));
  for (const auto& [name, t] : tensors) {
    if (t.device() == device) continue;
    replace_data(t, t.to(device));
    if (t.impl().grad) t.impl().grad = t.grad().to(device).impl_ptr();
  }
  return *this;
}

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : parameters_) {
    if (t.defined()) out.emplace_back(prefix + name, t);
  }
  for (const Buffer& b : buffers_) {
    if (b.persistent && b.tensor.defined()) out.emplace_back(prefix + b.name, b.tensor);
  }
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

StateDict Module::state_dict() const {
  NamedTensors entries;
  collect_state("", entries);
  StateDict out;
  for (const auto& [key, t] : entries) out.emplace(key, t.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state_dict, bool strict) {
  NamedTensors targets;
  collect_state("", targets);

  LoadStateDictResult result;
  std::vector<std::string> mismatches;
  std::unordered_set<std::string> expected;
  for (const auto& [key, target] : targets) {
    expected.insert(key);
    const auto it = state_dict.find(key);
    if (it == state_dict.end()) {
      result.missing_keys.push_back(key);
    } else if (!it->second.defined()) {
      mismatches.push_back("\"" + key + "\" is an undefined tensor in the state dict");
    } else if (it->second.dtype() != target.dtype() &&
               (is_block_quantized(it->second.dtype()) || is_block_quantized(target.dtype()) ||
                (it->second.dtype() == kInt8 && target.is_floating_point()))) {  // a quantized weight
      mismatches.push_back(ember::detail::concat("dtype mismatch for \"", key, "\": the state dict has ",
                                                 it->second.dtype(), ", the module has ", target.dtype(),
                                                 " (ember::quant::quantize or quant::prepare the module first)"));
    } else if (it->second.shape() != target.shape()) {
      mismatches.push_back(ember::detail::concat("shape mismatch for \"", key, "\": the state dict has ",
                                                 it->second.shape(), ", the module has ", target.shape()));
    }
  }
  for (const auto& [key, value] : state_dict) {
    if (!expected.contains(key)) result.unexpected_keys.push_back(key);
  }

  const bool key_errors = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_errors || !mismatches.empty()) {
    std::ostringstream message;
    message << "[load_state_dict] error(s) loading the state dict into " << name() << ":";
    auto list_keys = [&](const char* title, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      message << "\n  " << title << ":";
      for (size_t i = 0; i < keys.size(); ++i) message << (i ? ", \"" : " \"") << keys[i] << "\"";
    };
    if (strict) {
      list_keys("missing keys", result.missing_keys);
      list_keys("unexpected keys", result.unexpected_keys);
    }
    for (const std::string& mismatch : mismatches) message << "\n  " << mismatch;
    EMBER_FAIL(message.str());
  }

  autograd::NoGradGuard no_grad;
  for (auto& [key, target] : targets) {
    const auto it = state_dict.find(key);
    if (it == state_dict.end()) continue;
    target.copy_(it->second);
  }
  return result;
}

}  // namespace ember::nn

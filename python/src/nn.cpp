// ember.nn: Module (subclassable in Python, as torch.nn.Module), Parameter, the built-in layers
// (ember::nn's C++ modules), containers, module hooks and nn.init.
//
// Note [Python modules]: a Python subclass of Module is a C++ nn::Module (through the PyModule
// trampoline), so C++ sees its parameters, children, state_dict and train/eval like any other.
// Assigning a Parameter or a Module to an attribute registers it (Module.__setattr__), as in
// PyTorch; parameters and buffers are read back from the C++ module (Module.__getattr__), so a
// C++ change to them (load_state_dict, to) is what Python sees. Calling a Python module runs its
// Python forward directly (any arguments and results); when module hooks are registered, the call
// goes through nn::Module::operator(), which runs the hooks around forward(Tensor). Built-in layers
// assigned to a Python module are read back through __getattr__ too (C++ is their only holder).
#include "ember/nn.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/trampoline.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "bindings.h"
#include "ember/autograd.h"
#include "ember/nn/init.h"
#include "ember/nn/transformer.h"

namespace ember::python {
namespace {

using nn::Module;

// A Parameter is a Tensor (the same TensorImpl handle); only its Python type differs, which is
// what Module.__setattr__ looks at.
struct Parameter : Tensor {
  using Tensor::Tensor;
};

// Note [Python modules and the garbage collector]: C++ holds Python objects in two ways: a module
// written in Python that C++ holds (a parent's child, a container's element) is kept alive by a
// strong reference in its shared_ptr's control block, and a hook holds its callable. The collector
// must see those references, or a cycle through one is never collected (a hook is often a closure
// over its module; any Python module refers, through its class, to its file's globals). PythonRefs
// records them; a module's tp_traverse reports those of the C++ modules its Python object owns
// outright: its own module (the object holds it alone), and below it every child held by nothing
// but its parent (its children list, and a container's element list). A child shared with another
// holder is not reported: it may leak in a cycle, but it is never collected while in use.
class PythonRefs {
 public:
  void add_owned(const Module* module, PyObject* object) {
    const std::lock_guard<std::mutex> lock(mutex_);
    owned_[module] = object;
  }
  void remove_owned(const Module* module) {
    const std::lock_guard<std::mutex> lock(mutex_);
    owned_.erase(module);
  }
  PyObject* owned(const Module* module) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = owned_.find(module);
    return it == owned_.end() ? nullptr : it->second;
  }
  void add_hook(const Module* module, PyObject* fn) {
    const std::lock_guard<std::mutex> lock(mutex_);
    hooks_.emplace(module, fn);
  }
  void remove_hook(const Module* module, PyObject* fn) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto [first, last] = hooks_.equal_range(module);
    for (auto it = first; it != last; ++it) {
      if (it->second == fn) {
        hooks_.erase(it);
        return;
      }
    }
  }
  void forget(const Module* module) {  // the module is being destroyed
    const std::lock_guard<std::mutex> lock(mutex_);
    hooks_.erase(module);
  }
  std::vector<PyObject*> hooks(const Module* module) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<PyObject*> out;
    const auto [first, last] = hooks_.equal_range(module);
    for (auto it = first; it != last; ++it) out.push_back(it->second);
    return out;
  }

 private:
  std::mutex mutex_;  // a module or a child may be released on any thread, without the GIL
  std::unordered_map<const Module*, PyObject*> owned_;
  std::unordered_multimap<const Module*, PyObject*> hooks_;
};

PythonRefs& python_refs() {
  static auto* refs = new PythonRefs();  // lives forever: deleters may run at exit
  return *refs;
}

// A built-in layer made from Python: shared from the start, as in C++ (hooks and named_modules
// rely on it), and forgetting its hooks' entries when destroyed.
template <class M, class... Args>
std::shared_ptr<M> make_module(Args&&... args) {
  return std::shared_ptr<M>(new M(std::forward<Args>(args)...), [](M* module) {
    python_refs().forget(module);
    delete module;
  });
}

// The shared_ptr through which C++ holds the module `child`.
std::shared_ptr<Module> shared_module(nb::handle child) {
  Module& module = nb::cast<Module&>(child);
  if (std::shared_ptr<Module> shared = module.weak_from_this().lock()) return shared;
  PyObject* object = child.inc_ref().ptr();  // a Python-owned module (a Python subclass)
  python_refs().add_owned(&module, object);
  return std::shared_ptr<Module>(&module, [object](Module* released) {
    python_refs().remove_owned(released);
    if (!nb::is_alive()) return;  // after the interpreter's shutdown
    const nb::gil_scoped_acquire gil;
    Py_DECREF(object);
  });
}

// Reports the Python references held by `module` (owned outright by the caller) and its children.
int report(const Module* module, visitproc visit, void* arg) {
  for (PyObject* fn : python_refs().hooks(module)) Py_VISIT(fn);
  std::vector<const Module*> children;
  module->for_each_child(
      [&](const std::string&, const std::shared_ptr<Module>& child) { children.push_back(child.get()); });
  const long holders_per_entry = dynamic_cast<const nn::detail::IndexedModules*>(module) != nullptr ? 2 : 1;
  for (auto it = children.begin(); it != children.end(); ++it) {
    if (std::find(children.begin(), it, *it) != it) continue;  // registered twice: counted at its first entry
    const long entries = std::count(it, children.end(), *it);
    if ((*it)->weak_from_this().use_count() != entries * holders_per_entry) continue;  // held elsewhere too
    if (PyObject* object = python_refs().owned(*it)) {
      Py_VISIT(object);  // a Python module: its own tp_traverse reports what it holds
    } else if (const int result = report(*it, visit, arg); result != 0) {
      return result;
    }
  }
  return 0;
}

int module_traverse(PyObject* self, visitproc visit, void* arg) {
  PyTypeObject* type = Py_TYPE(self);
  if (type->tp_dictoffset > 0)
    Py_VISIT(*reinterpret_cast<PyObject**>(reinterpret_cast<char*>(self) + type->tp_dictoffset));
  Py_VISIT(type);
  if (!nb::inst_ready(self)) return 0;
  const Module* module = nb::inst_ptr<Module>(self);
  // Inline in this object (a Python module: shared or not), or held by this object alone.
  const bool owned = python_refs().owned(module) != nullptr || module->weak_from_this().expired() ||
                     module->weak_from_this().use_count() == 1;
  return owned ? report(module, visit, arg) : 0;
}

int module_clear(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  if (type->tp_dictoffset > 0)
    Py_CLEAR(*reinterpret_cast<PyObject**>(reinterpret_cast<char*>(self) + type->tp_dictoffset));
  return 0;
}

PyType_Slot kModuleSlots[] = {{Py_tp_traverse, reinterpret_cast<void*>(module_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(module_clear)},
                              {0, nullptr}};

class PyModule : public Module {
 public:
  NB_TRAMPOLINE(Module, 2);
  ~PyModule() override { python_refs().forget(this); }

  Tensor forward(const Tensor& input) override { NB_OVERRIDE(forward, input); }
  std::string extra_repr() const override { NB_OVERRIDE(extra_repr); }
  std::string name() const override {
    const nb::gil_scoped_acquire gil;
    return nb::cast<std::string>(nb::handle(nb_trampoline.base()).type().attr("__name__"));
  }
};

nb::object& base_forward() {
  static nb::object* forward = new nb::object();  // Module.forward's binding; lives forever
  return *forward;
}

// Does the Python class of `self` define its own forward (a Python module, not a C++ one)?
bool has_python_forward(nb::handle self) { return !nb::getattr(self.type(), "forward").is(base_forward()); }

nb::object call_module(nb::handle self, nb::args args, nb::kwargs kwargs) {
  Module& module = nb::cast<Module&>(self);
  const bool python_forward = has_python_forward(self);
  if (python_forward && !module.has_hooks()) return self.attr("forward")(*args, **kwargs);
  Tensor input;
  if (args.size() != 1 || kwargs.size() != 0 || !nb::try_cast<Tensor>(args[0], input)) {
    throw nb::type_error((std::string("[") + module.name() +
                          "] takes one tensor here (C++ modules, and Python modules with hooks, run forward(Tensor))")
                             .c_str());
  }
  Tensor output;
  {
    const Release release;
    output = module(input);
  }
  return nb::cast(output);
}

std::optional<Tensor> find_tensor(const nn::NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, value] : tensors) {
    if (key == name) return value;
  }
  return std::nullopt;
}

nb::object get_attribute(nb::handle self, const std::string& name) {
  const Module& module = nb::cast<const Module&>(self);
  std::shared_ptr<Module> found;
  module.for_each_child([&](const std::string& key, const std::shared_ptr<Module>& child) {
    if (!found && key == name) found = child;
  });
  if (found) return nb::cast(found);
  if (auto t = find_tensor(module.named_parameters(false), name)) {
    return t->defined() ? nb::cast(*t) : nb::none();
  }
  if (auto t = find_tensor(module.named_buffers(false), name)) return t->defined() ? nb::cast(*t) : nb::none();
  throw nb::attribute_error(
      ("'" + std::string(nb::type_name(self.type()).c_str()) + "' object has no attribute '" + name + "'").c_str());
}

void set_attribute(nb::handle self, const std::string& name, nb::handle value) {
  if (!nb::inst_ready(self)) {
    throw nb::attribute_error(("[" + std::string(nb::type_name(self.type()).c_str()) + "] cannot assign \"" + name +
                               "\" before Module.__init__() is called: call super().__init__() first")
                                  .c_str());
  }
  Module& module = nb::cast<Module&>(self);
  if (nb::isinstance<Module>(value)) {
    std::shared_ptr<Module> child = shared_module(value);
    const bool python_owned = python_refs().owned(child.get()) != nullptr;
    module.register_module(name, std::move(child));
    // A Python module also goes in the instance dict (`self.block` is then a plain lookup); a
    // built-in one is read back through __getattr__, so that its only holder is this module.
    if (!python_owned) return;
  } else if (nb::isinstance<Parameter>(value)) {
    const Tensor& p = nb::cast<const Tensor&>(value);
    module.register_parameter(name, p, p.requires_grad());
    return;
  } else if (find_tensor(module.named_parameters(false), name) || find_tensor(module.named_buffers(false), name)) {
    throw nb::type_error(("[" + module.name() + "] cannot assign to \"" + name +
                          "\": it is a registered parameter or buffer (copy_ into it instead)")
                             .c_str());
  }
  if (PyObject_GenericSetAttr(self.ptr(), nb::str(name.c_str()).ptr(), value.ptr()) != 0) throw nb::python_error();
}

nb::list named_list(const nn::NamedTensors& tensors) {
  nb::list out;
  for (const auto& [name, t] : tensors) out.append(nb::make_tuple(name, t));
  return out;
}

// A hook's result: a tensor replaces the input (pre-hooks) or the output, None keeps it.
Tensor hook_result(const nb::object& result, const char* what) {
  if (result.is_none()) return Tensor();
  Tensor out;
  if (!nb::try_cast<Tensor>(result, out))
    throw nb::type_error((std::string("[") + what + "] a hook must return a tensor or None").c_str());
  return out;
}

// A module hook's handle: removes the hook and its entry in PythonRefs (Note [Python modules and
// the garbage collector]); the hook itself holds the callable.
RemovableHandle track_hook(Module& module, nb::handle fn, RemovableHandle registered) {
  python_refs().add_hook(&module, fn.ptr());
  auto inner = std::make_shared<RemovableHandle>(std::move(registered));
  return RemovableHandle([inner, module_ptr = &module, fn = fn.ptr(), removed = std::make_shared<bool>(false)] {
    if (*removed) return;
    *removed = true;
    python_refs().remove_hook(module_ptr, fn);
    inner->remove();
  });
}

template <class M>
void bind_indexed(nb::class_<M, Module>& c) {
  c.def("__len__", &M::size)
      .def("__getitem__", [](const M& m, int64_t i) { return m[i]; })
      .def("__iter__",
           [](const M& m) {
             nb::list items;
             for (const auto& child : m) items.append(nb::cast(child));
             return nb::iter(items);
           })
      .def("append",
           [](nb::handle self, nb::handle child) {
             M& container = nb::cast<M&>(self);
             container.push_back(shared_module(child));
             return nb::borrow(self);
           })
      .def("extend", [](nb::handle self, nb::iterable children) {
        M& container = nb::cast<M&>(self);
        for (nb::handle child : children) container.push_back(shared_module(child));
        return nb::borrow(self);
      });
}

}  // namespace

PyType_Slot* module_type_slots() { return kModuleSlots; }
void forget_module(const nn::Module* module) { python_refs().forget(module); }

void bind_nn(nb::module_& top) {
  nb::module_ m = top.def_submodule("nn", "Layers and the Module base class (torch.nn)");

  nb::class_<Parameter, Tensor>(m, "Parameter",
                                "A tensor that, assigned to a Module attribute, becomes one of its parameters.")
      .def(
          "__init__",
          [](Parameter* p, const Tensor& data, bool requires_grad) {
            new (p) Parameter(data.detach().impl_ptr());
            if (requires_grad) p->requires_grad_(true);
          },
          "data"_a, "requires_grad"_a = true);

  nb::class_<nn::LoadStateDictResult>(m, "LoadStateDictResult")
      .def_ro("missing_keys", &nn::LoadStateDictResult::missing_keys)
      .def_ro("unexpected_keys", &nn::LoadStateDictResult::unexpected_keys)
      .def("__repr__", [](const nn::LoadStateDictResult& r) {
        return std::string(nb::str(nb::make_tuple(r.missing_keys, r.unexpected_keys)).c_str());
      });

  nb::class_<Module, PyModule> module(m, "Module", "The base of every layer and model (torch.nn.Module).",
                                      nb::dynamic_attr(), nb::is_weak_referenceable(), nb::type_slots(kModuleSlots));
  module.def(nb::init<>())
      .def("forward", &Module::forward, "input"_a, nb::call_guard<Release>())
      .def("__call__", &call_module)
      .def("__getattr__", &get_attribute)
      .def("__setattr__", &set_attribute, "name"_a, "value"_a.none())
      .def(
          "__delattr__",
          [](nb::handle self, const std::string& name) {
            const Module& module = nb::cast<const Module&>(self);
            bool registered = false;
            module.for_each_child(
                [&](const std::string& key, const std::shared_ptr<Module>&) { registered |= key == name; });
            if (registered || find_tensor(module.named_parameters(false), name) ||
                find_tensor(module.named_buffers(false), name)) {
              throw nb::attribute_error(("[" + module.name() + "] cannot delete \"" + name +
                                         "\": registered parameters, buffers and modules stay")
                                            .c_str());
            }
            if (PyObject_GenericSetAttr(self.ptr(), nb::str(name.c_str()).ptr(), nullptr) != 0)
              throw nb::python_error();
          },
          "name"_a)
      .def("__repr__", &Module::repr)
      .def("extra_repr", &Module::extra_repr)
      .def("_get_name", &Module::name)
      .def(
          "register_parameter",
          [](Module& self, std::string name, std::optional<Tensor> t, bool requires_grad) {
            self.register_parameter(std::move(name), t.value_or(Tensor()), requires_grad);
          },
          "name"_a, "param"_a.none(), "requires_grad"_a = true)
      .def(
          "register_buffer",
          [](Module& self, std::string name, std::optional<Tensor> t, bool persistent) {
            self.register_buffer(std::move(name), t.value_or(Tensor()), persistent);
          },
          "name"_a, "tensor"_a.none(), "persistent"_a = true)
      .def(
          "register_module",
          [](Module& self, std::string name, nb::handle child) {
            self.register_module(std::move(name), shared_module(child));
          },
          "name"_a, "module"_a)
      .def(
          "add_module",
          [](Module& self, std::string name, nb::handle child) {
            self.register_module(std::move(name), shared_module(child));
          },
          "name"_a, "module"_a)
      .def("parameters", &Module::parameters, "recurse"_a = true)
      .def(
          "named_parameters",
          [](const Module& self, bool recurse) { return named_list(self.named_parameters(recurse)); },
          "recurse"_a = true)
      .def("buffers", &Module::buffers, "recurse"_a = true)
      .def(
          "named_buffers", [](const Module& self, bool recurse) { return named_list(self.named_buffers(recurse)); },
          "recurse"_a = true)
      .def("children", &Module::children)
      .def("named_children", &Module::named_children)
      .def("modules",
           [](nb::handle self) {
             nb::list out;
             out.append(self);
             for (const auto& [name, child] : nb::cast<Module&>(self).named_modules(false)) out.append(nb::cast(child));
             return out;
           })
      .def("named_modules",
           [](nb::handle self) {
             nb::list out;
             out.append(nb::make_tuple("", self));
             for (const auto& [name, child] : nb::cast<Module&>(self).named_modules(false)) {
               out.append(nb::make_tuple(name, nb::cast(child)));
             }
             return out;
           })
      .def(
          "train",
          [](nb::handle self, bool mode) {
            nb::cast<Module&>(self).train(mode);
            return nb::borrow(self);
          },
          "mode"_a = true)
      .def("eval",
           [](nb::handle self) {
             nb::cast<Module&>(self).eval();
             return nb::borrow(self);
           })
      .def_prop_ro("training", &Module::is_training)
      .def("zero_grad", &Module::zero_grad, "set_to_none"_a = true)
      .def(
          "to",
          [](nb::handle self, DType dtype) {
            Module& module = nb::cast<Module&>(self);
            {
              const Release release;
              module.to(dtype);
            }
            return nb::borrow(self);
          },
          "dtype"_a)
      .def(
          "apply",
          [](nb::handle self, nb::callable fn) {
            nb::cast<Module&>(self).apply([&](Module& child) { fn(nb::cast(&child, nb::rv_policy::reference)); });
            return nb::borrow(self);
          },
          "fn"_a)
      .def("state_dict", &Module::state_dict, nb::call_guard<Release>())
      .def("load_state_dict", &Module::load_state_dict, "state_dict"_a, "strict"_a = true, nb::call_guard<Release>())
      .def(
          "register_forward_pre_hook",
          [](Module& self, nb::callable fn) {
            return track_hook(
                self, fn, self.register_forward_pre_hook([ref = PyRef(fn)](Module& mod, const Tensor& input) {
                  const nb::gil_scoped_acquire gil;
                  return hook_result(nb::handle(ref.get())(nb::cast(&mod, nb::rv_policy::reference), input),
                                     "register_forward_pre_hook");
                }));
          },
          "hook"_a, "hook(module, input) before forward; a returned tensor replaces the input.")
      .def(
          "register_forward_hook",
          [](Module& self, nb::callable fn) {
            return track_hook(
                self, fn,
                self.register_forward_hook([ref = PyRef(fn)](Module& mod, const Tensor& input, const Tensor& output) {
                  const nb::gil_scoped_acquire gil;
                  return hook_result(nb::handle(ref.get())(nb::cast(&mod, nb::rv_policy::reference), input, output),
                                     "register_forward_hook");
                }));
          },
          "hook"_a, "hook(module, input, output) after forward; a returned tensor replaces the output.")
      .def(
          "register_full_backward_hook",
          [](Module& self, nb::callable fn) {
            return track_hook(self, fn,
                              self.register_full_backward_hook(
                                  [ref = PyRef(fn)](Module& mod, const Tensor& grad_input, const Tensor& grad_output) {
                                    const nb::gil_scoped_acquire gil;
                                    return hook_result(nb::handle(ref.get())(nb::cast(&mod, nb::rv_policy::reference),
                                                                             grad_input, grad_output),
                                                       "register_full_backward_hook");
                                  }));
          },
          "hook"_a, "hook(module, grad_input, grad_output) in backward; a returned tensor replaces grad_input.");
  base_forward() = module.attr("forward");

  // --- containers -------------------------------------------------------------------------------
  nb::class_<nn::Sequential, Module> sequential(m, "Sequential", nb::type_slots(kModuleSlots));
  sequential.def(nb::new_([](nb::args modules) {
    auto s = make_module<nn::Sequential>();
    for (nb::handle child : modules) s->push_back(shared_module(child));
    return s;
  }));
  bind_indexed(sequential);
  nb::class_<nn::ModuleList, Module> module_list(m, "ModuleList", nb::type_slots(kModuleSlots));
  module_list.def(nb::new_([](std::optional<nb::iterable> modules) {
                    auto list = make_module<nn::ModuleList>();
                    if (modules) {
                      for (nb::handle child : *modules) list->push_back(shared_module(child));
                    }
                    return list;
                  }),
                  "modules"_a = nb::none());
  bind_indexed(module_list);

  // --- layers: made shared from the start, as in C++ (hooks and named_modules need it) ---------
  nb::class_<nn::Linear, Module>(m, "Linear", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t in, int64_t out, bool bias) { return make_module<nn::Linear>(in, out, bias); }),
           "in_features"_a, "out_features"_a, "bias"_a = true)
      .def_ro("in_features", &nn::Linear::in_features)
      .def_ro("out_features", &nn::Linear::out_features);
  nb::class_<nn::Conv1d, Module>(m, "Conv1d", nb::type_slots(kModuleSlots))
      .def(nb::new_(
               [](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                  bool bias) { return make_module<nn::Conv1d>(in, out, k, stride, padding, dilation, groups, bias); }),
           "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
           "groups"_a = 1, "bias"_a = true);
  nb::class_<nn::Conv2d, Module>(m, "Conv2d", nb::type_slots(kModuleSlots))
      .def(nb::new_(
               [](int64_t in, int64_t out, Pair k, Pair stride, Pair padding, Pair dilation, int64_t groups,
                  bool bias) { return make_module<nn::Conv2d>(in, out, k, stride, padding, dilation, groups, bias); }),
           "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
           "groups"_a = 1, "bias"_a = true);
  nb::class_<nn::ConvTranspose2d, Module>(m, "ConvTranspose2d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t in, int64_t out, Pair k, Pair stride, Pair padding, Pair output_padding, int64_t groups,
                       bool bias, Pair dilation) {
             return make_module<nn::ConvTranspose2d>(in, out, k, stride, padding, output_padding, groups, bias,
                                                     dilation);
           }),
           "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "output_padding"_a = 0,
           "groups"_a = 1, "bias"_a = true, "dilation"_a = 1);
  nb::class_<nn::Embedding, Module>(m, "Embedding", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t n, int64_t d) { return make_module<nn::Embedding>(n, d); }), "num_embeddings"_a,
           "embedding_dim"_a);
  nb::class_<nn::MaxPool2d, Module>(m, "MaxPool2d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](Pair k, std::optional<Pair> stride, Pair padding, Pair dilation, bool ceil_mode) {
             return make_module<nn::MaxPool2d>(k, stride, padding, dilation, ceil_mode);
           }),
           "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0, "dilation"_a = 1, "ceil_mode"_a = false);
  nb::class_<nn::AvgPool2d, Module>(m, "AvgPool2d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](Pair k, std::optional<Pair> stride, Pair padding, bool ceil_mode, bool count_include_pad) {
             return make_module<nn::AvgPool2d>(k, stride, padding, ceil_mode, count_include_pad);
           }),
           "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0, "ceil_mode"_a = false,
           "count_include_pad"_a = true);
  nb::class_<nn::AdaptiveAvgPool2d, Module>(m, "AdaptiveAvgPool2d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](Pair size) { return make_module<nn::AdaptiveAvgPool2d>(size); }), "output_size"_a);
  nb::class_<nn::BatchNorm1d, Module>(m, "BatchNorm1d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t n, double eps, std::optional<double> momentum, bool affine, bool track) {
             return make_module<nn::BatchNorm1d>(n, eps, momentum, affine, track);
           }),
           "num_features"_a, "eps"_a = 1e-5, "momentum"_a.none() = 0.1, "affine"_a = true,
           "track_running_stats"_a = true);
  nb::class_<nn::BatchNorm2d, Module>(m, "BatchNorm2d", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t n, double eps, std::optional<double> momentum, bool affine, bool track) {
             return make_module<nn::BatchNorm2d>(n, eps, momentum, affine, track);
           }),
           "num_features"_a, "eps"_a = 1e-5, "momentum"_a.none() = 0.1, "affine"_a = true,
           "track_running_stats"_a = true);
  nb::class_<nn::LayerNorm, Module>(m, "LayerNorm", nb::type_slots(kModuleSlots))
      .def(nb::new_([](const Shape& shape, double eps, bool affine, bool bias) {
             return make_module<nn::LayerNorm>(shape, eps, affine, bias);
           }),
           "normalized_shape"_a, "eps"_a = 1e-5, "elementwise_affine"_a = true, "bias"_a = true);
  nb::class_<nn::RMSNorm, Module>(m, "RMSNorm", nb::type_slots(kModuleSlots))
      .def(nb::new_([](const Shape& shape, std::optional<double> eps, bool affine) {
             return make_module<nn::RMSNorm>(shape, eps, affine);
           }),
           "normalized_shape"_a, "eps"_a = nb::none(), "elementwise_affine"_a = true);
  nb::class_<nn::GroupNorm, Module>(m, "GroupNorm", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t groups, int64_t channels, double eps, bool affine) {
             return make_module<nn::GroupNorm>(groups, channels, eps, affine);
           }),
           "num_groups"_a, "num_channels"_a, "eps"_a = 1e-5, "affine"_a = true);
  nb::class_<nn::Upsample, Module>(m, "Upsample", nb::type_slots(kModuleSlots))
      .def(nb::new_([](std::optional<std::vector<int64_t>> size, std::optional<std::vector<double>> scale_factor,
                       std::string mode, std::optional<bool> align_corners) {
             return make_module<nn::Upsample>(size, scale_factor, mode, align_corners);
           }),
           "size"_a = nb::none(), "scale_factor"_a = nb::none(), "mode"_a = "nearest", "align_corners"_a = nb::none());
  nb::class_<nn::Dropout, Module>(m, "Dropout", nb::type_slots(kModuleSlots))
      .def(nb::new_([](double p) { return make_module<nn::Dropout>(p); }), "p"_a = 0.5);
  nb::class_<nn::Flatten, Module>(m, "Flatten", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t start, int64_t end) { return make_module<nn::Flatten>(start, end); }), "start_dim"_a = 1,
           "end_dim"_a = -1);
  nb::class_<nn::ReLU, Module>(m, "ReLU", nb::type_slots(kModuleSlots)).def(nb::new_([] {
    return make_module<nn::ReLU>();
  }));
  nb::class_<nn::SiLU, Module>(m, "SiLU", nb::type_slots(kModuleSlots)).def(nb::new_([] {
    return make_module<nn::SiLU>();
  }));
  nb::class_<nn::Tanh, Module>(m, "Tanh", nb::type_slots(kModuleSlots)).def(nb::new_([] {
    return make_module<nn::Tanh>();
  }));
  nb::class_<nn::Sigmoid, Module>(m, "Sigmoid", nb::type_slots(kModuleSlots)).def(nb::new_([] {
    return make_module<nn::Sigmoid>();
  }));
  nb::class_<nn::GELU, Module>(m, "GELU", nb::type_slots(kModuleSlots))
      .def(nb::new_([](std::string approximate) { return make_module<nn::GELU>(std::move(approximate)); }),
           "approximate"_a = "none");
  nb::class_<nn::Softplus, Module>(m, "Softplus", nb::type_slots(kModuleSlots))
      .def(nb::new_([](double beta, double threshold) { return make_module<nn::Softplus>(beta, threshold); }),
           "beta"_a = 1.0, "threshold"_a = 20.0);
  nb::class_<nn::Softmax, Module>(m, "Softmax", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t dim) { return make_module<nn::Softmax>(dim); }), "dim"_a);
  nb::class_<nn::LogSoftmax, Module>(m, "LogSoftmax", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t dim) { return make_module<nn::LogSoftmax>(dim); }), "dim"_a);
  nb::class_<nn::MultiheadAttention, Module>(m, "MultiheadAttention", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias, bool batch_first) {
             return make_module<nn::MultiheadAttention>(
                 embed_dim, num_heads,
                 nn::MultiheadAttentionOptions{.dropout = dropout, .bias = bias, .batch_first = batch_first});
           }),
           "embed_dim"_a, "num_heads"_a, "dropout"_a = 0.0, "bias"_a = true, "batch_first"_a = false)
      .def(
          "__call__",
          [](nn::MultiheadAttention& self, const Tensor& query, const Tensor& key, const Tensor& value,
             std::optional<Tensor> key_padding_mask, bool need_weights, std::optional<Tensor> attn_mask,
             bool average_attn_weights, bool is_causal) {
            nn::AttentionOutput out;
            {
              const Release release;
              out = self.forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                                 is_causal);
            }
            return nb::make_tuple(out.output, out.weights.defined() ? nb::cast(out.weights) : nb::none());
          },
          "query"_a, "key"_a, "value"_a, "key_padding_mask"_a = nb::none(), "need_weights"_a = true,
          "attn_mask"_a = nb::none(), "average_attn_weights"_a = true, "is_causal"_a = false);
  nb::class_<nn::TransformerEncoderLayer, Module>(m, "TransformerEncoderLayer", nb::type_slots(kModuleSlots))
      .def(nb::new_([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout, std::string activation,
                       double layer_norm_eps, bool batch_first, bool norm_first, bool bias) {
             return make_module<nn::TransformerEncoderLayer>(
                 d_model, nhead,
                 nn::TransformerEncoderLayerOptions{.dim_feedforward = dim_feedforward,
                                                    .dropout = dropout,
                                                    .activation = std::move(activation),
                                                    .layer_norm_eps = layer_norm_eps,
                                                    .batch_first = batch_first,
                                                    .norm_first = norm_first,
                                                    .bias = bias});
           }),
           "d_model"_a, "nhead"_a, "dim_feedforward"_a = 2048, "dropout"_a = 0.1, "activation"_a = "relu",
           "layer_norm_eps"_a = 1e-5, "batch_first"_a = false, "norm_first"_a = false, "bias"_a = true);
  m.def("generate_square_subsequent_mask", &nn::generate_square_subsequent_mask, "size"_a, "dtype"_a = kFloat32);

  // --- nn.init ----------------------------------------------------------------------------------
  nb::module_ init = m.def_submodule("init", "Parameter initialization (torch.nn.init), in place");
  init.def("calculate_gain", &nn::init::calculate_gain, "nonlinearity"_a, "param"_a = nb::none());
  init.def("uniform_", &nn::init::uniform_, "tensor"_a, "a"_a = 0.0, "b"_a = 1.0, nb::call_guard<Release>());
  init.def("normal_", &nn::init::normal_, "tensor"_a, "mean"_a = 0.0, "std"_a = 1.0, nb::call_guard<Release>());
  init.def("constant_", &nn::init::constant_, "tensor"_a, "val"_a, nb::call_guard<Release>());
  init.def("zeros_", &nn::init::zeros_, "tensor"_a, nb::call_guard<Release>());
  init.def("ones_", &nn::init::ones_, "tensor"_a, nb::call_guard<Release>());
  init.def("xavier_uniform_", &nn::init::xavier_uniform_, "tensor"_a, "gain"_a = 1.0, nb::call_guard<Release>());
  init.def("xavier_normal_", &nn::init::xavier_normal_, "tensor"_a, "gain"_a = 1.0, nb::call_guard<Release>());
  init.def("kaiming_uniform_", &nn::init::kaiming_uniform_, "tensor"_a, "a"_a = 0.0, "mode"_a = "fan_in",
           "nonlinearity"_a = "leaky_relu", nb::call_guard<Release>());
  init.def("kaiming_normal_", &nn::init::kaiming_normal_, "tensor"_a, "a"_a = 0.0, "mode"_a = "fan_in",
           "nonlinearity"_a = "leaky_relu", nb::call_guard<Release>());
}

}  // namespace ember::python

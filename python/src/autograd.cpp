// Autograd from Python: requires_grad, grad, backward, tensor hooks taking Python callables,
// grad mode (the ember package wraps it as no_grad / enable_grad context managers), anomaly
// detection, autograd.grad and gradcheck.
#include "ember/autograd.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/shared_ptr.h>

#include "bindings.h"
#include "ember/ops.h"

namespace ember::python {
namespace {

// A hook's result: a tensor replaces the gradient, None keeps it.
Tensor call_grad_hook(const PyRef& fn, const Tensor& grad) {
  const nb::gil_scoped_acquire gil;
  nb::object result = nb::handle(fn.get())(grad);
  if (result.is_none()) return Tensor();
  Tensor out;
  if (!nb::try_cast<Tensor>(result, out)) throw nb::type_error("[register_hook] a hook must return a tensor or None");
  return out;
}

}  // namespace

void bind_tensor_autograd(nb::class_<Tensor>& t) {
  t.def_prop_rw(
       "requires_grad", [](const Tensor& x) { return x.requires_grad(); },
       [](Tensor& x, bool value) { x.requires_grad_(value); })
      .def(
          "requires_grad_", [](Tensor& x, bool value) -> Tensor& { return x.requires_grad_(value); },
          "requires_grad"_a = true, nb::rv_policy::none)
      .def_prop_rw(
          "grad",
          [](const Tensor& x) -> std::optional<Tensor> {
            Tensor g = x.grad();
            return g.defined() ? std::optional<Tensor>(g) : std::nullopt;
          },
          [](Tensor& x, std::optional<Tensor> g) { x.set_grad(g.value_or(Tensor())); }, nb::arg("grad").none())
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_ro("grad_fn", [](const Tensor& x) { return x.grad_fn(); })
      .def_prop_ro("data", &Tensor::detach)
      .def(
          "backward",
          [](const Tensor& x, std::optional<Tensor> gradient, bool retain_graph) {
            x.backward(gradient.value_or(Tensor()), retain_graph);
          },
          "gradient"_a = nb::none(), "retain_graph"_a = false, nb::call_guard<Release>())
      .def(
          "register_hook",
          [](const Tensor& x, nb::callable fn) {
            return x.register_hook([ref = PyRef(fn)](const Tensor& grad) { return call_grad_hook(ref, grad); });
          },
          "hook"_a, "Calls hook(grad) when this tensor's gradient is computed; a returned tensor replaces it.")
      .def("retain_grad", &Tensor::retain_grad)
      .def(
          "register_post_accumulate_grad_hook",
          [](const Tensor& x, nb::callable fn) {
            return autograd::register_post_accumulate_grad_hook(x, [ref = PyRef(fn)](const Tensor& leaf) {
              const nb::gil_scoped_acquire gil;
              nb::handle(ref.get())(leaf);
            });
          },
          "hook"_a);
}

void bind_autograd(nb::module_& m) {
  nb::class_<RemovableHandle>(m, "RemovableHandle", "Returned by register_*_hook: remove() unregisters the hook.")
      .def("remove", &RemovableHandle::remove)
      .def_prop_ro("active", &RemovableHandle::active)
      .def(
          "__enter__", [](RemovableHandle& h) -> RemovableHandle& { return h; }, nb::rv_policy::reference)
      .def("__exit__", [](RemovableHandle& h, nb::args) { h.remove(); });

  nb::class_<autograd::Node>(m, "Node", "A recorded op in the autograd graph (a tensor's grad_fn).")
      .def("name", &autograd::Node::name)
      .def("__repr__", [](const autograd::Node& n) {
        std::string text = "<";
        text += n.name();
        text += "_backward>";
        return text;
      });

  nb::module_ a = m.def_submodule("autograd", "Gradients: backward, grad, gradcheck");
  m.def("is_grad_enabled", &autograd::is_grad_enabled);
  m.def("set_grad_enabled", &autograd::set_grad_enabled, "mode"_a);
  m.def("is_anomaly_enabled", &autograd::is_anomaly_enabled);
  // DetectAnomalyGuard as an object the package's context manager holds between __enter__ and __exit__.
  nb::class_<autograd::DetectAnomalyGuard>(a, "_AnomalyGuard").def(nb::init<>());
  a.def("backward", &autograd::backward, "tensors"_a, "grad_tensors"_a = std::vector<Tensor>{},
        "retain_graph"_a = false, nb::call_guard<Release>());
  a.def(
      "grad",
      [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
         std::optional<std::vector<Tensor>> grads, bool retain_graph, bool allow_unused) {
        const std::vector<Tensor> out =
            autograd::grad(outputs, inputs, grads.value_or(std::vector<Tensor>{}), retain_graph, allow_unused);
        std::vector<std::optional<Tensor>> result;
        for (const Tensor& g : out) result.push_back(g.defined() ? std::optional<Tensor>(g) : std::nullopt);
        return result;
      },
      "outputs"_a, "inputs"_a, "grad_outputs"_a = nb::none(), "retain_graph"_a = false, "allow_unused"_a = false,
      nb::call_guard<Release>());
  a.def(
      "gradcheck",
      [](nb::callable fn, const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
        const PyRef ref(fn);
        const autograd::GradcheckFn call = [ref](const std::vector<Tensor>& xs) {
          const nb::gil_scoped_acquire gil;
          nb::list args;
          for (const Tensor& x : xs) args.append(nb::cast(x));
          return nb::cast<Tensor>(nb::handle(ref.get())(*args));
        };
        const Release release;
        return autograd::gradcheck(call, inputs, {.eps = eps, .atol = atol, .rtol = rtol});
      },
      "func"_a, "inputs"_a, "eps"_a = 1e-6, "atol"_a = 1e-5, "rtol"_a = 1e-3,
      "Compares the gradients of func (a tensor-valued function of the inputs) with central differences "
      "(use float64 inputs); raises ember.Error naming the first mismatch.");
}

}  // namespace ember::python

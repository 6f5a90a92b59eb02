// What the binding files share: the conversions between Python values and ember's value types
// (shapes, scalars, pairs, reductions), a Python object that C++ may hold without the GIL, and the
// per-area registration functions that module.cpp calls.
//
// Note [the GIL]: every call into the library releases the GIL (nb::call_guard<Release> on the
// bindings), so Python threads run ember concurrently; anything that calls back into Python from
// C++ (hooks, a Module's forward written in Python, a compiled function's body) takes it again.
// Python objects held by C++ (a hook's callable) live in a PyRef, whose last copy may die in
// C++ code that runs without the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "ember/attrs.h"
#include "ember/dtype.h"
#include "ember/scalar.h"
#include "ember/shape.h"
#include "ember/tensor.h"

namespace ember::nn {
class Module;
}

namespace ember::python {

namespace nb = nanobind;
using namespace nb::literals;
using Release = nb::gil_scoped_release;

// A strong reference to a Python object that can be copied and destroyed without holding the GIL.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(nb::handle object);
  nb::handle get() const { return object_.get(); }
  explicit operator bool() const { return object_ != nullptr; }

 private:
  std::shared_ptr<PyObject> object_;
};

// The ops bound both as ember.<name>(x, ...) and as the method x.<name>(...) are the op table's
// uniform families (ember/op_list.h): EMBER_UNARY_MATH, EMBER_UNARY_PREDICATES, EMBER_BINARY_MATH,
// EMBER_COMPARISONS and EMBER_DIM_REDUCTIONS (over `dim`: an int, a sequence of ints, or None for
// every dimension, with `keepdim`).

// The type slots every module class is bound with (its collector traversal: Note [Python modules and
// the garbage collector] in nn.cpp), and what a module made from Python calls when it is destroyed.
PyType_Slot* module_type_slots();
void forget_module(const nn::Module* module);
// A module made from Python: shared from the start, as in C++, and forgotten by PythonRefs when
// destroyed.
template <class M, class... Args>
std::shared_ptr<M> make_python_module(Args&&... args) {
  return std::shared_ptr<M>(new M(std::forward<Args>(args)...), [](M* module) {
    forget_module(module);
    delete module;
  });
}

// The per-area registration functions (one file each).
void bind_dtype(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_interop(nb::module_& m, nb::class_<Tensor>& tensor);
void bind_indexing(nb::class_<Tensor>& tensor);
void bind_tensor_autograd(nb::class_<Tensor>& tensor);
void bind_ops(nb::module_& m);
void bind_autograd(nb::module_& m);
void bind_nn(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_runtime(nb::module_& m);   // save/load, memory, seeds, threads, profiler, compile, data
void bind_training(nb::module_& m);  // models, train, onnx, gguf

// A Python number as an ember Scalar (bool, int, float, or anything with __index__ / __float__).
bool scalar_from_python(nb::handle src, bool convert, Scalar& out);
nb::object scalar_to_python(const Scalar& value);

// A shape from `f(2, 3)` or `f((2, 3))`: the positional arguments of a varargs call.
Shape shape_from_args(const nb::args& args, const char* op);

}  // namespace ember::python

namespace nanobind::detail {

// ember::Shape (and Axes, Strides): any sequence of ints, or one int; to Python a tuple.
template <>
struct type_caster<ember::Shape> {
  NB_TYPE_CASTER(ember::Shape, const_name("collections.abc.Sequence[int]"))

  bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {
    if (PyLong_Check(src.ptr())) {
      const long long v = PyLong_AsLongLong(src.ptr());
      if (v == -1 && PyErr_Occurred()) return PyErr_Clear(), false;
      value = ember::Shape{v};
      return true;
    }
    if (!PySequence_Check(src.ptr()) || PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr())) return false;
    const Py_ssize_t n = PySequence_Size(src.ptr());
    if (n < 0 || n > ember::kMaxDims) return PyErr_Clear(), false;
    ember::Shape shape;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_GetItem(src.ptr(), i);
      if (item == nullptr) return PyErr_Clear(), false;
      const bool integral = PyLong_Check(item) || (!PyFloat_Check(item) && PyIndex_Check(item));
      const long long v = integral ? PyLong_AsLongLong(item) : -1;
      Py_DECREF(item);
      if (!integral || (v == -1 && PyErr_Occurred())) return PyErr_Clear(), false;
      shape.push_back(v);
    }
    value = shape;
    return true;
  }

  static handle from_cpp(const ember::Shape& shape, rv_policy, cleanup_list*) noexcept {
    PyObject* out = PyTuple_New(shape.size());
    for (int i = 0; i < shape.size(); ++i) PyTuple_SET_ITEM(out, i, PyLong_FromLongLong(shape[i]));
    return out;
  }
};

template <>
struct type_caster<ember::Scalar> {
  NB_TYPE_CASTER(ember::Scalar, const_name("float | int | bool"))

  bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {
    return ember::python::scalar_from_python(src, (flags & (uint8_t)cast_flags::convert) != 0, value);
  }
  static handle from_cpp(const ember::Scalar& v, rv_policy, cleanup_list*) noexcept {
    return ember::python::scalar_to_python(v).release();
  }
};

// ember::Pair: one int (both) or a pair of ints (height, width).
template <>
struct type_caster<ember::Pair> {
  NB_TYPE_CASTER(ember::Pair, const_name("int | tuple[int, int]"))

  bool from_python(handle src, uint8_t flags, cleanup_list* cleanup) noexcept {
    type_caster<ember::Shape> shape;
    if (!shape.from_python(src, flags, cleanup)) return false;
    if (PyLong_Check(src.ptr())) {
      value = ember::Pair(shape.value[0]);
      return true;
    }
    if (shape.value.size() != 2) return false;
    value = ember::Pair(shape.value[0], shape.value[1]);
    return true;
  }
  static handle from_cpp(const ember::Pair& p, rv_policy, cleanup_list*) noexcept {
    return PyTuple_Pack(2, PyLong_FromLongLong(p.h), PyLong_FromLongLong(p.w));
  }
};

// A loss's reduction as PyTorch names it: "mean", "sum" or "none".
template <>
struct type_caster<ember::Reduction> {
  NB_TYPE_CASTER(ember::Reduction, const_name("str"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    Py_ssize_t size = 0;
    const char* s = PyUnicode_Check(src.ptr()) ? PyUnicode_AsUTF8AndSize(src.ptr(), &size) : nullptr;
    if (s == nullptr) return PyErr_Clear(), false;
    const std::string_view name(s, static_cast<size_t>(size));
    if (name == "mean") return value = ember::Reduction::kMean, true;
    if (name == "sum") return value = ember::Reduction::kSum, true;
    if (name == "none") return value = ember::Reduction::kNone, true;
    return false;
  }
  static handle from_cpp(ember::Reduction r, rv_policy, cleanup_list*) noexcept {
    const char* name = r == ember::Reduction::kMean ? "mean" : r == ember::Reduction::kSum ? "sum" : "none";
    return PyUnicode_FromString(name);
  }
};

}  // namespace nanobind::detail

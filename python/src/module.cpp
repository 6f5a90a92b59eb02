// The extension module ember._ember: errors, the shared conversions, and each area's bindings.
// The Python package (python/ember/__init__.py) re-exports it with PyTorch's names and layout.
#include <cstdlib>
#include <string_view>

#include "bindings.h"
#include "ember/error.h"

namespace ember::python {

PyRef::PyRef(nb::handle object)
    : object_(object.inc_ref().ptr(), [](PyObject* o) {
        if (!nb::is_alive()) return;  // after the interpreter's shutdown: the object went with it
        const nb::gil_scoped_acquire gil;
        Py_DECREF(o);
      }) {}

bool scalar_from_python(nb::handle src, bool convert, Scalar& out) {
  PyObject* o = src.ptr();
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) return PyErr_Clear(), false;
    out = Scalar(static_cast<int64_t>(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (!convert) return false;
  // NumPy scalars and other numbers; a tensor is never a scalar here (its overload comes first).
  if (PyIndex_Check(o)) {
    PyObject* index = PyNumber_Index(o);
    if (index == nullptr) return PyErr_Clear(), false;
    const long long v = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred()) return PyErr_Clear(), false;
    out = Scalar(static_cast<int64_t>(v));
    return true;
  }
  if (PyNumber_Check(o) && nb::hasattr(src, "__float__") && !nb::hasattr(src, "__dlpack__")) {
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return PyErr_Clear(), false;
    out = Scalar(v);
    return true;
  }
  return false;
}

nb::object scalar_to_python(const Scalar& value) {
  switch (value.kind()) {
    case Scalar::Kind::kBoolean:
      return nb::bool_(value.to_bool());
    case Scalar::Kind::kInteger:
      return nb::int_(value.to_int());
    case Scalar::Kind::kFloating:
      return nb::float_(value.to_double());
  }
  return nb::none();
}

Shape shape_from_args(const nb::args& args, const char* op) {
  // f((2, 3)) or f([2, 3]): one sequence; f(2, 3): the ints themselves.
  nb::handle source = args;
  if (args.size() == 1 && !PyLong_Check(args[0].ptr()) && PySequence_Check(args[0].ptr())) source = args[0];
  Shape shape;
  if (!nb::try_cast<Shape>(source, shape)) {
    EMBER_FAIL("[", op, "] expected a shape: ints, or one sequence of ints (at most ", kMaxDims, "), got ",
               nb::str(source).c_str());
  }
  return shape;
}

}  // namespace ember::python

NB_MODULE(_ember, m) {
  using namespace ember::python;
  m.doc() = "ember's C++ library, bound with nanobind (the Python API is the ember package)";

  // nanobind reports the instances still alive when the interpreter has shut down. Python itself
  // collects nothing after it clears the modules' globals, so a model kept by a reference cycle
  // (a hook that is a bound method of its module) is still there, as in pure Python, and nanobind
  // would call that a leak. The report is on with EMBER_LEAK_WARNINGS=1 (as in the tests).
  const char* leak_warnings = std::getenv("EMBER_LEAK_WARNINGS");
  nb::set_leak_warnings(leak_warnings != nullptr && std::string_view(leak_warnings) == "1");

  // ember::Error -> ember.Error, a RuntimeError carrying the library's "[op] ..." message.
  static nb::exception<ember::Error> error(m, "Error", PyExc_RuntimeError);

  bind_dtype(m);
  bind_autograd(m);
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_optim(m);
  bind_runtime(m);
  bind_training(m);
}

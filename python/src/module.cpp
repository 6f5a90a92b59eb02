// The extension module ember._ember: errors, the shared conversions, and each area's bindings.
// The Python package (python/ember/__init__.py) re-exports it with PyTorch's names and layout.
#include "bindings.h"
#include "ember/error.h"

namespace ember::python {

PyRef::PyRef(nb::handle object)
    : object_(object.inc_ref().ptr(), [](PyObject* o) {
        if (!Py_IsInitialized()) return;  // interpreter shutdown: the object goes with it
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

  // ember::Error -> ember.Error, a RuntimeError carrying the library's "[op] ..." message.
  static nb::exception<ember::Error> error(m, "Error", PyExc_RuntimeError);

  bind_dtype(m);
  bind_autograd(m);
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_optim(m);
  bind_runtime(m);
}

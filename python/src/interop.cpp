// Tensors to and from other libraries without copying: NumPy (numpy(), __array__, from_numpy) and
// DLPack (__dlpack__, __dlpack_device__, from_dlpack) share the storage; an exported tensor keeps
// its storage alive for as long as the consumer holds it, and an imported array stays alive for
// as long as any ember tensor views it. ember.tensor() copies (as torch.tensor does).
#include <nanobind/ndarray.h>

#include "bindings.h"
#include "ember/ops.h"

namespace ember::python {
namespace {

namespace dl = nb::dlpack;

dl::dtype to_dlpack(DType d, const char* op) {
  switch (d) {
    case kFloat32:
      return {(uint8_t)dl::dtype_code::Float, 32, 1};
    case kFloat64:
      return {(uint8_t)dl::dtype_code::Float, 64, 1};
    case kFloat16:
      return {(uint8_t)dl::dtype_code::Float, 16, 1};
    case kBFloat16:
      return {(uint8_t)dl::dtype_code::Bfloat, 16, 1};
    case kInt64:
      return {(uint8_t)dl::dtype_code::Int, 64, 1};
    case kInt32:
      return {(uint8_t)dl::dtype_code::Int, 32, 1};
    case kInt16:
      return {(uint8_t)dl::dtype_code::Int, 16, 1};
    case kInt8:
      return {(uint8_t)dl::dtype_code::Int, 8, 1};
    case kUInt8:
      return {(uint8_t)dl::dtype_code::UInt, 8, 1};
    case kBool:
      return {(uint8_t)dl::dtype_code::Bool, 8, 1};
    default:
      EMBER_FAIL("[", op, "] ", d, " tensors (block-quantized) have no array equivalent; dequantize first");
  }
}

DType from_dlpack_dtype(dl::dtype t, const char* op) {
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (t.lanes == 1) {
    if (code == dl::dtype_code::Float && t.bits == 32) return kFloat32;
    if (code == dl::dtype_code::Float && t.bits == 64) return kFloat64;
    if (code == dl::dtype_code::Float && t.bits == 16) return kFloat16;
    if (code == dl::dtype_code::Bfloat && t.bits == 16) return kBFloat16;
    if (code == dl::dtype_code::Int && t.bits == 64) return kInt64;
    if (code == dl::dtype_code::Int && t.bits == 32) return kInt32;
    if (code == dl::dtype_code::Int && t.bits == 16) return kInt16;
    if (code == dl::dtype_code::Int && t.bits == 8) return kInt8;
    if (code == dl::dtype_code::UInt && t.bits == 8) return kUInt8;
    if (code == dl::dtype_code::Bool && t.bits == 8) return kBool;
  }
  static const char* names[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  const char* name = t.code < 7 ? names[t.code] : "unknown";
  EMBER_FAIL("[", op, "] unsupported element type ", name, t.bits, (t.lanes != 1 ? " with lanes" : ""),
             ": ember has float32/64/16, bfloat16, int64/32/16/8, uint8 and bool");
}

// A view of the tensor as an ndarray of the given framework; the owner capsule keeps the storage.
template <class... Framework>
nb::ndarray<Framework...> export_array(const Tensor& t, const char* op) {
  EMBER_CHECK(t.device().is_cpu(), "[", op, "] the tensor is on ", t.device(), "; only CPU tensors can be shared");
  const dl::dtype dtype = to_dlpack(t.dtype(), op);
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  t.impl().storage->share_outside();  // writes through the array never reach the version
  return nb::ndarray<Framework...>(t.data_ptr(), shape.size(), shape.data(), owner, strides.data(), dtype);
}

// An ember tensor over the array's memory; the storage holds the array until its last view dies.
Tensor import_array(const nb::ndarray<>& array, const char* op) {
  EMBER_CHECK(array.device_type() == nb::device::cpu::value, "[", op, "] the array is on device type ",
              array.device_type(), "; ember imports CPU memory only");
  const DType dtype = from_dlpack_dtype(array.dtype(), op);
  const int ndim = static_cast<int>(array.ndim());
  EMBER_CHECK(ndim <= kMaxDims, "[", op, "] the array has ", ndim, " dimensions; ember supports at most ", kMaxDims);
  Shape shape, strides;
  int64_t extent = 1;  // elements spanned, from the first to one past the last
  bool empty = false;
  for (int d = 0; d < ndim; ++d) {
    const auto size = static_cast<int64_t>(array.shape(d));
    const int64_t stride = array.stride(d);
    EMBER_CHECK(stride >= 0, "[", op, "] negative strides (a reversed view) are not supported; copy the array first");
    shape.push_back(size);
    strides.push_back(stride);
    if (size == 0) empty = true;
    extent += (size - 1) * stride;
  }
  if (empty) extent = 0;
  auto* keep = new nb::ndarray<>(array);
  auto release = [](void*, int64_t, void* context) {
    auto* held = static_cast<nb::ndarray<>*>(context);
    if (!nb::is_alive()) return;  // after the interpreter's shutdown
    const nb::gil_scoped_acquire gil;
    delete held;
  };
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(const_cast<void*>(static_cast<const void*>(array.data())),
                                                extent * dtype_size(dtype), kCPU, release, keep);
  impl->storage->share_outside();  // writes through the array never reach the version
  impl->dtype = dtype;
  impl->set_geometry(shape, strides, 0);
  return Tensor(std::move(impl));
}

nb::ndarray<> array_from(nb::handle object, const char* op) {
  nb::ndarray<> array;
  if (nb::try_cast<nb::ndarray<>>(object, array)) return array;
  nb::ndarray<nb::ro> readonly;
  if (nb::try_cast<nb::ndarray<nb::ro>>(object, readonly)) {
    EMBER_FAIL("[", op, "] the array is read-only; ember tensors are writable, so pass a writable copy (arr.copy())");
  }
  EMBER_FAIL("[", op, "] expected an array (NumPy, or anything with __dlpack__ or the buffer protocol), got ",
             nb::type_name(object.type()).c_str(), "; the array may also have an unsupported dtype or strides");
}

// ember.tensor([[1, 2], [3, 4]]): nested sequences of numbers. bool stays bool, ints give int64,
// any float gives float32 (PyTorch's defaults).
struct Nested {
  Shape shape;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool any_float = false, all_bool = true;
};

void read_nested(nb::handle item, int depth, Nested& out) {
  Scalar s;
  if (scalar_from_python(item, false, s) || (!PySequence_Check(item.ptr()) && scalar_from_python(item, true, s))) {
    EMBER_CHECK(depth == out.shape.size(), "[tensor] ragged nested sequence: a number where a sequence of length ",
                depth < out.shape.size() ? out.shape[depth] : 0, " was expected");
    out.any_float |= s.is_floating();
    out.all_bool &= s.kind() == Scalar::Kind::kBoolean;
    out.floats.push_back(s.to_double());
    out.ints.push_back(s.to_int());
    return;
  }
  Tensor t;
  if (nb::try_cast<Tensor>(item, t) && t.dim() == 0) return read_nested(nb::cast(t.item()), depth, out);
  EMBER_CHECK(PySequence_Check(item.ptr()) && !PyUnicode_Check(item.ptr()), "[tensor] cannot make a tensor from ",
              nb::type_name(item.type()).c_str());
  const nb::sequence seq = nb::borrow<nb::sequence>(item);
  const auto n = static_cast<int64_t>(nb::len(seq));
  if (depth == out.shape.size()) {
    EMBER_CHECK(out.floats.empty(), "[tensor] ragged nested sequence: a sequence where a number was expected");
    out.shape.push_back(n);
  } else {
    EMBER_CHECK(out.shape[depth] == n, "[tensor] ragged nested sequence: expected length ", out.shape[depth],
                " at dimension ", depth, ", got ", n);
  }
  for (nb::handle child : seq) read_nested(child, depth + 1, out);
}

Tensor tensor_from(nb::handle data, std::optional<DType> dtype, bool requires_grad) {
  Tensor out;
  Tensor given;
  if (nb::try_cast<Tensor>(data, given)) {
    out = given.detach().clone();
  } else if (nb::hasattr(data, "__dlpack__") || nb::hasattr(data, "__array_interface__") ||
             (PyObject_CheckBuffer(data.ptr()) && !PyBytes_Check(data.ptr()))) {
    nb::ndarray<nb::ro> array;
    if (!nb::try_cast<nb::ndarray<nb::ro>>(data, array)) array_from(data, "tensor");
    out = import_array(nb::ndarray<>(array), "tensor").clone();
  } else {
    Nested nested;
    read_nested(data, 0, nested);
    const DType inferred = nested.any_float ? kFloat32 : (nested.all_bool && !nested.ints.empty()) ? kBool : kInt64;
    out = nested.any_float ? from_vector(nested.floats, nested.shape).to(kFloat32)
                           : from_vector(nested.ints, nested.shape).to(inferred);
    if (nested.ints.empty() && !nested.any_float) out = out.to(kFloat32);  // ember.tensor([]) is float32
  }
  if (dtype) out = out.to(*dtype);
  if (requires_grad) out.requires_grad_(true);
  return out;
}

}  // namespace

void bind_interop(nb::module_& m, nb::class_<Tensor>& tensor) {
  tensor.def(
      "numpy",
      [](const Tensor& t) {
        EMBER_CHECK(!t.requires_grad(), "[numpy] the tensor requires grad; call detach().numpy() (as in PyTorch)");
        return export_array<nb::numpy>(t, "numpy");
      },
      nb::rv_policy::reference, "A NumPy array sharing this tensor's memory.");
  tensor.def(
      "__array__",
      [](const Tensor& t, nb::handle dtype, nb::handle copy) {
        nb::object array = nb::cast(export_array<nb::numpy>(t.detach(), "__array__"), nb::rv_policy::reference);
        if (!dtype.is_none()) array = array.attr("astype")(dtype);
        return array;
      },
      "dtype"_a = nb::none(), "copy"_a = nb::none());
  tensor.def(
      "__dlpack__",
      [](const Tensor& t, nb::kwargs kwargs) {
        // nanobind's array object speaks the versioned protocol (max_version, and a writable
        // flag, so NumPy's from_dlpack gives a writable array), and the legacy one.
        nb::object array = nb::cast(export_array<nb::array_api>(t.detach(), "__dlpack__"), nb::rv_policy::reference);
        return array.attr("__dlpack__")(**kwargs);
      },
      "DLPack export (PEP-style protocol): torch.from_dlpack(t) and np.from_dlpack(t) share this memory.");
  tensor.def("__dlpack_device__", [](const Tensor& t) { return nb::make_tuple(1, 0); });  // kDLCPU, device 0

  m.def(
      "from_dlpack", [](nb::handle object) { return import_array(array_from(object, "from_dlpack"), "from_dlpack"); },
      "array"_a, "A tensor sharing the memory of anything with __dlpack__ (PyTorch, NumPy, JAX, ...).");
  m.def(
      "from_numpy", [](nb::handle object) { return import_array(array_from(object, "from_numpy"), "from_numpy"); },
      "array"_a, "A tensor sharing a NumPy array's memory (writes through either are seen by the other).");
  m.def("tensor", &tensor_from, "data"_a, "dtype"_a = nb::none(), "requires_grad"_a = false,
        "A new tensor holding a copy of data (nested sequences of numbers, an array, or a tensor).");
}

}  // namespace ember::python

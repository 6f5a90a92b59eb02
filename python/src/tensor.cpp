// ember.dtype and ember.Tensor: geometry, views, conversions, arithmetic operators (reflected and
// in place), reductions, and the Python protocols (repr, len, bool, float, iteration, hashing).
// Every method that runs a kernel releases the GIL (Note [the GIL] in bindings.h).
#include <sstream>

#include "bindings.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::python {
namespace {

// sort, topk, max(dim) and min(dim) return (values, indices) as PyTorch does: a named tuple.
nb::object values_and_indices(const Tensor& values, const Tensor& indices) {
  static nb::object* type = [] {
    nb::object namedtuple = nb::module_::import_("collections").attr("namedtuple");
    return new nb::object(namedtuple("values_indices", nb::make_tuple("values", "indices")));  // lives forever
  }();
  return (*type)(values, indices);
}

// The nested Python lists of a tensor's values (tolist).
nb::object to_list(const Tensor& t) {
  const Tensor c = t.dim() == 0 ? t.reshape({1}) : t;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<uint8_t> bools;
  {
    const Release release;
    if (c.is_floating_point()) {
      floats = c.to_vector<double>();
    } else if (c.dtype() == kBool) {
      bools = c.to(kUInt8).to_vector<uint8_t>();
    } else {
      ints = c.to_vector<int64_t>();
    }
  }
  auto value = [&](int64_t i) -> nb::object {
    if (!floats.empty()) return nb::float_(floats[i]);
    if (!bools.empty()) return nb::bool_(bools[i] != 0);
    return nb::int_(ints[i]);
  };
  if (t.dim() == 0) return value(0);
  const Shape& shape = t.shape();
  int64_t next = 0;
  auto build = [&](auto&& self, int dim) -> nb::object {
    nb::list out;
    for (int64_t i = 0; i < shape[dim]; ++i) out.append(dim + 1 == shape.size() ? value(next++) : self(self, dim + 1));
    return out;
  };
  return build(build, 0);
}

std::string repr(const Tensor& t) {
  std::ostringstream out;
  out << t;
  return out.str();
}

Axes dims_or_all(const std::optional<Axes>& dims) { return dims.value_or(Axes{}); }

}  // namespace

void bind_dtype(nb::module_& m) {
  nb::enum_<DType> dtype(m, "dtype", "An element type: ember.float32, ember.int64, ...");
#define EMBER_BIND_DTYPE(name, type, str) dtype.value(str, DType::k##name);
  EMBER_DTYPES(EMBER_BIND_DTYPE)
#undef EMBER_BIND_DTYPE
  dtype.value("q8_0", DType::kQ8_0).value("q4_0", DType::kQ4_0).value("q4_1", DType::kQ4_1);
  dtype.def_prop_ro("itemsize", [](DType d) { return is_block_quantized(d) ? 0 : dtype_size(d); })
      .def_prop_ro("is_floating_point", [](DType d) { return is_floating(d); })
      .def("__repr__", [](DType d) { return "ember." + std::string(dtype_name(d)); })
      .def("__str__", [](DType d) { return "ember." + std::string(dtype_name(d)); });
}

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> tensor(m, "Tensor",
                            "An N-d array with autograd: ember::Tensor. Shares its storage with its views, with\n"
                            "NumPy arrays from numpy() and with DLPack consumers.");
  tensor.def(nb::init<const Tensor&>(), "Another handle to the same tensor (the same storage and autograd state).");

  // --- geometry -------------------------------------------------------------------------------
  tensor.def_prop_ro("shape", &Tensor::shape)
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device",
                   [](const Tensor& t) { return t.device().is_cpu() ? std::string("cpu") : std::string("cuda"); })
      .def_prop_ro("ndim", &Tensor::dim)
      .def_prop_ro("itemsize", &Tensor::element_size)
      .def_prop_ro("nbytes", [](const Tensor& t) { return t.numel() * t.element_size(); })
      .def("size", [](const Tensor& t) { return t.shape(); })
      .def("size", &Tensor::size, "dim"_a)
      .def("stride", [](const Tensor& t) { return t.strides(); })
      .def("stride", &Tensor::stride, "dim"_a)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("storage_offset", &Tensor::offset)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__iter__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw nb::type_error("iteration over a 0-d tensor");
             nb::list rows;
             for (int64_t i = 0; i < t.size(0); ++i) rows.append(t.select(0, i));
             return nb::iter(rows);
           })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.impl_ptr().get()); })
      .def("__repr__", &repr)
      .def("__str__", &repr);

  // --- values -----------------------------------------------------------------------------------
  tensor
      .def(
          "item", [](const Tensor& t) { return t.item(); }, nb::call_guard<Release>())
      .def("tolist", &to_list)
      .def(
          "__bool__", [](const Tensor& t) { return t.item().to_bool(); }, nb::call_guard<Release>())
      .def(
          "__float__", [](const Tensor& t) { return t.item().to_double(); }, nb::call_guard<Release>())
      .def(
          "__int__", [](const Tensor& t) { return t.item().to_int(); }, nb::call_guard<Release>())
      .def(
          "__index__",
          [](const Tensor& t) {
            EMBER_CHECK(!t.is_floating_point() && t.dtype() != kBool, "[__index__] only integer tensors can be ",
                        "used as an index, got ", t.dtype());
            return t.item().to_int();
          },
          nb::call_guard<Release>());

  // --- views and copies -----------------------------------------------------------------------
  tensor.def("view", [](const Tensor& t, nb::args shape) { return t.view(shape_from_args(shape, "view")); })
      .def("reshape", [](const Tensor& t, nb::args shape) { return t.reshape(shape_from_args(shape, "reshape")); })
      .def("permute", [](const Tensor& t, nb::args dims) { return t.permute(shape_from_args(dims, "permute")); })
      .def("expand", [](const Tensor& t, nb::args shape) { return t.expand(shape_from_args(shape, "expand")); })
      .def("repeat",
           [](const Tensor& t, nb::args reps) {
             const Shape repeats = shape_from_args(reps, "repeat");
             const Release release;
             return t.repeat(repeats);
           })
      .def("flatten", &Tensor::flatten, "start_dim"_a = 0, "end_dim"_a = -1)
      .def("transpose", &Tensor::transpose, "dim0"_a, "dim1"_a)
      .def("t", &Tensor::t)
      .def_prop_ro("T",
                   [](const Tensor& t) {
                     return t.dim() < 2 ? t : t.permute(Axes([&] {
                       std::vector<int64_t> d(t.dim());
                       for (int i = 0; i < t.dim(); ++i) d[i] = t.dim() - 1 - i;
                       return d;
                     }()));
                   })
      .def("narrow", &Tensor::narrow, "dim"_a, "start"_a, "length"_a)
      .def("select", &Tensor::select, "dim"_a, "index"_a)
      .def("expand_as", &Tensor::expand_as, "other"_a)
      .def(
          "view_as", [](const Tensor& t, const Tensor& o) { return t.view(o.shape()); }, "other"_a)
      .def(
          "reshape_as", [](const Tensor& t, const Tensor& o) { return t.reshape(o.shape()); }, "other"_a)
      .def(
          "squeeze", [](const Tensor& t, std::optional<int64_t> dim) { return dim ? t.squeeze(*dim) : t.squeeze(); },
          "dim"_a = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, "dim"_a)
      .def("as_strided", &Tensor::as_strided, "size"_a, "stride"_a, "storage_offset"_a = nb::none())
      .def("detach", &Tensor::detach)
      .def("contiguous", &Tensor::contiguous, nb::call_guard<Release>())
      .def("clone", &Tensor::clone, nb::call_guard<Release>())
      .def(
          "to", [](const Tensor& t, DType d) { return t.to(d); }, "dtype"_a, nb::call_guard<Release>())
      .def(
          "type_as", [](const Tensor& t, const Tensor& o) { return t.to(o.dtype()); }, nb::call_guard<Release>());
  for (const auto& [name, dtype] : std::initializer_list<std::pair<const char*, DType>>{{"float", kFloat32},
                                                                                        {"double", kFloat64},
                                                                                        {"half", kFloat16},
                                                                                        {"bfloat16", kBFloat16},
                                                                                        {"long", kInt64},
                                                                                        {"int", kInt32},
                                                                                        {"short", kInt16},
                                                                                        {"char", kInt8},
                                                                                        {"byte", kUInt8},
                                                                                        {"bool", kBool}}) {
    tensor.def(
        name, [d = dtype](const Tensor& t) { return t.to(d); }, nb::call_guard<Release>());
  }
  tensor
      .def(
          "copy_",
          [](Tensor& t, const Tensor& src) -> Tensor& {
            const Release release;
            return t.copy_(src);
          },
          "src"_a, nb::rv_policy::none)
      .def(
          "fill_",
          [](Tensor& t, const Scalar& v) -> Tensor& {
            const Release release;
            return t.fill_(v);
          },
          "value"_a, nb::rv_policy::none)
      .def(
          "zero_",
          [](Tensor& t) -> Tensor& {
            const Release release;
            return t.zero_();
          },
          nb::rv_policy::none);

  // --- arithmetic: methods, operators (reflected, in place) -------------------------------------
  // The returned reference of an in-place op is `self`: nanobind finds its existing Python object.
#define EMBER_BIND_BINARY(name, method)                                                                             \
  tensor                                                                                                            \
      .def(                                                                                                         \
          name, [](const Tensor& a, const Tensor& b) { return a.method(b); }, "other"_a, nb::call_guard<Release>()) \
      .def(                                                                                                         \
          name, [](const Tensor& a, const Scalar& b) { return a.method(b); }, "other"_a, nb::call_guard<Release>());
#define EMBER_BIND_METHOD(kind, name, ...) EMBER_BIND_BINARY(#name, name)
  EMBER_BINARY_ARITHMETIC(EMBER_BIND_METHOD)
  EMBER_RELATIONS(EMBER_BIND_METHOD)
#undef EMBER_BIND_METHOD
#define EMBER_BIND_TENSOR_METHOD(kind, name, ...) \
  tensor.def(#name, &Tensor::name, "other"_a, nb::call_guard<Release>());
  EMBER_BINARY_EXTREMA(EMBER_BIND_TENSOR_METHOD)
  EMBER_LOGICAL_BINARY(EMBER_BIND_TENSOR_METHOD)
#undef EMBER_BIND_TENSOR_METHOD
  EMBER_BIND_BINARY("__add__", add)
  EMBER_BIND_BINARY("__sub__", sub)
  EMBER_BIND_BINARY("__mul__", mul)
  EMBER_BIND_BINARY("__truediv__", div)
  EMBER_BIND_BINARY("__pow__", pow)
  EMBER_BIND_BINARY("__eq__", eq)
  EMBER_BIND_BINARY("__ne__", ne)
  EMBER_BIND_BINARY("__lt__", lt)
  EMBER_BIND_BINARY("__le__", le)
  EMBER_BIND_BINARY("__gt__", gt)
  EMBER_BIND_BINARY("__ge__", ge)
#undef EMBER_BIND_BINARY
#define EMBER_BIND_INPLACE(name, method)              \
  tensor                                              \
      .def(                                           \
          name,                                       \
          [](Tensor& a, const Tensor& b) -> Tensor& { \
            const Release release;                    \
            return a.method(b);                       \
          },                                          \
          "other"_a, nb::rv_policy::none)             \
      .def(                                           \
          name,                                       \
          [](Tensor& a, const Scalar& b) -> Tensor& { \
            const Release release;                    \
            return a.method(b);                       \
          },                                          \
          "other"_a, nb::rv_policy::none);
#define EMBER_BIND_INPLACE_METHOD(kind, name, ...) EMBER_BIND_INPLACE(#name "_", name##_)
  EMBER_BINARY_ARITHMETIC(EMBER_BIND_INPLACE_METHOD)
#undef EMBER_BIND_INPLACE_METHOD
#define EMBER_BIND_INPLACE_TENSOR_METHOD(kind, name, ...) \
  tensor.def(                                             \
      #name "_",                                          \
      [](Tensor& a, const Tensor& b) -> Tensor& {         \
        const Release release;                            \
        return a.name##_(b);                              \
      },                                                  \
      "other"_a, nb::rv_policy::none);
  EMBER_BINARY_EXTREMA(EMBER_BIND_INPLACE_TENSOR_METHOD)
#undef EMBER_BIND_INPLACE_TENSOR_METHOD
  EMBER_BIND_INPLACE("__iadd__", add_)
  EMBER_BIND_INPLACE("__isub__", sub_)
  EMBER_BIND_INPLACE("__imul__", mul_)
  EMBER_BIND_INPLACE("__itruediv__", div_)
#undef EMBER_BIND_INPLACE
  tensor
      .def(
          "__radd__", [](const Tensor& a, const Scalar& b) { return a.add(b); }, nb::call_guard<Release>())
      .def(
          "__rmul__", [](const Tensor& a, const Scalar& b) { return a.mul(b); }, nb::call_guard<Release>())
      .def(
          "__rsub__", [](const Tensor& a, const Scalar& b) { return rsub(a, b); }, nb::call_guard<Release>())
      .def(
          "__rtruediv__", [](const Tensor& a, const Scalar& b) { return div(b, a); }, nb::call_guard<Release>())
      .def(
          "__rpow__", [](const Tensor& a, const Scalar& b) { return pow(b, a); }, nb::call_guard<Release>())
      .def("__matmul__", &Tensor::matmul, nb::call_guard<Release>())
      .def("__neg__", &Tensor::neg, nb::call_guard<Release>())
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__abs__", &Tensor::abs, nb::call_guard<Release>())
      .def("__invert__", &Tensor::logical_not, nb::call_guard<Release>())
      .def("__and__", &Tensor::logical_and, nb::call_guard<Release>())
      .def("__or__", &Tensor::logical_or, nb::call_guard<Release>())
      .def("matmul", &Tensor::matmul, nb::call_guard<Release>())
      .def("clamp", &Tensor::clamp, "min"_a = nb::none(), "max"_a = nb::none(), nb::call_guard<Release>())
      .def("clip", &Tensor::clamp, "min"_a = nb::none(), "max"_a = nb::none(), nb::call_guard<Release>())
      .def(
          "clamp_",
          [](Tensor& t, std::optional<Scalar> lo, std::optional<Scalar> hi) -> Tensor& {
            const Release release;
            return t.clamp_(lo, hi);
          },
          "min"_a = nb::none(), "max"_a = nb::none(), nb::rv_policy::none)
      .def("masked_fill", &Tensor::masked_fill, "mask"_a, "value"_a, nb::call_guard<Release>())
      .def(
          "masked_fill_",
          [](Tensor& t, const Tensor& mask, const Scalar& v) -> Tensor& {
            const Release release;
            return t.masked_fill_(mask, v);
          },
          "mask"_a, "value"_a, nb::rv_policy::none)
      .def("gelu", &Tensor::gelu, "approximate"_a = "none", nb::call_guard<Release>());

#define EMBER_BIND_UNARY(kind, name, ...) tensor.def(#name, &Tensor::name, nb::call_guard<Release>());
  EMBER_UNARY_MATH(EMBER_BIND_UNARY)
  EMBER_UNARY_PREDICATES(EMBER_BIND_UNARY)
#undef EMBER_BIND_UNARY
#define EMBER_BIND_UNARY_INPLACE(kind, name, ...) \
  tensor.def(                                     \
      #name "_",                                  \
      [](Tensor& t) -> Tensor& {                  \
        const Release release;                    \
        return t.name##_();                       \
      },                                          \
      nb::rv_policy::none);
  EMBER_UNARY_MATH(EMBER_BIND_UNARY_INPLACE)
#undef EMBER_BIND_UNARY_INPLACE

  // --- reductions -------------------------------------------------------------------------------
  // dim: an int, a sequence of ints, or None for every dimension (as in PyTorch).
#define EMBER_BIND_REDUCTION(kind, name, ...)                                                                    \
  tensor.def(                                                                                                    \
      #name,                                                                                                     \
      [](const Tensor& t, std::optional<Axes> dim, bool keepdim) { return name(t, dims_or_all(dim), keepdim); }, \
      "dim"_a = nb::none(), "keepdim"_a = false, nb::call_guard<Release>());
  EMBER_DIM_REDUCTIONS(EMBER_BIND_REDUCTION)
#undef EMBER_BIND_REDUCTION
  tensor
      .def(
          "var",
          [](const Tensor& t, std::optional<Axes> dim, int64_t correction, bool keepdim) {
            return var(t, dims_or_all(dim), correction, keepdim);
          },
          "dim"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, nb::call_guard<Release>())
      .def(
          "std",
          [](const Tensor& t, std::optional<Axes> dim, int64_t correction, bool keepdim) {
            return ember::std(t, dims_or_all(dim), correction, keepdim);
          },
          "dim"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, nb::call_guard<Release>())
      .def(
          "norm",
          [](const Tensor& t, double p, std::optional<Axes> dim, bool keepdim) {
            return norm(t, p, dims_or_all(dim), keepdim);
          },
          "p"_a = 2.0, "dim"_a = nb::none(), "keepdim"_a = false, nb::call_guard<Release>())
      .def(
          "logsumexp", [](const Tensor& t, const Axes& dim, bool keepdim) { return logsumexp(t, dim, keepdim); },
          "dim"_a, "keepdim"_a = false, nb::call_guard<Release>())
      .def("argmax", &Tensor::argmax, "dim"_a = nb::none(), "keepdim"_a = false, nb::call_guard<Release>())
      .def("argmin", &Tensor::argmin, "dim"_a = nb::none(), "keepdim"_a = false, nb::call_guard<Release>())
      .def("softmax", &Tensor::softmax, "dim"_a, nb::call_guard<Release>())
      .def("log_softmax", &Tensor::log_softmax, "dim"_a, nb::call_guard<Release>())
      .def("cumsum", &Tensor::cumsum, "dim"_a, "dtype"_a = nb::none(), nb::call_guard<Release>())
      .def("tril", &Tensor::tril, "diagonal"_a = 0, nb::call_guard<Release>())
      .def("triu", &Tensor::triu, "diagonal"_a = 0, nb::call_guard<Release>())
      .def(
          "flip", [](const Tensor& t, const Axes& dims) { return t.flip(dims); }, "dims"_a, nb::call_guard<Release>())
      .def("index_select", &Tensor::index_select, "dim"_a, "index"_a, nb::call_guard<Release>())
      .def("gather", &Tensor::gather, "dim"_a, "index"_a, nb::call_guard<Release>())
      .def("argsort", &Tensor::argsort, "dim"_a = -1, "descending"_a = false, "stable"_a = false,
           nb::call_guard<Release>());
  // max() / min(): the whole tensor's; max(dim) / min(dim): (values, indices), as in PyTorch;
  // max(other) / min(other): elementwise.
  for (const bool largest : {true, false}) {
    tensor.def(largest ? "max" : "min", [largest](const Tensor& t) {
      const Release r;
      return largest ? t.max() : t.min();
    });
    tensor.def(
        largest ? "max" : "min",
        [largest](const Tensor& t, int64_t dim, bool keepdim) {
          Tensor values, indices;
          {
            const Release r;
            values = largest ? amax(t, {dim}, keepdim) : amin(t, {dim}, keepdim);
            indices = largest ? t.argmax(dim, keepdim) : t.argmin(dim, keepdim);
          }
          return values_and_indices(values, indices);
        },
        "dim"_a, "keepdim"_a = false);
    tensor.def(
        largest ? "max" : "min",
        [largest](const Tensor& t, const Tensor& other) {
          const Release r;
          return largest ? t.maximum(other) : t.minimum(other);
        },
        "other"_a);
  }
  tensor
      .def(
          "sort",
          [](const Tensor& t, int64_t dim, bool descending, bool stable) {
            ValuesAndIndices out;
            {
              const Release r;
              out = t.sort(dim, descending, stable);
            }
            return values_and_indices(out.values, out.indices);
          },
          "dim"_a = -1, "descending"_a = false, "stable"_a = false)
      .def(
          "topk",
          [](const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
            ValuesAndIndices out;
            {
              const Release r;
              out = t.topk(k, dim, largest, sorted);
            }
            return values_and_indices(out.values, out.indices);
          },
          "k"_a, "dim"_a = -1, "largest"_a = true, "sorted"_a = true);

  bind_indexing(tensor);
  bind_tensor_autograd(tensor);
  bind_interop(m, tensor);
}

}  // namespace ember::python

// Tensor indexing with Python's syntax: ints, slices, None, Ellipsis, and one advanced index (an
// int64 tensor or list, or a bool mask). Basic indexing gives views; an advanced index gathers
// (index_select, so gradients flow). Assignment writes through the view (fill_ or copy_, which
// broadcasts), or through a mask (masked_fill_, or a where() for a tensor value).
#include "bindings.h"
#include "ember/ops.h"

namespace ember::python {
namespace {

struct Index {
  enum class Kind { kInt, kSlice, kNone, kEllipsis, kTensor };
  explicit Index(Kind k, int64_t v = 0) : kind(k), value(v) {}
  Kind kind;
  int64_t value = 0;                   // kInt
  std::optional<int64_t> start, stop;  // kSlice
  int64_t step = 1;
  Tensor tensor;  // kTensor
};

std::optional<int64_t> slice_bound(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return nb::cast<int64_t>(h);
}

Index parse_one(nb::handle item) {
  if (item.is_none()) return Index(Index::Kind::kNone);
  if (item.ptr() == Py_Ellipsis) return Index(Index::Kind::kEllipsis);
  if (PySlice_Check(item.ptr())) {
    Index index(Index::Kind::kSlice);
    index.start = slice_bound(item.attr("start"));
    index.stop = slice_bound(item.attr("stop"));
    const std::optional<int64_t> step = slice_bound(item.attr("step"));
    index.step = step.value_or(1);
    if (index.step <= 0) throw nb::value_error("[index] slice steps must be positive (as in PyTorch)");
    return index;
  }
  if (PyBool_Check(item.ptr())) throw nb::type_error("[index] a Python bool is not an index; use a bool tensor");
  if (PyLong_Check(item.ptr())) return Index(Index::Kind::kInt, nb::cast<int64_t>(item));
  Tensor t;
  if (nb::try_cast<Tensor>(item, t)) {
    if (t.dim() == 0 && !t.is_floating_point() && t.dtype() != kBool)
      return Index(Index::Kind::kInt, t.item<int64_t>());
    Index index(Index::Kind::kTensor);
    index.tensor = t;
    return index;
  }
  if (PySequence_Check(item.ptr()) && !PyUnicode_Check(item.ptr())) {  // [0, 2, 3] or [True, False, ...]
    const nb::sequence seq = nb::borrow<nb::sequence>(item);
    const bool all_bool =
        nb::len(seq) > 0 && std::all_of(seq.begin(), seq.end(), [](nb::handle h) { return PyBool_Check(h.ptr()); });
    if (all_bool) {
      std::vector<uint8_t> mask;
      for (nb::handle h : seq) mask.push_back(h.ptr() == Py_True ? 1 : 0);
      Index index(Index::Kind::kTensor);
      index.tensor = from_vector(mask).to(kBool);
      return index;
    }
    std::vector<int64_t> values;
    if (nb::try_cast<std::vector<int64_t>>(item, values)) {
      Index index(Index::Kind::kTensor);
      index.tensor = from_vector(values);
      return index;
    }
  }
  if (PyIndex_Check(item.ptr())) return Index(Index::Kind::kInt, nb::cast<int64_t>(item));
  const std::string message = std::string("[index] cannot index a tensor with ") + nb::type_name(item.type()).c_str() +
                              ": use ints, slices, None, ..., or int64/bool tensors";
  throw nb::type_error(message.c_str());
}

std::vector<Index> parse(nb::handle key) {
  std::vector<Index> out;
  if (PyTuple_Check(key.ptr())) {
    for (nb::handle item : nb::borrow<nb::tuple>(key)) out.push_back(parse_one(item));
  } else {
    out.push_back(parse_one(key));
  }
  return out;
}

// The positions of a bool mask's true values, in row-major order (an int64 tensor).
Tensor true_positions(const Tensor& mask) {
  const std::vector<uint8_t> values = mask.to(kUInt8).to_vector<uint8_t>();
  std::vector<int64_t> positions;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != 0) positions.push_back(static_cast<int64_t>(i));
  }
  return from_vector(positions);
}

// Applies the indices; `advanced` reports whether the result is a copy (not a view).
Tensor apply(const Tensor& self, const std::vector<Index>& indices, bool* advanced) {
  int consumed = 0, tensors = 0;
  for (const Index& i : indices) {
    if (i.kind == Index::Kind::kInt || i.kind == Index::Kind::kSlice) ++consumed;
    if (i.kind == Index::Kind::kTensor) {
      ++tensors;
      consumed += i.tensor.dtype() == kBool ? i.tensor.dim() : 1;
    }
  }
  if (tensors > 1) throw nb::index_error("[index] at most one tensor (advanced) index is supported");
  const int ellipses = static_cast<int>(
      std::count_if(indices.begin(), indices.end(), [](const Index& i) { return i.kind == Index::Kind::kEllipsis; }));
  if (ellipses > 1) throw nb::index_error("[index] an index can only have a single ellipsis ('...')");
  if (consumed > self.dim()) {
    throw nb::index_error(("[index] too many indices for a tensor of dimension " + std::to_string(self.dim())).c_str());
  }
  *advanced = tensors > 0;
  Tensor out = self;
  int dim = 0;  // the dimension of `out` the next index applies to
  for (const Index& i : indices) {
    switch (i.kind) {
      case Index::Kind::kInt: {
        const int64_t size = out.size(dim);
        if (i.value < -size || i.value >= size) {
          throw nb::index_error(("[index] index " + std::to_string(i.value) + " is out of bounds for dimension " +
                                 std::to_string(dim) + " with size " + std::to_string(size))
                                    .c_str());
        }
        out = out.select(dim, i.value);
        break;
      }
      case Index::Kind::kSlice:
        out = out.slice(dim, i.start, i.stop, i.step);
        ++dim;
        break;
      case Index::Kind::kNone:
        out = out.unsqueeze(dim);
        ++dim;
        break;
      case Index::Kind::kEllipsis:
        dim += self.dim() - consumed;
        break;
      case Index::Kind::kTensor: {
        const Tensor& index = i.tensor;
        if (index.dtype() == kBool) {
          // A mask over dims [dim, dim + mask.dim()): those dims become one, of the true count.
          const int n = index.dim();
          for (int d = 0; d < n; ++d) {
            EMBER_CHECK(index.size(d) == out.size(dim + d), "[index] the mask's shape ", index.shape(),
                        " does not match the indexed shape ", out.shape(), " at dimension ", dim + d);
          }
          Shape merged;
          for (int d = 0; d < dim; ++d) merged.push_back(out.size(d));
          merged.push_back(index.numel());
          for (int d = dim + n; d < out.dim(); ++d) merged.push_back(out.size(d));
          out = out.reshape(merged).index_select(dim, true_positions(index));
        } else {
          EMBER_CHECK(!index.is_floating_point(), "[index] tensors used as indices must be int64 or bool, got ",
                      index.dtype());
          Shape shape;
          for (int d = 0; d < dim; ++d) shape.push_back(out.size(d));
          for (int64_t s : index.shape()) shape.push_back(s);
          for (int d = dim + 1; d < out.dim(); ++d) shape.push_back(out.size(d));
          out = out.index_select(dim, index.to(kInt64).flatten()).reshape(shape);
          dim += index.dim();
          continue;
        }
        ++dim;
        break;
      }
    }
  }
  return out;
}

}  // namespace

void bind_indexing(nb::class_<Tensor>& tensor) {
  tensor.def("__getitem__", [](const Tensor& self, nb::handle key) {
    const std::vector<Index> indices = parse(key);
    bool advanced = false;
    const Release release;
    return apply(self, indices, &advanced);
  });
  tensor.def("__setitem__", [](Tensor& self, nb::handle key, nb::handle value) {
    const std::vector<Index> indices = parse(key);
    Scalar scalar;
    Tensor source;
    const bool is_scalar = scalar_from_python(value, true, scalar) && !nb::try_cast<Tensor>(value, source);
    if (!is_scalar && !nb::try_cast<Tensor>(value, source)) {
      throw nb::type_error("[index] the assigned value must be a tensor or a number");
    }
    const Release release;
    // x[mask] = v, the mask covering the whole tensor: in place through the mask.
    if (indices.size() == 1 && indices[0].kind == Index::Kind::kTensor && indices[0].tensor.dtype() == kBool &&
        indices[0].tensor.shape() == self.shape()) {
      const Tensor& mask = indices[0].tensor;
      if (is_scalar) {
        self.masked_fill_(mask, scalar);
      } else {
        EMBER_CHECK(source.numel() == 1, "[index] assigning through a mask takes a number or a one-element tensor, ",
                    "got shape ", source.shape());
        self.copy_(where(mask, source.reshape({}).to(self.dtype()), self));
      }
      return;
    }
    bool advanced = false;
    Tensor view = apply(self, indices, &advanced);
    EMBER_CHECK(!advanced, "[index] assignment through an int64 index tensor (or a partial mask) is not supported; ",
                "use basic indices (ints, slices, None, ...) or a full-shape bool mask");
    if (is_scalar) {
      view.fill_(scalar);
    } else {
      view.copy_(source);
    }
  });
}

}  // namespace ember::python

// Views: ops that give a new geometry over the input's storage (view, reshape, flatten, permute,
// transpose, t, slice, narrow, select, expand, squeeze, unsqueeze, as_strided) and detach.
//
// Each is a primitive with the kView trait: no kernel runs, but the view passes the dispatch seam
// (dispatch::view) so a tracer sees it, with its attributes (ShapeAttrs, AxesAttrs, SliceAttrs,
// SelectAttrs, AsStridedAttrs). reshape copies (a Copy kernel) when the memory does not allow a view.
// Shape rules as PyTorch (one -1 in a target shape is inferred; view needs compatible strides).
// Cost: none (no work).
// Backward: a view's gradient is the gradient seen through the inverse view (reshape, permute, sum
// over expanded dims), or scattered into zeros for the views that drop elements (slice, select,
// as_strided).
#include <algorithm>
#include <numeric>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {

using detail::make_view;

// --- view geometry -------------------------------------------------------------------------------

namespace {

// Resolves one -1 entry of a requested shape against numel.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape shape = requested;
  int infer = -1;
  Shape known;  // the sizes given
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      EMBER_CHECK(infer < 0, "[", op, "] only one dimension can be inferred (-1) in ", requested);
      infer = d;
    } else {
      EMBER_CHECK(shape[d] >= 0, "[", op, "] invalid size ", shape[d], " in shape ", requested);
      known.push_back(shape[d]);
    }
  }
  // Counted without wrapping around, so that a huge shape never passes for a small one.
  const int64_t known_numel = checked_numel(known, op);
  if (infer >= 0) {
    EMBER_CHECK(known_numel != 0 && numel % known_numel == 0, "[", op, "] shape ", requested,
                " is invalid for input of shape ", from, " (", numel, " elements)");
    shape[infer] = numel / known_numel;
  }
  EMBER_CHECK(checked_numel(shape, op) == numel, "[", op, "] shape ", requested, " is invalid for input of shape ",
              from, " (", numel, " elements)");
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without a copy, if possible (PyTorch's
// computeStride): each group of old dims that merges into new dims must be contiguous in itself.
bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape, Strides* out) {
  const int64_t numel = old_shape.numel();
  Strides strides(new_shape.size());
  if (numel == 0 || old_shape.empty()) {
    *out = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.size() - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = old_shape.size() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = strides;
  return true;
}

// --- autograd helpers for views and copies ---------------------------------------------------------

using autograd::GradMask;
using autograd::Grads;

// Tells observers about view op `kind` and makes `out`, computed from `in`, differentiable:
// `backward(g)` maps out's gradient to in's. The no-grad path builds no closure.
template <class Backward>
Tensor finish_view(OpKind kind, const Attrs& attrs, const Tensor& in, Tensor out, Backward backward) {
  dispatch::view(kind, attrs, in, out);
  if (autograd::needs_grad(in)) {
    autograd::record(kind, attrs, out, {&in},
                     [backward = std::move(backward)](const Tensor& g, GradMask) -> Grads { return {backward(g)}; });
  }
  return out;
}

struct Geometry {
  Shape shape;
  Strides strides;
  int64_t offset;
};

// as_strided's backward, on the storage both views live in: the output gradient lands on the
// storage elements it came from (summed where output elements share one), and the input reads its
// gradient from the same places. Only a small storage window is materialized.
Tensor as_strided_backward(const Tensor& g, const Geometry& in, const Geometry& out) {
  EMBER_CHECK(detail::is_non_overlapping(in.shape, in.strides),
              "[as_strided] backward through an input whose elements ", "share memory (shape ", in.shape, ", strides ",
              in.strides, ") is not supported; call contiguous() ", "before as_strided");
  const auto [in_first, in_end] = storage_extent(in.shape, in.strides, in.offset);
  const auto [out_first, out_end] = storage_extent(out.shape, out.strides, out.offset);
  const int64_t base = std::min(in_first, out_first);
  const int64_t size = std::max(in_end, out_end) - base;
  Tensor storage = autograd::zeros_for({size}, g);
  if (detail::is_non_overlapping(out.shape, out.strides)) {
    storage.as_strided(out.shape, out.strides, out.offset - base).copy_(g);
  } else {
    const Tensor positions = arange(size, kInt64).as_strided(out.shape, out.strides, out.offset - base).reshape({-1});
    storage = scatter_add(storage, 0, positions, g.reshape({-1}));
  }
  return storage.as_strided(in.shape, in.strides, in.offset - base);
}

}  // namespace

// --- views --------------------------------------------------------------------------------------

namespace {

// View op `kind` = reshaping to `target`, whose gradient is reshaped back.
Tensor reshaped_view(const Tensor& x, const Shape& target, const Strides& strides) {
  return finish_view(OpKind::kView, ShapeAttrs{target}, x, make_view(x, target, strides, x.offset()),
                     [from = x.shape()](const Tensor& g) { return g.reshape(from); });
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "view", this->shape());
  Strides strides;
  EMBER_CHECK(view_strides(this->shape(), this->strides(), target, &strides), "[view] cannot view a tensor of shape ",
              this->shape(), " and strides ", this->strides(), " as ", target,
              ": the memory is not contiguous enough; use reshape()");
  return reshaped_view(*this, target, strides);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "reshape", this->shape());
  Strides strides;
  if (view_strides(this->shape(), this->strides(), target, &strides)) return reshaped_view(*this, target, strides);
  // A copy: a new tensor (not a view), filled through a view of it in this tensor's shape. Its
  // autograd node is the view's (the gradient is reshaped back).
  Tensor out = detail::make_empty(target, dtype(), device(), "reshape");
  detail::copy_into(make_view(out, this->shape(), contiguous_strides(this->shape()), 0), *this);
  if (autograd::needs_grad(*this)) {
    autograd::record(OpKind::kView, ShapeAttrs{target}, out, {this},
                     [from = this->shape()](const Tensor& g, GradMask) -> Grads { return {g.reshape(from)}; });
  }
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int s = normalize_axis(start_dim, dim(), "flatten"), e = normalize_axis(end_dim, dim(), "flatten");
  EMBER_CHECK(s <= e, "[flatten] start_dim ", start_dim, " must not come after end_dim ", end_dim);
  Shape shape;
  for (int d = 0; d < s; ++d) shape.push_back(this->shape()[d]);
  int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  for (int d = e + 1; d < dim(); ++d) shape.push_back(this->shape()[d]);
  return reshape(shape);
}

Tensor Tensor::permute(const Axes& dims) const {
  EMBER_CHECK(dims.size() == dim(), "[permute] got ", dims.size(), " dims ", dims, " for a tensor with ", dim(),
              " dimensions");
  Shape shape(dim());
  Strides strides(dim());
  Axes order(dim()), inverse(dim());
  bool seen[kMaxDims] = {};
  for (int i = 0; i < dim(); ++i) {
    const int d = normalize_axis(dims[i], dim(), "permute");
    EMBER_CHECK(!seen[d], "[permute] dimension ", d, " repeats in ", dims);
    seen[d] = true;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
    order[i] = d;
    inverse[d] = i;
  }
  return finish_view(OpKind::kPermute, AxesAttrs{order}, *this, make_view(*this, shape, strides, offset()),
                     [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) {
    normalize_axis(dim0, 0, "transpose");
    normalize_axis(dim1, 0, "transpose");
    return reshaped_view(*this, shape(), strides());
  }
  const int a = normalize_axis(dim0, dim(), "transpose");
  const int b = normalize_axis(dim1, dim(), "transpose");
  Axes order(dim());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::swap(order[a], order[b]);
  return permute(order);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "[t] expects a tensor with at most 2 dimensions, got shape ", shape());
  if (dim() == 2) return transpose(0, 1);
  return reshaped_view(*this, shape(), strides());
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  EMBER_CHECK(this->dim() > 0, "[slice] cannot slice a 0-dim tensor");
  const int d = normalize_axis(dim, this->dim(), "slice");
  EMBER_CHECK(step > 0, "[slice] step must be positive, got ", step);
  const int64_t size = shape()[d];
  auto clamp_index = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  const int64_t s = clamp_index(start.value_or(0));
  const int64_t e = std::max(s, clamp_index(end.value_or(size)));
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape[d] = (e - s + step - 1) / step;
  strides[d] *= step;
  // The gradient of the kept elements, zeros elsewhere.
  return finish_view(OpKind::kSlice, SliceAttrs{d, s, e, step}, *this,
                     make_view(*this, shape, strides, offset() + s * this->strides()[d]),
                     [from = this->shape(), d, s, e, step](const Tensor& g) {
                       Tensor grad = autograd::zeros_for(from, g);
                       grad.slice(d, s, e, step).copy_(g);
                       return grad;
                     });
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  EMBER_CHECK(this->dim() > 0, "[narrow] cannot narrow a 0-dim tensor");
  const int d = normalize_axis(dim, this->dim(), "narrow");
  const int64_t size = shape()[d];
  EMBER_CHECK(start >= -size && start <= size, "[narrow] start ", start, " is out of range for dimension ", d,
              " of size ", size);
  if (start < 0) start += size;
  EMBER_CHECK(length >= 0 && start + length <= size, "[narrow] start ", start, " + length ", length,
              " exceeds dimension ", d, " of size ", size);
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  EMBER_CHECK(this->dim() > 0, "[select] cannot select from a 0-dim tensor");
  const int d = normalize_axis(dim, this->dim(), "select");
  const int64_t size = shape()[d];
  EMBER_CHECK(index >= -size && index < size, "[select] index ", index, " is out of range for dimension ", d,
              " of size ", size);
  if (index < 0) index += size;
  Shape shape = this->shape();
  Strides strides = this->strides();
  shape.erase(d);
  strides.erase(d);
  return finish_view(OpKind::kSelect, SelectAttrs{d, index}, *this,
                     make_view(*this, shape, strides, offset() + index * this->strides()[d]),
                     [from = this->shape(), d, index](const Tensor& g) {
                       Tensor grad = autograd::zeros_for(from, g);
                       grad.select(d, index).copy_(g);
                       return grad;
                     });
}

Tensor Tensor::expand(const Shape& target) const {
  EMBER_CHECK(target.size() >= dim(), "[expand] the target shape ", target, " has fewer dimensions than the tensor's ",
              shape());
  const int nd = target.size();
  Shape shape(nd);
  Strides strides(nd);
  for (int i = 0; i < nd; ++i) {
    const int j = dim() - nd + i;
    if (j < 0) {
      EMBER_CHECK(target[i] >= 0, "[expand] a new leading dimension cannot be ", target[i], " in ", target);
      shape[i] = target[i];
      strides[i] = 0;
      continue;
    }
    const int64_t have = this->shape()[j];
    const int64_t want = target[i] == -1 ? have : target[i];
    EMBER_CHECK(have == want || have == 1, "[expand] cannot expand shape ", this->shape(), " to ", target,
                ": dimension ", i, " has size ", have, " (only size-1 dimensions can expand)");
    shape[i] = want;
    strides[i] = have == want ? this->strides()[j] : 0;
  }
  checked_numel(shape, "expand");  // a view of more elements than a 64-bit count holds is an error
  return finish_view(OpKind::kExpand, ShapeAttrs{shape}, *this, make_view(*this, shape, strides, offset()),
                     [from = this->shape()](const Tensor& g) { return autograd::sum_to(g, from); });
}

Tensor Tensor::squeeze() const {
  Shape shape;
  Strides strides;
  for (int d = 0; d < dim(); ++d) {
    if (this->shape()[d] == 1) continue;
    shape.push_back(this->shape()[d]);
    strides.push_back(this->strides()[d]);
  }
  return reshaped_view(*this, shape, strides);
}

Tensor Tensor::squeeze(int64_t dim) const {
  const int d = normalize_axis(dim, this->dim(), "squeeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  if (this->dim() > 0 && shape[d] == 1) {
    shape.erase(d);
    strides.erase(d);
  }
  return reshaped_view(*this, shape, strides);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const int d = normalize_axis(dim, this->dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  const int64_t stride = d < this->dim() ? this->strides()[d] * this->shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return reshaped_view(*this, shape, strides);
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, std::optional<int64_t> offset) const {
  EMBER_CHECK(shape.size() == strides.size(), "[as_strided] shape ", shape, " and strides ", strides,
              " have different lengths");
  const int64_t start = offset.value_or(this->offset());
  EMBER_CHECK(start >= 0, "[as_strided] negative storage offset ", start);
  for (int d = 0; d < shape.size(); ++d) {
    EMBER_CHECK(shape[d] >= 0, "[as_strided] negative size in shape ", shape);
    EMBER_CHECK(strides[d] >= 0, "[as_strided] negative stride in ", strides);
  }
  const auto [first, end] = checked_storage_extent(shape, strides, start, "as_strided");
  const int64_t capacity = impl().storage->nbytes() / element_size();
  EMBER_CHECK(first == end || end <= capacity, "[as_strided] shape ", shape, " with strides ", strides, " and offset ",
              start, " reaches element ", end - 1, " beyond the storage's ", capacity, " elements");
  return finish_view(
      OpKind::kAsStrided, AsStridedAttrs{shape, strides, start}, *this, make_view(*this, shape, strides, start),
      [in = Geometry{this->shape(), this->strides(), this->offset()},
       geometry = Geometry{shape, strides, start}](const Tensor& g) { return as_strided_backward(g, in, geometry); });
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

}  // namespace ember

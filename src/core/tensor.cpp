// Tensor metadata, views (which share storage) and copies.
// Backward: a view's gradient is the gradient seen through the inverse view (reshape, permute,
// sum over expanded dims), or scattered into zeros for the views that drop elements (slice,
// select, as_strided). Copies pass the gradient through; the engine casts it back to the input's
// dtype. copy_, fill_ and zero_ take part in autograd through autograd::inplace.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "autograd/function.h"
#include "core/allocator.h"
#include "core/block_pool.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "kernels/cpu/kernels.h"

namespace ember {
namespace detail {

Tensor make_empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) EMBER_CHECK(s >= 0, "[empty] negative dimension in shape ", shape);
  auto impl = detail::make_pooled<TensorImpl>();
  impl->storage = allocate_storage(shape.numel() * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = detail::make_pooled<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

namespace {

cpu::Loop flat_loop(int64_t numel, int num_operands) {
  cpu::Loop loop;
  loop.ndim = 1;
  loop.num_operands = num_operands;
  loop.numel = numel;
  loop.sizes[0] = numel;
  for (int k = 0; k < num_operands; ++k) loop.strides[k][0] = 1;
  return loop;
}

cpu::Loop strided_loop(const Shape& shape, std::initializer_list<const Tensor*> tensors) {
  Strides strides[cpu::kMaxOperands];
  const Strides* pointers[cpu::kMaxOperands];
  int k = 0;
  for (const Tensor* t : tensors) {
    strides[k] = broadcast_strides(*t, shape);
    pointers[k] = &strides[k];
    ++k;
  }
  return cpu::make_loop(shape, pointers, k);
}

}  // namespace

cpu::Loop make_loop(const Shape& shape, std::initializer_list<const Tensor*> tensors) {
  // The common case, every operand contiguous with the output's shape, is one flat row: skip the
  // stride analysis (a measurable part of a small op's cost).
  bool flat = true;
  for (const Tensor* t : tensors) flat = flat && t->shape() == shape && t->is_contiguous();
  return flat ? flat_loop(shape.numel(), static_cast<int>(tensors.size())) : strided_loop(shape, tensors);
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Device first = (*tensors.begin())->device();
  for (const Tensor* t : tensors) {
    EMBER_CHECK(t->device() == first, "[", op, "] expected all tensors on the same device, got ", first, " and ",
                t->device());
  }
}

Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  const int nd = shape.size(), td = t.dim();
  Strides strides(nd);
  for (int i = 0; i < nd; ++i) {
    const int j = td - nd + i;
    strides[i] = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
  }
  return strides;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const cpu::Loop loop = make_loop(dst.shape(), {&dst, &src});
  cpu::copy(dst.dtype(), src.dtype(), dst.data_ptr(), src.data_ptr(), loop);
}

}  // namespace detail

using detail::make_view;

int64_t Tensor::size(int64_t dim) const { return shape()[normalize_axis(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[normalize_axis(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (shape()[d] == 0) return true;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::data_ptr() const { return static_cast<char*>(impl().storage->data()) + impl().offset * element_size(); }

Tensor& Tensor::requires_grad_(bool value) {
  EMBER_CHECK(!value || is_floating_point(), "[requires_grad_] only floating-point tensors can require gradients, got ",
              dtype());
  impl().requires_grad = value;
  return *this;
}

Scalar Tensor::item() const {
  EMBER_CHECK(numel() == 1, "[item] a tensor with ", numel(), " elements (shape ", shape(),
              ") cannot be converted to a scalar");
  return dispatch_dtype(dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    return Scalar(*static_cast<const T*>(data_ptr()));
  });
}

Scalar Tensor::at(const Shape& index) const {
  EMBER_CHECK(index.size() == dim(), "[at] index has ", index.size(), " entries, tensor of shape ", shape(), " has ",
              dim(), " dimensions");
  int64_t offset = 0;
  for (int d = 0; d < dim(); ++d) {
    int64_t i = index[d];
    EMBER_CHECK(i >= -shape()[d] && i < shape()[d], "[at] index ", i, " is out of range for dimension ", d, " of size ",
                shape()[d]);
    if (i < 0) i += shape()[d];
    offset += i * strides()[d];
  }
  return dispatch_dtype(dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    return Scalar(static_cast<const T*>(data_ptr())[offset]);
  });
}

// --- view geometry -------------------------------------------------------------------------------

namespace {

// Resolves one -1 entry of a requested shape against numel.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape shape = requested;
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      EMBER_CHECK(infer < 0, "[", op, "] only one dimension can be inferred (-1) in ", requested);
      infer = d;
    } else {
      EMBER_CHECK(shape[d] >= 0, "[", op, "] invalid size ", shape[d], " in shape ", requested);
      known *= shape[d];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, "[", op, "] shape ", requested, " is invalid for input of shape ",
                from, " (", numel, " elements)");
    shape[infer] = numel / known;
  }
  EMBER_CHECK(shape.numel() == numel, "[", op, "] shape ", requested, " is invalid for input of shape ", from, " (",
              numel, " elements)");
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

// Makes `out`, computed from `in`, differentiable: `backward(g)` maps out's gradient to in's.
// Callers test autograd::needs_grad(in) first, so the no-grad path builds no closure.
template <class Backward>
void record_unary(const char* name, const Tensor& in, const Tensor& out, Backward backward) {
  autograd::record(name, out, {&in},
                   [backward = std::move(backward)](const Tensor& g, GradMask) -> Grads { return {backward(g)}; });
}

// A contiguous copy, recording nothing.
Tensor copy_of(const Tensor& t, DType dtype) {
  Tensor out = detail::make_empty(t.shape(), dtype, t.device());
  detail::copy_into(out, t);
  return out;
}

// Do distinct indices of (shape, strides) reach distinct memory? A sufficient test: ordered by
// stride, each dim must step past everything the smaller dims reach. Geometries it rejects may
// still be free of overlap (interleaved layouts); callers treat them as overlapping.
bool is_non_overlapping(const Shape& shape, const Strides& strides) {
  std::vector<int> dims;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t reach = 0;  // the largest offset the dims so far can reach
  for (int d : dims) {
    if (strides[d] <= reach) return false;
    reach += (shape[d] - 1) * strides[d];
  }
  return true;
}

// The storage elements [first, end) a geometry touches (empty for zero elements).
std::pair<int64_t, int64_t> storage_extent(const Shape& shape, const Strides& strides, int64_t offset) {
  int64_t last = offset;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return {offset, offset};
    last += (shape[d] - 1) * strides[d];
  }
  return {offset, last + 1};
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
  EMBER_CHECK(is_non_overlapping(in.shape, in.strides), "[as_strided] backward through an input whose elements ",
              "share memory (shape ", in.shape, ", strides ", in.strides, ") is not supported; call contiguous() ",
              "before as_strided");
  const auto [in_first, in_end] = storage_extent(in.shape, in.strides, in.offset);
  const auto [out_first, out_end] = storage_extent(out.shape, out.strides, out.offset);
  const int64_t base = std::min(in_first, out_first);
  const int64_t size = std::max(in_end, out_end) - base;
  Tensor storage = autograd::zeros_for({size}, g);
  if (is_non_overlapping(out.shape, out.strides)) {
    storage.as_strided(out.shape, out.strides, out.offset - base).copy_(g);
  } else {
    const Tensor positions = arange(size, kInt64).as_strided(out.shape, out.strides, out.offset - base).reshape({-1});
    storage = scatter_add(storage, 0, positions, g.reshape({-1}));
  }
  return storage.as_strided(in.shape, in.strides, in.offset - base);
}

}  // namespace

// --- views --------------------------------------------------------------------------------------

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "view", this->shape());
  Strides strides;
  EMBER_CHECK(view_strides(this->shape(), this->strides(), target, &strides), "[view] cannot view a tensor of shape ",
              this->shape(), " and strides ", this->strides(), " as ", target,
              ": the memory is not contiguous enough; use reshape()");
  Tensor out = make_view(*this, target, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("view", *this, out, [from = this->shape()](const Tensor& g) { return g.reshape(from); });
  }
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape target = infer_shape(shape, numel(), "reshape", this->shape());
  Strides strides;
  Tensor out;
  if (view_strides(this->shape(), this->strides(), target, &strides)) {
    out = make_view(*this, target, strides, offset());
  } else {
    // A copy: a new tensor (not a view), filled through a view of it in this tensor's shape.
    out = detail::make_empty(target, dtype(), device());
    detail::copy_into(make_view(out, this->shape(), contiguous_strides(this->shape()), 0), *this);
  }
  if (autograd::needs_grad(*this)) {
    record_unary("reshape", *this, out, [from = this->shape()](const Tensor& g) { return g.reshape(from); });
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
  Axes inverse(dim());
  bool seen[kMaxDims] = {};
  for (int i = 0; i < dim(); ++i) {
    const int d = normalize_axis(dims[i], dim(), "permute");
    EMBER_CHECK(!seen[d], "[permute] dimension ", d, " repeats in ", dims);
    seen[d] = true;
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_view(*this, shape, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("permute", *this, out, [inverse](const Tensor& g) { return g.permute(inverse); });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Tensor out;
  int a = 0, b = 0;
  if (dim() == 0) {
    normalize_axis(dim0, 0, "transpose");
    normalize_axis(dim1, 0, "transpose");
    out = make_view(*this, shape(), strides(), offset());
  } else {
    a = normalize_axis(dim0, dim(), "transpose");
    b = normalize_axis(dim1, dim(), "transpose");
    Shape shape = this->shape();
    Strides strides = this->strides();
    std::swap(shape[a], shape[b]);
    std::swap(strides[a], strides[b]);
    out = make_view(*this, shape, strides, offset());
  }
  if (autograd::needs_grad(*this)) {
    record_unary("transpose", *this, out, [a, b](const Tensor& g) { return g.dim() == 0 ? g : g.transpose(a, b); });
  }
  return out;
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "[t] expects a tensor with at most 2 dimensions, got shape ", shape());
  if (dim() == 2) return transpose(0, 1);
  Tensor out = make_view(*this, shape(), strides(), offset());
  if (autograd::needs_grad(*this)) record_unary("t", *this, out, [](const Tensor& g) { return g; });
  return out;
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
  Tensor out = make_view(*this, shape, strides, offset() + s * this->strides()[d]);
  if (autograd::needs_grad(*this)) {
    // The gradient of the kept elements, zeros elsewhere.
    record_unary("slice", *this, out, [from = this->shape(), d, s, e, step](const Tensor& g) {
      Tensor grad = autograd::zeros_for(from, g);
      grad.slice(d, s, e, step).copy_(g);
      return grad;
    });
  }
  return out;
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
  Tensor out = make_view(*this, shape, strides, offset() + index * this->strides()[d]);
  if (autograd::needs_grad(*this)) {
    record_unary("select", *this, out, [from = this->shape(), d, index](const Tensor& g) {
      Tensor grad = autograd::zeros_for(from, g);
      grad.select(d, index).copy_(g);
      return grad;
    });
  }
  return out;
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
  Tensor out = make_view(*this, shape, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("expand", *this, out, [from = this->shape()](const Tensor& g) { return autograd::sum_to(g, from); });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  Shape shape;
  Strides strides;
  for (int d = 0; d < dim(); ++d) {
    if (this->shape()[d] == 1) continue;
    shape.push_back(this->shape()[d]);
    strides.push_back(this->strides()[d]);
  }
  Tensor out = make_view(*this, shape, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("squeeze", *this, out, [from = this->shape()](const Tensor& g) { return g.reshape(from); });
  }
  return out;
}

Tensor Tensor::squeeze(int64_t dim) const {
  const int d = normalize_axis(dim, this->dim(), "squeeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  if (this->dim() > 0 && shape[d] == 1) {
    shape.erase(d);
    strides.erase(d);
  }
  Tensor out = make_view(*this, shape, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("squeeze", *this, out, [from = this->shape()](const Tensor& g) { return g.reshape(from); });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const int d = normalize_axis(dim, this->dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides strides = this->strides();
  const int64_t stride = d < this->dim() ? this->strides()[d] * this->shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  Tensor out = make_view(*this, shape, strides, offset());
  if (autograd::needs_grad(*this)) {
    record_unary("unsqueeze", *this, out, [from = this->shape()](const Tensor& g) { return g.reshape(from); });
  }
  return out;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, std::optional<int64_t> offset) const {
  EMBER_CHECK(shape.size() == strides.size(), "[as_strided] shape ", shape, " and strides ", strides,
              " have different lengths");
  const int64_t start = offset.value_or(this->offset());
  EMBER_CHECK(start >= 0, "[as_strided] negative storage offset ", start);
  int64_t last = start;
  for (int d = 0; d < shape.size(); ++d) {
    EMBER_CHECK(shape[d] >= 0, "[as_strided] negative size in shape ", shape);
    EMBER_CHECK(strides[d] >= 0, "[as_strided] negative stride in ", strides);
    if (shape[d] == 0) last = -1;
    if (last >= 0) last += (shape[d] - 1) * strides[d];
  }
  const int64_t capacity = impl().storage->nbytes() / element_size();
  EMBER_CHECK(last < capacity, "[as_strided] shape ", shape, " with strides ", strides, " and offset ", start,
              " reaches element ", last, " beyond the storage's ", capacity, " elements");
  Tensor out = make_view(*this, shape, strides, start);
  if (autograd::needs_grad(*this)) {
    record_unary(
        "as_strided", *this, out,
        [in = Geometry{this->shape(), this->strides(), this->offset()},
         geometry = Geometry{shape, strides, start}](const Tensor& g) { return as_strided_backward(g, in, geometry); });
  }
  return out;
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

// --- copies -------------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = copy_of(*this, dtype());
  if (autograd::needs_grad(*this)) record_unary("clone", *this, out, [](const Tensor& g) { return g; });
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = copy_of(*this, dtype);
  // The engine casts the gradient back to this tensor's dtype.
  if (autograd::needs_grad(*this)) record_unary("to", *this, out, [](const Tensor& g) { return g; });
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_same_device("copy_", {this, &src});
  EMBER_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), "[copy_] source of shape ", src.shape(),
              " cannot be broadcast to the destination's shape ", shape());
  if (autograd::needs_grad(*this, src)) {
    // The old value gets no gradient (it is overwritten); src gets the gradient, summed over the
    // dims it was broadcast along and cast to its dtype by the engine. src is read before *this is
    // written, so sharing memory with it is harmless.
    return autograd::inplace("copy_", *this, [&src](const Tensor& old) {
      Tensor result = detail::make_empty(old.shape(), old.dtype(), old.device());
      detail::copy_into(result, src);
      autograd::record("copy_", result, {&old, &src}, [](const Tensor& g, GradMask needs) -> Grads {
        return {needs[0] ? zeros_like(g) : Tensor(), needs[1] ? g : Tensor()};
      });
      return result;
    });
  }
  // Overlapping source and destination: copy through a temporary.
  const Tensor source = shares_storage(src) ? copy_of(src, src.dtype()) : src;
  detail::copy_into(*this, source);
  bump_version();
  return *this;
}

namespace {

// fill_ and zero_: with autograd, the old value gets a zero gradient (it is overwritten).
Tensor& fill_impl(Tensor& self, const Scalar& value, const char* name) {
  if (autograd::needs_grad(self)) {
    return autograd::inplace(name, self, [&value, name](const Tensor& old) {
      Tensor result = detail::make_empty(old.shape(), old.dtype(), old.device());
      result.fill_(value);
      autograd::record(name, result, {&old}, [](const Tensor& g, GradMask) -> Grads { return {zeros_like(g)}; });
      return result;
    });
  }
  if (self.numel() > 0) {
    const Tensor* target = &self;
    const cpu::Loop loop = detail::make_loop(self.shape(), {target});
    cpu::fill(self.dtype(), self.data_ptr(), value, loop);
  }
  self.bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::fill_(const Scalar& value) { return fill_impl(*this, value, "fill_"); }

Tensor& Tensor::zero_() { return fill_impl(*this, 0, "zero_"); }

}  // namespace ember

// Indexing ops: index_select, gather, scatter_add (out-of-place), one_hot and embedding.
// Shape rules, as PyTorch: index_select replaces dim's size by the number of indices; gather's
// result has the index's shape; scatter_add's has the input's; one_hot appends num_classes;
// embedding gives indices.shape + [D]. Dtype rules: the result keeps the input's dtype (one_hot:
// int64). Index tensors must be int32 or int64 (one_hot: int64 only), as torch 2.x accepts.
// Indices are never wrapped: a negative or too large one throws "[op] index i is out of bounds
// for dimension d with size n", detected by the kernels (Note [index bounds in kernels]).
// scatter_add accumulates float16/bfloat16 in float32 and rounds once, as PyTorch's CPU kernel.
// Cost: bytes = inputs read + output written; scatter_add does one FLOP per index element.
// Backward: index_select, gather and embedding scatter-add the gradient into zeros of the input's
// shape (repeated indices add up); scatter_add passes it through to self and gathers it for src.
// Indices are not differentiable.
#include "kernels/cpu/indexing.h"

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

namespace ember {
namespace {

using autograd::GradMask;
using autograd::Grads;
using autograd::needs_grad;
using autograd::SavedTensor;

// index_select's backward: g's slices along d added into the rows `index` names.
Tensor index_add_into_zeros(const Shape& x_shape, int d, const Tensor& index, const Tensor& g) {
  if (x_shape.empty()) return g.reshape(x_shape);  // a 0-dim input: its one element was selected
  Shape along(g.dim(), int64_t{1});
  along[d] = index.numel();
  return scatter_add(autograd::zeros_for(x_shape, g), d, index.reshape(along).expand(g.shape()), g);
}

void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "[", op,
              "] expected an index of dtype int32 or int64, got ", index.dtype());
}

// A 0-dim tensor as a 1-D tensor of one element (a view); gather and scatter_add treat them alike.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// Index rows of x (any layout) along dim: the shared body of index_select and embedding.
Tensor index_select_impl(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::detail::OpScope scope(op, {&x, &index});
  detail::check_same_device(op, {&x, &index});
  check_index_dtype(op, index);
  EMBER_CHECK(index.dim() <= 1, "[", op, "] index is supposed to be a vector, got shape ", index.shape());
  const int d = normalize_axis(dim, x.dim(), op);
  const int64_t count = index.numel();
  Shape shape = x.shape();
  if (x.dim() == 0) {
    EMBER_CHECK(count == 1, "[", op, "] index to a 0-dim tensor can have only 1 value, got ", count, " values");
  } else {
    shape[d] = count;
  }
  Tensor out = detail::make_empty(shape, x.dtype(), x.device());
  const Tensor src = at_least_1d(x).contiguous();
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= src.shape()[k];
  for (int k = d + 1; k < src.dim(); ++k) inner *= src.shape()[k];
  const int64_t size = src.shape()[d];
  const Tensor flat_index = at_least_1d(index);
  const std::optional<int64_t> bad =
      cpu::index_select(out.data_ptr(), src.data_ptr(), outer, size, inner * x.element_size(), flat_index.data_ptr(),
                        index.dtype(), count, flat_index.strides()[0]);
  EMBER_CHECK(!bad, "[", op, "] index ", *bad, " is out of bounds for dimension ", d, " with size ", size);
  scope.cost([&] { return gather_cost(out, index); });
  return out;
}

// The line geometry of gather/scatter_add over `index`'s shape along dim d. `out` and `data` are
// operands 0 and 1; only their strides are read (their sizes may exceed the index's).
cpu::IndexLines index_lines(const Tensor& out, const Tensor& data, const Tensor& index, int d, int64_t bound) {
  Shape shape = index.shape();
  shape[d] = 1;  // make_loop drops size-1 dims: one loop element per line
  const Strides* strides[3] = {&out.strides(), &data.strides(), &index.strides()};
  cpu::IndexLines g;
  g.lines = cpu::make_loop(shape, strides, 3);
  g.length = index.shape()[d];
  g.dim_strides[0] = out.strides()[d];
  g.dim_strides[1] = data.strides()[d];
  g.dim_strides[2] = index.strides()[d];
  g.bound = bound;
  return g;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = index_select_impl("index_select", x, dim, index);
  if (needs_grad(x)) {
    autograd::record(
        "index_select", out, {&x},
        [x_shape = x.shape(), d = normalize_axis(dim, x.dim(), "index_select"), si = SavedTensor(index)](
            const Tensor& g, GradMask) -> Grads { return {index_add_into_zeros(x_shape, d, si.get(), g)}; });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  profiler::detail::OpScope scope("gather", {&x, &index});
  detail::check_same_device("gather", {&x, &index});
  const int d = normalize_axis(dim, x.dim(), "gather");
  Tensor out = detail::make_empty(index.shape(), x.dtype(), x.device());
  if (index.numel() == 0) return out;  // PyTorch checks neither the dtype nor the shape of an empty index
  check_index_dtype("gather", index);
  const Tensor xs = at_least_1d(x), is = at_least_1d(index), os = at_least_1d(out);
  EMBER_CHECK(xs.dim() == is.dim(),
              "[gather] index tensor must have the same number of dimensions as input tensor, got ", index.shape(),
              " and ", x.shape());
  for (int k = 0; k < is.dim(); ++k) {
    EMBER_CHECK(k == d || is.shape()[k] <= xs.shape()[k], "[gather] size does not match at dimension ", k,
                ": expected index ", index.shape(), " to be no larger than self ", x.shape(), " apart from dimension ",
                d);
  }
  const int64_t size = xs.shape()[d];
  const cpu::IndexLines g = index_lines(os, xs, is, d, size);
  const std::optional<int64_t> bad =
      cpu::gather(x.dtype(), os.data_ptr(), xs.data_ptr(), is.data_ptr(), index.dtype(), g);
  EMBER_CHECK(!bad, "[gather] index ", *bad, " is out of bounds for dimension ", d, " with size ", size);
  scope.cost([&] { return gather_cost(out, index); });
  if (needs_grad(x)) {
    autograd::record("gather", out, {&x},
                     [x_shape = x.shape(), d, si = SavedTensor(index)](const Tensor& grad, GradMask) -> Grads {
                       return {scatter_add(autograd::zeros_for(x_shape, grad), d, si.get(), grad)};
                     });
  }
  return out;
}

namespace {

Tensor scatter_add_forward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_same_device("scatter_add", {&x, &index, &src});
  const int d = normalize_axis(dim, x.dim(), "scatter_add");
  EMBER_CHECK(x.dtype() == src.dtype(), "[scatter_add] expected self and src to have the same dtype, got ", x.dtype(),
              " and ", src.dtype());
  Tensor out = x.clone();
  if (index.numel() == 0) return out;  // PyTorch checks neither the dtype nor the shape of an empty index
  check_index_dtype("scatter_add", index);
  const Tensor os = at_least_1d(out), is = at_least_1d(index), ss = at_least_1d(src);
  EMBER_CHECK(is.dim() == os.dim(),
              "[scatter_add] index tensor must have the same number of dimensions as self tensor, got ", index.shape(),
              " and ", x.shape());
  EMBER_CHECK(is.dim() == ss.dim(),
              "[scatter_add] index tensor must have the same number of dimensions as src tensor, got ", index.shape(),
              " and ", src.shape());
  for (int k = 0; k < is.dim(); ++k) {
    EMBER_CHECK((k == d || is.shape()[k] <= os.shape()[k]) && is.shape()[k] <= ss.shape()[k],
                "[scatter_add] expected index ", index.shape(), " to be no larger than self ", x.shape(),
                " apart from dimension ", d, " and to be no larger than src ", src.shape());
  }
  // float16 and bfloat16 accumulate in float32 and round once at the end, as PyTorch does.
  const bool widen = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  const Tensor target = widen ? os.to(kFloat32) : os;
  const Tensor values = widen ? ss.to(kFloat32) : ss;
  const int64_t size = os.shape()[d];
  const cpu::IndexLines g = index_lines(target, values, is, d, size);
  const std::optional<int64_t> bad =
      cpu::scatter_add(target.dtype(), target.data_ptr(), values.data_ptr(), is.data_ptr(), index.dtype(), g);
  EMBER_CHECK(!bad, "[scatter_add] index ", *bad, " is out of bounds for dimension ", d, " with size ", size);
  if (widen) detail::copy_into(os, target);
  return out;
}

// scatter_add's gradient for src: what each src element was added to, zero for the elements
// outside the index's extent (src may be larger than index).
Tensor scatter_add_src_grad(const Tensor& g, int d, const Tensor& index, const Shape& src_shape) {
  if (index.numel() == 0) return autograd::zeros_for(src_shape, g);
  const Tensor gathered = gather(g, d, index);
  if (gathered.shape() == src_shape) return gathered;
  Tensor grad = autograd::zeros_for(src_shape, g);
  Tensor region = grad;
  for (int k = 0; k < index.dim(); ++k) region = region.narrow(k, 0, index.shape()[k]);
  region.copy_(gathered);
  return grad;
}

}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  profiler::detail::OpScope scope("scatter_add", {&x, &index, &src});
  Tensor out = scatter_add_forward(x, dim, index, src);
  scope.cost([&] { return scatter_add_cost(x, index, src); });
  if (needs_grad(x, src)) {
    autograd::record(
        "scatter_add", out, {&x, &src},
        [d = normalize_axis(dim, x.dim(), "scatter_add"), si = SavedTensor(index), src_shape = src.shape()](
            const Tensor& g, GradMask needs) -> Grads {
          return {needs[0] ? g : Tensor(), needs[1] ? scatter_add_src_grad(g, d, si.get(), src_shape) : Tensor()};
        });
  }
  return out;
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  profiler::detail::OpScope scope("one_hot", {&index});
  EMBER_CHECK(index.dtype() == kInt64, "[one_hot] is only applicable to index tensors of dtype int64, got ",
              index.dtype());
  Shape shape = index.shape();
  if (index.numel() == 0) {
    EMBER_CHECK(num_classes > 0, "[one_hot] can not infer the total number of classes from an empty tensor");
    shape.push_back(num_classes);
    return detail::make_empty(shape, kInt64, index.device());
  }
  const Tensor values = index.contiguous();
  int64_t min = 0, max = 0;
  cpu::min_max(static_cast<const int64_t*>(values.data_ptr()), values.numel(), &min, &max);
  EMBER_CHECK(min >= 0, "[one_hot] class values must be non-negative, got ", min);
  if (num_classes == -1) {
    num_classes = max + 1;
  } else {
    EMBER_CHECK(max < num_classes, "[one_hot] class values must be smaller than num_classes (", num_classes, "), got ",
                max);
  }
  shape.push_back(num_classes);
  Tensor out = detail::make_empty(shape, kInt64, index.device());
  const std::optional<int64_t> bad =
      cpu::one_hot(static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(values.data_ptr()),
                   values.numel(), num_classes);
  EMBER_CHECK(!bad, "[one_hot] class value ", *bad, " is out of range for ", num_classes, " classes");
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  EMBER_CHECK(weight.dim() == 2, "[embedding] 'weight' must be 2-D, got shape ", weight.shape());
  check_index_dtype("embedding", indices);
  Shape shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  Tensor out = index_select_impl("embedding", weight, 0, indices.reshape({-1})).view(shape);
  if (needs_grad(weight)) {
    // Each looked-up row's gradient is added to its weight row (rows looked up twice add up).
    autograd::record("embedding", out, {&weight},
                     [weight_shape = weight.shape(), si = SavedTensor(indices)](const Tensor& g, GradMask) -> Grads {
                       const int64_t count = si.get().numel(), width = weight_shape[1];
                       const Tensor rows = si.get().reshape({count, 1}).expand({count, width});
                       return {scatter_add(autograd::zeros_for(weight_shape, g), 0, rows, g.reshape({count, width}))};
                     });
  }
  return out;
}

}  // namespace ember

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
// Indices are not differentiable. embedding is a composite over index_select with its own node.
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

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
  const Tensor src = at_least_1d(detail::kernel_operand(x));
  dispatch::run(OpKind::kIndexSelect, DimAttrs{d}, {&src, &index}, {&out});
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = index_select_impl("index_select", x, dim, index);
  if (needs_grad(x)) {
    const int d = normalize_axis(dim, x.dim(), "index_select");
    autograd::record(OpKind::kIndexSelect, DimAttrs{d}, out, {&x},
                     [x_shape = x.shape(), d, si = SavedTensor(index)](const Tensor& g, GradMask) -> Grads {
                       return {index_add_into_zeros(x_shape, d, si.get(), g)};
                     });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const int d = normalize_axis(dim, x.dim(), "gather");
  Tensor out = detail::make_empty(index.shape(), x.dtype(), x.device());
  if (index.numel() > 0) {  // PyTorch checks neither the dtype nor the shape of an empty index
    check_index_dtype("gather", index);
    const Tensor xs = at_least_1d(x), is = at_least_1d(index), os = at_least_1d(out);
    EMBER_CHECK(xs.dim() == is.dim(),
                "[gather] index tensor must have the same number of dimensions as input tensor, got ", index.shape(),
                " and ", x.shape());
    for (int k = 0; k < is.dim(); ++k) {
      EMBER_CHECK(k == d || is.shape()[k] <= xs.shape()[k], "[gather] size does not match at dimension ", k,
                  ": expected index ", index.shape(), " to be no larger than self ", x.shape(),
                  " apart from dimension ", d);
    }
    dispatch::run(OpKind::kGather, DimAttrs{d}, {&xs, &is}, {&os});
  }
  if (needs_grad(x)) {
    autograd::record(OpKind::kGather, DimAttrs{d}, out, {&x},
                     [x_shape = x.shape(), d, si = SavedTensor(index)](const Tensor& grad, GradMask) -> Grads {
                       return {scatter_add(autograd::zeros_for(x_shape, grad), d, si.get(), grad)};
                     });
  }
  return out;
}

namespace {

Tensor scatter_add_forward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
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
  dispatch::run(OpKind::kScatterAdd, DimAttrs{d}, {&is, &values}, {&target});
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
  Tensor out = scatter_add_forward(x, dim, index, src);
  if (needs_grad(x, src)) {
    const int d = normalize_axis(dim, x.dim(), "scatter_add");
    autograd::record(
        OpKind::kScatterAdd, DimAttrs{d}, out, {&x, &src},
        [d, si = SavedTensor(index), src_shape = src.shape()](const Tensor& g, GradMask needs) -> Grads {
          return {needs[0] ? g : Tensor(), needs[1] ? scatter_add_src_grad(g, d, si.get(), src_shape) : Tensor()};
        });
  }
  return out;
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  EMBER_CHECK(index.dtype() == kInt64, "[one_hot] is only applicable to index tensors of dtype int64, got ",
              index.dtype());
  Shape shape = index.shape();
  if (index.numel() == 0) {
    EMBER_CHECK(num_classes > 0, "[one_hot] can not infer the total number of classes from an empty tensor");
    shape.push_back(num_classes);
    return detail::make_empty(shape, kInt64, index.device());
  }
  const int64_t min = amin(index).item<int64_t>(), max = amax(index).item<int64_t>();
  EMBER_CHECK(min >= 0, "[one_hot] class values must be non-negative, got ", min);
  if (num_classes == -1) {
    num_classes = max + 1;
  } else {
    EMBER_CHECK(max < num_classes, "[one_hot] class values must be smaller than num_classes (", num_classes, "), got ",
                max);
  }
  shape.push_back(num_classes);
  Tensor out = detail::make_empty(shape, kInt64, index.device());
  const Tensor values = index.contiguous();
  dispatch::run(OpKind::kOneHot, {}, {&values}, {&out});
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  const dispatch::Scope scope(OpKind::kEmbedding, {&weight, &indices});
  EMBER_CHECK(weight.dim() == 2, "[embedding] 'weight' must be 2-D, got shape ", weight.shape());
  check_index_dtype("embedding", indices);
  Shape shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  Tensor out = index_select_impl("embedding", weight, 0, indices.reshape({-1})).view(shape);
  if (needs_grad(weight)) {
    // Each looked-up row's gradient is added to its weight row (rows looked up twice add up).
    autograd::record(OpKind::kEmbedding, {}, out, {&weight},
                     [weight_shape = weight.shape(), si = SavedTensor(indices)](const Tensor& g, GradMask) -> Grads {
                       const int64_t count = si.get().numel(), width = weight_shape[1];
                       const Tensor rows = si.get().reshape({count, 1}).expand({count, width});
                       return {scatter_add(autograd::zeros_for(weight_shape, g), 0, rows, g.reshape({count, width}))};
                     });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// index_select, gather, one_hot: no arithmetic; bytes = the selected elements read and written +
// the indices.
OpCost gather_cost(const KernelCall& c) {
  const Operand &index = c.inputs[1], &out = c.outputs[0];
  return {0.0, 2.0 * cost::nbytes(out) + cost::nbytes(index)};
}
OpCost one_hot_cost(const KernelCall& c) { return {0.0, cost::operand_bytes(c)}; }
// scatter_add: one add per source element; bytes = the source and the indices read, the touched
// output elements read and written.
OpCost scatter_add_cost(const KernelCall& c) {
  const Operand &index = c.inputs[0], &src = c.inputs[1];
  return {cost::as_double(index.numel()), 3.0 * cost::nbytes(src) + cost::nbytes(index)};
}

}  // namespace

void define_indexing_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kIndexSelect, gather_cost);
  table.set_cost(OpKind::kGather, gather_cost);
  table.set_cost(OpKind::kScatterAdd, scatter_add_cost);
  table.set_cost(OpKind::kOneHot, one_hot_cost);
}

}  // namespace ember

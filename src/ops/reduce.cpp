// Reductions (sum, mean, prod, amax, amin, argmax, argmin, var, std, logsumexp, all, any, norm) and
// softmax / log_softmax.
//
// Shape rule: `dims` lists the reduced dims (negative counts from the end, empty means every dim, a
// repeat is an error); they are dropped from the shape, or kept as size 1 with keepdim. argmax and
// argmin take one optional dim (none: the index into the flattened tensor). softmax keeps the shape.
// Dtype rule, as PyTorch: sum and prod give int64 for integer and bool inputs and keep float dtypes;
// amax and amin keep the dtype; argmax and argmin give int64 (no bool input); all and any give bool
// (uint8 for uint8, PyTorch's legacy rule); mean, var, std, norm, softmax and log_softmax need a
// floating input; logsumexp computes integer and bool inputs in float32. float16/bfloat16 are
// computed in float32 and rounded once at the end.
// Zero-size: sum 0, prod 1, mean/var nan, all true, any false, logsumexp -inf; amax, amin, argmax,
// argmin and norm with p = inf, -inf or p < 0 have no identity and reject an empty reduced dim.
//
// The primitives Sum, Prod, Amax, Amin, Argmax, Argmin, All, Any (ReduceAttrs: the reduced dims
// and keepdim), Softmax and LogSoftmax (DimAttrs) and their backward run kernels
// (kernels/cpu/reduce.h); mean, var (two-pass: mean, then the squared deviations), std, logsumexp
// (max-shifted) and norm are composites made of them and elementwise ops.
// Cost: a primitive reduction: one FLOP per input element, bytes = input + output. softmax: 5 FLOPs
// per element (the table's entry), bytes = input + output; its backward 4. Composites cost the sum
// of their parts, e.g. var reads the input twice.
// Backward: each op records its vector-Jacobian product (below the forwards); amax/amin share
// the gradient among tied extremes and prod handles zeros, as PyTorch.
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/reference.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

void check_floating(const char* op, const Tensor& x) {
  EMBER_CHECK(is_floating(x.dtype()), "[", op, "] expects a floating-point input, got ", x.dtype(), " (shape ",
              x.shape(), ")");
}

// Which dims a reduction removes, and the output's shape.
struct ReducePlan {
  bool reduced[kMaxDims] = {};
  Shape out_shape;
  int64_t reduce_size = 1;  // elements per output
  bool keepdim = false;

  // The plan as the primitives' attributes: the reduced dims in order.
  ReduceAttrs attrs(int ndim) const {
    ReduceAttrs a;
    for (int d = 0; d < ndim; ++d) {
      if (reduced[d]) a.dims.push_back(d);
    }
    a.keepdim = keepdim;
    return a;
  }
};

ReducePlan plan(const char* op, const Tensor& x, const Axes& dims, bool keepdim) {
  ReducePlan r;
  r.keepdim = keepdim;
  const int ndim = x.dim();
  if (dims.empty()) {
    for (int d = 0; d < ndim; ++d) r.reduced[d] = true;
  } else {
    bool seen[kMaxDims] = {};  // a 0-dim tensor accepts dim 0 / -1 once, as PyTorch
    for (int64_t dim : dims) {
      const int d = normalize_axis(dim, ndim, op);
      EMBER_CHECK(!seen[d], "[", op, "] dim ", d, " appears more than once in dims ", dims, " (input shape ", x.shape(),
                  ")");
      seen[d] = true;
      if (d < ndim) r.reduced[d] = true;
    }
  }
  for (int d = 0; d < ndim; ++d) {
    if (r.reduced[d]) {
      r.reduce_size *= x.shape()[d];
      if (keepdim) r.out_shape.push_back(1);
    } else {
      r.out_shape.push_back(x.shape()[d]);
    }
  }
  return r;
}

// Rejects a reduction over an empty dim for ops without an identity (max, min, argmax, ...).
void check_nonempty(const char* op, const Tensor& x, const ReducePlan& r, const char* why) {
  if (x.numel() != 0) return;
  for (int d = 0; d < x.dim(); ++d) {
    EMBER_CHECK(!(r.reduced[d] && x.shape()[d] == 0), "[", op, "] cannot reduce over dim ", d,
                " of size 0 (input shape ", x.shape(), "): ", why);
  }
}

// The primitive: one kernel call into a new contiguous output.
Tensor run(OpKind op, const Tensor& x, const ReducePlan& r, DType out_dtype) {
  Tensor out = detail::make_empty(r.out_shape, out_dtype, x.device(), op_name(op));
  dispatch::run(op, r.attrs(x.dim()), {&x}, {&out});
  return out;
}

DType sum_dtype(DType dtype) { return is_floating(dtype) ? dtype : kInt64; }

Tensor sum_or_prod(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = op_name(op);
  return run(op, x, plan(name, x, dims, keepdim), sum_dtype(x.dtype()));
}

Tensor extreme(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = op_name(op);
  const ReducePlan r = plan(name, x, dims, keepdim);
  check_nonempty(name, x, r, "the operation has no identity");
  return run(op, x, r, x.dtype());
}

Tensor arg_extreme(OpKind op, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* name = op_name(op);
  EMBER_CHECK(x.dtype() != kBool, "[", name, "] does not support bool input (shape ", x.shape(), ")");
  if (!dim) {
    // The index into the flattened tensor; keepdim keeps every dim as size 1.
    EMBER_CHECK(x.numel() > 0, "[", name, "] cannot take the ", name, " of an empty tensor (shape ", x.shape(),
                ") without a dim");
    Tensor flat = x.reshape({x.numel()});
    Tensor out = arg_extreme(op, flat, 0, false);
    return keepdim ? out.reshape(Shape(x.dim(), int64_t{1})) : out;
  }
  const ReducePlan r = plan(name, x, {*dim}, keepdim);
  check_nonempty(name, x, r, "the operation has no identity");
  return run(op, x, r, kInt64);
}

Tensor truth(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = op_name(op);
  return run(op, x, plan(name, x, dims, keepdim), x.dtype() == kUInt8 ? kUInt8 : kBool);
}

// Drops the reduced dims from a keepdim result (same elements, same order).
Tensor squeeze_reduced(const Tensor& t, const ReducePlan& r, bool keepdim) {
  return keepdim ? t : t.reshape(r.out_shape);
}

Tensor softmax_impl(OpKind op, const Tensor& x, int64_t dim) {
  const char* name = op_name(op);
  check_floating(name, x);
  const int d = normalize_axis(dim, x.dim(), name);
  if (!dispatch::has_kernel(op, x.device())) {  // the decomposition, recorded as the op's node below
    autograd::NoGradGuard no_grad;
    return op == OpKind::kSoftmax ? reference::softmax(x, d) : reference::log_softmax(x, d);
  }
  const Tensor input = detail::kernel_operand(x);
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device(), op_name(op));
  dispatch::run(op, DimAttrs{d}, {&input}, {&out});
  return out;
}

}  // namespace

// --- autograd -------------------------------------------------------------------------------------
//
// Every backward first brings the output gradient (and the saved output, where used) back to the
// input's rank: the reduced dims restored as size 1 ("kept" shape), then broadcast against the input.

namespace {

using autograd::GradMask;
using autograd::Grads;
using autograd::SavedTensor;

// `t` (a reduction's output) with the reduced dims of an input of `in_shape` restored as size 1.
Tensor keep_reduced(const Tensor& t, const Shape& in_shape, const ReducePlan& r) {
  Shape kept;
  for (int d = 0; d < in_shape.size(); ++d) kept.push_back(r.reduced[d] ? 1 : in_shape[d]);
  return t.reshape(kept);
}

// The gradient of a reduction's output, broadcast back to the input's shape.
Tensor expand_reduced(const Tensor& g, const Shape& in_shape, const ReducePlan& r) {
  return keep_reduced(g, in_shape, r).expand(in_shape);
}

// The reduced dims as an axis list, for reductions in backward (keepdim = true).
Axes reduced_axes(const ReducePlan& r, int ndim) {
  Axes axes;
  for (int d = 0; d < ndim; ++d) {
    if (r.reduced[d]) axes.push_back(d);
  }
  return axes;
}

// Sum over the reduced dims, keeping them (a 0-dim input has none: nothing to sum).
Tensor sum_kept(const Tensor& t, const ReducePlan& r) {
  if (t.dim() == 0) return t;
  return sum(t, reduced_axes(r, t.dim()), /*keepdim=*/true);
}

// amax/amin/inf-norm: the gradient is shared evenly among the elements equal to the extreme
// (`hits`, a bool tensor of the input's shape), as PyTorch.
Tensor share_among(const Tensor& g, const Tensor& hits, const Shape& in_shape, const ReducePlan& r) {
  const Tensor count = sum_kept(hits, r);
  return where(hits, div(keep_reduced(g, in_shape, r), count), 0.0);
}

}  // namespace

Tensor sum(const Tensor& x_arg, const Axes& dims, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kSum, x_arg);
  Tensor out = sum_or_prod(OpKind::kSum, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    const ReducePlan r = plan("sum", x, dims, keepdim);
    autograd::record(
        OpKind::kSum, r.attrs(x.dim()), out, {&x},
        [r, shape = x.shape()](const Tensor& g, GradMask) -> Grads { return {expand_reduced(g, shape, r)}; });
  }
  return out;
}

// prod: d out / d x_i is the product of the other elements. Without zeros that is out / x_i; with
// one zero in a group only the zero's slot gets the product of the rest; with two or more, none.
Tensor prod(const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = sum_or_prod(OpKind::kProd, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kProd, plan("prod", x, dims, keepdim).attrs(x.dim()), out, {&x},
                     [r = plan("prod", x, dims, keepdim), sx = SavedTensor(x), so = SavedTensor(out)](
                         const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       const Tensor grad = keep_reduced(g, in.shape(), r);
                       const Tensor zero = eq(in, 0);
                       if (!any(zero).item<bool>()) return {mul(grad, div(keep_reduced(so.get(), in.shape(), r), in))};
                       const Tensor zeros_in_group = sum_kept(zero, r);
                       const Tensor rest =
                           in.dim() == 0 ? ones_like(in) : prod(where(zero, 1.0, in), reduced_axes(r, in.dim()), true);
                       const Tensor others = where(eq(zeros_in_group, 0), div(rest, where(zero, 1.0, in)),
                                                   where(logical_and(eq(zeros_in_group, 1), zero), rest, 0.0));
                       return {mul(grad, others)};
                     });
  }
  return out;
}

Tensor mean(const Tensor& x_arg, const Axes& dims, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kMean, x_arg);
  check_floating("mean", x);
  const ReducePlan r = plan("mean", x, dims, keepdim);
  const dispatch::Scope scope(OpKind::kMean, {&x}, r.attrs(x.dim()));
  // float16/bfloat16: sum in float32, divide, round once (as PyTorch). An empty reduction is 0/0.
  Tensor total = run(OpKind::kSum, x, r, detail::compute_dtype(x.dtype()));
  total.div_(static_cast<double>(r.reduce_size));
  Tensor out = total.to(x.dtype());
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kMean, r.attrs(x.dim()), out, {&x},
                     [r, shape = x.shape()](const Tensor& g, GradMask) -> Grads {
                       return {div(expand_reduced(g, shape, r), static_cast<double>(r.reduce_size))};
                     });
  }
  return out;
}

namespace {

Tensor extreme_with_grad(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = extreme(op, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record(op, plan(op_name(op), x, dims, keepdim).attrs(x.dim()), out, {&x},
                     [r = plan(op_name(op), x, dims, keepdim), sx = SavedTensor(x), so = SavedTensor(out)](
                         const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       return {share_among(g, eq(in, keep_reduced(so.get(), in.shape(), r)), in.shape(), r)};
                     });
  }
  return out;
}

}  // namespace

Tensor amax(const Tensor& x, const Axes& dims, bool keepdim) {
  return extreme_with_grad(OpKind::kAmax, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Axes& dims, bool keepdim) {
  return extreme_with_grad(OpKind::kAmin, x, dims, keepdim);
}

// Integer results: nothing to differentiate.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(OpKind::kArgmax, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(OpKind::kArgmin, x, dim, keepdim);
}

namespace {

// The composed forwards below run their steps without recording them: the public functions
// record one node each.

Tensor var_forward(const Tensor& x, const ReducePlan& r, const ReducePlan& kept, int64_t correction) {
  // Two passes (mean, then squared deviations from it) stay accurate when |mean| >> std.
  const Tensor input = x.to(detail::compute_dtype(x.dtype()));
  Tensor mean_kept = run(OpKind::kSum, input, kept, input.dtype());
  mean_kept.div_(static_cast<double>(r.reduce_size));
  Tensor squares = input - mean_kept;
  squares.mul_(squares);
  Tensor result = run(OpKind::kSum, squares, r, input.dtype());
  // PyTorch divides by max(n - correction, 0): inf, or nan for 0/0, when nothing is left.
  result.div_(static_cast<double>(std::max<int64_t>(r.reduce_size - correction, 0)));
  return result.to(x.dtype());
}

// d var / dx = 2 (x - mean) / (n - correction), times the incoming gradient `scale` (kept shape).
Tensor var_backward(const Tensor& scale, const Tensor& in, const ReducePlan& r, int64_t correction) {
  const Tensor centered = sub(in, div(sum_kept(in, r), static_cast<double>(r.reduce_size)));
  const double denominator = static_cast<double>(std::max<int64_t>(r.reduce_size - correction, 0));
  return div(mul(centered, scale), denominator * 0.5);
}

}  // namespace

Tensor var(const Tensor& x_arg, const Axes& dims, int64_t correction, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kVar, x_arg);
  check_floating("var", x);
  const ReducePlan r = plan("var", x, dims, keepdim);
  const VarAttrs attrs{r.attrs(x.dim()).dims, keepdim, correction};
  const dispatch::Scope scope(OpKind::kVar, {&x}, attrs);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = var_forward(x, r, plan("var", x, dims, true), correction);
  }
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kVar, attrs, out, {&x},
                     [r, correction, sx = SavedTensor(x)](const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       return {var_backward(keep_reduced(g, in.shape(), r), in, r, correction)};
                     });
  }
  return out;
}

// std = sqrt(var): d std = d var / (2 std), taken as 0 where std is 0, as PyTorch.
Tensor std(const Tensor& x_arg, const Axes& dims, int64_t correction, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kStd, x_arg);
  check_floating("std", x);
  const ReducePlan r = plan("std", x, dims, keepdim);
  const VarAttrs attrs{r.attrs(x.dim()).dims, keepdim, correction};
  const dispatch::Scope scope(OpKind::kStd, {&x}, attrs);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    const Tensor variance =
        var_forward(x.to(detail::compute_dtype(x.dtype())), r, plan("std", x, dims, true), correction);
    out = sqrt(variance).to(x.dtype());
  }
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kStd, attrs, out, {&x},
                     [r, correction, sx = SavedTensor(x), so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       const Tensor result = keep_reduced(so.get(), in.shape(), r);
                       const Tensor scale =
                           where(eq(result, 0), 0.0, div(keep_reduced(g, in.shape(), r), mul(result, 2)));
                       return {var_backward(scale, in, r, correction)};
                     });
  }
  return out;
}

// d logsumexp / dx = exp(x - logsumexp) (the softmax over the reduced dims).
Tensor logsumexp(const Tensor& x_arg, const Axes& dims, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kLogSumExp, x_arg);
  const ReducePlan r = plan("logsumexp", x, dims, keepdim);
  const dispatch::Scope scope(OpKind::kLogSumExp, {&x}, r.attrs(x.dim()));
  const DType result_dtype = is_floating(x.dtype()) ? x.dtype() : kFloat32;
  Tensor out;
  if (r.reduce_size == 0) {
    // log(0): -inf, still attached to the graph (its gradient is empty, like the input).
    out = full(r.out_shape, -std::numeric_limits<double>::infinity(), result_dtype);
  } else {
    autograd::NoGradGuard no_grad;
    const Tensor input = x.to(detail::compute_dtype(result_dtype));
    // log(sum(exp(x - m))) + m with m the max, replaced by 0 where it is infinite: a row of -inf
    // gives log(0) = -inf, a row holding +inf gives +inf, and nan propagates through m.
    const ReducePlan kept = plan("logsumexp", x, dims, true);
    Tensor m = run(OpKind::kAmax, input, kept, input.dtype());
    m = masked_fill(m, isinf(m), 0);
    Tensor shifted = input - m;
    const Tensor total = run(OpKind::kSum, shifted.exp_(), r, input.dtype());
    out = (log(total) + squeeze_reduced(m, r, keepdim)).to(result_dtype);
  }
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kLogSumExp, r.attrs(x.dim()), out, {&x},
                     [r, sx = SavedTensor(x), so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       const Tensor weights = exp(sub(in, keep_reduced(so.get(), in.shape(), r)));
                       return {mul(keep_reduced(g, in.shape(), r), weights)};
                     });
  }
  return out;
}

Tensor all(const Tensor& x, const Axes& dims, bool keepdim) { return truth(OpKind::kAll, x, dims, keepdim); }
Tensor any(const Tensor& x, const Axes& dims, bool keepdim) { return truth(OpKind::kAny, x, dims, keepdim); }

namespace {

Tensor norm_forward(const Tensor& x, double p, const ReducePlan& r) {
  const Tensor input = x.to(detail::compute_dtype(x.dtype()));
  const DType dtype = input.dtype();
  Tensor result;
  if (p == 2) {
    result = sqrt(run(OpKind::kSum, square(input), r, dtype));
  } else if (p == 1) {
    result = run(OpKind::kSum, abs(input), r, dtype);
  } else if (std::isinf(p)) {
    result = run(p > 0 ? OpKind::kAmax : OpKind::kAmin, abs(input), r, dtype);
  } else if (p == 0) {
    result = run(OpKind::kSum, ne(input, 0), r, kInt64).to(dtype);  // the count of nonzero elements
  } else {
    result = pow(run(OpKind::kSum, pow(abs(input), p), r, dtype), 1.0 / p);
  }
  return result.to(x.dtype());
}

// The p-norm's gradient, as PyTorch: d ||x|| / dx_i = sign(x_i) |x_i|^(p-1) / ||x||^(p-1), with the
// subgradient 0 where the norm is 0; p = inf shares the gradient among the elements of largest
// magnitude; the count of nonzeros (p = 0) is piecewise constant.
Tensor norm_backward(const Tensor& g, const Tensor& in, const Tensor& out, double p, const ReducePlan& r) {
  const Tensor grad = keep_reduced(g, in.shape(), r);
  const Tensor norm = keep_reduced(out, in.shape(), r);
  if (p == 0) return zeros_like(in);
  if (p == 1) return mul(grad, sign(in));
  if (p == 2) return mul(in, where(eq(norm, 0), 0.0, div(grad, norm)));
  if (std::isinf(p)) {
    const Tensor magnitude = abs(in);
    const Tensor hits = logical_or(eq(magnitude, norm), isnan(magnitude));
    return mul(sign(in), share_among(g, hits, in.shape(), r));
  }
  if (p < 1) {  // |x|^(p-1) is infinite at 0; PyTorch takes the subgradient 0 there
    const Tensor scaled = mul(sign(in), where(eq(in, 0), 0.0, pow(abs(in), p - 1)));
    return mul(scaled, mul(grad, pow(norm, 1 - p)));
  }
  const Tensor scale = where(eq(norm, 0), 0.0, div(grad, pow(norm, p - 1)));
  const Tensor scaled = p < 2 ? mul(sign(in), pow(abs(in), p - 1)) : mul(in, pow(abs(in), p - 2));
  return mul(scaled, scale);
}

}  // namespace

Tensor norm(const Tensor& x_arg, double p, const Axes& dims, bool keepdim) {
  const Tensor x = amp::cast(OpKind::kNorm, x_arg);
  check_floating("norm", x);
  EMBER_CHECK(!std::isnan(p), "[norm] p must be a number, got nan");
  const ReducePlan r = plan("norm", x, dims, keepdim);
  const NormAttrs attrs{p, r.attrs(x.dim()).dims, keepdim};
  const dispatch::Scope scope(OpKind::kNorm, {&x}, attrs);
  if (p < 0 || std::isinf(p)) check_nonempty("norm", x, r, "a norm with p = inf, -inf or p < 0 has no identity");
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = norm_forward(x, p, r);
  }
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kNorm, attrs, out, {&x},
                     [r, p, sx = SavedTensor(x), so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       return {norm_backward(g, sx.get(), so.get(), p, r)};
                     });
  }
  return out;
}

namespace {

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g), both over dim. Over the last
// dim of float32/float64 one fused kernel pass per row; otherwise the same formulas in ember ops.
Tensor softmax_backward(OpKind op, const Tensor& g, const Tensor& y, int64_t dim) {
  const int d = normalize_axis(dim, y.dim(), op_name(op));
  const bool last_dim = y.dim() == 0 || d == y.dim() - 1;
  const bool kernel_dtype = y.dtype() == kFloat32 || y.dtype() == kFloat64;
  const OpKind fused = op == OpKind::kSoftmax ? OpKind::kSoftmaxGrad : OpKind::kLogSoftmaxGrad;
  if (last_dim && kernel_dtype && g.dtype() == y.dtype() && g.shape() == y.shape() &&
      dispatch::has_kernel(fused, y.device())) {
    const Tensor grad = g.contiguous(), out = y.contiguous();
    Tensor dx = detail::make_empty(y.shape(), y.dtype(), y.device());
    dispatch::run(fused, DimAttrs{d}, {&grad, &out}, {&dx});
    return dx;
  }
  if (op == OpKind::kSoftmax) return mul(y, sub(g, sum(mul(g, y), {dim}, true)));
  return sub(g, mul(exp(y), sum(g, {dim}, true)));
}

}  // namespace

Tensor softmax(const Tensor& x_arg, int64_t dim) {
  const Tensor x = amp::cast(OpKind::kSoftmax, x_arg);
  Tensor out = softmax_impl(OpKind::kSoftmax, x, dim);
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kSoftmax, DimAttrs{normalize_axis(dim, x.dim(), "softmax")}, out, {&x},
                     [dim, so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       return {softmax_backward(OpKind::kSoftmax, g, so.get(), dim)};
                     });
  }
  return out;
}
Tensor log_softmax(const Tensor& x_arg, int64_t dim) {
  const Tensor x = amp::cast(OpKind::kLogSoftmax, x_arg);
  Tensor out = softmax_impl(OpKind::kLogSoftmax, x, dim);
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kLogSoftmax, DimAttrs{normalize_axis(dim, x.dim(), "log_softmax")}, out, {&x},
                     [dim, so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       return {softmax_backward(OpKind::kLogSoftmax, g, so.get(), dim)};
                     });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// A reduction: one FLOP per input element; bytes = input + output.
OpCost reduction_cost(const KernelCall& c) { return {cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)}; }

// softmax and its backward: the table's FLOPs per element; bytes = every operand.
OpCost softmax_cost(const KernelCall& c) {
  return {static_cast<double>(op_info(c.kind).flops_per_element) * cost::as_double(c.outputs[0].numel()),
          cost::operand_bytes(c)};
}

}  // namespace

void define_reduce_ops(OpRuleTable& table) {
  for (OpKind kind : {OpKind::kSum, OpKind::kProd, OpKind::kAmax, OpKind::kAmin, OpKind::kArgmax, OpKind::kArgmin,
                      OpKind::kAll, OpKind::kAny}) {
    table.set_cost(kind, reduction_cost);
  }
  for (OpKind kind : {OpKind::kSoftmax, OpKind::kLogSoftmax, OpKind::kSoftmaxGrad, OpKind::kLogSoftmaxGrad}) {
    table.set_cost(kind, softmax_cost);
  }
}

// --- reference decompositions (ops/reference.h) ------------------------------------------------------

namespace reference {

// The max is taken where it is finite (a row of -inf gives nan, as the kernel's rule says).
Tensor softmax(const Tensor& x, int64_t dim) {
  const Tensor shifted = x - amax(x, {dim}, true);
  const Tensor e = exp(shifted);
  return e / sum(e, {dim}, true);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  const Tensor shifted = x - amax(x, {dim}, true);
  return shifted - log(sum(exp(shifted), {dim}, true));
}

}  // namespace reference
}  // namespace ember

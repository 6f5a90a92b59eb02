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
// The primitives Sum, Prod, Amax, Amin, Argmax, Argmin, All, Any, Softmax and LogSoftmax run CPU
// kernels (kernels/cpu/reduce.h); mean, var (two-pass: mean, then the squared deviations), std,
// logsumexp (max-shifted) and norm are composed from them and elementwise ops.
// Cost: a primitive reduction is reduction_cost(in, out): one FLOP per input element, bytes = input
// + output. softmax: 5 FLOPs per element (the table's entry), bytes = 2 x input. Composed ops cost
// the sum of their parts, e.g. var reads the input twice.
// Backward: each op records its vector-Jacobian product (below the forwards); amax/amin share
// the gradient among tied extremes and prod handles zeros, as PyTorch.
#include "kernels/cpu/reduce.h"

#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/primitives.h"
#include "profiler/op_scope.h"

namespace ember {
namespace {

const char* name_of(OpKind op) { return op_info(op).name.data(); }

void check_cpu(const char* op, const Tensor& x) {
  EMBER_CHECK(x.device().is_cpu(), "[", op, "] not implemented on ", x.device());
}

void check_floating(const char* op, const Tensor& x) {
  EMBER_CHECK(is_floating(x.dtype()), "[", op, "] expects a floating-point input, got ", x.dtype(), " (shape ",
              x.shape(), ")");
}

// Which dims a reduction removes, and the output's shape.
struct ReducePlan {
  bool reduced[kMaxDims] = {};
  Shape out_shape;
  int64_t reduce_size = 1;  // elements per output
};

ReducePlan plan(const char* op, const Tensor& x, const Axes& dims, bool keepdim) {
  ReducePlan r;
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
  profiler::detail::OpScope scope(name_of(op), {&x});
  Tensor out = detail::make_empty(r.out_shape, out_dtype, x.device());
  if (out.numel() == 0) return out;
  const cpu::ReduceLayout layout = cpu::make_reduce_layout(x.shape(), x.strides(), r.reduced);
  cpu::reduce(op, x.dtype(), out_dtype, out.data_ptr(), x.data_ptr(), layout);
  scope.cost([&] { return reduction_cost(x, out); });
  return out;
}

DType sum_dtype(DType dtype) { return is_floating(dtype) ? dtype : kInt64; }
bool is_half(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }
// The dtype composed float ops compute in.
DType compute_dtype(DType dtype) { return is_half(dtype) ? kFloat32 : dtype; }

Tensor sum_or_prod(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = name_of(op);
  check_cpu(name, x);
  return run(op, x, plan(name, x, dims, keepdim), sum_dtype(x.dtype()));
}

Tensor extreme(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = name_of(op);
  check_cpu(name, x);
  const ReducePlan r = plan(name, x, dims, keepdim);
  check_nonempty(name, x, r, "the operation has no identity");
  return run(op, x, r, x.dtype());
}

Tensor arg_extreme(OpKind op, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* name = name_of(op);
  check_cpu(name, x);
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
  const char* name = name_of(op);
  check_cpu(name, x);
  return run(op, x, plan(name, x, dims, keepdim), x.dtype() == kUInt8 ? kUInt8 : kBool);
}

// Drops the reduced dims from a keepdim result (same elements, same order).
Tensor squeeze_reduced(const Tensor& t, const ReducePlan& r, bool keepdim) {
  return keepdim ? t : t.reshape(r.out_shape);
}

Tensor softmax_impl(OpKind op, const Tensor& x, int64_t dim) {
  profiler::detail::OpScope scope(name_of(op), {&x});
  const char* name = name_of(op);
  check_cpu(name, x);
  check_floating(name, x);
  const int d = normalize_axis(dim, x.dim(), name);
  int64_t outer = 1, inner = 1;
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  for (int i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= x.shape()[i];
    if (i > d) inner *= x.shape()[i];
  }
  const Tensor input = x.contiguous();
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  cpu::softmax(op, x.dtype(), out.data_ptr(), input.data_ptr(), outer, size, inner);
  scope.cost([&] { return softmax_cost(op, x); });
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

Tensor sum(const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = sum_or_prod(OpKind::kSum, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record("sum", out, {&x},
                     [r = plan("sum", x, dims, keepdim), shape = x.shape()](const Tensor& g, GradMask) -> Grads {
                       return {expand_reduced(g, shape, r)};
                     });
  }
  return out;
}

// prod: d out / d x_i is the product of the other elements. Without zeros that is out / x_i; with
// one zero in a group only the zero's slot gets the product of the rest; with two or more, none.
Tensor prod(const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = sum_or_prod(OpKind::kProd, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record("prod", out, {&x},
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

Tensor mean(const Tensor& x, const Axes& dims, bool keepdim) {
  profiler::detail::OpScope scope("mean", {&x});  // composite: its sum and div record their costs
  check_cpu("mean", x);
  check_floating("mean", x);
  const ReducePlan r = plan("mean", x, dims, keepdim);
  // float16/bfloat16: sum in float32, divide, round once (as PyTorch). An empty reduction is 0/0.
  Tensor total = run(OpKind::kSum, x, r, compute_dtype(x.dtype()));
  total.div_(static_cast<double>(r.reduce_size));
  Tensor out = total.to(x.dtype());
  if (autograd::needs_grad(x)) {
    autograd::record("mean", out, {&x}, [r, shape = x.shape()](const Tensor& g, GradMask) -> Grads {
      return {div(expand_reduced(g, shape, r), static_cast<double>(r.reduce_size))};
    });
  }
  return out;
}

namespace {

Tensor extreme_with_grad(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = extreme(op, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record(name_of(op), out, {&x},
                     [r = plan(name_of(op), x, dims, keepdim), sx = SavedTensor(x), so = SavedTensor(out)](
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
  const Tensor input = x.to(compute_dtype(x.dtype()));
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

Tensor var(const Tensor& x, const Axes& dims, int64_t correction, bool keepdim) {
  profiler::detail::OpScope scope("var", {&x});  // composite: its ops record their costs
  check_cpu("var", x);
  check_floating("var", x);
  const ReducePlan r = plan("var", x, dims, keepdim);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = var_forward(x, r, plan("var", x, dims, true), correction);
  }
  if (autograd::needs_grad(x)) {
    autograd::record("var", out, {&x}, [r, correction, sx = SavedTensor(x)](const Tensor& g, GradMask) -> Grads {
      const Tensor in = sx.get();
      return {var_backward(keep_reduced(g, in.shape(), r), in, r, correction)};
    });
  }
  return out;
}

// std = sqrt(var): d std = d var / (2 std), taken as 0 where std is 0, as PyTorch.
Tensor std(const Tensor& x, const Axes& dims, int64_t correction, bool keepdim) {
  profiler::detail::OpScope scope("std", {&x});  // composite: its ops record their costs
  check_cpu("std", x);
  check_floating("std", x);
  const ReducePlan r = plan("std", x, dims, keepdim);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    const Tensor variance = var_forward(x.to(compute_dtype(x.dtype())), r, plan("std", x, dims, true), correction);
    out = sqrt(variance).to(x.dtype());
  }
  if (autograd::needs_grad(x)) {
    autograd::record("std", out, {&x},
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
Tensor logsumexp(const Tensor& x, const Axes& dims, bool keepdim) {
  profiler::detail::OpScope scope("logsumexp", {&x});  // composite: its ops record their costs
  check_cpu("logsumexp", x);
  const ReducePlan r = plan("logsumexp", x, dims, keepdim);
  const DType result_dtype = is_floating(x.dtype()) ? x.dtype() : kFloat32;
  if (r.reduce_size == 0) return full(r.out_shape, -std::numeric_limits<double>::infinity(), result_dtype);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    const Tensor input = x.to(compute_dtype(result_dtype));
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
    autograd::record("logsumexp", out, {&x},
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
  const Tensor input = x.to(compute_dtype(x.dtype()));
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

Tensor norm(const Tensor& x, double p, const Axes& dims, bool keepdim) {
  profiler::detail::OpScope scope("norm", {&x});  // composite: its ops record their costs
  check_cpu("norm", x);
  check_floating("norm", x);
  EMBER_CHECK(!std::isnan(p), "[norm] p must be a number, got nan");
  const ReducePlan r = plan("norm", x, dims, keepdim);
  if (p < 0 || std::isinf(p)) check_nonempty("norm", x, r, "a norm with p = inf, -inf or p < 0 has no identity");
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = norm_forward(x, p, r);
  }
  if (autograd::needs_grad(x)) {
    autograd::record("norm", out, {&x},
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
  const bool last_dim = y.dim() == 0 || normalize_axis(dim, y.dim(), name_of(op)) == y.dim() - 1;
  const bool kernel_dtype = y.dtype() == kFloat32 || y.dtype() == kFloat64;
  if (last_dim && kernel_dtype && g.dtype() == y.dtype() && g.shape() == y.shape() && y.device().is_cpu()) {
    const Tensor grad = g.contiguous(), out = y.contiguous();
    Tensor dx = detail::make_empty(y.shape(), y.dtype(), y.device());
    const int64_t n = y.dim() == 0 ? 1 : y.shape()[y.dim() - 1];
    if (dx.numel() > 0)
      cpu::softmax_backward(op, y.dtype(), dx.data_ptr(), grad.data_ptr(), out.data_ptr(), dx.numel() / n, n);
    return dx;
  }
  if (op == OpKind::kSoftmax) return mul(y, sub(g, sum(mul(g, y), {dim}, true)));
  return sub(g, mul(exp(y), sum(g, {dim}, true)));
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor out = softmax_impl(OpKind::kSoftmax, x, dim);
  if (autograd::needs_grad(x)) {
    autograd::record("softmax", out, {&x}, [dim, so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
      return {softmax_backward(OpKind::kSoftmax, g, so.get(), dim)};
    });
  }
  return out;
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor out = softmax_impl(OpKind::kLogSoftmax, x, dim);
  if (autograd::needs_grad(x)) {
    autograd::record("log_softmax", out, {&x}, [dim, so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
      return {softmax_backward(OpKind::kLogSoftmax, g, so.get(), dim)};
    });
  }
  return out;
}

}  // namespace ember

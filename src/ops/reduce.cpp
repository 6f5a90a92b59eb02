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
// Backward: added with autograd.
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "kernels/cpu/reduce.h"
#include "ops/primitives.h"

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
struct Reduction {
  bool reduced[kMaxDims] = {};
  Shape out_shape;
  int64_t reduce_size = 1;  // elements per output
};

Reduction plan(const char* op, const Tensor& x, const Axes& dims, bool keepdim) {
  Reduction r;
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
void check_nonempty(const char* op, const Tensor& x, const Reduction& r, const char* why) {
  if (x.numel() != 0) return;
  for (int d = 0; d < x.dim(); ++d) {
    EMBER_CHECK(!(r.reduced[d] && x.shape()[d] == 0), "[", op, "] cannot reduce over dim ", d, " of size 0 (input shape ",
                x.shape(), "): ", why);
  }
}

// The primitive: one kernel call into a new contiguous output.
Tensor run(OpKind op, const Tensor& x, const Reduction& r, DType out_dtype) {
  Tensor out = detail::make_empty(r.out_shape, out_dtype, x.device());
  if (out.numel() == 0) return out;
  const cpu::ReduceLayout layout = cpu::make_reduce_layout(x.shape(), x.strides(), r.reduced);
  cpu::reduce(op, x.dtype(), out_dtype, out.data_ptr(), x.data_ptr(), layout);
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
  const Reduction r = plan(name, x, dims, keepdim);
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
  const Reduction r = plan(name, x, {*dim}, keepdim);
  check_nonempty(name, x, r, "the operation has no identity");
  return run(op, x, r, kInt64);
}

Tensor truth(OpKind op, const Tensor& x, const Axes& dims, bool keepdim) {
  const char* name = name_of(op);
  check_cpu(name, x);
  return run(op, x, plan(name, x, dims, keepdim), x.dtype() == kUInt8 ? kUInt8 : kBool);
}

// Drops the reduced dims from a keepdim result (same elements, same order).
Tensor squeeze_reduced(const Tensor& t, const Reduction& r, bool keepdim) { return keepdim ? t : t.reshape(r.out_shape); }

Tensor softmax_impl(OpKind op, const Tensor& x, int64_t dim) {
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
  return out;
}

}  // namespace

// The gradient of a reduction's output, shaped back like the input: the reduced dims restored as
// size 1 (when keepdim was false), then broadcast.
Tensor expand_reduced(const Tensor& g, const Shape& in_shape, const Reduction& r) {
  Shape kept;
  for (int d = 0; d < in_shape.size(); ++d) kept.push_back(r.reduced[d] ? 1 : in_shape[d]);
  return g.reshape(kept).expand(in_shape);
}

Tensor sum(const Tensor& x, const Axes& dims, bool keepdim) {
  Tensor out = sum_or_prod(OpKind::Sum, x, dims, keepdim);
  if (autograd::needs_grad(x)) {
    autograd::record("sum", out, {&x},
                     [r = plan("sum", x, dims, keepdim), shape = x.shape()](const Tensor& g, autograd::GradMask) {
                       return autograd::Grads{expand_reduced(g, shape, r)};
                     });
  }
  return out;
}

Tensor prod(const Tensor& x, const Axes& dims, bool keepdim) { return sum_or_prod(OpKind::Prod, x, dims, keepdim); }

Tensor mean(const Tensor& x, const Axes& dims, bool keepdim) {
  check_cpu("mean", x);
  check_floating("mean", x);
  const Reduction r = plan("mean", x, dims, keepdim);
  // float16/bfloat16: sum in float32, divide, round once (as PyTorch). An empty reduction is 0/0.
  Tensor total = run(OpKind::Sum, x, r, compute_dtype(x.dtype()));
  total.div_(static_cast<double>(r.reduce_size));
  return total.to(x.dtype());
}

Tensor amax(const Tensor& x, const Axes& dims, bool keepdim) { return extreme(OpKind::Amax, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Axes& dims, bool keepdim) { return extreme(OpKind::Amin, x, dims, keepdim); }

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(OpKind::Argmax, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(OpKind::Argmin, x, dim, keepdim);
}

Tensor var(const Tensor& x, const Axes& dims, int64_t correction, bool keepdim) {
  check_cpu("var", x);
  check_floating("var", x);
  const Reduction r = plan("var", x, dims, keepdim);
  const Reduction kept = plan("var", x, dims, true);
  // Two passes (mean, then squared deviations from it) stay accurate when |mean| >> std.
  const Tensor input = x.to(compute_dtype(x.dtype()));
  Tensor mean_kept = run(OpKind::Sum, input, kept, input.dtype());
  mean_kept.div_(static_cast<double>(r.reduce_size));
  Tensor squares = input - mean_kept;
  squares.mul_(squares);
  Tensor result = run(OpKind::Sum, squares, r, input.dtype());
  // PyTorch divides by max(n - correction, 0): inf, or nan for 0/0, when nothing is left.
  result.div_(static_cast<double>(std::max<int64_t>(r.reduce_size - correction, 0)));
  return result.to(x.dtype());
}

Tensor std(const Tensor& x, const Axes& dims, int64_t correction, bool keepdim) {
  check_cpu("std", x);
  check_floating("std", x);
  const Tensor variance = var(x.to(compute_dtype(x.dtype())), dims, correction, keepdim);
  return sqrt(variance).to(x.dtype());
}

Tensor logsumexp(const Tensor& x, const Axes& dims, bool keepdim) {
  check_cpu("logsumexp", x);
  const Reduction r = plan("logsumexp", x, dims, keepdim);
  const DType result_dtype = is_floating(x.dtype()) ? x.dtype() : kFloat32;
  const Tensor input = x.to(compute_dtype(result_dtype));
  if (r.reduce_size == 0) return full(r.out_shape, -std::numeric_limits<double>::infinity(), result_dtype);
  // log(sum(exp(x - m))) + m with m the max, replaced by 0 where it is infinite: a row of -inf
  // gives log(0) = -inf, a row holding +inf gives +inf, and nan propagates through m.
  const Reduction kept = plan("logsumexp", x, dims, true);
  Tensor m = run(OpKind::Amax, input, kept, input.dtype());
  m = masked_fill(m, isinf(m), 0);
  Tensor shifted = input - m;
  const Tensor total = run(OpKind::Sum, shifted.exp_(), r, input.dtype());
  return (log(total) + squeeze_reduced(m, r, keepdim)).to(result_dtype);
}

Tensor all(const Tensor& x, const Axes& dims, bool keepdim) { return truth(OpKind::All, x, dims, keepdim); }
Tensor any(const Tensor& x, const Axes& dims, bool keepdim) { return truth(OpKind::Any, x, dims, keepdim); }

Tensor norm(const Tensor& x, double p, const Axes& dims, bool keepdim) {
  check_cpu("norm", x);
  check_floating("norm", x);
  EMBER_CHECK(!std::isnan(p), "[norm] p must be a number, got nan");
  const Reduction r = plan("norm", x, dims, keepdim);
  if (p < 0 || std::isinf(p)) check_nonempty("norm", x, r, "a norm with p = inf, -inf or p < 0 has no identity");
  const Tensor input = x.to(compute_dtype(x.dtype()));
  const DType dtype = input.dtype();
  Tensor result;
  if (p == 2) {
    result = sqrt(run(OpKind::Sum, square(input), r, dtype));
  } else if (p == 1) {
    result = run(OpKind::Sum, abs(input), r, dtype);
  } else if (std::isinf(p)) {
    result = run(p > 0 ? OpKind::Amax : OpKind::Amin, abs(input), r, dtype);
  } else if (p == 0) {
    result = run(OpKind::Sum, ne(input, 0), r, kInt64).to(dtype);  // the count of nonzero elements
  } else {
    result = pow(run(OpKind::Sum, pow(abs(input), p), r, dtype), 1.0 / p);
  }
  return result.to(x.dtype());
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(OpKind::Softmax, x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(OpKind::LogSoftmax, x, dim); }

}  // namespace ember

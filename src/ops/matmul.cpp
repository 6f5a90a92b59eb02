// Matrix products: matmul (torch.matmul semantics), matmul_out, linear and linear_gelu, on the
// CPU GEMM (kernels/cpu/gemm.h). linear_gelu = gelu(linear(...)) with the GELU in the GEMM's
// epilogue (Note [GEMM epilogue] in gemm.cpp); with autograd it runs as linear then gelu.
//
// Shape rule: (..., m, k) @ (..., k, n) -> (broadcast(...), m, n). A 1-D left operand is a row
// and a 1-D right operand a column, whose size-1 dim is then dropped from the result; 1-D @ 1-D
// is a dot product giving a 0-dim tensor. linear(x, weight, bias) = x @ weight^T + bias with
// x (..., in), weight (out, in) and bias broadcasting to the result (..., out); a 1-D weight (in)
// gives (...), as in PyTorch.
// Dtype rule: no promotion. The operands (and the bias) must share one dtype, which the result
// keeps; every dtype but bool is supported (16-bit floats are computed in float32 and rounded
// once, integers wrap around on overflow), as in PyTorch.
// Cost (matmul_cost below): 2 * batch * m * n * k FLOPs, plus one per output element for a bias
// and one for beta; bytes: every operand read once and C written once.
// Backward: dA = dC @ B^T and dB = A^T @ dC, as matmuls on transposed views (the GEMM's packing
// absorbs the transposes, so nothing is copied), summed over broadcast batch dims; a shared 2-D
// right operand gets its gradient from one GEMM over all rows; dbias = dC summed over rows. Only
// the gradients an input needs are computed. out= forms are not differentiable.
//
// Operands reach the Matmul primitive as they are, seen with the result's batch dims (0 strides
// where broadcast): a transposed or strided view costs no copy (the kernel's packing reads any
// strides). linear and linear_gelu are composites over one Matmul call, whose attributes carry the
// fused epilogue (MatmulAttrs: alpha, beta, activation; the bias is an optional input).
#include <algorithm>
#include <optional>
#include <vector>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/reference.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

// The operands seen as stacks of matrices: a (batch_a..., m, k), b (batch_b..., k, n).
struct MatmulShapes {
  Tensor a;
  Tensor b;
  Shape batch;  // the broadcast batch dims
  int64_t m = 0, n = 0, k = 0;
  Shape result;  // what the user gets: batch, then m unless a is 1-D, then n unless b is 1-D
  Shape full;    // batch + (m, n)
};

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, {&a, &b});
  EMBER_CHECK(a.dtype() == b.dtype(), "[", op, "] expected both operands to have the same dtype, got ", a.dtype(),
              " (shape ", a.shape(), ") and ", b.dtype(), " (shape ", b.shape(), ")");
  EMBER_CHECK(a.dtype() != kBool, "[", op, "] is not supported for bool tensors (shapes ", a.shape(), " and ",
              b.shape(), ")");
}

MatmulShapes matmul_shapes(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] both arguments need at least 1 dimension, got shapes ", a.shape(),
              " and ", b.shape());
  check_operands("matmul", a, b);
  MatmulShapes s;
  s.a = a.dim() == 1 ? a.unsqueeze(0) : a;
  s.b = b.dim() == 1 ? b.unsqueeze(1) : b;
  s.m = s.a.size(-2);
  s.k = s.a.size(-1);
  s.n = s.b.size(-1);
  EMBER_CHECK(s.b.size(-2) == s.k, "[matmul] shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied: ", s.k,
              " columns on the left, ", s.b.size(-2), " rows on the right");
  const Shape batch_a(s.a.shape().begin(), s.a.shape().end() - 2);
  const Shape batch_b(s.b.shape().begin(), s.b.shape().end() - 2);
  for (int i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    const int64_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
    EMBER_CHECK(da == db || da == 1 || db == 1, "[matmul] the batch dims of shapes ", a.shape(), " and ", b.shape(),
                " don't broadcast: ", batch_a, " vs ", batch_b);
  }
  s.batch = broadcast_shapes(batch_a, batch_b, "matmul");
  s.result = s.batch;
  if (a.dim() > 1) s.result.push_back(s.m);
  if (b.dim() > 1) s.result.push_back(s.n);
  s.full = s.batch;
  s.full.push_back(s.m);
  s.full.push_back(s.n);
  return s;
}

// t (batch_t..., r, c) seen with `batch` as its batch dims (0 strides where broadcast): no copy, no
// autograd link.
Tensor with_batch(const Tensor& t, const Shape& batch) {
  Shape shape = batch;
  shape.push_back(t.size(-2));
  shape.push_back(t.size(-1));
  return detail::broadcast_view(t, shape);
}

// out (batch..., m, n) = activation(a @ b + beta * out + bias) through the Matmul primitive, with
// bias ((n), (1) or ()) when given. `out` must not overlap a, b or bias, nor itself.
void run_gemm(const Tensor& out, const MatmulShapes& s, const Tensor* bias, double beta,
              Activation activation = Activation::kNone) {
  const Tensor a = with_batch(s.a, s.batch), b = with_batch(s.b, s.batch);
  const MatmulAttrs attrs{1.0, beta, activation};
  dispatch::run(OpKind::kMatmul, attrs, {&a, &b, bias, nullptr}, {&out});
}

// Computes the product into `out` (shape s.full): directly when out's memory is its own, through
// a temporary when it shares storage with an input.
void matmul_into(const Tensor& out, const MatmulShapes& s, const Tensor* bias, double beta,
                 std::initializer_list<const Tensor*> inputs) {
  bool shared = false;
  for (const Tensor* t : inputs) shared = shared || out.shares_storage(*t);
  if (!shared) {
    run_gemm(out, s, bias, beta);
    return;
  }
  const Tensor temporary = detail::make_empty(s.full, out.dtype(), out.device(), "matmul");
  if (beta != 0.0) detail::copy_into(temporary, out);
  run_gemm(temporary, s, bias, beta);
  detail::copy_into(out, temporary);
}

// --- backward -----------------------------------------------------------------------------------

using autograd::GradMask;
using autograd::Grads;
using autograd::SavedTensor;

// The last two dims swapped, as a plain view (no autograd link: for internal use).
Tensor transposed(const Tensor& t) {
  Shape shape = t.shape();
  Strides strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return detail::make_view(t, shape, strides, t.offset());
}

// t (..., r, c) seen as the 2-D matrix (rows, c) of all its rows, when its memory allows a view.
std::optional<Tensor> rows_view(const Tensor& t) {
  if (t.dim() == 2) return t;
  const int lead = t.dim() - 1;
  const std::optional<int64_t> row_stride = merged_stride(t.shape().data(), t.strides().data(), lead);
  if (!row_stride) return std::nullopt;
  int64_t rows = 1;  // every dim but the last (counted, not divided out: the last may be 0)
  for (int d = 0; d < lead; ++d) rows *= t.size(d);
  return detail::make_view(t, Shape{rows, t.size(-1)}, Strides{*row_stride, t.stride(-1)}, t.offset());
}

// The gradients of a @ b (torch.matmul semantics) for the output gradient g.
Grads matmul_backward(const Tensor& g, const Tensor& a, const Tensor& b, GradMask needs) {
  // Work on the matrix forms: a (..., m, k), b (..., k, n), g (batch..., m, n).
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Shape full = g.shape();
  if (a.dim() == 1) full.insert(full.size() - (b.dim() == 1 ? 0 : 1), 1);
  if (b.dim() == 1) full.push_back(1);
  const Tensor g2 = g.reshape(full);
  Tensor grad_a, grad_b;
  if (needs[0]) {
    // (batch..., m, n) @ (..., n, k); a 2-D b makes this one tall GEMM.
    grad_a = autograd::sum_to(matmul(g2, transposed(b2)), a2.shape()).reshape(a.shape());
  }
  if (needs[1]) {
    const std::optional<Tensor> a_rows = b2.dim() == 2 && g2.dim() > 2 ? rows_view(a2) : std::nullopt;
    const std::optional<Tensor> g_rows = a_rows ? rows_view(g2) : std::nullopt;
    Tensor product;
    if (a_rows && g_rows) {
      // b is shared by every batch: one GEMM with the batch folded into the inner dim,
      // (k, rows) @ (rows, n), instead of a batch of products summed afterwards.
      product = matmul(transposed(*a_rows), *g_rows);
    } else {
      product = matmul(transposed(a2), g2);
    }
    grad_b = autograd::sum_to(product, b2.shape()).reshape(b.shape());
  }
  return {grad_a, grad_b};
}

}  // namespace

Tensor matmul(const Tensor& a_arg, const Tensor& b_arg) {
  const detail::ErrorName name("matmul");
  const Tensor a = amp::cast(OpKind::kMatmul, a_arg);
  const Tensor b = amp::cast(OpKind::kMatmul, b_arg);
  const MatmulShapes s = matmul_shapes(a, b);
  const Tensor full = detail::make_empty(s.full, a.dtype(), a.device());
  run_gemm(full, s, nullptr, 0.0);
  Tensor out = s.result == s.full ? full : full.view(s.result);
  if (autograd::needs_grad(a, b)) {
    autograd::record(OpKind::kMatmul, MatmulAttrs{}, out, {&a, &b},
                     [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g, GradMask needs) -> Grads {
                       return matmul_backward(g, sa.get(), sb.get(), needs);
                     });
  }
  return out;
}

Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(!autograd::needs_grad(out, a, b),
              "[matmul_out] does not support autograd (out= forms are not differentiable), but an input ", "(shapes ",
              a.shape(), " and ", b.shape(), ") or the output (shape ", out.shape(),
              ") requires grad; use matmul() instead, or run under NoGradGuard");
  const MatmulShapes s = matmul_shapes(a, b);
  detail::check_same_device("matmul", {&out, &a});
  EMBER_CHECK(out.shape() == s.result, "[matmul] out= tensor has shape ", out.shape(), ", but ", a.shape(), " @ ",
              b.shape(), " has shape ", s.result);
  EMBER_CHECK(out.dtype() == a.dtype(), "[matmul] out= tensor has dtype ", out.dtype(), ", but the result has dtype ",
              a.dtype());
  detail::check_no_internal_overlap("matmul_out", out);
  Tensor full = out;
  if (a.dim() == 1) full = full.unsqueeze(s.batch.size());  // put back the dims 1-D operands dropped
  if (b.dim() == 1) full = full.unsqueeze(full.dim());
  matmul_into(full, s, nullptr, 0.0, {&a, &b});
  out.bump_version();
  return out;
}

namespace {

// The checks linear and linear_gelu share, with `op` naming the caller in messages.
void check_linear_args(const char* op, const Tensor& x, const Tensor& weight) {
  EMBER_CHECK(x.dim() >= 1, "[", op, "] input needs at least 1 dimension, got shape ", x.shape());
  EMBER_CHECK(weight.dim() == 1 || weight.dim() == 2, "[", op, "] weight must be (out_features, in_features) or ",
              "(in_features), got shape ", weight.shape());
  check_operands(op, x, weight);
  EMBER_CHECK(x.size(-1) == weight.size(-1), "[", op, "] input of shape ", x.shape(), " has ", x.size(-1),
              " features, but weight of shape ", weight.shape(), " expects ", weight.size(-1));
}

// x @ weight^T + bias, then `activation` in the GEMM's epilogue (no pass of its own over the output).
Tensor linear_forward(const char* op, const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                      Activation activation = Activation::kNone) {
  // The transposed weight is a plain view: the node recorded by linear() links to weight itself.
  const MatmulShapes s = matmul_shapes(x, weight.dim() == 2 ? transposed(weight) : weight);
  const Tensor out = detail::make_empty(s.full, x.dtype(), x.device(), op);
  if (!bias) {
    run_gemm(out, s, nullptr, 0.0, activation);
    return s.result == s.full ? out : out.view(s.result);
  }
  detail::check_same_device(op, {&x, &*bias});
  EMBER_CHECK(bias->dtype() == x.dtype(), "[", op, "] bias has dtype ", bias->dtype(), ", but input and weight have ",
              x.dtype());
  EMBER_CHECK(weight.dim() == 2 || bias->dim() == 0, "[", op, "] with a 1-D weight (shape ", weight.shape(),
              ") the bias must be 0-dim, got shape ", bias->shape());
  EMBER_CHECK(bias->dim() <= s.result.size() && broadcast_shapes(bias->shape(), s.result, op) == s.result, "[", op,
              "] bias of shape ", bias->shape(), " does not broadcast to the output shape ", s.result);
  bool per_column = true;  // (out), (1, out), (), ...: the kernel adds it while writing C
  for (int d = 0; d + 1 < bias->dim(); ++d) per_column = per_column && bias->shape()[d] == 1;
  if (per_column) {
    const Tensor column = bias->dim() <= 1 ? *bias : bias->reshape({bias->shape().back()});
    run_gemm(out, s, &column, 0.0, activation);
  } else {  // a bias that varies along rows too: start from it and add the product (beta = 1)
    const Tensor result_view = s.result == s.full ? out : out.view(s.result);
    detail::copy_into(result_view, *bias);
    run_gemm(out, s, nullptr, 1.0, activation);
  }
  return s.result == s.full ? out : out.view(s.result);
}

// The rows of t (..., c) as a matrix (rows, c): a view when the memory allows, else a copy.
Tensor as_rows(const Tensor& t) { return t.dim() == 1 ? t.unsqueeze(0) : t.reshape({-1, t.size(-1)}); }

// linear = x @ weight^T + bias: dx = g @ weight, dweight = g_rows^T @ x_rows (one GEMM over every
// row, written directly in weight's (out, in) layout), dbias = g summed over rows.
Grads linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Shape& bias_shape, GradMask needs) {
  Grads grads(3);
  if (weight.dim() == 2) {
    if (needs[0]) grads[0] = matmul(g, weight);
    if (needs[1]) grads[1] = matmul(transposed(as_rows(g)), as_rows(x));
  } else {  // weight (in): the output drops the feature dim
    if (needs[0]) grads[0] = mul(g.unsqueeze(-1), weight);
    if (needs[1]) grads[1] = matmul(g.reshape({-1}), as_rows(x));
  }
  if (needs[2]) grads[2] = autograd::sum_to(g, bias_shape);
  return grads;
}

}  // namespace

Tensor linear(const Tensor& x_arg, const Tensor& weight_arg, const std::optional<Tensor>& bias_arg) {
  const Tensor x = amp::cast(OpKind::kLinear, x_arg);
  const Tensor weight = amp::cast(OpKind::kLinear, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kLinear, bias_arg);
  const dispatch::Scope scope(OpKind::kLinear, {&x, &weight, bias ? &*bias : nullptr});
  check_linear_args("linear", x, weight);
  Tensor out = linear_forward("linear", x, weight, bias);
  const Tensor b = bias.value_or(Tensor());
  if (autograd::needs_grad(x, weight, b)) {
    autograd::record(OpKind::kLinear, {}, out, {&x, &weight, &b},
                     [sx = SavedTensor(weight.requires_grad() ? x : Tensor()), sw = SavedTensor(weight),
                      bias_shape = b.defined() ? b.shape() : Shape()](const Tensor& g, GradMask needs) -> Grads {
                       return linear_backward(g, sx.get(), sw.get(), bias_shape, needs);
                     });
  }
  return out;
}

Tensor linear_gelu(const Tensor& x_arg, const Tensor& weight_arg, const std::optional<Tensor>& bias_arg,
                   std::string_view approximate) {
  const Tensor x = amp::cast(OpKind::kLinearGelu, x_arg);
  const Tensor weight = amp::cast(OpKind::kLinearGelu, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kLinearGelu, bias_arg);
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "[linear_gelu] approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  check_linear_args("linear_gelu", x, weight);
  EMBER_CHECK(is_floating(x.dtype()), "[linear_gelu] needs a floating-point dtype, got ", x.dtype(), " (input shape ",
              x.shape(), ")");
  const Activation activation = approximate == "tanh" ? Activation::kGeluTanh : Activation::kGeluErf;
  const dispatch::Scope scope(OpKind::kLinearGelu, {&x, &weight, bias ? &*bias : nullptr},
                              MatmulAttrs{1.0, 0.0, activation});
  const Tensor b = bias.value_or(Tensor());
  if (autograd::needs_grad(x, weight, b)) {
    // The backward needs the pre-activation h = linear(x, weight, bias). Keeping it costs one
    // tensor the size of the output; recomputing it would cost a second GEMM. So with autograd
    // this is its own decomposition: linear (bias fused in the GEMM) then gelu, each recording
    // its backward.
    return reference::linear_gelu(x, weight, bias, approximate);
  }
  return linear_forward("linear_gelu", x, weight, bias, activation);
}

namespace reference {

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   std::string_view approximate) {
  return gelu(linear(x, weight, bias), approximate);
}

}  // namespace reference

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// (batch, m, k) @ (batch, k, n): 2 m n k FLOPs per problem (+ one add per element of C for the
// bias, and for beta * C); bytes = the elements A, B, bias and C hold (a broadcast operand is read
// once) + C written.
OpCost matmul_cost(const KernelCall& c) {
  const Operand &a = c.inputs[0], &bias = c.inputs[2], &out = c.outputs[0];
  const double m = cost::as_double(out.size(-2)), n = cost::as_double(out.size(-1));
  const double k = cost::as_double(a.size(-1));
  const double problems = m * n == 0 ? 0.0 : cost::as_double(out.numel()) / (m * n);
  const MatmulAttrs& attrs = c.get<MatmulAttrs>();
  double flops = 2.0 * problems * m * n * k;
  if (bias.defined()) flops += cost::as_double(out.numel());
  if (attrs.beta != 0.0) flops += cost::as_double(out.numel());
  double bytes = cost::stored_bytes(out);
  for (const Operand& t : c.inputs) bytes += cost::stored_bytes(t);
  if (attrs.beta != 0.0) bytes += cost::stored_bytes(out);  // C read too
  return {flops, bytes};
}

}  // namespace

void define_matmul_ops(OpRuleTable& table) { table.set_cost(OpKind::kMatmul, matmul_cost); }

}  // namespace ember

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
// Cost: matmul_cost(batch, m, n, k, dtype) in ops/cost.h: 2 * batch * m * n * k FLOPs, bytes =
// A + B + C once each.
// Backward: dA = dC @ B^T and dB = A^T @ dC, as matmuls on transposed views (the GEMM's packing
// absorbs the transposes, so nothing is copied), summed over broadcast batch dims; a shared 2-D
// right operand gets its gradient from one GEMM over all rows; dbias = dC summed over rows. Only
// the gradients an input needs are computed. out= forms are not differentiable.
//
// Operands reach the kernel as they are: a transposed or strided view costs no copy (the kernel's
// packing reads any strides). A batch whose rows can be laid end to end (x of any rank times a
// 2-D matrix, the linear case) becomes one tall GEMM; other batches go to gemm_batched with
// per-problem offsets, broadcast batch dims stepping by 0.
#include <algorithm>
#include <optional>
#include <vector>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "kernels/cpu/gemm.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

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

// The stride of dims [0, count) of (shape, strides) merged into one dim, if they can be: each dim
// must step exactly over the one inside it (size-1 dims don't count).
std::optional<int64_t> merged_stride(const Shape& shape, const Strides& strides, int count) {
  std::optional<int64_t> inner;
  int64_t expected = 0;
  for (int d = count - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!inner) {
      inner = strides[d];
    } else if (strides[d] != expected) {
      return std::nullopt;
    }
    expected = strides[d] * shape[d];
  }
  return inner.value_or(1);
}

// The strides of the batch dims of `t` (all but its last two) expanded to `batch`, 0 where broadcast.
Strides batch_strides(const Tensor& t, const Shape& batch) {
  const Shape own(t.shape().begin(), t.shape().end() - 2);
  Strides own_strides(t.strides().begin(), t.strides().end() - 2);
  const Tensor head = detail::make_view(t, own, own_strides, t.offset());
  return detail::broadcast_strides(head, batch);
}

// out (batch..., m, n) = a @ b, + the per-column bias ((n), (1) or ()) when given, + beta * out. `out` must
// not overlap a, b or bias, nor itself.
void run_gemm(const Tensor& out, const MatmulShapes& s, const Tensor* bias, double beta,
              cpu::GemmActivation activation = cpu::GemmActivation::kNone) {
  const int nb = s.batch.size();
  cpu::GemmArgs args;
  args.dtype = out.dtype();
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  args.a = s.a.data_ptr();
  args.a_row_stride = s.a.stride(-2);
  args.a_col_stride = s.a.stride(-1);
  args.b = s.b.data_ptr();
  args.b_row_stride = s.b.stride(-2);
  args.b_col_stride = s.b.stride(-1);
  args.c = out.data_ptr();
  args.c_row_stride = out.stride(-2);
  args.c_col_stride = out.stride(-1);
  args.beta = beta;
  args.activation = activation;
  if (bias != nullptr) {
    args.bias = bias->data_ptr();
    args.bias_stride = bias->dim() == 0 || bias->size(0) == 1 ? 0 : bias->stride(0);  // size 1: broadcast
  }
  if (out.numel() == 0) return;

  const Strides a_batch = batch_strides(s.a, s.batch), b_batch = batch_strides(s.b, s.batch);
  const Strides c_batch(out.strides().begin(), out.strides().end() - 2);
  bool b_shared = true;
  for (int d = 0; d < nb; ++d) b_shared = b_shared && (b_batch[d] == 0 || s.batch[d] == 1);
  if (b_shared) {
    // One matrix on the right: lay the rows of every batch end to end if both a and out allow it.
    Shape rows = s.batch;
    rows.push_back(s.m);
    Strides a_rows = a_batch, c_rows = c_batch;
    a_rows.push_back(args.a_row_stride);
    c_rows.push_back(args.c_row_stride);
    const std::optional<int64_t> a_stride = merged_stride(rows, a_rows, nb + 1);
    const std::optional<int64_t> c_stride = merged_stride(rows, c_rows, nb + 1);
    if (a_stride && c_stride) {
      args.m = rows.numel();
      args.a_row_stride = *a_stride;
      args.c_row_stride = *c_stride;
      cpu::gemm(args);
      return;
    }
  }
  const int64_t batch = s.batch.numel();
  std::vector<int64_t> a_offsets(static_cast<size_t>(batch)), b_offsets(a_offsets.size()), c_offsets(a_offsets.size());
  std::vector<int64_t> index(static_cast<size_t>(nb), 0);
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  for (int64_t i = 0; i < batch; ++i) {
    a_offsets[static_cast<size_t>(i)] = a_offset;
    b_offsets[static_cast<size_t>(i)] = b_offset;
    c_offsets[static_cast<size_t>(i)] = c_offset;
    for (int d = nb - 1; d >= 0; --d) {  // step the batch index, last dim fastest
      a_offset += a_batch[d];
      b_offset += b_batch[d];
      c_offset += c_batch[d];
      if (++index[static_cast<size_t>(d)] < s.batch[d]) break;
      a_offset -= a_batch[d] * s.batch[d];
      b_offset -= b_batch[d] * s.batch[d];
      c_offset -= c_batch[d] * s.batch[d];
      index[static_cast<size_t>(d)] = 0;
    }
  }
  cpu::gemm_batched(args, batch, a_offsets.data(), b_offsets.data(), c_offsets.data());
}

bool has_internal_overlap(const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] > 1 && t.strides()[d] == 0) return true;
  }
  return false;
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
  const Tensor temporary = detail::make_empty(s.full, out.dtype(), out.device());
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
  const std::optional<int64_t> row_stride = merged_stride(t.shape(), t.strides(), lead);
  if (!row_stride) return std::nullopt;
  const Shape shape{t.numel() / std::max<int64_t>(t.size(-1), 1), t.size(-1)};
  return detail::make_view(t, shape, Strides{*row_stride, t.stride(-1)}, t.offset());
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

Tensor matmul(const Tensor& a, const Tensor& b) {
  profiler::detail::OpScope scope("matmul", {&a, &b});
  const MatmulShapes s = matmul_shapes(a, b);
  scope.cost([&] { return matmul_cost(a, b, s.batch.numel(), s.m, s.n, s.k); });
  const Tensor full = detail::make_empty(s.full, a.dtype(), a.device());
  run_gemm(full, s, nullptr, 0.0);
  Tensor out = s.result == s.full ? full : full.view(s.result);
  if (autograd::needs_grad(a, b)) {
    autograd::record("matmul", out, {&a, &b},
                     [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g, GradMask needs) -> Grads {
                       return matmul_backward(g, sa.get(), sb.get(), needs);
                     });
  }
  return out;
}

Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  profiler::detail::OpScope scope("matmul", {&a, &b});
  EMBER_CHECK(!autograd::needs_grad(out, a, b),
              "[matmul_out] does not support autograd (out= forms are not differentiable), but an input ", "(shapes ",
              a.shape(), " and ", b.shape(), ") or the output (shape ", out.shape(),
              ") requires grad; use matmul() instead, or run under NoGradGuard");
  const MatmulShapes s = matmul_shapes(a, b);
  scope.cost([&] { return matmul_cost(a, b, s.batch.numel(), s.m, s.n, s.k); });
  detail::check_same_device("matmul", {&out, &a});
  EMBER_CHECK(out.shape() == s.result, "[matmul] out= tensor has shape ", out.shape(), ", but ", a.shape(), " @ ",
              b.shape(), " has shape ", s.result);
  EMBER_CHECK(out.dtype() == a.dtype(), "[matmul] out= tensor has dtype ", out.dtype(), ", but the result has dtype ",
              a.dtype());
  EMBER_CHECK(!has_internal_overlap(out), "[matmul] out= tensor of shape ", out.shape(), " and strides ", out.strides(),
              " has elements that share memory");
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
                      cpu::GemmActivation activation = cpu::GemmActivation::kNone) {
  // The transposed weight is a plain view: the node recorded by linear() links to weight itself.
  const MatmulShapes s = matmul_shapes(x, weight.dim() == 2 ? transposed(weight) : weight);
  const Tensor out = detail::make_empty(s.full, x.dtype(), x.device());
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

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  profiler::detail::OpScope scope("linear", {&x, &weight, bias ? &*bias : nullptr});
  check_linear_args("linear", x, weight);
  scope.cost([&] {
    const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
    return linear_cost(rows, x.size(-1), weight.dim() == 2 ? weight.size(0) : 1, bias.has_value(), x.dtype());
  });
  Tensor out = linear_forward("linear", x, weight, bias);
  const Tensor b = bias.value_or(Tensor());
  if (autograd::needs_grad(x, weight, b)) {
    autograd::record("linear", out, {&x, &weight, &b},
                     [sx = SavedTensor(weight.requires_grad() ? x : Tensor()), sw = SavedTensor(weight),
                      bias_shape = b.defined() ? b.shape() : Shape()](const Tensor& g, GradMask needs) -> Grads {
                       return linear_backward(g, sx.get(), sw.get(), bias_shape, needs);
                     });
  }
  return out;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   std::string_view approximate) {
  profiler::detail::OpScope scope("linear_gelu", {&x, &weight, bias ? &*bias : nullptr});
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "[linear_gelu] approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  check_linear_args("linear_gelu", x, weight);
  EMBER_CHECK(is_floating(x.dtype()), "[linear_gelu] needs a floating-point dtype, got ", x.dtype(), " (input shape ",
              x.shape(), ")");
  const Tensor b = bias.value_or(Tensor());
  if (autograd::needs_grad(x, weight, b)) {
    // The backward needs the pre-activation h = linear(x, weight, bias). Keeping it costs one
    // tensor the size of the output; recomputing it would cost a second GEMM. So with autograd
    // this is its own decomposition: linear (bias fused in the GEMM) then gelu, each recording
    // its backward (their own costs go to the profiler).
    return gelu(linear(x, weight, bias), approximate);
  }
  scope.cost([&] {
    const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
    return linear_cost(rows, x.size(-1), weight.dim() == 2 ? weight.size(0) : 1, bias.has_value(), x.dtype());
  });
  return linear_forward("linear_gelu", x, weight, bias,
                        approximate == "tanh" ? cpu::GemmActivation::kGeluTanh : cpu::GemmActivation::kGeluErf);
}

}  // namespace ember

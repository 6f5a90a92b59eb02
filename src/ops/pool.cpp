// Pooling: max_pool2d, avg_pool2d and adaptive_avg_pool2d, on the kernels of kernels/cpu/pool.h.
//
// Shape rule: input (N, C, H, W) or unbatched (C, H, W), with C, H, W > 0; the output keeps the
// leading dims. For max and average pooling (dilation 1 for average),
//   OH = floor((H + 2 * pad_h - dilation_h * (kH - 1) - 1 + (ceil_mode ? stride_h - 1 : 0)) / stride_h) + 1,
// minus one when ceil_mode makes the last window start past the input and its left padding
// ((OH - 1) * stride_h >= H + pad_h), as PyTorch; OW alike. The padding may be at most half the
// kernel size (PyTorch's limit, whatever the dilation), and the output at least 1 x 1. Adaptive average pooling takes
// the output size itself. Dtype rule: floating inputs; the output keeps the dtype (float16/bfloat16 computed in
// float32, but max pooling's kernel takes bfloat16 itself, exactly). Cost (M = N * C planes, per output
// element a window of kH * kW):
//   max_pool2d      forward M * OH * OW * kH * kW comparisons; bytes: input + output + int64 indices.
//                   gradient M * OH * OW additions; bytes: grad_out + indices + grad_input.
//   avg_pool2d      forward M * OH * OW * kH * kW additions (+ one division per output); bytes: input +
//                   output. Gradient about one addition per input element; bytes: grad_out +
//                   grad_input.
//   adaptive_avg    about one addition per input element and one division per output; its gradient
//                   as avg_pool2d's.
// Backward: the primitives MaxPool2dGrad (each output's gradient routed to the argmax saved by the
// forward), AvgPool2dGrad and AdaptiveAvgPool2dGrad (spread evenly over the windows).
#include <cstdint>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using detail::compute_dtype;

void check_pool_input(const char* op, const Tensor& input) {
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4, "[", op,
              "] expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ", input.shape());
  EMBER_CHECK(input.size(-1) > 0 && input.size(-2) > 0 && input.size(-3) > 0, "[", op,
              "] expected non-zero channel, height and width sizes, got input shape ", input.shape());
  EMBER_CHECK(is_floating(input.dtype()), "[", op, "] expects a floating-point input, got ", input.dtype());
}

// floor(a / b) for b > 0 and any a.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Checks the window arguments; returns the pooling's attributes and its output shape.
Pool2dAttrs pool_attrs(const char* op, const Tensor& input, Pair kernel, std::optional<Pair> stride_arg, Pair padding,
                       Pair dilation, bool ceil_mode, bool count_include_pad, Shape* out_shape) {
  check_pool_input(op, input);
  const Pair stride = stride_arg.value_or(kernel);
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, "[", op, "] kernel_size must be positive, got (", kernel.h, ", ", kernel.w,
              ")");
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[", op, "] stride must be positive, got (", stride.h, ", ", stride.w, ")");
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[", op, "] dilation must be positive, got (", dilation.h, ", ",
              dilation.w, ")");
  // PyTorch's limit: at most half the kernel size (so every window holds an input element).
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2, "[", op,
              "] padding must be between 0 and half the kernel size, got padding (", padding.h, ", ", padding.w,
              ") for kernel_size (", kernel.h, ", ", kernel.w, ")");
  const int64_t out_height = pooled_size(input.size(-2), kernel.h, stride.h, padding.h, dilation.h, ceil_mode);
  const int64_t out_width = pooled_size(input.size(-1), kernel.w, stride.w, padding.w, dilation.w, ceil_mode);
  EMBER_CHECK(out_height >= 1 && out_width >= 1, "[", op, "] input of shape ", input.shape(),
              " is too small for kernel_size (", kernel.h, ", ", kernel.w, "), stride (", stride.h, ", ", stride.w,
              "), padding (", padding.h, ", ", padding.w, ") and dilation (", dilation.h, ", ", dilation.w,
              "): the output would be ", out_height, " x ", out_width);
  *out_shape = input.shape();
  (*out_shape)[out_shape->size() - 2] = out_height;
  (*out_shape)[out_shape->size() - 1] = out_width;
  return {kernel, stride, padding, dilation, ceil_mode, count_include_pad};
}

// The input as `kind`'s kernel wants it: contiguous, in its own dtype where the kernel takes it
// (max pooling takes bfloat16) or else the compute dtype, and detached (the conversions record no
// graph of their own: the op records one node for itself).
Tensor pool_operand(OpKind kind, const Tensor& t) {
  const bool native = dispatch::has_kernel(kind, t.device(), t.dtype());
  return detail::kernel_operand(t, native ? t.dtype() : compute_dtype(t.dtype()));
}

// Runs the forward primitive on the input in its compute dtype (extra outputs: `more`) and returns
// the output in the input's dtype.
Tensor run_forward(OpKind kind, const Pool2dAttrs& attrs, const Tensor& input, const Shape& out_shape,
                   const Tensor* more = nullptr) {
  const Tensor x = pool_operand(kind, input);
  Tensor out = detail::make_empty(out_shape, x.dtype(), x.device());
  dispatch::run(kind, attrs, {&x}, {&out, more});
  return out.dtype() == input.dtype() ? out : out.to(input.dtype());
}

// The input's gradient from the backward primitive (inputs: the output gradient, then `more`), in
// the compute dtype (the engine casts it).
Tensor run_backward(OpKind kind, const Pool2dAttrs& attrs, const Tensor& grad, const Shape& in_shape,
                    const Tensor* more = nullptr) {
  const Tensor go = pool_operand(kind, grad);
  Tensor gi = detail::make_empty(in_shape, go.dtype(), go.device());
  dispatch::run(kind, attrs, {&go, more}, {&gi});
  return gi;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride, Pair padding, Pair dilation,
                  bool ceil_mode) {
  Shape out_shape;
  const Pool2dAttrs attrs =
      pool_attrs("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, true, &out_shape);
  // Where each maximum is, for the backward alone: inference computes the values only.
  if (!autograd::needs_grad(input)) return run_forward(OpKind::kMaxPool2d, attrs, input, out_shape);
  Tensor indices = detail::make_empty(out_shape, kInt64, input.device());
  Tensor out = run_forward(OpKind::kMaxPool2d, attrs, input, out_shape, &indices);
  {
    autograd::record(OpKind::kMaxPool2d, attrs, out, {&input},
                     [attrs, indices, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) {
                       return autograd::Grads{run_backward(OpKind::kMaxPool2dGrad, attrs, grad, in_shape, &indices)};
                     });
  }
  return out;
}

Tensor avg_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride, Pair padding, bool ceil_mode,
                  bool count_include_pad) {
  Shape out_shape;
  const Pool2dAttrs attrs =
      pool_attrs("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode, count_include_pad, &out_shape);
  Tensor out = run_forward(OpKind::kAvgPool2d, attrs, input, out_shape);
  if (autograd::needs_grad(input)) {
    autograd::record(OpKind::kAvgPool2d, attrs, out, {&input},
                     [attrs, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) {
                       return autograd::Grads{run_backward(OpKind::kAvgPool2dGrad, attrs, grad, in_shape)};
                     });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size) {
  check_pool_input("adaptive_avg_pool2d", input);
  EMBER_CHECK(output_size.h > 0 && output_size.w > 0, "[adaptive_avg_pool2d] output_size must be positive, got (",
              output_size.h, ", ", output_size.w, ")");
  Pool2dAttrs attrs;
  attrs.kernel_size = output_size;  // adaptive pooling: the output's size (attrs.h)
  Shape out_shape = input.shape();
  out_shape[out_shape.size() - 2] = output_size.h;
  out_shape[out_shape.size() - 1] = output_size.w;
  Tensor out = run_forward(OpKind::kAdaptiveAvgPool2d, attrs, input, out_shape);
  if (autograd::needs_grad(input)) {
    autograd::record(OpKind::kAdaptiveAvgPool2d, attrs, out, {&input},
                     [attrs, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) {
                       return autograd::Grads{run_backward(OpKind::kAdaptiveAvgPool2dGrad, attrs, grad, in_shape)};
                     });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------
//
// M = N * C planes, each output a window of kH * kW (adaptive: windows that cover the input).

namespace {

int64_t window(const KernelCall& c) {
  const Pool2dAttrs& a = c.get<Pool2dAttrs>();
  return a.kernel_size.h * a.kernel_size.w;
}

// max: one compare per window element; bytes: input + output + int64 argmax.
OpCost max_pool2d_cost(const KernelCall& c) {
  const double out = cost::as_double(c.outputs[0].numel());
  return {out * cost::as_double(window(c)), cost::operand_bytes(c)};
}
// avg: one add per window element and one divide per output.
OpCost avg_pool2d_cost(const KernelCall& c) {
  const double out = cost::as_double(c.outputs[0].numel());
  return {out * cost::as_double(window(c)) + out, cost::operand_bytes(c)};
}
// adaptive: about one add per input element and one divide per output.
OpCost adaptive_avg_pool2d_cost(const KernelCall& c) {
  return {cost::as_double(c.inputs[0].numel() + c.outputs[0].numel()), cost::operand_bytes(c)};
}
// max backward: each gradient goes to its argmax (one add per output) into a zeroed input gradient.
OpCost max_pool2d_grad_cost(const KernelCall& c) {
  return {cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)};
}
// avg backward: each gradient spread over its window (about one add per input element).
OpCost avg_pool2d_grad_cost(const KernelCall& c) {
  return {cost::as_double(c.outputs[0].numel()), cost::operand_bytes(c)};
}

}  // namespace

void define_pool_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kMaxPool2d, max_pool2d_cost);
  table.set_cost(OpKind::kAvgPool2d, avg_pool2d_cost);
  table.set_cost(OpKind::kAdaptiveAvgPool2d, adaptive_avg_pool2d_cost);
  table.set_cost(OpKind::kMaxPool2dGrad, max_pool2d_grad_cost);
  table.set_cost(OpKind::kAvgPool2dGrad, avg_pool2d_grad_cost);
  table.set_cost(OpKind::kAdaptiveAvgPool2dGrad, avg_pool2d_grad_cost);
}

}  // namespace ember

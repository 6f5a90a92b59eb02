// nn::functional pooling: max_pool2d, avg_pool2d and adaptive_avg_pool2d, on the kernels of
// kernels/cpu/pool.h.
//
// Shape rule: input (N, C, H, W) or unbatched (C, H, W), with C, H, W > 0; the output keeps the
// leading dims. For max and average pooling (dilation 1 for average),
//   OH = floor((H + 2 * pad_h - dilation_h * (kH - 1) - 1 + (ceil_mode ? stride_h - 1 : 0)) / stride_h) + 1,
// minus one when ceil_mode makes the last window start past the input and its left padding
// ((OH - 1) * stride_h >= H + pad_h), as PyTorch; OW alike. The padding may be at most half the
// kernel, and the output at least 1 x 1. Adaptive average pooling takes the output size itself.
// Dtype rule: floating inputs; the output keeps the dtype (float16/bfloat16 computed in float32).
// Cost (M = N * C planes, per output element a window of kH * kW):
//   max_pool2d      forward M * OH * OW * kH * kW comparisons; bytes: input + output + int64 indices.
//                   backward M * OH * OW additions; bytes: grad_out + indices + grad_input.
//   avg_pool2d      forward M * OH * OW * kH * kW additions (+ one division per output); bytes: input +
//                   output. Backward the same FLOPs; bytes: grad_out + grad_input.
//   adaptive_avg    as avg_pool2d with windows of about (H / OH) x (W / OW).
// Backward: max pooling routes each output's gradient to the argmax saved by the forward; the
// averages spread it evenly over their windows.
#include "kernels/cpu/pool.h"

#include <cstdint>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/nn/functional.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

namespace ember::nn::functional {
namespace {

DType compute_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

void check_input(const char* op, const Tensor& input) {
  EMBER_CHECK(input.device().is_cpu(), "[", op, "] not implemented on ", input.device());
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

// Checks the window arguments and returns the geometry of a max or average pooling.
cpu::Pool2dGeometry pool_geometry(const char* op, const Tensor& input, Pair kernel, std::optional<Pair> stride_arg,
                                  Pair padding, Pair dilation, bool ceil_mode) {
  check_input(op, input);
  const Pair stride = stride_arg.value_or(kernel);
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, "[", op, "] kernel_size must be positive, got (", kernel.h, ", ", kernel.w,
              ")");
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[", op, "] stride must be positive, got (", stride.h, ", ", stride.w, ")");
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[", op, "] dilation must be positive, got (", dilation.h, ", ",
              dilation.w, ")");
  // PyTorch's limit: at most half the dilated ("effective") kernel, so every window holds an input element.
  const int64_t reach_h = (kernel.h - 1) * dilation.h + 1, reach_w = (kernel.w - 1) * dilation.w + 1;
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= reach_h / 2 && padding.w <= reach_w / 2, "[", op,
              "] padding must be between 0 and half the effective kernel size, got padding (", padding.h, ", ",
              padding.w, ") for kernel_size (", kernel.h, ", ", kernel.w, ") and dilation (", dilation.h, ", ",
              dilation.w, ")");
  cpu::Pool2dGeometry g;
  g.planes = input.numel() / (input.size(-2) * input.size(-1));
  g.in_height = input.size(-2);
  g.in_width = input.size(-1);
  g.kernel_h = kernel.h;
  g.kernel_w = kernel.w;
  g.stride_h = stride.h;
  g.stride_w = stride.w;
  g.pad_h = padding.h;
  g.pad_w = padding.w;
  g.dilation_h = dilation.h;
  g.dilation_w = dilation.w;
  g.out_height = pooled_size(g.in_height, kernel.h, stride.h, padding.h, dilation.h, ceil_mode);
  g.out_width = pooled_size(g.in_width, kernel.w, stride.w, padding.w, dilation.w, ceil_mode);
  EMBER_CHECK(g.out_height >= 1 && g.out_width >= 1, "[", op, "] input of shape ", input.shape(),
              " is too small for kernel_size (", kernel.h, ", ", kernel.w, "), stride (", stride.h, ", ", stride.w,
              "), padding (", padding.h, ", ", padding.w, ") and dilation (", dilation.h, ", ", dilation.w,
              "): the output would be ", g.out_height, " x ", g.out_width);
  return g;
}

Shape output_shape(const Tensor& input, const cpu::Pool2dGeometry& g) {
  Shape shape = input.shape();
  shape[shape.size() - 2] = g.out_height;
  shape[shape.size() - 1] = g.out_width;
  return shape;
}

// The input as the kernels want it: contiguous, in the compute dtype, and detached (the conversions
// record no graph of their own: the op records one node for itself).
Tensor kernel_operand(const Tensor& t) { return t.detach().to(compute_dtype(t.dtype())).contiguous(); }

// Runs `kernel(in, out)` on the input in its compute dtype and returns the output in the input's.
template <class Kernel>
Tensor run_forward(const Tensor& input, const Shape& out_shape, const Kernel& kernel) {
  const Tensor x = kernel_operand(input);
  Tensor out = detail::make_empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) kernel(x, out);
  return out.dtype() == input.dtype() ? out : out.to(input.dtype());
}

// The input's gradient from `kernel(grad_out, grad_in)`, in the compute dtype (the engine casts it).
template <class Kernel>
Tensor run_backward(const Tensor& grad, const Shape& in_shape, const Kernel& kernel) {
  const Tensor go = kernel_operand(grad);
  Tensor gi = detail::make_empty(in_shape, go.dtype(), go.device());
  if (gi.numel() > 0) kernel(go, gi);
  return gi;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride, Pair padding, Pair dilation,
                  bool ceil_mode) {
  profiler::detail::OpScope scope("max_pool2d", {&input});
  const cpu::Pool2dGeometry g = pool_geometry("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode);
  const Shape out_shape = output_shape(input, g);
  scope.cost([&] {
    return pool2d_cost(PoolKind::kMax, input.numel(), out_shape.numel(), g.kernel_h * g.kernel_w, input.dtype());
  });
  Tensor indices = detail::make_empty(out_shape, kInt64, input.device());
  Tensor out = run_forward(input, out_shape, [&](const Tensor& x, const Tensor& y) {
    cpu::max_pool2d_forward(x.dtype(), g, x.data_ptr(), y.data_ptr(), indices.data_ptr<int64_t>());
  });
  if (autograd::needs_grad(input)) {
    autograd::record("max_pool2d", out, {&input},
                     [g, indices, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       return {run_backward(grad, in_shape, [&](const Tensor& go, const Tensor& gi) {
                         cpu::max_pool2d_backward(go.dtype(), g, go.data_ptr(), indices.data_ptr<int64_t>(),
                                                  gi.data_ptr());
                       })};
                     });
  }
  return out;
}

Tensor avg_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride, Pair padding, bool ceil_mode,
                  bool count_include_pad) {
  profiler::detail::OpScope scope("avg_pool2d", {&input});
  const cpu::Pool2dGeometry g = pool_geometry("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode);
  scope.cost([&] {
    return pool2d_cost(PoolKind::kAvg, input.numel(), output_shape(input, g).numel(), g.kernel_h * g.kernel_w,
                       input.dtype());
  });
  Tensor out = run_forward(input, output_shape(input, g), [&](const Tensor& x, const Tensor& y) {
    cpu::avg_pool2d_forward(x.dtype(), g, count_include_pad, x.data_ptr(), y.data_ptr());
  });
  if (autograd::needs_grad(input)) {
    autograd::record(
        "avg_pool2d", out, {&input},
        [g, count_include_pad, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
          return {run_backward(grad, in_shape, [&](const Tensor& go, const Tensor& gi) {
            cpu::avg_pool2d_backward(go.dtype(), g, count_include_pad, go.data_ptr(), gi.data_ptr());
          })};
        });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size) {
  profiler::detail::OpScope scope("adaptive_avg_pool2d", {&input});
  check_input("adaptive_avg_pool2d", input);
  EMBER_CHECK(output_size.h > 0 && output_size.w > 0, "[adaptive_avg_pool2d] output_size must be positive, got (",
              output_size.h, ", ", output_size.w, ")");
  cpu::Pool2dGeometry g;
  g.planes = input.numel() / (input.size(-2) * input.size(-1));
  g.in_height = input.size(-2);
  g.in_width = input.size(-1);
  g.out_height = output_size.h;
  g.out_width = output_size.w;
  scope.cost([&] {
    return pool2d_cost(PoolKind::kAdaptiveAvg, input.numel(), output_shape(input, g).numel(), 1, input.dtype());
  });
  Tensor out = run_forward(input, output_shape(input, g), [&](const Tensor& x, const Tensor& y) {
    cpu::adaptive_avg_pool2d_forward(x.dtype(), g, x.data_ptr(), y.data_ptr());
  });
  if (autograd::needs_grad(input)) {
    autograd::record("adaptive_avg_pool2d", out, {&input},
                     [g, in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       return {run_backward(grad, in_shape, [&](const Tensor& go, const Tensor& gi) {
                         cpu::adaptive_avg_pool2d_backward(go.dtype(), g, go.data_ptr(), gi.data_ptr());
                       })};
                     });
  }
  return out;
}

}  // namespace ember::nn::functional

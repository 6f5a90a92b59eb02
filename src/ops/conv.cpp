// nn::functional::conv2d: 2-D convolution (cross-correlation, as PyTorch) with stride, padding,
// dilation, groups and an optional bias, on the im2col + GEMM kernels of kernels/cpu/conv.h.
//
// Shape rule: input (N, C_in, H, W) or unbatched (C_in, H, W); weight (C_out, C_in / groups, kH, kW);
// bias (C_out). Output (N, C_out, OH, OW) (or (C_out, OH, OW)) with
//   OH = (H + 2 * pad_h - dilation_h * (kH - 1) - 1) / stride_h + 1   (and OW alike),
// which must be at least 1. C_in and C_out must be divisible by groups.
// Dtype rule: input, weight and bias share one floating dtype, which the output keeps. float16 and
// bfloat16 are computed in float32 and rounded once.
// Cost (N images, P = OH * OW, K = C_in / groups * kH * kW):
//   forward      FLOPs 2 * N * C_out * P * K (+ N * C_out * P for the bias); bytes: input + weight +
//                output, plus the column buffer (N * groups * K * P elements) written and read once.
//   grad input   FLOPs 2 * N * C_out * P * K; bytes: grad_out + weight + grad_input + columns.
//   grad weight  FLOPs 2 * N * C_out * P * K; bytes: grad_out + input + grad_weight + columns (rebuilt
//                from the input: im2col is redone rather than kept, as it costs a copy, not a GEMM).
//   grad bias    N * C_out * P additions (a sum over N, OH, OW).
// Backward: grad_input by the transposed GEMM and col2im, grad_weight by grad_out @ columns^T summed
// over the batch in a fixed order, grad_bias by sum; each computed only when its input needs it.
#include "kernels/cpu/conv.h"

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/nn/functional.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

namespace ember::nn::functional {
namespace {

DType compute_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

// A tensor as the kernels want it: contiguous, in the compute dtype (no copy when it already is), and
// detached, so the conversions record no graph of their own: the op records one node for itself.
Tensor kernel_operand(const Tensor& t, DType dtype) { return t.detach().to(dtype).contiguous(); }

void check_conv_args(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, Pair stride,
                     Pair padding, Pair dilation, int64_t groups) {
  EMBER_CHECK(input.device().is_cpu() && weight.device().is_cpu() && (!bias || bias->device().is_cpu()),
              "[conv2d] not implemented on ", input.device().is_cpu() ? weight.device() : input.device());
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4,
              "[conv2d] expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ", input.shape());
  EMBER_CHECK(weight.dim() == 4, "[conv2d] expected a 4-D weight (C_out, C_in / groups, kH, kW), got shape ",
              weight.shape());
  EMBER_CHECK(is_floating(input.dtype()), "[conv2d] expects a floating-point input, got ", input.dtype());
  EMBER_CHECK(input.dtype() == weight.dtype(), "[conv2d] input (", input.dtype(), ") and weight (", weight.dtype(),
              ") must have the same dtype");
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[conv2d] stride must be positive, got (", stride.h, ", ", stride.w, ")");
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[conv2d] dilation must be positive, got (", dilation.h, ", ",
              dilation.w, ")");
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0, "[conv2d] padding must be non-negative, got (", padding.h, ", ",
              padding.w, ")");
  EMBER_CHECK(groups > 0, "[conv2d] groups must be positive, got ", groups);
  const int64_t in_channels = input.size(-3), out_channels = weight.size(0);
  EMBER_CHECK(out_channels % groups == 0, "[conv2d] out_channels (", out_channels, ", weight shape ", weight.shape(),
              ") must be divisible by groups (", groups, ")");
  EMBER_CHECK(in_channels == weight.size(1) * groups, "[conv2d] input of shape ", input.shape(), " has ", in_channels,
              " channels, but weight of shape ", weight.shape(), " with groups = ", groups, " expects ",
              weight.size(1) * groups);
  if (bias) {
    EMBER_CHECK(bias->dim() == 1 && bias->size(0) == out_channels, "[conv2d] expected a bias of shape (", out_channels,
                "), got ", bias->shape());
    EMBER_CHECK(bias->dtype() == input.dtype(), "[conv2d] bias (", bias->dtype(), ") and input (", input.dtype(),
                ") must have the same dtype");
  }
  const int64_t reach_h = dilation.h * (weight.size(2) - 1) + 1, reach_w = dilation.w * (weight.size(3) - 1) + 1;
  EMBER_CHECK(input.size(-2) + 2 * padding.h >= reach_h && input.size(-1) + 2 * padding.w >= reach_w,
              "[conv2d] the padded input (", input.size(-2) + 2 * padding.h, " x ", input.size(-1) + 2 * padding.w,
              ", input shape ", input.shape(), ") is smaller than the dilated kernel (", reach_h, " x ", reach_w,
              ", weight shape ", weight.shape(), ")");
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, Pair stride, Pair padding,
              Pair dilation, int64_t groups) {
  profiler::detail::OpScope scope("conv2d", {&input, &weight, bias ? &*bias : nullptr});
  check_conv_args(input, weight, bias, stride, padding, dilation, groups);
  const bool batched = input.dim() == 4;
  cpu::Conv2dGeometry g;
  g.batch = batched ? input.size(0) : 1;
  g.in_channels = input.size(-3);
  g.in_height = input.size(-2);
  g.in_width = input.size(-1);
  g.out_channels = weight.size(0);
  g.kernel_h = weight.size(2);
  g.kernel_w = weight.size(3);
  g.stride_h = stride.h;
  g.stride_w = stride.w;
  g.pad_h = padding.h;
  g.pad_w = padding.w;
  g.dilation_h = dilation.h;
  g.dilation_w = dilation.w;
  g.groups = groups;
  g.out_height = (g.in_height + 2 * g.pad_h - g.dilation_h * (g.kernel_h - 1) - 1) / g.stride_h + 1;
  g.out_width = (g.in_width + 2 * g.pad_w - g.dilation_w * (g.kernel_w - 1) - 1) / g.stride_w + 1;

  scope.cost([&] {
    const ConvShape shape{g.batch,    g.in_channels, g.out_channels, g.groups,     g.in_height,
                          g.in_width, g.kernel_h,    g.kernel_w,     g.out_height, g.out_width};
    return conv2d_cost(shape, bias.has_value(), input.dtype());
  });
  Shape out_shape{g.out_channels, g.out_height, g.out_width};
  if (batched) out_shape.insert(0, g.batch);
  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const Tensor bias_tensor = bias.value_or(Tensor());
  const bool grad_input = autograd::needs_grad(input), grad_weight = autograd::needs_grad(weight);

  const Tensor x = kernel_operand(input, compute), w = kernel_operand(weight, compute);
  Tensor out = detail::make_empty(out_shape, compute, input.device());
  if (out.numel() > 0) {
    const Tensor b = bias ? kernel_operand(*bias, compute) : Tensor();
    cpu::conv2d_forward(compute, g, x.data_ptr(), w.data_ptr(), b.defined() ? b.data_ptr() : nullptr, out.data_ptr());
  } else {
    out.zero_();
  }
  if (compute != dtype) out = out.to(dtype);

  if (grad_input || grad_weight || autograd::needs_grad(bias_tensor)) {
    // Keep only what the gradients need: the input for grad_weight, the weight for grad_input.
    autograd::record(
        "conv2d", out, {&input, &weight, &bias_tensor},
        [g, compute, x_saved = grad_weight ? autograd::SavedTensor(x) : autograd::SavedTensor(),
         w_saved = grad_input ? autograd::SavedTensor(w) : autograd::SavedTensor(), in_shape = input.shape(),
         w_shape = weight.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          autograd::Grads grads(3);
          const Tensor go = kernel_operand(grad, compute);
          const bool empty = go.numel() == 0;
          if (needs[0]) {
            grads[0] = detail::make_empty(in_shape, compute, go.device());
            if (empty || in_shape.numel() == 0) {
              grads[0].zero_();
            } else {
              cpu::conv2d_backward_input(compute, g, go.data_ptr(), w_saved.get().data_ptr(), grads[0].data_ptr());
            }
          }
          if (needs[1]) {
            grads[1] = detail::make_empty(w_shape, compute, go.device());
            if (empty || w_shape.numel() == 0) {
              grads[1].zero_();
            } else {
              cpu::conv2d_backward_weight(compute, g, go.data_ptr(), x_saved.get().data_ptr(), grads[1].data_ptr());
            }
          }
          if (needs[2]) {
            grads[2] = go.dim() == 4 ? sum(go, {0, 2, 3}) : sum(go, {1, 2});
          }
          return grads;
        });
  }
  return out;
}

}  // namespace ember::nn::functional

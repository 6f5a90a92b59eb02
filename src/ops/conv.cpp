// conv2d: 2-D convolution (cross-correlation, as PyTorch) with stride, padding,
// dilation, groups and an optional bias, on the kernels of kernels/cpu/conv.h (im2col + GEMM,
// direct), kernels/cpu/conv_nchwc.h (blocked, float32) and kernels/cpu/conv_nchwc_bf16.h
// (blocked, bfloat16).
//
// Shape rule: input (N, C_in, H, W) or unbatched (C_in, H, W); weight (C_out, C_in / groups, kH, kW);
// bias (C_out). Output (N, C_out, OH, OW) (or (C_out, OH, OW)) with
//   OH = (H + 2 * pad_h - dilation_h * (kH - 1) - 1) / stride_h + 1   (and OW alike),
// which must be at least 1. C_in and C_out must be divisible by groups.
// Dtype rule: input, weight and bias share one floating dtype, which the output keeps. float16 is
// computed in float32 and rounded once; so is bfloat16, except in conv2d and conv1d on a CPU with
// AVX512_BF16, whose kernels multiply bfloat16 pairs and sum in float32 (each result still rounded
// once; only the order of the sums differs).
// Cost (N images, P = OH * OW, K = C_in / groups * kH * kW):
//   forward      FLOPs 2 * N * C_out * P * K (+ N * C_out * P for the bias); bytes: input + weight +
//                output, plus the column buffer (N * groups * K * P elements) written and read once.
//   grad input   FLOPs 2 * N * C_out * P * K; bytes: grad_out + weight + grad_input + columns.
//   grad weight  FLOPs 2 * N * C_out * P * K; bytes: grad_out + input + grad_weight + columns (rebuilt
//                from the input: im2col is redone rather than kept, as it costs a copy, not a GEMM).
//   grad bias    N * C_out * P additions (a sum over N, OH, OW).
// Backward: the primitives Conv2dInputGrad (the transposed GEMM and col2im) and Conv2dWeightGrad
// (grad_out @ columns^T summed over the batch in a fixed order), grad_bias by sum; each computed
// only when its input needs it.
//
// conv1d: a composite of the same primitives over lines as images of height 1 (input (N, C, 1, L),
// weight (C_out, C_in / groups, 1, k)): the views cost nothing, and the kernels see a convolution
// with kH = 1, no padding along H. Its cost is its primitives'.
//
// conv_transpose2d: a composite of the same three primitives. Its forward is conv2d's input
// gradient: the convolution with conv2d's attributes that maps an (N, C_out, H_out, W_out) image to
// the (N, C_in, H, W) input has weight (C_in, C_out / groups, kH, kW), so the transposed
// convolution is Conv2dInputGrad with the input as the output gradient, then the bias added. Shape
// rule, with op = output_padding (smaller than stride or dilation, as PyTorch):
//   H_out = (H - 1) * stride_h - 2 * pad_h + dilation_h * (kH - 1) + op_h + 1   (and W_out alike),
// at least 1. output_padding only grows the output: the rows and columns it adds on the bottom and
// right that no kernel tap reaches hold just the bias (col2im zero-fills them). Backward: grad_input
// is conv2d's forward of grad_out (Conv2d), grad_weight is conv2d's weight gradient with the roles
// swapped (Conv2dWeightGrad of grad_out = input over input = grad_out), grad_bias the sum over
// (N, H_out, W_out). Its cost is its primitives'.
#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using detail::compute_dtype;
using detail::kernel_operand;

// conv2d's and conv1d's arguments, with the messages in the op's terms: `spatial` trailing dims
// (2: H, W; 1: L), and stride, padding, dilation per spatial dim.
void check_conv_args(std::string_view op, int spatial, const Tensor& input, const Tensor& weight,
                     const std::optional<Tensor>& bias, std::span<const int64_t> stride,
                     std::span<const int64_t> padding, std::span<const int64_t> dilation, int64_t groups) {
  const char* dims = spatial == 2 ? "H, W" : "L";
  const char* kernel = spatial == 2 ? "kH, kW" : "k";
  EMBER_CHECK(input.dim() == spatial + 1 || input.dim() == spatial + 2, "[", op, "] expected a ", spatial + 1,
              "-D (C, ", dims, ") or ", spatial + 2, "-D (N, C, ", dims, ") input, got shape ", input.shape());
  EMBER_CHECK(weight.dim() == spatial + 2, "[", op, "] expected a ", spatial + 2, "-D weight (C_out, C_in / groups, ",
              kernel, "), got shape ", weight.shape());
  EMBER_CHECK(is_floating(input.dtype()), "[", op, "] expects a floating-point input, got ", input.dtype());
  EMBER_CHECK(input.dtype() == weight.dtype(), "[", op, "] input (", input.dtype(), ") and weight (", weight.dtype(),
              ") must have the same dtype");
  const auto all = [](std::span<const int64_t> v, auto pred) { return std::all_of(v.begin(), v.end(), pred); };
  const auto show = [](std::span<const int64_t> v) {
    std::string text = v.size() == 1 ? "" : "(";
    for (size_t i = 0; i < v.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(v[i]);
    return v.size() == 1 ? text : text + ")";
  };
  EMBER_CHECK(all(stride, [](int64_t v) { return v > 0; }), "[", op, "] stride must be positive, got ", show(stride));
  EMBER_CHECK(all(dilation, [](int64_t v) { return v > 0; }), "[", op, "] dilation must be positive, got ",
              show(dilation));
  EMBER_CHECK(all(padding, [](int64_t v) { return v >= 0; }), "[", op, "] padding must be non-negative, got ",
              show(padding));
  EMBER_CHECK(groups > 0, "[", op, "] groups must be positive, got ", groups);
  const int64_t in_channels = input.size(-spatial - 1), out_channels = weight.size(0);
  EMBER_CHECK(out_channels % groups == 0, "[", op, "] out_channels (", out_channels, ", weight shape ", weight.shape(),
              ") must be divisible by groups (", groups, ")");
  EMBER_CHECK(in_channels == weight.size(1) * groups, "[", op, "] input of shape ", input.shape(), " has ", in_channels,
              " channels, but weight of shape ", weight.shape(), " with groups = ", groups, " expects ",
              weight.size(1) * groups);
  if (bias) {
    EMBER_CHECK(bias->dim() == 1 && bias->size(0) == out_channels, "[", op, "] expected a bias of shape (",
                out_channels, "), got ", bias->shape());
    EMBER_CHECK(bias->dtype() == input.dtype(), "[", op, "] bias (", bias->dtype(), ") and input (", input.dtype(),
                ") must have the same dtype");
  }
  std::vector<int64_t> padded, reach;
  bool fits = true;
  for (int d = 0; d < spatial; ++d) {
    padded.push_back(input.size(d - spatial) + 2 * padding[static_cast<size_t>(d)]);
    reach.push_back(dilation[static_cast<size_t>(d)] * (weight.size(d - spatial) - 1) + 1);
    fits = fits && padded.back() >= reach.back();
  }
  const auto extent = [](const std::vector<int64_t>& v) {
    return v.size() == 1 ? std::to_string(v[0]) : std::to_string(v[0]) + " x " + std::to_string(v[1]);
  };
  EMBER_CHECK(fits, "[", op, "] the padded input (", extent(padded), ", input shape ", input.shape(),
              ") is smaller than the dilated kernel (", extent(reach), ", weight shape ", weight.shape(), ")");
}

// A 4-D view (N, C, H, W) of a batched or unbatched (C, H, W) tensor.
Tensor batched(const Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(0); }

// The size of a transposed convolution's output along one axis (may be < 1 for bad arguments).
int64_t transposed_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                        int64_t output_padding) {
  return (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

void check_conv_transpose_args(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                               const ConvTranspose2dAttrs& a) {
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4,
              "[conv_transpose2d] expected a 3-D (C_in, H, W) or 4-D (N, C_in, H, W) input, got shape ", input.shape());
  EMBER_CHECK(weight.dim() == 4, "[conv_transpose2d] expected a 4-D weight (C_in, C_out / groups, kH, kW), got shape ",
              weight.shape());
  EMBER_CHECK(is_floating(input.dtype()), "[conv_transpose2d] expects a floating-point input, got ", input.dtype());
  EMBER_CHECK(input.dtype() == weight.dtype(), "[conv_transpose2d] input (", input.dtype(), ") and weight (",
              weight.dtype(), ") must have the same dtype");
  EMBER_CHECK(a.stride.h > 0 && a.stride.w > 0, "[conv_transpose2d] stride must be positive, got (", a.stride.h, ", ",
              a.stride.w, ")");
  EMBER_CHECK(a.dilation.h > 0 && a.dilation.w > 0, "[conv_transpose2d] dilation must be positive, got (", a.dilation.h,
              ", ", a.dilation.w, ")");
  EMBER_CHECK(a.padding.h >= 0 && a.padding.w >= 0, "[conv_transpose2d] padding must be non-negative, got (",
              a.padding.h, ", ", a.padding.w, ")");
  EMBER_CHECK(a.output_padding.h >= 0 && a.output_padding.w >= 0,
              "[conv_transpose2d] output_padding must be non-negative, got (", a.output_padding.h, ", ",
              a.output_padding.w, ")");
  EMBER_CHECK((a.output_padding.h < a.stride.h || a.output_padding.h < a.dilation.h) &&
                  (a.output_padding.w < a.stride.w || a.output_padding.w < a.dilation.w),
              "[conv_transpose2d] output_padding (", a.output_padding.h, ", ", a.output_padding.w,
              ") must be smaller than either stride (", a.stride.h, ", ", a.stride.w, ") or dilation (", a.dilation.h,
              ", ", a.dilation.w, ") in each dim");
  EMBER_CHECK(a.groups > 0, "[conv_transpose2d] groups must be positive, got ", a.groups);
  const int64_t in_channels = input.size(-3);
  EMBER_CHECK(in_channels == weight.size(0), "[conv_transpose2d] input of shape ", input.shape(), " has ", in_channels,
              " channels, but weight of shape ", weight.shape(), " expects ", weight.size(0));
  EMBER_CHECK(in_channels % a.groups == 0, "[conv_transpose2d] in_channels (", in_channels, ", weight shape ",
              weight.shape(), ") must be divisible by groups (", a.groups, ")");
  const int64_t out_channels = weight.size(1) * a.groups;
  if (bias) {
    EMBER_CHECK(bias->dim() == 1 && bias->size(0) == out_channels, "[conv_transpose2d] expected a bias of shape (",
                out_channels, ") for weight of shape ", weight.shape(), " with groups = ", a.groups, ", got ",
                bias->shape());
    EMBER_CHECK(bias->dtype() == input.dtype(), "[conv_transpose2d] bias (", bias->dtype(), ") and input (",
                input.dtype(), ") must have the same dtype");
  }
  EMBER_CHECK(input.size(-2) > 0 && input.size(-1) > 0,
              "[conv_transpose2d] expected a non-empty image, got input shape ", input.shape());
  const int64_t out_height =
      transposed_size(input.size(-2), weight.size(2), a.stride.h, a.padding.h, a.dilation.h, a.output_padding.h);
  const int64_t out_width =
      transposed_size(input.size(-1), weight.size(3), a.stride.w, a.padding.w, a.dilation.w, a.output_padding.w);
  EMBER_CHECK(out_height > 0 && out_width > 0, "[conv_transpose2d] the output would be ", out_height, " x ", out_width,
              " (input shape ", input.shape(), ", weight shape ", weight.shape(), ", padding (", a.padding.h, ", ",
              a.padding.w, ")): it must be at least 1 x 1");
}

}  // namespace

namespace {

// The (N, C, H, W) view the kernels take of a conv2d operand (batched or not) and of a conv1d
// operand (a line is an image of height 1).
Tensor image_of_image(const Tensor& t) { return batched(t); }
Tensor image_of_line(const Tensor& t) { return batched(t.unsqueeze(-2)); }

// Whether a bfloat16 convolution runs in bfloat16 (Note [bfloat16 convolution] in
// kernels/cpu/conv.cpp) rather than in float32, rounded once: where the device has the kernel (a CPU
// with AVX512_BF16). The kernel chooses its path by the shape.
bool bf16_native(const Tensor& input) {
  return input.dtype() == kBFloat16 && dispatch::has_kernel(OpKind::kConv2d, input.device(), kBFloat16);
}

// conv2d's forward and backward on the kernels' views (as_image) of the caller's tensors; the
// autograd node is `kind`'s, its gradients in the caller's shapes.
Tensor convolve(OpKind kind, const Attrs& node_attrs, Tensor (*as_image)(const Tensor&), const Tensor& input,
                const Tensor& weight, const std::optional<Tensor>& bias, const Conv2dAttrs& attrs,
                const Shape& out_shape) {
  const DType dtype = input.dtype();
  const DType compute = bf16_native(input) ? dtype : compute_dtype(dtype);
  const Tensor bias_tensor = bias.value_or(Tensor());
  const bool grad_input = autograd::needs_grad(input), grad_weight = autograd::needs_grad(weight);

  const Tensor x = as_image(kernel_operand(input, compute));
  const Tensor w = as_image(kernel_operand(weight, compute));
  const Tensor b = bias ? kernel_operand(*bias, compute) : Tensor();
  Tensor out = detail::make_empty(out_shape, compute, input.device());
  const Tensor out4 = as_image(out);
  dispatch::run(OpKind::kConv2d, attrs, {&x, &w, &b}, {&out4});
  if (compute != dtype) out = out.to(dtype);

  if (grad_input || grad_weight || autograd::needs_grad(bias_tensor)) {
    // Keep only what the gradients need: the input for grad_weight, the weight for grad_input.
    autograd::record(
        kind, node_attrs, out, {&input, &weight, &bias_tensor},
        [attrs, compute, as_image, x_saved = grad_weight ? autograd::SavedTensor(x) : autograd::SavedTensor(),
         w_saved = grad_input ? autograd::SavedTensor(w) : autograd::SavedTensor(), in_shape = input.shape(),
         w_shape = weight.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          autograd::Grads grads(3);
          const Tensor go = as_image(kernel_operand(grad, compute));
          if (needs[0]) {
            grads[0] = detail::make_empty(in_shape, compute, go.device());
            const Tensor gi = as_image(grads[0]), weight_value = w_saved.get();
            dispatch::run(OpKind::kConv2dInputGrad, attrs, {&go, &weight_value}, {&gi});
          }
          if (needs[1]) {
            const Tensor input_value = x_saved.get();
            grads[1] = detail::make_empty(w_shape, compute, go.device());
            const Tensor gw4 = grads[1].view(as_image(grads[1]).shape());
            dispatch::run(OpKind::kConv2dWeightGrad, attrs, {&go, &input_value}, {&gw4});
          }
          if (needs[2]) grads[2] = sum(go, {0, 2, 3});
          return grads;
        });
  }
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& input_arg, const Tensor& weight_arg, const std::optional<Tensor>& bias_arg, Pair stride,
              Pair padding, Pair dilation, int64_t groups) {
  const detail::ErrorName name("conv2d");
  const Tensor input = amp::cast(OpKind::kConv2d, input_arg);
  const Tensor weight = amp::cast(OpKind::kConv2d, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kConv2d, bias_arg);
  const int64_t strides[] = {stride.h, stride.w}, paddings[] = {padding.h, padding.w},
                dilations[] = {dilation.h, dilation.w};
  check_conv_args("conv2d", 2, input, weight, bias, strides, paddings, dilations, groups);
  const Conv2dAttrs attrs{stride, padding, dilation, groups};
  const int64_t out_height = (input.size(-2) + 2 * padding.h - dilation.h * (weight.size(2) - 1) - 1) / stride.h + 1;
  const int64_t out_width = (input.size(-1) + 2 * padding.w - dilation.w * (weight.size(3) - 1) - 1) / stride.w + 1;
  Shape out_shape{weight.size(0), out_height, out_width};
  if (input.dim() == 4) out_shape.insert(0, input.size(0));
  return convolve(OpKind::kConv2d, attrs, image_of_image, input, weight, bias, attrs, out_shape);
}

Tensor conv1d(const Tensor& input_arg, const Tensor& weight_arg, const std::optional<Tensor>& bias_arg, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  const Tensor input = amp::cast(OpKind::kConv1d, input_arg);
  const Tensor weight = amp::cast(OpKind::kConv1d, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kConv1d, bias_arg);
  const Conv1dAttrs attrs{stride, padding, dilation, groups};
  const dispatch::Scope scope(OpKind::kConv1d, {&input, &weight, bias ? &*bias : nullptr}, attrs);
  check_conv_args("conv1d", 1, input, weight, bias, {&stride, 1}, {&padding, 1}, {&dilation, 1}, groups);
  Shape out_shape{weight.size(0), (input.size(-1) + 2 * padding - dilation * (weight.size(2) - 1) - 1) / stride + 1};
  if (input.dim() == 3) out_shape.insert(0, input.size(0));
  return convolve(OpKind::kConv1d, attrs, image_of_line, input, weight, bias, attrs.conv(), out_shape);
}

Tensor conv_transpose2d(const Tensor& input_arg, const Tensor& weight_arg, const std::optional<Tensor>& bias_arg,
                        Pair stride, Pair padding, Pair output_padding, int64_t groups, Pair dilation) {
  const Tensor input = amp::cast(OpKind::kConvTranspose2d, input_arg);
  const Tensor weight = amp::cast(OpKind::kConvTranspose2d, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kConvTranspose2d, bias_arg);
  const ConvTranspose2dAttrs attrs{stride, padding, output_padding, dilation, groups};
  const dispatch::Scope scope(OpKind::kConvTranspose2d, {&input, &weight, bias ? &*bias : nullptr}, attrs);
  check_conv_transpose_args(input, weight, bias, attrs);
  // The convolution this one transposes: it maps the output's shape back to the input's.
  const Conv2dAttrs conv = attrs.conv();
  Shape out_shape{weight.size(1) * groups,
                  transposed_size(input.size(-2), weight.size(2), stride.h, padding.h, dilation.h, output_padding.h),
                  transposed_size(input.size(-1), weight.size(3), stride.w, padding.w, dilation.w, output_padding.w)};
  if (input.dim() == 4) out_shape.insert(0, input.size(0));
  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const Tensor bias_tensor = bias.value_or(Tensor());
  const bool grad_input = autograd::needs_grad(input), grad_weight = autograd::needs_grad(weight);

  const Tensor x = batched(kernel_operand(input, compute)), w = kernel_operand(weight, compute);
  Tensor out = detail::make_empty(out_shape, compute, input.device());
  Tensor out4 = batched(out);
  dispatch::run(OpKind::kConv2dInputGrad, conv, {&x, &w}, {&out4});
  if (bias) out4.add_(kernel_operand(*bias, compute).view({1, -1, 1, 1}));  // detached: records nothing
  if (compute != dtype) out = out.to(dtype);

  if (grad_input || grad_weight || autograd::needs_grad(bias_tensor)) {
    // Keep only what the gradients need: the input for grad_weight, the weight for grad_input.
    autograd::record(
        OpKind::kConvTranspose2d, attrs, out, {&input, &weight, &bias_tensor},
        [conv, compute, x_saved = grad_weight ? autograd::SavedTensor(x) : autograd::SavedTensor(),
         w_saved = grad_input ? autograd::SavedTensor(w) : autograd::SavedTensor(), in_shape = input.shape(),
         w_shape = weight.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          autograd::Grads grads(3);
          const Tensor go = batched(kernel_operand(grad, compute));  // (N, C_out, H_out, W_out)
          if (needs[0]) {
            grads[0] = detail::make_empty(in_shape, compute, go.device());
            const Tensor gi = batched(grads[0]), weight_value = w_saved.get();
            dispatch::run(OpKind::kConv2d, conv, {&go, &weight_value, nullptr}, {&gi});
          }
          if (needs[1]) {
            grads[1] = detail::make_empty(w_shape, compute, go.device());
            const Tensor input_value = x_saved.get();
            dispatch::run(OpKind::kConv2dWeightGrad, conv, {&input_value, &go}, {&grads[1]});
          }
          if (needs[2]) grads[2] = sum(go, {0, 2, 3});
          return grads;
        });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// The sizes of a convolution from its operands: input (N, C_in, H, W), weight (C_out, C_in / groups,
// kH, kW), output (N, C_out, OH, OW); K = C_in / groups * kH * kW, P = OH * OW.
struct ConvSizes {
  double gemm_flops;                      // 2 N C_out P K: one of forward, grad_input, grad_weight
  double input, weight, output, columns;  // element counts
};

// pool: a pooled convolution's window (Conv2dAttrs::max_pool), whose output has pool x pool fewer
// positions than it computes (give or take an odd last row and column). out_pad: a blocked output's
// padding (Conv2dAttrs::blocked_output; its element count includes the padding and the channels
// rounded up to whole blocks, which the kernel writes too).
ConvSizes conv_sizes(const Operand& input, const Operand& weight, const Operand& output, int64_t groups,
                     int64_t pool = 1, Pair out_pad = -1) {
  const bool blocked = out_pad.h >= 0;
  const int64_t channels = blocked ? weight.size(0) : output.size(1);
  const int64_t rows = output.size(2) - (blocked ? 2 * out_pad.h : 0);
  const int64_t cols = output.size(3) - (blocked ? 2 * out_pad.w : 0);
  const double positions = cost::as_double(rows * cols * pool * pool);
  const double k = cost::as_double(weight.size(1) * weight.size(2) * weight.size(3));
  ConvSizes z;
  z.gemm_flops = 2.0 * cost::as_double(output.size(0) * channels) * positions * k;
  z.input = cost::as_double(input.numel());
  z.weight = cost::as_double(weight.numel());
  z.output = cost::as_double(output.numel());
  z.columns = cost::as_double(input.size(0) * groups) * k * positions;
  return z;
}

// Forward: the GEMM (+ one add per output for the bias); bytes: input + weight + output (+ bias) +
// the column buffer written and read once.
OpCost conv2d_cost(const KernelCall& c) {
  const Operand &input = c.inputs[0], &weight = c.inputs[1], &bias = c.inputs[2], &out = c.outputs[0];
  const Conv2dAttrs& attrs = c.get<Conv2dAttrs>();
  const ConvSizes z = conv_sizes(input, weight, out, attrs.groups, attrs.max_pool, attrs.blocked_output);
  const double bias_elements = bias.defined() ? cost::as_double(bias.numel()) : 0.0;
  return {z.gemm_flops + (bias.defined() ? z.output : 0.0),
          cost::size_of(out.dtype) * (z.input + z.weight + z.output + 2.0 * z.columns + bias_elements)};
}

// grad_input: one GEMM through a column buffer written and read once (col2im).
OpCost conv2d_input_grad_cost(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &weight = c.inputs[1], &grad_input = c.outputs[0];
  const ConvSizes z = conv_sizes(grad_input, weight, grad_out, c.get<Conv2dAttrs>().groups);
  return {z.gemm_flops, cost::size_of(grad_input.dtype) * (z.output + z.weight + z.input + 2.0 * z.columns)};
}

// grad_weight: one GEMM through the input's columns, rebuilt (im2col is redone rather than kept, as
// it costs a copy, not a GEMM).
OpCost conv2d_weight_grad_cost(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &input = c.inputs[1], &grad_weight = c.outputs[0];
  const ConvSizes z = conv_sizes(input, grad_weight, grad_out, c.get<Conv2dAttrs>().groups);
  return {z.gemm_flops, cost::size_of(grad_weight.dtype) * (z.output + z.input + z.weight + 2.0 * z.columns)};
}

}  // namespace

void define_conv_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kConv2d, conv2d_cost);
  table.set_cost(OpKind::kConv2dInputGrad, conv2d_input_grad_cost);
  table.set_cost(OpKind::kConv2dWeightGrad, conv2d_weight_grad_cost);
}

}  // namespace ember

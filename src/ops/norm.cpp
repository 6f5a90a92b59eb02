// Normalizations: batch_norm, layer_norm and rms_norm, on the fused kernels of kernels/cpu/norm.h.
//
// Shape rules:
//   batch_norm   input (N, C, ...) with at least 2 dims; running_mean, running_var, weight and bias
//                (C) (the running statistics may be undefined tensors in training).
//   layer_norm   normalized_shape must equal the input's trailing dims; weight and bias have that
//   rms_norm     shape. Statistics are per row of the flattened (rows, prod(normalized_shape)) input.
// The output has the input's shape and dtype. Inputs are floating; float16/bfloat16 are computed in
// float32 and rounded once, as PyTorch's CPU kernels do.
// batch_norm in training normalizes with the batch mean and biased variance over (N, ...) and,
// when running statistics are given, updates them in place without recording a graph:
//   running = (1 - momentum) * running + momentum * batch statistic, with the unbiased variance;
// in evaluation it uses the running statistics. Training needs more than one value per channel.
// rms_norm's eps defaults to the machine epsilon of the input's dtype, as PyTorch.
// Cost (E = input elements; bytes: every operand read or written once):
//   batch_norm   the statistics (mean and variance per channel) 4 E FLOPs; applying them 2 E; the
//                gradient (the channel sums, then dx) 10 E.
//   layer_norm   forward 6 E FLOPs in one pass over each row (3 E for rms_norm), plus E for the
//   rms_norm     weight and E for the bias. Gradient 9 E for dx, plus 2 E for the weight's and E for
//                the bias's, in one fused pass per row.
// Backward: the fused gradient primitives (LayerNormGrad, RmsNormGrad, BatchNormGrad);
// gradients for input, weight and bias as each needs. layer_norm and rms_norm are primitives;
// batch_norm is a composite (statistics, the running-statistic update, the affine map) with one node.
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

using detail::compute_dtype;
using detail::kernel_operand;

void check_parameter(const char* op, const char* name, const Tensor& p, const Shape& expected) {
  if (!p.defined()) return;
  EMBER_CHECK(is_floating(p.dtype()), "[", op, "] expects a floating-point ", name, ", got ", p.dtype());
  EMBER_CHECK(p.shape() == expected, "[", op, "] expected ", name, " of shape ", expected, ", got ", p.shape());
}

void check_norm_input(const char* op, const Tensor& input) {
  EMBER_CHECK(is_floating(input.dtype()), "[", op, "] expects a floating-point input, got ", input.dtype(), " (shape ",
              input.shape(), ")");
}

// Layer norm and RMS norm: the shared front-end over rows of prod(normalized_shape) elements.
Tensor row_norm(OpKind kind, const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps) {
  const char* op = op_name(kind);
  const bool center = kind == OpKind::kLayerNorm;
  check_norm_input(op, input);
  const int nd = normalized_shape.size();
  EMBER_CHECK(nd >= 1, "[", op, "] normalized_shape must have at least one dim");
  bool matches = input.dim() >= nd;
  for (int i = 0; matches && i < nd; ++i) matches = input.size(input.dim() - nd + i) == normalized_shape[i];
  EMBER_CHECK(matches, "[", op, "] input of shape ", input.shape(), " does not end with normalized_shape ",
              normalized_shape);
  check_parameter(op, "weight", weight, normalized_shape);
  check_parameter(op, "bias", bias, normalized_shape);

  const LayerNormAttrs attrs{normalized_shape, eps};
  if (!dispatch::has_kernel(kind, input.device())) {  // the decomposition records its own graph
    return center ? reference::layer_norm(input, normalized_shape, weight, bias, eps)
                  : reference::rms_norm(input, normalized_shape, weight, eps);
  }
  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const int64_t cols = normalized_shape.numel();
  const int64_t rows = cols == 0 ? 0 : input.numel() / cols;
  const Tensor x = kernel_operand(input, compute);
  const Tensor w = weight.defined() ? kernel_operand(weight, compute) : Tensor();
  const Tensor b = bias.defined() ? kernel_operand(bias, compute) : Tensor();
  Tensor out = detail::make_empty(input.shape(), compute, input.device());
  Tensor mean = center ? detail::make_empty({rows}, compute, input.device()) : Tensor();
  Tensor rstd = detail::make_empty({rows}, compute, input.device());
  if (center) {
    dispatch::run(kind, attrs, {&x, &w, &b}, {&out, &mean, &rstd});
  } else {
    dispatch::run(kind, attrs, {&x, &w}, {&out, &rstd});
  }
  if (compute != dtype) out = out.to(dtype);

  if (autograd::needs_grad(input, weight, bias)) {
    autograd::record(
        kind, attrs, out, {&input, &weight, &bias},
        [kind, attrs, compute, xs = autograd::SavedTensor(x), ws = autograd::SavedTensor(w), mean, rstd,
         in_shape = input.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          const Tensor go = kernel_operand(grad, compute);
          Tensor gi = needs[0] ? detail::make_empty(in_shape, compute, go.device()) : Tensor();
          Tensor gw = needs[1] ? detail::make_empty(attrs.normalized_shape, compute, go.device()) : Tensor();
          Tensor gb = needs[2] ? detail::make_empty(attrs.normalized_shape, compute, go.device()) : Tensor();
          const Tensor x_value = xs.get(), w_value = ws.get();
          if (kind == OpKind::kLayerNorm) {
            dispatch::run(OpKind::kLayerNormGrad, attrs, {&x_value, &go, &mean, &rstd, &w_value}, {&gi, &gw, &gb});
          } else {
            dispatch::run(OpKind::kRmsNormGrad, attrs, {&x_value, &go, &rstd, &w_value}, {&gi, &gw});
          }
          return {gi, gw, gb};
        });
  }
  return out;
}

double machine_epsilon(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return std::numeric_limits<double>::epsilon();
    case kFloat16:
      return 0.0009765625;  // 2^-10
    case kBFloat16:
      return 0.0078125;  // 2^-7
    default:
      return static_cast<double>(std::numeric_limits<float>::epsilon());
  }
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, bool training,
                  double momentum, double eps) {
  check_norm_input("batch_norm", input);
  EMBER_CHECK(input.dim() >= 2, "[batch_norm] expected an input of at least 2 dims (N, C, ...), got shape ",
              input.shape());
  const int64_t outer = input.size(0), channels = input.size(1);
  const int64_t inner = channels == 0 || outer == 0 ? 0 : input.numel() / (outer * channels);
  const Shape channel_shape{channels};
  const Tensor w = weight.value_or(Tensor()), b = bias.value_or(Tensor());
  check_parameter("batch_norm", "weight", w, channel_shape);
  check_parameter("batch_norm", "bias", b, channel_shape);
  check_parameter("batch_norm", "running_mean", running_mean, channel_shape);
  check_parameter("batch_norm", "running_var", running_var, channel_shape);
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "[batch_norm] running_mean and running_var must be given together");
  EMBER_CHECK(training || running_mean.defined(),
              "[batch_norm] evaluation (training = false) needs running_mean and running_var");
  const int64_t count = outer * inner;
  EMBER_CHECK(!training || count > 1,
              "[batch_norm] expected more than 1 value per channel when training, got input of shape ", input.shape());

  const BatchNormAttrs attrs{training, momentum, eps};
  const dispatch::Scope scope(OpKind::kBatchNorm, {&input, &w, &b}, attrs);
  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const Tensor x = kernel_operand(input, compute);
  Tensor mean, invstd, scale, shift;
  {
    autograd::NoGradGuard no_grad;
    if (training) {
      mean = detail::make_empty(channel_shape, compute, input.device());
      Tensor var = detail::make_empty(channel_shape, compute, input.device());
      dispatch::run(OpKind::kBatchNormStats, {}, {&x}, {&mean, &var});
      invstd = rsqrt(var + eps);
      if (running_mean.defined()) {
        // PyTorch's convention: running = (1 - momentum) * running + momentum * batch, with the
        // unbiased variance. In place, unrecorded: the running statistics are buffers, not outputs.
        const Tensor unbiased = var * (static_cast<double>(count) / static_cast<double>(count - 1));
        Tensor rm = running_mean, rv = running_var;
        rm.copy_(rm * (1.0 - momentum) + mean.to(rm.dtype()) * momentum);
        rv.copy_(rv * (1.0 - momentum) + unbiased.to(rv.dtype()) * momentum);
      }
    } else {
      // A copy: the backward must see these values even after a later step updates the buffers.
      mean = running_mean.to(compute).clone();
      invstd = rsqrt(running_var.to(compute) + eps);
    }
    // y = x * scale + shift with scale = invstd * weight, shift = bias - mean * scale.
    scale = w.defined() ? invstd * w.to(compute) : invstd;
    shift = b.defined() ? b.to(compute) - mean * scale : -(mean * scale);
    scale = scale.contiguous();
    shift = shift.contiguous();
  }
  Tensor out = detail::make_empty(input.shape(), compute, input.device());
  dispatch::run(OpKind::kBatchNormApply, {}, {&x, &scale, &shift}, {&out});
  if (compute != dtype) out = out.to(dtype);

  if (autograd::needs_grad(input, w, b)) {
    autograd::record(
        OpKind::kBatchNorm, attrs, out, {&input, &w, &b},
        [attrs, channels, compute, xs = autograd::SavedTensor(x), mean, invstd,
         wc = w.defined() ? kernel_operand(w, compute) : Tensor(),
         in_shape = input.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          const Tensor go = kernel_operand(grad, compute);
          Tensor gi = needs[0] ? detail::make_empty(in_shape, compute, go.device()) : Tensor();
          Tensor gw = needs[1] ? detail::make_empty({channels}, compute, go.device()) : Tensor();
          Tensor gb = needs[2] ? detail::make_empty({channels}, compute, go.device()) : Tensor();
          const Tensor x_value = xs.get();
          dispatch::run(OpKind::kBatchNormGrad, attrs, {&x_value, &go, &mean, &invstd, &wc}, {&gi, &gw, &gb});
          return {gi, gw, gb};
        });
  }
  return out;
}

Tensor layer_norm(const Tensor& input_arg, const Shape& normalized_shape, const std::optional<Tensor>& weight_arg,
                  const std::optional<Tensor>& bias_arg, double eps) {
  const Tensor input = amp::cast(OpKind::kLayerNorm, input_arg);
  const std::optional<Tensor> weight = amp::cast(OpKind::kLayerNorm, weight_arg);
  const std::optional<Tensor> bias = amp::cast(OpKind::kLayerNorm, bias_arg);
  return row_norm(OpKind::kLayerNorm, input, normalized_shape, weight.value_or(Tensor()), bias.value_or(Tensor()), eps);
}

// Note [group_norm]: each (sample, group) is a row of (C / G) * spatial values, so the
// normalization is layer_norm's fused kernel over input viewed as (N, G, row); the per-channel
// affine map follows. Its backward, with z the normalized input of a row and rstd its
// 1 / sqrt(var + eps): grad_z = grad * weight, grad_input = rstd * (grad_z - mean(grad_z) -
// z * mean(grad_z * z)) over the row, grad_weight = sum(grad * z), grad_bias = sum(grad) over the
// samples and positions; written with ember ops, so it is itself differentiable.
Tensor group_norm(const Tensor& input_arg, int64_t num_groups, const std::optional<Tensor>& weight_arg,
                  const std::optional<Tensor>& bias_arg, double eps) {
  const Tensor input = amp::cast(OpKind::kGroupNorm, input_arg);
  const Tensor w = amp::cast(OpKind::kGroupNorm, weight_arg).value_or(Tensor());
  const Tensor b = amp::cast(OpKind::kGroupNorm, bias_arg).value_or(Tensor());
  check_norm_input("group_norm", input);
  EMBER_CHECK(input.dim() >= 2, "[group_norm] expected an input of at least 2 dims (N, C, ...), got shape ",
              input.shape());
  EMBER_CHECK(num_groups > 0, "[group_norm] num_groups must be positive, got ", num_groups);
  const int64_t n = input.size(0), channels = input.size(1);
  EMBER_CHECK(channels % num_groups == 0, "[group_norm] expected the number of channels in the input (", channels,
              ") to be divisible by num_groups, got input of shape ", input.shape(), " and num_groups=", num_groups);
  check_parameter("group_norm", "weight", w, Shape{channels});
  check_parameter("group_norm", "bias", b, Shape{channels});
  const GroupNormAttrs attrs{num_groups, eps};
  const dispatch::Scope scope(OpKind::kGroupNorm, {&input, &w, &b}, attrs);
  int64_t row = channels / num_groups;
  for (int d = 2; d < input.dim(); ++d) row *= input.size(d);
  const Shape grouped{n, num_groups, row};
  Shape per_channel(static_cast<size_t>(input.dim()), 1);  // (1, C, 1, ...)
  per_channel[1] = channels;
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out =
        input.numel() == 0 ? input.clone() : layer_norm(input.reshape(grouped), {row}, std::nullopt, std::nullopt, eps);
    out = out.reshape(input.shape());
    if (w.defined()) out = out * w.reshape(per_channel);
    if (b.defined()) out = out + b.reshape(per_channel);
  }
  if (autograd::needs_grad(input, w, b)) {
    autograd::record(OpKind::kGroupNorm, attrs, out, {&input, &w, &b},
                     [grouped, per_channel, eps, xs = autograd::SavedTensor(input), ws = autograd::SavedTensor(w)](
                         const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
                       const Tensor x = xs.get(), weight = ws.get();
                       Axes reduced{0};  // every dim but the channels
                       for (int d = 2; d < x.dim(); ++d) reduced.push_back(d);
                       if (x.numel() == 0) {
                         const TensorOptions like = TensorOptions(grad.device()).with_dtype(grad.dtype());
                         const Tensor zero = zeros({per_channel[1]}, like);
                         return {needs[0] ? zeros(x.shape(), like) : Tensor(), needs[1] ? zero : Tensor(),
                                 needs[2] ? zero : Tensor()};
                       }
                       const Tensor rows = x.reshape(grouped);
                       const Tensor mean_x = rows.mean({2}, true);
                       const Tensor rstd = rsqrt(rows.var({2}, 0, true) + eps);
                       const Tensor z = ((rows - mean_x) * rstd).reshape(x.shape());
                       Tensor gi, gw, gb;
                       if (needs[0]) {
                         const Tensor gz =
                             (weight.defined() ? grad * weight.reshape(per_channel) : grad).reshape(grouped);
                         const Tensor zr = z.reshape(grouped);
                         gi = (rstd * (gz - gz.mean({2}, true) - zr * (gz * zr).mean({2}, true))).reshape(x.shape());
                       }
                       if (needs[1]) gw = (grad * z).sum(reduced);
                       if (needs[2]) gb = grad.sum(reduced);
                       return {gi, gw, gb};
                     });
  }
  return out;
}

Tensor rms_norm(const Tensor& input_arg, const Shape& normalized_shape, const std::optional<Tensor>& weight_arg,
                std::optional<double> eps) {
  const Tensor input = amp::cast(OpKind::kRmsNorm, input_arg);
  const std::optional<Tensor> weight = amp::cast(OpKind::kRmsNorm, weight_arg);
  check_norm_input("rms_norm", input);
  return row_norm(OpKind::kRmsNorm, input, normalized_shape, weight.value_or(Tensor()), Tensor(),
                  eps.value_or(machine_epsilon(input.dtype())));
}

// --- cost rules ----------------------------------------------------------------------------------
//
// E = input elements. layer_norm: mean (1), variance (3), normalize (2) and the optional affine (2)
// per element, in one pass over each row; rms_norm: sum of squares (2), scale (1), weight (1). Their
// backward: 9 FLOPs per element for grad_input (x_hat, two row sums, the combination), 2 for
// grad_weight, 1 for grad_bias, in one fused pass. batch_norm: the statistics 4 per element, the
// affine map 2, the backward 10 (x_hat, two channel sums, the combination, the parameter terms).
// Bytes: every operand once (the saved mean and rstd included).

namespace {

OpCost layer_norm_cost(const KernelCall& c) {
  const bool center = c.kind == OpKind::kLayerNorm;
  double per_element = center ? 6.0 : 3.0;
  if (c.inputs[1].defined()) per_element += 1;
  if (c.inputs.size() > 2 && c.inputs[2].defined()) per_element += 1;
  return {per_element * cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)};
}

OpCost layer_norm_grad_cost(const KernelCall& c) {
  const double elements = cost::as_double(c.inputs[0].numel());
  const std::span<const Operand> out = c.outputs;
  double flops = 0;
  if (out[0].defined()) flops += 9.0 * elements;
  if (out[1].defined()) flops += 2.0 * elements;
  if (out.size() > 2 && out[2].defined()) flops += elements;
  return {flops, cost::operand_bytes(c)};
}

double elements_of(const KernelCall& c) { return cost::as_double(c.inputs[0].numel()); }

OpCost batch_norm_stats_cost(const KernelCall& c) { return {4.0 * elements_of(c), cost::operand_bytes(c)}; }
OpCost batch_norm_apply_cost(const KernelCall& c) { return {2.0 * elements_of(c), cost::operand_bytes(c)}; }
OpCost batch_norm_grad_cost(const KernelCall& c) { return {10.0 * elements_of(c), cost::operand_bytes(c)}; }

}  // namespace

void define_norm_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kLayerNorm, layer_norm_cost);
  table.set_cost(OpKind::kRmsNorm, layer_norm_cost);
  table.set_cost(OpKind::kLayerNormGrad, layer_norm_grad_cost);
  table.set_cost(OpKind::kRmsNormGrad, layer_norm_grad_cost);
  table.set_cost(OpKind::kBatchNormStats, batch_norm_stats_cost);
  table.set_cost(OpKind::kBatchNormApply, batch_norm_apply_cost);
  table.set_cost(OpKind::kBatchNormGrad, batch_norm_grad_cost);
}

// --- reference decompositions (ops/reference.h) ------------------------------------------------------

namespace reference {
namespace {

// The trailing normalized dims of x.
Axes trailing(const Tensor& x, const Shape& normalized_shape) {
  Axes dims;
  for (int d = x.dim() - normalized_shape.size(); d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const Axes dims = trailing(x, normalized_shape);
  const Tensor centered = x - mean(x, dims, true);
  Tensor y = centered * rsqrt(mean(square(centered), dims, true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  Tensor y = x * rsqrt(mean(square(x), trailing(x, normalized_shape), true) + eps);
  return weight.defined() ? y * weight : y;
}

}  // namespace reference
}  // namespace ember

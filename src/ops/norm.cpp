// nn::functional normalizations: batch_norm, layer_norm and rms_norm, on the fused kernels of
// kernels/cpu/norm.h.
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
// Cost (E = input elements):
//   batch_norm   forward, training: 3 passes over the input (mean, variance, normalize) ~ 5 E FLOPs;
//                bytes 3 E + E written. Evaluation: 1 pass, 2 E FLOPs. Backward: 2 passes (the
//                channel sums, then dx) ~ 8 E FLOPs, bytes 4 E + E written.
//   layer_norm   forward ~ 6 E FLOPs in one pass over each row (the row stays in cache for its mean,
//   rms_norm     variance and output); bytes E read + E written + 2 per row. Backward ~ 12 E FLOPs
//                in one fused pass per row (dx and the weight/bias column sums together); bytes
//                2 E read + E written.
// Backward: the fused kernels above; gradients for input, weight and bias as each needs.
#include "kernels/cpu/norm.h"

#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/nn/functional.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

namespace ember::nn::functional {
namespace {

DType compute_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

// A tensor as the kernels want it: contiguous, in `dtype` (no copy when it already is), and detached,
// so the conversions record no graph of their own: the op records one node for itself.
Tensor kernel_operand(const Tensor& t, DType dtype) { return t.detach().to(dtype).contiguous(); }
const void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* data_or_null(Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

void check_parameter(const char* op, const char* name, const Tensor& p, const Shape& expected) {
  if (!p.defined()) return;
  EMBER_CHECK(p.device().is_cpu(), "[", op, "] not implemented on ", p.device());
  EMBER_CHECK(is_floating(p.dtype()), "[", op, "] expects a floating-point ", name, ", got ", p.dtype());
  EMBER_CHECK(p.shape() == expected, "[", op, "] expected ", name, " of shape ", expected, ", got ", p.shape());
}

void check_input(const char* op, const Tensor& input) {
  EMBER_CHECK(input.device().is_cpu(), "[", op, "] not implemented on ", input.device());
  EMBER_CHECK(is_floating(input.dtype()), "[", op, "] expects a floating-point input, got ", input.dtype(), " (shape ",
              input.shape(), ")");
}

// Layer norm and RMS norm: the shared front-end over rows of prod(normalized_shape) elements.
Tensor row_norm(const char* op, bool center, const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps) {
  profiler::detail::OpScope scope(op, {&input});
  check_input(op, input);
  const int nd = normalized_shape.size();
  EMBER_CHECK(nd >= 1, "[", op, "] normalized_shape must have at least one dim");
  bool matches = input.dim() >= nd;
  for (int i = 0; matches && i < nd; ++i) matches = input.size(input.dim() - nd + i) == normalized_shape[i];
  EMBER_CHECK(matches, "[", op, "] input of shape ", input.shape(), " does not end with normalized_shape ",
              normalized_shape);
  check_parameter(op, "weight", weight, normalized_shape);
  check_parameter(op, "bias", bias, normalized_shape);

  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const int64_t cols = normalized_shape.numel();
  const int64_t rows = cols == 0 ? 0 : input.numel() / cols;
  scope.cost([&] { return row_norm_cost(center, rows, cols, weight.defined(), bias.defined(), input.dtype()); });
  const Tensor x = kernel_operand(input, compute);
  const Tensor w = weight.defined() ? kernel_operand(weight, compute) : Tensor();
  const Tensor b = bias.defined() ? kernel_operand(bias, compute) : Tensor();
  Tensor out = detail::make_empty(input.shape(), compute, input.device());
  Tensor mean = center ? detail::make_empty({rows}, compute, input.device()) : Tensor();
  Tensor rstd = detail::make_empty({rows}, compute, input.device());
  if (out.numel() > 0) {
    cpu::row_norm_forward(compute, rows, cols, eps, center, x.data_ptr(), data_or_null(w), data_or_null(b),
                          out.data_ptr(), data_or_null(mean), rstd.data_ptr());
  }
  if (compute != dtype) out = out.to(dtype);

  if (autograd::needs_grad(input, weight, bias)) {
    autograd::record(
        op, out, {&input, &weight, &bias},
        [rows, cols, center, compute, xs = autograd::SavedTensor(x), ws = autograd::SavedTensor(w), mean, rstd,
         in_shape = input.shape(), normalized_shape](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          const Tensor go = kernel_operand(grad, compute);
          Tensor gi = needs[0] ? detail::make_empty(in_shape, compute, go.device()) : Tensor();
          Tensor gw = needs[1] ? detail::make_empty(normalized_shape, compute, go.device()) : Tensor();
          Tensor gb = needs[2] ? detail::make_empty(normalized_shape, compute, go.device()) : Tensor();
          cpu::row_norm_backward(compute, rows, cols, center, xs.get().data_ptr(), go.data_ptr(), data_or_null(mean),
                                 rstd.data_ptr(), data_or_null(ws.get()), data_or_null(gi), data_or_null(gw),
                                 data_or_null(gb));
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
  profiler::detail::OpScope scope("batch_norm", {&input});
  check_input("batch_norm", input);
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

  scope.cost([&] { return batch_norm_cost(input.numel(), channels, training, input.dtype()); });
  const DType dtype = input.dtype(), compute = compute_dtype(dtype);
  const Tensor x = kernel_operand(input, compute);
  Tensor mean, invstd, scale, shift;
  {
    autograd::NoGradGuard no_grad;
    if (training) {
      mean = detail::make_empty(channel_shape, compute, input.device());
      Tensor var = detail::make_empty(channel_shape, compute, input.device());
      cpu::channel_stats(compute, outer, channels, inner, x.data_ptr(), mean.data_ptr(), var.data_ptr());
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
  if (out.numel() > 0) {
    cpu::channel_affine(compute, outer, channels, inner, x.data_ptr(), scale.data_ptr(), shift.data_ptr(),
                        out.data_ptr());
  }
  if (compute != dtype) out = out.to(dtype);

  if (autograd::needs_grad(input, w, b)) {
    autograd::record("batch_norm", out, {&input, &w, &b},
                     [outer, channels, inner, training, compute, xs = autograd::SavedTensor(x), mean, invstd,
                      wc = w.defined() ? kernel_operand(w, compute) : Tensor(),
                      in_shape = input.shape()](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
                       const Tensor go = kernel_operand(grad, compute);
                       Tensor gi = needs[0] ? detail::make_empty(in_shape, compute, go.device()) : Tensor();
                       Tensor gw = needs[1] ? detail::make_empty({channels}, compute, go.device()) : Tensor();
                       Tensor gb = needs[2] ? detail::make_empty({channels}, compute, go.device()) : Tensor();
                       cpu::batch_norm_backward(compute, outer, channels, inner, training, xs.get().data_ptr(),
                                                go.data_ptr(), mean.data_ptr(), invstd.data_ptr(), data_or_null(wc),
                                                data_or_null(gi), data_or_null(gw), data_or_null(gb));
                       return {gi, gw, gb};
                     });
  }
  return out;
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps) {
  return row_norm("layer_norm", true, input, normalized_shape, weight.value_or(Tensor()), bias.value_or(Tensor()), eps);
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  check_input("rms_norm", input);
  return row_norm("rms_norm", false, input, normalized_shape, weight.value_or(Tensor()), Tensor(),
                  eps.value_or(machine_epsilon(input.dtype())));
}

}  // namespace ember::nn::functional

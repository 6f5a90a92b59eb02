// The optimizers' fused updates (optimizer_updates.h) and their cost rules.
//
// Cost, per element (the arithmetic of kernels/cpu/optim.cpp):
//   SGD: 2 (p - lr g), +2 weight decay, +3 momentum buffer, +2 nesterov
//   Adam/AdamW: 13 (m lerp 3, v 4, denominator 3, update 3), +2 L2 weight decay (+1 decoupled),
//               +1 amsgrad
//   Adagrad: 7 (sum 2, denominator 2, update 3), +2 weight decay
//   RMSprop: 9 (square average 4, denominator 2, update 3), +5 centered, +2 momentum, +2 weight decay
// Bytes: the gradient read; the parameter and each state buffer read and written.
// Reference: each update written with ember ops (bottom of this file, ops/reference.h).
#include "ops/optimizer_updates.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/reference.h"

namespace ember {
namespace detail {

// Each update runs its fused kernel, or its reference decomposition on a device without one.

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdAttrs& attrs) {
  if (!dispatch::has_kernel(OpKind::kSgdStep, param.device())) {
    return reference::sgd_update(param, grad, momentum_buffer, attrs);
  }
  dispatch::run(OpKind::kSgdStep, attrs, {&grad}, {&param, &momentum_buffer});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamAttrs& attrs) {
  if (!dispatch::has_kernel(OpKind::kAdamStep, param.device())) {
    return reference::adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, attrs);
  }
  dispatch::run(OpKind::kAdamStep, attrs, {&grad}, {&param, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
}

void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradAttrs& attrs) {
  if (!dispatch::has_kernel(OpKind::kAdagradStep, param.device())) {
    return reference::adagrad_update(param, grad, sum, attrs);
  }
  dispatch::run(OpKind::kAdagradStep, attrs, {&grad}, {&param, &sum});
}

void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const RmspropAttrs& attrs) {
  if (!dispatch::has_kernel(OpKind::kRmspropStep, param.device())) {
    return reference::rmsprop_update(param, grad, square_avg, grad_avg, momentum_buffer, attrs);
  }
  dispatch::run(OpKind::kRmspropStep, attrs, {&grad}, {&param, &square_avg, &grad_avg, &momentum_buffer});
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const HostAttrsPtr& attrs) {
  if (!dispatch::has_kernel(OpKind::kSgdStep, param.device())) {
    if (!attrs->skip) reference::sgd_update(param, grad, momentum_buffer, std::get<SgdAttrs>(attrs->attrs));
    return;
  }
  dispatch::run_host(OpKind::kSgdStep, attrs, {&grad}, {&param, &momentum_buffer});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const HostAttrsPtr& attrs) {
  if (!dispatch::has_kernel(OpKind::kAdamStep, param.device())) {
    if (!attrs->skip) {
      reference::adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, std::get<AdamAttrs>(attrs->attrs));
    }
    return;
  }
  dispatch::run_host(OpKind::kAdamStep, attrs, {&grad}, {&param, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
}

void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const HostAttrsPtr& attrs) {
  if (!dispatch::has_kernel(OpKind::kAdagradStep, param.device())) {
    if (!attrs->skip) reference::adagrad_update(param, grad, sum, std::get<AdagradAttrs>(attrs->attrs));
    return;
  }
  dispatch::run_host(OpKind::kAdagradStep, attrs, {&grad}, {&param, &sum});
}

void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const HostAttrsPtr& attrs) {
  if (!dispatch::has_kernel(OpKind::kRmspropStep, param.device())) {
    if (!attrs->skip) {
      reference::rmsprop_update(param, grad, square_avg, grad_avg, momentum_buffer,
                                std::get<RmspropAttrs>(attrs->attrs));
    }
    return;
  }
  dispatch::run_host(OpKind::kRmspropStep, attrs, {&grad}, {&param, &square_avg, &grad_avg, &momentum_buffer});
}

}  // namespace detail

namespace {

// FLOPs per element times the elements; bytes: the gradient read, every output read and written.
OpCost update_cost(const KernelCall& c, double per_element) {
  double bytes = cost::nbytes(c.inputs[0]);
  for (const Operand& t : c.outputs) bytes += 2.0 * cost::nbytes(t);
  return {per_element * cost::as_double(c.inputs[0].numel()), bytes};
}

OpCost sgd_cost(const KernelCall& c) {
  const SgdAttrs& a = c.get<SgdAttrs>();
  double per_element = 2;
  if (a.weight_decay != 0) per_element += 2;
  if (a.momentum != 0) per_element += 3 + (a.nesterov ? 2 : 0);
  return update_cost(c, per_element);
}

OpCost adam_cost(const KernelCall& c) {
  const AdamAttrs& a = c.get<AdamAttrs>();
  double per_element = 13;
  if (a.weight_decay != 0) per_element += a.decoupled_weight_decay ? 1 : 2;
  if (a.amsgrad) per_element += 1;
  return update_cost(c, per_element);
}

OpCost adagrad_cost(const KernelCall& c) {
  return update_cost(c, 7 + (c.get<AdagradAttrs>().weight_decay != 0 ? 2 : 0));
}

OpCost rmsprop_cost(const KernelCall& c) {
  const RmspropAttrs& a = c.get<RmspropAttrs>();
  return update_cost(c, 9 + (a.weight_decay != 0 ? 2 : 0) + (a.centered ? 5 : 0) + (a.momentum != 0 ? 2 : 0));
}

}  // namespace

void define_optimizer_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kSgdStep, sgd_cost);
  table.set_cost(OpKind::kAdamStep, adam_cost);
  table.set_cost(OpKind::kAdagradStep, adagrad_cost);
  table.set_cost(OpKind::kRmspropStep, rmsprop_cost);
}

}  // namespace ember

// --- reference decompositions (ops/reference.h) ------------------------------------------------------
//
// Scalars are cast to the parameter's dtype first, as the kernels do, and every operation rounds in
// that dtype, in the kernels' order (which may fuse a multiply and an add: ops/reference.h).

namespace ember::reference {
namespace {

// `value` as the parameter's dtype, as a 0-dim tensor (so an op with it rounds as the kernel does).
Tensor constant(double value, const Tensor& like) {
  return full({}, value, TensorOptions(like.device()).with_dtype(like.dtype()));
}

// torch.lerp(self, end, weight): self + w (end - self) for |w| < 0.5, else end - (end - self) (1 - w).
Tensor lerp(const Tensor& self, const Tensor& end, double weight, const Tensor& like) {
  const Tensor w = constant(weight, like);
  if (std::abs(w.item<double>()) < 0.5) return self + w * (end - self);
  return end - (end - self) * constant(1.0 - w.item<double>(), like);
}

// g + weight_decay * param, when there is weight decay.
Tensor decayed(const Tensor& grad, const Tensor& param, double weight_decay) {
  return weight_decay != 0 ? grad + constant(weight_decay, param) * param : grad;
}

}  // namespace

void sgd_update(Tensor param, const Tensor& grad, Tensor momentum_buffer, const SgdAttrs& a) {
  autograd::NoGradGuard no_grad;
  Tensor g = decayed(grad, param, a.weight_decay);
  if (a.momentum != 0) {
    const Tensor b =
        a.first_step ? g : momentum_buffer * constant(a.momentum, param) + constant(1.0 - a.dampening, param) * g;
    momentum_buffer.copy_(b);
    g = a.nesterov ? g + constant(a.momentum, param) * b : b;
  }
  param.copy_(param + constant(-a.lr, param) * g);
}

void adam_update(Tensor param, const Tensor& grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor max_exp_avg_sq,
                 const AdamAttrs& a) {
  autograd::NoGradGuard no_grad;
  Tensor p = param, g = grad;
  if (a.weight_decay != 0) {
    if (a.decoupled_weight_decay) {
      p = param * constant(1.0 - a.lr * a.weight_decay, param);
    } else {
      g = decayed(grad, param, a.weight_decay);
    }
  }
  const Tensor m = lerp(exp_avg, g, 1.0 - a.beta1, param);
  const Tensor v = exp_avg_sq * constant(a.beta2, param) + constant(1.0 - a.beta2, param) * g * g;
  exp_avg.copy_(m);
  exp_avg_sq.copy_(v);
  Tensor v_hat = v;
  if (max_exp_avg_sq.defined()) {
    v_hat = maximum(max_exp_avg_sq, v);
    max_exp_avg_sq.copy_(v_hat);
  }
  const Tensor denom = sqrt(v_hat) / constant(a.bias_correction2_sqrt, param) + constant(a.eps, param);
  param.copy_(p + constant(-a.step_size, param) * m / denom);
}

void adagrad_update(Tensor param, const Tensor& grad, Tensor sum, const AdagradAttrs& a) {
  autograd::NoGradGuard no_grad;
  const Tensor g = decayed(grad, param, a.weight_decay);
  const Tensor acc = sum + g * g;
  sum.copy_(acc);
  param.copy_(param + constant(-a.clr, param) * g / (sqrt(acc) + constant(a.eps, param)));
}

void rmsprop_update(Tensor param, const Tensor& grad, Tensor square_avg, Tensor grad_avg, Tensor momentum_buffer,
                    const RmspropAttrs& a) {
  autograd::NoGradGuard no_grad;
  const Tensor g = decayed(grad, param, a.weight_decay);
  const Tensor sq = square_avg * constant(a.alpha, param) + constant(1.0 - a.alpha, param) * g * g;
  square_avg.copy_(sq);
  Tensor avg = sq;
  if (grad_avg.defined()) {
    const Tensor ga = lerp(grad_avg, g, 1.0 - a.alpha, param);
    grad_avg.copy_(ga);
    avg = sq - ga * ga;
  }
  avg = sqrt(avg) + constant(a.eps, param);
  if (momentum_buffer.defined()) {
    const Tensor b = momentum_buffer * constant(a.momentum, param) + g / avg;
    momentum_buffer.copy_(b);
    param.copy_(param + constant(-a.lr, param) * b);
  } else {
    param.copy_(param + constant(-a.lr, param) * g / avg);
  }
}

}  // namespace ember::reference

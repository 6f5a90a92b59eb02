// The optimizers' fused updates (optimizer_updates.h) and their cost rules.
//
// Cost, per element (the arithmetic of kernels/cpu/optim.cpp):
//   SGD: 2 (p - lr g), +2 weight decay, +3 momentum buffer, +2 nesterov
//   Adam/AdamW: 13 (m lerp 3, v 4, denominator 3, update 3), +2 L2 weight decay (+1 decoupled),
//               +1 amsgrad
//   Adagrad: 7 (sum 2, denominator 2, update 3), +2 weight decay
//   RMSprop: 9 (square average 4, denominator 2, update 3), +5 centered, +2 momentum, +2 weight decay
// Bytes: the gradient read; the parameter and each state buffer read and written.
#include "ops/optimizer_updates.h"

#include "ops/cost.h"
#include "ops/dispatch.h"

namespace ember {
namespace detail {

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdAttrs& attrs) {
  dispatch::run(OpKind::kSgdStep, attrs, {&grad}, {&param, &momentum_buffer});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamAttrs& attrs) {
  dispatch::run(OpKind::kAdamStep, attrs, {&grad}, {&param, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
}

void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradAttrs& attrs) {
  dispatch::run(OpKind::kAdagradStep, attrs, {&grad}, {&param, &sum});
}

void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const RmspropAttrs& attrs) {
  dispatch::run(OpKind::kRmspropStep, attrs, {&grad}, {&param, &square_avg, &grad_avg, &momentum_buffer});
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

// The optimizers' fused updates as ops (SgdStep, AdamStep, AdagradStep, RmspropStep): each reads a
// parameter, its gradient and its state once and writes the parameter and the state in place, in
// one pass. Operands must be contiguous, of the parameter's dtype (float32 or float64) and shape;
// absent optional state is an undefined tensor. A captured training step sees the update as an op
// call like any other.
#pragma once

#include "ember/attrs.h"
#include "ember/tensor.h"

namespace ember::detail {

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdAttrs& attrs);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamAttrs& attrs);
void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradAttrs& attrs);
void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const RmspropAttrs& attrs);

}  // namespace ember::detail

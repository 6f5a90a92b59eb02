// The optimizers' fused updates as ops (SgdStep, AdamStep, AdagradStep, RmspropStep): each reads a
// parameter, its gradient and its state once and writes the parameter and the state in place, in
// one pass. Operands must be contiguous, of the parameter's dtype (float32 or float64) and shape;
// absent optional state is an undefined tensor. A captured training step sees the update as an op
// call like any other.
#pragma once

#include <memory>

#include "ember/attrs.h"
#include "ember/tensor.h"
#include "ops/dispatch.h"

namespace ember::detail {

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdAttrs& attrs);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamAttrs& attrs);
void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradAttrs& attrs);
void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const RmspropAttrs& attrs);

// The same updates with attributes the host computes for each call (Note [host attributes] in
// ops/dispatch.h), as Optimizer::step runs them: a compiled step reads them anew at every replay,
// and leaves the update out when they say skip.
using HostAttrsPtr = std::shared_ptr<dispatch::HostAttrs>;
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const HostAttrsPtr& attrs);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const HostAttrsPtr& attrs);
void adagrad_update(const Tensor& param, const Tensor& grad, const Tensor& sum, const HostAttrsPtr& attrs);
void rmsprop_update(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                    const Tensor& momentum_buffer, const HostAttrsPtr& attrs);

}  // namespace ember::detail

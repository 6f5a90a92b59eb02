// Fused optimizer updates: each call reads a parameter, its gradient and its state once and writes
// the parameter and the state once, in one pass over contiguous float32/float64 memory (SIMD for
// every Highway target, threads above a grain size). The arithmetic follows PyTorch's single-tensor
// (foreach=False) optimizers operation by operation, in the parameter's dtype, with the per-step
// scalars (bias corrections, step sizes) computed in double by the caller as PyTorch does in Python.
//
// Every element goes through the same vector code, including the last partial vector, so results
// do not depend on how threads split the array (checkpoint and resume is bit-identical).
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember::cpu {

// param -= lr * d, where g = grad + weight_decay * param and, with momentum,
// buf = first_step ? g : momentum * buf + (1 - dampening) * g; d = nesterov ? g + momentum * buf : buf.
struct SgdStep {
  double lr = 0;
  double momentum = 0;  // 0: no buffer (momentum_buffer is null)
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the buffer is (re)initialised to the gradient, as PyTorch does
};
void sgd_step(DType dtype, const SgdStep& step, void* param, const void* grad, void* momentum_buffer, int64_t n);

// Adam / AdamW (decoupled_weight_decay): m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
// v_max = max(v_max, v) with amsgrad; param -= step_size * m / (sqrt(v_hat) / bias_correction2_sqrt + eps).
struct AdamStep {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW: param *= 1 - lr * weight_decay first
  double step_size = 0;                 // lr / (1 - beta1^step)
  double bias_correction2_sqrt = 0;     // sqrt(1 - beta2^step)
};
// max_exp_avg_sq is null unless amsgrad.
void adam_step(DType dtype, const AdamStep& step, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, int64_t n);

// sum += g * g; param -= clr * g / (sqrt(sum) + eps), g = grad + weight_decay * param.
struct AdagradStep {
  double clr = 0;  // lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0;
  double eps = 0;
};
void adagrad_step(DType dtype, const AdagradStep& step, void* param, const void* grad, void* sum, int64_t n);

// square_avg = alpha * square_avg + (1 - alpha) * g * g; centered: grad_avg = lerp(grad_avg, g, 1 - alpha)
// and avg = sqrt(square_avg - grad_avg^2) + eps, else sqrt(square_avg) + eps; with momentum
// buf = momentum * buf + g / avg and param -= lr * buf, else param -= lr * g / avg.
struct RmspropStep {
  double lr = 0;
  double alpha = 0;
  double eps = 0;
  double weight_decay = 0;
  double momentum = 0;    // 0: momentum_buffer is null
  bool centered = false;  // false: grad_avg is null
};
void rmsprop_step(DType dtype, const RmspropStep& step, void* param, const void* grad, void* square_avg, void* grad_avg,
                  void* momentum_buffer, int64_t n);

}  // namespace ember::cpu

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

#include "ember/attrs.h"
#include "ember/dtype.h"

namespace ember::cpu {

// The updates themselves: SgdAttrs, AdamAttrs, AdagradAttrs and RmspropAttrs (ember/attrs.h) give
// the formulas. Optional state (momentum_buffer, max_exp_avg_sq, grad_avg) is null when unused.
void sgd_step(DType dtype, const SgdAttrs& step, void* param, const void* grad, void* momentum_buffer, int64_t n);
void adam_step(DType dtype, const AdamAttrs& step, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, int64_t n);
void adagrad_step(DType dtype, const AdagradAttrs& step, void* param, const void* grad, void* sum, int64_t n);
void rmsprop_step(DType dtype, const RmspropAttrs& step, void* param, const void* grad, void* square_avg,
                  void* grad_avg, void* momentum_buffer, int64_t n);

}  // namespace ember::cpu

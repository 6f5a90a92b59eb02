// The CPU class-index loss kernels: cross-entropy fused with its log-softmax, and the negative
// log-likelihood. Scores are a contiguous (outer, classes, inner) buffer (classes at stride inner:
// (N, C) has inner 1, (N, C, d...) has inner = prod(d)); targets a contiguous (outer, inner) int64
// buffer whose entries the op layer has already checked (each in [0, classes) or ignore_index).
#pragma once

#include <cstdint>

#include "base/kernel.h"
#include "ember/dtype.h"

namespace ember::cpu {

struct ClassLossArgs {
  DType dtype = kFloat32;  // float32 or float64, of the scores, losses and gradients
  int64_t outer = 1;
  int64_t classes = 1;
  int64_t inner = 1;
  const int64_t* target = nullptr;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // cross-entropy only
};

// The arguments of a class-loss kernel call: scores (C), (N, C) or (N, C, d...), contiguous; target
// int64 of the scores' shape without the class dim (the CUDA kernels read them the same way).
ClassLossArgs class_loss_args(const KernelCall& c, const Operand& scores, const Operand& target);

// loss[p] = (1 - s) * (lse - x[t]) + s * (lse - mean_c x[c]) for position p with target t (0
// where t == ignore_index), s the label smoothing, lse = log(sum_c exp(x[c])) computed from the
// max (stable), and also written to lse[p] for the backward. One pass over the scores.
void cross_entropy_forward(const ClassLossArgs& args, const void* scores, void* loss, void* lse);

// grad[p, c] = scale[p * scale_stride] * (exp(x[c] - lse[p]) - (1 - s) [c == t] - s / classes), 0
// where t == ignore_index. scale_stride 0 broadcasts one scale (a reduced loss).
void cross_entropy_backward(const ClassLossArgs& args, const void* scores, const void* lse, const void* scale,
                            int64_t scale_stride, void* grad);

// loss[p] = -x[p, t] (0 where t == ignore_index).
void nll_loss_forward(const ClassLossArgs& args, const void* scores, void* loss);
// grad (overwritten) = -scale at each (p, t), 0 elsewhere.
void nll_loss_backward(const ClassLossArgs& args, const void* scale, int64_t scale_stride, void* grad);

}  // namespace ember::cpu

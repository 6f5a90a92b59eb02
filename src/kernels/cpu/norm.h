// The CPU normalization kernels: batch norm over (outer, channels, inner) buffers, and layer norm /
// RMS norm over the rows of a (rows, cols) buffer, forward and fused backward. Buffers are
// contiguous and of one dtype (float32 or float64); statistics are accumulated in double. The op
// layer (src/ops/norm.cpp) checks shapes and allocates.
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember::cpu {

// --- batch norm: x (outer, channels, inner), one statistic per channel -------------------------------

// mean[c] and the biased variance var[c] of channel c over outer * inner elements.
void channel_stats(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* x, void* mean, void* var);

// y = x * scale[c] + shift[c] (the normalization and the affine map folded into one multiply-add).
void channel_affine(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* x, const void* scale,
                    const void* shift, void* y);

// Gradients of y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]. With batch_stats, mean and
// invstd are the batch's own (they depend on x); otherwise they are constants (evaluation with the
// running statistics). weight may be null (1). Each of grad_in, grad_weight, grad_bias may be
// null when not needed.
void batch_norm_backward(DType dtype, int64_t outer, int64_t channels, int64_t inner, bool batch_stats, const void* x,
                         const void* grad_out, const void* mean, const void* invstd, const void* weight, void* grad_in,
                         void* grad_weight, void* grad_bias);

// --- layer norm (center = true) and RMS norm (center = false): x (rows, cols) --------------------------

// y = (x - mean) * rstd * weight + bias per row, with rstd = 1 / sqrt(var + eps) (layer norm) or
// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) (RMS norm). weight and bias may be
// null; mean is written only when center. mean and rstd have one entry per row.
void row_norm_forward(DType dtype, int64_t rows, int64_t cols, double eps, bool center, const void* x,
                      const void* weight, const void* bias, void* y, void* mean, void* rstd);

// One fused pass over x and grad_out: grad_in per row, and the per-column sums grad_weight =
// sum(grad_out * xhat) and grad_bias = sum(grad_out), added up in a fixed order (the result does
// not depend on the thread count). Each output may be null when not needed; mean is read only
// when center.
void row_norm_backward(DType dtype, int64_t rows, int64_t cols, bool center, const void* x, const void* grad_out,
                       const void* mean, const void* rstd, const void* weight, void* grad_in, void* grad_weight,
                       void* grad_bias);

}  // namespace ember::cpu

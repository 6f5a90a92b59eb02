// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "ember/tensor.h"

namespace ember::optim {

// Scales the gradients of `params` in place so that their total norm (the norm_type-norm of the
// per-parameter norms: 2, 1, any p > 0, or infinity) is at most max_norm: every gradient is
// multiplied by min(1, max_norm / (total_norm + 1e-6)). Parameters without a gradient are skipped.
// Returns the total norm before clipping as a 0-dim tensor (of the gradients' promoted dtype;
// float32 0 when no parameter has a gradient). With error_if_nonfinite, a NaN or infinite total
// norm is an error and nothing is scaled.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace ember::optim

// clip_grad_norm_, as torch.nn.utils.clip_grad_norm_ (see ember/optim/clip_grad.h): the norm of each
// gradient, the norm of those norms, then one in-place scale of every gradient.
#include "ember/optim/clip_grad.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  EMBER_CHECK(norm_type > 0 || std::isinf(norm_type), "[clip_grad_norm_] norm_type must be positive or infinity, got ",
              norm_type);
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& param : params) {
    EMBER_CHECK(param.defined(), "[clip_grad_norm_] got an undefined parameter");
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    EMBER_CHECK(grad.is_floating_point(), "[clip_grad_norm_] gradients must be floating point, got ", grad.dtype());
    grads.push_back(grad);
  }
  if (grads.empty()) return scalar_tensor(0.0, kFloat32);

  std::vector<Tensor> norms;
  norms.reserve(grads.size());
  for (const Tensor& grad : grads) norms.push_back(norm(grad, norm_type));
  const Tensor total_norm = norm(stack(norms), norm_type);  // stack promotes mixed dtypes, as torch.stack
  if (error_if_nonfinite) {
    const double total = total_norm.item<double>();
    EMBER_CHECK(std::isfinite(total), "[clip_grad_norm_] the total norm of order ", norm_type, " of the gradients is ",
                total, "; set error_if_nonfinite = false to clip anyway");
  }
  // Always scales (by 1 when the norm is small enough), like PyTorch, which avoids a device sync.
  const Tensor coefficient = clamp(div(Scalar(max_norm), add(total_norm, Scalar(1e-6))), std::nullopt, Scalar(1.0));
  for (Tensor grad : grads) grad.mul_(coefficient.to(grad.dtype()));
  return total_norm;
}

}  // namespace ember::optim

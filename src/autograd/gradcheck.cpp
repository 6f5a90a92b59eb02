// gradcheck: analytical Jacobian (one vector-Jacobian product per output element) against central
// finite differences, element by element.
#include <cmath>
#include <sstream>

#include "autograd/function.h"
#include "core/allocator.h"
#include "ember/ops.h"

namespace ember::autograd {
namespace {

// Address of element `flat` (row-major over the shape) of a strided floating tensor.
double* element_f64(const Tensor& t, int64_t flat) {
  int64_t offset = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.shape()[d];
    offset += (flat % size) * t.strides()[d];
    flat /= size;
  }
  return static_cast<double*>(t.data_ptr()) + offset;
}

// Element `flat` of a float64 tensor on any device, read and written through the host.
double read_element(const Tensor& t, int64_t flat) {
  double value = 0;
  copy_bytes(&value, kCPU, element_f64(t, flat), t.device(), sizeof(value));
  return value;
}
// A write through the data pointer: the version moves, so no form derived from the old values
// (a GEMM's packed B, Note [derived forms] in ember/tensor.h) serves the perturbed ones.
void write_element(const Tensor& t, int64_t flat, double value) {
  copy_bytes(element_f64(t, flat), t.device(), &value, kCPU, sizeof(value));
  t.bump_version();
}

std::vector<double> flat_values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

}  // namespace

bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    EMBER_CHECK(x.dtype() == kFloat64, "[gradcheck] input ", i, " has dtype ", x.dtype(),
                "; finite differences need float64 inputs");
    EMBER_CHECK(x.is_leaf(), "[gradcheck] input ", i, " must be a leaf tensor");
    checked.push_back(i);
  }
  EMBER_CHECK(!checked.empty(), "[gradcheck] no input requires grad");

  Tensor output;
  {
    EnableGradGuard grad_mode;
    output = fn(inputs);
  }
  EMBER_CHECK(output.defined() && output.is_floating_point(), "[gradcheck] fn must return a floating-point tensor");
  EMBER_CHECK(output.requires_grad(), "[gradcheck] the output does not depend on any input that requires grad");
  const int64_t n_out = output.numel();

  std::vector<Tensor> wrt;
  for (size_t i : checked) wrt.push_back(inputs[i]);

  // analytical[k][j * n_in + e]: d output[j] / d input_k[e]
  std::vector<std::vector<double>> analytical(checked.size());
  for (size_t k = 0; k < checked.size(); ++k) analytical[k].assign(n_out * inputs[checked[k]].numel(), 0.0);
  for (int64_t j = 0; j < n_out; ++j) {
    Tensor seed = zeros(output.shape(), TensorOptions(output.device()).with_dtype(output.dtype()));
    seed.view({n_out}).select(0, j).fill_(1.0);
    const std::vector<Tensor> grads = grad({output}, wrt, {seed}, /*retain_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < checked.size(); ++k) {
      if (!grads[k].defined()) continue;
      EMBER_CHECK(grads[k].shape() == wrt[k].shape(), "[gradcheck] gradient for input ", checked[k], " has shape ",
                  grads[k].shape(), ", expected ", wrt[k].shape());
      const std::vector<double> g = flat_values(grads[k]);
      std::copy(g.begin(), g.end(), analytical[k].begin() + j * static_cast<int64_t>(g.size()));
    }
  }

  NoGradGuard no_grad;
  for (size_t k = 0; k < checked.size(); ++k) {
    const Tensor& x = inputs[checked[k]];
    const int64_t n_in = x.numel();
    for (int64_t e = 0; e < n_in; ++e) {
      const double original = read_element(x, e);
      write_element(x, e, original + options.eps);
      const std::vector<double> plus = flat_values(fn(inputs));
      write_element(x, e, original - options.eps);
      const std::vector<double> minus = flat_values(fn(inputs));
      write_element(x, e, original);
      for (int64_t j = 0; j < n_out; ++j) {
        const double numerical = (plus[j] - minus[j]) / (2 * options.eps);
        const double a = analytical[k][j * n_in + e];
        if (std::abs(a - numerical) > options.atol + options.rtol * std::abs(numerical) ||
            std::isnan(a) != std::isnan(numerical)) {
          std::ostringstream msg;
          msg << "[gradcheck] Jacobian mismatch for input " << checked[k] << " (shape " << x.shape() << "), element "
              << e << ", output element " << j << ": analytical " << a << ", numerical " << numerical;
          throw Error(msg.str());
        }
      }
    }
  }
  return true;
}

}  // namespace ember::autograd

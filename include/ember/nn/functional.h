// ember::nn::functional: the layers' math as functions (PyTorch's torch.nn.functional), each
// differentiable. Shapes follow PyTorch: images are NCHW, class scores are (N, C) or (N, C, d...).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace ember::nn {

// A (height, width) pair; one number means both.
struct Pair {
  int64_t h = 0;
  int64_t w = 0;
  Pair(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor)
  Pair(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Pair&) const = default;
};

// How a loss combines its per-element values.
enum class Reduction { kNone, kMean, kSum };

namespace functional {

// --- layers ---------------------------------------------------------------------------------------
inline Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt) {
  return ember::linear(x, weight, bias);
}
// gelu(linear(x, weight, bias), approximate) in one fused kernel (ember::linear_gelu).
inline Tensor linear_gelu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
                          std::string_view approximate = "none") {
  return ember::linear_gelu(x, weight, bias, approximate);
}
// input (N, C_in, H, W) or (C_in, H, W); weight (C_out, C_in / groups, kH, kW); bias (C_out).
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              Pair stride = 1, Pair padding = 0, Pair dilation = 1, int64_t groups = 1);
// stride defaults to kernel_size; padding is -inf padding.
Tensor max_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0,
                  Pair dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size);
// input (N, C) or (N, C, ...). In training, normalizes with the batch statistics and updates the
// running ones in place (unbiased variance, PyTorch's momentum convention) when they are given.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const std::optional<Tensor>& weight = std::nullopt, const std::optional<Tensor>& bias = std::nullopt,
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// Normalizes over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt, const std::optional<Tensor>& bias = std::nullopt,
                  double eps = 1e-5);
// eps unset: the dtype's machine epsilon, as PyTorch.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);
// Zeroes elements with probability p and scales the rest by 1/(1-p); the identity when !training.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true);
inline Tensor embedding(const Tensor& indices, const Tensor& weight) { return ember::embedding(weight, indices); }

// --- activations ------------------------------------------------------------------------------------
inline Tensor relu(const Tensor& x) { return ember::relu(x); }
inline Tensor gelu(const Tensor& x, std::string_view approximate = "none") { return ember::gelu(x, approximate); }
inline Tensor silu(const Tensor& x) { return ember::silu(x); }
inline Tensor tanh(const Tensor& x) { return ember::tanh(x); }
inline Tensor sigmoid(const Tensor& x) { return ember::sigmoid(x); }
inline Tensor softmax(const Tensor& x, int64_t dim) { return ember::softmax(x, dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return ember::log_softmax(x, dim); }

// --- losses -----------------------------------------------------------------------------------------
// input: scores (N, C) or (N, C, d...) or (C); target: int64 class indices (N) / (N, d...) / ().
// Mean reduction averages over the targets that are not ignore_index.
Tensor cross_entropy(const Tensor& input, const Tensor& target, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::kMean, double label_smoothing = 0.0);
// input: log-probabilities, shaped as for cross_entropy.
Tensor nll_loss(const Tensor& input, const Tensor& target, int64_t ignore_index = -100,
                Reduction reduction = Reduction::kMean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::optional<Tensor>& weight = std::nullopt,
                                        const std::optional<Tensor>& pos_weight = std::nullopt,
                                        Reduction reduction = Reduction::kMean);

}  // namespace functional
}  // namespace ember::nn

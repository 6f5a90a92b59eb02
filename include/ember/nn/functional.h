// ember::nn::functional: the layers' math as functions (PyTorch's torch.nn.functional), each
// differentiable. Shapes follow PyTorch: images are NCHW, class scores are (N, C) or (N, C, d...).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace ember::nn {

using ember::Pair;
using ember::Reduction;

namespace functional {

// --- layers ---------------------------------------------------------------------------------------
using ember::adaptive_avg_pool2d;
using ember::avg_pool2d;
using ember::batch_norm;
using ember::conv1d;
using ember::conv2d;
using ember::conv_transpose2d;
using ember::dropout;
using ember::group_norm;
using ember::interpolate;
using ember::layer_norm;
using ember::linear;
using ember::linear_gelu;
using ember::max_pool2d;
using ember::rms_norm;
using ember::scaled_dot_product_attention;
// PyTorch's argument order: indices first.
inline Tensor embedding(const Tensor& indices, const Tensor& weight) { return ember::embedding(weight, indices); }

// --- activations ------------------------------------------------------------------------------------
using ember::gelu;
using ember::log_softmax;
using ember::relu;
using ember::sigmoid;
using ember::silu;
using ember::softmax;
using ember::softplus;
using ember::tanh;

// --- losses -----------------------------------------------------------------------------------------
using ember::binary_cross_entropy_with_logits;
using ember::cross_entropy;
using ember::l1_loss;
using ember::mse_loss;
using ember::nll_loss;

}  // namespace functional
}  // namespace ember::nn

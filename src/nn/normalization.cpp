// BatchNorm1d/2d, LayerNorm and RMSNorm: parameters, running-statistics buffers and the momentum
// bookkeeping; the math is nn::functional's.
#include "ember/autograd.h"
#include "ember/nn/init.h"
#include "ember/nn/modules.h"
#include "ember/ops.h"
#include "nn/optional_tensor.h"
#include "nn/repr.h"

namespace ember::nn {
namespace {

void check_normalized_shape(const char* op, const Shape& shape) {
  EMBER_CHECK(!shape.empty(), "[", op, "] normalized_shape must have at least one dim");
  for (int64_t size : shape) {
    EMBER_CHECK(size > 0, "[", op, "] normalized_shape must have positive sizes, got ", shape);
  }
}

}  // namespace

// --- BatchNorm ------------------------------------------------------------------------------------

namespace detail {

BatchNormBase::BatchNormBase(int64_t features, double eps_, std::optional<double> momentum_, bool affine_, bool track,
                             bool with_bias)
    : num_features(features), eps(eps_), momentum(momentum_), affine(affine_), track_running_stats(track) {
  EMBER_CHECK(features > 0, "[BatchNorm] num_features must be positive, got ", features);
  EMBER_CHECK(eps_ >= 0.0, "[BatchNorm] eps must be non-negative, got ", eps_);
  EMBER_CHECK(!momentum_ || (*momentum_ >= 0.0 && *momentum_ <= 1.0), "[BatchNorm] momentum must be in [0, 1], got ",
              momentum_.value_or(0.0));
  if (affine) {
    weight = register_parameter("weight", ember::empty({features}));
    if (with_bias) bias = register_parameter("bias", ember::empty({features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", ember::empty({features}));
    running_var = register_buffer("running_var", ember::empty({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", ember::empty({}, kInt64));
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input_dim(input);
  EMBER_CHECK(input.size(1) == num_features, "[", name(), "] expected ", num_features,
              " channels (dim 1) in the input, got shape ", input.shape());
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    {
      autograd::NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    // momentum = None: the running statistics are the plain average over every batch so far.
    if (!momentum) factor = 1.0 / num_batches_tracked.item<double>();
  }
  // Batch statistics in training, and always when no running statistics are kept.
  const bool use_batch_stats = is_training() || !track_running_stats;
  return functional::batch_norm(input, running_mean, running_var, optional_tensor(weight), optional_tensor(bias),
                                use_batch_stats, factor, eps);
}

std::string BatchNormBase::extra_repr() const {
  return repr::concat(num_features, ", eps=", eps, ", momentum=", repr::optional_number(momentum),
                      ", affine=", repr::boolean(affine), ", bias=", repr::boolean(bias.defined()),
                      ", track_running_stats=", repr::boolean(track_running_stats));
}

}  // namespace detail

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, "[BatchNorm1d] expected 2-D (N, C) or 3-D (N, C, L) input, got ",
              "shape ", input.shape());
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 4, "[BatchNorm2d] expected 4-D (N, C, H, W) input, got shape ", input.shape());
}

// --- LayerNorm ------------------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine, bool with_bias)
    : normalized_shape(shape), eps(eps_), elementwise_affine(affine) {
  check_normalized_shape("LayerNorm", shape);
  if (affine) {
    weight = register_parameter("weight", ember::empty(shape));
    if (with_bias) bias = register_parameter("bias", ember::empty(shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) {
  return functional::layer_norm(input, normalized_shape, optional_tensor(weight), optional_tensor(bias), eps);
}

std::string LayerNorm::extra_repr() const {
  return repr::concat(repr::shape_tuple(normalized_shape), ", eps=", eps,
                      ", elementwise_affine=", repr::boolean(elementwise_affine),
                      ", bias=", repr::boolean(bias.defined()));
}

// --- RMSNorm --------------------------------------------------------------------------------------

RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool affine)
    : normalized_shape(shape), eps(eps_), elementwise_affine(affine) {
  check_normalized_shape("RMSNorm", shape);
  EMBER_CHECK(!eps_ || *eps_ >= 0.0, "[RMSNorm] eps must be non-negative, got ", eps_.value_or(0.0));
  if (affine) weight = register_parameter("weight", ember::empty(shape));
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& input) {
  return functional::rms_norm(input, normalized_shape, optional_tensor(weight), eps);
}

std::string RMSNorm::extra_repr() const {
  return repr::concat(repr::shape_tuple(normalized_shape), ", eps=", repr::optional_number(eps),
                      ", elementwise_affine=", repr::boolean(elementwise_affine));
}

// --- GroupNorm ------------------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine_)
    : num_groups(groups), num_channels(channels), eps(eps_), affine(affine_) {
  EMBER_CHECK(groups > 0 && channels >= 0 && channels % groups == 0,
              "[GroupNorm] num_channels must be divisible by num_groups (a positive number), got num_groups=", groups,
              " and num_channels=", channels);
  if (affine) {
    weight = register_parameter("weight", ember::empty({channels}));
    bias = register_parameter("bias", ember::empty({channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& input) {
  return functional::group_norm(input, num_groups, optional_tensor(weight), optional_tensor(bias), eps);
}

std::string GroupNorm::extra_repr() const {
  return repr::concat(num_groups, ", ", num_channels, ", eps=", eps, ", affine=", repr::boolean(affine));
}

}  // namespace ember::nn

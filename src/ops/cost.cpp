// Cost rules (see cost.h for the conventions): FLOPs and bytes per op call, by op family.
#include "ops/cost.h"

#include <vector>

#include "ember/autograd.h"

namespace ember {

namespace {

double nbytes(const Tensor& t) { return static_cast<double>(t.numel()) * static_cast<double>(t.element_size()); }
double as_double(int64_t n) { return static_cast<double>(n); }
double size_of(DType dtype) { return static_cast<double>(dtype_size(dtype)); }
constexpr double kIndexBytes = 8;  // int64 argmax indices and class targets

}  // namespace

OpCost elementwise_cost(OpKind op, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  OpCost cost;
  cost.flops = static_cast<double>(op_info(op).flops_per_element) * static_cast<double>(out.numel());
  cost.bytes = nbytes(out);
  for (const Tensor* t : inputs) {
    if (t != nullptr && t->defined()) cost.bytes += nbytes(*t);
  }
  return cost;
}

OpCost reduction_cost(const Tensor& in, const Tensor& out) {
  return {static_cast<double>(in.numel()), nbytes(in) + nbytes(out)};
}

OpCost matmul_cost(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) {
  const double b = static_cast<double>(batch), size = static_cast<double>(dtype_size(dtype));
  return {2.0 * b * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
          b * size * static_cast<double>(m * k + k * n + m * n)};
}

OpCost matmul_cost(const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t n, int64_t k) {
  OpCost cost = matmul_cost(batch, m, n, k, a.dtype());
  cost.bytes = nbytes(a) + nbytes(b) + as_double(batch * m * n) * size_of(a.dtype());
  return cost;
}

OpCost linear_cost(int64_t rows, int64_t in_features, int64_t out_features, bool has_bias, DType dtype) {
  const double size = size_of(dtype);
  OpCost cost;
  cost.flops = 2.0 * as_double(rows) * as_double(in_features) * as_double(out_features);
  cost.bytes = size * as_double(rows * in_features + in_features * out_features + rows * out_features);
  if (has_bias) {
    cost.flops += as_double(rows * out_features);
    cost.bytes += size * as_double(out_features);
  }
  return cost;
}

OpCost threshold_backward_cost(const Tensor& out) { return {as_double(out.numel()), 3.0 * nbytes(out)}; }

OpCost softmax_cost(OpKind op, const Tensor& in) {
  return {static_cast<double>(op_info(op).flops_per_element) * as_double(in.numel()), 2.0 * nbytes(in)};
}

// --- convolution ------------------------------------------------------------------------------------

namespace {

struct ConvSizes {
  double gemm_flops;                      // 2 N C_out P K: one of forward, grad_input, grad_weight
  double input, weight, output, columns;  // element counts
};

ConvSizes conv_sizes(const ConvShape& s) {
  const double positions = as_double(s.out_height * s.out_width);
  const double k = as_double(s.in_channels / s.groups * s.kernel_h * s.kernel_w);
  ConvSizes z;
  z.gemm_flops = 2.0 * as_double(s.batch * s.out_channels) * positions * k;
  z.input = as_double(s.batch * s.in_channels * s.in_height * s.in_width);
  z.weight = as_double(s.out_channels) * k;
  z.output = as_double(s.batch * s.out_channels) * positions;
  z.columns = as_double(s.batch * s.groups) * k * positions;
  return z;
}

}  // namespace

OpCost conv2d_cost(const ConvShape& s, bool has_bias, DType dtype) {
  const ConvSizes z = conv_sizes(s);
  OpCost cost;
  cost.flops = z.gemm_flops + (has_bias ? z.output : 0.0);
  cost.bytes =
      size_of(dtype) * (z.input + z.weight + z.output + 2.0 * z.columns + (has_bias ? as_double(s.out_channels) : 0.0));
  return cost;
}

OpCost conv2d_backward_cost(const ConvShape& s, bool grad_input, bool grad_weight, bool grad_bias, DType dtype) {
  const ConvSizes z = conv_sizes(s);
  double flops = 0, elements = 0;
  if (grad_input) {
    flops += z.gemm_flops;
    elements += z.output + z.weight + z.input + 2.0 * z.columns;
  }
  if (grad_weight) {
    flops += z.gemm_flops;
    elements += z.output + z.input + z.weight + 2.0 * z.columns;
  }
  if (grad_bias) {
    flops += z.output;
    elements += z.output + as_double(s.out_channels);
  }
  return {flops, size_of(dtype) * elements};
}

// --- pooling --------------------------------------------------------------------------------------

OpCost pool2d_cost(PoolKind kind, int64_t in_numel, int64_t out_numel, int64_t window, DType dtype) {
  const double in = as_double(in_numel), out = as_double(out_numel), size = size_of(dtype);
  switch (kind) {
    case PoolKind::kMax:
      return {out * as_double(window), size * (in + out) + kIndexBytes * out};
    case PoolKind::kAvg:
      return {out * as_double(window) + out, size * (in + out)};
    case PoolKind::kAdaptiveAvg:
      return {in + out, size * (in + out)};
  }
  return {};
}

OpCost pool2d_backward_cost(PoolKind kind, int64_t in_numel, int64_t out_numel, DType dtype) {
  const double in = as_double(in_numel), out = as_double(out_numel), size = size_of(dtype);
  if (kind == PoolKind::kMax) return {out, size * (out + in) + kIndexBytes * out};
  return {in, size * (out + in)};
}

// --- normalization ----------------------------------------------------------------------------------

OpCost row_norm_cost(bool center, int64_t rows, int64_t cols, bool has_weight, bool has_bias, DType dtype) {
  const double elements = as_double(rows * cols);
  double per_element = center ? 6.0 : 3.0;
  if (has_weight) per_element += 1;
  if (has_bias) per_element += 1;
  const double params = as_double(cols) * ((has_weight ? 1 : 0) + (has_bias ? 1 : 0));
  const double saved = as_double(rows) * (center ? 2 : 1);
  return {per_element * elements, size_of(dtype) * (2.0 * elements + params + saved)};
}

OpCost row_norm_backward_cost(bool /*center*/, int64_t rows, int64_t cols, bool grad_input, bool grad_weight,
                              bool grad_bias, DType dtype) {
  const double elements = as_double(rows * cols);
  double flops = 0, written = 0;
  if (grad_input) {
    flops += 9.0 * elements;
    written += elements;
  }
  if (grad_weight) {
    flops += 2.0 * elements;
    written += as_double(cols);
  }
  if (grad_bias) {
    flops += elements;
    written += as_double(cols);
  }
  // grad_out and the input are read; the saved mean and rstd (2 per row) too.
  return {flops, size_of(dtype) * (2.0 * elements + 2.0 * as_double(rows) + written)};
}

OpCost batch_norm_cost(int64_t numel, int64_t channels, bool training, DType dtype) {
  const double elements = as_double(numel);
  return {(training ? 8.0 : 4.0) * elements, size_of(dtype) * (2.0 * elements + 4.0 * as_double(channels))};
}

// --- losses ---------------------------------------------------------------------------------------

OpCost cross_entropy_cost(int64_t rows, int64_t classes, DType dtype) {
  const double scores = as_double(rows * classes), n = as_double(rows);
  const double per_score = op_info(OpKind::kLogSoftmax).flops_per_element;
  return {per_score * scores + n, size_of(dtype) * (scores + n) + kIndexBytes * n};
}

OpCost cross_entropy_backward_cost(int64_t rows, int64_t classes, DType dtype) {
  const double scores = as_double(rows * classes), n = as_double(rows);
  const double per_score = op_info(OpKind::kLogSoftmax).flops_per_element + 2.0;
  return {per_score * scores, size_of(dtype) * (2.0 * scores + n) + kIndexBytes * n};
}

OpCost nll_loss_cost(int64_t rows, DType dtype) {
  const double n = as_double(rows);
  return {n, size_of(dtype) * 2.0 * n + kIndexBytes * n};
}

// --- indexing -------------------------------------------------------------------------------------

OpCost gather_cost(const Tensor& out, const Tensor& index) { return {0.0, 2.0 * nbytes(out) + nbytes(index)}; }

OpCost scatter_add_cost(const Tensor& x, const Tensor& index, const Tensor& src) {
  return {as_double(src.numel()), 2.0 * nbytes(x) + 3.0 * nbytes(src) + nbytes(index)};
}

// --- optimizers -------------------------------------------------------------------------------------

OpCost optimizer_cost(std::string_view optimizer, const std::map<std::string, double>& options, int64_t numel,
                      int state_buffers, DType dtype) {
  auto option = [&](const char* name) {
    const auto it = options.find(name);
    return it == options.end() ? 0.0 : it->second;
  };
  const bool weight_decay = option("weight_decay") != 0;
  double per_element = 0;
  if (optimizer == "SGD") {
    per_element = 2;
    if (weight_decay) per_element += 2;
    if (option("momentum") != 0) per_element += 3 + (option("nesterov") != 0 ? 2 : 0);
  } else if (optimizer == "Adam" || optimizer == "AdamW") {
    per_element = 13;
    if (weight_decay) per_element += optimizer == "AdamW" ? 1 : 2;
    if (option("amsgrad") != 0) per_element += 1;
  } else if (optimizer == "Adagrad") {
    per_element = 7 + (weight_decay ? 2 : 0);
  } else if (optimizer == "RMSprop") {
    per_element = 9 + (weight_decay ? 2 : 0) + (option("centered") != 0 ? 5 : 0) + (option("momentum") != 0 ? 2 : 0);
  }
  const double elements = as_double(numel);
  return {per_element * elements, size_of(dtype) * elements * (3.0 + 2.0 * state_buffers)};
}

// --- backward nodes -------------------------------------------------------------------------------

std::optional<OpCost> backward_cost(std::string_view node, const Tensor& grad_output,
                                    std::span<const NodeOperand> inputs) {
  if (inputs.empty() || inputs[0].shape == nullptr) return std::nullopt;
  const Shape& in = *inputs[0].shape;
  const DType dtype = inputs[0].dtype;
  if (node == "conv2d" && inputs.size() >= 2 && (in.size() == 3 || in.size() == 4) && inputs[1].shape->size() == 4 &&
      (grad_output.dim() == 3 || grad_output.dim() == 4)) {
    const Shape& w = *inputs[1].shape;
    const bool batched = in.size() == 4;
    ConvShape s;
    s.batch = batched ? in[0] : 1;
    s.in_channels = in[in.size() - 3];
    s.in_height = in[in.size() - 2];
    s.in_width = in[in.size() - 1];
    s.out_channels = w[0];
    s.groups = w[1] > 0 ? s.in_channels / w[1] : 1;
    s.kernel_h = w[2];
    s.kernel_w = w[3];
    s.out_height = grad_output.size(-2);
    s.out_width = grad_output.size(-1);
    const bool grad_bias = inputs.size() >= 3 && inputs[2].needs_grad;
    return conv2d_backward_cost(s, inputs[0].needs_grad, inputs[1].needs_grad, grad_bias, dtype);
  }
  if (node == "max_pool2d") return pool2d_backward_cost(PoolKind::kMax, in.numel(), grad_output.numel(), dtype);
  if (node == "avg_pool2d") return pool2d_backward_cost(PoolKind::kAvg, in.numel(), grad_output.numel(), dtype);
  if (node == "adaptive_avg_pool2d") {
    return pool2d_backward_cost(PoolKind::kAdaptiveAvg, in.numel(), grad_output.numel(), dtype);
  }
  if ((node == "layer_norm" || node == "rms_norm") && in.size() >= 1) {
    // The normalized size is the weight's (or the bias's) when there is one, else the last dim.
    int64_t cols = in[in.size() - 1];
    for (size_t i = 1; i < inputs.size() && i < 3; ++i) {
      if (inputs[i].shape != nullptr && inputs[i].needs_grad) cols = inputs[i].shape->numel();
    }
    const int64_t rows = cols > 0 ? in.numel() / cols : 0;
    const bool grad_weight = inputs.size() >= 2 && inputs[1].needs_grad;
    const bool grad_bias = inputs.size() >= 3 && inputs[2].needs_grad;
    return row_norm_backward_cost(node == "layer_norm", rows, cols, inputs[0].needs_grad, grad_weight, grad_bias,
                                  dtype);
  }
  if (node == "batch_norm" && in.size() >= 2) {
    // Per element: x_hat (2), the two per-channel sums (2), the combination (4) and the
    // weight/bias gradients' terms (2); grad_out and the input read, grad_input written.
    const double elements = as_double(in.numel());
    return OpCost{10.0 * elements, size_of(dtype) * (3.0 * elements + 4.0 * as_double(in[1]))};
  }
  if (node == "cross_entropy" || node == "nll_loss") {
    const int64_t classes = in.size() >= 2 ? in[1] : (in.size() == 1 ? in[0] : 1);
    const int64_t rows = classes > 0 ? in.numel() / classes : 0;
    if (node == "nll_loss") {
      // One gradient per row into a zeroed (rows, classes) gradient.
      return OpCost{as_double(rows), size_of(dtype) * as_double(rows * classes + rows) + kIndexBytes * as_double(rows)};
    }
    return cross_entropy_backward_cost(rows, classes, dtype);
  }
  return std::nullopt;
}

std::optional<OpCost> backward_cost(const autograd::Node& node, const Tensor& grad_output) {
  std::vector<NodeOperand> operands;
  operands.reserve(node.inputs().size());
  for (const autograd::Node::Input& input : node.inputs()) {
    operands.push_back({&input.shape, input.dtype, input.edge.node != nullptr});
  }
  return backward_cost(node.name(), grad_output, operands);
}

}  // namespace ember

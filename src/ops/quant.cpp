// quantize, dequantize, quantize_int8, quantized_linear and interleave (ember/quant.h):
// inference-only ops over the block dtypes and per-row int8.
//
// Shape rules: quantize and dequantize keep the shape (the last dim a multiple of 32 for the block
// dtypes); quantize_int8 gives values of x's shape and scales without its last dim;
// quantized_linear maps (..., in) to (..., out), through the QuantizedMatmul primitive on the rows
// of x as a matrix (QuantizedMatmulAttrs says whether the weight is interleaved); interleave stacks
// its weights' rows into one (sum of out, in) matrix of their dtype, through the Interleave
// primitive.
// Dtype rules: quantize reads float32 (other float dtypes are converted first); dequantize gives
// float32; quantized_linear reads float32 activations, float32 scales and bias, and gives float32.
// Cost: quantize and dequantize: a few operations per value, bytes in and out at their sizes
// (18/32 bytes per q4_0 value); quantized_matmul: 2 m n k operations on the integer dot products,
// every operand read once (the weights at their packed size); interleave: no arithmetic, every byte
// read and written once.
#include "ember/quant.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {

namespace {

void check_finite(const char* op, const Tensor& x) {
  EMBER_CHECK(le(abs(x), std::numeric_limits<float>::max()).all().item<bool>(), "[", op,
              "] the input holds NaN or Inf, which cannot be quantized");
}

Tensor float_operand(const char* op, const Tensor& x) {
  EMBER_CHECK(x.defined(), "[", op, "] the input is undefined");
  EMBER_CHECK(x.device().is_cpu(), "[", op, "] is implemented on the CPU only, got a tensor on ", x.device());
  EMBER_CHECK(is_floating(x.dtype()), "[", op, "] expected a floating-point input, got ", x.dtype());
  return detail::kernel_operand(x, kFloat32);
}

}  // namespace

Tensor quantize(const Tensor& x, DType dtype) {
  EMBER_CHECK(is_block_quantized(dtype), "[quantize] ", dtype, " is not a block-quantized dtype (q8_0, q4_0, q4_1)");
  const Tensor input = float_operand("quantize", x);
  EMBER_CHECK(input.dim() >= 1 && input.size(-1) % kQuantBlock == 0, "[quantize] ", dtype, " stores rows in blocks of ",
              kQuantBlock, " values: the last dim must be a multiple of ", kQuantBlock, ", got shape ", x.shape());
  check_finite("quantize", input);
  const Tensor out = detail::make_empty(input.shape(), dtype, input.device());
  dispatch::run(OpKind::kQuantize, {}, {&input}, {&out});
  return out;
}

Tensor dequantize(const Tensor& q) {
  EMBER_CHECK(q.defined(), "[dequantize] the input is undefined");
  EMBER_CHECK(is_block_quantized(q.dtype()), "[dequantize] expected a q8_0, q4_0 or q4_1 tensor, got ", q.dtype());
  const Tensor out = detail::make_empty(q.shape(), kFloat32, q.device());
  dispatch::run(OpKind::kDequantize, {}, {&q}, {&out});
  return out;
}

Int8Rows quantize_int8(const Tensor& x) {
  const Tensor input = float_operand("quantize_int8", x);
  EMBER_CHECK(input.dim() >= 1, "[quantize_int8] expected at least 1 dim, got a 0-dim tensor");
  check_finite("quantize_int8", input);
  std::vector<int64_t> rows = input.shape().vec();
  rows.pop_back();
  Int8Rows out{detail::make_empty(input.shape(), kInt8, input.device()),
               detail::make_empty(Shape(rows), kFloat32, input.device())};
  dispatch::run(OpKind::kQuantize, {}, {&input}, {&out.values, &out.scales});
  return out;
}

namespace {

// The shared front-end: x (..., in) against a weight (out, in) in `weight`'s layout.
Tensor quantized_linear_impl(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& scale,
                             const std::optional<Tensor>& bias, bool interleaved) {
  constexpr const char* kOp = "quantized_linear";
  const Tensor input = float_operand(kOp, x);
  EMBER_CHECK(weight.defined() && weight.dim() == 2, "[", kOp, "] expected a 2-D weight (out, in), got ",
              weight.defined() ? weight.shape() : Shape{});
  const bool block = is_block_quantized(weight.dtype());
  EMBER_CHECK(block || weight.dtype() == kInt8, "[", kOp, "] expected a q8_0, q4_0, q4_1 or int8 weight, got ",
              weight.dtype());
  EMBER_CHECK(block != scale.has_value(), "[", kOp, "] ",
              block ? "a block-quantized weight carries its scales: pass no scale"
                    : "an int8 weight needs its per-row float32 scales");
  // A block weight's rows may be zero-padded to whole blocks: in_features rounded up to 32.
  const int64_t out_features = weight.size(0), in_features = input.dim() >= 1 ? input.size(-1) : 0;
  const int64_t stored = block ? (in_features + kQuantBlock - 1) / kQuantBlock * kQuantBlock : in_features;
  EMBER_CHECK(input.dim() >= 1 && weight.size(1) == stored, "[", kOp, "] input of shape ", x.shape(),
              " does not match the weight's in_features ", weight.size(1));
  Tensor scale_operand, bias_operand;
  if (scale) {
    EMBER_CHECK(scale->dtype() == kFloat32 && scale->shape() == Shape{out_features}, "[", kOp,
                "] expected float32 scales of shape (", out_features, "), got ", scale->dtype(), " ", scale->shape());
    scale_operand = scale->contiguous();
  }
  if (bias) {
    EMBER_CHECK(bias->shape() == Shape{out_features}, "[", kOp, "] expected a bias of shape (", out_features, "), got ",
                bias->shape());
    bias_operand = detail::kernel_operand(*bias, kFloat32);
  }
  const Tensor weight_operand = weight.contiguous();
  const Tensor rows = input.reshape({-1, in_features});
  std::vector<int64_t> result = input.shape().vec();
  result.back() = out_features;
  const Tensor out = detail::make_empty({rows.size(0), out_features}, kFloat32, input.device());
  dispatch::run(OpKind::kQuantizedMatmul, QuantizedMatmulAttrs{interleaved},
                {&rows, &weight_operand, scale ? &scale_operand : nullptr, bias ? &bias_operand : nullptr}, {&out});
  return out.view(Shape(result));
}

}  // namespace

Tensor quantized_linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& scale,
                        const std::optional<Tensor>& bias) {
  return quantized_linear_impl(x, weight, scale, bias, false);
}

InterleavedWeight interleave(const Tensor& weight) { return interleave(std::vector<Tensor>{weight}); }

InterleavedWeight interleave(const std::vector<Tensor>& weights) {
  EMBER_CHECK(!weights.empty(), "[interleave] expected at least one weight");
  std::vector<Tensor> parts;
  int64_t rows = 0;
  for (const Tensor& w : weights) {
    EMBER_CHECK(w.defined() && w.dim() == 2 && is_block_quantized(w.dtype()),
                "[interleave] expected 2-D q8_0, q4_0 or q4_1 weights (out, in), got ",
                w.defined() ? w.shape() : Shape{}, " ", w.defined() ? w.dtype() : kFloat32);
    EMBER_CHECK(w.device().is_cpu(), "[interleave] is implemented on the CPU only, got a weight on ", w.device());
    EMBER_CHECK(w.dtype() == weights[0].dtype() && w.size(1) == weights[0].size(1),
                "[interleave] stacked weights must share their dtype and in_features, got ", weights[0].dtype(), " ",
                weights[0].shape(), " and ", w.dtype(), " ", w.shape());
    parts.push_back(w.contiguous());
    rows += w.size(0);
  }
  Tensor out = detail::make_empty({rows, weights[0].size(1)}, weights[0].dtype(), weights[0].device());
  std::vector<const Tensor*> inputs;
  for (const Tensor& p : parts) inputs.push_back(&p);
  const Tensor* outputs[] = {&out};
  dispatch::run(OpKind::kInterleave, {}, inputs, outputs);
  return {out};
}

Tensor quantized_linear(const Tensor& x, const InterleavedWeight& weight, const std::optional<Tensor>& bias) {
  EMBER_CHECK(weight.data.defined(), "[quantized_linear] the interleaved weight is empty (make it with interleave)");
  return quantized_linear_impl(x, weight.data, std::nullopt, bias, true);
}

InterleavedStack& InterleavedStack::operator=(InterleavedStack&& other) noexcept {
  if (this == &other) return *this;
  const std::scoped_lock lock(mutex_, other.mutex_);
  weights_ = std::move(other.weights_);
  interleaved_ = std::move(other.interleaved_);
  made_from_ = std::move(other.made_from_);
  return *this;
}

bool InterleavedStack::stackable() const {
  if (weights_.empty()) return false;
  const Tensor& first = *weights_[0];
  return std::all_of(weights_.begin(), weights_.end(), [&](const Tensor* w) {
    return w->dim() == 2 && is_block_quantized(w->dtype()) && w->dtype() == first.dtype() &&
           w->size(1) == first.size(1);
  });
}

InterleavedWeight InterleavedStack::current() {
  // The weights the copy was made from are held, so no other tensor can take their memory: equal
  // data and version mean the same values.
  bool fresh = made_from_.size() == weights_.size();
  for (size_t i = 0; fresh && i < weights_.size(); ++i) {
    fresh = made_from_[i].first.data_ptr() == weights_[i]->data_ptr() &&
            made_from_[i].second == weights_[i]->version() && !weights_[i]->impl().storage->shared_outside();
  }
  if (!fresh) {
    std::vector<Tensor> weights;
    std::vector<std::pair<Tensor, uint32_t>> made_from;
    for (const Tensor* w : weights_) {
      weights.push_back(*w);
      made_from.emplace_back(*w, w->version());
    }
    interleaved_ = interleave(weights);  // may throw: then nothing is marked current
    made_from_ = std::move(made_from);
  }
  return interleaved_;
}

void InterleavedStack::prepare() {
  const std::lock_guard lock(mutex_);
  current();
}

Tensor InterleavedStack::apply(const Tensor& x, const std::optional<Tensor>& bias) {
  InterleavedWeight weight;
  {
    const std::lock_guard lock(mutex_);
    weight = current();
  }
  return quantized_linear(x, weight, bias);
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

OpCost per_value_cost(const KernelCall& c) {
  return {4.0 * cost::as_double(c.inputs[0].numel()), cost::operand_bytes(c)};
}

OpCost quantized_matmul_cost(const KernelCall& c) {
  const double m = cost::as_double(c.inputs[0].size(0)), k = cost::as_double(c.inputs[0].size(1));
  const double n = cost::as_double(c.inputs[1].size(0));
  return {2.0 * m * n * k, cost::operand_bytes(c)};
}

}  // namespace

void define_quant_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kQuantize, per_value_cost);
  table.set_cost(OpKind::kDequantize, per_value_cost);
  table.set_cost(OpKind::kQuantizedMatmul, quantized_matmul_cost);
  table.set_cost(OpKind::kInterleave, [](const KernelCall& c) { return OpCost{0.0, cost::operand_bytes(c)}; });
}

}  // namespace ember

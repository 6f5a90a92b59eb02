// Linear, Conv2d, ConvTranspose2d and Embedding: the layers with weight matrices, and PyTorch's
// default initialization for them.
#include <cmath>
#include <sstream>

#include "ember/autograd.h"
#include "ember/nn/init.h"
#include "ember/nn/modules.h"
#include "ember/ops.h"
#include "ember/quant.h"
#include "nn/optional_tensor.h"
#include "nn/repr.h"

namespace ember::nn {
namespace {

// PyTorch's reset_parameters for Linear and Conv*: kaiming_uniform_(weight, a = sqrt(5)), which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the same range.
void reset_weight_and_bias(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

// --- Linear ---------------------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  EMBER_CHECK(in >= 0 && out >= 0, "[Linear] in_features and out_features must be non-negative, got ", in, " and ",
              out);
  weight = register_parameter("weight", ember::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", ember::empty({out}));
  reset_parameters();
}

void Linear::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor Linear::forward(const Tensor& input) {
  if (!is_quantized()) return functional::linear(input, weight, optional_tensor(bias));
  if (dynamic_activations && interleaved_ && is_block_quantized(weight.dtype()))
    return interleaved_->apply(input, optional_tensor(bias));
  if (dynamic_activations) return quantized_linear(input, weight, optional_tensor(weight_scale), optional_tensor(bias));
  const Tensor dequantized = weight_scale.defined() ? weight.to(kFloat32) * weight_scale.unsqueeze(1)
                                                    : dequantize(weight).narrow(1, 0, in_features);
  return functional::linear(input.to(kFloat32), dequantized, optional_tensor(bias));
}

void Linear::quantize_(DType dtype, bool dynamic) {
  EMBER_CHECK(!is_quantized(), "[Linear::quantize_] the weight is already ", weight.dtype());
  EMBER_CHECK(is_block_quantized(dtype) || dtype == kInt8,
              "[Linear::quantize_] expected q8_0, q4_0, q4_1 or int8, got ", dtype);
  const autograd::NoGradGuard no_grad;
  if (dtype == kInt8) {
    const auto [values, scales] = quantize_int8(weight);
    weight_scale = register_buffer("weight_scale", scales);
    convert_parameter_to_buffer("weight", values);
  } else {
    // Rows of whole blocks: a layer whose in_features is no multiple of 32 gets zero columns.
    const int64_t padding = (kQuantBlock - in_features % kQuantBlock) % kQuantBlock;
    convert_parameter_to_buffer("weight", quantize(padding > 0 ? pad(weight, {0, padding}) : weight, dtype));
  }
  if (bias.defined()) bias.requires_grad_(false);
  dynamic_activations = dynamic;
  if (dtype != kInt8) {
    interleaved_ = std::make_shared<InterleavedStack>(std::vector<const Tensor*>{&weight});
    if (dynamic) interleaved_->prepare();  // loading pays for the copy, not the first product
  }
}

std::string Linear::extra_repr() const {
  return repr::concat("in_features=", in_features, ", out_features=", out_features,
                      ", bias=", repr::boolean(bias.defined()), is_quantized() ? ", weight=" : "",
                      is_quantized() ? std::string(dtype_name(weight.dtype())) : "");
}

QuantizedLinear::QuantizedLinear(int64_t in, int64_t out, DType dtype, bool with_bias) : Linear(in, out, with_bias) {
  quantize_(dtype);
}

// --- Conv1d ---------------------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, int64_t stride_, int64_t padding_, int64_t dilation_,
               int64_t groups_, bool with_bias)
    : in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      stride(stride_),
      padding(padding_),
      dilation(dilation_),
      groups(groups_) {
  EMBER_CHECK(groups > 0, "[Conv1d] groups must be positive, got ", groups);
  EMBER_CHECK(in > 0 && out > 0, "[Conv1d] in_channels and out_channels must be positive, got ", in, " and ", out);
  EMBER_CHECK(in % groups == 0 && out % groups == 0, "[Conv1d] in_channels (", in, ") and out_channels (", out,
              ") must both be divisible by groups (", groups, ")");
  EMBER_CHECK(kernel > 0, "[Conv1d] kernel_size must be positive, got ", kernel);
  EMBER_CHECK(stride > 0, "[Conv1d] stride must be positive, got ", stride);
  EMBER_CHECK(padding >= 0, "[Conv1d] padding must be non-negative, got ", padding);
  EMBER_CHECK(dilation > 0, "[Conv1d] dilation must be positive, got ", dilation);
  weight = register_parameter("weight", ember::empty({out, in / groups, kernel}));
  if (with_bias) bias = register_parameter("bias", ember::empty({out}));
  reset_parameters();
}

void Conv1d::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor Conv1d::forward(const Tensor& input) {
  return functional::conv1d(input, weight, optional_tensor(bias), stride, padding, dilation, groups);
}

std::string Conv1d::extra_repr() const {
  // PyTorch's form, one-element tuples included: "4, 8, kernel_size=(3,), stride=(1,)".
  std::ostringstream out;
  out << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size << ",), stride=(" << stride << ",)";
  if (padding != 0) out << ", padding=(" << padding << ",)";
  if (dilation != 1) out << ", dilation=(" << dilation << ",)";
  if (groups != 1) out << ", groups=" << groups;
  if (!bias.defined()) out << ", bias=false";
  return out.str();
}

// --- Conv2d ---------------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, Pair kernel, Pair stride_, Pair padding_, Pair dilation_, int64_t groups_,
               bool with_bias)
    : in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      stride(stride_),
      padding(padding_),
      dilation(dilation_),
      groups(groups_) {
  EMBER_CHECK(groups > 0, "[Conv2d] groups must be positive, got ", groups);
  EMBER_CHECK(in > 0 && out > 0, "[Conv2d] in_channels and out_channels must be positive, got ", in, " and ", out);
  EMBER_CHECK(in % groups == 0 && out % groups == 0, "[Conv2d] in_channels (", in, ") and out_channels (", out,
              ") must both be divisible by groups (", groups, ")");
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, "[Conv2d] kernel_size must be positive, got ", repr::tuple(kernel));
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[Conv2d] stride must be positive, got ", repr::tuple(stride));
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0, "[Conv2d] padding must be non-negative, got ", repr::tuple(padding));
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[Conv2d] dilation must be positive, got ", repr::tuple(dilation));
  weight = register_parameter("weight", ember::empty({out, in / groups, kernel.h, kernel.w}));
  if (with_bias) bias = register_parameter("bias", ember::empty({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor Conv2d::forward(const Tensor& input) {
  return functional::conv2d(input, weight, optional_tensor(bias), stride, padding, dilation, groups);
}

std::string Conv2d::extra_repr() const {
  // PyTorch's form: optional arguments appear only when they differ from their defaults.
  std::ostringstream out;
  out << in_channels << ", " << out_channels << ", kernel_size=" << repr::tuple(kernel_size)
      << ", stride=" << repr::tuple(stride);
  if (padding != Pair(0)) out << ", padding=" << repr::tuple(padding);
  if (dilation != Pair(1)) out << ", dilation=" << repr::tuple(dilation);
  if (groups != 1) out << ", groups=" << groups;
  if (!bias.defined()) out << ", bias=false";
  return out.str();
}

// --- ConvTranspose2d ------------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Pair kernel, Pair stride_, Pair padding_,
                                 Pair output_padding_, int64_t groups_, bool with_bias, Pair dilation_)
    : in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      stride(stride_),
      padding(padding_),
      output_padding(output_padding_),
      groups(groups_),
      dilation(dilation_) {
  EMBER_CHECK(groups > 0, "[ConvTranspose2d] groups must be positive, got ", groups);
  EMBER_CHECK(in > 0 && out > 0, "[ConvTranspose2d] in_channels and out_channels must be positive, got ", in, " and ",
              out);
  EMBER_CHECK(in % groups == 0 && out % groups == 0, "[ConvTranspose2d] in_channels (", in, ") and out_channels (", out,
              ") must both be divisible by groups (", groups, ")");
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, "[ConvTranspose2d] kernel_size must be positive, got ",
              repr::tuple(kernel));
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[ConvTranspose2d] stride must be positive, got ", repr::tuple(stride));
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0, "[ConvTranspose2d] padding must be non-negative, got ",
              repr::tuple(padding));
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[ConvTranspose2d] dilation must be positive, got ",
              repr::tuple(dilation));
  EMBER_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
                  (output_padding.h < stride.h || output_padding.h < dilation.h) &&
                  (output_padding.w < stride.w || output_padding.w < dilation.w),
              "[ConvTranspose2d] output_padding ", repr::tuple(output_padding),
              " must be non-negative and smaller than either stride ", repr::tuple(stride), " or dilation ",
              repr::tuple(dilation), " in each dim");
  weight = register_parameter("weight", ember::empty({in, out / groups, kernel.h, kernel.w}));
  if (with_bias) bias = register_parameter("bias", ember::empty({out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { reset_weight_and_bias(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return functional::conv_transpose2d(input, weight, optional_tensor(bias), stride, padding, output_padding, groups,
                                      dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  // PyTorch's form (_ConvNd.extra_repr): optional arguments only when they differ from their defaults.
  std::ostringstream out;
  out << in_channels << ", " << out_channels << ", kernel_size=" << repr::tuple(kernel_size)
      << ", stride=" << repr::tuple(stride);
  if (padding != Pair(0)) out << ", padding=" << repr::tuple(padding);
  if (dilation != Pair(1)) out << ", dilation=" << repr::tuple(dilation);
  if (output_padding != Pair(0)) out << ", output_padding=" << repr::tuple(output_padding);
  if (groups != 1) out << ", groups=" << groups;
  if (!bias.defined()) out << ", bias=false";
  return out.str();
}

// --- Embedding ------------------------------------------------------------------------------------

Embedding::Embedding(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  EMBER_CHECK(num >= 0 && dim >= 0, "[Embedding] num_embeddings and embedding_dim must be non-negative, got ", num,
              " and ", dim);
  weight = register_parameter("weight", ember::empty({num, dim}));
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight); }

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight); }

std::string Embedding::extra_repr() const { return repr::concat(num_embeddings, ", ", embedding_dim); }

}  // namespace ember::nn

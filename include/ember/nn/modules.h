// The standard layers and containers, as torch.nn: constructor arguments and their defaults,
// parameter names and shapes, initialization and printed form follow PyTorch. Each layer's math
// is a call into ember::nn::functional; the module holds its parameters, buffers and options.
//
//   auto model = std::make_shared<ember::nn::Sequential>(std::make_shared<ember::nn::Linear>(784, 128),
//                                                        std::make_shared<ember::nn::ReLU>(),
//                                                        std::make_shared<ember::nn::Linear>(128, 10));
//   ember::Tensor logits = (*model)(x);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/nn/functional.h"
#include "ember/nn/module.h"

namespace ember {
class InterleavedStack;
}

namespace ember::nn {

// --- containers -----------------------------------------------------------------------------------

namespace detail {
// An indexed list of child modules named "0", "1", ...: the part ModuleList and Sequential share.
class IndexedModules : public Module {
 public:
  using Iterator = std::vector<std::shared_ptr<Module>>::const_iterator;

  // Appends a module (it becomes child str(size())).
  void push_back(std::shared_ptr<Module> module);
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  // The module at index (negative counts from the end); throws when out of range.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  // The module at index as its own type; throws when it is of another type.
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    std::shared_ptr<M> typed = std::dynamic_pointer_cast<M>((*this)[index]);
    EMBER_CHECK(typed != nullptr, "[", name(), "] module ", index, " is a ", (*this)[index]->name(),
                ", not the requested type");
    return typed;
  }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Iterator begin() const { return modules_.begin(); }
  Iterator end() const { return modules_.end(); }

 protected:
  IndexedModules() = default;
  explicit IndexedModules(const std::vector<std::shared_ptr<Module>>& modules) { extend(modules); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
}  // namespace detail

// Holds modules in a list and registers them (their parameters are the list's); has no forward.
class ModuleList : public detail::IndexedModules {
 public:
  ModuleList() = default;
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules) : IndexedModules(modules) {}
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           (std::is_base_of_v<Module, Ms> && ...)) explicit ModuleList(std::shared_ptr<Ms>... modules)
      : IndexedModules(std::vector<std::shared_ptr<Module>>{std::move(modules)...}) {}
  std::string name() const override { return "ModuleList"; }
};

// Calls its modules in order, each on the previous one's output (through their call operators,
// so their hooks run). An empty Sequential returns its input.
class Sequential : public detail::IndexedModules {
 public:
  Sequential() = default;
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules) : IndexedModules(modules) {}
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           (std::is_base_of_v<Module, Ms> && ...)) explicit Sequential(std::shared_ptr<Ms>... modules)
      : IndexedModules(std::vector<std::shared_ptr<Module>>{std::move(modules)...}) {}
  std::string name() const override { return "Sequential"; }
  Tensor forward(const Tensor& input) override;
};

// --- linear and embedding -------------------------------------------------------------------------

// y = x W^T + b. x (..., in_features) -> (..., out_features). weight (out_features, in_features) and
// bias (out_features) start as U(-1/sqrt(in_features), 1/sqrt(in_features)).
//
// quantize_() stores the weight quantized, for inference (ember/quant.h): q8_0, q4_0 or q4_1 blocks,
// or int8 per output channel with its scales in the buffer weight_scale. The weight becomes a
// persistent buffer (no gradient; state_dict() holds the quantized tensor), and forward() runs
// quantized_linear, which quantizes the activations on the fly, or, with
// dynamic_activations = false, multiplies float activations by the dequantized weight. A block
// weight is multiplied through an interleaved copy of it (ember::InterleavedStack: as much memory
// again as the weight), made by quantize_ and remade after load_state_dict or any write to it.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  void reset_parameters();

  // Quantizes the weight in place to kQ8_0, kQ4_0, kQ4_1 or kInt8. Block dtypes store whole blocks of 32:
  // with in_features no multiple of 32 the weight is zero-padded to (out, in rounded up to 32).
  // Once only: a quantized layer cannot be quantized again.
  void quantize_(DType dtype, bool dynamic_activations = true);
  bool is_quantized() const { return !weight.is_floating_point(); }

  const int64_t in_features;
  const int64_t out_features;
  Tensor weight;
  Tensor bias;          // undefined when made with bias = false
  Tensor weight_scale;  // int8 weights: one float32 scale per output feature; undefined otherwise
  bool dynamic_activations = true;

 private:
  std::shared_ptr<InterleavedStack> interleaved_;  // block weights with dynamic activations
};

// A Linear layer made quantized (Linear::quantize_), for building inference models directly; load
// its weights with load_state_dict from a GGUF file ember wrote (ember::gguf) or quantize a trained
// Linear in place instead.
class QuantizedLinear : public Linear {
 public:
  QuantizedLinear(int64_t in_features, int64_t out_features, DType dtype, bool bias = true);
  std::string name() const override { return "QuantizedLinear"; }
};

// 1-D convolution over (N, C_in, L) or (C_in, L) (functional::conv1d). weight (out_channels,
// in_channels / groups, kernel_size) and bias (out_channels) start as U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) with fan_in = in_channels / groups * kernel_size.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const int64_t kernel_size;
  const int64_t stride;
  const int64_t padding;
  const int64_t dilation;
  const int64_t groups;
  Tensor weight;
  Tensor bias;  // undefined when made with bias = false
};

// 2-D convolution over (N, C_in, H, W) or (C_in, H, W). weight (out_channels, in_channels / groups,
// kH, kW) and bias (out_channels) start as U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in_channels / groups * kH * kW.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = 1, Pair padding = 0,
         Pair dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const Pair kernel_size;
  const Pair stride;
  const Pair padding;
  const Pair dilation;
  const int64_t groups;
  Tensor weight;
  Tensor bias;  // undefined when made with bias = false
};

// 2-D transposed convolution over (N, C_in, H, W) or (C_in, H, W) (functional::conv_transpose2d),
// PyTorch's argument order. weight (in_channels, out_channels / groups, kH, kW) and bias
// (out_channels) start as U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = out_channels / groups *
// kH * kW (PyTorch's fan of the transposed weight).
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = 1, Pair padding = 0,
                  Pair output_padding = 0, int64_t groups = 1, bool bias = true, Pair dilation = 1);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const Pair kernel_size;
  const Pair stride;
  const Pair padding;
  const Pair output_padding;
  const int64_t groups;
  const Pair dilation;
  Tensor weight;
  Tensor bias;  // undefined when made with bias = false
};

// A lookup table: int64 indices (any shape) -> rows of weight (num_embeddings, embedding_dim),
// which start as N(0, 1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t num_embeddings;
  const int64_t embedding_dim;
  Tensor weight;
};

// --- pooling --------------------------------------------------------------------------------------

// stride defaults to kernel_size.
class MaxPool2d : public Module {
 public:
  MaxPool2d(Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0, Pair dilation = 1,
            bool ceil_mode = false);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

  const Pair kernel_size;
  const Pair stride;
  const Pair padding;
  const Pair dilation;
  const bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  AvgPool2d(Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0, bool ceil_mode = false,
            bool count_include_pad = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

  const Pair kernel_size;
  const Pair stride;
  const Pair padding;
  const bool ceil_mode;
  const bool count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

  const Pair output_size;
};

// --- normalization --------------------------------------------------------------------------------

namespace detail {
// BatchNorm1d and BatchNorm2d differ only in the input ranks they accept.
class BatchNormBase : public Module {
 public:
  // momentum unset: running statistics are the cumulative average over all batches seen. bias =
  // false (with affine) learns a scale only.
  explicit BatchNormBase(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                         bool affine = true, bool track_running_stats = true, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  void reset_running_stats();
  void reset_parameters();

  const int64_t num_features;
  const double eps;
  const std::optional<double> momentum;
  const bool affine;
  const bool track_running_stats;
  Tensor weight;               // (num_features), ones; undefined unless affine
  Tensor bias;                 // (num_features), zeros; undefined unless affine and bias
  Tensor running_mean;         // (num_features), zeros; undefined unless track_running_stats
  Tensor running_var;          // (num_features), ones; undefined unless track_running_stats
  Tensor num_batches_tracked;  // int64 scalar; undefined unless track_running_stats

 protected:
  virtual void check_input_dim(const Tensor& input) const = 0;
};
}  // namespace detail

// Over (N, C) or (N, C, L).
class BatchNorm1d : public detail::BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// Over (N, C, H, W).
class BatchNorm2d : public detail::BatchNormBase {
 public:
  using BatchNormBase::BatchNormBase;
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// Normalizes over the trailing dims normalized_shape; weight ones and bias zeros of that shape.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const Shape normalized_shape;
  const double eps;
  const bool elementwise_affine;
  Tensor weight;  // undefined unless elementwise_affine
  Tensor bias;    // undefined unless elementwise_affine and bias
};

// x / sqrt(mean(x^2) + eps) * weight over the trailing dims normalized_shape. eps unset: the
// input dtype's machine epsilon.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const Shape normalized_shape;
  const std::optional<double> eps;
  const bool elementwise_affine;
  Tensor weight;  // undefined unless elementwise_affine
};

// The channels (dim 1) of (N, C, ...) in num_groups groups, each normalized over its channels and
// positions; weight ones and bias zeros of shape (C) when affine.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t num_groups;
  const int64_t num_channels;
  const double eps;
  const bool affine;
  Tensor weight;  // undefined unless affine
  Tensor bias;    // undefined unless affine
};

// --- regularization and reshaping -----------------------------------------------------------------

// functional::interpolate as a layer (PyTorch's nn.Upsample): exactly one of size and scale_factor.
class Upsample : public Module {
 public:
  Upsample(std::optional<std::vector<int64_t>> size, std::optional<std::vector<double>> scale_factor = std::nullopt,
           std::string mode = "nearest", std::optional<bool> align_corners = std::nullopt);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Upsample"; }
  std::string extra_repr() const override;

  const std::optional<std::vector<int64_t>> size;
  const std::optional<std::vector<double>> scale_factor;
  const std::string mode;
  const std::optional<bool> align_corners;
};

// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)); the identity
// in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  const double p;
};

// Flattens dims start_dim..end_dim into one (a view when possible).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_dim(start), end_dim(end) {}
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;

  const int64_t start_dim;
  const int64_t end_dim;
};

// --- activations ----------------------------------------------------------------------------------

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override { return functional::relu(input); }
  std::string name() const override { return "ReLU"; }
};

// approximate: "none" (the erf form) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override { return functional::gelu(input, approximate); }
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override;

  const std::string approximate;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input) override { return functional::silu(input); }
  std::string name() const override { return "SiLU"; }
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta_ = 1.0, double threshold_ = 20.0) : beta(beta_), threshold(threshold_) {}
  Tensor forward(const Tensor& input) override { return functional::softplus(input, beta, threshold); }
  std::string name() const override { return "Softplus"; }
  std::string extra_repr() const override;

  const double beta;
  const double threshold;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override { return functional::tanh(input); }
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override { return functional::sigmoid(input); }
  std::string name() const override { return "Sigmoid"; }
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t softmax_dim) : dim(softmax_dim) {}
  Tensor forward(const Tensor& input) override { return functional::softmax(input, dim); }
  std::string name() const override { return "Softmax"; }
  std::string extra_repr() const override;

  const int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t softmax_dim) : dim(softmax_dim) {}
  Tensor forward(const Tensor& input) override { return functional::log_softmax(input, dim); }
  std::string name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

  const int64_t dim;
};

}  // namespace ember::nn

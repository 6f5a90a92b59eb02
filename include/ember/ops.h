// Every op as a free function: ember::add(a, b). Methods and operators on Tensor forward here.
// Elementwise ops broadcast (NumPy rules) and promote (PyTorch rules); every user mistake throws
// ember::Error with a message starting with "[op]".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ember/attrs.h"
#include "ember/memory.h"
#include "ember/tensor.h"

namespace ember {

// --- creation ---------------------------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
// dtype defaults to the fill value's kind: bool, int64 or float32.
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
// dtype defaults to int64 when start, end and step are all integers, float32 otherwise.
Tensor arange(const Scalar& end, TensorOptions options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
Tensor empty_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype = std::nullopt);
Tensor rand_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor randn_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);

// Wraps memory owned by the caller (no copy); it must outlive every tensor that views it.
Tensor from_blob(void* data, const Shape& shape, DType dtype, std::optional<Strides> strides = std::nullopt);
// Copies `values` into a new tensor of `shape` (1-D of values.size() when shape is omitted).
template <class T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt) {
  const Shape s = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  EMBER_CHECK(s.numel() == static_cast<int64_t>(values.size()), "[from_vector] shape ", s, " needs ", s.numel(),
              " values, got ", values.size());
  Tensor t = empty(s, dtype_of<T>());
  T* p = static_cast<T*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template <class T>
Tensor tensor(std::initializer_list<T> values, std::optional<Shape> shape = std::nullopt) {
  return from_vector(std::vector<T>(values), shape);
}
// A 0-dim tensor holding `value` (dtype from the scalar's kind unless given).
Tensor scalar_tensor(const Scalar& value, std::optional<DType> dtype = std::nullopt);

// --- random (Philox4x32-10: results depend on the seed only, never on the thread count) -------
void manual_seed(uint64_t seed);
Tensor rand(const Shape& shape, TensorOptions options = {});                                // uniform [0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {});                               // standard normal
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = {});  // [low, high), int64

// --- type promotion and broadcasting ------------------------------------------------------------
// The dtype PyTorch's result_type gives: dimensioned tensors outrank 0-dim tensors, which outrank
// scalars, unless a lower tier holds a higher category (bool < integer < floating).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

// --- elementwise ----------------------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor div(const Tensor& a, const Scalar& b);
Tensor div(const Scalar& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& b);
Tensor pow(const Scalar& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);  // propagates NaN
Tensor maximum(const Tensor& a, const Tensor& b);  // propagates NaN
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);

// out= forms: write into `out` (its shape must equal the broadcast shape; its dtype must hold the
// result). They return out.
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b);

// --- reductions (empty `dims` reduces every dim) ------------------------------------------------
Tensor sum(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, const Axes& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Axes& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Axes& dims, bool keepdim = false);
Tensor all(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
// p-norm over dims: p = 2, 1, any positive p, or infinity (max |x|).
Tensor norm(const Tensor& x, double p = 2.0, const Axes& dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// --- linear algebra -----------------------------------------------------------------------------
// torch.matmul semantics: 1-D x 1-D dot, 2-D mm, batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b);
// x (..., in) @ weight (out, in)^T + bias (out).
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);
// gelu(linear(x, weight, bias), approximate), the GELU fused into the GEMM's epilogue (no second
// pass over the output). Floating dtypes. With autograd it runs as linear then gelu, keeping the
// pre-activation for the backward.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
                   std::string_view approximate = "none");

// --- shape ops ----------------------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor tile(const Tensor& x, const Shape& reps);
Tensor flip(const Tensor& x, const Axes& dims);
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
// pads = {last_lo, last_hi, second_last_lo, second_last_hi, ...} as torch.nn.functional.pad.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const Scalar& value = 0);

// --- indexing -----------------------------------------------------------------------------------
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
Tensor embedding(const Tensor& weight, const Tensor& indices);

// --- neural-network ops (also in ember::nn::functional) ---------------------------------------------
// Images are NCHW; class scores are (N, C) or (N, C, d...).

// input (N, C_in, H, W) or (C_in, H, W); weight (C_out, C_in / groups, kH, kW); bias (C_out).
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              Pair stride = 1, Pair padding = 0, Pair dilation = 1, int64_t groups = 1);
// stride defaults to kernel_size; padding is -inf padding, at most half the kernel size.
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

}  // namespace ember

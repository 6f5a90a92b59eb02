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
  const int64_t numel = checked_numel(s, "from_vector");
  EMBER_CHECK(numel == static_cast<int64_t>(values.size()), "[from_vector] shape ", s, " needs ", numel,
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
// One function per row of the op table's elementwise families (ember/op_list.h): neg(x), exp(x),
// ..., isnan(x); add(a, b) and add(a, 2.0), ..., pow; minimum(a, b), maximum(a, b); eq(a, b) and
// eq(a, 2.0), ..., ge; logical_and(a, b), logical_or(a, b).
// Binary ops broadcast and promote as PyTorch; div is true division (integers give float32);
// minimum and maximum propagate NaN.
#define EMBER_DECLARE_UNARY(kind, fn, ...) Tensor fn(const Tensor& x);
EMBER_UNARY_MATH(EMBER_DECLARE_UNARY)
EMBER_UNARY_PREDICATES(EMBER_DECLARE_UNARY)
#undef EMBER_DECLARE_UNARY
#define EMBER_DECLARE_BINARY(kind, fn, ...) Tensor fn(const Tensor& a, const Tensor& b);
EMBER_BINARY_MATH(EMBER_DECLARE_BINARY)
EMBER_COMPARISONS(EMBER_DECLARE_BINARY)
#undef EMBER_DECLARE_BINARY
#define EMBER_DECLARE_SCALAR_BINARY(kind, fn, ...) Tensor fn(const Tensor& a, const Scalar& b);
EMBER_BINARY_ARITHMETIC(EMBER_DECLARE_SCALAR_BINARY)
EMBER_RELATIONS(EMBER_DECLARE_SCALAR_BINARY)
#undef EMBER_DECLARE_SCALAR_BINARY
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor div(const Scalar& a, const Tensor& b);
Tensor pow(const Scalar& a, const Tensor& b);

// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// PyTorch's softplus: log(1 + exp(beta x)) / beta, and x where beta x > threshold (where the two
// agree to float precision); the gradient is sigmoid(beta x), 1 above the threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
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
// sum, prod, amax, amin, all, any, mean: one function per row of EMBER_DIM_REDUCTIONS.
#define EMBER_DECLARE_REDUCTION(kind, fn, ...) Tensor fn(const Tensor& x, const Axes& dims = {}, bool keepdim = false);
EMBER_DIM_REDUCTIONS(EMBER_DECLARE_REDUCTION)
#undef EMBER_DECLARE_REDUCTION
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, const Axes& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Axes& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Axes& dims, bool keepdim = false);
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

// --- triangles, scans, sorting and sampling -----------------------------------------------------
// The lower (tril) or upper (triu) triangle of the last two dims (batched over the others): the
// elements on and below / above `diagonal` (0 the main one, > 0 above it, < 0 below it), zeros
// elsewhere. Any dtype; the input needs at least 2 dims.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Running sums along dim. Integer and bool inputs give int64 (as PyTorch) unless `dtype` is given,
// in which case the input is converted to it first.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// Sorts along dim, ascending unless `descending`; returns the values and their int64 indices
// (ValuesAndIndices, ember/tensor.h). NaN sorts above every number (last ascending, first
// descending). Always stable (equal values keep their order, as PyTorch's stable=true; its
// stable=false may order ties otherwise), so `stable` changes nothing. Every dtype.
ValuesAndIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The indices sort would return.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (or smallest) elements along dim, 0 <= k <= size(dim). NaN counts as larger than
// every number. Ties: equal values are taken in index order (the lower index first). sorted: best
// first; otherwise in an unspecified order. Every dtype but bool (as PyTorch).
ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Category indices (int64) drawn from the rows of `weights` (1-D (C) -> (num_samples), 2-D (R, C)
// -> (R, num_samples)): non-negative, finite floats, each row with a positive sum (they need not
// sum to 1). Without replacement no index repeats in a row; once a row's positive-weight categories
// are used up, its zero-weight ones follow in index order (as PyTorch, which also allows it).
// Draws come from the global Philox generator (manual_seed), independent of the thread count;
// they do not reproduce PyTorch's stream.
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false);

// --- neural-network ops (also in ember::nn::functional) ---------------------------------------------
// Images are NCHW; class scores are (N, C) or (N, C, d...).

// input (N, C_in, H, W) or (C_in, H, W); weight (C_out, C_in / groups, kH, kW); bias (C_out).
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              Pair stride = 1, Pair padding = 0, Pair dilation = 1, int64_t groups = 1);
// input (N, C_in, L) or (C_in, L); weight (C_out, C_in / groups, k); bias (C_out). Output length
// (L + 2 * padding - dilation * (k - 1) - 1) / stride + 1. Runs as conv2d over lines of height 1.
// A causal depthwise convolution (Mamba's) is groups = C_in = C_out with padding k - 1, keeping
// the first L outputs.
Tensor conv1d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
// The transposed convolution (the gradient of conv2d with respect to its input), as PyTorch's
// conv_transpose2d. input (N, C_in, H, W) or (C_in, H, W); weight (C_in, C_out / groups, kH, kW);
// bias (C_out). Output (N, C_out, H_out, W_out) with
//   H_out = (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1   (W alike);
// output_padding (rows and columns added on the bottom and right) must be smaller than stride or
// dilation.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
                        Pair stride = 1, Pair padding = 0, Pair output_padding = 0, int64_t groups = 1,
                        Pair dilation = 1);
// stride defaults to kernel_size; padding is -inf padding, at most half the kernel size.
Tensor max_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0,
                  Pair dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Pair kernel_size, std::optional<Pair> stride = std::nullopt, Pair padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& input, Pair output_size);
// Resamples the spatial dims (2..) of input (N, C, d1[, d2[, d3]]) to `size`, or to floor(d *
// scale_factor) (one value for every dim, or one per dim), as PyTorch's interpolate: mode
// "nearest" (PyTorch's legacy nearest: source floor(i * in / out)), "linear" (3-D input),
// "bilinear" (4-D) or "trilinear" (5-D), with align_corners for the linear modes.
Tensor interpolate(const Tensor& input, const std::optional<std::vector<int64_t>>& size,
                   const std::optional<std::vector<double>>& scale_factor = std::nullopt,
                   std::string_view mode = "nearest", std::optional<bool> align_corners = std::nullopt);
// input (N, C) or (N, C, ...). In training, normalizes with the batch statistics and updates the
// running ones in place (unbiased variance, PyTorch's momentum convention) when they are given.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const std::optional<Tensor>& weight = std::nullopt, const std::optional<Tensor>& bias = std::nullopt,
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// Normalizes over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt, const std::optional<Tensor>& bias = std::nullopt,
                  double eps = 1e-5);
// input (N, C, ...): the C channels in num_groups groups (C divisible by it), each normalized over
// its channels' values at every position (PyTorch's group_norm); weight and bias (C) per channel.
Tensor group_norm(const Tensor& input, int64_t num_groups, const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
// Mamba's selective scan (Gu & Dao 2023), per batch b and channel d, from h = 0:
//   h_t = exp(delta_t * A_d) * h_t-1 + delta_t * u_t * B_t,   y_t = C_t . h_t
// with u, delta (batch, channels, length), A (channels, state), B, C (batch, state, length); y has
// u's shape. The state (one value per state index) never leaves the kernel: the forward keeps it
// every `chunk` steps for the backward, which recomputes the steps in between (Note [selective
// scan]). The caller adds Mamba's skip (u * D), gate and softplus(delta).
Tensor selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                      int64_t chunk = 64);
// One step of the same recurrence, for generation: state (batch, channels, state) is updated in
// place from u, delta (batch, channels), B, C (batch, state); returns y (batch, channels). Made of
// elementwise ops and a sum (differentiable), O(1) memory per token.
Tensor selective_scan_step(Tensor& state, const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                           const Tensor& C);
// eps unset: the dtype's machine epsilon, as PyTorch.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);
// Zeroes elements with probability p and scales the rest by 1/(1-p); the identity when !training.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true);

// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v.
//   query (..., Hq, L, E), key (..., Hk, S, E), value (..., Hk, S, Ev) -> (..., Hq, L, Ev); the
//   leading dims of the three must be equal (any number of them, none included).
//   attn_mask broadcastable to (..., Hq, L, S): bool (true = take part) or a float added to the
//   scores; is_causal masks key j > query i (the top-left aligned mask PyTorch uses) and
//   excludes attn_mask. scale defaults to 1/sqrt(E). enable_gqa lets Hk divide Hq (grouped-query
//   attention: query head h reads key/value head h / (Hq / Hk)); otherwise Hq must equal Hk.
//   dropout_p > 0 drops attention weights with Philox draws from the global generator. A query
//   row whose every key is masked out gives zeros, not NaN (PyTorch's math path gives NaN there).
// On the CPU it runs as flash attention (Note [flash attention]): no (L, S) matrix is materialized,
// forward or backward.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask = std::nullopt, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false);

// Rotary position embedding: rotates pairs of each head's leading R values by the angles whose
// cosines and sines are given, each pair (a, b) becoming (a cos - b sin, a sin + b cos).
//   x (..., T, H, D) floating; cos and sin (T, R/2) or (..., T, R/2), one angle per position and
//   pair (R even, at most D; the values past R pass through). style kAdjacent pairs x[2i] with
//   x[2i+1] (GGUF Llama models, ggml's normal mode), kHalves x[i] with x[i + R/2] (GPT-NeoX,
//   Hugging Face's rotate_half). The angles come from the caller, so any frequency scheme works:
//   cos = cos(p * base^(-2i/R)) for position p is Llama's.
// Differentiable in x (the backward rotates by the negated angles); cos and sin are constants.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, RopeStyle style = RopeStyle::kAdjacent);

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

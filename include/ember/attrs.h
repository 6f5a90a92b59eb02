// The typed attributes of every op: what an op call needs besides its tensors (a convolution's
// stride, a reduction's dims, an optimizer step's hyper-parameters). One small struct per family,
// each comparable with == and hashed through fields(), so a recorded call is plain data that can be
// compared (CSE), hashed, copied and replayed. `Attrs` is the closed set of them; the primitive
// table (ember/primitives.h) says which one each op uses.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>
#include <variant>
#include <vector>

#include "ember/scalar.h"
#include "ember/shape.h"

namespace ember {

// A (height, width) pair; one number means both.
struct Pair {
  int64_t h = 0;
  int64_t w = 0;
  Pair() = default;
  Pair(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor)
  Pair(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Pair&) const = default;
};

// How a loss combines its per-element values.
enum class Reduction : uint8_t { kNone, kMean, kSum };

// The elementwise function a GEMM applies to its result while it is still in registers (PyTorch's
// relu, gelu(approximate="none"|"tanh"), silu).
enum class Activation : uint8_t { kNone, kRelu, kGeluErf, kGeluTanh, kSilu };

struct NoAttrs {
  bool operator==(const NoAttrs&) const = default;
  auto fields() const { return std::tie(); }
};

// fill (and masked_fill): the value written.
struct FillAttrs {
  Scalar value;
  bool operator==(const FillAttrs&) const = default;
  auto fields() const { return std::tie(value); }
};

// arange: element i = start + i * step; linspace: start and end (the count is the output's size).
struct RangeAttrs {
  Scalar start;
  Scalar step;
  Scalar end;
  bool operator==(const RangeAttrs&) const = default;
  auto fields() const { return std::tie(start, step, end); }
};

// A draw from the Philox4x32-10 generator: the key and the first counter block, so a recorded call
// replays the same numbers. randint draws in [low, high).
struct RandomAttrs {
  uint64_t seed = 0;
  uint64_t first_block = 0;
  int64_t low = 0;
  int64_t high = 0;
  bool operator==(const RandomAttrs&) const = default;
  auto fields() const { return std::tie(seed, first_block, low, high); }
};

// dropout: drop probability p; the mask is drawn as rand(float32) < 1 - p from the key.
struct DropoutAttrs {
  double p = 0.5;
  uint64_t seed = 0;
  uint64_t first_block = 0;
  bool operator==(const DropoutAttrs&) const = default;
  auto fields() const { return std::tie(p, seed, first_block); }
};

// view, expand, repeat: the target shape.
struct ShapeAttrs {
  Shape shape;
  bool operator==(const ShapeAttrs&) const = default;
  auto fields() const { return std::tie(shape); }
};

// permute (the new order), flip (the flipped dims).
struct AxesAttrs {
  Axes dims;
  bool operator==(const AxesAttrs&) const = default;
  auto fields() const { return std::tie(dims); }
};

struct SliceAttrs {
  int64_t dim = 0;
  int64_t start = 0;
  int64_t end = 0;
  int64_t step = 1;
  bool operator==(const SliceAttrs&) const = default;
  auto fields() const { return std::tie(dim, start, end, step); }
};

struct SelectAttrs {
  int64_t dim = 0;
  int64_t index = 0;
  bool operator==(const SelectAttrs&) const = default;
  auto fields() const { return std::tie(dim, index); }
};

struct AsStridedAttrs {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  bool operator==(const AsStridedAttrs&) const = default;
  auto fields() const { return std::tie(shape, strides, offset); }
};

// A reduction over `dims` (normalized: non-negative, increasing; every dim when reducing all).
struct ReduceAttrs {
  Axes dims;
  bool keepdim = false;
  bool operator==(const ReduceAttrs&) const = default;
  auto fields() const { return std::tie(dims, keepdim); }
};

struct VarAttrs {
  Axes dims;
  bool keepdim = false;
  int64_t correction = 1;
  bool operator==(const VarAttrs&) const = default;
  auto fields() const { return std::tie(dims, keepdim, correction); }
};

struct NormAttrs {
  double p = 2.0;
  Axes dims;
  bool keepdim = false;
  bool operator==(const NormAttrs&) const = default;
  auto fields() const { return std::tie(p, dims, keepdim); }
};

// softmax and log_softmax (the normalized dim), index_select/gather/scatter_add (the indexed dim),
// cat and stack (the joined dim). Normalized (non-negative).
struct DimAttrs {
  int64_t dim = 0;
  bool operator==(const DimAttrs&) const = default;
  auto fields() const { return std::tie(dim); }
};

// C = activation(alpha * A @ B + beta * C + bias) + residual (bias and residual are optional inputs).
struct MatmulAttrs {
  double alpha = 1.0;
  double beta = 0.0;
  Activation activation = Activation::kNone;
  bool operator==(const MatmulAttrs&) const = default;
  auto fields() const { return std::tie(alpha, beta, activation); }
};

// out = activation(conv(input, weight) + bias + residual), then with max_pool = k > 1 the max over
// k x k windows at stride k (no padding, floor mode: max_pool2d(out, k)). The activation (none,
// ReLU, GELU or SiLU), the residual (an optional fourth input of the convolution's output shape)
// and the pooling come only from the graph compiler's epilogue fusion (a convolution followed by
// an add, an activation and, for inference, a max pooling); the op itself leaves them out. So do
// the blocked layouts (graph compiler's layout pass, Note [blocked activations]): an input, a
// residual or an output kept between convolutions as float32 channel blocks of the CPU's vector
// width, (N, ceil(C / block), H + 2 pad.h, W + 2 pad.w, block), with planes padded by the Pair
// given (-1: NCHW).
struct Conv2dAttrs {
  Pair stride = 1;
  Pair padding = 0;
  Pair dilation = 1;
  int64_t groups = 1;
  Activation activation = Activation::kNone;
  int64_t max_pool = 1;
  Pair blocked_input = -1;
  Pair blocked_residual = -1;
  Pair blocked_output = -1;
  bool operator==(const Conv2dAttrs&) const = default;
  auto fields() const {
    return std::tie(stride, padding, dilation, groups, activation, max_pool, blocked_input, blocked_residual,
                    blocked_output);
  }
};

// conv1d: conv2d's attributes along the length (a line is an image of height 1).
struct Conv1dAttrs {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  Conv2dAttrs conv() const { return {{1, stride}, {0, padding}, {1, dilation}, groups}; }
  bool operator==(const Conv1dAttrs&) const = default;
  auto fields() const { return std::tie(stride, padding, dilation, groups); }
};

// conv_transpose2d: conv2d's attributes (the convolution it transposes) plus output_padding, the
// extra rows and columns on the bottom and right of the output that the shape rule alone cannot tell.
struct ConvTranspose2dAttrs {
  Pair stride = 1;
  Pair padding = 0;
  Pair output_padding = 0;
  Pair dilation = 1;
  int64_t groups = 1;
  // The convolution whose input gradient this is: what its kernels take.
  Conv2dAttrs conv() const { return {stride, padding, dilation, groups}; }
  bool operator==(const ConvTranspose2dAttrs&) const = default;
  auto fields() const { return std::tie(stride, padding, output_padding, dilation, groups); }
};

// max/avg pooling windows; adaptive pooling uses kernel_size as its output size.
// blocked_input, blocked_output: max pooling between blocked convolutions (Conv2dAttrs), set by the
// graph compiler's layout pass only.
struct Pool2dAttrs {
  Pair kernel_size = 1;
  Pair stride = 1;
  Pair padding = 0;
  Pair dilation = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;
  Pair blocked_input = -1;
  Pair blocked_output = -1;
  bool operator==(const Pool2dAttrs&) const = default;
  auto fields() const {
    return std::tie(kernel_size, stride, padding, dilation, ceil_mode, count_include_pad, blocked_input,
                    blocked_output);
  }
};

struct BatchNormAttrs {
  bool training = false;
  double momentum = 0.1;
  double eps = 1e-5;
  bool operator==(const BatchNormAttrs&) const = default;
  auto fields() const { return std::tie(training, momentum, eps); }
};

// layer_norm and rms_norm over the trailing `normalized_shape` dims.
struct LayerNormAttrs {
  Shape normalized_shape;
  double eps = 1e-5;
  bool operator==(const LayerNormAttrs&) const = default;
  auto fields() const { return std::tie(normalized_shape, eps); }
};

// group_norm: the channels (dim 1) in num_groups groups, each normalized with its spatial values.
struct GroupNormAttrs {
  int64_t num_groups = 1;
  double eps = 1e-5;
  bool operator==(const GroupNormAttrs&) const = default;
  auto fields() const { return std::tie(num_groups, eps); }
};

// interpolate: the output's spatial size (dims 2..), the mode, and whether the corner pixels'
// centres align (linear modes only); scales, when the caller gave them, set the source positions
// (1 / scale, as PyTorch) instead of in / out. An absent scale is 0.
enum class InterpolateMode { kNearest, kLinear };
struct InterpolateAttrs {
  Shape size;
  std::vector<double> scales;
  InterpolateMode mode = InterpolateMode::kNearest;
  bool align_corners = false;
  bool operator==(const InterpolateAttrs&) const = default;
  auto fields() const { return std::tie(size, scales, mode, align_corners); }
};

// selective_scan: the forward saves the scan's state every `chunk` steps, which the backward
// recomputes the steps between from.
// The kernels take the state in whole vectors of every target (16 float32 values are one AVX-512
// register); the front-end pads A, B and C with zeros, which leave the scan unchanged.
inline constexpr int64_t kScanStateMultiple = 16;
struct SelectiveScanAttrs {
  int64_t chunk = 64;
  bool operator==(const SelectiveScanAttrs&) const = default;
  auto fields() const { return std::tie(chunk); }
};

// cross_entropy and nll_loss over class indices.
struct ClassLossAttrs {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
  bool operator==(const ClassLossAttrs&) const = default;
  auto fields() const { return std::tie(ignore_index, label_smoothing, reduction); }
};

struct LossAttrs {
  Reduction reduction = Reduction::kMean;
  bool operator==(const LossAttrs&) const = default;
  auto fields() const { return std::tie(reduction); }
};

// scaled_dot_product_attention and its gradient. The scale is resolved by the front-end (1/sqrt(E)
// when the caller gives none); dropout draws its keep mask from Philox (seed, first_block) at the
// position of each (batch*head, query, key) element, so the backward recomputes the same mask.
struct AttentionAttrs {
  double scale = 1.0;
  bool is_causal = false;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  uint64_t first_block = 0;
  bool operator==(const AttentionAttrs&) const = default;
  auto fields() const { return std::tie(scale, is_causal, dropout_p, seed, first_block); }
};

// tril and triu: keep the elements of the last two dims on and below (tril) or on and above (triu)
// the diagonal `diagonal` (0 the main one, > 0 above it, < 0 below it); zero the others.
struct TriangleAttrs {
  int64_t diagonal = 0;
  bool operator==(const TriangleAttrs&) const = default;
  auto fields() const { return std::tie(diagonal); }
};

// sort and argsort along dim (normalized). ember's sorts are always stable (equal values keep their
// order, which stable=false allows); `stable` is kept so a recorded call says what the caller asked.
struct SortAttrs {
  int64_t dim = 0;
  bool descending = false;
  bool stable = false;
  bool operator==(const SortAttrs&) const = default;
  auto fields() const { return std::tie(dim, descending, stable); }
};

// topk: the k largest (or smallest) elements along dim (normalized), best first when `sorted`.
struct TopKAttrs {
  int64_t k = 0;
  int64_t dim = 0;
  bool largest = true;
  bool sorted = true;
  bool operator==(const TopKAttrs&) const = default;
  auto fields() const { return std::tie(k, dim, largest, sorted); }
};

// multinomial: num_samples category indices per row of weights, with or without replacement, drawn
// from the Philox key `seed`; row r uses the counter blocks from first_block + r * (blocks per row),
// so the draw does not depend on the thread count (kernels/cpu/sort.cpp).
struct MultinomialAttrs {
  int64_t num_samples = 1;
  bool replacement = false;
  uint64_t seed = 0;
  uint64_t first_block = 0;
  bool operator==(const MultinomialAttrs&) const = default;
  auto fields() const { return std::tie(num_samples, replacement, seed, first_block); }
};

// gelu_grad: the form of the GELU (kGeluErf or kGeluTanh).
struct ActivationAttrs {
  Activation activation = Activation::kGeluErf;
  bool operator==(const ActivationAttrs&) const = default;
  auto fields() const { return std::tie(activation); }
};

// quantized_matmul: the weight operand's layout. false: the dtype's blocks row after row, as GGUF
// stores them; true: rows interleaved in groups of 16 for the CPU's mat-vec kernels
// (ember/quant.h, InterleavedWeight).
struct QuantizedMatmulAttrs {
  bool interleaved = false;
  bool operator==(const QuantizedMatmulAttrs&) const = default;
  auto fields() const { return std::tie(interleaved); }
};

// Which values of a head rotate together in rope: adjacent ones (x[2i], x[2i+1]: GGUF Llama models,
// ggml's normal mode) or one from each half of the rotated dims (x[i], x[i + R/2]: GPT-NeoX,
// Hugging Face's rotate_half).
enum class RopeStyle : uint8_t { kAdjacent, kHalves };

// rope: the pairing, and whether to rotate by the negated angles (its backward).
struct RopeAttrs {
  RopeStyle style = RopeStyle::kAdjacent;
  bool inverse = false;
  bool operator==(const RopeAttrs&) const = default;
  auto fields() const { return std::tie(style, inverse); }
};

struct ClampAttrs {
  std::optional<Scalar> min;
  std::optional<Scalar> max;
  bool operator==(const ClampAttrs&) const = default;
  auto fields() const { return std::tie(min, max); }
};

// softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
struct SoftplusAttrs {
  double beta = 1.0;
  double threshold = 20.0;
  bool operator==(const SoftplusAttrs&) const = default;
  auto fields() const { return std::tie(beta, threshold); }
};

// A collective over the ranks of a process group (ember/dist.h): the group (its id in the ops
// layer's registry of communicators, src/ops/collective.h), the reduction (0 sum, 1 average, 2
// maximum: dist::ReduceOp) and a broadcast's root. The collective starts when its kernel runs and
// completes at the collective_wait on the buffer it writes.
struct CollectiveAttrs {
  int64_t group = 0;
  int64_t reduce = 0;
  int64_t root = 0;
  bool operator==(const CollectiveAttrs&) const = default;
  auto fields() const { return std::tie(group, reduce, root); }
};

struct RollAttrs {
  Shape shifts;
  Axes dims;
  bool operator==(const RollAttrs&) const = default;
  auto fields() const { return std::tie(shifts, dims); }
};

// pad: {last_lo, last_hi, second_last_lo, ...} as torch.nn.functional.pad, and the fill value.
struct PadAttrs {
  std::vector<int64_t> pads;
  Scalar value;
  bool operator==(const PadAttrs&) const = default;
  auto fields() const { return std::tie(pads, value); }
};

// The optimizer updates follow PyTorch's single-tensor optimizers operation by operation, with the
// per-step scalars (bias corrections, step sizes) computed in double by the optimizer.

// param -= lr * d, where g = grad + weight_decay * param and, with momentum,
// buf = first_step ? g : momentum * buf + (1 - dampening) * g; d = nesterov ? g + momentum * buf : buf.
struct SgdAttrs {
  double lr = 0;
  double momentum = 0;  // 0: no buffer
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the buffer is (re)initialised to the gradient, as PyTorch does
  bool operator==(const SgdAttrs&) const = default;
  auto fields() const { return std::tie(lr, momentum, dampening, weight_decay, nesterov, first_step); }
};

// Adam / AdamW (decoupled_weight_decay): m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
// v_max = max(v_max, v) with amsgrad; param -= step_size * m / (sqrt(v_hat) / bias_correction2_sqrt + eps).
struct AdamAttrs {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW: param *= 1 - lr * weight_decay first
  bool amsgrad = false;
  double step_size = 0;              // lr / (1 - beta1^step)
  double bias_correction2_sqrt = 0;  // sqrt(1 - beta2^step)
  bool operator==(const AdamAttrs&) const = default;
  auto fields() const {
    return std::tie(lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, step_size,
                    bias_correction2_sqrt);
  }
};

// sum += g * g; param -= clr * g / (sqrt(sum) + eps), g = grad + weight_decay * param.
struct AdagradAttrs {
  double clr = 0;  // lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0;
  double eps = 0;
  bool operator==(const AdagradAttrs&) const = default;
  auto fields() const { return std::tie(clr, weight_decay, eps); }
};

// square_avg = alpha * square_avg + (1 - alpha) * g * g; centered: grad_avg = lerp(grad_avg, g, 1 - alpha)
// and avg = sqrt(square_avg - grad_avg^2) + eps, else sqrt(square_avg) + eps; with momentum
// buf = momentum * buf + g / avg and param -= lr * buf, else param -= lr * g / avg.
struct RmspropAttrs {
  double lr = 0;
  double alpha = 0;
  double eps = 0;
  double weight_decay = 0;
  double momentum = 0;  // 0: no momentum buffer
  bool centered = false;
  bool operator==(const RmspropAttrs&) const = default;
  auto fields() const { return std::tie(lr, alpha, eps, weight_decay, momentum, centered); }
};

using Attrs = std::variant<NoAttrs, FillAttrs, RangeAttrs, RandomAttrs, DropoutAttrs, ShapeAttrs, AxesAttrs, SliceAttrs,
                           SelectAttrs, AsStridedAttrs, ReduceAttrs, VarAttrs, NormAttrs, DimAttrs, MatmulAttrs,
                           Conv2dAttrs, Pool2dAttrs, BatchNormAttrs, LayerNormAttrs, ClassLossAttrs, LossAttrs,
                           AttentionAttrs, ActivationAttrs, ClampAttrs, RollAttrs, PadAttrs, SgdAttrs, AdamAttrs,
                           AdagradAttrs, RmspropAttrs, TriangleAttrs, SortAttrs, TopKAttrs, MultinomialAttrs,
                           ConvTranspose2dAttrs, GroupNormAttrs, InterpolateAttrs, SelectiveScanAttrs, Conv1dAttrs,
                           SoftplusAttrs, CollectiveAttrs, QuantizedMatmulAttrs, RopeAttrs>;

// The index of attribute type T in Attrs (a compile error if T is not one of them).
template <class T, size_t I = 0>
constexpr size_t attrs_index_of() {
  static_assert(I < std::variant_size_v<Attrs>, "not an attribute type of Attrs");
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Attrs>, T>) {
    return I;
  } else {
    return attrs_index_of<T, I + 1>();
  }
}

// A hash of the attributes (type and every field), for common-subexpression elimination: equal
// Attrs hash equally (double fields compare by value, so both zeros hash alike; a Scalar compares
// and hashes by its bits).
size_t hash_value(const Attrs& attrs);

}  // namespace ember

template <>
struct std::hash<ember::Attrs> {
  size_t operator()(const ember::Attrs& attrs) const { return ember::hash_value(attrs); }
};

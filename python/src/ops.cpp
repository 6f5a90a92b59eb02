// The ops as module-level functions (ember.add, ember.softmax, ...) and the functional layer
// (ember._ember.functional, re-exported as ember.nn.functional): ember/ops.h, one binding each,
// with PyTorch's argument names and defaults. Every binding releases the GIL.
#include "ember/ops.h"

#include <nanobind/stl/pair.h>

#include "bindings.h"
#include "ember/nn/functional.h"

namespace ember::python {
namespace {

constexpr auto kRelease = nb::call_guard<Release>();

TensorOptions options(std::optional<DType> dtype, bool requires_grad) {
  TensorOptions o;
  o.dtype = dtype;
  o.requires_grad = requires_grad;
  return o;
}

Axes dims_or_all(const std::optional<Axes>& dims) { return dims.value_or(Axes{}); }

}  // namespace

void bind_ops(nb::module_& m) {
  // --- creation ---------------------------------------------------------------------------------
  // zeros(2, 3) and zeros((2, 3)) both work, as in PyTorch.
#define EMBER_BIND_FILLED(name)                                           \
  m.def(                                                                  \
      #name,                                                              \
      [](nb::args size, std::optional<DType> dtype, bool requires_grad) { \
        const Shape shape = shape_from_args(size, #name);                 \
        const Release release;                                            \
        return name(shape, options(dtype, requires_grad));                \
      },                                                                  \
      "size"_a, nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false);
  EMBER_BIND_FILLED(empty)
  EMBER_BIND_FILLED(zeros)
  EMBER_BIND_FILLED(ones)
  EMBER_BIND_FILLED(rand)
  EMBER_BIND_FILLED(randn)
#undef EMBER_BIND_FILLED
  m.def(
      "full",
      [](const Shape& size, const Scalar& value, std::optional<DType> dtype, bool requires_grad) {
        return full(size, value, options(dtype, requires_grad));
      },
      "size"_a, "fill_value"_a, nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false, kRelease);
  m.def(
      "arange",
      [](const Scalar& end, std::optional<DType> dtype, bool requires_grad) {
        return arange(end, options(dtype, requires_grad));
      },
      "end"_a, nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false, kRelease);
  m.def(
      "arange",
      [](const Scalar& start, const Scalar& end, const Scalar& step, std::optional<DType> dtype, bool requires_grad) {
        return arange(start, end, step, options(dtype, requires_grad));
      },
      "start"_a, "end"_a, "step"_a = 1, nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false, kRelease);
  m.def(
      "linspace",
      [](double start, double end, int64_t steps, std::optional<DType> dtype, bool requires_grad) {
        return linspace(start, end, steps, options(dtype, requires_grad));
      },
      "start"_a, "end"_a, "steps"_a, nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false, kRelease);
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> cols, std::optional<DType> dtype, bool requires_grad) {
        return eye(n, cols, options(dtype, requires_grad));
      },
      "n"_a, "m"_a = nb::none(), nb::kw_only(), "dtype"_a = nb::none(), "requires_grad"_a = false, kRelease);
  m.def(
      "randint",
      [](int64_t low, int64_t high, const Shape& size, std::optional<DType> dtype) {
        return randint(low, high, size, options(dtype, false));
      },
      "low"_a, "high"_a, "size"_a, nb::kw_only(), "dtype"_a = nb::none(), kRelease);
  m.def("empty_like", &empty_like, "input"_a, "dtype"_a = nb::none(), kRelease);
  m.def("zeros_like", &zeros_like, "input"_a, "dtype"_a = nb::none(), kRelease);
  m.def("ones_like", &ones_like, "input"_a, "dtype"_a = nb::none(), kRelease);
  m.def("full_like", &full_like, "input"_a, "fill_value"_a, "dtype"_a = nb::none(), kRelease);
  m.def("rand_like", &rand_like, "input"_a, "dtype"_a = nb::none(), kRelease);
  m.def("randn_like", &randn_like, "input"_a, "dtype"_a = nb::none(), kRelease);
  m.def("scalar_tensor", &scalar_tensor, "value"_a, "dtype"_a = nb::none(), kRelease);
  m.def("result_type", nb::overload_cast<const Tensor&, const Tensor&>(&result_type), "tensor1"_a, "tensor2"_a);
  m.def("result_type", nb::overload_cast<const Tensor&, const Scalar&>(&result_type), "tensor1"_a, "tensor2"_a);

  // --- elementwise ------------------------------------------------------------------------------
#define EMBER_BIND_BINARY(kind, name, ...)                                                              \
  m.def(#name, nb::overload_cast<const Tensor&, const Tensor&>(&name), "input"_a, "other"_a, kRelease); \
  m.def(#name, nb::overload_cast<const Tensor&, const Scalar&>(&name), "input"_a, "other"_a, kRelease);
  EMBER_BINARY_ARITHMETIC(EMBER_BIND_BINARY)
  EMBER_RELATIONS(EMBER_BIND_BINARY)
#undef EMBER_BIND_BINARY
#define EMBER_BIND_TENSOR_BINARY(kind, name, ...) m.def(#name, &name, "input"_a, "other"_a, kRelease);
  EMBER_BINARY_EXTREMA(EMBER_BIND_TENSOR_BINARY)
  EMBER_LOGICAL_BINARY(EMBER_BIND_TENSOR_BINARY)
#undef EMBER_BIND_TENSOR_BINARY
  m.def("div", nb::overload_cast<const Scalar&, const Tensor&>(&div), "input"_a, "other"_a, kRelease);
  m.def("pow", nb::overload_cast<const Scalar&, const Tensor&>(&pow), "input"_a, "exponent"_a, kRelease);
  m.def("rsub", &rsub, "input"_a, "other"_a, kRelease);
#define EMBER_BIND_UNARY(kind, name, ...) m.def(#name, &name, "input"_a, kRelease);
  EMBER_UNARY_MATH(EMBER_BIND_UNARY)
  EMBER_UNARY_PREDICATES(EMBER_BIND_UNARY)
#undef EMBER_BIND_UNARY
  m.def("gelu", &gelu, "input"_a, "approximate"_a = "none", kRelease);
  m.def("softplus", &softplus, "input"_a, "beta"_a = 1.0, "threshold"_a = 20.0, kRelease);
  m.def("clamp", nb::overload_cast<const Tensor&, std::optional<Scalar>, std::optional<Scalar>>(&clamp), "input"_a,
        "min"_a = nb::none(), "max"_a = nb::none(), kRelease);
  m.def("clamp", nb::overload_cast<const Tensor&, const std::optional<Tensor>&, const std::optional<Tensor>&>(&clamp),
        "input"_a, "min"_a = nb::none(), "max"_a = nb::none(), kRelease);
  m.def("where", nb::overload_cast<const Tensor&, const Tensor&, const Tensor&>(&where), "condition"_a, "input"_a,
        "other"_a, kRelease);
  m.def("where", nb::overload_cast<const Tensor&, const Tensor&, const Scalar&>(&where), "condition"_a, "input"_a,
        "other"_a, kRelease);
  m.def("where", nb::overload_cast<const Tensor&, const Scalar&, const Tensor&>(&where), "condition"_a, "input"_a,
        "other"_a, kRelease);
  m.def("masked_fill", &masked_fill, "input"_a, "mask"_a, "value"_a, kRelease);

  // --- reductions -------------------------------------------------------------------------------
#define EMBER_BIND_REDUCTION(kind, name, ...)                                                                    \
  m.def(                                                                                                         \
      #name,                                                                                                     \
      [](const Tensor& x, std::optional<Axes> dim, bool keepdim) { return name(x, dims_or_all(dim), keepdim); }, \
      "input"_a, "dim"_a = nb::none(), "keepdim"_a = false, kRelease);
  EMBER_DIM_REDUCTIONS(EMBER_BIND_REDUCTION)
#undef EMBER_BIND_REDUCTION
  m.def("argmax", &argmax, "input"_a, "dim"_a = nb::none(), "keepdim"_a = false, kRelease);
  m.def("argmin", &argmin, "input"_a, "dim"_a = nb::none(), "keepdim"_a = false, kRelease);
  m.def(
      "var",
      [](const Tensor& x, std::optional<Axes> dim, int64_t correction, bool keepdim) {
        return var(x, dims_or_all(dim), correction, keepdim);
      },
      "input"_a, "dim"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, kRelease);
  m.def(
      "std",
      [](const Tensor& x, std::optional<Axes> dim, int64_t correction, bool keepdim) {
        return ember::std(x, dims_or_all(dim), correction, keepdim);
      },
      "input"_a, "dim"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, kRelease);
  m.def(
      "norm",
      [](const Tensor& x, double p, std::optional<Axes> dim, bool keepdim) {
        return norm(x, p, dims_or_all(dim), keepdim);
      },
      "input"_a, "p"_a = 2.0, "dim"_a = nb::none(), "keepdim"_a = false, kRelease);
  m.def("logsumexp", &logsumexp, "input"_a, "dim"_a, "keepdim"_a = false, kRelease);
  m.def("softmax", &softmax, "input"_a, "dim"_a, kRelease);
  m.def("log_softmax", &log_softmax, "input"_a, "dim"_a, kRelease);
  m.def("cumsum", &cumsum, "input"_a, "dim"_a, "dtype"_a = nb::none(), kRelease);
  m.def("argsort", &argsort, "input"_a, "dim"_a = -1, "descending"_a = false, "stable"_a = false, kRelease);

  // --- linear algebra, shapes, indexing -----------------------------------------------------------
  m.def("matmul", &matmul, "input"_a, "other"_a, kRelease);
  m.def("cat", &cat, "tensors"_a, "dim"_a = 0, kRelease);
  m.def("concat", &cat, "tensors"_a, "dim"_a = 0, kRelease);
  m.def("stack", &stack, "tensors"_a, "dim"_a = 0, kRelease);
  m.def("split", nb::overload_cast<const Tensor&, int64_t, int64_t>(&split), "tensor"_a, "split_size_or_sections"_a,
        "dim"_a = 0, kRelease);
  m.def("split", nb::overload_cast<const Tensor&, const std::vector<int64_t>&, int64_t>(&split), "tensor"_a,
        "split_size_or_sections"_a, "dim"_a = 0, kRelease);
  m.def("chunk", &chunk, "input"_a, "chunks"_a, "dim"_a = 0, kRelease);
  m.def("tile", &tile, "input"_a, "dims"_a, kRelease);
  m.def("flip", &flip, "input"_a, "dims"_a, kRelease);
  m.def(
      "roll",
      [](const Tensor& x, const Shape& shifts, std::optional<Shape> dims) {
        return roll(x, shifts.vec(), dims ? dims->vec() : std::vector<int64_t>{});
      },
      "input"_a, "shifts"_a, "dims"_a = nb::none(), kRelease);
  m.def("index_select", &index_select, "input"_a, "dim"_a, "index"_a, kRelease);
  m.def("gather", &gather, "input"_a, "dim"_a, "index"_a, kRelease);
  m.def("scatter_add", &scatter_add, "input"_a, "dim"_a, "index"_a, "src"_a, kRelease);
  m.def("tril", &tril, "input"_a, "diagonal"_a = 0, kRelease);
  m.def("triu", &triu, "input"_a, "diagonal"_a = 0, kRelease);
  m.def("multinomial", &multinomial, "input"_a, "num_samples"_a, "replacement"_a = false, kRelease);
  m.def("selective_scan", &selective_scan, "u"_a, "delta"_a, "A"_a, "B"_a, "C"_a, "chunk"_a = 64, kRelease);
  m.def(
      "flatten", [](const Tensor& x, int64_t start, int64_t end) { return x.flatten(start, end); }, "input"_a,
      "start_dim"_a = 0, "end_dim"_a = -1);
  m.def(
      "reshape", [](const Tensor& x, const Shape& shape) { return x.reshape(shape); }, "input"_a, "shape"_a);
  m.def(
      "transpose", [](const Tensor& x, int64_t a, int64_t b) { return x.transpose(a, b); }, "input"_a, "dim0"_a,
      "dim1"_a);
  m.def(
      "permute", [](const Tensor& x, const Axes& dims) { return x.permute(dims); }, "input"_a, "dims"_a);
  m.def(
      "squeeze", [](const Tensor& x, std::optional<int64_t> dim) { return dim ? x.squeeze(*dim) : x.squeeze(); },
      "input"_a, "dim"_a = nb::none());
  m.def(
      "unsqueeze", [](const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }, "input"_a, "dim"_a);

  // --- ember.nn.functional ----------------------------------------------------------------------
  nb::module_ f = m.def_submodule("functional", "PyTorch's torch.nn.functional, over ember's ops");
  for (const char* name : {"relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax"}) {
    f.attr(name) = m.attr(name);
  }
  f.def("linear", &linear, "input"_a, "weight"_a, "bias"_a = nb::none(), kRelease);
  f.def("linear_gelu", &linear_gelu, "input"_a, "weight"_a, "bias"_a = nb::none(), "approximate"_a = "none", kRelease);
  f.def("conv1d", &conv1d, "input"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0,
        "dilation"_a = 1, "groups"_a = 1, kRelease);
  f.def("conv2d", &conv2d, "input"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0,
        "dilation"_a = 1, "groups"_a = 1, kRelease);
  f.def("conv_transpose2d", &conv_transpose2d, "input"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1,
        "padding"_a = 0, "output_padding"_a = 0, "groups"_a = 1, "dilation"_a = 1, kRelease);
  f.def("max_pool2d", &max_pool2d, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0,
        "dilation"_a = 1, "ceil_mode"_a = false, kRelease);
  f.def("avg_pool2d", &avg_pool2d, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0,
        "ceil_mode"_a = false, "count_include_pad"_a = true, kRelease);
  f.def("adaptive_avg_pool2d", &adaptive_avg_pool2d, "input"_a, "output_size"_a, kRelease);
  f.def("interpolate", &interpolate, "input"_a, "size"_a = nb::none(), "scale_factor"_a = nb::none(),
        "mode"_a = "nearest", "align_corners"_a = nb::none(), kRelease);
  // No running statistics (None) is training on the batch's statistics alone, as in PyTorch.
  f.def(
      "batch_norm",
      [](const Tensor& input, const std::optional<Tensor>& running_mean, const std::optional<Tensor>& running_var,
         const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, bool training, double momentum,
         double eps) {
        return batch_norm(input, running_mean.value_or(Tensor()), running_var.value_or(Tensor()), weight, bias,
                          training, momentum, eps);
      },
      "input"_a, "running_mean"_a.none(), "running_var"_a.none(), "weight"_a = nb::none(), "bias"_a = nb::none(),
      "training"_a = false, "momentum"_a = 0.1, "eps"_a = 1e-5, kRelease);
  f.def("layer_norm", &layer_norm, "input"_a, "normalized_shape"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
        "eps"_a = 1e-5, kRelease);
  f.def("group_norm", &group_norm, "input"_a, "num_groups"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
        "eps"_a = 1e-5, kRelease);
  f.def("rms_norm", &rms_norm, "input"_a, "normalized_shape"_a, "weight"_a = nb::none(), "eps"_a = nb::none(),
        kRelease);
  f.def("dropout", &dropout, "input"_a, "p"_a = 0.5, "training"_a = true, kRelease);
  f.def("embedding", &nn::functional::embedding, "input"_a, "weight"_a, kRelease);
  f.def("one_hot", &one_hot, "tensor"_a, "num_classes"_a = -1, kRelease);
  f.def(
      "pad", [](const Tensor& x, const Shape& pads, const Scalar& value) { return pad(x, pads.vec(), value); },
      "input"_a, "pad"_a, "value"_a = 0, kRelease);
  f.def("scaled_dot_product_attention", &scaled_dot_product_attention, "query"_a, "key"_a, "value"_a,
        "attn_mask"_a = nb::none(), "dropout_p"_a = 0.0, "is_causal"_a = false, "scale"_a = nb::none(),
        "enable_gqa"_a = false, kRelease);
  f.def(
      "rope",
      [](const Tensor& x, const Tensor& cos, const Tensor& sin, const std::string& style) {
        EMBER_CHECK(style == "adjacent" || style == "halves", "[rope] style must be \"adjacent\" or \"halves\", got \"",
                    style, "\"");
        return rope(x, cos, sin, style == "adjacent" ? RopeStyle::kAdjacent : RopeStyle::kHalves);
      },
      "x"_a, "cos"_a, "sin"_a, "style"_a = "adjacent", kRelease);
  f.def("cross_entropy", &cross_entropy, "input"_a, "target"_a, "ignore_index"_a = -100, "reduction"_a = "mean",
        "label_smoothing"_a = 0.0, kRelease);
  f.def("nll_loss", &nll_loss, "input"_a, "target"_a, "ignore_index"_a = -100, "reduction"_a = "mean", kRelease);
  f.def("mse_loss", &mse_loss, "input"_a, "target"_a, "reduction"_a = "mean", kRelease);
  f.def("l1_loss", &l1_loss, "input"_a, "target"_a, "reduction"_a = "mean", kRelease);
  f.def("binary_cross_entropy_with_logits", &binary_cross_entropy_with_logits, "input"_a, "target"_a,
        "weight"_a = nb::none(), "pos_weight"_a = nb::none(), "reduction"_a = "mean", kRelease);
}

}  // namespace ember::python

// The ONNX ops ember imports, each mapped onto ember ops (so each gets autograd, the compiler and
// the profiler for free). Opset differences are handled where the spec changed an op: attributes
// that became inputs (Squeeze, Unsqueeze, Split, Slice, Reduce*, Clip, Pad, Dropout), and the
// meaning of Softmax's axis before opset 13.
#include "ember/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "ember/autograd.h"
#include "io/onnx/importer.h"
#include "ops/dispatch.h"

namespace ember::onnx::detail {

// --- NodeContext -------------------------------------------------------------------------------------

std::string NodeContext::what() const {
  return node_.op_type() + " node" + (node_.name().empty() ? "" : " \"" + node_.name() + "\"");
}

const Tensor& NodeContext::input(int i) const {
  if (!has(i)) fail("input ", i, " is required");
  return inputs_[i]->tensor;
}

std::vector<int64_t> NodeContext::ints(int i) const {
  const Tensor& t = input(i);
  if (!is_static(i)) {
    fail("input ", i, " (\"", node_.input(i), "\") must be computable when the model is loaded, from constants ",
         "and input shapes; here it depends on input data");
  }
  if (is_floating(t.dtype()) || t.dtype() == kBool) fail("input ", i, " must be integers, not ", t.dtype());
  const dispatch::Unobserved host_side;  // reading a static value is not part of the computation
  return t.reshape({-1}).to(kInt64).to_vector<int64_t>();
}

double NodeContext::scalar(int i) const {
  const Tensor& t = input(i);
  if (!is_static(i)) fail("input ", i, " (\"", node_.input(i), "\") must be a constant");
  if (t.numel() != 1) fail("input ", i, " must hold one value, it has shape ", t.shape());
  const dispatch::Unobserved host_side;
  return t.reshape({-1}).to(kFloat64).to_vector<double>()[0];
}

const ::onnx::AttributeProto* NodeContext::attr(std::string_view name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t NodeContext::attr_int(std::string_view name, int64_t fallback) const {
  const ::onnx::AttributeProto* a = attr(name);
  return a != nullptr ? a->i() : fallback;
}

float NodeContext::attr_float(std::string_view name, float fallback) const {
  const ::onnx::AttributeProto* a = attr(name);
  return a != nullptr ? a->f() : fallback;
}

std::string NodeContext::attr_string(std::string_view name, const std::string& fallback) const {
  const ::onnx::AttributeProto* a = attr(name);
  return a != nullptr ? a->s() : fallback;
}

std::optional<std::vector<int64_t>> NodeContext::attr_ints(std::string_view name) const {
  const ::onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<float>> NodeContext::attr_floats(std::string_view name) const {
  const ::onnx::AttributeProto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

DType dtype_of(int32_t onnx_type, const std::string& what) {
  switch (onnx_type) {
    case ::onnx::TensorProto::FLOAT:
      return kFloat32;
    case ::onnx::TensorProto::DOUBLE:
      return kFloat64;
    case ::onnx::TensorProto::FLOAT16:
      return kFloat16;
    case ::onnx::TensorProto::BFLOAT16:
      return kBFloat16;
    case ::onnx::TensorProto::INT64:
      return kInt64;
    case ::onnx::TensorProto::INT32:
      return kInt32;
    case ::onnx::TensorProto::INT16:
      return kInt16;
    case ::onnx::TensorProto::INT8:
      return kInt8;
    case ::onnx::TensorProto::UINT8:
      return kUInt8;
    case ::onnx::TensorProto::BOOL:
      return kBool;
    default:
      EMBER_FAIL("[onnx] ", what, ": element type ", onnx_format::type_name(onnx_type), " has no ember dtype");
  }
}

Tensor tensor_of(const ::onnx::TensorProto& proto, const std::string& base_dir, const std::string& what) {
  const DType dtype = dtype_of(proto.data_type(), what + ": tensor \"" + proto.name() + "\"");
  const int64_t bytes = onnx_format::tensor_data_size(proto, base_dir, what);
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  Tensor t = empty(Shape(dims), dtype);
  if (bytes > 0) onnx_format::read_tensor_data(proto, base_dir, what, static_cast<char*>(t.data_ptr()));
  return t;
}

namespace {

using Tensors = std::vector<Tensor>;

int64_t axis_in(const NodeContext& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) c.fail("axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> dims_of(const Tensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); }

// An attribute in early opsets, an input in later ones (Squeeze's axes, Split's sizes...).
std::optional<std::vector<int64_t>> ints_attr_or_input(const NodeContext& c, std::string_view attr, int input,
                                                       int64_t input_since) {
  if (c.opset() < input_since) return c.attr_ints(attr);
  if (!c.has(input)) return std::nullopt;
  return c.ints(input);
}

// --- elementwise ----------------------------------------------------------------------------------------

template <Tensor (*F)(const Tensor&)>
Tensors unary(const NodeContext& c) {
  return {F(c.input(0))};
}

Tensor relu_(const Tensor& x) { return relu(x); }
Tensor sigmoid_(const Tensor& x) { return sigmoid(x); }
Tensor tanh_(const Tensor& x) { return ember::tanh(x); }
Tensor exp_(const Tensor& x) { return ember::exp(x); }
Tensor log_(const Tensor& x) { return ember::log(x); }
Tensor sqrt_(const Tensor& x) { return ember::sqrt(x); }
Tensor abs_(const Tensor& x) { return ember::abs(x); }
Tensor neg_(const Tensor& x) { return neg(x); }
Tensor sin_(const Tensor& x) { return ember::sin(x); }
Tensor cos_(const Tensor& x) { return ember::cos(x); }
Tensor sign_(const Tensor& x) { return sign(x); }
Tensor not_(const Tensor& x) { return logical_not(x); }
Tensor isnan_(const Tensor& x) { return isnan(x); }
Tensor reciprocal_(const Tensor& x) { return div(1.0, x); }
Tensor identity_(const Tensor& x) { return x; }

// GELU's erf form, x * 0.5 * (1 + erf(x / sqrt(2))), becomes one gelu in a compiled run (the graph
// compiler's fuse_gelu pass).
Tensor erf_(const Tensor& x) { return ember::erf(x); }

// Floor and Ceil through a cast to int64 (truncation toward zero), corrected by one where it
// rounded the wrong way; values of 2^52 and beyond, infinities and NaN are already integral.
template <bool Ceil>
Tensors round_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  if (!is_floating(x.dtype())) return {x};
  const Tensor t = x.to(kInt64).to(x.dtype());
  const Tensor rounded = Ceil ? where(lt(t, x), add(t, 1.0), t) : where(gt(t, x), sub(t, 1.0), t);
  return {where(lt(ember::abs(x), 4503599627370496.0), rounded, x)};
}

Tensors gelu_op(const NodeContext& c) {
  const std::string approximate = c.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") c.fail("approximate \"", approximate, "\" is not none or tanh");
  return {gelu(c.input(0), approximate)};
}

Tensors leaky_relu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {where(gt(x, 0), x, mul(x, static_cast<double>(c.attr_float("alpha", 0.01F))))};
}

Tensors hard_sigmoid(const NodeContext& c) {
  const double alpha = c.attr_float("alpha", 0.2F), beta = c.attr_float("beta", 0.5F);
  return {clamp(add(mul(c.input(0), alpha), beta), Scalar(0.0), Scalar(1.0))};
}

Tensors hard_swish(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {mul(x, clamp(add(mul(x, 1.0 / 6.0), 0.5), Scalar(0.0), Scalar(1.0)))};
}

Tensors softplus(const NodeContext& c) {
  // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
  const Tensor& x = c.input(0);
  return {add(relu(x), log1p(ember::exp(neg(ember::abs(x)))))};
}

Tensors is_inf(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const bool neg_inf = c.attr_int("detect_negative", 1) != 0, pos_inf = c.attr_int("detect_positive", 1) != 0;
  if (neg_inf && pos_inf) return {isinf(x)};
  if (!neg_inf && !pos_inf) return {zeros_like(x, kBool)};
  return {logical_and(isinf(x), pos_inf ? gt(x, 0) : lt(x, 0))};
}

Tensors clip(const NodeContext& c) {
  const Tensor& x = c.input(0);
  if (c.opset() < 11) {
    const float lo = c.attr_float("min", -std::numeric_limits<float>::infinity());
    const float hi = c.attr_float("max", std::numeric_limits<float>::infinity());
    return {clamp(x, std::optional<Scalar>(Scalar(static_cast<double>(lo))),
                  std::optional<Scalar>(Scalar(static_cast<double>(hi))))};
  }
  std::optional<Tensor> lo, hi;
  if (c.has(1)) lo = c.input(1);
  if (c.has(2)) hi = c.input(2);
  if (!lo && !hi) return {x};
  return {clamp(x, lo, hi)};
}

// Integer division truncates toward zero in ONNX; ember's div is true division. Only shape
// arithmetic divides integers, so it is done on the host.
Tensor integer_div(const NodeContext& c) {
  if (!c.is_static(0) || !c.is_static(1)) c.fail("integer division is only supported on constants and shapes");
  const dispatch::Unobserved host_side;
  const Tensor a = c.input(0), b = c.input(1);
  const Tensor zero = zeros_like(add(a, b));
  const std::vector<int64_t> x = add(zero, a).reshape({-1}).to(kInt64).to_vector<int64_t>();
  const std::vector<int64_t> y = add(zero, b).reshape({-1}).to(kInt64).to_vector<int64_t>();
  std::vector<int64_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0) c.fail("integer division by zero");
    q[i] = x[i] / y[i];
  }
  return from_vector(q, zero.shape()).to(zero.dtype());
}

Tensors binary_math(const NodeContext& c) {
  const Tensor &a = c.input(0), &b = c.input(1);
  const std::string& op = c.node().op_type();
  if (op == "Add") return {add(a, b)};
  if (op == "Sub") return {sub(a, b)};
  if (op == "Mul") return {mul(a, b)};
  if (op == "Div") {
    if (!is_floating(a.dtype())) return {integer_div(c)};
    return {div(a, b)};
  }
  if (op == "Pow") {
    if (c.is_static(1) && b.numel() == 1) {
      const double e = c.scalar(1);
      if (e == 2.0) return {square(a)};
      if (e == 1.0) return {a};
      if (e == 0.5) return {ember::sqrt(a)};
      return {pow(a, e)};
    }
    return {pow(a, b.to(a.dtype()))};
  }
  if (op == "Equal") return {eq(a, b)};
  if (op == "Less") return {lt(a, b)};
  if (op == "LessOrEqual") return {le(a, b)};
  if (op == "Greater") return {gt(a, b)};
  if (op == "GreaterOrEqual") return {ge(a, b)};
  if (op == "And") return {logical_and(a, b)};
  if (op == "Or") return {logical_or(a, b)};
  c.fail("internal error: not a binary op");
}

// Max, Min, Sum, Mean: any number of inputs, broadcast together.
Tensors variadic(const NodeContext& c) {
  const std::string& op = c.node().op_type();
  Tensor acc = c.input(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    const Tensor& x = c.input(i);
    if (op == "Max") {
      acc = maximum(acc, x);
    } else if (op == "Min") {
      acc = minimum(acc, x);
    } else {
      acc = add(acc, x);
    }
  }
  if (op == "Mean" && c.num_inputs() > 1) acc = div(acc, static_cast<double>(c.num_inputs()));
  if (c.num_inputs() == 1) acc = acc.clone();
  return {acc};
}

Tensors where_op(const NodeContext& c) { return {where(c.input(0), c.input(1), c.input(2))}; }

Tensors cast(const NodeContext& c) {
  const DType to = dtype_of(static_cast<int32_t>(c.attr_int("to", 0)), c.what());
  return {c.input(0).to(to)};
}

Tensors cast_like(const NodeContext& c) { return {c.input(0).to(c.input(1).dtype())}; }

// --- linear algebra, convolution, pooling, normalization ------------------------------------------------

Tensors matmul_op(const NodeContext& c) { return {matmul(c.input(0), c.input(1))}; }

Tensors gemm(const NodeContext& c) {
  Tensor a = c.input(0), b = c.input(1);
  if (a.dim() != 2 || b.dim() != 2) c.fail("A and B must be matrices, got shapes ", a.shape(), " and ", b.shape());
  const double alpha = c.attr_float("alpha", 1.0F), beta = c.attr_float("beta", 1.0F);
  if (c.attr_int("transA", 0) != 0) a = a.permute({1, 0});
  // linear() takes the weight as (out, in): B itself when transB, else its transpose.
  const Tensor weight = c.attr_int("transB", 0) != 0 ? b : b.permute({1, 0});
  const int64_t n = weight.size(0);
  std::optional<Tensor> bias;
  if (c.has(2)) bias = c.input(2);
  if (alpha == 1.0 && (!bias || (beta == 1.0 && bias->dim() == 1 && bias->size(0) == n))) {
    return {linear(a, weight, bias)};
  }
  Tensor y = linear(a, weight);
  if (alpha != 1.0) y = mul(y, alpha);
  if (bias) y = add(y, beta == 1.0 ? *bias : mul(*bias, beta));
  return {y};
}

// Padding for a spatial op: begin and end per spatial dim, from pads or auto_pad.
struct Padding {
  std::vector<int64_t> begin, end;
  bool symmetric() const { return begin == end; }
};

Padding padding_of(const NodeContext& c, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                   const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation) {
  const size_t n = kernel.size();
  Padding p{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    if (auto pads = c.attr_ints("pads")) {
      if (pads->size() != 2 * n) c.fail("pads has ", pads->size(), " values, expected ", 2 * n);
      for (size_t i = 0; i < n; ++i) {
        p.begin[i] = (*pads)[i];
        p.end[i] = (*pads)[i + n];
        if (p.begin[i] < 0 || p.end[i] < 0) c.fail("negative pads are not supported");
      }
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = (in[i] + stride[i] - 1) / stride[i];
      const int64_t total = std::max<int64_t>((out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in[i], 0);
      p.begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.end[i] = total - p.begin[i];
    }
  } else if (auto_pad != "VALID") {
    c.fail("auto_pad \"", auto_pad, "\" is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
  return p;
}

// Pads the two spatial dims of x explicitly (torch's pad order: last dim first).
Tensor pad_spatial(const Tensor& x, const Padding& p, double value) {
  return pad(x, {p.begin[1], p.end[1], p.begin[0], p.end[0]}, value);
}

// 1-D ops run as 2-D ones over a height of 1.
struct Spatial {
  Tensor x;
  bool one_d = false;
  std::vector<int64_t> in;
};

Spatial spatial_input(const NodeContext& c, const Tensor& x) {
  if (x.dim() == 3) return {x.unsqueeze(2), true, {1, x.size(2)}};
  if (x.dim() == 4) return {x, false, {x.size(2), x.size(3)}};
  c.fail("only 1-D and 2-D inputs (N, C, L) and (N, C, H, W) are supported, got shape ", x.shape());
}

std::vector<int64_t> spatial_attr(const NodeContext& c, std::string_view name, bool one_d, int64_t fallback) {
  std::vector<int64_t> v = c.attr_ints(name).value_or(std::vector<int64_t>(one_d ? 1 : 2, fallback));
  if (v.size() != (one_d ? 1U : 2U)) c.fail(name, " has ", v.size(), " values for a ", one_d ? 1 : 2, "-D op");
  if (one_d) v.insert(v.begin(), name == "pads" || name == "output_padding" ? 0 : 1);
  return v;
}

Padding spatial_padding(const NodeContext& c, const Spatial& s, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation) {
  Padding p = padding_of(
      c, s.one_d ? std::vector<int64_t>{s.in[1]} : s.in, s.one_d ? std::vector<int64_t>{kernel[1]} : kernel,
      s.one_d ? std::vector<int64_t>{stride[1]} : stride, s.one_d ? std::vector<int64_t>{dilation[1]} : dilation);
  if (s.one_d) {
    p.begin.insert(p.begin.begin(), 0);
    p.end.insert(p.end.begin(), 0);
  }
  return p;
}

Tensor spatial_output(const Spatial& s, const Tensor& y) { return s.one_d ? y.squeeze(2) : y; }

Tensors conv(const NodeContext& c) {
  const Spatial s = spatial_input(c, c.input(0));
  const Tensor weight = s.one_d ? c.input(1).unsqueeze(2) : c.input(1);
  const std::vector<int64_t> kernel{weight.size(2), weight.size(3)};
  const std::vector<int64_t> stride = spatial_attr(c, "strides", s.one_d, 1);
  const std::vector<int64_t> dilation = spatial_attr(c, "dilations", s.one_d, 1);
  const Padding p = spatial_padding(c, s, kernel, stride, dilation);
  std::optional<Tensor> bias;
  if (c.has(2)) bias = c.input(2);
  const int64_t groups = c.attr_int("group", 1);
  Tensor x = s.x;
  Pair padding(p.begin[0], p.begin[1]);
  if (!p.symmetric()) {
    x = pad_spatial(x, p, 0.0);
    padding = Pair(0);
  }
  return {spatial_output(
      s, conv2d(x, weight, bias, Pair(stride[0], stride[1]), padding, Pair(dilation[0], dilation[1]), groups))};
}

// ConvTranspose: the weight is (C_in, C_out / group, kh, kw). Padding comes from pads, or from
// output_shape (with auto_pad choosing where an odd total goes), as the spec computes it; uneven
// padding crops the unpadded result.
Tensors conv_transpose(const NodeContext& c) {
  const Spatial s = spatial_input(c, c.input(0));
  const Tensor weight = s.one_d ? c.input(1).unsqueeze(2) : c.input(1);
  if (weight.dim() != 4) c.fail("the weight must have the input's rank, got shape ", c.input(1).shape());
  const std::vector<int64_t> kernel{weight.size(2), weight.size(3)};
  const std::vector<int64_t> stride = spatial_attr(c, "strides", s.one_d, 1);
  const std::vector<int64_t> dilation = spatial_attr(c, "dilations", s.one_d, 1);
  const std::vector<int64_t> output_padding = spatial_attr(c, "output_padding", s.one_d, 0);
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> begin(2, 0), end(2, 0);
  if (auto output_shape = c.attr_ints("output_shape")) {
    if (output_shape->size() != (s.one_d ? 1U : 2U)) c.fail("output_shape has ", output_shape->size(), " values");
    if (s.one_d) output_shape->insert(output_shape->begin(), 1);
    for (int d = 0; d < 2; ++d) {
      const int64_t total =
          stride[d] * (s.in[d] - 1) + output_padding[d] + (kernel[d] - 1) * dilation[d] + 1 - (*output_shape)[d];
      if (total < 0) c.fail("output_shape ", (*output_shape)[d], " is larger than the op can produce");
      begin[d] = auto_pad == "SAME_UPPER" ? total - total / 2 : total / 2;
      end[d] = total - begin[d];
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int d = 0; d < 2; ++d) {  // the output is input * stride
      const int64_t total = std::max<int64_t>(
          stride[d] * (s.in[d] - 1) + output_padding[d] + (kernel[d] - 1) * dilation[d] + 1 - s.in[d] * stride[d], 0);
      begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end[d] = total - begin[d];
    }
  } else if (auto_pad == "NOTSET") {
    const Padding p = spatial_padding(c, s, kernel, stride, dilation);
    begin = p.begin;
    end = p.end;
  } else if (auto_pad != "VALID") {
    c.fail("auto_pad \"", auto_pad, "\" is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
  std::optional<Tensor> bias;
  if (c.has(2)) bias = c.input(2);
  const int64_t groups = c.attr_int("group", 1);
  const bool even = begin == end;
  Tensor y = conv_transpose2d(s.x, weight, bias, Pair(stride[0], stride[1]), even ? Pair(begin[0], begin[1]) : Pair(0),
                              Pair(output_padding[0], output_padding[1]), groups, Pair(dilation[0], dilation[1]));
  if (!even) {
    for (int d = 0; d < 2; ++d) y = y.slice(2 + d, begin[d], y.size(2 + d) - end[d]);
  }
  return {spatial_output(s, y)};
}

Tensors max_pool(const NodeContext& c) {
  if (c.node().output_size() > 1 && !c.node().output(1).empty()) c.fail("the Indices output is not supported");
  if (c.attr_int("storage_order", 0) != 0) c.fail("storage_order 1 is not supported");
  const Spatial s = spatial_input(c, c.input(0));
  const std::vector<int64_t> kernel = spatial_attr(c, "kernel_shape", s.one_d, 1);
  const std::vector<int64_t> stride = spatial_attr(c, "strides", s.one_d, 1);
  const std::vector<int64_t> dilation = spatial_attr(c, "dilations", s.one_d, 1);
  const Padding p = spatial_padding(c, s, kernel, stride, dilation);
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  Tensor x = s.x;
  Pair padding(p.begin[0], p.begin[1]);
  // ember pads by at most half the kernel, as PyTorch: larger or asymmetric padding is explicit.
  if (!p.symmetric() || p.begin[0] > kernel[0] / 2 || p.begin[1] > kernel[1] / 2) {
    x = pad_spatial(x, p, -std::numeric_limits<double>::infinity());
    padding = Pair(0);
  }
  return {spatial_output(s, max_pool2d(x, Pair(kernel[0], kernel[1]), Pair(stride[0], stride[1]), padding,
                                       Pair(dilation[0], dilation[1]), ceil_mode))};
}

Tensors average_pool(const NodeContext& c) {
  const Spatial s = spatial_input(c, c.input(0));
  const std::vector<int64_t> kernel = spatial_attr(c, "kernel_shape", s.one_d, 1);
  const std::vector<int64_t> stride = spatial_attr(c, "strides", s.one_d, 1);
  if (auto d = c.attr_ints("dilations"); d && std::any_of(d->begin(), d->end(), [](int64_t v) { return v != 1; })) {
    c.fail("dilations other than 1 are not supported");
  }
  const Padding p = spatial_padding(c, s, kernel, stride, {1, 1});
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  const bool count_include_pad = c.attr_int("count_include_pad", 0) != 0;
  Tensor x = s.x;
  Pair padding(p.begin[0], p.begin[1]);
  if (!p.symmetric() || p.begin[0] > kernel[0] / 2 || p.begin[1] > kernel[1] / 2) {
    if (!count_include_pad) c.fail("asymmetric or large pads need count_include_pad=1");
    x = pad_spatial(x, p, 0.0);
    padding = Pair(0);
  }
  return {spatial_output(
      s, avg_pool2d(x, Pair(kernel[0], kernel[1]), Pair(stride[0], stride[1]), padding, ceil_mode, count_include_pad))};
}

Axes spatial_dims(const Tensor& x) {
  Axes dims;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

Tensors global_average_pool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  if (x.dim() == 4) return {adaptive_avg_pool2d(x, Pair(1))};
  return {mean(x, spatial_dims(x), true)};
}

Tensors global_max_pool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {amax(x, spatial_dims(x), true)};
}

Tensors batch_normalization(const NodeContext& c) {
  if (c.opset() < 9 && c.attr_int("spatial", 1) != 1) c.fail("spatial=0 is not supported");
  const Tensor& x = c.input(0);
  const Tensor &running_mean = c.input(3), &running_var = c.input(4);
  const bool training = c.training() || c.attr_int("training_mode", 0) != 0;
  const double eps = c.attr_float("epsilon", 1e-5F);
  const double momentum = 1.0 - c.attr_float("momentum", 0.9F);  // PyTorch's convention
  Tensor y = batch_norm(x, running_mean, running_var, c.input(1), c.input(2), training, momentum, eps);
  Tensors out{y};
  for (int i = 1; i < c.node().output_size(); ++i) out.push_back(i == 1 ? running_mean : running_var);
  return out;
}

Tensors layer_normalization(const NodeContext& c) {
  for (int i = 1; i < c.node().output_size(); ++i) {
    if (!c.node().output(i).empty()) c.fail("the Mean and InvStdDev outputs are not supported");
  }
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", -1), x.dim());
  const Shape normalized(std::vector<int64_t>(x.shape().begin() + axis, x.shape().end()));
  auto fit = [&](const Tensor& t) {
    if (t.numel() != normalized.numel()) {
      c.fail("scale and bias must have the normalized shape ", normalized, ", got ", t.shape());
    }
    return t.shape() == normalized ? t : t.reshape(normalized);
  };
  std::optional<Tensor> bias;
  if (c.has(2)) bias = fit(c.input(2));
  return {layer_norm(x, normalized, fit(c.input(1)), bias, c.attr_float("epsilon", 1e-5F))};
}

// Softmax and LogSoftmax: before opset 13 they flatten to (prod(dims < axis), prod(dims >= axis))
// and normalize rows; from 13 they normalize along one axis.
template <bool Log>
Tensors softmax_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  auto f = [](const Tensor& t, int64_t dim) { return Log ? log_softmax(t, dim) : softmax(t, dim); };
  if (x.dim() == 0) return {f(x.reshape({1}), 0).reshape({})};
  if (c.opset() >= 13) return {f(x, axis_in(c, c.attr_int("axis", -1), x.dim()))};
  const int64_t axis = axis_in(c, c.attr_int("axis", 1), x.dim());
  if (axis == x.dim() - 1) return {f(x, axis)};
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  return {f(x.reshape({rows, -1}), 1).reshape(x.shape())};
}

// --- shapes ----------------------------------------------------------------------------------------------

Tensors reshape_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> shape;
  if (c.opset() < 5) {
    shape = c.attr_ints("shape").value_or(std::vector<int64_t>{});
  } else {
    shape = c.ints(1);
  }
  const bool allow_zero = c.attr_int("allowzero", 0) != 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= x.dim()) c.fail("shape[", i, "] is 0 (copy) but the input has rank ", x.dim());
      shape[i] = x.size(static_cast<int64_t>(i));
    } else if (shape[i] < -1) {
      c.fail("shape[", i, "] is ", shape[i]);
    }
  }
  return {x.reshape(Shape(shape))};
}

Tensors flatten(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t rank = x.dim();
  int64_t axis = c.attr_int("axis", 1);
  if (axis < -rank || axis > rank) c.fail("axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.size(d);
  int64_t inner = 1;
  for (int64_t d = axis; d < rank; ++d) inner *= x.size(d);
  return {x.reshape({outer, inner})};
}

Tensors transpose(const NodeContext& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> perm = c.attr_ints("perm").value_or(std::vector<int64_t>{});
  if (perm.empty()) {
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  }
  return {x.permute(Axes(perm))};
}

Tensors squeeze_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const auto axes = ints_attr_or_input(c, "axes", 1, 13);
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool drop = false;
    if (axes) {
      for (int64_t a : *axes) drop = drop || axis_in(c, a, x.dim()) == d;
      if (drop && x.size(d) != 1) c.fail("cannot squeeze axis ", d, " of size ", x.size(d));
    } else {
      drop = x.size(d) == 1;
    }
    if (!drop) shape.push_back(x.size(d));
  }
  return {x.reshape(Shape(shape))};
}

Tensors unsqueeze_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const auto axes = ints_attr_or_input(c, "axes", 1, 13);
  if (!axes) c.fail("axes are required");
  const int64_t rank = x.dim() + static_cast<int64_t>(axes->size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : *axes) {
    const int64_t d = axis_in(c, a, rank);
    if (inserted[d]) c.fail("axis ", a, " is given twice");
    inserted[d] = true;
  }
  std::vector<int64_t> shape;
  int64_t next = 0;
  for (int64_t d = 0; d < rank; ++d) shape.push_back(inserted[d] ? 1 : x.size(next++));
  return {x.reshape(Shape(shape))};
}

Tensors concat(const NodeContext& c) {
  std::vector<Tensor> parts;
  for (int i = 0; i < c.num_inputs(); ++i) parts.push_back(c.input(i));
  const int64_t axis = axis_in(c, c.attr_int("axis", 0), parts.at(0).dim());
  return {cat(parts, axis)};
}

Tensors split_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", 0), x.dim());
  const int64_t n = c.node().output_size();
  std::optional<std::vector<int64_t>> sizes = ints_attr_or_input(c, "split", 1, 13);
  if (!sizes) {
    const int64_t parts = c.opset() >= 18 ? c.attr_int("num_outputs", n) : n;
    if (parts <= 0) c.fail("num_outputs must be positive");
    const int64_t each = (x.size(axis) + parts - 1) / parts;  // the last part may be smaller
    sizes.emplace();
    for (int64_t left = x.size(axis), i = 0; i < parts; ++i) {
      sizes->push_back(std::min(each, left));
      left -= sizes->back();
    }
  }
  if (static_cast<int64_t>(sizes->size()) != n) c.fail(sizes->size(), " split sizes for ", n, " outputs");
  if (std::accumulate(sizes->begin(), sizes->end(), int64_t{0}) != x.size(axis)) {
    c.fail("split sizes do not sum to the axis' size ", x.size(axis));
  }
  return split(x, *sizes, axis);
}

Tensors slice_op(const NodeContext& c) {
  Tensor x = c.input(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts").value_or(std::vector<int64_t>{});
    ends = c.attr_ints("ends").value_or(std::vector<int64_t>{});
    axes = c.attr_ints("axes").value_or(std::vector<int64_t>{});
  } else {
    starts = c.ints(1);
    ends = c.ints(2);
    if (c.has(3)) axes = c.ints(3);
    if (c.has(4)) steps = c.ints(4);
  }
  if (starts.size() != ends.size()) c.fail(starts.size(), " starts for ", ends.size(), " ends");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps differ in length");
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = axis_in(c, axes[i], x.dim()), dim = x.size(axis), step = steps[i];
    if (step == 0) c.fail("a step is 0");
    auto wrap = [&](int64_t v) { return v < 0 ? v + dim : v; };
    int64_t start = wrap(starts[i]), end = wrap(ends[i]);
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      x = x.slice(axis, start, std::max(start, end), step);
    } else {
      // Backwards: flip, then an ascending slice of the flipped axis.
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      const int64_t first = dim - 1 - start, last = dim - 1 - end;
      x = flip(x, {axis}).slice(axis, first, std::max(first, last), -step);
    }
  }
  return {x};
}

// Indices may be negative (counted from the end).
Tensor wrap_indices(const NodeContext& c, int input, int64_t size) {
  const Tensor& idx = c.input(input);
  if (is_floating(idx.dtype()) || idx.dtype() == kBool) c.fail("indices must be integers, not ", idx.dtype());
  const Tensor i64 = idx.to(kInt64);
  if (c.is_static(input)) {
    const std::vector<int64_t> v = c.ints(input);
    bool negative = false;
    for (int64_t i : v) {
      if (i < -size || i >= size) c.fail("index ", i, " is out of range for size ", size);
      negative = negative || i < 0;
    }
    if (!negative) return i64;
  }
  return where(lt(i64, 0), add(i64, size), i64);
}

Tensors gather_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", 0), x.dim());
  const Tensor idx = wrap_indices(c, 1, x.size(axis));
  if (axis == 0 && x.dim() == 2) return {embedding(x, idx)};
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  for (int64_t d : idx.shape()) shape.push_back(d);
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  return {index_select(x, axis, idx.reshape({-1})).reshape(Shape(shape))};
}

Tensors gather_elements(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", 0), x.dim());
  return {gather(x, axis, wrap_indices(c, 1, x.size(axis)))};
}

// numpy broadcasting of two shapes.
std::vector<int64_t> broadcast_shapes(const NodeContext& c, std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() < b.size()) std::swap(a, b);
  b.insert(b.begin(), a.size() - b.size(), 1);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || b[i] == 1) continue;
    if (a[i] == 1) {
      a[i] = b[i];
      continue;
    }
    c.fail("shapes cannot be broadcast: dimension ", i, " is ", a[i], " and ", b[i]);
  }
  return a;
}

Tensors expand_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {x.expand(Shape(broadcast_shapes(c, dims_of(x), c.ints(1))))};
}

Tensors tile_op(const NodeContext& c) { return {tile(c.input(0), Shape(c.ints(1)))}; }

Tensors shape_op(const NodeContext& c) {
  const std::vector<int64_t> dims = dims_of(c.input(0));
  const auto rank = static_cast<int64_t>(dims.size());
  auto clip = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clip(c.attr_int("start", 0)), end = clip(c.attr_int("end", rank));
  return {from_vector(std::vector<int64_t>(dims.begin() + start, dims.begin() + std::max(start, end)))};
}

Tensors size_op(const NodeContext& c) { return {scalar_tensor(c.input(0).numel(), kInt64)}; }

Tensors constant(const NodeContext& c) {
  if (const auto* a = c.attr("value"); a != nullptr) return {tensor_of(a->t(), c.base_dir(), c.what())};
  if (const auto* a = c.attr("value_float"); a != nullptr) return {scalar_tensor(a->f(), kFloat32)};
  if (const auto* a = c.attr("value_int"); a != nullptr) return {scalar_tensor(a->i(), kInt64)};
  if (auto v = c.attr_floats("value_floats")) return {from_vector(*v)};
  if (auto v = c.attr_ints("value_ints")) return {from_vector(*v)};
  c.fail("only tensor, float and int values are supported (not sparse or string ones)");
}

Tensors constant_of_shape(const NodeContext& c) {
  const Shape shape(c.ints(0));
  if (const auto* a = c.attr("value"); a != nullptr) {
    const Tensor v = tensor_of(a->t(), c.base_dir(), c.what());
    if (v.numel() != 1) c.fail("value must hold one element");
    return {full(shape, v.reshape({-1}).to(kFloat64).to_vector<double>()[0], v.dtype())};
  }
  return {zeros(shape, kFloat32)};
}

Tensors range_op(const NodeContext& c) {
  const Tensor& start = c.input(0);
  const DType dtype = start.dtype();
  const double s = c.scalar(0), limit = c.scalar(1), delta = c.scalar(2);
  if (delta == 0) c.fail("delta is 0");
  const auto n = static_cast<int64_t>(std::max(std::ceil((limit - s) / delta), 0.0));
  // s + i * delta, computed in double and rounded once, as the spec defines it.
  return {add(mul(arange(n, kFloat64), delta), s).to(dtype)};
}

Tensors trilu(const NodeContext& c) {
  const int64_t k = c.has(1) ? static_cast<int64_t>(c.scalar(1)) : 0;
  return {c.attr_int("upper", 1) != 0 ? triu(c.input(0), k) : tril(c.input(0), k)};
}

Tensors pad_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const std::string mode = c.attr_string("mode", "constant");
  if (mode != "constant") c.fail("mode \"", mode, "\" is not supported (only constant)");
  std::vector<int64_t> pads;
  double value = 0;
  std::vector<int64_t> axes;
  if (c.opset() < 11) {
    pads = c.attr_ints("pads").value_or(std::vector<int64_t>{});
    value = c.attr_float("value", 0.0F);
  } else {
    pads = c.ints(1);
    if (c.has(2)) value = c.scalar(2);
    if (c.has(3)) axes = c.ints(3);
  }
  if (axes.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  }
  const auto n = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads.size()) != 2 * n) c.fail("pads has ", pads.size(), " values for ", n, " axes");
  // ONNX: all begins, then all ends; torch's order: (last lo, last hi, second-last lo, ...).
  std::vector<int64_t> begin(x.dim(), 0), end(x.dim(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = axis_in(c, axes[i], x.dim());
    begin[d] = pads[i];
    end[d] = pads[i + n];
    if (begin[d] < 0 || end[d] < 0) c.fail("negative pads are not supported");
  }
  std::vector<int64_t> torch_pads;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    torch_pads.push_back(begin[d]);
    torch_pads.push_back(end[d]);
  }
  return {pad(x, torch_pads, value)};
}

Tensors dropout_op(const NodeContext& c) {
  const Tensor& x = c.input(0);
  double ratio = c.opset() < 12 ? c.attr_float("ratio", 0.5F) : (c.has(1) ? c.scalar(1) : 0.5);
  const bool training = c.training() || (c.opset() >= 12 && c.has(2) && c.scalar(2) != 0);
  const bool wants_mask = c.node().output_size() > 1 && !c.node().output(1).empty();
  if (!training || ratio == 0) {
    Tensors out{x};
    if (wants_mask) out.push_back(ones_like(x, kBool));
    return out;
  }
  if (wants_mask) c.fail("the mask output is not supported in training");
  return {dropout(x, ratio, true)};
}

// CumSum: along a constant axis; reverse sums from the end, exclusive leaves each element out.
Tensors cum_sum(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, static_cast<int64_t>(c.scalar(1)), x.dim());
  const bool reverse = c.attr_int("reverse", 0) != 0, exclusive = c.attr_int("exclusive", 0) != 0;
  Tensor y = cumsum(reverse ? flip(x, {axis}) : x, axis).to(x.dtype());
  const int64_t n = x.size(axis);
  if (exclusive && n > 0) y = cat({zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, n - 1)}, axis);
  return {reverse ? flip(y, {axis}) : y};
}

// TopK: the k largest (or smallest) along an axis, values and int64 indices, sorted.
Tensors top_k(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", -1), x.dim());
  const int64_t k = c.opset() < 10 ? c.attr_int("k", 0) : c.ints(1).at(0);
  if (k < 0 || k > x.size(axis)) c.fail("k = ", k, " is not in [0, ", x.size(axis), "]");
  ValuesAndIndices top = topk(x, k, axis, c.attr_int("largest", 1) != 0, true);
  return {top.values, top.indices};
}

// --- reductions -------------------------------------------------------------------------------------------

Tensors reduce(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const std::string& op = c.node().op_type();
  const int64_t axes_input_since = op == "ReduceSum" ? 13 : 18;
  std::optional<std::vector<int64_t>> axes = ints_attr_or_input(c, "axes", 1, axes_input_since);
  const bool keepdims = c.attr_int("keepdims", 1) != 0;
  if ((!axes || axes->empty()) && c.attr_int("noop_with_empty_axes", 0) != 0) return {x};
  Axes dims;
  if (axes && !axes->empty()) {
    for (int64_t a : *axes) dims.push_back(axis_in(c, a, x.dim()));
  } else {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  if (op == "ReduceMean") return {mean(x, dims, keepdims)};
  if (op == "ReduceSum") return {sum(x, dims, keepdims)};
  if (op == "ReduceMax") return {amax(x, dims, keepdims)};
  if (op == "ReduceMin") return {amin(x, dims, keepdims)};
  if (op == "ReduceProd") return {prod(x, dims, keepdims)};
  if (op == "ReduceSumSquare") return {sum(square(x), dims, keepdims)};
  if (op == "ReduceL2") return {ember::sqrt(sum(square(x), dims, keepdims))};
  if (op == "ReduceL1") return {sum(ember::abs(x), dims, keepdims)};
  if (op == "ReduceLogSumExp") return {logsumexp(x, dims, keepdims)};
  c.fail("internal error: not a reduction");
}

Tensors arg_reduce(const NodeContext& c) {
  if (c.attr_int("select_last_index", 0) != 0) c.fail("select_last_index=1 is not supported");
  const Tensor& x = c.input(0);
  const int64_t axis = axis_in(c, c.attr_int("axis", 0), x.dim());
  const bool keepdims = c.attr_int("keepdims", 1) != 0;
  return {c.node().op_type() == "ArgMax" ? argmax(x, axis, keepdims) : argmin(x, axis, keepdims)};
}

// The table, by op type. `since` is the first opset whose semantics the handler implements (ember
// reads opsets from 7 on, so most start there).
constexpr OpDef kOps[] = {
    {"Abs", 7, unary<abs_>},
    {"Add", 7, binary_math},
    {"And", 7, binary_math},
    {"ArgMax", 7, arg_reduce},
    {"ArgMin", 7, arg_reduce},
    {"AveragePool", 7, average_pool},
    {"BatchNormalization", 7, batch_normalization},
    {"Cast", 7, cast},
    {"Ceil", 7, round_op<true>},
    {"CastLike", 15, cast_like},
    {"Clip", 7, clip},
    {"Concat", 7, concat},
    {"Constant", 7, constant},
    {"ConstantOfShape", 9, constant_of_shape},
    {"Conv", 7, conv},
    {"ConvTranspose", 7, conv_transpose},
    {"Cos", 7, unary<cos_>},
    {"CumSum", 11, cum_sum},
    {"Div", 7, binary_math},
    {"Dropout", 7, dropout_op, false, true},
    {"Equal", 7, binary_math},
    {"Erf", 9, unary<erf_>},
    {"Exp", 7, unary<exp_>},
    {"Expand", 8, expand_op},
    {"Flatten", 7, flatten},
    {"Floor", 7, round_op<false>},
    {"Gather", 7, gather_op},
    {"GatherElements", 11, gather_elements},
    {"Gelu", 20, gelu_op},
    {"Gemm", 7, gemm},
    {"GlobalAveragePool", 7, global_average_pool},
    {"GlobalMaxPool", 7, global_max_pool},
    {"Greater", 7, binary_math},
    {"GreaterOrEqual", 12, binary_math},
    {"HardSigmoid", 7, hard_sigmoid},
    {"HardSwish", 14, hard_swish},
    {"Identity", 7, unary<identity_>},
    {"IsInf", 10, is_inf},
    {"IsNaN", 9, unary<isnan_>},
    {"LayerNormalization", 17, layer_normalization},
    {"LeakyRelu", 7, leaky_relu},
    {"Less", 7, binary_math},
    {"LessOrEqual", 12, binary_math},
    {"Log", 7, unary<log_>},
    {"LogSoftmax", 7, softmax_op<true>},
    {"MatMul", 7, matmul_op},
    {"Max", 7, variadic},
    {"MaxPool", 7, max_pool},
    {"Mean", 7, variadic},
    {"Min", 7, variadic},
    {"Mul", 7, binary_math},
    {"Neg", 7, unary<neg_>},
    {"Not", 7, unary<not_>},
    {"Or", 7, binary_math},
    {"Pad", 7, pad_op},
    {"Pow", 7, binary_math},
    {"Range", 11, range_op},
    {"Reciprocal", 7, unary<reciprocal_>},
    {"ReduceL1", 7, reduce},
    {"ReduceL2", 7, reduce},
    {"ReduceLogSumExp", 7, reduce},
    {"ReduceMax", 7, reduce},
    {"ReduceMean", 7, reduce},
    {"ReduceMin", 7, reduce},
    {"ReduceProd", 7, reduce},
    {"ReduceSum", 7, reduce},
    {"ReduceSumSquare", 7, reduce},
    {"Relu", 7, unary<relu_>},
    {"Reshape", 5, reshape_op},
    {"Shape", 7, shape_op, true},
    {"Sigmoid", 7, unary<sigmoid_>},
    {"Sign", 9, unary<sign_>},
    {"Sin", 7, unary<sin_>},
    {"Size", 7, size_op, true},
    {"Slice", 7, slice_op},
    {"Softmax", 7, softmax_op<false>},
    {"Softplus", 7, softplus},
    {"Split", 7, split_op},
    {"Sqrt", 7, unary<sqrt_>},
    {"Squeeze", 7, squeeze_op},
    {"Sub", 7, binary_math},
    {"Sum", 7, variadic},
    {"Tanh", 7, unary<tanh_>},
    {"Tile", 7, tile_op},
    {"Transpose", 7, transpose},
    {"TopK", 7, top_k},
    {"Trilu", 14, trilu},
    {"Unsqueeze", 7, unsqueeze_op},
    {"Where", 9, where_op},
};

}  // namespace

const OpDef* find_op(std::string_view domain, std::string_view op_type) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  for (const OpDef& op : kOps) {
    if (op.op_type == op_type) return &op;
  }
  return nullptr;
}

std::string unsupported_reason(const ::onnx::NodeProto& node, int64_t opset) {
  const OpDef* op = find_op(node.domain(), node.op_type());
  if (op == nullptr) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") return "domain \"" + node.domain() + "\" is not imported";
    return "no ember mapping";
  }
  if (opset < op->since) return "needs opset " + std::to_string(op->since) + " or later";
  auto attr = [&](std::string_view name) -> const ::onnx::AttributeProto* {
    for (const auto& a : node.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  };
  const std::string& type = node.op_type();
  if (type == "Pad") {
    if (const auto* mode = attr("mode"); mode != nullptr && mode->s() != "constant") {
      return "mode \"" + mode->s() + "\" (only constant)";
    }
  } else if (type == "MaxPool") {
    if (node.output_size() > 1 && !node.output(1).empty()) return "the Indices output";
  } else if (type == "ArgMax" || type == "ArgMin") {
    if (const auto* last = attr("select_last_index"); last != nullptr && last->i() != 0) return "select_last_index=1";
  }
  if (type == "Conv" || type == "ConvTranspose" || type == "MaxPool" || type == "AveragePool") {
    if (const auto* k = attr("kernel_shape"); k != nullptr && k->ints_size() > 2) return "3-D and higher";
  }
  return "";
}

}  // namespace ember::onnx::detail

// The CUDA column of the kernel table: each entry reads its KernelCall (the operands' raw device
// memory, shapes and strides), merges the operands' dims into the smallest layout that walks them
// all, and calls a launch function of the .cu files (launch.h). Work is queued on the default
// stream, in the order of the calls; a launch's error is an ember::Error naming the op.
#include "cuda/kernels.h"

#include <climits>

#include "core/allocator.h"
#include "cuda/launch.h"
#include "ember/error.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/reduce.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ember::cuda {

#ifdef EMBER_WITH_CUDA

launch::Type launch_type(DType dtype, const char* op) {
  switch (dtype) {
    case kFloat32:
      return launch::Type::kF32;
    case kFloat64:
      return launch::Type::kF64;
    case kFloat16:
      return launch::Type::kF16;
    case kBFloat16:
      return launch::Type::kBF16;
    case kInt64:
      return launch::Type::kI64;
    case kInt32:
      return launch::Type::kI32;
    case kBool:
      return launch::Type::kBool;
    default:
      EMBER_FAIL("[", op, "] the CUDA kernels do not take ", dtype, " yet");
  }
}

void check_launch(const KernelCall& call, bool ran, DType dtype) {
  EMBER_CHECK(ran, "[", call.name(), "] the CUDA kernel does not take ", dtype);
  const char* error = launch::last_error();
  EMBER_CHECK(error[0] == '\0', "[", call.name(), "] the CUDA kernel failed: ", error);
}

launch::Layout layout_of(std::initializer_list<const Operand*> operands) {
  launch::Layout l;
  const Shape& shape = *(*operands.begin())->shape;
  l.operands = static_cast<int>(operands.size());
  l.numel = shape.numel();
  Strides strides[launch::kMaxLaunchOperands];
  int k = 0;
  for (const Operand* o : operands) strides[k++] = broadcast_strides(*o->shape, *o->strides, shape);
  for (int d = 0; d < shape.size(); ++d) {
    const int64_t size = shape[d];
    if (size == 1) continue;
    bool merge = l.ndim > 0;
    for (k = 0; k < l.operands; ++k) merge = merge && l.strides[k][l.ndim - 1] == strides[k][d] * size;
    if (!merge) ++l.ndim;
    l.sizes[l.ndim - 1] = merge ? l.sizes[l.ndim - 1] * size : size;
    for (k = 0; k < l.operands; ++k) l.strides[k][l.ndim - 1] = strides[k][d];
  }
  return l;
}

namespace {

launch::Unary unary_op(OpKind kind) {
  switch (kind) {
// clang-format off
#define EMBER_CASE(name) \
  case OpKind::k##name:  \
    return launch::Unary::k##name;
    EMBER_CASE(Neg)
    EMBER_CASE(Abs)
    EMBER_CASE(Sign)
    EMBER_CASE(Exp)
    EMBER_CASE(Log)
    EMBER_CASE(Log1p)
    EMBER_CASE(Expm1)
    EMBER_CASE(Erf)
    EMBER_CASE(Sqrt)
    EMBER_CASE(Rsqrt)
    EMBER_CASE(Square)
    EMBER_CASE(Sin)
    EMBER_CASE(Cos)
    EMBER_CASE(Tanh)
    EMBER_CASE(Sigmoid)
    EMBER_CASE(Relu)
    EMBER_CASE(Silu)
    EMBER_CASE(GeluErf)
    EMBER_CASE(GeluTanh)
    EMBER_CASE(LogicalNot)
    EMBER_CASE(IsNan)
    EMBER_CASE(IsInf)
#undef EMBER_CASE
      // clang-format on
    default:
      EMBER_FAIL("[", op_name(kind), "] has no CUDA kernel");
  }
}

launch::Binary binary_op(OpKind kind) {
  switch (kind) {
// clang-format off
#define EMBER_CASE(name) \
  case OpKind::k##name:  \
    return launch::Binary::k##name;
    EMBER_CASE(Add)
    EMBER_CASE(Sub)
    EMBER_CASE(Mul)
    EMBER_CASE(Div)
    EMBER_CASE(Pow)
    EMBER_CASE(Minimum)
    EMBER_CASE(Maximum)
    EMBER_CASE(Eq)
    EMBER_CASE(Ne)
    EMBER_CASE(Lt)
    EMBER_CASE(Le)
    EMBER_CASE(Gt)
    EMBER_CASE(Ge)
    EMBER_CASE(LogicalAnd)
    EMBER_CASE(LogicalOr)
    EMBER_CASE(ThresholdBackward)
#undef EMBER_CASE
      // clang-format on
    default:
      EMBER_FAIL("[", op_name(kind), "] has no CUDA kernel");
  }
}

launch::Reduce reduce_op(OpKind kind) {
  switch (kind) {
// clang-format off
#define EMBER_CASE(name) \
  case OpKind::k##name:  \
    return launch::Reduce::k##name;
    EMBER_CASE(Sum)
    EMBER_CASE(Prod)
    EMBER_CASE(Amax)
    EMBER_CASE(Amin)
    EMBER_CASE(Argmax)
    EMBER_CASE(Argmin)
    EMBER_CASE(All)
    EMBER_CASE(Any)
#undef EMBER_CASE
      // clang-format on
    default:
      EMBER_FAIL("[", op_name(kind), "] has no CUDA kernel");
  }
}

// inputs broadcast to the output's shape (strides 0 on broadcast dims); outputs[0] the result.
void unary_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &x = c.inputs[0];
  if (out.numel() == 0) return;
  const bool ran =
      launch::unary(unary_op(c.kind), launch_type(x.dtype, c.name()), out.data, x.data, layout_of({&out, &x}), nullptr);
  check_launch(c, ran, x.dtype);
}

void binary_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &a = c.inputs[0], &b = c.inputs[1];
  if (out.numel() == 0) return;
  const bool ran = launch::binary(binary_op(c.kind), launch_type(a.dtype, c.name()), out.data, a.data, b.data,
                                  layout_of({&out, &a, &b}), nullptr);
  check_launch(c, ran, a.dtype);
}

void where_kernel(const KernelCall& c) {
  const Operand &out = c.outputs[0], &cond = c.inputs[0], &a = c.inputs[1], &b = c.inputs[2];
  if (out.numel() == 0) return;
  launch::where(launch_type(out.dtype, c.name()), out.data, cond.ptr<const bool>(), a.data, b.data,
                layout_of({&out, &cond, &a, &b}), nullptr);
  check_launch(c, true, out.dtype);
}

void copy_kernel(const KernelCall& c) {
  const Operand &dst = c.outputs[0], &src = c.inputs[0];
  if (dst.numel() == 0) return;
  launch::copy(launch_type(dst.dtype, c.name()), launch_type(src.dtype, c.name()), dst.data, src.data,
               layout_of({&dst, &src}), nullptr);
  check_launch(c, true, dst.dtype);
}

void fill_kernel(const KernelCall& c) {
  const Operand& out = c.outputs[0];
  if (out.numel() == 0) return;
  const Scalar& value = c.get<FillAttrs>().value;
  const double v = value.is_floating() ? value.to_double() : static_cast<double>(value.to_int());
  const int64_t i = value.is_floating() ? static_cast<int64_t>(value.to_double()) : value.to_int();
  launch::fill(launch_type(out.dtype, c.name()), out.data, v, i, layout_of({&out}), nullptr);
  check_launch(c, true, out.dtype);
}

// inputs: x (any layout); outputs: contiguous over the kept dims. ReduceAttrs lists the reduced dims.
void reduce_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  if (out.numel() == 0) return;
  bool reduced[kMaxDims] = {};
  for (int64_t d : c.get<ReduceAttrs>().dims) reduced[d] = true;
  const cpu::ReduceLayout layout = cpu::make_reduce_layout(*x.shape, *x.strides, reduced);
  launch::ReduceShape s;
  s.kept_ndim = layout.kept_ndim;
  s.reduced_ndim = layout.reduced_ndim;
  for (int d = 0; d < kMaxDims; ++d) {
    s.kept_sizes[d] = layout.kept_sizes[d];
    s.kept_strides[d] = layout.kept_strides[d];
    s.reduced_sizes[d] = layout.reduced_sizes[d];
    s.reduced_strides[d] = layout.reduced_strides[d];
  }
  s.num_outputs = layout.num_outputs;
  s.reduce_size = layout.reduce_size;
  const launch::Reduce op = reduce_op(c.kind);
  const launch::Type in_type = launch_type(x.dtype, c.name());
  const int64_t workspace_bytes = launch::reduce_workspace_bytes(op, in_type, s);
  std::shared_ptr<StorageImpl> workspace;
  if (workspace_bytes > 0) workspace = allocate_storage(workspace_bytes, out.device, c.name());
  const bool ran = launch::reduce(op, in_type, launch_type(out.dtype, c.name()), out.data, x.data, s,
                                  workspace ? workspace->data() : nullptr, nullptr);
  check_launch(c, ran, x.dtype);
}

// inputs: x, contiguous; outputs: the same shape. DimAttrs: the normalized dim.
void softmax_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  EMBER_CHECK(x.is_contiguous() && out.is_contiguous(), "[", c.name(), "] the CUDA kernel takes contiguous tensors");
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  const int64_t size = x.dim() == 0 ? 1 : x.size(d);
  for (int i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= x.size(i);
    if (i > d) inner *= x.size(i);
  }
  const bool ran = launch::softmax(c.kind == OpKind::kLogSoftmax, launch_type(x.dtype, c.name()), out.data, x.data,
                                   outer, size, inner, nullptr);
  check_launch(c, ran, x.dtype);
}

// inputs: the output gradient and the forward's output, contiguous, over the last dim.
void softmax_backward_kernel(const KernelCall& c) {
  const Operand &grad = c.inputs[0], &y = c.inputs[1], &dx = c.outputs[0];
  if (dx.numel() == 0) return;
  EMBER_CHECK(grad.is_contiguous() && y.is_contiguous() && dx.is_contiguous(), "[", c.name(),
              "] the CUDA kernel takes contiguous tensors");
  const int64_t n = y.dim() == 0 ? 1 : y.size(-1);
  const bool ran = launch::softmax_backward(c.kind == OpKind::kLogSoftmaxGrad, launch_type(y.dtype, c.name()), dx.data,
                                            grad.data, y.data, dx.numel() / n, n, nullptr);
  check_launch(c, ran, y.dtype);
}

// The CPU kernels' reading of a class-loss call (kernels/cpu/loss.h).
launch::ClassLoss class_loss_of(const KernelCall& c, const Operand& scores, const Operand& target) {
  const cpu::ClassLossArgs a = cpu::class_loss_args(c, scores, target);
  return {a.outer, a.classes, a.inner, a.target, a.ignore_index, a.label_smoothing};
}

// inputs: scores, target; outputs: loss, lse (per position). A target that is neither a class nor
// ignore_index is found on the device and reported as the CPU kernel reports it (the one read back
// waits for the kernel).
void cross_entropy_forward_kernel(const KernelCall& c) {
  const Operand &scores = c.inputs[0], &target = c.inputs[1];
  const launch::ClassLoss a = class_loss_of(c, scores, target);
  if (a.outer * a.inner == 0) return;
  constexpr int64_t kNone = INT64_MAX;
  const std::shared_ptr<StorageImpl> flag = allocate_storage(sizeof(int64_t), scores.device, c.name());
  copy_bytes(flag->data(), scores.device, &kNone, kCPU, sizeof(kNone));
  const bool ran = launch::cross_entropy_forward(launch_type(scores.dtype, c.name()), a, scores.data, c.outputs[0].data,
                                                 c.outputs[1].data, static_cast<int64_t*>(flag->data()), nullptr);
  check_launch(c, ran, scores.dtype);
  int64_t bad = kNone;
  copy_bytes(&bad, kCPU, flag->data(), scores.device, sizeof(bad));
  if (bad != kNone) {
    int64_t t = 0;
    copy_bytes(&t, kCPU, a.target + bad, scores.device, sizeof(t));
    EMBER_FAIL("[", c.name(), "] target ", t, " at position ", bad, " (flattened target of shape ", *target.shape,
               ") is out of bounds for ", a.classes, " classes: expected a class in [0, ", a.classes,
               ") or ignore_index (", a.ignore_index, ")");
  }
}

// inputs: scores, target, lse, scale; outputs: the scores' gradient.
void cross_entropy_backward_kernel(const KernelCall& c) {
  const Operand &scores = c.inputs[0], &target = c.inputs[1], &scale = c.inputs[3], &grad = c.outputs[0];
  if (grad.numel() == 0) return;
  const bool ran =
      launch::cross_entropy_backward(launch_type(scores.dtype, c.name()), class_loss_of(c, scores, target), scores.data,
                                     c.inputs[2].data, scale.data, scale.numel() == 1 ? 0 : 1, grad.data, nullptr);
  check_launch(c, ran, scores.dtype);
}

void* data_or_null(const Operand& o) { return o.defined() ? o.data : nullptr; }

// Operands: input 0 the gradient; outputs the parameter, then the state in the order of the
// attributes' formula (absent optional state: undefined), all contiguous, updated in place.
void sgd_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  const SgdAttrs& attrs = c.get<SgdAttrs>();
  launch::SgdStep s{attrs.lr, attrs.momentum, attrs.dampening, attrs.weight_decay, attrs.nesterov, attrs.first_step};
  const bool ran =
      launch::sgd_step(launch_type(param.dtype, c.name()), s, param.data, c.inputs[0].data,
                       c.outputs.size() > 1 ? data_or_null(c.outputs[1]) : nullptr, param.numel(), nullptr);
  check_launch(c, ran, param.dtype);
}

void adam_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  const AdamAttrs& attrs = c.get<AdamAttrs>();
  launch::AdamStep s;
  s.lr = attrs.lr;
  s.beta1 = attrs.beta1;
  s.beta2 = attrs.beta2;
  s.eps = attrs.eps;
  s.weight_decay = attrs.weight_decay;
  s.step_size = attrs.step_size;
  s.bias_correction2_sqrt = attrs.bias_correction2_sqrt;
  s.decoupled_weight_decay = attrs.decoupled_weight_decay;
  const bool ran = launch::adam_step(
      launch_type(param.dtype, c.name()), s, param.data, c.inputs[0].data, c.outputs[1].data, c.outputs[2].data,
      c.outputs.size() > 3 ? data_or_null(c.outputs[3]) : nullptr, param.numel(), nullptr);
  check_launch(c, ran, param.dtype);
}

// outputs: one contiguous tensor of draws (RandomAttrs gives the key, the first block and, for
// randint, the range).
void random_kernel(const KernelCall& c) {
  const Operand& out = c.outputs[0];
  const RandomAttrs& attrs = c.get<RandomAttrs>();
  bool ran = true;
  if (c.kind == OpKind::kRandInt) {
    launch::random_int(out.ptr<int64_t>(), out.numel(), attrs.low, attrs.high, attrs.seed, attrs.first_block, nullptr);
  } else {
    ran = launch::random_float(c.kind == OpKind::kRandNormal ? launch::Draw::kNormal : launch::Draw::kUniform,
                               launch_type(out.dtype, c.name()), out.data, out.numel(), attrs.seed, attrs.first_block,
                               nullptr);
  }
  check_launch(c, ran, out.dtype);
}

// inputs: x; outputs: y = x * mask and the mask, contiguous.
void dropout_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &y = c.outputs[0], &mask = c.outputs[1];
  const DropoutAttrs& attrs = c.get<DropoutAttrs>();
  const bool ran = launch::dropout(launch_type(x.dtype, c.name()), y.data, mask.data, x.data, x.numel(), attrs.p,
                                   attrs.seed, attrs.first_block, nullptr);
  check_launch(c, ran, x.dtype);
}

// outputs: a 1-D tensor of start + i * step.
void arange_kernel(const KernelCall& c) {
  const RangeAttrs& r = c.get<RangeAttrs>();
  const Operand& out = c.outputs[0];
  const bool integral = !r.start.is_floating() && !r.step.is_floating() && !r.end.is_floating();
  const bool ran =
      launch::arange(launch_type(out.dtype, c.name()), out.data, out.numel(), r.start.to_double(), r.step.to_double(),
                     integral ? r.start.to_int() : 0, integral ? r.step.to_int() : 0, integral, nullptr);
  check_launch(c, ran, out.dtype);
}

// A device flag for a bad index: INT64_MAX until a kernel records the first position holding one.
class BadIndex {
 public:
  BadIndex(Device device, const char* op) : device_(device), storage_(allocate_storage(sizeof(int64_t), device, op)) {
    copy_bytes(storage_->data(), device_, &kNone, kCPU, sizeof(kNone));
  }
  int64_t* data() const { return static_cast<int64_t*>(storage_->data()); }
  // Reads the flag back (waiting for the kernel): throws the CPU kernels' error when it was set.
  void check(const KernelCall& c, const Operand& index, int64_t dim, int64_t size) const {
    int64_t position = kNone;
    copy_bytes(&position, kCPU, data(), device_, sizeof(position));
    if (position == kNone) return;
    int64_t k = 0;
    if (index.dtype == kInt64) {
      copy_bytes(&k, kCPU, index.ptr<const int64_t>() + flat_offset(index, position), device_, sizeof(k));
    } else {
      int32_t k32 = 0;
      copy_bytes(&k32, kCPU, index.ptr<const int32_t>() + flat_offset(index, position), device_, sizeof(k32));
      k = k32;
    }
    EMBER_FAIL("[", c.name(), "] index ", k, " is out of bounds for dimension ", dim, " with size ", size);
  }

 private:
  // The element offset of flat position `flat` (row-major over the shape) of `o`.
  static int64_t flat_offset(const Operand& o, int64_t flat) {
    int64_t offset = 0;
    for (int d = o.dim() - 1; d >= 0; --d) {
      offset += (flat % o.size(d)) * o.stride(d);
      flat /= o.size(d);
    }
    return offset;
  }
  static constexpr int64_t kNone = INT64_MAX;
  Device device_;
  std::shared_ptr<StorageImpl> storage_;
};

// inputs: src (contiguous, at least 1-D), index (at most 1-D, int32 or int64); outputs: src's
// shape with `count` rows along dim. A 0-dim operand is taken as 1-D.
void index_select_kernel(const KernelCall& c) {
  const Operand &src = c.inputs[0], &index = c.inputs[1], &out = c.outputs[0];
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= src.size(k);
  for (int k = d + 1; k < src.dim(); ++k) inner *= src.size(k);
  const int64_t size = src.dim() == 0 ? 1 : src.size(d);
  const BadIndex bad(src.device, c.name());
  launch::index_select(out.data, src.data, outer, size, inner * dtype_size(src.dtype), index.data,
                       index.dtype == kInt64, index.numel(), index.dim() == 0 ? 1 : index.stride(0), bad.data(),
                       nullptr);
  check_launch(c, true, src.dtype);
  bad.check(c, index, d, size);
}

// gather (inputs: x, index; outputs: the index's shape) and scatter_add (inputs: index, src;
// outputs: the tensor scattered into, updated in place), along DimAttrs::dim.
void gather_scatter_kernel(const KernelCall& c) {
  const bool scatter = c.kind == OpKind::kScatterAdd;
  const Operand& index = scatter ? c.inputs[0] : c.inputs[1];
  const Operand& data = scatter ? c.inputs[1] : c.inputs[0];
  const Operand& out = c.outputs[0];
  if (index.numel() == 0) return;
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  const Operand& indexed = scatter ? out : data;
  // The walk over the index's shape; the indexed operand does not step along d (its offset there
  // is index * dim_stride).
  Strides out_strides = *out.strides, data_strides = *data.strides;
  (scatter ? out_strides : data_strides)[d] = 0;
  const Shape& shape = *index.shape;
  const Operand walk_out{out.data, out.dtype, out.device, &shape, &out_strides};
  const Operand walk_data{data.data, data.dtype, data.device, &shape, &data_strides};
  const BadIndex bad(out.device, c.name());
  const bool ran = launch::gather_scatter(scatter, launch_type(out.dtype, c.name()), out.data, data.data, index.data,
                                          index.dtype == kInt64, layout_of({&walk_out, &walk_data, &index}),
                                          indexed.stride(d), indexed.size(d), bad.data(), nullptr);
  check_launch(c, ran, out.dtype);
  bad.check(c, index, d, indexed.size(d));
}

// inputs: grad, x (contiguous, one shape); outputs: grad * GELU'(x). ActivationAttrs: the form.
void gelu_grad_kernel(const KernelCall& c) {
  const Operand &g = c.inputs[0], &x = c.inputs[1], &out = c.outputs[0];
  if (out.numel() == 0) return;
  const launch::Binary op = c.get<ActivationAttrs>().activation == Activation::kGeluTanh ? launch::Binary::kGeluGradTanh
                                                                                         : launch::Binary::kGeluGradErf;
  const bool ran =
      launch::binary(op, launch_type(x.dtype, c.name()), out.data, g.data, x.data, layout_of({&out, &g, &x}), nullptr);
  check_launch(c, ran, x.dtype);
}

// Layer norm and RMS norm over rows of prod(normalized_shape) contiguous elements (the CPU kernels'
// operands, kernels/cpu/norm.cpp). Forward: inputs x, weight, bias (layer norm); outputs y, mean
// (layer norm), rstd.
void row_norm_kernel(const KernelCall& c) {
  const Operand& x = c.inputs[0];
  if (x.numel() == 0) return;
  const bool center = c.kind == OpKind::kLayerNorm;
  const LayerNormAttrs& a = c.get<LayerNormAttrs>();
  const int64_t cols = a.normalized_shape.numel();
  const bool ran = launch::row_norm_forward(
      launch_type(x.dtype, c.name()), center, x.numel() / cols, cols, a.eps, x.data, data_or_null(c.inputs[1]),
      center ? data_or_null(c.inputs[2]) : nullptr, c.outputs[0].data, center ? c.outputs[1].data : nullptr,
      c.outputs[center ? 2 : 1].data, nullptr);
  check_launch(c, ran, x.dtype);
}

// Backward: inputs x, grad_out, mean (layer norm), rstd, weight; outputs grad_in, grad_weight,
// grad_bias (layer norm), each of them possibly undefined.
void row_norm_backward_kernel(const KernelCall& c) {
  const bool center = c.kind == OpKind::kLayerNormGrad;
  const Operand &x = c.inputs[0], &grad_out = c.inputs[1];
  const Operand &rstd = c.inputs[center ? 3 : 2], &weight = c.inputs[center ? 4 : 3];
  const int64_t cols = c.get<LayerNormAttrs>().normalized_shape.numel();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const launch::Type type = launch_type(x.dtype, c.name());
  void* grad_weight = c.outputs.size() > 1 ? data_or_null(c.outputs[1]) : nullptr;
  void* grad_bias = center && c.outputs.size() > 2 ? data_or_null(c.outputs[2]) : nullptr;
  std::shared_ptr<StorageImpl> workspace;
  if (grad_weight != nullptr || grad_bias != nullptr) {
    workspace =
        allocate_storage(std::max<int64_t>(launch::row_norm_workspace_bytes(type, rows, cols), 1), x.device, c.name());
  }
  const bool ran =
      launch::row_norm_backward(type, center, rows, cols, x.data, grad_out.data, center ? c.inputs[2].data : nullptr,
                                rstd.data, data_or_null(weight), data_or_null(c.outputs[0]), grad_weight, grad_bias,
                                workspace ? workspace->data() : nullptr, nullptr);
  check_launch(c, ran, x.dtype);
}

// 2-D pooling over contiguous (..., H, W) operands, every leading dim a plane (kernels/cpu/pool.cpp
// reads them alike): `in` is the input's shape, `out` the output's.
launch::Pool2d pool_of(const KernelCall& c, const Operand& in, const Operand& out) {
  const Pool2dAttrs& a = c.get<Pool2dAttrs>();
  EMBER_CHECK(in.is_contiguous() && out.is_contiguous(), "[", c.name(), "] the CUDA kernel takes contiguous tensors");
  launch::Pool2d p;
  p.kind = c.kind == OpKind::kMaxPool2d || c.kind == OpKind::kMaxPool2dGrad   ? launch::Pool::kMax
           : c.kind == OpKind::kAvgPool2d || c.kind == OpKind::kAvgPool2dGrad ? launch::Pool::kAvg
                                                                              : launch::Pool::kAdaptiveAvg;
  p.in_height = in.size(-2);
  p.in_width = in.size(-1);
  p.planes = p.in_height * p.in_width == 0 ? 0 : in.numel() / (p.in_height * p.in_width);
  p.out_height = out.size(-2);
  p.out_width = out.size(-1);
  p.kernel_h = a.kernel_size.h;
  p.kernel_w = a.kernel_size.w;
  p.stride_h = a.stride.h;
  p.stride_w = a.stride.w;
  p.pad_h = a.padding.h;
  p.pad_w = a.padding.w;
  p.dilation_h = a.dilation.h;
  p.dilation_w = a.dilation.w;
  p.count_include_pad = a.count_include_pad;
  return p;
}

// inputs: x; outputs: y and, for max pooling under autograd, the indices (int64, y's shape).
void pool_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &y = c.outputs[0];
  if (y.numel() == 0) return;
  const bool with_indices = c.outputs.size() > 1 && c.outputs[1].defined();
  const bool ran = launch::pool2d_forward(launch_type(x.dtype, c.name()), pool_of(c, x, y), y.data, x.data,
                                          with_indices ? c.outputs[1].ptr<int64_t>() : nullptr, nullptr);
  check_launch(c, ran, x.dtype);
}

// inputs: grad_out and, for max pooling, the indices; outputs: grad_in.
void pool_backward_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &grad_in = c.outputs[0];
  if (grad_in.numel() == 0) return;
  const launch::Pool2d p = pool_of(c, grad_in, grad_out);
  const bool ran =
      launch::pool2d_backward(launch_type(grad_in.dtype, c.name()), p, grad_in.data, grad_out.data,
                              p.kind == launch::Pool::kMax ? c.inputs[1].ptr<const int64_t>() : nullptr, nullptr);
  check_launch(c, ran, grad_in.dtype);
}

}  // namespace

// The dtypes the CUDA kernels take.
constexpr DTypeSet kTypes{kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kBool};

void register_kernels(KernelTable& table) {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
#define EMBER_REGISTER_UNARY(kind, ...) table.add(OpKind::k##kind, kCuda, unary_kernel, kTypes);
  EMBER_UNARY_PRIMITIVES(EMBER_REGISTER_UNARY)
#undef EMBER_REGISTER_UNARY
#define EMBER_REGISTER_BINARY(kind, ...) table.add(OpKind::k##kind, kCuda, binary_kernel, kTypes);
  EMBER_BINARY_PRIMITIVES(EMBER_REGISTER_BINARY)
#undef EMBER_REGISTER_BINARY
  table.add(OpKind::kThresholdBackward, kCuda, binary_kernel, kFloatTypes);
  table.add(OpKind::kWhere, kCuda, where_kernel, kTypes);
  table.add(OpKind::kCopy, kCuda, copy_kernel, kTypes);
  table.add(OpKind::kFill, kCuda, fill_kernel, kTypes);
  for (OpKind kind : {OpKind::kSum, OpKind::kProd, OpKind::kAmax, OpKind::kAmin, OpKind::kArgmax, OpKind::kArgmin,
                      OpKind::kAll, OpKind::kAny}) {
    table.add(kind, kCuda, reduce_kernel, kTypes);
  }
  table.add(OpKind::kSoftmax, kCuda, softmax_kernel, kFloatTypes);
  table.add(OpKind::kLogSoftmax, kCuda, softmax_kernel, kFloatTypes);
  table.add(OpKind::kSoftmaxGrad, kCuda, softmax_backward_kernel, kFloatTypes);
  table.add(OpKind::kLogSoftmaxGrad, kCuda, softmax_backward_kernel, kFloatTypes);
  table.add(OpKind::kCrossEntropyForward, kCuda, cross_entropy_forward_kernel, kFloat32Or64);
  table.add(OpKind::kCrossEntropyGrad, kCuda, cross_entropy_backward_kernel, kFloat32Or64);
  table.add(OpKind::kRandUniform, kCuda, random_kernel, kFloatTypes);
  table.add(OpKind::kRandNormal, kCuda, random_kernel, kFloatTypes);
  table.add(OpKind::kRandInt, kCuda, random_kernel, DTypeSet{kInt64});
  table.add(OpKind::kDropout, kCuda, dropout_kernel, kFloatTypes);
  table.add(OpKind::kArange, kCuda, arange_kernel, kTypes.without(kBool));
  table.add(OpKind::kIndexSelect, kCuda, index_select_kernel, kTypes);
  table.add(OpKind::kGather, kCuda, gather_scatter_kernel, kTypes);
  table.add(OpKind::kScatterAdd, kCuda, gather_scatter_kernel, kTypes.without(kBool));
  table.add(OpKind::kSgdStep, kCuda, sgd_kernel, kFloat32Or64);
  table.add(OpKind::kAdamStep, kCuda, adam_kernel, kFloat32Or64);
  for (OpKind kind : {OpKind::kMaxPool2d, OpKind::kAvgPool2d, OpKind::kAdaptiveAvgPool2d}) {
    table.add(kind, kCuda, pool_kernel, kFloat32Or64);
  }
  for (OpKind kind : {OpKind::kMaxPool2dGrad, OpKind::kAvgPool2dGrad, OpKind::kAdaptiveAvgPool2dGrad}) {
    table.add(kind, kCuda, pool_backward_kernel, kFloat32Or64);
  }
  table.add(OpKind::kGeluGrad, kCuda, gelu_grad_kernel, kFloatTypes);
  for (OpKind kind : {OpKind::kLayerNorm, OpKind::kRmsNorm}) table.add(kind, kCuda, row_norm_kernel, kFloat32Or64);
  for (OpKind kind : {OpKind::kLayerNormGrad, OpKind::kRmsNormGrad}) {
    table.add(kind, kCuda, row_norm_backward_kernel, kFloat32Or64);
  }
  register_matmul_kernel(table);
  register_conv_kernels(table);
}

#else  // built without CUDA: the column stays empty, and every op on cuda says it is not implemented

void register_kernels(KernelTable& /*table*/) {}

#endif

}  // namespace ember::cuda

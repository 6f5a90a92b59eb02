// Elementwise ops: unary math, binary arithmetic and comparisons, where, clamp, masked_fill.
// Shape rule: NumPy broadcasting. Dtype rule: PyTorch promotion (result_type); kFloatResult ops
// compute integers in float32, kBoolResult ops return bool. Cost: the table's FLOPs per element
// times the output size, bytes = inputs + output. Backward: added with autograd.
#include "ops/elementwise.h"

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "kernels/cpu/kernels.h"

namespace ember {
namespace detail {
namespace {

// PyTorch's combine_categories: a lower tier only matters when it holds a higher category.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return *higher;
  if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
  return *higher;
}

void promote_into(std::optional<DType>& slot, DType dtype) { slot = slot ? promote_types(*slot, dtype) : dtype; }

Tensor wrap_scalar(const Scalar& value, DType dtype) { return scalar_tensor(value, dtype); }

const char* name_of(OpKind op) { return op_info(op).name.data(); }

// Does writing `out` while reading `in` (expanded to `shape`) risk reading an already-written value?
bool needs_temporary(const Tensor& out, const Tensor& in, const Shape& shape) {
  if (!out.shares_storage(in)) return false;
  return !(in.offset() == out.offset() && broadcast_strides(in, shape) == out.strides() && in.dtype() == out.dtype());
}

void check_out(const char* op, const Tensor& out, const Shape& shape, DType result) {
  EMBER_CHECK(out.shape() == shape, "[", op, "] output has shape ", out.shape(), " but the result has shape ", shape);
  EMBER_CHECK(can_cast(result, out.dtype()), "[", op, "] result type ", result, " can't be cast to the output dtype ",
              out.dtype());
}

}  // namespace

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

DType result_type(std::initializer_list<Operand> operands) {
  std::optional<DType> dim_tier, zero_dim_tier, scalar_tier;
  for (const Operand& o : operands) {
    if (o.tensor != nullptr) {
      promote_into(o.tensor->dim() > 0 ? dim_tier : zero_dim_tier, o.tensor->dtype());
    } else {
      promote_into(scalar_tier, o.scalar->default_dtype());
    }
  }
  return combine_categories(dim_tier, combine_categories(zero_dim_tier, scalar_tier)).value_or(kFloat32);
}

Tensor binary_op(OpKind op, Operand a, Operand b, Tensor* out) {
  const char* name = name_of(op);
  if (a.tensor && b.tensor) check_same_device(name, {a.tensor, b.tensor});
  const DType common = result_type({a, b});
  EMBER_CHECK(!(has_trait(op, kNoBool) && common == kBool), "[", name, "] is not supported for bool tensors",
              op == OpKind::Sub ? "; use logical_xor instead" : "");
  EMBER_CHECK(!(op == OpKind::Pow && common == kBool && a.tensor && b.tensor), "[pow] is not supported for two bool ",
              "tensors");
  if (op == OpKind::Sub) {
    auto is_bool = [](const Operand& o) {
      return o.tensor ? o.tensor->dtype() == kBool : o.scalar->kind() == Scalar::Kind::Bool;
    };
    EMBER_CHECK(!is_bool(a) && !is_bool(b), "[sub] subtraction with a bool operand is not supported; use logical_not",
                " or logical_xor instead");
  }
  const DType compute = has_trait(op, kFloatResult) && !is_floating(common) ? kFloat32 : common;
  const DType result = has_trait(op, kBoolResult) ? kBool : compute;
  if (op == OpKind::Pow && b.scalar && !is_floating(compute)) {
    EMBER_CHECK(b.scalar->is_floating() || b.scalar->to_int() >= 0, "[pow] integers to negative integer powers are not ",
                "allowed (base dtype ", compute, ", exponent ", b.scalar->to_int(), ")");
  }
  const Tensor ta = a.tensor ? a.tensor->to(compute) : wrap_scalar(*a.scalar, compute);
  const Tensor tb = b.tensor ? b.tensor->to(compute) : wrap_scalar(*b.scalar, compute);
  const Shape shape = broadcast_shapes(ta.shape(), tb.shape(), name);

  Tensor target;
  if (out != nullptr) {
    check_out(name, *out, shape, result);
    const bool direct = out->dtype() == result && !needs_temporary(*out, ta, shape) && !needs_temporary(*out, tb, shape);
    target = direct ? *out : make_empty(shape, result, ta.device());
  } else {
    target = make_empty(shape, result, ta.device());
  }
  if (target.numel() > 0) {
    const cpu::Loop loop = make_loop(shape, {&target, &ta, &tb});
    cpu::binary(op, compute, target.data_ptr(), ta.data_ptr(), tb.data_ptr(), loop);
  }
  if (out != nullptr) {
    if (!target.is_same(*out)) copy_into(*out, target);
    out->bump_version();
    return *out;
  }
  return target;
}

Tensor unary_op(OpKind op, const Tensor& x, Tensor* out) {
  const char* name = name_of(op);
  EMBER_CHECK(!(has_trait(op, kNoBool) && x.dtype() == kBool), "[", name, "] is not supported for bool tensors");
  EMBER_CHECK(!has_trait(op, kFloatOnly) || is_floating(x.dtype()), "[", name,
              "] expects a floating-point tensor, got ", x.dtype());
  DType compute = has_trait(op, kFloatResult) && !is_floating(x.dtype()) ? kFloat32 : x.dtype();
  if (op == OpKind::Square && x.dtype() == kBool) compute = kInt64;  // as pow(x, 2) promotes
  const DType result = has_trait(op, kBoolResult) ? kBool : compute;
  const Tensor input = x.to(compute);
  Tensor target;
  if (out != nullptr) {
    check_out(name, *out, x.shape(), result);
    const bool direct = out->dtype() == result && !needs_temporary(*out, input, x.shape());
    target = direct ? *out : make_empty(x.shape(), result, x.device());
  } else {
    target = make_empty(x.shape(), result, x.device());
  }
  if (target.numel() > 0) {
    const cpu::Loop loop = make_loop(x.shape(), {&target, &input});
    cpu::unary(op, compute, target.data_ptr(), input.data_ptr(), loop);
  }
  if (out != nullptr) {
    if (!target.is_same(*out)) copy_into(*out, target);
    out->bump_version();
    return *out;
  }
  return target;
}

}  // namespace detail

using detail::binary_op;
using detail::Operand;
using detail::unary_op;

DType result_type(const Tensor& a, const Tensor& b) { return detail::result_type({{&a, nullptr}, {&b, nullptr}}); }
DType result_type(const Tensor& a, const Scalar& b) { return detail::result_type({{&a, nullptr}, {nullptr, &b}}); }

// --- binary -------------------------------------------------------------------------------------

using autograd::GradMask;
using autograd::Grads;
using autograd::needs_grad;
using autograd::SavedTensor;

// Arithmetic: the engine sums broadcast gradients back to each input's shape.
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::Add, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record("add", out, {&a, &b}, [](const Tensor& g, GradMask) -> Grads { return {g, g}; });
  }
  return out;
}
Tensor add(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::Add, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) autograd::record("add", out, {&a}, [](const Tensor& g, GradMask) -> Grads { return {g}; });
  return out;
}
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::Sub, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record("sub", out, {&a, &b}, [](const Tensor& g, GradMask needs) -> Grads {
      return {g, needs[1] ? neg(g) : Tensor()};
    });
  }
  return out;
}
Tensor sub(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::Sub, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) autograd::record("sub", out, {&a}, [](const Tensor& g, GradMask) -> Grads { return {g}; });
  return out;
}
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::Mul, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record("mul", out, {&a, &b},
                     [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g, GradMask needs) -> Grads {
                       return {needs[0] ? mul(g, sb.get()) : Tensor(), needs[1] ? mul(g, sa.get()) : Tensor()};
                     });
  }
  return out;
}
Tensor mul(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::Mul, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record("mul", out, {&a}, [b](const Tensor& g, GradMask) -> Grads { return {mul(g, b)}; });
  }
  return out;
}
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::Div, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record("div", out, {&a, &b},
                     [sb = SavedTensor(b), so = SavedTensor(out)](const Tensor& g, GradMask needs) -> Grads {
                       const Tensor gb = div(g, sb.get());
                       return {needs[0] ? gb : Tensor(), needs[1] ? neg(mul(gb, so.get())) : Tensor()};
                     });
  }
  return out;
}
Tensor div(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::Div, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record("div", out, {&a}, [b](const Tensor& g, GradMask) -> Grads { return {div(g, b)}; });
  }
  return out;
}

#define EMBER_BINARY_FRONT(fn, Kind)                                                                 \
  Tensor fn(const Tensor& a, const Tensor& b) { return binary_op(OpKind::Kind, {&a, nullptr}, {&b, nullptr}); } \
  Tensor fn(const Tensor& a, const Scalar& b) { return binary_op(OpKind::Kind, {&a, nullptr}, {nullptr, &b}); }
EMBER_BINARY_FRONT(pow, Pow)
EMBER_BINARY_FRONT(eq, Eq)
EMBER_BINARY_FRONT(ne, Ne)
EMBER_BINARY_FRONT(lt, Lt)
EMBER_BINARY_FRONT(le, Le)
EMBER_BINARY_FRONT(gt, Gt)
EMBER_BINARY_FRONT(ge, Ge)
#undef EMBER_BINARY_FRONT

Tensor rsub(const Tensor& a, const Scalar& b) { return binary_op(OpKind::Sub, {nullptr, &b}, {&a, nullptr}); }
Tensor div(const Scalar& a, const Tensor& b) { return binary_op(OpKind::Div, {nullptr, &a}, {&b, nullptr}); }
Tensor pow(const Scalar& a, const Tensor& b) { return binary_op(OpKind::Pow, {nullptr, &a}, {&b, nullptr}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(OpKind::Minimum, {&a, nullptr}, {&b, nullptr}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(OpKind::Maximum, {&a, nullptr}, {&b, nullptr}); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::LogicalAnd, {&a, nullptr}, {&b, nullptr});
}
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary_op(OpKind::LogicalOr, {&a, nullptr}, {&b, nullptr}); }

Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_op(OpKind::Add, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_op(OpKind::Sub, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_op(OpKind::Mul, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b) {
  binary_op(OpKind::Div, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}

// --- unary --------------------------------------------------------------------------------------

#define EMBER_UNARY_FRONT(fn, Kind) \
  Tensor fn(const Tensor& x) { return unary_op(OpKind::Kind, x); }
EMBER_UNARY_FRONT(neg, Neg)
EMBER_UNARY_FRONT(abs, Abs)
EMBER_UNARY_FRONT(sign, Sign)
EMBER_UNARY_FRONT(exp, Exp)
EMBER_UNARY_FRONT(log, Log)
EMBER_UNARY_FRONT(log1p, Log1p)
EMBER_UNARY_FRONT(expm1, Expm1)
EMBER_UNARY_FRONT(sqrt, Sqrt)
EMBER_UNARY_FRONT(rsqrt, Rsqrt)
EMBER_UNARY_FRONT(square, Square)
EMBER_UNARY_FRONT(sin, Sin)
EMBER_UNARY_FRONT(cos, Cos)
EMBER_UNARY_FRONT(tanh, Tanh)
EMBER_UNARY_FRONT(sigmoid, Sigmoid)
EMBER_UNARY_FRONT(relu, Relu)
EMBER_UNARY_FRONT(silu, Silu)
EMBER_UNARY_FRONT(logical_not, LogicalNot)
EMBER_UNARY_FRONT(isnan, IsNan)
EMBER_UNARY_FRONT(isinf, IsInf)
#undef EMBER_UNARY_FRONT

Tensor gelu(const Tensor& x, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", "[gelu] approximate must be \"none\" or \"tanh\", got \"",
              approximate, "\"");
  return unary_op(approximate == "tanh" ? OpKind::GeluTanh : OpKind::GeluErf, x);
}

// --- where, clamp, masked_fill ------------------------------------------------------------------

namespace {

Tensor where_impl(const Tensor& condition, Operand a, Operand b) {
  EMBER_CHECK(condition.dtype() == kBool, "[where] condition must be a bool tensor, got ", condition.dtype());
  if (a.tensor) detail::check_same_device("where", {&condition, a.tensor});
  if (b.tensor) detail::check_same_device("where", {&condition, b.tensor});
  const DType dtype = detail::result_type({a, b});
  const Tensor ta = a.tensor ? a.tensor->to(dtype) : scalar_tensor(*a.scalar, dtype);
  const Tensor tb = b.tensor ? b.tensor->to(dtype) : scalar_tensor(*b.scalar, dtype);
  const Shape shape = broadcast_shapes(condition.shape(), broadcast_shapes(ta.shape(), tb.shape(), "where"), "where");
  Tensor out = detail::make_empty(shape, dtype, condition.device());
  if (out.numel() > 0) {
    const cpu::Loop loop = detail::make_loop(shape, {&out, &condition, &ta, &tb});
    cpu::where(dtype, out.data_ptr(), static_cast<const bool*>(condition.data_ptr()), ta.data_ptr(), tb.data_ptr(), loop);
  }
  return out;
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return where_impl(condition, {&a, nullptr}, {&b, nullptr});
}
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b) {
  return where_impl(condition, {&a, nullptr}, {nullptr, &b});
}
Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b) {
  return where_impl(condition, {nullptr, &a}, {&b, nullptr});
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  EMBER_CHECK(min || max, "[clamp] at least one of min and max must be given");
  Tensor result = x;
  // NaN in x propagates through maximum/minimum; bounds keep x's dtype unless they are floats.
  if (min) result = binary_op(OpKind::Maximum, {&result, nullptr}, {nullptr, &*min});
  if (max) result = binary_op(OpKind::Minimum, {&result, nullptr}, {nullptr, &*max});
  return result;
}

Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  EMBER_CHECK(min || max, "[clamp] at least one of min and max must be given");
  Tensor result = x;
  if (min) result = maximum(result, *min);
  if (max) result = minimum(result, *max);
  return result;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  EMBER_CHECK(mask.dtype() == kBool, "[masked_fill] mask must be a bool tensor, got ", mask.dtype());
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  EMBER_CHECK(shape == x.shape(), "[masked_fill] mask of shape ", mask.shape(), " does not broadcast to the input's shape ",
              x.shape());
  const Tensor fill = scalar_tensor(value, x.dtype());
  return where(mask, fill, x);
}

}  // namespace ember

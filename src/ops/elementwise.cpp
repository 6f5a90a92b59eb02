// Elementwise ops: unary math, binary arithmetic and comparisons, where, clamp, masked_fill, and
// relu's fused backward (threshold_backward).
// Shape rule: NumPy broadcasting. Dtype rule: PyTorch promotion (result_type); kFloatResult ops
// compute integers in float32, kBoolResult ops return bool. Cost: the table's FLOPs per element
// times the output size, bytes = inputs + output. Backward: each differentiable op records its
// vector-Jacobian product, written with ember ops, right after its forward. clamp and masked_fill
// are composites (maximum/minimum, where) with a node of their own.
#include "ops/elementwise.h"

#include <cmath>
#include <numbers>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

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

// An operand in `dtype`: the tensor itself when it already has it (no handle copy, so no reference
// count traffic on the hot path), else its conversion or the scalar as a 0-dim tensor on `device`
// (the tensor operand's), held in `holder`.
const Tensor& in_dtype(TensorOrScalar operand, DType dtype, Tensor& holder, Device device = kCPU) {
  if (operand.tensor != nullptr) {
    if (operand.tensor->dtype() == dtype) return *operand.tensor;
    return holder = operand.tensor->to(dtype);
  }
  return holder = full({}, *operand.scalar, TensorOptions(device).with_dtype(dtype));
}

// The device of an op's tensor operands (the CPU when there are none).
Device device_of(TensorOrScalar a, TensorOrScalar b) {
  return a.tensor != nullptr ? a.tensor->device() : b.tensor != nullptr ? b.tensor->device() : kCPU;
}

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

DType result_type(std::initializer_list<TensorOrScalar> operands) {
  std::optional<DType> dim_tier, zero_dim_tier, scalar_tier;
  for (const TensorOrScalar& o : operands) {
    if (o.tensor != nullptr) {
      promote_into(o.tensor->dim() > 0 ? dim_tier : zero_dim_tier, o.tensor->dtype());
    } else {
      promote_into(scalar_tier, o.scalar->default_dtype());
    }
  }
  return combine_categories(dim_tier, combine_categories(zero_dim_tier, scalar_tier)).value_or(kFloat32);
}

Tensor binary_op(OpKind op, TensorOrScalar a, TensorOrScalar b, Tensor* out) {
  const char* name = op_name(op);
  const DType common = result_type({a, b});
  EMBER_CHECK(!(has_trait(op, kNoBool) && common == kBool), "[", name, "] is not supported for bool tensors",
              op == OpKind::kSub ? "; use logical_xor instead" : "");
  EMBER_CHECK(!(op == OpKind::kPow && common == kBool && a.tensor && b.tensor), "[pow] is not supported for two bool ",
              "tensors");
  if (op == OpKind::kSub) {
    auto is_bool = [](const TensorOrScalar& o) {
      return o.tensor ? o.tensor->dtype() == kBool : o.scalar->kind() == Scalar::Kind::kBoolean;
    };
    EMBER_CHECK(!is_bool(a) && !is_bool(b), "[sub] subtraction with a bool operand is not supported; use logical_not",
                " or logical_xor instead");
  }
  const DType compute = has_trait(op, kFloatResult) && !is_floating(common) ? kFloat32 : common;
  const DType result = has_trait(op, kBoolResult) ? kBool : compute;
  if (op == OpKind::kPow && b.scalar && !is_floating(compute)) {
    EMBER_CHECK(b.scalar->is_floating() || b.scalar->to_int() >= 0,
                "[pow] integers to negative integer powers are not ", "allowed (base dtype ", compute, ", exponent ",
                b.scalar->to_int(), ")");
  }
  Tensor a_holder, b_holder;
  const Tensor& ta = in_dtype(a, compute, a_holder, device_of(a, b));
  const Tensor& tb = in_dtype(b, compute, b_holder, device_of(a, b));
  const Shape shape = broadcast_shapes(ta.shape(), tb.shape(), name);

  Tensor target;
  if (out != nullptr) {
    check_out(name, *out, shape, result);
    const bool direct =
        out->dtype() == result && !needs_temporary(*out, ta, shape) && !needs_temporary(*out, tb, shape);
    target = direct ? *out : detail::make_empty(shape, result, ta.device(), name);
  } else {
    target = detail::make_empty(shape, result, ta.device(), name);
  }
  dispatch::run(op, {}, {&ta, &tb}, {&target});
  if (out != nullptr) {
    if (!target.is_same(*out)) copy_into(*out, target);
    out->bump_version();
    return *out;
  }
  return target;
}

Tensor unary_op(OpKind op, const Tensor& x, Tensor* out) {
  const char* name = op_name(op);
  EMBER_CHECK(!(has_trait(op, kNoBool) && x.dtype() == kBool), "[", name, "] is not supported for bool tensors");
  EMBER_CHECK(!has_trait(op, kFloatOnly) || is_floating(x.dtype()), "[", name,
              "] expects a floating-point tensor, got ", x.dtype());
  DType compute = has_trait(op, kFloatResult) && !is_floating(x.dtype()) ? kFloat32 : x.dtype();
  if (op == OpKind::kSquare && x.dtype() == kBool) compute = kInt64;  // as pow(x, 2) promotes
  const DType result = has_trait(op, kBoolResult) ? kBool : compute;
  Tensor holder;
  const Tensor& input = in_dtype({&x, nullptr}, compute, holder);
  Tensor target;
  if (out != nullptr) {
    check_out(name, *out, x.shape(), result);
    const bool direct = out->dtype() == result && !needs_temporary(*out, input, x.shape());
    target = direct ? *out : detail::make_empty(x.shape(), result, x.device(), name);
  } else {
    target = detail::make_empty(x.shape(), result, x.device(), name);
  }
  dispatch::run(op, {}, {&input}, {&target});
  if (out != nullptr) {
    if (!target.is_same(*out)) copy_into(*out, target);
    out->bump_version();
    return *out;
  }
  return target;
}

}  // namespace detail

using detail::binary_op;
using detail::TensorOrScalar;
using detail::unary_op;

DType result_type(const Tensor& a, const Tensor& b) { return detail::result_type({{&a, nullptr}, {&b, nullptr}}); }
DType result_type(const Tensor& a, const Scalar& b) { return detail::result_type({{&a, nullptr}, {nullptr, &b}}); }

// --- binary -------------------------------------------------------------------------------------

using autograd::GradMask;
using autograd::Grads;
using autograd::needs_grad;
using autograd::SavedTensor;

// Gradients may keep the broadcast output shape and the promoted dtype: the engine sums them back
// to each input's shape and casts them to its dtype.
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kAdd, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(OpKind::kAdd, {}, out, {&a, &b}, [](const Tensor& g, GradMask) -> Grads { return {g, g}; });
  }
  return out;
}
Tensor add(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kAdd, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a))
    autograd::record(OpKind::kAdd, {}, out, {&a}, [](const Tensor& g, GradMask) -> Grads { return {g}; });
  return out;
}
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kSub, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(OpKind::kSub, {}, out, {&a, &b}, [](const Tensor& g, GradMask needs) -> Grads {
      return {g, needs[1] ? neg(g) : Tensor()};
    });
  }
  return out;
}
Tensor sub(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kSub, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a))
    autograd::record(OpKind::kSub, {}, out, {&a}, [](const Tensor& g, GradMask) -> Grads { return {g}; });
  return out;
}
Tensor rsub(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kSub, {nullptr, &b}, {&a, nullptr});
  if (needs_grad(a))
    autograd::record(OpKind::kSub, {}, out, {&a}, [](const Tensor& g, GradMask) -> Grads { return {neg(g)}; });
  return out;
}
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kMul, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(OpKind::kMul, {}, out, {&a, &b},
                     [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g, GradMask needs) -> Grads {
                       return {needs[0] ? mul(g, sb.get()) : Tensor(), needs[1] ? mul(g, sa.get()) : Tensor()};
                     });
  }
  return out;
}
Tensor mul(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kMul, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record(OpKind::kMul, {}, out, {&a}, [b](const Tensor& g, GradMask) -> Grads { return {mul(g, b)}; });
  }
  return out;
}
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kDiv, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(OpKind::kDiv, {}, out, {&a, &b},
                     [sb = SavedTensor(b), so = SavedTensor(out)](const Tensor& g, GradMask needs) -> Grads {
                       const Tensor gb = div(g, sb.get());
                       return {needs[0] ? gb : Tensor(), needs[1] ? neg(mul(gb, so.get())) : Tensor()};
                     });
  }
  return out;
}
Tensor div(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kDiv, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record(OpKind::kDiv, {}, out, {&a}, [b](const Tensor& g, GradMask) -> Grads { return {div(g, b)}; });
  }
  return out;
}
Tensor div(const Scalar& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kDiv, {nullptr, &a}, {&b, nullptr});
  if (needs_grad(b)) {
    // d(a / b)/db = -a / b^2 = -out / b
    autograd::record(OpKind::kDiv, {}, out, {&b},
                     [sb = SavedTensor(b), so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       return {neg(div(mul(g, so.get()), sb.get()))};
                     });
  }
  return out;
}

// pow, as PyTorch: d/da = b * a^(b-1), taken as 0 where b == 0 (so 0^0 has no infinite slope);
// d/db = out * log(a), taken as 0 where a == 0 and b >= 0 (the limit from the right).
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kPow, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(
        OpKind::kPow, {}, out, {&a, &b},
        [sa = SavedTensor(a), sb = SavedTensor(b), so = SavedTensor(out)](const Tensor& g, GradMask needs) -> Grads {
          const Tensor base = sa.get(), exponent = sb.get();
          Tensor ga, gb;
          if (needs[0]) ga = where(eq(exponent, 0), 0.0, mul(g, mul(exponent, pow(base, sub(exponent, 1)))));
          if (needs[1]) {
            gb = where(logical_and(eq(base, 0), ge(exponent, 0)), 0.0, mul(g, mul(so.get(), log(base))));
          }
          return {ga, gb};
        });
  }
  return out;
}
Tensor pow(const Tensor& a, const Scalar& b) {
  Tensor out = binary_op(OpKind::kPow, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record(OpKind::kPow, {}, out, {&a}, [sa = SavedTensor(a), b](const Tensor& g, GradMask) -> Grads {
      if (b.to_double() == 0.0) return {zeros_like(g)};
      const Scalar lower = b.is_floating() ? Scalar(b.to_double() - 1.0) : Scalar(b.to_int() - 1);
      return {mul(g, mul(pow(sa.get(), lower), b))};
    });
  }
  return out;
}
Tensor pow(const Scalar& a, const Tensor& b) {
  Tensor out = binary_op(OpKind::kPow, {nullptr, &a}, {&b, nullptr});
  if (needs_grad(b)) {
    autograd::record(OpKind::kPow, {}, out, {&b},
                     [sb = SavedTensor(b), so = SavedTensor(out), a](const Tensor& g, GradMask) -> Grads {
                       const double base = a.to_double();
                       Tensor grad = mul(mul(g, so.get()), std::log(base));
                       if (base == 0.0) grad = where(ge(sb.get(), 0), 0.0, grad);
                       return {grad};
                     });
  }
  return out;
}

namespace {

// minimum/maximum, as PyTorch: the gradient goes to the selected input and is split in half
// between the two where they tie. `loses(a, b)` tells where a is not selected.
template <class Loses>
Tensor extremum(OpKind op, const Tensor& a, const Tensor& b, Loses loses) {
  Tensor out = binary_op(op, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(op, {}, out, {&a, &b},
                     [sa = SavedTensor(a), sb = SavedTensor(b), loses](const Tensor& g, GradMask needs) -> Grads {
                       const Tensor x = sa.get(), y = sb.get();
                       const Tensor shared = where(eq(x, y), mul(g, 0.5), g);
                       return {needs[0] ? where(loses(x, y), 0.0, shared) : Tensor(),
                               needs[1] ? where(loses(y, x), 0.0, shared) : Tensor()};
                     });
  }
  return out;
}

const auto kMinimumLoses = [](const Tensor& x, const Tensor& y) { return gt(x, y); };
const auto kMaximumLoses = [](const Tensor& x, const Tensor& y) { return lt(x, y); };

}  // namespace

Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(OpKind::kMinimum, a, b, kMinimumLoses); }
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(OpKind::kMaximum, a, b, kMaximumLoses); }

// Comparisons and logical ops give bool tensors: nothing to differentiate.
#define EMBER_DEFINE_COMPARISON_FRONT(Kind, fn, ...) \
  Tensor fn(const Tensor& a, const Tensor& b) { return binary_op(OpKind::k##Kind, {&a, nullptr}, {&b, nullptr}); }
EMBER_COMPARISONS(EMBER_DEFINE_COMPARISON_FRONT)
#undef EMBER_DEFINE_COMPARISON_FRONT
#define EMBER_DEFINE_SCALAR_COMPARISON_FRONT(Kind, fn, ...) \
  Tensor fn(const Tensor& a, const Scalar& b) { return binary_op(OpKind::k##Kind, {&a, nullptr}, {nullptr, &b}); }
EMBER_RELATIONS(EMBER_DEFINE_SCALAR_COMPARISON_FRONT)
#undef EMBER_DEFINE_SCALAR_COMPARISON_FRONT

// out= forms write into a caller's buffer, which autograd cannot track: they refuse to run when a
// gradient would be needed.
namespace {

void check_out_without_grad(const char* op, const char* functional, const Tensor& out, const Tensor& a,
                            const Tensor& b) {
  detail::check_no_internal_overlap(op, out);
  EMBER_CHECK(!needs_grad(out, a, b), "[", op,
              "] does not support autograd (out= forms are not differentiable), but an input (shapes ", a.shape(),
              " and ", b.shape(), ") or the output (shape ", out.shape(), ") requires grad; use ", functional,
              "() instead, or run under NoGradGuard");
}

}  // namespace

Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b) {
  check_out_without_grad("add_out", "add", out, a, b);
  binary_op(OpKind::kAdd, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b) {
  check_out_without_grad("sub_out", "sub", out, a, b);
  binary_op(OpKind::kSub, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  check_out_without_grad("mul_out", "mul", out, a, b);
  binary_op(OpKind::kMul, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b) {
  check_out_without_grad("div_out", "div", out, a, b);
  binary_op(OpKind::kDiv, {&a, nullptr}, {&b, nullptr}, &out);
  return out;
}

// --- unary --------------------------------------------------------------------------------------
//
// Each op of EMBER_UNARY_MATH keeps only what its derivative needs (the saved column of its row):
// the input x, or the output y where the derivative is cheapest in terms of it (exp, sqrt, tanh,
// sigmoid, ...), or nothing.

namespace {

enum class Keep { none, x, y };

// y = op(x), whose backward is gradient(g, the kept value).
template <class Gradient>
Tensor unary_differentiable(OpKind op, const Tensor& x_arg, Keep keep, Gradient gradient) {
  const Tensor x = amp::cast(op, x_arg);
  Tensor out = unary_op(op, x);
  if (needs_grad(x)) {
    const SavedTensor kept = keep == Keep::x ? SavedTensor(x) : keep == Keep::y ? SavedTensor(out) : SavedTensor();
    autograd::record(op, {}, out, {&x},
                     [kept, gradient](const Tensor& g, GradMask) -> Grads { return {gradient(g, kept.get())}; });
  }
  return out;
}

// relu's gradient passes where the output is positive (none at 0): PyTorch's threshold_backward,
// y <= 0 blocks (a NaN output passes). One fused pass (the ThresholdBackward primitive) unless this
// backward is itself differentiated, the layout or dtype does not suit it, or the device has no
// kernel for it; then the decomposition, which is also its reference. A gradient in another layout
// (the broadcast one of a sum's backward) is made contiguous first: a copy and the fused pass cost
// half of le() and where() over it.
Tensor relu_backward(const Tensor& g, const Tensor& y) {
  if (!needs_grad(g) && g.dtype() == y.dtype() &&
      dispatch::has_kernel(OpKind::kThresholdBackward, g.device(), g.dtype()) && g.shape() == y.shape() &&
      y.is_contiguous()) {
    const Tensor dense = g.contiguous();
    Tensor result = detail::make_empty(y.shape(), y.dtype(), y.device());
    dispatch::run(OpKind::kThresholdBackward, {}, {&dense, &y}, {&result});
    return result;
  }
  return where(le(y, 0), 0.0, g);
}

// d/dx [x s(x)] = s (1 + x (1 - s)), s = sigmoid(x).
Tensor silu_backward(const Tensor& g, const Tensor& x) {
  const Tensor s = sigmoid(x);
  return mul(g, mul(s, add(mul(x, rsub(s, 1)), 1)));
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kGeluTanhCoefficient = 0.044715;

}  // namespace

#define EMBER_DEFINE_UNARY_FRONT(Kind, fn, traits, attrs, flops, saved, gradient)                                \
  Tensor fn(const Tensor& input) {                                                                               \
    return unary_differentiable(OpKind::k##Kind, input, Keep::saved,                                             \
                                [](const Tensor& g, [[maybe_unused]] const Tensor& saved) { return gradient; }); \
  }
EMBER_UNARY_MATH(EMBER_DEFINE_UNARY_FRONT)
#undef EMBER_DEFINE_UNARY_FRONT

Tensor softplus(const Tensor& x_arg, double beta, double threshold) {
  const Tensor x = amp::cast(OpKind::kSoftplus, x_arg);
  EMBER_CHECK(is_floating(x.dtype()), "[softplus] expects a floating-point input, got ", x.dtype());
  EMBER_CHECK(std::isfinite(beta) && beta != 0.0 && !std::isnan(threshold),
              "[softplus] beta must be finite and non-zero and threshold a number, got beta ", beta, ", threshold ",
              threshold);
  const SoftplusAttrs attrs{beta, threshold};
  const dispatch::Scope scope(OpKind::kSoftplus, {&x}, attrs);
  Tensor result;
  {
    autograd::NoGradGuard no_grad;
    const Tensor scaled = mul(x, beta);
    // exp overflows to inf exactly where the threshold takes x instead.
    result = where(gt(scaled, threshold), x, div(log1p(exp(scaled)), beta));
  }
  if (needs_grad(x)) {
    autograd::record(OpKind::kSoftplus, attrs, result, {&x},
                     [sx = SavedTensor(x), beta, threshold](const Tensor& g, GradMask) -> Grads {
                       const Tensor scaled = mul(sx.get(), beta);
                       return {where(gt(scaled, threshold), g, mul(g, sigmoid(scaled)))};
                     });
  }
  return result;
}

namespace {

// GELU's gradient g * gelu'(x) in one pass (the GeluGrad primitive) when this backward is not
// itself differentiated and the layout, dtype and device suit the kernel; otherwise nothing (the
// caller's decomposition, which is also the reference).
Tensor fused_gelu_grad(const Tensor& g, const Tensor& x, Activation form) {
  if (needs_grad(g) || needs_grad(x) || g.dtype() != x.dtype() ||
      !dispatch::has_kernel(OpKind::kGeluGrad, g.device(), g.dtype()) || g.shape() != x.shape() || !g.is_contiguous() ||
      !x.is_contiguous()) {
    return Tensor();
  }
  Tensor result = detail::make_empty(x.shape(), x.dtype(), x.device());
  dispatch::run(OpKind::kGeluGrad, ActivationAttrs{form}, {&g, &x}, {&result});
  return result;
}

}  // namespace

Tensor gelu(const Tensor& x, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", "[gelu] approximate must be \"none\" or \"tanh\", got \"",
              approximate, "\"");
  if (approximate == "tanh") {
    // y = x/2 (1 + t), t = tanh(u), u = sqrt(2/pi) (x + c x^3):
    // dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 c x^2).
    return unary_differentiable(OpKind::kGeluTanh, x, Keep::x, [](const Tensor& g, const Tensor& in) {
      if (Tensor fused = fused_gelu_grad(g, in, Activation::kGeluTanh); fused.defined()) return fused;
      const Tensor in2 = square(in);
      const Tensor t = tanh(mul(mul(in, add(mul(in2, kGeluTanhCoefficient), 1)), kSqrt2OverPi));
      const Tensor du = mul(add(mul(in2, 3 * kGeluTanhCoefficient), 1), kSqrt2OverPi);
      const Tensor slope = mul(add(add(t, 1), mul(mul(in, rsub(square(t), 1)), du)), 0.5);
      return mul(g, slope);
    });
  }
  // y = x Phi(x): dy/dx = Phi(x) + x phi(x). The decomposition takes Phi from the saved output as
  // y / x (exact to the kernel's accuracy), with Phi(0) = 1/2.
  Tensor out = unary_op(OpKind::kGeluErf, x);
  if (needs_grad(x)) {
    autograd::record(OpKind::kGeluErf, {}, out, {&x},
                     [sx = SavedTensor(x), so = SavedTensor(out)](const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       if (Tensor fused = fused_gelu_grad(g, in, Activation::kGeluErf); fused.defined()) return {fused};
                       const Tensor cdf = where(eq(in, 0), 0.5, div(so.get(), in));
                       const Tensor pdf = mul(exp(mul(square(in), -0.5)), kInvSqrt2Pi);
                       return {mul(g, add(cdf, mul(in, pdf)))};
                     });
  }
  return out;
}

// Predicates give bool tensors: nothing to differentiate.
#define EMBER_DEFINE_PREDICATE_FRONT(Kind, fn, ...) \
  Tensor fn(const Tensor& x) { return unary_op(OpKind::k##Kind, x); }
EMBER_UNARY_PREDICATES(EMBER_DEFINE_PREDICATE_FRONT)
#undef EMBER_DEFINE_PREDICATE_FRONT

// --- where, clamp, masked_fill ------------------------------------------------------------------

namespace {

Tensor where_impl(const Tensor& condition, TensorOrScalar a, TensorOrScalar b) {
  EMBER_CHECK(condition.dtype() == kBool, "[where] condition must be a bool tensor, got ", condition.dtype());
  const DType dtype = detail::result_type({a, b});
  const TensorOptions options = TensorOptions(condition.device()).with_dtype(dtype);
  const Tensor ta = a.tensor ? a.tensor->to(dtype) : full({}, *a.scalar, options);
  const Tensor tb = b.tensor ? b.tensor->to(dtype) : full({}, *b.scalar, options);
  const Shape shape = broadcast_shapes(condition.shape(), broadcast_shapes(ta.shape(), tb.shape(), "where"), "where");
  Tensor out = detail::make_empty(shape, dtype, condition.device(), "where");
  dispatch::run(OpKind::kWhere, {}, {&condition, &ta, &tb}, {&out});
  return out;
}

// The gradient `g` where `condition` selects the input (`selected`), zero elsewhere.
Tensor route(const Tensor& g, const Tensor& condition, bool selected) {
  return selected ? where(condition, g, 0.0) : where(condition, 0.0, g);
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  Tensor out = where_impl(condition, {&a, nullptr}, {&b, nullptr});
  if (needs_grad(a, b)) {
    autograd::record(
        OpKind::kWhere, {}, out, {&a, &b}, [sc = SavedTensor(condition)](const Tensor& g, GradMask needs) -> Grads {
          return {needs[0] ? route(g, sc.get(), true) : Tensor(), needs[1] ? route(g, sc.get(), false) : Tensor()};
        });
  }
  return out;
}
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b) {
  Tensor out = where_impl(condition, {&a, nullptr}, {nullptr, &b});
  if (needs_grad(a)) {
    autograd::record(OpKind::kWhere, {}, out, {&a}, [sc = SavedTensor(condition)](const Tensor& g, GradMask) -> Grads {
      return {route(g, sc.get(), true)};
    });
  }
  return out;
}
Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b) {
  Tensor out = where_impl(condition, {nullptr, &a}, {&b, nullptr});
  if (needs_grad(b)) {
    autograd::record(OpKind::kWhere, {}, out, {&b}, [sc = SavedTensor(condition)](const Tensor& g, GradMask) -> Grads {
      return {route(g, sc.get(), false)};
    });
  }
  return out;
}

// clamp with scalar bounds: the gradient passes where min < x < max, strictly, as the PyTorch
// that made tests/golden/grad.json does (at a bound, and for NaN, it is 0).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  EMBER_CHECK(min || max, "[clamp] at least one of min and max must be given");
  const dispatch::Scope scope(OpKind::kClamp, {&x}, ClampAttrs{min, max});
  Tensor result = x;
  // NaN in x propagates through maximum/minimum; bounds keep x's dtype unless they are floats.
  if (min) result = binary_op(OpKind::kMaximum, {&result, nullptr}, {nullptr, &*min});
  if (max) result = binary_op(OpKind::kMinimum, {&result, nullptr}, {nullptr, &*max});
  if (needs_grad(x)) {
    autograd::record(OpKind::kClamp, ClampAttrs{min, max}, result, {&x},
                     [sx = SavedTensor(x), min, max](const Tensor& g, GradMask) -> Grads {
                       const Tensor in = sx.get();
                       Tensor inside;
                       if (min) inside = gt(in, *min);
                       if (max) inside = inside.defined() ? logical_and(inside, lt(in, *max)) : lt(in, *max);
                       return {where(inside, g, 0.0)};
                     });
  }
  return result;
}

namespace {

// The gradients of clamp(x, low, high) with tensor bounds, as PyTorch: the gradient goes to whichever
// of x, low, high the result equals, split in half on a tie between x and one bound (x keeps all of
// it when low == x == high); when low > high the result is high, which gets all of it.
Grads clamp_tensor_backward(const Tensor& g, const Tensor& in, const Tensor& low, const Tensor& high, GradMask needs) {
  const Tensor half = mul(g, 0.5);
  Grads grads(3);
  if (!high.defined()) {  // maximum(x, low)
    const Tensor tie = eq(in, low);
    if (needs[0]) grads[0] = where(gt(in, low), g, where(tie, half, 0.0));
    if (needs[1]) grads[1] = where(lt(in, low), g, where(tie, half, 0.0));
    return grads;
  }
  if (!low.defined()) {  // minimum(x, high)
    const Tensor tie = eq(in, high);
    if (needs[0]) grads[0] = where(lt(in, high), g, where(tie, half, 0.0));
    if (needs[2]) grads[2] = where(gt(in, high), g, where(tie, half, 0.0));
    return grads;
  }
  const Tensor ordered = le(low, high);
  const Tensor open = lt(low, high);  // the bounds differ, so x can tie with only one of them
  const Tensor at_low = eq(in, low), at_high = eq(in, high);
  if (needs[0]) {
    const Tensor inside = logical_and(ge(in, low), le(in, high));
    grads[0] = where(inside, where(logical_and(open, logical_or(at_low, at_high)), half, g), 0.0);
  }
  if (needs[1]) {
    grads[1] = where(logical_and(lt(in, low), ordered), g, where(logical_and(at_low, open), half, 0.0));
  }
  if (needs[2]) {
    const Tensor selected = logical_or(lt(high, low), logical_and(ordered, gt(in, high)));
    grads[2] = where(selected, g, where(logical_and(at_high, open), half, 0.0));
  }
  return grads;
}

}  // namespace

Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max) {
  EMBER_CHECK(min || max, "[clamp] at least one of min and max must be given");
  const dispatch::Scope scope(OpKind::kClamp, {&x, min ? &*min : nullptr, max ? &*max : nullptr}, ClampAttrs{});
  Tensor result = x;
  if (min) result = binary_op(OpKind::kMaximum, {&result, nullptr}, {&*min, nullptr});
  if (max) result = binary_op(OpKind::kMinimum, {&result, nullptr}, {&*max, nullptr});
  const Tensor lo = min.value_or(Tensor()), hi = max.value_or(Tensor());
  if (needs_grad(x, lo, hi)) {
    autograd::record(
        OpKind::kClamp, ClampAttrs{}, result, {&x, &lo, &hi},
        [sx = SavedTensor(x), slo = SavedTensor(lo), shi = SavedTensor(hi)](const Tensor& g, GradMask needs) -> Grads {
          return clamp_tensor_backward(g, sx.get(), slo.get(), shi.get(), needs);
        });
  }
  return result;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  EMBER_CHECK(mask.dtype() == kBool, "[masked_fill] mask must be a bool tensor, got ", mask.dtype());
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  EMBER_CHECK(shape == x.shape(), "[masked_fill] mask of shape ", mask.shape(),
              " does not broadcast to the input's shape ", x.shape());
  const dispatch::Scope scope(OpKind::kMaskedFill, {&x, &mask}, FillAttrs{value});
  const Tensor fill = full({}, value, TensorOptions(x.device()).with_dtype(x.dtype()));
  Tensor out = where_impl(mask, {&fill, nullptr}, {&x, nullptr});
  if (needs_grad(x)) {
    autograd::record(
        OpKind::kMaskedFill, FillAttrs{value}, out, {&x},
        [sm = SavedTensor(mask)](const Tensor& g, GradMask) -> Grads { return {route(g, sm.get(), false)}; });
  }
  return out;
}

// --- cost rules ----------------------------------------------------------------------------------

void define_elementwise_ops(OpRuleTable& table) {
#define EMBER_ELEMENTWISE_COST(kind, ...) table.set_cost(OpKind::k##kind, cost::elementwise);
  EMBER_UNARY_PRIMITIVES(EMBER_ELEMENTWISE_COST)
  EMBER_BINARY_PRIMITIVES(EMBER_ELEMENTWISE_COST)
#undef EMBER_ELEMENTWISE_COST
  table.set_cost(OpKind::kWhere, cost::elementwise);
  // threshold_backward: one compare-select per element; the gradient and the output read, the
  // input gradient written.
  table.set_cost(OpKind::kThresholdBackward, cost::elementwise);
  // gelu_grad: erf (or tanh), exp and a few multiply-adds per element (24 FLOPs in the table).
  table.set_cost(OpKind::kGeluGrad, cost::elementwise);
}

}  // namespace ember

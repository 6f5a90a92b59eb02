// The elementwise ops' registry entries: each op's golden forward (tests/golden/elementwise.json, made
// by cases_elementwise.py), its float64 gradchecks (contiguous, transposed, broadcast and 0-dim
// inputs, with the op's scalar and in-place forms beside it) and its gradients pinned against
// PyTorch (grad.json) at ties, bounds and zeros. Inputs of the gradchecks avoid the points where an
// op is not differentiable (abs and relu at 0, clamp at its bounds); the pinned cases cover those.
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "op_registry.h"
#include "test_util.h"

namespace op_registry {
namespace {

using golden::Case;
using golden::json;

// --- golden forwards ----------------------------------------------------------------------------

using Unary = Tensor (*)(const Tensor&);
using TensorTensor = Tensor (*)(const Tensor&, const Tensor&);
using TensorScalar = Tensor (*)(const Tensor&, const ember::Scalar&);

golden::OpFn unary(Unary fn) {
  return [fn](const Case& c) -> std::vector<Tensor> { return {fn(c.tensor(0))}; };
}

// A binary op called with (tensor, tensor) or (tensor, scalar), as the case says.
golden::OpFn binary(TensorTensor tensor_tensor, TensorScalar tensor_scalar = nullptr) {
  return [=](const Case& c) -> std::vector<Tensor> {
    if (c.inputs[1].scalar) {
      if (tensor_scalar == nullptr) throw std::logic_error("case " + c.name + ": the op has no scalar form");
      return {tensor_scalar(c.tensor(0), c.scalar(1))};
    }
    return {tensor_tensor(c.tensor(0), c.tensor(1))};
  };
}

// The cases of `op` in elementwise.json; 16-bit results may differ from PyTorch's by one ulp.
GoldenForward elementwise(const std::string& op, golden::OpFn fn, const std::string& name = "") {
  return {name, "elementwise", op, std::move(fn), golden::one_ulp_for_16bit};
}

// --- gradchecks of in-place forms ---------------------------------------------------------------

Gradcheck inplace_unary(std::string name, std::function<void(Tensor&)> op, Values values = kAny) {
  return unary_gradcheck(
      std::move(name),
      [op](const Tensor& x) {
        Tensor y = non_leaf(x);
        op(y);
        return y;
      },
      values);
}

Gradcheck inplace_binary(std::string name, std::function<void(Tensor&, const Tensor&)> op, Values other = kAny) {
  return {std::move(name),
          [op](const std::vector<Tensor>& x) {
            Tensor y = non_leaf(x[0]);
            op(y, x[1]);
            return y;
          },
          {{"contiguous", {in({3, 4}), in({3, 4}, other)}}, {"broadcast", {in_t({3, 4}), in({4}, other)}}}};
}

// --- pinned gradients ---------------------------------------------------------------------------

PinnedGradient pinned_unary(std::string op, Unary fn) {
  return {std::move(op), [fn](const std::vector<Tensor>& x, const json&) { return fn(x[0]); }};
}

PinnedGradient pinned_binary(std::string op, TensorTensor fn) {
  return {std::move(op), [fn](const std::vector<Tensor>& x, const json&) { return fn(x[0], x[1]); }};
}

std::optional<ember::Scalar> optional_scalar(const json& v) {
  if (v.is_null()) return std::nullopt;
  return ember::Scalar(v.get<double>());
}

// --- the entries --------------------------------------------------------------------------------

std::vector<Entry> unary_entries() {
  return {
      Entry{.name = "neg",
            .ops = {OpKind::kNeg},
            .golden = {elementwise("neg", unary(ember::neg))},
            .gradchecks = {unary_gradcheck("neg", [](const Tensor& x) { return -x; }),
                           inplace_unary("neg_inplace", [](Tensor& y) { y.neg_(); })}},
      Entry{.name = "abs",
            .ops = {OpKind::kAbs},
            .golden = {elementwise("abs", unary(ember::abs))},
            .gradchecks = {unary_gradcheck("abs", ember::abs, kAwayFromZero)},
            .pinned = {pinned_unary("abs", ember::abs)}},
      Entry{.name = "sign",
            .ops = {OpKind::kSign},
            .golden = {elementwise("sign", unary(ember::sign))},
            // sign's gradient is zero wherever it exists: + x makes the check see it pass through.
            .gradchecks = {unary_gradcheck(
                "sign", [](const Tensor& x) { return ember::sign(x) + x; }, kAwayFromZero)},
            .pinned = {pinned_unary("sign", ember::sign)}},
      // float32 exp (Note [attention exp]) against the C library's in float64 over [-110, 95]: within
      // 2.5e-7 relative where the result is normal, within the least subnormal where it is not, inf
      // past float's range; 0, inf and NaN for -inf, inf and NaN, whose lanes leave their
      // neighbours' bits as they are.
      Entry{.name = "exp",
            .ops = {OpKind::kExp},
            .golden = {elementwise("exp", unary(ember::exp))},
            .checks = {{"exp_against_libm",
                        [] {
                          std::vector<float> xs;
                          for (int i = 0; i <= 410000; ++i) xs.push_back(static_cast<float>(-110.0 + i * 5e-4));
                          const std::vector<float> got = ember::exp(ember::from_vector(xs)).to_vector<float>();
                          for (size_t i = 0; i < xs.size(); ++i) {
                            const double want = std::exp(static_cast<double>(xs[i]));
                            if (want > std::numeric_limits<float>::max()) {
                              EXPECT_EQ(got[i], std::numeric_limits<float>::infinity()) << xs[i];
                            } else if (want >= std::numeric_limits<float>::min()) {
                              EXPECT_LE(std::abs(got[i] - want), 2.5e-7 * want) << xs[i];
                            } else {
                              EXPECT_LE(std::abs(got[i] - want), std::numeric_limits<float>::denorm_min()) << xs[i];
                            }
                          }
                          const float inf = std::numeric_limits<float>::infinity();
                          std::vector<float> row(48);
                          for (size_t i = 0; i < row.size(); ++i) row[i] = -20.0F + 0.8125F * static_cast<float>(i);
                          const std::vector<float> plain = ember::exp(ember::from_vector(row)).to_vector<float>();
                          std::vector<float> mixed = row;
                          mixed[3] = -inf;
                          mixed[17] = inf;
                          mixed[40] = std::nanf("");
                          const std::vector<float> got_mixed = ember::exp(ember::from_vector(mixed)).to_vector<float>();
                          EXPECT_EQ(got_mixed[3], 0.0F);
                          EXPECT_EQ(got_mixed[17], inf);
                          EXPECT_TRUE(std::isnan(got_mixed[40]));
                          for (size_t i = 0; i < row.size(); ++i) {
                            if (i != 3 && i != 17 && i != 40) {
                              EXPECT_EQ(got_mixed[i], plain[i]) << i;
                            }
                          }
                        }}},
            .gradchecks = {unary_gradcheck("exp", ember::exp),
                           inplace_unary("exp_inplace", [](Tensor& y) { y.exp_(); })}},
      Entry{.name = "log",
            .ops = {OpKind::kLog},
            .golden = {elementwise("log", unary(ember::log))},
            .gradchecks = {unary_gradcheck("log", ember::log, kPositive)}},
      Entry{.name = "log1p",
            .ops = {OpKind::kLog1p},
            .golden = {elementwise("log1p", unary(ember::log1p))},
            .gradchecks = {unary_gradcheck("log1p", ember::log1p, kPositive)}},
      Entry{.name = "expm1",
            .ops = {OpKind::kExpm1},
            .golden = {elementwise("expm1", unary(ember::expm1))},
            .gradchecks = {unary_gradcheck("expm1", ember::expm1)}},
      // Against the C library's erf in float64 (what PyTorch's CPU erf agrees with to an ulp): float64
      // is std::erf itself; float32 (vectorized) is within 2.5e-7 of the exact value relatively,
      // near 0 (where 1 - erfc would cancel) and in the tails; the special values are IEEE's.
      Entry{.name = "erf",
            .ops = {OpKind::kErf},
            .checks = {{"erf_against_libm",
                        [] {
                          std::vector<double> xs = {0.0, -0.0,    1e-30, -1e-8, 1e-3, 0.4999,
                                                    0.5, -0.5001, 3.9,   -6.0,  30.0};
                          for (int i = 0; i <= 24000; ++i) xs.push_back(-6.0 + i * 0.0005);
                          const Tensor x64 = ember::from_vector(xs);
                          const std::vector<double> got64 = ember::erf(x64).to_vector<double>();
                          const std::vector<float> got32 = ember::erf(x64.to(ember::kFloat32)).to_vector<float>();
                          for (size_t i = 0; i < xs.size(); ++i) {
                            EXPECT_EQ(got64[i], std::erf(xs[i])) << xs[i];
                            const double x32 = static_cast<float>(xs[i]), want = std::erf(x32);
                            EXPECT_LE(std::abs(got32[i] - want), 2.5e-7 * std::abs(want)) << xs[i];
                            EXPECT_EQ(std::signbit(got32[i]), std::signbit(want)) << xs[i];
                          }
                          const float inf = std::numeric_limits<float>::infinity();
                          const std::vector<float> special =
                              ember::erf(ember::tensor<float>({inf, -inf, std::nanf("")})).to_vector<float>();
                          EXPECT_EQ(special[0], 1.0F);
                          EXPECT_EQ(special[1], -1.0F);
                          EXPECT_TRUE(std::isnan(special[2]));
                          // Integers compute in the default float dtype.
                          EXPECT_EQ(ember::erf(ember::tensor<int64_t>({0, 1})).dtype(), ember::kFloat32);
                        }}},
            .gradchecks = {unary_gradcheck("erf", ember::erf)}},
      Entry{.name = "sqrt",
            .ops = {OpKind::kSqrt},
            .golden = {elementwise("sqrt", unary(ember::sqrt))},
            .gradchecks = {unary_gradcheck("sqrt", ember::sqrt, kPositive)}},
      Entry{.name = "rsqrt",
            .ops = {OpKind::kRsqrt},
            .golden = {elementwise("rsqrt", unary(ember::rsqrt))},
            .gradchecks = {unary_gradcheck("rsqrt", ember::rsqrt, kPositive)}},
      Entry{.name = "square",
            .ops = {OpKind::kSquare},
            .golden = {elementwise("square", unary(ember::square))},
            .gradchecks = {unary_gradcheck("square", ember::square)}},
      Entry{.name = "sin",
            .ops = {OpKind::kSin},
            .golden = {elementwise("sin", unary(ember::sin))},
            .gradchecks = {unary_gradcheck("sin", ember::sin)}},
      Entry{.name = "cos",
            .ops = {OpKind::kCos},
            .golden = {elementwise("cos", unary(ember::cos))},
            .gradchecks = {unary_gradcheck("cos", ember::cos)}},
      Entry{.name = "tanh",
            .ops = {OpKind::kTanh},
            .golden = {elementwise("tanh", unary(ember::tanh))},
            .gradchecks = {unary_gradcheck("tanh", ember::tanh),
                           inplace_unary("tanh_inplace", [](Tensor& y) { y.tanh_(); })}},
      Entry{.name = "sigmoid",
            .ops = {OpKind::kSigmoid},
            .golden = {elementwise("sigmoid", unary(ember::sigmoid))},
            // float32 sigmoid and SiLU (Note [sigmoid's exp]) against the C library's exp in float64
            // over [-110, 110]: within 2.5e-7 relative where the result is normal, within the least
            // subnormal where it is not (to -104, not flushed to 0); 0 and 1 at the infinities, NaN
            // for NaN; and a lane's bits do not depend on its neighbours (one far left in a vector).
            .checks = {{"sigmoid_against_libm",
                        [] {
                          std::vector<float> xs;
                          for (int i = 0; i <= 400000; ++i) xs.push_back(static_cast<float>(-110.0 + i * 5.5e-4));
                          const Tensor x = ember::from_vector(xs);
                          const std::vector<float> s = ember::sigmoid(x).to_vector<float>();
                          const std::vector<float> silu = ember::silu(x).to_vector<float>();
                          for (size_t i = 0; i < xs.size(); ++i) {
                            const double xi = xs[i], want = 1.0 / (1.0 + std::exp(-xi));
                            if (want >= std::numeric_limits<float>::min()) {
                              EXPECT_LE(std::abs(s[i] - want), 2.5e-7 * want) << xi;
                              EXPECT_LE(std::abs(silu[i] - xi * want), 2.5e-7 * std::abs(xi * want)) << xi;
                            } else {
                              EXPECT_LE(std::abs(s[i] - want), std::numeric_limits<float>::denorm_min()) << xi;
                            }
                          }
                          const float inf = std::numeric_limits<float>::infinity();
                          const std::vector<float> special =
                              ember::sigmoid(ember::tensor<float>({-inf, inf, std::nanf("")})).to_vector<float>();
                          EXPECT_EQ(special[0], 0.0F);
                          EXPECT_EQ(special[1], 1.0F);
                          EXPECT_TRUE(std::isnan(special[2]));
                          std::vector<float> row(64);
                          for (size_t i = 0; i < row.size(); ++i) row[i] = -6.0F + 0.1875F * static_cast<float>(i);
                          const Tensor plain = ember::sigmoid(ember::from_vector(row));
                          for (const size_t at : {0, 5, 33}) {
                            std::vector<float> mixed = row;
                            mixed[at] = -100.0F;
                            const std::vector<float> got = ember::sigmoid(ember::from_vector(mixed)).to_vector<float>();
                            const std::vector<float> want = plain.to_vector<float>();
                            for (size_t i = 0; i < row.size(); ++i) {
                              if (i != at) {
                                EXPECT_EQ(got[i], want[i]) << "element " << i << ", -100 at " << at;
                              }
                            }
                          }
                        }}},
            .gradchecks = {unary_gradcheck("sigmoid", ember::sigmoid),
                           inplace_unary("sigmoid_inplace", [](Tensor& y) { y.sigmoid_(); })}},
      // relu's backward is one fused pass, threshold_backward, when its operands suit the kernel.
      Entry{.name = "relu",
            .ops = {OpKind::kRelu, OpKind::kThresholdBackward},
            .golden = {elementwise("relu", unary(ember::relu))},
            .gradchecks = {unary_gradcheck("relu", ember::relu, kAwayFromZero),
                           inplace_unary(
                               "relu_inplace", [](Tensor& y) { y.relu_(); }, kAwayFromZero)},
            .pinned = {pinned_unary("relu", ember::relu)}},
      Entry{.name = "gelu",
            .ops = {OpKind::kGeluErf, OpKind::kGeluTanh, OpKind::kGeluGrad},
            .golden = {elementwise("gelu",
                                   [](const Case& c) -> std::vector<Tensor> { return {ember::gelu(c.tensor(0))}; }),
                       elementwise(
                           "gelu_tanh",
                           [](const Case& c) -> std::vector<Tensor> { return {ember::gelu(c.tensor(0), "tanh")}; },
                           "gelu_tanh")},
            // The fused float32 gradient (vectorized erf and tanh) against float64's over [-10, 10]: within
            // a few float32 ulps of 1 (the tanh form cancels in 1 + tanh near x = -5).
            .checks =
                {// float32 GELU (its erf: Note [GELU's erf]) against the C library's erf in float64 over
                 // [-10, 10] and past it: within 3e-7 of max(|x|, 1), exactly 0 far left, NaN for NaN.
                 {"gelu_against_libm",
                  [] {
                    std::vector<float> xs;
                    for (int i = 0; i <= 400000; ++i) xs.push_back(static_cast<float>(-10.0 + i * 5e-5));
                    for (const float x : {-1e30F, -30.0F, 30.0F, 1e30F, 0.0F, -0.0F, 1e-30F}) xs.push_back(x);
                    const std::vector<float> got = ember::gelu(ember::from_vector(xs)).to_vector<float>();
                    for (size_t i = 0; i < xs.size(); ++i) {
                      const double x = xs[i], want = 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440));
                      EXPECT_LE(std::abs(got[i] - want), 3e-7 * std::max(std::abs(x), 1.0)) << x;
                      if (x <= -8.0) {
                        EXPECT_EQ(got[i], 0.0F) << x;
                      }
                    }
                    const std::vector<float> nan =
                        ember::gelu(ember::tensor<float>({std::nanf("")})).to_vector<float>();
                    EXPECT_TRUE(std::isnan(nan[0]));
                  }},
                 // float32 GELU's tanh form (Note [GELU's tanh form]) against x sigmoid(2u) in float64
                 // over [-12, 12]: within 2.5e-7 max(1, |2u|) relative (float32's rounding of 2u, which
                 // e^(2u) multiplies by |2u|) where the result is above 1e-30; -0 below x = -10.1.
                 {"gelu_tanh_against_libm",
                  [] {
                    std::vector<float> xs;
                    for (int i = 0; i <= 400000; ++i) xs.push_back(static_cast<float>(-12.0 + i * 6e-5));
                    const std::vector<float> got = ember::gelu(ember::from_vector(xs), "tanh").to_vector<float>();
                    for (size_t i = 0; i < xs.size(); ++i) {
                      const double x = xs[i], u2 = 1.5957691216057307 * (x + 0.044715 * x * x * x);
                      const double want = x / (1.0 + std::exp(-u2));
                      if (std::abs(want) >= 1e-30) {
                        EXPECT_LE(std::abs(got[i] - want), 2.5e-7 * std::max(1.0, std::abs(u2)) * std::abs(want)) << x;
                      } else {
                        EXPECT_LE(std::abs(got[i]), 1e-30) << x;
                      }
                      if (x <= -10.1) {
                        EXPECT_TRUE(got[i] == 0.0F && std::signbit(got[i])) << x;
                      }
                    }
                    const std::vector<float> nan =
                        ember::gelu(ember::tensor<float>({std::nanf("")}), "tanh").to_vector<float>();
                    EXPECT_TRUE(std::isnan(nan[0]));
                  }},
                 {"gelu_grad_float32",
                  [] {
                    const Tensor x = ember::linspace(-10.0, 10.0, 40001);
                    for (const char* form : {"none", "tanh"}) {
                      const Tensor x32 = x.clone().requires_grad_(), x64 = x.to(ember::kFloat64).requires_grad_();
                      ember::gelu(x32, form).sum().backward();
                      ember::gelu(x64, form).sum().backward();
                      EXPECT_TRUE(golden::all_close(x32.grad(), x64.grad().to(ember::kFloat32), {2e-6, 3e-6})) << form;
                    }
                  }},
                 // float16 and bfloat16 run the same fused pass in float32 and round once: bit for bit
                 // the float32 gradient of the same values, rounded (relu's too).
                 {"gelu_grad_16_bit",
                  [] {
                    ember::manual_seed(4);
                    for (const ember::DType dtype : {ember::kBFloat16, ember::kFloat16}) {
                      const Tensor x = (ember::randn({1001}) * 3.0).to(dtype), g = ember::randn({1001}).to(dtype);
                      for (const char* form : {"none", "tanh", "relu"}) {
                        const Tensor x16 = x.clone().requires_grad_(), x32 = x.to(ember::kFloat32).requires_grad_();
                        const auto f = [&](const Tensor& t) {
                          return std::string(form) == "relu" ? ember::relu(t) : ember::gelu(t, form);
                        };
                        f(x16).backward(g);
                        f(x32).backward(g.to(ember::kFloat32));
                        EXPECT_TRUE(test_util::bitwise_equal(x16.grad(), x32.grad().to(dtype))) << form << " " << dtype;
                      }
                    }
                  }}},
            .gradchecks = {unary_gradcheck("gelu", [](const Tensor& x) { return ember::gelu(x); }),
                           unary_gradcheck("gelu_tanh", [](const Tensor& x) { return ember::gelu(x, "tanh"); }),
                           unary_gradcheck(
                               "gelu_at_zero", [](const Tensor& x) { return ember::gelu(x); }, kZero)},
            .pinned = {{"gelu",
                        [](const std::vector<Tensor>& x, const json& a) {
                          return ember::gelu(x[0], a.at("approximate").get<std::string>());
                        }}}},
      Entry{.name = "silu",
            .ops = {OpKind::kSilu},
            .golden = {elementwise("silu", unary(ember::silu))},
            .gradchecks = {unary_gradcheck("silu", ember::silu)},
            .pinned = {pinned_unary("silu", ember::silu)}},
      Entry{.name = "logical_not",
            .ops = {OpKind::kLogicalNot},
            .golden = {elementwise("logical_not", unary(ember::logical_not))}},
      Entry{.name = "isnan", .ops = {OpKind::kIsNan}, .golden = {elementwise("isnan", unary(ember::isnan))}},
      Entry{.name = "isinf", .ops = {OpKind::kIsInf}, .golden = {elementwise("isinf", unary(ember::isinf))}},
  };
}

std::vector<Entry> binary_entries() {
  return {
      Entry{.name = "add",
            .ops = {OpKind::kAdd},
            .golden = {elementwise("add", binary(ember::add, ember::add))},
            .gradchecks = {binary_gradcheck("add", [](const Tensor& a, const Tensor& b) { return a + b; }),
                           unary_gradcheck("add_scalar", [](const Tensor& x) { return x + 2.0; }),
                           inplace_binary("add_inplace", [](Tensor& y, const Tensor& o) { y.add_(o); }),
                           inplace_unary("add_scalar_inplace", [](Tensor& y) { y.add_(2.0); }),
                           inplace_binary("inplace_operators",
                                          [](Tensor& y, const Tensor& o) { ((y += o) *= o) -= 1.0; })}},
      Entry{.name = "sub",
            .ops = {OpKind::kSub},
            .golden = {elementwise("sub", binary(ember::sub, ember::sub))},
            .gradchecks = {binary_gradcheck("sub", [](const Tensor& a, const Tensor& b) { return a - b; }),
                           unary_gradcheck("rsub", [](const Tensor& x) { return 3.0 - x; }),
                           inplace_binary("sub_inplace", [](Tensor& y, const Tensor& o) { y.sub_(o); }),
                           inplace_unary("sub_scalar_inplace", [](Tensor& y) { y.sub_(3.0); })}},
      Entry{.name = "mul",
            .ops = {OpKind::kMul},
            .golden = {elementwise("mul", binary(ember::mul, ember::mul))},
            .gradchecks = {binary_gradcheck("mul", [](const Tensor& a, const Tensor& b) { return a * b; }),
                           unary_gradcheck("mul_scalar", [](const Tensor& x) { return x * -3.0; }),
                           inplace_binary("mul_inplace", [](Tensor& y, const Tensor& o) { y.mul_(o); }),
                           inplace_unary("mul_scalar_inplace", [](Tensor& y) { y.mul_(2.0); }),
                           inplace_unary("mul_self_inplace", [](Tensor& y) { y.mul_(y); }),
                           // The other operand is a view of self's memory.
                           {"mul_inplace_shared_storage",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = non_leaf(x[0]);
                              y.mul_(y.t());
                              return y;
                            },
                            {{"contiguous", {in({3, 3})}}}},
                           {"inplace_chain",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = non_leaf(x[0]);
                              y.mul_(x[1]).exp_().add_(y);
                              return y.sum({0});
                            },
                            {{"contiguous", {in({3, 4}), in({3, 4})}}}}}},
      Entry{.name = "div",
            .ops = {OpKind::kDiv},
            .golden = {elementwise("div", binary(ember::div, ember::div))},
            .gradchecks = {binary_gradcheck(
                               "div", [](const Tensor& a, const Tensor& b) { return a / b; }, kAny, kAwayFromZero),
                           unary_gradcheck(
                               "div_scalar_by_tensor", [](const Tensor& x) { return 2.0 / x; }, kAwayFromZero),
                           unary_gradcheck("div_scalar", [](const Tensor& x) { return x / 4.0; }),
                           inplace_binary(
                               "div_inplace", [](Tensor& y, const Tensor& o) { y.div_(o); }, kAwayFromZero),
                           inplace_unary("div_scalar_inplace", [](Tensor& y) { y.div_(3.0); })}},
      Entry{
          .name = "pow",
          .ops = {OpKind::kPow},
          .golden = {elementwise("pow", binary(ember::pow, ember::pow))},
          .gradchecks = {binary_gradcheck(
                             "pow", [](const Tensor& a, const Tensor& b) { return ember::pow(a, b); }, kPositive),
                         unary_gradcheck(
                             "pow_scalar_float", [](const Tensor& x) { return ember::pow(x, 2.5); }, kPositive),
                         unary_gradcheck("pow_scalar_int", [](const Tensor& x) { return ember::pow(x, 3); }),
                         unary_gradcheck(
                             "pow_scalar_negative", [](const Tensor& x) { return ember::pow(x, -1.5); }, kPositive),
                         unary_gradcheck("pow_scalar_zero", [](const Tensor& x) { return ember::pow(x, 0) + x; }),
                         unary_gradcheck("pow_scalar_base", [](const Tensor& x) { return ember::pow(2.5, x); }),
                         inplace_unary(
                             "pow_inplace", [](Tensor& y) { y.pow_(3.0); }, kPositive)},
          .pinned = {pinned_binary("pow", ember::pow),
                     {"pow_scalar_base", [](const std::vector<Tensor>& x,
                                            const json& a) { return ember::pow(a.at("base").get<double>(), x[0]); }},
                     {"pow_scalar_exponent", [](const std::vector<Tensor>& x,
                                                const json& a) { return ember::pow(x[0], a.at("e").get<double>()); }}}},
      Entry{.name = "minimum",
            .ops = {OpKind::kMinimum},
            .golden = {elementwise("minimum", binary(ember::minimum))},
            .gradchecks = {binary_gradcheck("minimum", ember::minimum)},
            .pinned = {pinned_binary("minimum", ember::minimum)}},
      Entry{.name = "maximum",
            .ops = {OpKind::kMaximum},
            .golden = {elementwise("maximum", binary(ember::maximum))},
            .gradchecks = {binary_gradcheck("maximum", ember::maximum)},
            .pinned = {pinned_binary("maximum", ember::maximum)}},
      Entry{.name = "eq", .ops = {OpKind::kEq}, .golden = {elementwise("eq", binary(ember::eq, ember::eq))}},
      Entry{.name = "ne", .ops = {OpKind::kNe}, .golden = {elementwise("ne", binary(ember::ne, ember::ne))}},
      Entry{.name = "lt", .ops = {OpKind::kLt}, .golden = {elementwise("lt", binary(ember::lt, ember::lt))}},
      Entry{.name = "le", .ops = {OpKind::kLe}, .golden = {elementwise("le", binary(ember::le, ember::le))}},
      Entry{.name = "gt", .ops = {OpKind::kGt}, .golden = {elementwise("gt", binary(ember::gt, ember::gt))}},
      Entry{.name = "ge", .ops = {OpKind::kGe}, .golden = {elementwise("ge", binary(ember::ge, ember::ge))}},
      Entry{.name = "logical_and",
            .ops = {OpKind::kLogicalAnd},
            .golden = {elementwise("logical_and", binary(ember::logical_and))}},
      Entry{.name = "logical_or",
            .ops = {OpKind::kLogicalOr},
            .golden = {elementwise("logical_or", binary(ember::logical_or))}},
  };
}

std::vector<Entry> selection_entries() {
  return {
      Entry{.name = "where",
            .ops = {OpKind::kWhere},
            .golden = {elementwise("where",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     if (c.inputs[2].scalar)
                                       return {ember::where(c.tensor(0), c.tensor(1), c.scalar(2))};
                                     return {ember::where(c.tensor(0), c.tensor(1), c.tensor(2))};
                                   })},
            .gradchecks = {{"where",
                            [](const std::vector<Tensor>& x) { return ember::where(x[0].detach() > 0.0, x[1], x[2]); },
                            {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}},
                             {"transposed", {in_t({3, 4}), in_t({3, 4}), in({3, 4})}},
                             {"broadcast", {in({3, 1}), in({4}), in({3, 4})}}}},
                           {"where_scalar_other",
                            [](const std::vector<Tensor>& x) { return ember::where(x[0].detach() > 0.0, x[1], 5.0); },
                            {{"contiguous", {in({3, 4}), in_t({3, 4})}}, {"broadcast", {in({3, 4}), in({4})}}}},
                           {"where_scalar_self",
                            [](const std::vector<Tensor>& x) { return ember::where(x[0].detach() > 0.0, -1.0, x[1]); },
                            {{"contiguous", {in({3, 4}), in_t({3, 4})}}, {"broadcast", {in({3, 4}), in({3, 1})}}}}}},
      Entry{.name = "clamp",
            .ops = {OpKind::kClamp},
            .golden = {elementwise("clamp",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     std::optional<ember::Scalar> hi;
                                     if (c.inputs.size() > 2) hi = c.scalar(2);
                                     return {ember::clamp(c.tensor(0), c.scalar(1), hi)};
                                   })},
            .gradchecks =
                {unary_gradcheck(
                     "clamp", [](const Tensor& x) { return ember::clamp(x, ember::Scalar(-0.5), ember::Scalar(0.7)); }),
                 unary_gradcheck("clamp_min",
                                 [](const Tensor& x) { return ember::clamp(x, ember::Scalar(0.1), std::nullopt); }),
                 unary_gradcheck("clamp_max",
                                 [](const Tensor& x) { return ember::clamp(x, std::nullopt, ember::Scalar(0.1)); }),
                 {"clamp_tensor",
                  [](const std::vector<Tensor>& x) {
                    return ember::clamp(x[0], std::optional<Tensor>(x[1] - 1.0), std::optional<Tensor>(x[2] + 1.0));
                  },
                  {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}},
                   {"transposed", {in_t({3, 4}), in_t({3, 4}), in({3, 4})}},
                   {"broadcast", {in({3, 4}), in({4}), in({3, 1})}}}},
                 // min > max: the result is max, which gets all of the gradient.
                 {"clamp_tensor_min_above_max",
                  [](const std::vector<Tensor>& x) {
                    return ember::clamp(x[0], std::optional<Tensor>(x[1] + 3.0), std::optional<Tensor>(x[2] - 3.0));
                  },
                  {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}}}},
                 {"clamp_tensor_min_only",
                  [](const std::vector<Tensor>& x) {
                    return ember::clamp(x[0], std::optional<Tensor>(x[1]), std::nullopt);
                  },
                  {{"broadcast", {in({3, 4}), in({4})}}}},
                 inplace_unary("clamp_inplace", [](Tensor& y) { y.clamp_(-0.5, 0.5); })},
            .pinned = {{"clamp",
                        [](const std::vector<Tensor>& x, const json& a) {
                          return ember::clamp(x[0], optional_scalar(a.at("lo")), optional_scalar(a.at("hi")));
                        }},
                       {"clamp_tensor",
                        [](const std::vector<Tensor>& x, const json&) {
                          return ember::clamp(x[0], std::optional<Tensor>(x[1]), std::optional<Tensor>(x[2]));
                        }},
                       {"clamp_tensor_min",
                        [](const std::vector<Tensor>& x, const json&) {
                          return ember::clamp(x[0], std::optional<Tensor>(x[1]), std::nullopt);
                        }},
                       {"clamp_tensor_max",
                        [](const std::vector<Tensor>& x, const json&) {
                          return ember::clamp(x[0], std::nullopt, std::optional<Tensor>(x[1]));
                        }}}},
      Entry{.name = "masked_fill",
            .ops = {OpKind::kMaskedFill},
            .golden = {elementwise("masked_fill",
                                   [](const Case& c) -> std::vector<Tensor> {
                                     return {ember::masked_fill(c.tensor(0), c.tensor(1), c.scalar(2))};
                                   })},
            .gradchecks =
                {{"masked_fill",
                  [](const std::vector<Tensor>& x) { return ember::masked_fill(x[0], x[0].detach() > 0.5, 9.0); },
                  {{"contiguous", {in({3, 4})}}, {"transposed", {in_t({3, 4})}}}},
                 inplace_unary("masked_fill_inplace", [](Tensor& y) { y.masked_fill_(y.detach() > 0.5, 1.0); })}},
  };
}

std::vector<Entry> elementwise_entries() {
  std::vector<Entry> all = unary_entries();
  for (std::vector<Entry> (*family)() : {binary_entries, selection_entries}) {
    for (Entry& entry : family()) all.push_back(std::move(entry));
  }
  return all;
}

[[maybe_unused]] const bool kElementwiseRegistered = add(elementwise_entries());

}  // namespace
}  // namespace op_registry

// Every differentiable op's backward against central finite differences (float64 gradcheck), on
// contiguous, transposed (non-contiguous) and broadcast inputs; in-place forms through autograd;
// what carries no gradient (integer and bool results, out= forms). Inputs avoid the points where an
// op is not differentiable (abs/relu at 0, ties for max/min, clamp at its bounds); the gradients
// PyTorch defines at those points are pinned against PyTorch (tests/golden/grad.json) at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "golden.h"

namespace ember {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// --- inputs -------------------------------------------------------------------------------------

enum class Values {
  kAny,           // uniform in (-2, 2)
  kPositive,      // uniform in (0.5, 2)
  kAwayFromZero,  // |x| uniform in (0.3, 2), random sign
  kDistinct,      // a shuffled ramp: no two values within 0.1 (max/min without ties)
  kZero,          // exactly 0 (where the one-sided formulas meet)
};

enum class Layout {
  kContiguous,
  kTransposed,  // the last two dims of a contiguous base swapped: same values, non-contiguous
};

struct Input {
  Shape shape;
  Values values = Values::kAny;
  Layout layout = Layout::kContiguous;
};

Input in(Shape shape, Values values = Values::kAny) { return {std::move(shape), values, Layout::kContiguous}; }
Input in_t(Shape shape, Values values = Values::kAny) { return {std::move(shape), values, Layout::kTransposed}; }

Tensor make_values(const Shape& shape, Values values) {
  autograd::NoGradGuard no_grad;
  switch (values) {
    case Values::kAny:
      return rand(shape, kFloat64) * 4.0 - 2.0;
    case Values::kPositive:
      return rand(shape, kFloat64) * 1.5 + 0.5;
    case Values::kAwayFromZero: {
      const Tensor magnitude = rand(shape, kFloat64) * 1.7 + 0.3;
      return where(rand(shape, kFloat64) < 0.5, neg(magnitude), magnitude);
    }
    case Values::kZero:
      return zeros(shape, kFloat64);
    case Values::kDistinct: {
      const int64_t n = shape.numel();
      const Tensor ramp = arange(n, kFloat64) * (4.0 / static_cast<double>(std::max<int64_t>(n, 1))) - 2.0;
      // A random permutation of the ramp: the rank of each of n random keys.
      const Tensor keys = rand({n}, kFloat64);
      const Tensor rank = sum(gt(keys.unsqueeze(0), keys.unsqueeze(1)), {1});  // rank of each key (distinct a.s.)
      return index_select(ramp, 0, rank).reshape(shape) + rand(shape, kFloat64) * 0.01;
    }
  }
  return {};
}

// A float64 leaf requiring grad, laid out as asked.
Tensor make_input(const Input& spec) {
  Tensor x;
  if (spec.layout == Layout::kTransposed && spec.shape.size() >= 2) {
    Shape base = spec.shape;
    std::swap(base[base.size() - 1], base[base.size() - 2]);
    x = make_values(base, spec.values).transpose(-1, -2);
    if (base[base.size() - 1] > 1 && base[base.size() - 2] > 1) {
      EXPECT_FALSE(x.is_contiguous());
    }
  } else {
    x = make_values(spec.shape, spec.values);
  }
  x.requires_grad_();
  return x;
}

// --- the table ----------------------------------------------------------------------------------

struct Variant {
  std::string layout;  // "contiguous", "transposed", "broadcast", ...
  std::vector<Input> inputs;
};

struct GradCase {
  std::string name;
  Fn fn;
  std::vector<Variant> variants;
};

std::vector<GradCase>& table() {
  static std::vector<GradCase> cases;
  return cases;
}

void add(std::string name, Fn fn, std::vector<Variant> variants) {
  table().push_back({std::move(name), std::move(fn), std::move(variants)});
}

// A unary op on a (3, 4) input, contiguous and transposed.
void unary(const std::string& name, std::function<Tensor(const Tensor&)> op, Values values = Values::kAny) {
  add(name, [op](const std::vector<Tensor>& x) { return op(x[0]); },
      {{"contiguous", {in({3, 4}, values)}}, {"transposed", {in_t({3, 4}, values)}}, {"0-dim", {in({}, values)}}});
}

// A binary op: same shapes, transposed, and broadcast both ways.
void binary(const std::string& name, std::function<Tensor(const Tensor&, const Tensor&)> op, Values a = Values::kAny,
            Values b = Values::kAny) {
  add(name, [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); },
      {{"contiguous", {in({3, 4}, a), in({3, 4}, b)}},
       {"transposed", {in_t({3, 4}, a), in_t({3, 4}, b)}},
       {"broadcast row", {in({3, 4}, a), in({4}, b)}},
       {"broadcast outer", {in({3, 1}, a), in_t({1, 4}, b)}}});
}

// A reduction-like op on 2-D and 3-D inputs, contiguous and transposed.
void reduction(const std::string& name, std::function<Tensor(const Tensor&)> op, Values values = Values::kAny) {
  add(name, [op](const std::vector<Tensor>& x) { return op(x[0]); },
      {{"contiguous", {in({3, 4}, values)}},
       {"transposed", {in_t({3, 4}, values)}},
       {"3-D", {in_t({2, 3, 4}, values)}}});
}

// A tensor that is not a leaf, so in-place ops on it are differentiable.
Tensor non_leaf(const Tensor& x) { return x * 1.0; }

const bool kRegistered = [] {
  // --- views and copies (src/core/tensor.cpp) ---
  reduction("view", [](const Tensor& x) { return x.contiguous().view({-1}) * 1.0; });
  reduction("reshape", [](const Tensor& x) { return x.reshape({x.size(-1), -1}); });  // a copy when transposed
  add("reshape_copy_then_inplace",  // a reshape that copies is no view: in-place ops on it differentiate
      [](const std::vector<Tensor>& x) {
        Tensor y = x[0].reshape({-1});
        EXPECT_FALSE(y.impl().is_view);
        y.mul_(x[1]);
        return y;
      },
      {{"transposed", {in_t({3, 4}), in({12})}}});
  reduction("flatten", [](const Tensor& x) { return x.flatten(); });
  add("permute",
      [](const std::vector<Tensor>& x) {
        return x[0].permute({2, 0, 1});
      },
      {{"contiguous", {in({2, 3, 4})}}, {"transposed", {in_t({2, 3, 4})}}});
  reduction("transpose", [](const Tensor& x) { return x.transpose(0, -1); });
  add("t", [](const std::vector<Tensor>& x) { return x[0].t(); },
      {{"contiguous", {in({3, 4})}}, {"transposed", {in_t({3, 4})}}, {"1-D", {in({4})}}});
  reduction("slice", [](const Tensor& x) { return x.slice(-1, 1, std::nullopt, 2); });
  reduction("narrow", [](const Tensor& x) { return x.narrow(-1, 1, 2); });
  reduction("select", [](const Tensor& x) { return x.select(-1, 2); });
  add("expand",
      [](const std::vector<Tensor>& x) {
        return x[0].expand({2, 3, 4});
      },
      {{"row", {in({4})}}, {"column", {in({3, 1})}}, {"transposed", {in_t({1, 3, 4})}}});
  add("squeeze", [](const std::vector<Tensor>& x) { return x[0].squeeze() + x[0].squeeze(0).sum(); },
      {{"contiguous", {in({1, 3, 1})}}});
  reduction("unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); });
  add("as_strided",
      [](const std::vector<Tensor>& x) {
        return x[0].as_strided({2, 3}, {4, 1}, 1);
      },
      {{"contiguous", {in({3, 4})}}});
  add("as_strided_overlapping",
      [](const std::vector<Tensor>& x) {
        return x[0].as_strided({3, 3}, {1, 1});
      },
      {{"contiguous", {in({6})}}});
  reduction("contiguous", [](const Tensor& x) { return x.contiguous(); });
  reduction("clone", [](const Tensor& x) { return x.clone(); });
  add("copy_",
      [](const std::vector<Tensor>& x) {
        Tensor y = zeros({3, 4}, kFloat64);
        y.copy_(x[0]);
        return y;
      },
      {{"same shape", {in_t({3, 4})}}, {"broadcast", {in({4})}}});
  add("copy_over_non_leaf",
      [](const std::vector<Tensor>& x) {
        Tensor y = non_leaf(x[0]);
        y.copy_(x[1]);
        return y * x[0];  // the old value of y gets no gradient through copy_
      },
      {{"contiguous", {in({3, 4}), in({3, 4})}}});
  add("fill_",
      [](const std::vector<Tensor>& x) {
        Tensor y = non_leaf(x[0]);
        y.fill_(2.0);
        return y * x[0];
      },
      {{"contiguous", {in({3, 4})}}});
  add("zero_",
      [](const std::vector<Tensor>& x) {
        Tensor y = non_leaf(x[0]);
        y.zero_();
        return y + x[0];
      },
      {{"contiguous", {in({3, 4})}}});

  // --- unary ---
  unary("neg", [](const Tensor& x) { return -x; });
  unary(
      "abs", [](const Tensor& x) { return abs(x); }, Values::kAwayFromZero);
  unary(
      "sign", [](const Tensor& x) { return sign(x) + x; }, Values::kAwayFromZero);
  unary("exp", [](const Tensor& x) { return exp(x); });
  unary(
      "log", [](const Tensor& x) { return log(x); }, Values::kPositive);
  unary(
      "log1p", [](const Tensor& x) { return log1p(x); }, Values::kPositive);
  unary("expm1", [](const Tensor& x) { return expm1(x); });
  unary(
      "sqrt", [](const Tensor& x) { return sqrt(x); }, Values::kPositive);
  unary(
      "rsqrt", [](const Tensor& x) { return rsqrt(x); }, Values::kPositive);
  unary("square", [](const Tensor& x) { return square(x); });
  unary("sin", [](const Tensor& x) { return sin(x); });
  unary("cos", [](const Tensor& x) { return cos(x); });
  unary("tanh", [](const Tensor& x) { return tanh(x); });
  unary("sigmoid", [](const Tensor& x) { return sigmoid(x); });
  unary(
      "relu", [](const Tensor& x) { return relu(x); }, Values::kAwayFromZero);
  unary("gelu", [](const Tensor& x) { return gelu(x); });
  unary("gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); });
  unary("silu", [](const Tensor& x) { return silu(x); });
  unary(
      "gelu_at_zero", [](const Tensor& x) { return gelu(x); }, Values::kZero);

  // --- binary ---
  binary("add", [](const Tensor& a, const Tensor& b) { return a + b; });
  binary("sub", [](const Tensor& a, const Tensor& b) { return a - b; });
  binary("mul", [](const Tensor& a, const Tensor& b) { return a * b; });
  binary(
      "div", [](const Tensor& a, const Tensor& b) { return a / b; }, Values::kAny, Values::kAwayFromZero);
  binary(
      "pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, Values::kPositive);
  binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  unary(
      "pow_scalar_float", [](const Tensor& x) { return pow(x, 2.5); }, Values::kPositive);
  unary("pow_scalar_int", [](const Tensor& x) { return pow(x, 3); });
  unary(
      "pow_scalar_negative", [](const Tensor& x) { return pow(x, -1.5); }, Values::kPositive);
  unary("pow_scalar_zero", [](const Tensor& x) { return pow(x, 0) + x; });
  unary("pow_scalar_base", [](const Tensor& x) { return pow(2.5, x); });
  unary("rsub", [](const Tensor& x) { return 3.0 - x; });
  unary(
      "div_scalar_by_tensor", [](const Tensor& x) { return 2.0 / x; }, Values::kAwayFromZero);
  unary("add_scalar", [](const Tensor& x) { return x + 2.0; });
  unary("mul_scalar", [](const Tensor& x) { return x * -3.0; });
  unary("div_scalar", [](const Tensor& x) { return x / 4.0; });
  add("where", [](const std::vector<Tensor>& x) { return where(x[0].detach() > 0.0, x[1], x[2]); },
      {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}},
       {"transposed", {in_t({3, 4}), in_t({3, 4}), in({3, 4})}},
       {"broadcast", {in({3, 1}), in({4}), in({3, 4})}}});
  add("where_scalar_other", [](const std::vector<Tensor>& x) { return where(x[0].detach() > 0.0, x[1], 5.0); },
      {{"contiguous", {in({3, 4}), in_t({3, 4})}}, {"broadcast", {in({3, 4}), in({4})}}});
  add("where_scalar_self", [](const std::vector<Tensor>& x) { return where(x[0].detach() > 0.0, -1.0, x[1]); },
      {{"contiguous", {in({3, 4}), in_t({3, 4})}}, {"broadcast", {in({3, 4}), in({3, 1})}}});
  unary("clamp", [](const Tensor& x) { return clamp(x, Scalar(-0.5), Scalar(0.7)); });
  unary("clamp_min", [](const Tensor& x) { return clamp(x, Scalar(0.1), std::nullopt); });
  unary("clamp_max", [](const Tensor& x) { return clamp(x, std::nullopt, Scalar(0.1)); });
  add("clamp_tensor",
      [](const std::vector<Tensor>& x) {
        return clamp(x[0], std::optional<Tensor>(x[1] - 1.0), std::optional<Tensor>(x[2] + 1.0));
      },
      {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}},
       {"transposed", {in_t({3, 4}), in_t({3, 4}), in({3, 4})}},
       {"broadcast", {in({3, 4}), in({4}), in({3, 1})}}});
  add("clamp_tensor_min_above_max",  // min > max: the result is max, which gets all of the gradient
      [](const std::vector<Tensor>& x) {
        return clamp(x[0], std::optional<Tensor>(x[1] + 3.0), std::optional<Tensor>(x[2] - 3.0));
      },
      {{"contiguous", {in({3, 4}), in({3, 4}), in({3, 4})}}});
  add("clamp_tensor_min_only",
      [](const std::vector<Tensor>& x) { return clamp(x[0], std::optional<Tensor>(x[1]), std::nullopt); },
      {{"broadcast", {in({3, 4}), in({4})}}});
  add("masked_fill", [](const std::vector<Tensor>& x) { return masked_fill(x[0], x[0].detach() > 0.5, 9.0); },
      {{"contiguous", {in({3, 4})}}, {"transposed", {in_t({3, 4})}}});

  // --- in place (src/core/tensor_methods.cpp) ---
  auto inplace_binary = [](const std::string& name, std::function<void(Tensor&, const Tensor&)> op,
                           Values other = Values::kAny) {
    add(name,
        [op](const std::vector<Tensor>& x) {
          Tensor y = non_leaf(x[0]);
          op(y, x[1]);
          return y;
        },
        {{"contiguous", {in({3, 4}), in({3, 4}, other)}}, {"broadcast", {in_t({3, 4}), in({4}, other)}}});
  };
  inplace_binary("add_", [](Tensor& y, const Tensor& o) { y.add_(o); });
  inplace_binary("sub_", [](Tensor& y, const Tensor& o) { y.sub_(o); });
  inplace_binary("mul_", [](Tensor& y, const Tensor& o) { y.mul_(o); });
  inplace_binary(
      "div_", [](Tensor& y, const Tensor& o) { y.div_(o); }, Values::kAwayFromZero);
  inplace_binary("operators", [](Tensor& y, const Tensor& o) { ((y += o) *= o) -= 1.0; });
  auto inplace_unary = [](const std::string& name, std::function<void(Tensor&)> op, Values values = Values::kAny) {
    unary(
        name,
        [op](const Tensor& x) {
          Tensor y = non_leaf(x);
          op(y);
          return y;
        },
        values);
  };
  inplace_unary("add_scalar_", [](Tensor& y) { y.add_(2.0); });
  inplace_unary("mul_scalar_", [](Tensor& y) { y.mul_(2.0); });
  inplace_unary("div_scalar_", [](Tensor& y) { y.div_(3.0); });
  inplace_unary("sub_scalar_", [](Tensor& y) { y.sub_(3.0); });
  inplace_unary(
      "pow_", [](Tensor& y) { y.pow_(3.0); }, Values::kPositive);
  inplace_unary("neg_", [](Tensor& y) { y.neg_(); });
  inplace_unary("exp_", [](Tensor& y) { y.exp_(); });
  inplace_unary(
      "relu_", [](Tensor& y) { y.relu_(); }, Values::kAwayFromZero);
  inplace_unary("sigmoid_", [](Tensor& y) { y.sigmoid_(); });
  inplace_unary("tanh_", [](Tensor& y) { y.tanh_(); });
  inplace_unary("clamp_", [](Tensor& y) { y.clamp_(-0.5, 0.5); });
  inplace_unary("masked_fill_", [](Tensor& y) { y.masked_fill_(y.detach() > 0.5, 1.0); });
  inplace_unary("mul_self_", [](Tensor& y) { y.mul_(y); });
  add("add_shared_storage_",  // the other operand is a view of self's memory
      [](const std::vector<Tensor>& x) {
        Tensor y = non_leaf(x[0]);
        y.mul_(y.t());
        return y;
      },
      {{"contiguous", {in({3, 3})}}});
  add("inplace_chain",
      [](const std::vector<Tensor>& x) {
        Tensor y = non_leaf(x[0]);
        y.mul_(x[1]).exp_().add_(y);
        return y.sum({0});
      },
      {{"contiguous", {in({3, 4}), in({3, 4})}}});

  // --- reductions ---
  reduction("sum", [](const Tensor& x) { return x.sum({0}); });
  reduction("sum_all", [](const Tensor& x) { return x.sum(); });
  reduction("mean", [](const Tensor& x) { return mean(x, {-1}, true); });
  reduction("mean_all", [](const Tensor& x) { return mean(x); });
  reduction(
      "prod", [](const Tensor& x) { return prod(x, {-1}); }, Values::kAwayFromZero);
  reduction(
      "prod_all", [](const Tensor& x) { return prod(x); }, Values::kAwayFromZero);
  add("prod_with_zeros",  // one zero in row 0, two in row 1, none in row 2
      [](const std::vector<Tensor>& x) {
        const Tensor mask = from_vector(std::vector<double>{1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1}, Shape{3, 4});
        return prod(x[0] * mask, {1});
      },
      {{"contiguous", {in({3, 4}, Values::kAwayFromZero)}}, {"transposed", {in_t({3, 4}, Values::kAwayFromZero)}}});
  reduction(
      "amax", [](const Tensor& x) { return amax(x, {0}); }, Values::kDistinct);
  reduction(
      "amin", [](const Tensor& x) { return amin(x, {-1}, true); }, Values::kDistinct);
  reduction(
      "max_all", [](const Tensor& x) { return x.max(); }, Values::kDistinct);
  reduction(
      "min_all", [](const Tensor& x) { return x.min(); }, Values::kDistinct);
  reduction("var", [](const Tensor& x) { return var(x, {-1}); });
  reduction("var_all_correction_0", [](const Tensor& x) { return var(x, {}, 0); });
  reduction("std", [](const Tensor& x) { return ember::std(x, {0}, 1, true); });
  reduction("logsumexp", [](const Tensor& x) { return logsumexp(x, {-1}); });
  reduction("norm_2", [](const Tensor& x) { return norm(x, 2.0, {-1}); });
  reduction(
      "norm_1", [](const Tensor& x) { return norm(x, 1.0, {0}); }, Values::kAwayFromZero);
  reduction(
      "norm_inf", [](const Tensor& x) { return norm(x, std::numeric_limits<double>::infinity(), {-1}); },
      Values::kDistinct);
  reduction(
      "norm_3", [](const Tensor& x) { return norm(x, 3.0); }, Values::kAwayFromZero);
  reduction(
      "norm_1_5", [](const Tensor& x) { return norm(x, 1.5, {-1}); }, Values::kAwayFromZero);
  reduction(
      "norm_0_5", [](const Tensor& x) { return norm(x, 0.5, {-1}); }, Values::kAwayFromZero);
  reduction("softmax", [](const Tensor& x) { return softmax(x, -1); });
  reduction("softmax_dim0", [](const Tensor& x) { return softmax(x, 0); });
  reduction("log_softmax", [](const Tensor& x) { return log_softmax(x, -1); });
  reduction("log_softmax_dim0", [](const Tensor& x) { return log_softmax(x, 0); });

  // --- matmul and linear ---
  auto matmul_case = [](const std::string& name, std::vector<Variant> variants) {
    add(
        name, [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, std::move(variants));
  };
  matmul_case("matmul_dot", {{"1-D", {in({4}), in({4})}}});
  matmul_case("matmul_vector_matrix", {{"contiguous", {in({3}), in({3, 4})}}, {"transposed", {in({3}), in_t({3, 4})}}});
  matmul_case("matmul_matrix_vector", {{"contiguous", {in({3, 4}), in({4})}}, {"transposed", {in_t({3, 4}), in({4})}}});
  matmul_case("matmul_2d", {{"contiguous", {in({3, 4}), in({4, 2})}}, {"transposed", {in_t({3, 4}), in_t({4, 2})}}});
  matmul_case("matmul_batched",
              {{"contiguous", {in({2, 3, 4}), in({2, 4, 2})}}, {"transposed", {in_t({2, 3, 4}), in_t({2, 4, 2})}}});
  matmul_case("matmul_batched_shared_right",  // dB from one GEMM over every row
              {{"contiguous", {in({2, 3, 4}), in({4, 2})}}, {"transposed", {in_t({2, 3, 4}), in_t({4, 2})}}});
  matmul_case("matmul_shared_left", {{"contiguous", {in({3, 4}), in({2, 4, 2})}}});
  matmul_case("matmul_broadcast_batch", {{"broadcast", {in({2, 1, 3, 4}), in({3, 4, 2})}},
                                         {"transposed", {in_t({1, 2, 3, 4}), in_t({3, 1, 4, 2})}}});
  matmul_case("matmul_vector_batched",
              {{"1-D left", {in({4}), in({2, 4, 3})}}, {"1-D right", {in({2, 3, 4}), in({4})}}});
  add("linear", [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
      {{"2-D", {in({3, 4}), in({2, 4}), in({2})}},
       {"3-D transposed", {in_t({2, 3, 4}), in_t({2, 4}), in({2})}},
       {"1-D input", {in({4}), in({2, 4}), in({2})}},
       {"row bias", {in({3, 4}), in({2, 4}), in({3, 2})}},
       {"1-D weight", {in_t({2, 3, 4}), in({4}), in({})}}});
  add("linear_no_bias", [](const std::vector<Tensor>& x) { return linear(x[0], x[1]); },
      {{"2-D", {in({3, 4}), in({2, 4})}}, {"1-D weight", {in({2, 3, 4}), in({4})}}, {"both 1-D", {in({4}), in({4})}}});

  // --- shape ops ---
  add("cat",
      [](const std::vector<Tensor>& x) {
        return cat({x[0], x[1], x[2]}, 1);
      },
      {{"contiguous", {in({3, 2}), in({3, 4}), in({3, 1})}}, {"transposed", {in_t({3, 2}), in_t({3, 4}), in({3, 1})}}});
  add("cat_legacy_empty",
      [](const std::vector<Tensor>& x) {
        return cat({x[0], x[1]}, 0);
      },
      {{"contiguous", {in({0}), in({3, 2})}}});
  add("stack",
      [](const std::vector<Tensor>& x) {
        return stack({x[0], x[1]}, 1);
      },
      {{"contiguous", {in({3, 4}), in({3, 4})}}, {"transposed", {in_t({3, 4}), in({3, 4})}}});
  reduction("split", [](const Tensor& x) {
    const std::vector<Tensor> parts = split(x, 1, -1);
    return parts[0] * 2.0 + parts[3] * parts[1];
  });
  reduction("chunk", [](const Tensor& x) {
    const std::vector<Tensor> parts = chunk(x, 2, -1);
    return parts[0] - parts[1] * 3.0;
  });
  reduction("repeat", [](const Tensor& x) { return x.repeat({2, 1, 3}); });
  reduction("tile", [](const Tensor& x) { return tile(x, {2, 2}); });
  reduction("flip", [](const Tensor& x) { return flip(x, {0, -1}); });
  reduction("roll", [](const Tensor& x) { return roll(x, {1, -2}, {0, -1}); });
  reduction("roll_flat", [](const Tensor& x) { return roll(x, {3}); });
  reduction("pad", [](const Tensor& x) { return pad(x, {1, 2, 0, 1}, 0.5); });
  reduction("pad_negative", [](const Tensor& x) { return pad(x, {-1, 2, 1, -1}); });

  // --- indexing ---
  reduction("index_select", [](const Tensor& x) {
    return index_select(x, -1, from_vector(std::vector<int64_t>{3, 0, 3, 1}));  // 3 twice: gradients add
  });
  reduction("gather", [](const Tensor& x) {
    const Tensor index = from_vector(std::vector<int64_t>{0, 2, 2, 1, 1, 0}, Shape{2, 3});
    return gather(x.dim() == 2 ? x : x.select(0, 1), 1, index);
  });
  add("scatter_add",
      [](const std::vector<Tensor>& x) {
        const Tensor index = from_vector(std::vector<int64_t>{0, 2, 2, 1, 1, 0}, Shape{2, 3});
        return scatter_add(x[0], 1, index, x[1]);
      },
      {{"same extent", {in({3, 4}), in({2, 3})}}, {"larger src", {in_t({3, 4}), in_t({3, 5})}}});
  add("embedding",
      [](const std::vector<Tensor>& x) {
        return embedding(x[0], from_vector(std::vector<int64_t>{4, 0, 4, 2, 1, 4}, Shape{2, 3}));
      },
      {{"contiguous", {in({5, 3})}}, {"transposed", {in_t({5, 3})}}});
  return true;
}();

// --- the tests ----------------------------------------------------------------------------------

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const GradCase& c : table()) names.push_back(c.name);
  return names;
}

class Gradcheck : public ::testing::TestWithParam<std::string> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  ASSERT_TRUE(kRegistered);
  const auto it = std::find_if(table().begin(), table().end(), [&](const GradCase& c) { return c.name == GetParam(); });
  ASSERT_NE(it, table().end());
  manual_seed(1234);
  for (const Variant& variant : it->variants) {
    std::vector<Tensor> inputs;
    for (const Input& spec : variant.inputs) inputs.push_back(make_input(spec));
    try {
      EXPECT_TRUE(autograd::gradcheck(it->fn, inputs)) << variant.layout;
    } catch (const Error& e) {
      ADD_FAILURE() << it->name << " (" << variant.layout << "): " << e.what();
    }
  }
}

struct CaseName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& param) const { return param.param; }
};
INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(case_names()), CaseName());

// --- what carries no gradient, and what refuses to run with one ---------------------------------

TEST(GradcheckBoundaries, IntegerAndBoolResultsCarryNoGradFn) {
  Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  const std::vector<Tensor> results = {
      argmax(x, 1),         argmin(x),   x > 0.0, eq(x, x), isnan(x), isinf(x), all(x > 0.0), any(x < 0.0, {0}),
      logical_not(x > 0.0), x.to(kInt64)};
  for (const Tensor& r : results) {
    EXPECT_FALSE(r.is_floating_point());
    EXPECT_FALSE(r.requires_grad());
    EXPECT_EQ(r.grad_fn(), nullptr);
  }
  // A float result still records.
  EXPECT_NE((x * 2.0).grad_fn(), nullptr);
}

TEST(GradcheckBoundaries, OutFormsRefuseToRunWhenAGradientIsNeeded) {
  Tensor a = randn({2, 2}, kFloat64).requires_grad_();
  Tensor b = randn({2, 2}, kFloat64);
  Tensor out = empty({2, 2}, kFloat64);
  try {
    matmul_out(out, a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul_out]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not support autograd"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add_out(out, a, b), Error);
  EXPECT_THROW(sub_out(out, b, a), Error);
  EXPECT_THROW(mul_out(out, a, b), Error);
  EXPECT_THROW(div_out(out, a, b), Error);
  autograd::NoGradGuard no_grad;  // fine without grad mode
  EXPECT_NO_THROW(matmul_out(out, a, b));
  EXPECT_NO_THROW(add_out(out, a, b));
}

TEST(GradcheckBoundaries, ToCastsTheGradientBackToTheInputDtype) {
  Tensor a = from_vector(std::vector<float>{1, 2, 3}).requires_grad_();
  Tensor w = from_vector(std::vector<double>{4, 5, 6});
  (a.to(kFloat64) * w).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{4, 5, 6}));
}

TEST(GradcheckBoundaries, InPlaceOnAViewOfAGraphIsRejected) {
  Tensor a = randn({3, 4}, kFloat64).requires_grad_();
  Tensor y = a * 1.0;
  try {
    y.narrow(0, 0, 1).mul_(2.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[mul_]"), std::string::npos) << e.what();
  }
}

TEST(GradcheckBoundaries, AsStridedOfAnOverlappingInputIsRejectedInBackward) {
  Tensor a = randn({3}, kFloat64).requires_grad_();
  Tensor expanded = a.expand({2, 3});
  Tensor y = expanded.as_strided({3}, {1}, 0);
  try {
    y.sum().backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[as_strided]"), std::string::npos) << e.what();
  }
}

TEST(GradcheckBoundaries, SavedInputModifiedInPlaceThroughAutogradIsCaught) {
  Tensor a = randn({3}, kFloat64).requires_grad_();
  Tensor y = a * 1.0;
  Tensor z = exp(y);  // saves its output z
  z.add_(1.0);        // differentiable in-place on z: exp's saved output is now stale
  EXPECT_THROW(z.sum().backward(), Error);
}

TEST(GradcheckBoundaries, NoGradPathRecordsNothing) {
  Tensor a = randn({3, 4}, kFloat64).requires_grad_();
  autograd::NoGradGuard no_grad;
  EXPECT_FALSE(a.t().requires_grad());
  EXPECT_FALSE(matmul(a, a.t()).requires_grad());
  EXPECT_FALSE(softmax(a, 0).requires_grad());
  Tensor b = a.clone();
  b.mul_(2.0);
  EXPECT_FALSE(b.requires_grad());
}

// --- gradients at non-differentiable points, against PyTorch (tests/golden/cases_grad.py) ----------

// Inputs are the op's inputs then the upstream gradient; attrs["wrt"] lists the inputs that require
// grad, and the expected values are their gradients.
using GradOp = std::function<Tensor(const std::vector<Tensor>&, const golden::json&)>;

double p_value(const golden::json& p) {
  return p.is_string() ? std::numeric_limits<double>::infinity() : p.get<double>();
}
Axes axes(const golden::json& attrs) { return Axes(attrs.at("dims").get<std::vector<int64_t>>()); }
std::optional<Scalar> optional_scalar(const golden::json& v) {
  if (v.is_null()) return std::nullopt;
  return Scalar(v.get<double>());
}

const std::map<std::string, GradOp>& grad_ops() {
  using golden::json;
  static const std::map<std::string, GradOp> ops = {
      {"maximum", [](const std::vector<Tensor>& x, const json&) { return maximum(x[0], x[1]); }},
      {"minimum", [](const std::vector<Tensor>& x, const json&) { return minimum(x[0], x[1]); }},
      {"amax", [](const std::vector<Tensor>& x, const json& a) { return amax(x[0], axes(a), a.at("keepdim")); }},
      {"amin", [](const std::vector<Tensor>& x, const json& a) { return amin(x[0], axes(a), a.at("keepdim")); }},
      {"norm", [](const std::vector<Tensor>& x, const json& a) { return norm(x[0], p_value(a.at("p")), axes(a)); }},
      {"abs", [](const std::vector<Tensor>& x, const json&) { return abs(x[0]); }},
      {"relu", [](const std::vector<Tensor>& x, const json&) { return relu(x[0]); }},
      {"sign", [](const std::vector<Tensor>& x, const json&) { return sign(x[0]); }},
      {"clamp", [](const std::vector<Tensor>& x,
                   const json& a) { return clamp(x[0], optional_scalar(a.at("lo")), optional_scalar(a.at("hi"))); }},
      {"clamp_tensor",
       [](const std::vector<Tensor>& x, const json&) {
         return clamp(x[0], std::optional<Tensor>(x[1]), std::optional<Tensor>(x[2]));
       }},
      {"clamp_tensor_min", [](const std::vector<Tensor>& x,
                              const json&) { return clamp(x[0], std::optional<Tensor>(x[1]), std::nullopt); }},
      {"clamp_tensor_max", [](const std::vector<Tensor>& x,
                              const json&) { return clamp(x[0], std::nullopt, std::optional<Tensor>(x[1])); }},
      {"prod", [](const std::vector<Tensor>& x, const json& a) { return prod(x[0], axes(a)); }},
      {"std", [](const std::vector<Tensor>& x, const json& a) { return ember::std(x[0], axes(a)); }},
      {"var", [](const std::vector<Tensor>& x, const json& a) { return var(x[0], axes(a)); }},
      {"pow", [](const std::vector<Tensor>& x, const json&) { return pow(x[0], x[1]); }},
      {"pow_scalar_base",
       [](const std::vector<Tensor>& x, const json& a) { return pow(a.at("base").get<double>(), x[0]); }},
      {"pow_scalar_exponent",
       [](const std::vector<Tensor>& x, const json& a) { return pow(x[0], a.at("e").get<double>()); }},
      {"gelu",
       [](const std::vector<Tensor>& x, const json& a) { return gelu(x[0], a.at("approximate").get<std::string>()); }},
      {"silu", [](const std::vector<Tensor>& x, const json&) { return silu(x[0]); }},
      {"logsumexp", [](const std::vector<Tensor>& x, const json& a) { return logsumexp(x[0], axes(a)); }},
      {"softmax",
       [](const std::vector<Tensor>& x, const json& a) { return softmax(x[0], a.at("dim").get<int64_t>()); }},
      {"log_softmax",
       [](const std::vector<Tensor>& x, const json& a) { return log_softmax(x[0], a.at("dim").get<int64_t>()); }},
  };
  return ops;
}

std::vector<Tensor> run_grad_case(const golden::Case& c) {
  const GradOp& op = grad_ops().at(c.op);
  const std::vector<int64_t> wrt = c.attrs.at("wrt").get<std::vector<int64_t>>();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) {
    Tensor x = c.tensor(i).clone();
    if (std::find(wrt.begin(), wrt.end(), static_cast<int64_t>(i)) != wrt.end()) x.requires_grad_();
    inputs.push_back(x);
  }
  const Tensor out = op(inputs, c.attrs);
  std::vector<Tensor> leaves;
  for (int64_t i : wrt) leaves.push_back(inputs[static_cast<size_t>(i)]);
  return autograd::grad({out}, leaves, {c.tensor(c.inputs.size() - 1)});
}

std::vector<std::string> grad_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, op] : grad_ops()) names.push_back(name);
  return names;
}

class GoldenGrad : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenGrad, MatchesPyTorch) { golden::run_cases("grad", GetParam(), run_grad_case); }

INSTANTIATE_TEST_SUITE_P(Ops, GoldenGrad, ::testing::ValuesIn(grad_op_names()), CaseName());

}  // namespace
}  // namespace ember

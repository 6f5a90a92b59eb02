// The autograd engine: accumulation, retain_graph, grad modes, hooks, saved-tensor version checks,
// anomaly mode, autograd::grad and gradcheck itself.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "kernels/cpu/gemm.h"

namespace ember {
namespace {

using autograd::NoGradGuard;

Tensor leaf(std::initializer_list<double> values, const Shape& shape, DType dtype = kFloat64) {
  Tensor t = from_vector(std::vector<double>(values), shape).to(dtype);
  t.requires_grad_();
  return t;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(Autograd, MulAddSumGradients) {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({4, 5, 6}, {3});
  Tensor loss = (a * b + a).sum();
  EXPECT_FALSE(loss.is_leaf());
  loss.backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{5, 6, 7}));  // b + 1
  EXPECT_EQ(values(b.grad()), (std::vector<double>{1, 2, 3}));  // a
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor a = leaf({1, 2}, {2});
  (a * 3.0).sum().backward();
  (a * 3.0).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{6, 6}));
}

TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  (a * b).sum().backward();
  EXPECT_EQ(b.grad().shape(), Shape({3}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(values(a.grad()), (std::vector<double>{10, 20, 30, 10, 20, 30}));
}

TEST(Autograd, GradientsAreCastToTheInputDtype) {
  Tensor a = leaf({1, 2}, {2}, kFloat32);
  Tensor b = leaf({3, 4}, {2}, kFloat64);
  (a * b).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3, 4}));
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor a = leaf({1, 2}, {2});
  Tensor loss = (a * a).sum();
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{4, 8}));
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor a = leaf({1, 2}, {2});
  Tensor y = a * 2.0;
  EXPECT_THROW(y.backward(), Error);
  y.backward(from_vector(std::vector<double>{1, 10}));
  EXPECT_EQ(values(a.grad()), (std::vector<double>{2, 20}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor a = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard guard;
    y = a * 2.0;
    EXPECT_FALSE(autograd::is_grad_enabled());
    {
      autograd::EnableGradGuard enable;
      EXPECT_TRUE((a * 2.0).requires_grad());
    }
  }
  EXPECT_TRUE(autograd::is_grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(y.sum().backward(), Error);
  EXPECT_FALSE((a.detach() * 2.0).requires_grad());
}

TEST(Autograd, ModifyingASavedTensorInPlaceIsCaught) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 1.0;  // non-leaf
  Tensor c = leaf({3, 4}, {2});
  Tensor loss = (b * c).sum();  // saves b
  {
    NoGradGuard guard;
    b.add_(1.0);
  }
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mul"), std::string::npos) << what;
    EXPECT_NE(what.find("in-place"), std::string::npos) << what;
  }
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradIsRejected) {
  Tensor a = leaf({1, 2}, {2});
  EXPECT_THROW(a.add_(1.0), Error);
  NoGradGuard guard;
  a.add_(1.0);  // fine without grad mode, as an optimizer does
  EXPECT_EQ(values(a), (std::vector<double>{2, 3}));
}

TEST(Autograd, InPlaceOnANonLeafExtendsTheGraph) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 2.0;
  b.mul_(b);  // b = (2a)^2, d/da = 8a
  b.sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{8, 16}));
}

TEST(Autograd, TensorHooksSeeAndReplaceGradients) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 3.0;
  std::vector<double> seen;
  RemovableHandle h1 = b.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 10.0;
  });
  RemovableHandle h2 = a.register_hook([](const Tensor& g) { return g + 1.0; });
  b.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(values(a.grad()), (std::vector<double>{31, 31}));
  h1.remove();
  h2.remove();
  h2.remove();  // harmless
  a.set_grad(Tensor());
  (a * 3.0).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3, 3}));
}

TEST(Autograd, RetainGradKeepsANonLeafGradient) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = a * 3.0;
  b.retain_grad();
  (b * b).sum().backward();
  EXPECT_EQ(values(b.grad()), (std::vector<double>{6, 12}));
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = leaf({3, 4}, {2});
  Tensor mid = a * b;
  Tensor y = (mid * mid).sum();
  const std::vector<Tensor> g = autograd::grad({y}, {a, mid}, {}, /*retain_graph=*/true);
  EXPECT_EQ(values(g[0]), (std::vector<double>{18, 64}));  // 2 a b^2
  EXPECT_EQ(values(g[1]), (std::vector<double>{6, 16}));   // 2 mid
  EXPECT_FALSE(a.grad().defined());
  Tensor unused = leaf({1}, {1});
  EXPECT_THROW(autograd::grad({y}, {unused}, {}, true), Error);
  EXPECT_FALSE(autograd::grad({y}, {unused}, {}, true, /*allow_unused=*/true)[0].defined());
}

TEST(Autograd, AnomalyModeNamesTheOp) {
  Tensor a = leaf({1, 0}, {2});
  autograd::DetectAnomalyGuard anomaly;
  try {
    Tensor y = div(a, a * 0.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[anomaly] the forward of div"), std::string::npos) << what;
  }
  Tensor b = leaf({0, 1}, {2});
  Tensor z = div(b, b + 1.0) * 0.0;  // finite forward; d/db of b/(b+1) is finite too
  z.sum().backward();
  Tensor zero = leaf({0}, {1});
  Tensor w = div(ones_like(zero), zero + 1.0);  // finite
  Tensor x = w * (zero * 0.0);
  EXPECT_NO_THROW(x.sum().backward());
}

TEST(Autograd, BackwardOnATensorWithoutGradIsAnError) {
  Tensor a = ones({2});
  EXPECT_THROW(a.sum().backward(), Error);
  EXPECT_THROW(a.register_hook([](const Tensor& g) { return g; }), Error);
  EXPECT_THROW(ones({2}, kInt64).requires_grad_(), Error);
}

TEST(Gradcheck, PassesForCorrectAndFailsForWrongGradients) {
  Tensor a = randn({3, 4}, kFloat64).requires_grad_();
  Tensor b = randn({4}, kFloat64).requires_grad_();
  EXPECT_TRUE(
      autograd::gradcheck([](const std::vector<Tensor>& x) { return x[0] * x[1] / (x[1] * x[1] + 1.0); }, {a, b}));
  // A hook that corrupts the gradient makes gradcheck fail with a message naming the input.
  auto wrong = [](const std::vector<Tensor>& x) {
    Tensor y = x[0] * 2.0;
    if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g * 1.5; });
    return y;
  };
  try {
    autograd::gradcheck(wrong, {a});
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Jacobian mismatch for input 0"), std::string::npos) << e.what();
  }
}

// gradcheck perturbs its inputs in place: each write moves the version, so a product that keeps
// B's packed panels on its storage after the second call of a version (Note [B packed once] in
// gemm.cpp) packs the perturbed values. k = 4 takes the packed path on every instruction set.
TEST(Gradcheck, PerturbedInputsAreNotServedStalePackedForms) {
  Tensor a = randn({16, 4}, kFloat64).requires_grad_();
  Tensor b = randn({4, 64}, kFloat64).requires_grad_();
  EXPECT_EQ(cpu::gemm_path(cpu::GemmArgs{.dtype = kFloat64,
                                         .m = 16,
                                         .n = 64,
                                         .k = 4,
                                         .a_row_stride = 4,
                                         .a_col_stride = 1,
                                         .b_row_stride = 64,
                                         .b_col_stride = 1}),
            cpu::GemmPath::kPacked);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {a, b}));
}

}  // namespace
}  // namespace ember

// Autograd's boundaries: what carries no gradient (integer and bool results), what refuses to run
// with one (out= forms, in-place ops on views of a graph, as_strided over overlapping memory, saved
// tensors modified in place), and that the no-grad path records nothing. Each differentiable op's
// gradchecks and pinned PyTorch gradients are its registry entry (tests/ops_<family>.cpp, run by
// tests/test_ops.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/ember.h"

namespace ember {
namespace {

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

}  // namespace
}  // namespace ember

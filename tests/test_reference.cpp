// Every fused op against its reference decomposition (src/ops/reference.h), the oracle it carries:
// softmax, log_softmax, layer_norm, rms_norm, cross_entropy (forward and gradient), linear_gelu, and
// the fused optimizer updates (to within the roundings an FMA saves: ops/reference.h).
#include <gtest/gtest.h>

#include <vector>

#include "ember/ember.h"
#include "golden.h"
#include "ops/optimizer_updates.h"
#include "ops/reference.h"

namespace ember {
namespace {

// Rows with large values, so an unshifted exp would overflow.
Tensor scores(const Shape& shape, DType dtype = kFloat32) { return (randn(shape) * 30.0).to(dtype); }

TEST(Reference, SoftmaxAndLogSoftmax) {
  manual_seed(1);
  for (const Shape& shape : {Shape{4, 7}, Shape{3, 5, 2}, Shape{2, 33}}) {
    const Tensor x = scores(shape);
    for (int64_t dim : {int64_t{-1}, int64_t{0}}) {
      EXPECT_TRUE(golden::all_close(softmax(x, dim), reference::softmax(x, dim), {1e-6, 1e-7})) << shape << dim;
      EXPECT_TRUE(golden::all_close(log_softmax(x, dim), reference::log_softmax(x, dim), {1e-6, 1e-5})) << shape;
    }
  }
}

TEST(Reference, LayerNormAndRmsNorm) {
  manual_seed(2);
  const Tensor x = randn({6, 4, 10}) * 3.0 + 1.0, w = randn({4, 10}), b = randn({4, 10});
  EXPECT_TRUE(golden::all_close(layer_norm(x, {4, 10}, w, b, 1e-5), reference::layer_norm(x, {4, 10}, w, b, 1e-5),
                                {1e-5, 1e-5}));
  EXPECT_TRUE(
      golden::all_close(layer_norm(x, {10}), reference::layer_norm(x, {10}, Tensor(), Tensor(), 1e-5), {1e-5, 1e-5}));
  EXPECT_TRUE(golden::all_close(rms_norm(x, {4, 10}, w, 1e-6), reference::rms_norm(x, {4, 10}, w, 1e-6), {1e-5, 1e-6}));
}

TEST(Reference, CrossEntropyForwardAndGradient) {
  manual_seed(3);
  const Tensor target = from_vector(std::vector<int64_t>{3, -100, 0, 9, 9, 4}, Shape{2, 3});
  for (double smoothing : {0.0, 0.2}) {
    for (Reduction reduction : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
      const Tensor x = scores({2, 10, 3}, kFloat64).requires_grad_();
      const Tensor fused = cross_entropy(x, target, -100, reduction, smoothing);
      const Tensor reference = reference::cross_entropy(x, target, ClassLossAttrs{-100, smoothing, reduction});
      EXPECT_TRUE(golden::all_close(fused, reference, {1e-12, 1e-12})) << smoothing;
      const Tensor fused_grad = autograd::grad({fused.sum()}, {x})[0];
      const Tensor reference_grad = autograd::grad({reference.sum()}, {x})[0];
      EXPECT_TRUE(golden::all_close(fused_grad, reference_grad, {1e-12, 1e-12})) << smoothing;
    }
  }
}

TEST(Reference, LinearGelu) {
  manual_seed(4);
  const Tensor x = randn({5, 16}), w = randn({8, 16}) * 0.3, b = randn({8});
  for (const char* approximate : {"none", "tanh"}) {
    EXPECT_TRUE(golden::all_close(linear_gelu(x, w, b, approximate), reference::linear_gelu(x, w, b, approximate),
                                  {1e-5, 1e-6}))
        << approximate;
  }
}

// The optimizers' fused kernels and their decompositions: same operations, same order, same dtype.
class ReferenceUpdate : public ::testing::TestWithParam<DType> {};

// A parameter, its gradient and three state buffers, well conditioned: the second moments (b, c)
// are well above the squared first moments (a), so no update subtracts nearly equal numbers and
// the roundings an FMA saves stay at the last bit.
struct State {
  Tensor param, grad, a, b, c;
  explicit State(DType dtype, int64_t n = 1000) {
    param = randn({n}, dtype);
    grad = randn({n}, dtype);
    a = randn({n}, dtype) * 0.01;
    b = rand({n}, dtype) * 0.01 + 0.01;
    c = rand({n}, dtype) * 0.02 + 0.02;
  }
  State clone() const {
    State s = *this;
    for (Tensor* t : {&s.param, &s.grad, &s.a, &s.b, &s.c}) *t = t->clone();
    return s;
  }
};

// A few roundings apart at most: the kernels may fuse a multiply and an add into one FMA.
void expect_same(const State& fused, const State& reference, const char* what) {
  const golden::Tolerance tol =
      fused.param.dtype() == kFloat32 ? golden::Tolerance{2e-6, 1e-7} : golden::Tolerance{1e-14, 1e-16};
  EXPECT_TRUE(golden::all_close(fused.param, reference.param, tol)) << what << ": param";
  EXPECT_TRUE(golden::all_close(fused.a, reference.a, tol)) << what << ": first state";
  EXPECT_TRUE(golden::all_close(fused.b, reference.b, tol)) << what << ": second state";
  EXPECT_TRUE(golden::all_close(fused.c, reference.c, tol)) << what << ": third state";
}

TEST_P(ReferenceUpdate, OptimizerKernelsMatchTheirDecompositions) {
  manual_seed(5);
  autograd::NoGradGuard no_grad;
  const State start(GetParam());
  for (const SgdAttrs& attrs :
       {SgdAttrs{0.1, 0.9, 0.0, 0.01, false, false}, SgdAttrs{0.1, 0.9, 0.0, 0.0, true, false},
        SgdAttrs{0.05, 0.9, 0.1, 0.0, false, true}, SgdAttrs{0.05, 0.0, 0.0, 0.01, false, false}}) {
    State fused = start.clone(), reference = start.clone();
    const bool momentum = attrs.momentum != 0;
    detail::sgd_update(fused.param, fused.grad, momentum ? fused.a : Tensor(), attrs);
    reference::sgd_update(reference.param, reference.grad, momentum ? reference.a : Tensor(), attrs);
    expect_same(fused, reference, "sgd");
  }
  for (const bool decoupled : {false, true}) {
    for (const bool amsgrad : {false, true}) {
      AdamAttrs attrs{1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled, amsgrad, 1e-3 / 0.1, 0.0316};
      State fused = start.clone(), reference = start.clone();
      detail::adam_update(fused.param, fused.grad, fused.a, fused.b, amsgrad ? fused.c : Tensor(), attrs);
      reference::adam_update(reference.param, reference.grad, reference.a, reference.b,
                             amsgrad ? reference.c : Tensor(), attrs);
      expect_same(fused, reference, "adam");
    }
  }
  {
    State fused = start.clone(), reference = start.clone();
    detail::adagrad_update(fused.param, fused.grad, fused.b, AdagradAttrs{0.01, 0.1, 1e-10});
    reference::adagrad_update(reference.param, reference.grad, reference.b, AdagradAttrs{0.01, 0.1, 1e-10});
    expect_same(fused, reference, "adagrad");
  }
  for (const bool centered : {false, true}) {
    for (const double momentum : {0.0, 0.9}) {
      const RmspropAttrs attrs{0.01, 0.99, 1e-8, 0.01, momentum, centered};
      State fused = start.clone(), reference = start.clone();
      detail::rmsprop_update(fused.param, fused.grad, fused.b, centered ? fused.a : Tensor(),
                             momentum != 0 ? fused.c : Tensor(), attrs);
      reference::rmsprop_update(reference.param, reference.grad, reference.b, centered ? reference.a : Tensor(),
                                momentum != 0 ? reference.c : Tensor(), attrs);
      expect_same(fused, reference, "rmsprop");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReferenceUpdate, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(dtype_name(param.param));
                         });

}  // namespace
}  // namespace ember

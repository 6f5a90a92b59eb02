// Cost rules (each op's rule in src/ops/<family>.cpp) against FLOPs and bytes computed by hand, both
// directly (test_util::cost_of) and as the profiler sees them when the ops run (profiler::count_cost
// sums every primitive call once; composites cost what their primitives cost).
#include <gtest/gtest.h>

#include <vector>

#include "ember/ember.h"
#include "ember/profiler.h"
#include "test_util.h"

namespace ember {
namespace {

using profiler::CostTotals;
using profiler::count_cost;
using test_util::cost_of;

constexpr double kF32 = 4;  // bytes per float32

void expect_cost(const CostTotals& got, double flops, double bytes) {
  EXPECT_DOUBLE_EQ(got.flops, flops);
  EXPECT_DOUBLE_EQ(got.bytes, bytes);
}

TEST(Cost, MatmulBatchedTimesMatrix) {
  const Tensor a = randn({2, 3, 4}), b = randn({4, 5});
  // 2 batches of (3 x 4) @ (4 x 5): 2 * 3 * 5 * 4 multiply-adds = 120, 2 FLOPs each. B is shared
  // by both batches and read once: 24 + 20 + 30 floats.
  expect_cost(count_cost([&] { (void)matmul(a, b); }), 240, (24 + 20 + 30) * kF32);
}

TEST(Cost, LinearWithBias) {
  const Tensor x = randn({8, 16}), w = randn({4, 16}), bias = randn({4});
  // 8 x 16 @ 16 x 4 = 2 * 8 * 16 * 4 = 1024 FLOPs, plus 8 * 4 bias adds; x, w, out, bias once.
  expect_cost(count_cost([&] { (void)linear(x, w, bias); }), 1024 + 32, (128 + 64 + 32 + 4) * kF32);
}

TEST(Cost, MatmulRuleWithBetaAndBias) {
  const Tensor a = randn({3, 5}), b = randn({5, 4}), bias = randn({4}), c = randn({3, 4});
  // 2 * 3 * 4 * 5 FLOPs, 12 bias adds, 12 for beta * C; A, B, bias read, C read and written.
  const OpCost cost = cost_of(OpKind::kMatmul, MatmulAttrs{1.0, 1.0, Activation::kNone}, {a, b, bias, Tensor()}, {c});
  EXPECT_DOUBLE_EQ(cost.flops, 2.0 * 3 * 4 * 5 + 12 + 12);
  EXPECT_DOUBLE_EQ(cost.bytes, (15 + 20 + 4 + 2 * 12) * kF32);
}

TEST(Cost, Conv2dForward) {
  const Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}), bias = randn({4});
  // 6 x 6 outputs (P = 36) per (image, out channel), each a dot product of K = 3 * 3 * 3 = 27:
  // 2 * N * C_out * P * K = 2 * 2 * 4 * 36 * 27 = 15552, plus N * C_out * P = 288 bias adds.
  // Bytes: input 384 + weight 108 + output 288 + bias 4 floats, and the column buffer of
  // N * K * P = 1944 floats written and read once.
  const double elements = 384 + 108 + 288 + 4 + 2 * 1944;
  expect_cost(count_cost([&] { (void)conv2d(x, w, bias); }), 15552 + 288, elements * kF32);
}

// A convolution whose output the compiler keeps blocked (Conv2dAttrs::blocked_output: 4 output
// channels in one block of 16, planes of 6 x 6 padded by 1 to 8 x 8) does the same multiply-adds;
// its element counts are the blocked buffers'.
TEST(Cost, Conv2dBlockedOutput) {
  const Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}), bias = randn({4});
  Conv2dAttrs attrs;
  attrs.blocked_output = 1;
  const OpCost cost = cost_of(OpKind::kConv2d, attrs, {x, w, bias}, {empty({2, 1, 8, 8, 16})});
  const double out = 2 * 8 * 8 * 16;
  EXPECT_DOUBLE_EQ(cost.flops, 15552 + out);
  EXPECT_DOUBLE_EQ(cost.bytes, (384 + 108 + out + 4 + 2 * 1944) * kF32);
}

TEST(Cost, Conv2dGradPrimitives) {
  const Tensor x = randn({2, 3, 8, 8});
  const Tensor w = randn({4, 3, 3, 3}).requires_grad_(), bias = randn({4}).requires_grad_();
  const Tensor out = conv2d(x, w, bias);
  const Tensor grad = ones_like(out);
  // Data input (no grad): conv2d_backward_weight (one GEMM, 15552 FLOPs) and the bias's sum (288
  // adds). grad_weight reads grad_out 288 and input 384, writes weight 108, columns 1944 twice;
  // the sum reads grad_out 288 and writes 4.
  expect_cost(count_cost([&] { out.backward(grad); }), 15552 + 288, (288 + 384 + 108 + 2 * 1944 + 288 + 4) * kF32);
  // grad_input alone, by its rule: the same GEMM, through weight 108 and grad_input 384.
  const OpCost input = cost_of(OpKind::kConv2dInputGrad, Conv2dAttrs{}, {grad, w}, {empty({2, 3, 8, 8})});
  EXPECT_DOUBLE_EQ(input.flops, 15552);
  EXPECT_DOUBLE_EQ(input.bytes, (288 + 108 + 384 + 2 * 1944) * kF32);
}

TEST(Cost, Elementwise) {
  const Tensor a = randn({4, 5}), b = randn({5}), x = randn({10});
  // Broadcast add: 20 adds; reads 20 + 5, writes 20.
  expect_cost(count_cost([&] { (void)add(a, b); }), 20, (20 + 5 + 20) * kF32);
  // exp: the primitive table's 8 FLOPs per element.
  expect_cost(count_cost([&] { (void)exp(x); }), 80, 20 * kF32);
  // A scalar operand is a 0-dim tensor, filled (one element written) and read once.
  expect_cost(count_cost([&] { (void)mul(x, 2.0); }), 10, (10 + 1 + 10) * kF32 + 1 * kF32);
}

TEST(Cost, Reductions) {
  const Tensor x = randn({6, 7});
  // 42 inputs, one add each; reads 42, writes 6.
  expect_cost(count_cost([&] { (void)sum(x, {1}); }), 42, (42 + 6) * kF32);
  // mean is a composite: the sum, then one divide per output by a filled 0-dim scalar.
  expect_cost(count_cost([&] { (void)mean(x, {1}); }), 42 + 6, (42 + 6) * kF32 + (6 + 1 + 6) * kF32 + 1 * kF32);
  expect_cost(count_cost([&] { (void)amax(x, {0}); }), 42, (42 + 7) * kF32);
}

TEST(Cost, SoftmaxAndLogSoftmax) {
  const Tensor x = randn({3, 10});
  // 5 FLOPs per element (max, subtract, exp, sum, normalize); reads and writes 30.
  expect_cost(count_cost([&] { (void)softmax(x, 1); }), 150, 60 * kF32);
  expect_cost(count_cost([&] { (void)log_softmax(x, 1); }), 150, 60 * kF32);
  // The fused backward: 4 per element; grad and output read, input gradient written.
  const OpCost backward = cost_of(OpKind::kSoftmaxGrad, DimAttrs{1}, {x, x}, {x});
  EXPECT_DOUBLE_EQ(backward.flops, 120);
  EXPECT_DOUBLE_EQ(backward.bytes, 90 * kF32);
}

TEST(Cost, Pooling) {
  const Tensor x = randn({1, 2, 4, 4});
  // 2 x 2 windows: 8 outputs of 4 compares each; reads 32, writes 8, and 8 int64 indices when the
  // backward will need them.
  expect_cost(count_cost([&] { (void)max_pool2d(x, {2, 2}); }), 32, (32 + 8) * kF32);
  const Tensor xg = x.detach().requires_grad_();
  expect_cost(count_cost([&] { (void)max_pool2d(xg, {2, 2}); }), 32, (32 + 8) * kF32 + 8 * 8);
  // Average: 4 adds and a divide per output.
  expect_cost(count_cost([&] { (void)avg_pool2d(x, {2, 2}); }), 8 * 5, (32 + 8) * kF32);
}

TEST(Cost, LayerNorm) {
  const Tensor x = randn({4, 8}), w = randn({8}), b = randn({8});
  // Per element: mean 1, variance 3, normalize 2, weight 1, bias 1; reads 32 and writes 32, reads
  // the 16 parameters, saves mean and rstd per row (8).
  expect_cost(count_cost([&] { (void)layer_norm(x, {8}, w, b); }), 8 * 32, (64 + 16 + 8) * kF32);
}

TEST(Cost, CrossEntropyIsItsPrimitivesAndItsReduction) {
  const Tensor logits = randn({4, 10}), targets = from_vector(std::vector<int64_t>{1, 0, 9, 3});
  profiler::Profiler prof;
  (void)cross_entropy(logits, targets);
  prof.stop();
  int composites = 0;
  double flops = 0, bytes = 0;
  for (const profiler::Event& e : prof.events()) {
    if (e.kind != profiler::EventKind::kOp) continue;
    if (e.name == "cross_entropy") {
      ++composites;
      EXPECT_FALSE(e.has_cost) << "a composite costs what its primitives cost";
    }
    if (e.name == "cross_entropy_forward") {
      // log_softmax's 5 FLOPs per score and one per row; reads scores and targets (int64), writes
      // the per-row losses and log-sum-exps.
      EXPECT_DOUBLE_EQ(e.flops, 5 * 40 + 4);
      EXPECT_DOUBLE_EQ(e.bytes, (40 + 4 + 4) * kF32 + 4 * 8);
    }
    if (e.has_cost) {
      EXPECT_TRUE(e.counted) << e.name << " is a primitive inside a composite without a cost";
      flops += e.flops;
      bytes += e.bytes;
    }
  }
  EXPECT_EQ(composites, 1);
  const profiler::Summary summary = prof.summary();
  EXPECT_DOUBLE_EQ(summary.flops, flops);
  EXPECT_DOUBLE_EQ(summary.bytes, bytes);
  // The backward primitive: log_softmax's FLOPs plus 2 per score; scores, targets, the log-sum-exps
  // and the one scale read, the gradient written.
  const OpCost backward =
      cost_of(OpKind::kCrossEntropyGrad, ClassLossAttrs{}, {logits, targets, zeros({4}), ones({1})}, {empty({4, 10})});
  EXPECT_DOUBLE_EQ(backward.flops, 7 * 40);
  EXPECT_DOUBLE_EQ(backward.bytes, (2 * 40 + 4 + 1) * kF32 + 4 * 8);
}

TEST(Cost, Optimizers) {
  Tensor p = randn({10}).requires_grad_();
  p.set_grad(randn({10}));
  {
    optim::SGD sgd({p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    // 2 (p - lr g) + 3 (momentum buffer) per element; param read + written, grad read, buffer read + written.
    expect_cost(count_cost([&] { sgd.step(); }), 5 * 10, (3 + 2) * 10 * kF32);
  }
  {
    optim::Adam adam({p}, optim::AdamOptions{.lr = 1e-3});
    adam.step();  // the first step also fills the state with zeros
    // 13 per element; two state buffers.
    expect_cost(count_cost([&] { adam.step(); }), 13 * 10, (3 + 4) * 10 * kF32);
  }
  {
    optim::AdamW adamw({p}, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.01});
    adamw.step();
    expect_cost(count_cost([&] { adamw.step(); }), 14 * 10, (3 + 4) * 10 * kF32);
  }
}

// Composites and views are counted through the primitives they run (every primitive having a rule
// is OpCoverage.EveryPrimitiveHasACostRule): a rule of their own would count their work twice.
TEST(Cost, NoOpButAPrimitiveHasARule) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind kind = static_cast<OpKind>(i);
    if (is_primitive(kind)) continue;
    EXPECT_EQ(op_rules().cost(kind), nullptr) << op_name(kind);
  }
}

}  // namespace
}  // namespace ember

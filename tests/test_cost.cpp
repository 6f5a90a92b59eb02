// Cost rules (src/ops/cost.cpp) against FLOPs and bytes computed by hand, both directly and as the
// profiler sees them when the ops run (profiler::count_cost sums each call's cost once).
#include <gtest/gtest.h>

#include <vector>

#include "ember/ember.h"
#include "ember/nn/functional.h"
#include "ember/profiler.h"
#include "ops/cost.h"

namespace ember {
namespace {

namespace F = nn::functional;
using profiler::CostTotals;
using profiler::count_cost;

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

TEST(Cost, Conv2dForward) {
  const Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}), bias = randn({4});
  // 6 x 6 outputs (P = 36) per (image, out channel), each a dot product of K = 3 * 3 * 3 = 27:
  // 2 * N * C_out * P * K = 2 * 2 * 4 * 36 * 27 = 15552, plus N * C_out * P = 288 bias adds.
  // Bytes: input 384 + weight 108 + output 288 + bias 4 floats, and the column buffer of
  // N * K * P = 1944 floats written and read once.
  const double elements = 384 + 108 + 288 + 4 + 2 * 1944;
  expect_cost(count_cost([&] { (void)F::conv2d(x, w, bias); }), 15552 + 288, elements * kF32);
}

TEST(Cost, Conv2dBackwardNode) {
  ConvShape s;
  s.batch = 2;
  s.in_channels = 3;
  s.out_channels = 4;
  s.in_height = s.in_width = 8;
  s.kernel_h = s.kernel_w = 3;
  s.out_height = s.out_width = 6;
  // Data input (no grad): grad_weight (one GEMM, 15552 FLOPs) and grad_bias (288 adds).
  // grad_weight reads grad_out 288 and input 384, writes weight 108, columns 1944 twice;
  // grad_bias reads grad_out 288 and writes 4.
  const OpCost cost = conv2d_backward_cost(s, false, true, true, kFloat32);
  EXPECT_DOUBLE_EQ(cost.flops, 15552 + 288);
  EXPECT_DOUBLE_EQ(cost.bytes, (288 + 384 + 108 + 2 * 1944 + 288 + 4) * kF32);

  // The same from the node's recorded inputs, as the autograd engine asks for it.
  const Shape in{2, 3, 8, 8}, weight{4, 3, 3, 3}, bias{4};
  const std::vector<NodeOperand> operands = {
      {&in, kFloat32, false}, {&weight, kFloat32, true}, {&bias, kFloat32, true}};
  const std::optional<OpCost> node = backward_cost("conv2d", empty({2, 4, 6, 6}), operands);
  ASSERT_TRUE(node.has_value());
  EXPECT_DOUBLE_EQ(node->flops, cost.flops);
  EXPECT_DOUBLE_EQ(node->bytes, cost.bytes);
  // A node whose vjp is made of ops has no rule of its own.
  EXPECT_FALSE(backward_cost("mul", empty({2}), operands).has_value());
}

TEST(Cost, Elementwise) {
  const Tensor a = randn({4, 5}), b = randn({5}), x = randn({10});
  // Broadcast add: 20 adds; reads 20 + 5, writes 20.
  expect_cost(count_cost([&] { (void)add(a, b); }), 20, (20 + 5 + 20) * kF32);
  // exp: the primitive table's 8 FLOPs per element.
  expect_cost(count_cost([&] { (void)exp(x); }), 80, 20 * kF32);
  // A scalar operand is a 0-dim tensor: one element read.
  expect_cost(count_cost([&] { (void)mul(x, 2.0); }), 10, (10 + 1 + 10) * kF32);
}

TEST(Cost, Reductions) {
  const Tensor x = randn({6, 7});
  // 42 inputs, one add each; reads 42, writes 6.
  expect_cost(count_cost([&] { (void)sum(x, {1}); }), 42, (42 + 6) * kF32);
  // mean is sum then one divide per output: the composite has no rule of its own, its parts count.
  expect_cost(count_cost([&] { (void)mean(x, {1}); }), 42 + 6, (42 + 6) * kF32 + (6 + 1 + 6) * kF32);
  expect_cost(count_cost([&] { (void)amax(x, {0}); }), 42, (42 + 7) * kF32);
}

TEST(Cost, SoftmaxAndLogSoftmax) {
  const Tensor x = randn({3, 10});
  // 5 FLOPs per element (max, subtract, exp, sum, normalize); reads and writes 30.
  expect_cost(count_cost([&] { (void)softmax(x, 1); }), 150, 60 * kF32);
  expect_cost(count_cost([&] { (void)log_softmax(x, 1); }), 150, 60 * kF32);
}

TEST(Cost, Pooling) {
  const Tensor x = randn({1, 2, 4, 4});
  // 2 x 2 windows: 8 outputs of 4 compares each; reads 32, writes 8 and 8 int64 indices.
  expect_cost(count_cost([&] { (void)F::max_pool2d(x, {2, 2}); }), 32, (32 + 8) * kF32 + 8 * 8);
  // Average: 4 adds and a divide per output.
  expect_cost(count_cost([&] { (void)F::avg_pool2d(x, {2, 2}); }), 8 * 5, (32 + 8) * kF32);
}

TEST(Cost, LayerNorm) {
  const Tensor x = randn({4, 8}), w = randn({8}), b = randn({8});
  // Per element: mean 1, variance 3, normalize 2, weight 1, bias 1; reads 32 and writes 32, reads
  // the 16 parameters, saves mean and rstd per row (8).
  expect_cost(count_cost([&] { (void)F::layer_norm(x, {8}, w, b); }), 8 * 32, (64 + 16 + 8) * kF32);
}

TEST(Cost, CrossEntropyCountsItsNestedReductionOnce) {
  const Tensor logits = randn({4, 10}), targets = from_vector(std::vector<int64_t>{1, 0, 9, 3});
  // log_softmax's 5 FLOPs per score and one per row for the mean; reads scores and targets (int64),
  // writes the per-row losses. The mean over rows runs as a nested op: not counted again.
  expect_cost(count_cost([&] { (void)F::cross_entropy(logits, targets); }), 5 * 40 + 4, (40 + 4) * kF32 + 4 * 8);
  const OpCost backward = cross_entropy_backward_cost(4, 10, kFloat32);
  EXPECT_DOUBLE_EQ(backward.flops, 7 * 40);
  EXPECT_DOUBLE_EQ(backward.bytes, (2 * 40 + 4) * kF32 + 4 * 8);
}

TEST(Cost, NestedOpsAreCountedOnceInTheTrace) {
  const Tensor logits = randn({4, 10}), targets = from_vector(std::vector<int64_t>{1, 0, 9, 3});
  profiler::Profiler prof;
  (void)F::cross_entropy(logits, targets);
  prof.stop();
  int outer = 0, nested_with_cost = 0;
  for (const profiler::Event& e : prof.events()) {
    if (e.kind != profiler::EventKind::kOp) continue;
    if (e.name == "cross_entropy") {
      ++outer;
      EXPECT_TRUE(e.counted);
    } else if (e.has_cost) {
      ++nested_with_cost;
      EXPECT_FALSE(e.counted) << e.name << " runs inside cross_entropy";
      EXPECT_GE(e.parent, 0);
    }
  }
  EXPECT_EQ(outer, 1);
  EXPECT_GE(nested_with_cost, 1);  // the mean over rows (a sum and a divide)
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
    // 13 per element; two state buffers.
    expect_cost(count_cost([&] { adam.step(); }), 13 * 10, (3 + 4) * 10 * kF32);
  }
  {
    optim::AdamW adamw({p}, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.01});
    expect_cost(count_cost([&] { adamw.step(); }), 14 * 10, (3 + 4) * 10 * kF32);
  }
}

TEST(Cost, MatmulRuleMatchesTheFormula) {
  // The shape-only rule: B counted per batch (used where no operands are at hand).
  const OpCost mm = matmul_cost(2, 3, 4, 5, kFloat32);
  EXPECT_DOUBLE_EQ(mm.flops, 2.0 * 2 * 3 * 4 * 5);
  EXPECT_DOUBLE_EQ(mm.bytes, 2 * kF32 * (3 * 5 + 5 * 4 + 3 * 4));
  const OpCost f64 = linear_cost(3, 5, 7, false, kFloat64);
  EXPECT_DOUBLE_EQ(f64.flops, 2.0 * 3 * 5 * 7);
  EXPECT_DOUBLE_EQ(f64.bytes, 8.0 * (15 + 35 + 21));
}

}  // namespace
}  // namespace ember

// The graph passes on small traced graphs, each against the graph it should leave, and a property
// test compiling random elementwise/broadcast/reduction DAGs against eager.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/models/mnist.h"
#include "ember/optim/sgd.h"
#include "ember/profiler.h"
#include "graph/executor.h"
#include "graph/fused.h"
#include "graph/passes.h"
#include "graph/trace.h"
#include "test_util.h"

namespace ember::graph {
namespace {

// The node lines of a dump (buffers left out), indentation trimmed to one level per fused body.
std::string nodes(const Graph& g) {
  std::istringstream in(g.dump());
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("  ", 0) == 0) out += line.substr(2) + "\n";
  }
  return out;
}

Trace trace_of(const std::vector<Tensor>& args, const std::function<Tensor()>& f) {
  return trace(args, [&] { return std::vector<Tensor>{f()}; });
}

TEST(GraphPasses, TraceRecordsKernelsNotViews) {
  const Tensor x = randn({4, 8});
  Trace t = trace_of({x}, [&] { return x.t().reshape({32}).exp(); });
  // The transpose and the reshape are views: the copy that makes the reshape contiguous is the
  // only kernel besides exp.
  EXPECT_EQ(nodes(t.graph),
            "%1 = copy(%0/[1, 8]) float32[8, 4]\n"
            "%2 = exp(%1) float32[32]\n"
            "return %2\n");
  EXPECT_EQ(t.graph.buffers[0].kind, BufferKind::kArgument);
  EXPECT_EQ(t.graph.buffers[2].kind, BufferKind::kOutput);
}

TEST(GraphPasses, FoldConstantsRunsKernelsOfConstantsOnce) {
  const Tensor x = randn({8});
  const Tensor w = ones({8});
  Trace t = trace_of({x}, [&] { return x + w * 2; });
  PassStats s;
  fold_constants(t.graph, s);
  EXPECT_EQ(s.folded, 2);  // the scalar 2, then w * 2
  EXPECT_EQ(nodes(t.graph), "%4 = add(%0, %3) float32[8]\nreturn %4\n");
  EXPECT_EQ(t.graph.buffers[3].kind, BufferKind::kConstant);
  for (const Buffer& b : t.graph.buffers) {
    // w, captured: checked for writes before each call.
    if (b.kind == BufferKind::kState) {
      EXPECT_TRUE(b.guard_version);
    }
  }
}

TEST(GraphPasses, SimplifyDropsIdentitiesAndSameDtypeCopies) {
  const Tensor x = randn({8});
  Trace t = trace_of({x}, [&] { return ((x.exp() * 1.0 + 0.0) / 1.0).to(kFloat32).clone().neg(); });
  PassStats s;
  fold_constants(t.graph, s);
  simplify(t.graph, s);
  dce(t.graph, s);
  EXPECT_EQ(s.simplified, 4);  // * 1, + 0, / 1, the clone
  EXPECT_EQ(nodes(t.graph), "%1 = exp(%0) float32[8]\n%9 = neg(%1) float32[8]\nreturn %9\n");
}

TEST(GraphPasses, CseReusesRepeatedKernelsUnlessAnInputWasWrittenBetween) {
  const Tensor x = randn({8});
  Trace t = trace_of({x}, [&] { return x.sigmoid() + x.sigmoid(); });
  PassStats s;
  cse(t.graph, s);
  EXPECT_EQ(s.cse, 1);
  EXPECT_EQ(nodes(t.graph), "%1 = sigmoid(%0) float32[8]\n%3 = add(%1, %1) float32[8]\nreturn %3\n");

  Tensor y = randn({8});
  Trace u = trace_of({x}, [&] {
    Tensor a = x.sigmoid();
    Tensor tmp = x.clone();
    tmp.add_(1);
    Tensor b = tmp.sigmoid();
    tmp.add_(1);  // tmp changed: its next sigmoid is not the one before
    return a + b + tmp.sigmoid();
  });
  PassStats s2;
  cse(u.graph, s2);
  EXPECT_EQ(s2.cse, 1);  // the second scalar 1 only: the three sigmoids stay
  const std::string text = nodes(u.graph);
  size_t sigmoids = 0;
  for (size_t at = text.find("sigmoid"); at != std::string::npos; at = text.find("sigmoid", at + 1)) ++sigmoids;
  EXPECT_EQ(sigmoids, 3u);
}

TEST(GraphPasses, DceDropsWhatNothingReads) {
  const Tensor x = randn({8});
  Trace t = trace_of({x}, [&] {
    Tensor unused = x.exp().log();
    return x.neg();
  });
  PassStats s;
  dce(t.graph, s);
  EXPECT_EQ(s.dead, 2);
  EXPECT_EQ(nodes(t.graph), "%3 = neg(%0) float32[8]\nreturn %3\n");
}

TEST(GraphPasses, EpilogueFusionFoldsBiasReluAndResidualIntoTheMatmul) {
  const Tensor x = randn({4, 8}), w = randn({8, 16}), b = randn({16}), r = randn({4, 16});
  Trace t = trace_of({x, r}, [&] { return relu(matmul(x, w) + b) + r; });
  PassStats s;
  fuse_epilogues(t.graph, s);
  EXPECT_EQ(s.epilogues, 3);
  EXPECT_EQ(nodes(t.graph), "%7 = matmul(%0, %2, %4, %1) float32[4, 16]\nreturn %7\n");
  const auto& attrs = std::get<MatmulAttrs>(t.graph.nodes[0].attrs);
  EXPECT_EQ(attrs.activation, Activation::kRelu);
  // A GELU stays a pass of its own (faster than in the epilogue here); the bias still fuses.
  Trace u = trace_of({x, r}, [&] { return gelu(matmul(x, w) + b) + r; });
  PassStats su;
  fuse_epilogues(u.graph, su);
  EXPECT_EQ(su.epilogues, 1);
  EXPECT_THAT(nodes(u.graph), ::testing::HasSubstr("gelu("));
}

// GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt(2))), in both association orders, with
// scalars or with captured 0-d constants (an imported model's initializers), becomes one gelu.
TEST(GraphPasses, GeluErfChainsBecomeOneGelu) {
  const Tensor x = randn({4, 8});
  const Tensor sqrt2 = scalar_tensor(std::sqrt(2.0), kFloat32), half = scalar_tensor(0.5, kFloat32),
               one = scalar_tensor(1.0, kFloat32);
  autograd::NoGradGuard no_grad;
  const std::vector<std::function<Tensor()>> forms = {
      [&] { return x * (erf(x / std::sqrt(2.0)) + 1.0) * 0.5; },
      [&] { return (x * 0.5) * (1.0 + erf(x * (1.0 / std::sqrt(2.0)))); },
      [&] { return (half * x) * (erf(x / sqrt2) + one); },
  };
  for (size_t i = 0; i < forms.size(); ++i) {
    Trace t = trace_of({x}, forms[i]);
    PassStats s;
    fold_constants(t.graph, s);
    fuse_gelu(t.graph, s);
    EXPECT_EQ(s.gelus, 1) << "form " << i;
    const std::string text = nodes(t.graph);
    EXPECT_THAT(text, ::testing::MatchesRegex("%[0-9]+ = gelu\\(%0\\) float32\\[4, 8\\]\nreturn %[0-9]+\n")) << i;
  }
  // Compiled, the result is gelu's (to erf_f32's accuracy against the chain's own erf).
  auto f = compile([](const Tensor& a) { return a * 0.5 * (erf(a / std::sqrt(2.0)) + 1.0); });
  const Tensor got = f(x);
  EXPECT_EQ(f.stats().gelus, 1);
  EXPECT_LE((got - gelu(x)).abs().max().item<double>(), 1e-6);
}

TEST(GraphPasses, GeluErfChainsStayWhenAPartIsUsedOrTheConstantsDiffer) {
  const Tensor x = randn({4, 8});
  autograd::NoGradGuard no_grad;
  // The erf is also returned: the chain is not the GELU alone.
  Trace used = trace(std::vector<Tensor>{x}, [&] {
    const Tensor e = erf(x / std::sqrt(2.0));
    return std::vector<Tensor>{x * (e + 1.0) * 0.5, e};
  });
  // Not GELU: x / 1.5 inside, 0.25 outside.
  Trace other = trace_of({x}, [&] { return x * (erf(x / 1.5) + 1.0) * 0.5; });
  Trace quarter = trace_of({x}, [&] { return x * (erf(x / std::sqrt(2.0)) + 1.0) * 0.25; });
  for (Trace* t : {&used, &other, &quarter}) {
    PassStats s;
    fold_constants(t->graph, s);
    fuse_gelu(t->graph, s);
    EXPECT_EQ(s.gelus, 0);
    EXPECT_THAT(nodes(t->graph), ::testing::HasSubstr("erf("));
  }
}

TEST(GraphPasses, SigmoidProductsBecomeSilu) {
  auto rewritten = [](const Tensor& x, const std::function<Tensor()>& f) {
    Trace t = trace_of({x}, f);
    PassStats st;
    fuse_silu(t.graph, st);
    return std::pair{st.silus, nodes(t.graph)};
  };
  const Tensor x = randn({37, 20}), h = x.to(kBFloat16);
  EXPECT_EQ(rewritten(x, [&] { return x * sigmoid(x); }).second, "%2 = silu(%0) float32[37, 20]\nreturn %2\n");
  EXPECT_EQ(rewritten(x, [&] { return sigmoid(x) * x + 1.0; }).first, 1);
  const Tensor d = x.to(kFloat64);
  EXPECT_EQ(rewritten(d, [&] { return d * sigmoid(d); }).first, 1);
  // A 16-bit sigmoid rounds before the product; silu rounds once.
  EXPECT_EQ(rewritten(h, [&] { return h * sigmoid(h); }).first, 0);
  // The sigmoid is read elsewhere too, or multiplies something other than its input.
  EXPECT_EQ(rewritten(x,
                      [&] {
                        const Tensor s = sigmoid(x);
                        return x * s + s.sum();
                      })
                .first,
            0);
  EXPECT_EQ(rewritten(x, [&] { return (x + 1.0) * sigmoid(x); }).first, 0);
  // Compiled, the same bits as eager, tails included.
  auto f = compile([](const Tensor& a, const Tensor& b) { return a * sigmoid(a) + b; });
  for (const int64_t n : {1, 15, 16, 17, 1000}) {
    const Tensor a = randn({n}) * 8.0, b = randn({n});
    (void)f(a, b);
    EXPECT_TRUE(test_util::bitwise_equal(f(a, b), a * sigmoid(a) + b)) << n;
  }
  EXPECT_EQ(f.stats().silus, 1);
}

TEST(GraphPasses, ElementwiseFusionGroupsChainsAndKeepsOnlyTheirResults) {
  const Tensor x = randn({64, 32}), y = randn({32});
  Trace t = trace_of({x, y}, [&] { return (x * x.sigmoid() + y).exp(); });
  PassStats s;
  fuse_elementwise(t.graph, s);
  EXPECT_EQ(s.fused_groups, 1);
  EXPECT_EQ(s.fused_nodes, 4);
  EXPECT_EQ(nodes(t.graph),
            "%5 = fused(sigmoid, mul, add, exp)(%0, %1/[0, 1]) float32[64, 32]\n"
            "    %2 = sigmoid(%0) float32[64, 32]\n"
            "    %3 = mul(%0, %2) float32[64, 32]\n"
            "    %4 = add(%3, %1/[0, 1]) float32[64, 32]\n"
            "    %5 = exp(%4) float32[64, 32]\n"
            "return %5\n");
  EXPECT_EQ(t.graph.buffers[2].kind, BufferKind::kScratch);
  EXPECT_EQ(t.graph.buffers[5].kind, BufferKind::kOutput);
}

TEST(GraphPasses, AttentionPatternsBecomeTheFlashKernel) {
  const Tensor q = randn({2, 3, 16, 8}), k = randn({2, 3, 16, 8}), v = randn({2, 3, 16, 8});
  const Tensor causal = ones({16, 16}, kBool).triu(1);
  const Tensor holes = logical_and(rand({16, 16}) < 0.3, logical_not(ones({16, 16}, kBool).tril(0).triu(0)));
  Tensor empty_row = zeros({16, 16}, kBool);
  empty_row.select(0, 3).fill_(true);
  // BERT's additive mask, (batch, 1, 1, keys), and a scale held in a captured 0-d tensor (what an
  // imported ONNX model's constants are).
  const Tensor additive = (rand({2, 1, 1, 16}) < 0.25).to(kFloat32) * -1e9;
  const Tensor quarter = scalar_tensor(0.25, kFloat32);
  autograd::NoGradGuard no_grad;
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f;
    int fused;
    bool is_causal;
  };
  const std::vector<Case> cases{
      {"plain",
       [](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(matmul(a, b.transpose(-2, -1)) / 4.0, -1), c);
       },
       1, false},
      {"causal",
       [&](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax((matmul(a, b.transpose(-2, -1)) * 0.25).masked_fill(causal, -INFINITY), -1), c);
       },
       1, true},
      {"mask",
       [&](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax((matmul(a, b.transpose(-2, -1)) * 0.25).masked_fill(holes, -INFINITY), -1), c);
       },
       1, false},
      {"additive",
       [&](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(matmul(a, b.transpose(-2, -1)) * 0.25 + additive, -1), c);
       },
       1, false},
      {"captured scale",
       [&](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax(matmul(a, b.transpose(-2, -1)) * quarter, -1), c);
       },
       1, false},
      // A fully masked row is NaN through softmax and zeros through the kernel: not rewritten.
      {"empty row",
       [&](const Tensor& a, const Tensor& b, const Tensor& c) {
         return matmul(softmax((matmul(a, b.transpose(-2, -1)) * 0.25).masked_fill(empty_row, -INFINITY), -1), c);
       },
       0, false},
  };
  for (const Case& c : cases) {
    auto f = compile(c.f);
    f(q, k, v);
    const Tensor got = f(q, k, v), want = c.f(q, k, v);
    EXPECT_EQ(f.stats().attention, c.fused) << c.name;
    const Tensor finite = logical_not(isnan(want));
    EXPECT_LE((got - want).abs().masked_fill(logical_not(finite), 0.0).max().item<double>(), 1e-5) << c.name;
    EXPECT_TRUE(isnan(got).eq(isnan(want)).all().item<bool>()) << c.name;
    if (c.fused == 1) {
      EXPECT_THAT(f.graph().dump(), ::testing::HasSubstr("scaled_dot_product_attention")) << c.name;
    }
    // The pass itself: a causal mask becomes the flag, any other keeps a mask operand.
    Trace t = trace_of({q, k, v}, [&] { return c.f(q, k, v); });
    PassStats s;
    fold_constants(t.graph, s);
    dce(t.graph, s);
    fuse_attention(t.graph, s);
    if (c.fused == 1) {
      ASSERT_EQ(t.graph.nodes.size(), 1u) << nodes(t.graph);
      const auto& attrs = std::get<AttentionAttrs>(t.graph.nodes[0].attrs);
      EXPECT_EQ(attrs.is_causal, c.is_causal) << c.name;
      EXPECT_EQ(attrs.scale, 0.25) << c.name;
      EXPECT_EQ(t.graph.nodes[0].inputs[3].defined(),
                std::string(c.name) == "mask" || std::string(c.name) == "additive")
          << c.name;
    }
  }
}

TEST(GraphPasses, SoftmaxJoinsAGroupWhenItsRowsFitATile) {
  const Tensor s = randn({2, 4, 64, 64});
  const Tensor causal = ones({64, 64}, kBool).triu(1);
  Trace t = trace_of({s}, [&] { return softmax((s * 0.125).masked_fill(causal, -INFINITY), -1) * 2.0; });
  PassStats st;
  fold_constants(t.graph, st);
  fuse_elementwise(t.graph, st);
  EXPECT_EQ(st.fused_groups, 1);
  EXPECT_THAT(nodes(t.graph), ::testing::HasSubstr("fused(mul, where, softmax, mul)"));
  // Rows longer than a tile stay a kernel of their own.
  const Tensor wide = randn({4, 2 * kFusionTileElements});
  Trace u = trace_of({wide}, [&] { return softmax(wide * 0.5, -1) + 1.0; });
  PassStats su;
  fold_constants(u.graph, su);
  fuse_elementwise(u.graph, su);
  EXPECT_EQ(su.fused_groups, 0);
  // Compiled, the group gives the unfused kernels' results bit for bit.
  auto f = compile([&](const Tensor& x) { return softmax((x * 0.125).masked_fill(causal, -INFINITY), -1) * 2.0; });
  f(s);
  const Tensor want = softmax((s * 0.125).masked_fill(causal, -INFINITY), -1) * 2.0;
  EXPECT_EQ((f(s) - want).abs().max().item<double>(), 0.0);
  EXPECT_EQ(f.stats().fused_groups, 1);
}

// Layer norm written with primitives: both row sums, the values over the reduced rows and the
// elementwise kernels over x become one group, whose reduced values live in scratch.
TEST(GraphPasses, RowReductionsJoinTheirGroup) {
  const Tensor x = randn({64, 96}), w = randn({96});
  auto layer_norm = [&] {
    const Tensor centered = x - mean(x, {1}, true);
    return centered * rsqrt(mean(centered * centered, {1}, true) + 1e-5) * w;
  };
  Trace t = trace_of({x}, layer_norm);
  PassStats st;
  fold_constants(t.graph, st);
  simplify(t.graph, st);
  fuse_elementwise(t.graph, st);
  EXPECT_EQ(st.fused_groups, 1);
  ASSERT_EQ(t.graph.nodes.size(), 1u) << nodes(t.graph);
  EXPECT_THAT(nodes(t.graph), ::testing::HasSubstr("fused(sum, div, sub, mul, sum, div, add, rsqrt, mul, mul)"));
  const Node& group = t.graph.nodes[0];
  EXPECT_EQ(group.outputs.size(), 1u);  // only the result leaves the group
  EXPECT_TRUE(FusedGroup(t.graph, group).strips());
  // Over a dim other than the last, or kept = false, a reduction stays a kernel of its own.
  Trace u = trace_of({x}, [&] { return (x - mean(x, {0}, true)) * 2.0; });
  PassStats su;
  fold_constants(u.graph, su);
  fuse_elementwise(u.graph, su);
  EXPECT_THAT(nodes(u.graph), ::testing::Not(::testing::HasSubstr("fused(sum")));
  Trace v = trace_of({x}, [&] { return (x * 2.0).sum({1}) + 1.0; });
  PassStats sv;
  fold_constants(v.graph, sv);
  fuse_elementwise(v.graph, sv);
  EXPECT_THAT(nodes(v.graph), ::testing::Not(::testing::HasSubstr("sum,")));
  // Compiled, it gives eager's bits.
  auto f = compile(layer_norm);
  f();
  EXPECT_TRUE(test_util::bitwise_equal(f(), layer_norm()));
  EXPECT_EQ(f.stats().fused_groups, 1);
}

// Attention's probabilities, q @ k^T then scale, mask and softmax: the batched product runs head
// by head with the group that reads it (Note [head interleaving] in graph/executor.h), bit for bit
// the unfused kernels, with broadcast batch dims, 3-d and 4-d, 1 and 2 threads.
TEST(GraphPasses, BatchedProductsRunHeadByHeadWithTheirSoftmax) {
  test_util::ThreadCountGuard guard;
  struct Case {
    Shape q, k;
    int64_t length;
  };
  const std::vector<Case> cases = {{{4, 8, 64, 16}, {4, 8, 64, 16}, 64},
                                   {{2, 3, 37, 8}, {1, 3, 37, 8}, 37},
                                   {{5, 33, 24}, {5, 33, 24}, 33},
                                   {{1, 1, 9, 4}, {1, 1, 9, 4}, 9},
                                   {{3, 2, 130, 64}, {3, 2, 130, 64}, 130}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      const Tensor q = randn(c.q), k = randn(c.k);
      const Tensor mask = ones({c.length, c.length}, kBool).triu(1);
      auto body = [&](const Tensor& a, const Tensor& b) {
        return softmax(matmul(a, b.transpose(-2, -1)).mul(0.125).masked_fill(mask, -INFINITY), -1);
      };
      auto f = compile(body);
      (void)f(q, k);
      EXPECT_TRUE(test_util::bitwise_equal(f(q, k), body(q, k))) << c.q << " " << threads;
      EXPECT_EQ(f.stats().interleaved, 1) << c.q << "\n" << f.graph().dump();
      EXPECT_EQ(f.stats().masked_products, 1) << c.q;  // the causal mask's blocks are left out
      EXPECT_EQ(f.stats().arena_bytes, 0) << c.q;      // the scores take no memory of the plan's
      if (threads == 2 && c.q == cases[0].q) {         // observers see the product whole, and the same bits
        profiler::Profiler prof;
        const Tensor observed = f(q, k);
        prof.stop();
        EXPECT_TRUE(test_util::bitwise_equal(observed, body(q, k)));
        int products = 0;
        for (const profiler::Event& e : prof.events()) products += e.name == "matmul" ? 1 : 0;
        EXPECT_EQ(products, 1);
      }
    }
  }
  // A product something else reads too is left whole.
  const Tensor q = randn({2, 16, 8});
  auto g = compile([](const Tensor& a) {
    const Tensor scores = matmul(a, a.transpose(-2, -1));
    return softmax(scores * 2.0, -1) + scores.sum();
  });
  (void)g(q);
  EXPECT_EQ(g.stats().interleaved, 0);
}

// Note [masked products] in graph/executor.h: where a bool mask (an argument, read again on every
// call) discards the product's values, the blocks it covers are not multiplied, and the results
// keep eager's bits. Causal, random, padding (broadcast over heads and rows) and wholly masked rows
// (NaN after the softmax); the mask set or clear where it discards; a scale the GEMM cannot take as
// its alpha (k > 256: a member between the product and the select); float64; sizes across tile
// edges; the mask changed in place between calls; 1 and 2 threads.
TEST(GraphPasses, MaskedBlocksOfAProductAreLeftOutBitForBit) {
  test_util::ThreadCountGuard guard;
  const auto computed_share = [](const std::string& explained) {
    const size_t at = explained.find("the last call computed ");
    return at == std::string::npos ? -1 : std::stoi(explained.substr(at + 23));
  };
  struct Case {
    Shape q, k, mask;
    DType dtype;
  };
  const std::vector<Case> cases = {{{2, 3, 77, 40}, {2, 3, 131, 40}, {77, 131}, kFloat32},
                                   {{1, 2, 150, 300}, {1, 2, 150, 300}, {150, 150}, kFloat32},
                                   {{2, 2, 64, 16}, {2, 2, 96, 16}, {2, 1, 1, 96}, kFloat64}};
  const auto fill_where_set = [](const Tensor& q, const Tensor& k, const Tensor& m) {
    return softmax((matmul(q, k.transpose(-2, -1)) * 0.125).masked_fill(m, -INFINITY), -1);
  };
  const auto keep_where_set = [](const Tensor& q, const Tensor& k, const Tensor& m) {
    return softmax(where(m, matmul(q, k.transpose(-2, -1)) * 0.125, -INFINITY), -1);
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      const int64_t rows = c.q[c.q.size() - 2], cols = c.k[c.k.size() - 2];
      const Tensor q = randn(c.q, c.dtype), k = randn(c.k, c.dtype);
      // Masks of c.mask's shape, as the values where the product is discarded.
      std::vector<Tensor> discards = {rand(c.mask) < 0.5, zeros(c.mask, kBool)};
      if (c.mask.size() == 2) {
        discards.push_back(ones({rows, cols}, kBool).triu(1));
        Tensor late_rows = ones({rows, cols}, kBool).triu(1);
        late_rows.slice(0, 0, 5).fill_(true);  // the first rows wholly masked
        discards.push_back(late_rows);
      } else {
        Tensor padding = zeros(c.mask, kBool);
        padding.slice(0, 0, 1).slice(3, cols - 30, cols).fill_(true);  // the first sequence is shorter
        discards.push_back(padding);
      }
      for (bool keep : {false, true}) {
        const auto& body = keep ? keep_where_set : fill_where_set;
        auto f = compile(body);
        Tensor mask = keep ? !discards[0] : discards[0].clone();
        (void)f(q, k, mask);
        for (size_t i = 0; i < discards.size(); ++i) {
          mask.copy_(keep ? !discards[i] : discards[i]);  // the same storage, new values
          const Tensor got = f(q, k, mask);
          EXPECT_TRUE(test_util::bitwise_equal(got, body(q, k, mask)))
              << c.q << " " << c.dtype << " keep " << keep << " threads " << threads << "\n"
              << discards[i];
          // The share of the product computed: all of it where nothing is discarded; for a causal
          // or padding mask, at least what the mask keeps, and not much more (blocks of rows
          // share their columns).
          const int share = computed_share(f.explain());
          const double kept = 100 * (1 - discards[i].to(kFloat64).mean().item<double>());
          if (i == 1) {
            EXPECT_EQ(share, 100) << c.q;
          } else if (i == 2) {
            EXPECT_LT(share, 100) << c.q;
            EXPECT_GE(share, std::floor(kept)) << c.q;
            EXPECT_LE(share, kept + 30) << c.q << "\n" << f.explain();
          }
        }
        EXPECT_EQ(f.stats().masked_products, 1) << c.q << " keep " << keep << "\n" << f.graph().dump();
      }
    }
  }
  // A select whose both sides come from the product discards nothing: the product stays whole.
  const Tensor q = randn({2, 40, 16}), m = rand({40, 40}) < 0.5;
  auto both = compile([](const Tensor& a, const Tensor& mask) {
    const Tensor scores = matmul(a, a.transpose(-2, -1));
    return softmax(where(mask, scores * 2.0, scores), -1);
  });
  (void)both(q, m);
  EXPECT_TRUE(test_util::bitwise_equal(
      both(q, m), softmax(where(m, matmul(q, q.transpose(-2, -1)) * 2.0, matmul(q, q.transpose(-2, -1))), -1)));
  EXPECT_EQ(both.stats().interleaved, 1);
  EXPECT_EQ(both.stats().masked_products, 0);
}

TEST(GraphPasses, FusionStopsWhereAnotherKernelReadsAGroupValue) {
  const Tensor x = randn({16, 16});
  Trace t = trace_of({x}, [&] {
    Tensor a = x.exp() * 2;
    Tensor m = matmul(a, a);  // reads a: the group before it must have run
    return (m + 1).neg();
  });
  PassStats s;
  fold_constants(t.graph, s);
  fuse_elementwise(t.graph, s);
  EXPECT_EQ(s.fused_groups, 2);
  EXPECT_THAT(nodes(t.graph), ::testing::HasSubstr("fused(exp, mul)"));
  EXPECT_THAT(nodes(t.graph), ::testing::HasSubstr("matmul"));
  EXPECT_THAT(nodes(t.graph), ::testing::HasSubstr("fused(add, neg)"));
}

TEST(GraphPasses, InPlaceReuseAndTheArena) {
  const Tensor x = randn({1024});
  Trace t = trace_of({x}, [&] { return x.exp().neg().sigmoid().sum(); });
  PassStats s;
  reuse_in_place(t.graph, s);
  EXPECT_EQ(s.in_place, 2);  // neg over exp's result, sigmoid over that
  EXPECT_EQ(nodes(t.graph),
            "%1 = exp(%0) float32[1024]\n%1 = neg(%1) float32[1024]\n%1 = sigmoid(%1) float32[1024]\n"
            "%4 = sum(%1) float32[]\nreturn %4\n");
  const MemoryPlan plan = plan_memory(t.graph);
  EXPECT_EQ(plan.temp_bytes, 4096);
  EXPECT_EQ(plan.arena_bytes, 4096);
}

TEST(GraphPasses, MemoryPlanSharesTheArenaBetweenValuesThatAreNotAliveTogether) {
  const Tensor x = randn({256, 256});
  Trace t = trace_of({x}, [&] {
    Tensor a = matmul(x, x);  // 256 KiB each; a is dead once b exists
    Tensor b = matmul(a, x);
    Tensor c = matmul(b, x);
    return matmul(c, x).sum();
  });
  const MemoryPlan plan = plan_memory(t.graph);
  EXPECT_EQ(plan.temp_bytes, 4 * 256 * 256 * 4);   // a, b, c and c @ x
  EXPECT_EQ(plan.arena_bytes, 2 * 256 * 256 * 4);  // never more than two alive at once
  EXPECT_EQ(plan.live_bytes, 2 * 256 * 256 * 4);   // and the arena is that bound
}

// The bound the arena is measured against: the most bytes alive at one step (each rounded up to the
// arena's 64-byte alignment), here the three products while the last of them is computed.
TEST(GraphPasses, LiveBytesAreTheMostAliveAtOneStep) {
  const Tensor x = randn({64, 64}), y = randn({64, 32});
  Trace t = trace_of({x, y}, [&] {
    const Tensor a = matmul(x, x), b = matmul(x, y), c = matmul(a, x);  // 16, 8 and 16 KiB
    return (c.sum() + b.sum()).exp();
  });
  const MemoryPlan plan = plan_memory(t.graph);
  EXPECT_EQ(plan.temp_bytes, (2 * 64 * 64 + 64 * 32) * 4 + 3 * 4);  // and the three scalars
  EXPECT_GE(plan.arena_bytes, plan.live_bytes);
  EXPECT_EQ(plan.live_bytes, (2 * 64 * 64 + 64 * 32) * 4);  // a, b and c while c is computed
}

// Random DAGs of elementwise ops, broadcasts and reductions, compiled and eager.
TEST(GraphPasses, RandomDagsCompileToTheirEagerResults) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 300), cols = 1 + static_cast<int64_t>(rng() % 70);
    const int steps = 3 + static_cast<int>(rng() % 12);
    std::vector<uint32_t> program(static_cast<size_t>(steps) * 3);
    for (uint32_t& p : program) p = rng();
    auto f = [&](const Tensor& x, const Tensor& y, const Tensor& bias) {
      std::vector<Tensor> values{x, y};
      for (int s = 0; s < steps; ++s) {
        const Tensor& a = values[program[3 * s] % values.size()];
        const Tensor& b = values[program[3 * s + 1] % values.size()];
        Tensor v;
        switch (program[3 * s + 2] % 10) {
          case 0:
            v = a + b;
            break;
          case 1:
            v = a * b.sigmoid();
            break;
          case 2:
            v = a - bias;
            break;
          case 3:
            v = tanh(a) * 0.5 + 1.0;
            break;
          case 4:
            v = relu(a) + b * 2.0;
            break;
          case 5:
            v = a.sum({1}, true) * b;
            break;  // a reduction, broadcast back
          case 6:
            v = where(a > b, a, b);
            break;
          case 7:
            v = softmax(a, 1) + b;
            break;
          case 8:
            v = a.exp().clamp(std::nullopt, 10.0);
            break;
          default:
            v = a * 1.0 + 0.0;
            break;
        }
        values.push_back(v);
      }
      return std::vector<Tensor>{values.back(), values[values.size() / 2].sum()};
    };
    auto compiled = compile(f);
    for (int call = 0; call < 2; ++call) {
      const Tensor x = randn({rows, cols}), y = randn({rows, cols}), bias = randn({cols});
      const std::vector<Tensor> want = f(x, y, bias);
      const std::vector<Tensor> got = compiled(x, y, bias);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].shape(), want[i].shape()) << "trial " << trial;
        // The fused groups run the unfused kernels' code: the same bits. The sum of a fused group's
        // value is a reduction of its own, outside the group, over the same values.
        ASSERT_TRUE(test_util::bitwise_equal(got[i], want[i])) << "trial " << trial << " result " << i << "\n"
                                                               << compiled.graph().dump();
      }
    }
  }
}

// Note [register chains] in graph/fused.h: random runs of the ops that chain, each member reading the
// one before it with a row, a broadcast row, a scalar, or the value itself as its other operand, on
// either side, some ending in a row sum. Compiled (in element strips, and in strips of whole rows) they give
// eager's bits, with special values in the inputs, in float32 and float64, across vector tails. A NaN
// may carry another payload or sign: where an add or a multiply meets two NaNs, IEEE 754 leaves open
// which one the result keeps, and x86 keeps the first operand, whose order the C++ compiler chooses.
TEST(GraphPasses, RegisterChainsKeepTheirBits) {
  std::mt19937 rng(2026);
  using Unary = Tensor (*)(const Tensor&);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<Unary> unary{&neg, &abs, &sqrt, &rsqrt, &square, &relu};
  const std::vector<Binary> binary{&add, &sub, &mul, &div, &minimum, &maximum};
  const int64_t widths[] = {1, 3, 15, 16, 17, 63, 65, 129, 300, 1000};
  int chained = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const DType dtype = trial % 2 == 0 ? kFloat32 : kFloat64;
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 9), cols = widths[rng() % std::size(widths)];
    const bool row_sum = trial % 3 == 0;  // a row reduction first: strips of whole rows
    const int steps = 2 + static_cast<int>(rng() % 6);
    std::vector<uint32_t> program(static_cast<size_t>(steps) * 3);
    for (uint32_t& p : program) p = rng();
    auto f = [&](const Tensor& x, const Tensor& y, const Tensor& bias) {
      Tensor v = row_sum ? x - x.sum({1}, true) : x + y;
      const Tensor scale = row_sum ? x.sum({1}, true) : full({}, 0.75, TensorOptions{}.with_dtype(dtype));
      for (int k = 0; k < steps; ++k) {
        const uint32_t* p = &program[static_cast<size_t>(3 * k)];
        if (p[0] % 3 == 0) {
          v = unary[p[1] % unary.size()](v);
          continue;
        }
        const Tensor& other = p[1] % 4 == 0 ? y : p[1] % 4 == 1 ? bias : p[1] % 4 == 2 ? scale : v;
        const Binary op = binary[p[2] % binary.size()];
        v = (p[2] / 8) % 2 == 0 ? op(v, other) : op(other, v);
      }
      // A row sum may end the chain: of a value kept in registers only, or of a result.
      if (trial % 4 == 1) return std::vector<Tensor>{v.sum({1}, true)};
      if (trial % 4 == 3) return std::vector<Tensor>{v, v.sum({1}, true)};
      return std::vector<Tensor>{v};
    };
    auto compiled = compile(f);
    for (int call = 0; call < 3; ++call) {
      const TensorOptions options = TensorOptions{}.with_dtype(dtype);
      Tensor x = randn({rows, cols}, options), y = randn({rows, cols}, options), bias = randn({cols}, options);
      // NaN, infinities, zeros and negatives where sqrt, rsqrt, division, minimum and maximum differ.
      const double specials[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0, -2.0};
      for (int s = 0; s < 6 && s < x.numel(); ++s) {
        x.view({-1}).narrow(0, (s * 7) % x.numel(), 1).fill_(specials[s]);
        y.view({-1}).narrow(0, (s * 5) % y.numel(), 1).fill_(specials[5 - s]);
      }
      const std::vector<Tensor> want = f(x, y, bias), got = compiled(x, y, bias);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(test_util::bitwise_equal_but_nan_payloads(got[i], want[i]))
            << "trial " << trial << " call " << call << " result " << i << "\n"
            << compiled.graph().dump();
      }
    }
    chained += compiled.stats().chains > 0 ? 1 : 0;
  }
  EXPECT_GE(chained, 40) << chained;  // nearly every program holds one (a group in tiles does not)
}

// A training step's parameter updates, one kernel per parameter in the graph, become one multi-tensor
// step in the plan (Note [multi-tensor updates] in graph/executor.h).
TEST(GraphPasses, ATrainingStepsUpdatesRunAsOneMultiTensorStep) {
  auto model = models::mnist_mlp();
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  const Tensor x = randn({8, 784}), y = randint(0, 10, {8});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  step();  // the momentum buffers exist from here on
  Trace t = trace({x, y}, [&] { return std::vector<Tensor>{step()}; });
  int updates = 0;
  for (const Node& n : t.graph.nodes) updates += n.kind == NodeKind::kKernel && n.op == OpKind::kSgdStep;
  EXPECT_EQ(updates, static_cast<int>(model->parameters().size()));
  const MemoryPlan plan = plan_memory(t.graph);
  const Executable executable(std::move(t.graph), plan);
  EXPECT_EQ(executable.multi_updates(), 1);
}

// A group of elementwise members runs in strips (Note [strip fusion]) and gives the unfused kernels'
// bits: broadcasts along either dim and of a 0-d value, ops with and without vector forms (pow,
// comparisons, where), conversions through bfloat16, rows shorter and longer than a strip, one
// element, and enough elements for two threads. A softmax over the last dim runs in strips of whole
// rows; over another dim, or with a transposed operand, the group keeps its tiles.
TEST(GraphPasses, StripGroupsGiveTheUnfusedKernelsBits) {
  test_util::ThreadCountGuard guard;
  using Body = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;
  struct Case {
    const char* name;
    Body f;
    // For every group the case makes: 1 strips, 0 tiles, -1 either (the groups differ).
    std::function<int(int64_t rows, int64_t cols)> strips;
  };
  auto elementwise = [](int64_t rows, int64_t cols) { return rows * cols > 1; };
  // A softmax over rows of up to kRowStripElements runs in strips of whole rows; longer ones keep
  // the tiles, and rows longer than a tile leave the softmax out of the group.
  auto whole_rows = [](int64_t, int64_t cols) {
    return cols > kFusionTileElements || (cols >= 2 && cols <= FusedGroup::kRowStripElements);
  };
  // Row reductions (Note [fused reductions]) join their group where the rows fit a tile; a group
  // holding one runs in strips of whole rows up to kRowStripElements.
  auto reductions = [](int64_t, int64_t cols) {
    if (cols > kFusionTileElements) return -1;
    return cols >= 2 && cols <= FusedGroup::kRowStripElements ? 1 : 0;
  };
  const std::vector<Case> cases = {
      {"silu_add", [](auto& x, auto& y, auto&, auto&, auto&) { return x * sigmoid(x) + y; }, elementwise},
      {"broadcasts",
       [](auto& x, auto&, auto& bias, auto& column, auto& scalar) {
         return tanh((x - bias) * column.exp() + scalar) * 0.5;
       },
       elementwise},
      {"no_vector_forms",
       [](auto& x, auto& y, auto&, auto&, auto& scalar) {
         return where(x > y, x.pow(y), (y * scalar).sigmoid()) + (x <= 0.25).to(kFloat32);
       },
       elementwise},
      {"bfloat16",
       [](auto& x, auto& y, auto& bias, auto&, auto&) {
         return ((x.to(kBFloat16) * y.to(kBFloat16)).exp() - bias.to(kBFloat16)).to(kFloat32) + x;
       },
       elementwise},
      {"float64", [](auto& x, auto& y, auto&, auto&, auto&) { return (x.to(kFloat64).exp() / y).log1p(); },
       elementwise},
      {"masked_softmax",
       [](auto& x, auto& y, auto&, auto&, auto&) {
         return softmax((x * 0.125).masked_fill(y > 1.0, -INFINITY), -1) * 2.0;
       },
       // Rows longer than a tile leave the softmax out: the rest of the group is elementwise.
       whole_rows},
      {"log_softmax_rows",
       [](auto& x, auto& y, auto& bias, auto&, auto&) { return log_softmax(x * y + bias, 1).exp(); }, whole_rows},
      {"softmax_dim0", [](auto& x, auto& y, auto&, auto&, auto&) { return softmax(x + y, 0) - y; },
       [](int64_t, int64_t) { return false; }},
      {"layer_norm",
       [](auto& x, auto&, auto& bias, auto& column, auto&) {
         const Tensor centered = x - mean(x, {1}, true);
         return centered * rsqrt(mean(centered * centered, {1}, true) + 1e-5) * bias + column;
       },
       reductions},
      {"rms_norm",
       [](auto& x, auto&, auto& bias, auto&, auto&) { return x * rsqrt(mean(x * x, {1}, true) + 1e-6) * bias; },
       reductions},
      {"log_softmax_by_hand",
       [](auto& x, auto& y, auto&, auto&, auto&) {
         const Tensor z = x * y, top = amax(z, {1}, true);
         return z - (log(exp(z - top).sum({1}, true)) + top);
       },
       reductions},
      {"var_min_float64",
       [](auto& x, auto& y, auto&, auto&, auto& scalar) {
         const Tensor z = (x + y).to(kFloat64);
         return (var(z, {1}, 0, true) + amin(z, {1}, true) * scalar) * z;
       },
       reductions},
      {"bfloat16_sum",
       [](auto& x, auto&, auto&, auto& column, auto&) {
         const Tensor z = x.to(kBFloat16);
         return (z.sum({1}, true) * z).to(kFloat32) - column;
       },
       reductions},
      // Transposed, a single row still steps through memory with unit stride.
      {"transposed", [](auto& x, auto& y, auto&, auto&, auto&) { return (x.t() * y.t()).exp() + 1.0; },
       [](int64_t rows, int64_t cols) { return rows == 1 && cols > 1; }},
  };
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{3, 1000}, {257, 129}, {1, 1},    {1, 70001}, {512, 1024},
                                                           {4096, 3}, {5, 4096},  {7, 4097}, {3, 20000}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      for (const auto& [rows, cols] : shapes) {
        const Tensor x = randn({rows, cols}), y = randn({rows, cols}), bias = randn({cols}), column = randn({rows, 1}),
                     scalar = randn({});
        auto compiled = compile(c.f);
        const Tensor want = c.f(x, y, bias, column, scalar);
        (void)compiled(x, y, bias, column, scalar);  // traces, running the function eagerly
        const Tensor got = compiled(x, y, bias, column, scalar);
        EXPECT_TRUE(test_util::bitwise_equal(got, want)) << c.name << " " << rows << "x" << cols << " " << threads;
        // How the groups run.
        Trace t = trace(std::vector<Tensor>{x, y, bias, column, scalar},
                        [&] { return std::vector<Tensor>{c.f(x, y, bias, column, scalar)}; });
        PassStats s;
        fold_constants(t.graph, s);
        simplify(t.graph, s);
        fuse_elementwise(t.graph, s);
        for (const Node& n : t.graph.nodes) {
          if (n.kind != NodeKind::kFused) continue;
          const int want_strips = c.strips(rows, cols);
          if (want_strips < 0) continue;
          EXPECT_EQ(FusedGroup(t.graph, n).strips(), want_strips == 1) << c.name << " " << rows << "x" << cols << "\n"
                                                                       << nodes(t.graph);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember::graph

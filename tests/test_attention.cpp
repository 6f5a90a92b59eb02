// scaled_dot_product_attention's flash kernel against its composite (ops/reference.h): forward and
// gradients on shapes that cross the kernel's tiles, with every kind of mask, dropout (the same
// Philox mask), the split-KV path of a single query, 16-bit inputs and empty dims; and its memory:
// no (L, S) matrix forward or backward. The golden cases against PyTorch and the float64
// gradchecks are in the op registry (tests/ops_nn.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "ember/ember.h"
#include "golden.h"
#include "ops/factory.h"
#include "ops/reference.h"
#include "test_util.h"

namespace {

using ember::AttentionAttrs;
using ember::Shape;
using ember::Tensor;

struct SdpaCase {
  Shape q, k, v;
  bool causal = false;
  bool gqa = false;
  std::optional<Tensor> mask = std::nullopt;
  double dropout = 0.0;
};

// Output and gradients of q, k, v under one fixed output gradient.
std::vector<Tensor> run(const SdpaCase& c, bool flash, uint64_t seed) {
  ember::manual_seed(seed);
  const Tensor q = ember::randn(c.q).requires_grad_(), k = ember::randn(c.k).requires_grad_(),
               v = ember::randn(c.v).requires_grad_();
  Tensor out;
  if (flash) {
    ember::manual_seed(seed + 1);
    out = ember::scaled_dot_product_attention(q, k, v, c.mask, c.dropout, c.causal, std::nullopt, c.gqa);
  } else {
    // The draw the front-end reserves: the same seed, the generator's next blocks.
    ember::manual_seed(seed + 1);
    Shape scores = c.q;
    scores[scores.size() - 1] = c.k[c.k.size() - 2];
    AttentionAttrs attrs{1.0 / std::sqrt(static_cast<double>(c.q[c.q.size() - 1])), c.causal, c.dropout, 0, 0};
    if (c.dropout > 0) {
      const ember::detail::RandomDraw draw = ember::detail::reserve_random_blocks((scores.numel() + 1) / 2);
      attrs.seed = draw.seed;
      attrs.first_block = draw.first_block;
    }
    out = ember::reference::scaled_dot_product_attention(q, k, v, c.mask.value_or(Tensor()), attrs);
  }
  ember::manual_seed(seed + 2);
  const Tensor grad = ember::randn(out.shape());
  out.backward(grad);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void expect_flash_matches_composite(const SdpaCase& c) {
  const std::vector<Tensor> flash = run(c, true, 3), composite = run(c, false, 3);
  const char* names[] = {"out", "grad q", "grad k", "grad v"};
  for (size_t i = 0; i < flash.size(); ++i) {
    EXPECT_TRUE(golden::all_close(flash[i], composite[i], {2e-5, 2e-5}))
        << names[i] << " q " << c.q << " k " << c.k << " causal " << c.causal << " dropout " << c.dropout;
  }
}

TEST(Attention, FlashMatchesCompositeAcrossTiles) {
  expect_flash_matches_composite({.q = {2, 3, 150, 40}, .k = {2, 3, 170, 40}, .v = {2, 3, 170, 24}});
  expect_flash_matches_composite({.q = {1, 2, 200, 32}, .k = {1, 2, 200, 32}, .v = {1, 2, 200, 32}, .causal = true});
  expect_flash_matches_composite({.q = {1, 2, 70, 16}, .k = {1, 2, 130, 16}, .v = {1, 2, 130, 16}, .causal = true});
  // Features not a multiple of 8: the queries' register transpose leaves a remainder.
  expect_flash_matches_composite({.q = {1, 2, 77, 20}, .k = {1, 2, 90, 20}, .v = {1, 2, 90, 12}});
  expect_flash_matches_composite(
      {.q = {2, 4, 65, 8}, .k = {2, 2, 129, 8}, .v = {2, 2, 129, 8}, .causal = true, .gqa = true});
}

TEST(Attention, FlashMatchesCompositeWithMasks) {
  ember::manual_seed(5);
  const Tensor keep = ember::lt(ember::rand({2, 1, 1, 100}), 0.8);
  expect_flash_matches_composite(
      {.q = {2, 2, 90, 16}, .k = {2, 2, 100, 16}, .v = {2, 2, 100, 16}, .causal = false, .gqa = false, .mask = keep});
  const Tensor additive = ember::randn({90, 100});
  expect_flash_matches_composite({.q = {2, 2, 90, 16},
                                  .k = {2, 2, 100, 16},
                                  .v = {2, 2, 100, 16},
                                  .causal = false,
                                  .gqa = false,
                                  .mask = additive});
  // A row with no key: zeros out and zero gradients.
  Tensor none = ember::ones({1, 1, 3, 70}, ember::kBool);
  none.select(2, 1).fill_(false);
  expect_flash_matches_composite(
      {.q = {1, 1, 3, 8}, .k = {1, 1, 70, 8}, .v = {1, 1, 70, 8}, .causal = false, .gqa = false, .mask = none});
}

TEST(Attention, DropoutDrawsTheCompositesMask) {
  expect_flash_matches_composite({.q = {1, 2, 80, 16},
                                  .k = {1, 2, 90, 16},
                                  .v = {1, 2, 90, 16},
                                  .causal = false,
                                  .gqa = false,
                                  .mask = std::nullopt,
                                  .dropout = 0.25});
  expect_flash_matches_composite({.q = {1, 1, 70, 8},
                                  .k = {1, 1, 70, 8},
                                  .v = {1, 1, 70, 8},
                                  .causal = true,
                                  .gqa = false,
                                  .mask = std::nullopt,
                                  .dropout = 0.5});
  // Two calls draw different masks; the same seed draws the same one.
  ember::manual_seed(1);
  const Tensor q = ember::randn({1, 1, 8, 4}), k = ember::randn({1, 1, 8, 4});
  ember::manual_seed(9);
  const Tensor a = ember::scaled_dot_product_attention(q, k, k, std::nullopt, 0.5);
  const Tensor b = ember::scaled_dot_product_attention(q, k, k, std::nullopt, 0.5);
  ember::manual_seed(9);
  const Tensor c = ember::scaled_dot_product_attention(q, k, k, std::nullopt, 0.5);
  EXPECT_FALSE(golden::all_close(a, b, {1e-6, 1e-6}));
  EXPECT_TRUE(golden::all_close(a, c, {0, 0}));
}

TEST(Attention, SingleQueryOverLongCacheSplitsKeys) {
  // One query against 1000 keys on two threads: the split-KV path and its merge.
  const test_util::ThreadCountGuard guard;
  ember::set_num_threads(2);
  expect_flash_matches_composite({.q = {1, 1, 1, 64}, .k = {1, 1, 1000, 64}, .v = {1, 1, 1000, 64}});
  ember::manual_seed(2);
  Tensor keep = ember::ones({1, 1, 1, 1000}, ember::kBool);
  keep.narrow(3, 0, 500).fill_(false);  // whole chunks without a key
  expect_flash_matches_composite(
      {.q = {1, 1, 1, 64}, .k = {1, 1, 1000, 64}, .v = {1, 1, 1000, 64}, .causal = false, .gqa = false, .mask = keep});
}

// The causal rule skips the upper triangle of each diagonal tile (Note [causal diagonal tiles]); a
// boolean mask of the same lower triangle runs every tile whole. The two agree bit for bit, forward
// and backward, on tiles cut at every register-tile row count, with keys longer or shorter than the
// queries, grouped-query heads, and on 1 and 2 threads. Float masks: the same, through +0 and -inf.
TEST(Attention, CausalDiagonalTilesMatchTheTriangularMask) {
  const test_util::ThreadCountGuard guard;
  struct Shapes {
    Shape q, k, v;
    bool gqa;
  };
  const Shapes cases[] = {{{2, 4, 128, 48}, {2, 4, 128, 48}, {2, 4, 128, 48}, false},
                          {{1, 2, 203, 19}, {1, 2, 203, 19}, {1, 2, 203, 33}, false},
                          {{1, 2, 70, 16}, {1, 2, 130, 16}, {1, 2, 130, 16}, false},
                          {{1, 1, 131, 8}, {1, 1, 67, 8}, {1, 1, 67, 8}, false},
                          {{2, 4, 65, 8}, {2, 2, 129, 8}, {2, 2, 129, 8}, true}};
  for (const int threads : {1, 2}) {
    ember::set_num_threads(threads);
    for (const Shapes& c : cases) {
      const int64_t length = c.q[2], keys = c.k[2];
      const Tensor lower = ember::tril(ember::ones({length, keys}, ember::kBool));
      const Tensor additive = ember::where(lower, ember::zeros({length, keys}),
                                           ember::full({length, keys}, -std::numeric_limits<float>::infinity()));
      const auto run_once = [&](const std::optional<Tensor>& mask, bool causal) {
        ember::manual_seed(11);
        const Tensor q = ember::randn(c.q).requires_grad_(), k = ember::randn(c.k).requires_grad_(),
                     v = ember::randn(c.v).requires_grad_();
        const Tensor out = ember::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, std::nullopt, c.gqa);
        out.backward(ember::randn(out.shape()));
        return std::vector<Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
      };
      const std::vector<Tensor> causal = run_once(std::nullopt, true);
      for (const Tensor& mask : {lower, additive}) {
        const std::vector<Tensor> masked = run_once(mask, false);
        for (size_t i = 0; i < causal.size(); ++i) {
          EXPECT_TRUE(test_util::bitwise_equal(causal[i], masked[i]))
              << i << " q " << c.q << " k " << c.k << " mask " << mask.dtype() << " threads " << threads;
        }
      }
    }
  }
}

TEST(Attention, HalfInputsComputeInFloat) {
  ember::manual_seed(4);
  const Tensor q = ember::randn({1, 2, 20, 8}), k = ember::randn({1, 2, 30, 8}), v = ember::randn({1, 2, 30, 8});
  const Tensor full = ember::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true);
  for (ember::DType dtype : {ember::kBFloat16, ember::kFloat16}) {
    const Tensor half =
        ember::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), std::nullopt, 0.0, true);
    EXPECT_EQ(half.dtype(), dtype);
    EXPECT_TRUE(golden::all_close(half.to(ember::kFloat32), full, {3e-2, 3e-2})) << dtype;
  }
}

// The softmax's exp (Note [attention exp]) through the op: one query against keys 0 and 1 with
// values 0 and 1 gives exp(x - max) / (exp(0) + exp(x - max)) = sigmoid(x), for x from -100 to 20.
// Within a few ulp where exp is in float's normal range, 0 below it.
TEST(Attention, ExpOfNonPositiveScores) {
  constexpr int64_t n = 2001;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = -100.0f + 0.06f * static_cast<float>(i);
  const Tensor q = ember::from_vector(x, Shape{1, 1, n, 1});
  const Tensor k = ember::from_vector(std::vector<float>{0.0f, 1.0f}, Shape{1, 1, 2, 1});
  const std::vector<float> y = ember::scaled_dot_product_attention(q, k, k).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[static_cast<size_t>(i)];
    const float yi = y[static_cast<size_t>(i)];
    const double expected = 1.0 / (1.0 + std::exp(-xi));
    if (xi < -87.3) {
      EXPECT_EQ(yi, 0.0f) << "x " << xi;
    } else {
      EXPECT_NEAR(yi, expected, 2.5e-7 * expected) << "x " << xi;
    }
  }
}

TEST(Attention, EmptyDims) {
  // No queries: an empty output, zero key and value gradients.
  const Tensor q = ember::randn({2, 1, 0, 4}).requires_grad_(), k = ember::randn({2, 1, 5, 4}).requires_grad_();
  Tensor out = ember::scaled_dot_product_attention(q, k, k);
  EXPECT_EQ(out.shape(), (Shape{2, 1, 0, 4}));
  out.sum().backward();
  EXPECT_TRUE(golden::all_close(k.grad(), ember::zeros({2, 1, 5, 4}), {0, 0}));
  // No keys: every row is empty, so zeros (PyTorch's matmul over 0 keys gives zeros too).
  const Tensor q2 = ember::randn({1, 2, 3, 4});
  const Tensor none = ember::zeros({1, 2, 0, 4});
  EXPECT_TRUE(
      golden::all_close(ember::scaled_dot_product_attention(q2, none, none), ember::zeros({1, 2, 3, 4}), {0, 0}));
  // No batch.
  const Tensor z = ember::zeros({0, 2, 3, 4});
  EXPECT_EQ(ember::scaled_dot_product_attention(z, z, z).shape(), (Shape{0, 2, 3, 4}));
}

TEST(Attention, Errors) {
  const Tensor q = ember::randn({1, 2, 3, 4});
  const Tensor mask = ember::randn({3, 3}).requires_grad_();
  test_util::expect_error([&] { ember::scaled_dot_product_attention(q, q, q, mask); },
                          {"[scaled_dot_product_attention]", "no gradient for attn_mask"});
  test_util::expect_error([&] { ember::scaled_dot_product_attention(q, q, q, std::nullopt, 1.0); },
                          {"[scaled_dot_product_attention]", "dropout_p must be in [0, 1)"});
  test_util::expect_error([&] { ember::scaled_dot_product_attention(q, q.to(ember::kFloat64), q); },
                          {"[scaled_dot_product_attention]", "of one dtype"});
  test_util::expect_error(
      [&] {
        ember::scaled_dot_product_attention(q, q, q, ember::ones({3, 3}, ember::kInt64));
      },
      {"[scaled_dot_product_attention]", "bool attn_mask"});
  test_util::expect_error(
      [&] { ember::scaled_dot_product_attention(q.to(ember::kInt64), q.to(ember::kInt64), q.to(ember::kInt64)); },
      {"[scaled_dot_product_attention]", "floating-point"});
  test_util::expect_error(
      [&] { ember::scaled_dot_product_attention(ember::randn({4}), ember::randn({4}), ember::randn({4})); },
      {"[scaled_dot_product_attention]", "rank of at least 2"});
}

TEST(Attention, MemoryDoesNotGrowWithTheSquareOfTheLength) {
  // L = S = 2048: a score matrix would be 16 MiB; forward and backward together must stay far below.
  const int64_t length = 2048;
  ember::manual_seed(6);
  const Tensor q = ember::randn({1, 1, length, 32}).requires_grad_();
  const Tensor k = ember::randn({1, 1, length, 32}).requires_grad_();
  const Tensor v = ember::randn({1, 1, length, 32}).requires_grad_();
  ember::reset_peak_memory_stats(ember::kCPU);
  const int64_t before = ember::memory_stats(ember::kCPU).bytes_in_use;
  Tensor out = ember::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true);
  out.sum().backward();
  const int64_t peak = ember::memory_stats(ember::kCPU).peak_bytes_in_use - before;
  EXPECT_LT(peak, 4 * length * length / 4) << "peak " << peak << " bytes";  // a quarter of one score matrix
}

}  // namespace

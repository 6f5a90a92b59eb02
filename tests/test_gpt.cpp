// The GPT (include/ember/models/gpt.h): 50 training steps against PyTorch from the same initial
// weights over the same batches (tests/golden/make_gpt_parity.py: dropout 0, AdamW with nanoGPT's
// decay groups, clipping, warmup + cosine); generation with and without the KV cache; sampling;
// the character tokenizer and the text split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/gpt.h"
#include "ember/optim.h"
#include "golden.h"
#include "test_util.h"

namespace {

using ember::Tensor;
using ember::models::GPT;
using ember::models::GPTConfig;
using golden::with_prefix_removed;

const std::string kGptParity = std::string(EMBER_GOLDEN_DIR) + "/gpt_parity.safetensors";

TEST(GptParity, FiftyStepsMatchPyTorch) {
  const ember::StateDict golden = ember::load(kGptParity);
  const std::map<std::string, std::string> meta = ember::load_metadata(kGptParity);
  const GPTConfig config{.vocab_size = std::stoll(meta.at("vocab_size")),
                         .block_size = std::stoll(meta.at("block_size")),
                         .n_layer = std::stoll(meta.at("n_layer")),
                         .n_head = std::stoll(meta.at("n_head")),
                         .n_embd = std::stoll(meta.at("n_embd"))};
  GPT model(config);
  model.load_state_dict(with_prefix_removed(golden, "init."));
  ember::optim::AdamWOptions options{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.0};
  ember::optim::AdamW optimizer({{model.decayed_parameters(), {{"weight_decay", std::stod(meta.at("weight_decay"))}}},
                                 {model.undecayed_parameters(), {{"weight_decay", 0.0}}}},
                                options);
  const Tensor inputs = golden.at("inputs"), targets = golden.at("targets");
  const Tensor losses = golden.at("losses"), lrs = golden.at("lrs");
  const int64_t steps = inputs.size(0);
  for (int64_t step = 0; step < steps; ++step) {
    for (ember::optim::ParamGroup& group : optimizer.param_groups()) group.set_lr(lrs.select(0, step).item<double>());
    const Tensor loss = model.loss(inputs.select(0, step), targets.select(0, step));
    optimizer.zero_grad();
    loss.backward();
    ember::optim::clip_grad_norm_(model.parameters(), std::stod(meta.at("clip")));
    optimizer.step();
    const double expected = losses.select(0, step).item<double>();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-4 * std::abs(expected)) << "step " << step;
  }
  const ember::StateDict final_weights = with_prefix_removed(golden, "final.");
  const ember::StateDict trained = model.state_dict();
  ASSERT_EQ(trained.size(), final_weights.size());
  for (const auto& [name, expected] : final_weights) {
    EXPECT_TRUE(golden::all_close(trained.at(name), expected, {1e-4, 1e-4})) << name;
  }
}

GPTConfig tiny_gpt() { return {.vocab_size = 11, .block_size = 12, .n_layer = 2, .n_head = 2, .n_embd = 16}; }

TEST(Gpt, GreedyDecodingWithAndWithoutTheCacheAgrees) {
  ember::manual_seed(3);
  GPT model(tiny_gpt());
  const std::vector<int64_t> prompt = {1, 5, 2, 7};
  // Past the context of 12: the cache restarts from the window, as the recomputation crops it.
  const std::vector<int64_t> cached = ember::models::generate(model, prompt, 20, {.temperature = 0.0}, true);
  const std::vector<int64_t> recomputed = ember::models::generate(model, prompt, 20, {.temperature = 0.0}, false);
  EXPECT_EQ(cached, recomputed);
  // The cached logits equal the full forward's at every position.
  ember::autograd::NoGradGuard no_grad;
  model.eval();
  const Tensor idx = ember::from_vector(std::vector<int64_t>{1, 5, 2, 7, 3, 3, 9}).view({1, -1});
  const Tensor full = model.forward(idx);
  ember::models::KVCache cache = model.make_cache(1);
  const Tensor first = model.forward_cached(idx.narrow(1, 0, 3), cache);
  const Tensor middle = model.forward_cached(idx.narrow(1, 3, 1), cache);
  const Tensor rest = model.forward_cached(idx.narrow(1, 4, 3), cache);  // a chunk after the prefill
  EXPECT_TRUE(golden::all_close(ember::cat({first, middle, rest}, 1), full, {1e-5, 1e-5}));
}

TEST(Gpt, DecodingAllocatesNothingPerTokenAfterTheFirst) {
  ember::manual_seed(4);
  GPT model({.vocab_size = 11, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 16});
  ember::models::KVCache cache = model.make_cache(1);
  ember::autograd::NoGradGuard no_grad;
  model.eval();
  model.forward_cached(ember::from_vector(std::vector<int64_t>{1, 2, 3}).view({1, -1}), cache);
  const Tensor next = ember::from_vector(std::vector<int64_t>{4}).view({1, 1});
  model.forward_cached(next, cache);
  const int64_t before = ember::memory_stats().system_allocations;
  for (int i = 0; i < 20; ++i) model.forward_cached(next, cache);
  EXPECT_EQ(ember::memory_stats().system_allocations, before);
}

TEST(Gpt, SamplingOptions) {
  const Tensor logits = ember::from_vector(std::vector<float>{0.0f, 3.0f, 1.0f, 2.9f});
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0}).sample(logits), 1);
  // top_k = 1 is greedy whatever the seed; top_k = 2 only ever draws the two best.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(ember::models::Sampler({.top_k = 1, .seed = seed}).sample(logits), 1);
    const int64_t id = ember::models::Sampler({.top_k = 2, .seed = seed}).sample(logits);
    EXPECT_TRUE(id == 1 || id == 3) << id;
    // top_p = 0.5: token 1 alone holds ~47%, tokens 1 and 3 reach 0.5.
    const int64_t nucleus = ember::models::Sampler({.top_p = 0.5, .seed = seed}).sample(logits);
    EXPECT_TRUE(nucleus == 1 || nucleus == 3) << nucleus;
  }
  // Frequencies at temperature 1 follow the softmax (token 0: e^0 / sum ~ 2.3%).
  ember::models::Sampler sampler({.seed = 11});
  std::vector<int> counts(4);
  for (int i = 0; i < 20000; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  const double total = 1 + std::exp(3.0) + std::exp(1.0) + std::exp(2.9);
  EXPECT_NEAR(counts[1] / 20000.0, std::exp(3.0) / total, 0.015);
  EXPECT_NEAR(counts[0] / 20000.0, 1 / total, 0.005);
  // The same seed draws the same tokens.
  ember::models::Sampler a({.seed = 5}), b({.seed = 5});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
  test_util::expect_error([] { ember::models::Sampler({.temperature = -1}); }, {"[generate]", "temperature"});
  test_util::expect_error([] { ember::models::Sampler({.top_p = 0}); }, {"[generate]", "top_p"});
  test_util::expect_error([] { ember::models::Sampler({.min_p = 1.5}); }, {"[generate]", "min_p"});
  test_util::expect_error([] { ember::models::Sampler({.repetition_penalty = 0}); },
                          {"[generate]", "repetition_penalty"});
  test_util::expect_error([] { ember::models::Sampler({.penalty_last_n = -1}); }, {"[generate]", "penalty_last_n"});
}

// The sampler sorts only what its draw needs (Note [sampling without sorting the vocabulary]); it
// draws what sorting the whole vocabulary draws:
// the reference below is the definition (softmax at the temperature over the top_k, the fewest
// most likely tokens reaching top_p, those at least min_p of the best, one uniform draw from the
// sampler's stream, next_uniform), on a 5,000-token vocabulary with repeated values.
int64_t reference_sample(const std::vector<float>& logits, const ember::models::SamplingOptions& o, uint64_t& state) {
  std::vector<std::pair<float, int64_t>> c;
  for (size_t i = 0; i < logits.size(); ++i) c.emplace_back(logits[i], static_cast<int64_t>(i));
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (o.top_k > 0) c.resize(static_cast<size_t>(std::min<int64_t>(o.top_k, static_cast<int64_t>(c.size()))));
  // Weights relative to the best, exp((x - top) / T) in float32 as ember's exp computes them.
  const ember::Tensor weights = ember::exp(
      ember::div(ember::sub(ember::from_vector(logits), ember::Scalar(c[0].first)), ember::Scalar(o.temperature)));
  const std::vector<float> w = weights.to_vector<float>();
  std::vector<double> p;
  double total = 0;
  for (const auto& [logit, id] : c) total += p.emplace_back(w[static_cast<size_t>(id)]);
  size_t kept = p.size();
  double mass = 0;
  for (size_t i = 0; i < p.size() && o.top_p < 1.0; ++i) {
    if ((mass += p[i] / total) >= o.top_p) {
      kept = i + 1;
      break;
    }
  }
  size_t above = 1;
  while (o.min_p > 0 && above < kept && p[above] >= o.min_p * p[0]) ++above;
  if (o.min_p > 0) kept = above;
  double kept_total = 0;
  for (size_t i = 0; i < kept; ++i) kept_total += p[i];
  // Nothing cut: the draw is over the total of the whole vocabulary, summed in index order.
  if (o.top_p >= 1.0 && o.min_p == 0.0 && o.top_k == 0) {
    kept_total = 0;
    for (const float wi : w) kept_total += wi;
  }
  const double u = ember::models::next_uniform(state) * kept_total;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    if (u < (cumulative += p[i])) return c[i].second;
  }
  return c[kept - 1].second;
}

TEST(Gpt, SamplerDrawsWhatSortingTheWholeVocabularyDraws) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(5000);
  for (float& v : values) v = std::round(normal(rng) * 8.0f) / 8.0f;  // many equal logits
  const Tensor logits = ember::from_vector(values);
  const std::vector<ember::models::SamplingOptions> settings = {
      {.seed = 1},
      {.temperature = 0.7, .top_p = 0.9, .seed = 2},
      {.temperature = 2.0, .top_p = 0.999, .seed = 3},
      {.top_k = 40, .top_p = 0.8, .seed = 4},
      {.top_k = 4000, .top_p = 0.95, .seed = 5},
      {.temperature = 0.5, .top_p = 0.95, .min_p = 0.05, .seed = 6},
      {.temperature = 1.5, .min_p = 0.02, .seed = 7},
      {.temperature = 0.3, .top_p = 0.5, .seed = 8},
  };
  for (const ember::models::SamplingOptions& o : settings) {
    ember::models::Sampler sampler(o);
    uint64_t state = o.seed ^ 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < 300; ++i) ASSERT_EQ(sampler.sample(logits), reference_sample(values, o, state)) << i;
  }
}

// min-p keeps the tokens at least min_p times as likely as the best; the repetition penalty divides
// a positive logit and multiplies a negative one of the tokens among the last penalty_last_n, the
// frequency and presence penalties subtract, and all apply to greedy choice too.
TEST(Gpt, MinPAndRepetitionPenalty) {
  const Tensor logits = ember::from_vector(std::vector<float>{0.0f, 3.0f, 1.0f, 2.9f});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    // p(3) / p(1) = e^-0.1 = 0.90; p(2) / p(1) = e^-2 = 0.14, p(0) / p(1) = e^-3 = 0.05.
    const int64_t id = ember::models::Sampler({.min_p = 0.5, .seed = seed}).sample(logits);
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
  std::vector<int> counts(4);
  ember::models::Sampler loose({.min_p = 0.1, .seed = 3});
  for (int i = 0; i < 2000; ++i) ++counts[static_cast<size_t>(loose.sample(logits))];
  EXPECT_EQ(counts[0], 0);  // below 0.1 of the best
  EXPECT_GT(counts[2], 0);  // 0.14 of the best stays
  // 3.0 / 1.5 = 2.0 falls below 2.9: greedy takes token 3; the history is not changed.
  const std::vector<int64_t> history{1, 1};
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .repetition_penalty = 1.5}).sample(logits, history), 3);
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0}).sample(logits, history), 1);
  EXPECT_EQ(logits.to_vector<float>(), (std::vector<float>{0.0f, 3.0f, 1.0f, 2.9f}));
  // Only the last penalty_last_n ids count: token 1 is further back than 1.
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .repetition_penalty = 1.5, .penalty_last_n = 1})
                .sample(logits, {1, 2}),
            1);
  // OpenAI's penalties: 3.0 less 2 x 0.1 (frequency) is 2.8, below 2.9; less 0.2 once (presence) too;
  // less 0.05 once stays above 2.9.
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .frequency_penalty = 0.1}).sample(logits, history), 3);
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .presence_penalty = 0.2}).sample(logits, history), 3);
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .frequency_penalty = 0.05}).sample(logits, {1}), 1);
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .presence_penalty = -1.0}).sample(logits, {3}), 3);
  test_util::expect_error([] { ember::models::Sampler({.frequency_penalty = std::nan("")}); },
                          {"[generate]", "frequency_penalty"});
  // A negative logit is multiplied: token 0's -1 becomes -3, below token 1's -2.
  const Tensor negative = ember::from_vector(std::vector<float>{-1.0f, -2.0f});
  EXPECT_EQ(ember::models::Sampler({.temperature = 0.0, .repetition_penalty = 3.0}).sample(negative, {0}), 1);
}

TEST(Gpt, Errors) {
  test_util::expect_error([] { GPT({.n_head = 3, .n_embd = 16}); }, {"[GPT]", "not divisible"});
  GPT model(tiny_gpt());
  test_util::expect_error(
      [&] {
        model.forward(ember::zeros({1, 13}, ember::kInt64));
      },
      {"[GPT]", "longer than the context of 12"});
  test_util::expect_error([&] { ember::models::generate(model, {1, 99}, 3, {}); }, {"[generate]", "99"});
  test_util::expect_error([&] { ember::models::generate(model, {}, 3, {}); }, {"[generate]", "at least one"});
}

TEST(CharTokenizer, RoundTripAndErrors) {
  const auto tokenizer = ember::data::CharTokenizer::from_text("hello, world\n");
  EXPECT_EQ(tokenizer.vocabulary(), "\n ,dehlorw");
  EXPECT_EQ(tokenizer.encode("low"), (std::vector<int64_t>{6, 7, 9}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("hello world")), "hello world");
  test_util::expect_error([&] { tokenizer.encode("hex"); }, {"[CharTokenizer]", "'x' at offset 2"});
  test_util::expect_error([&] { tokenizer.decode({10}); }, {"[CharTokenizer]", "id 10"});
  test_util::expect_error([] { ember::data::CharTokenizer("aa"); }, {"[CharTokenizer]", "twice"});
  test_util::expect_error([] { ember::data::CharTokenizer::from_text(""); }, {"[CharTokenizer]", "empty"});
}

TEST(TextSplit, WindowsAreNextTokenPairsInTheirSplit) {
  std::vector<int64_t> tokens(100);
  for (int64_t i = 0; i < 100; ++i) tokens[static_cast<size_t>(i)] = i;
  const ember::data::TextSplit split(tokens);
  EXPECT_EQ(split.train_size(), 90);
  EXPECT_EQ(split.val_size(), 10);
  uint64_t state = 1;
  for (int repeat = 0; repeat < 20; ++repeat) {
    const auto [x, y] = split.batch("val", 3, 4, state);
    EXPECT_TRUE(golden::all_close(y, x + 1, {0, 0}));
    EXPECT_GE(x.min().item<int64_t>(), 90);
    EXPECT_LE(y.max().item<int64_t>(), 99);
    const auto [tx, ty] = split.batch("train", 3, 4, state);
    EXPECT_LE(ty.max().item<int64_t>(), 89);
  }
  test_util::expect_error([&] { split.batch("val", 1, 10, state); }, {"[TextSplit]", "too few"});
  test_util::expect_error([&] { split.batch("test", 1, 2, state); }, {"[TextSplit]", "split must be"});
  // A batch * context that wraps around 64 bits once sized the buffers to 0 (the copies then ran past
  // them); one beyond memory is the allocator's error.
  test_util::expect_error([&] { split.batch("train", int64_t{1} << 62, 4, state); },
                          {"[TextSplit] a batch of 4611686018427387904 windows of 4 tokens holds more tokens"});
  test_util::expect_error([&] { split.batch("train", int64_t{1} << 50, 4, state); }, {"cannot allocate"});
}

}  // namespace

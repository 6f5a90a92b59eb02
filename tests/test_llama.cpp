// Llama-family models from GGUF: SmolLM2-135M-Instruct (data/smollm2, which scripts/setup fetches)
// against Hugging Face transformers running the same file dequantized to float32
// (tests/llama/make_llama.py wrote tests/data/llama/model.json and passage_logits.npy): ember's
// model with its weights dequantized the same way must give the same logits and the same greedy
// tokens; with the weights kept quantized (and the activations quantized on the fly, as llama.cpp
// does) the perplexity of a longer text must stay within 1% of the float one, and the greedy tokens
// may part from the float ones only where the float model's two best are a near-tie.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/gguf.h"
#include "ember/models/chat.h"
#include "ember/models/llama.h"
#include "ember/npy.h"
#include "ember/tokenizer.h"
#include "test_util.h"

namespace ember::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::expect_error;

const std::string kModel = std::string(EMBER_DATA_DIR) + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kData = std::string(EMBER_TEST_DATA_DIR) + "/llama/";

const json& reference() {
  static const json data = [] {
    std::ifstream in(kData + "model.json");
    return json::parse(in);
  }();
  return data;
}

const gguf::File& file() {
  static const gguf::File f = [] {
    if (!fs::exists(kModel)) ADD_FAILURE() << kModel << " is missing: run scripts/setup (it downloads SmolLM2 there)";
    return gguf::load(kModel);
  }();
  return f;
}

// The model as the file stores it, and with every weight dequantized to float32 (loaded once each).
Llama& quantized() {
  static const std::shared_ptr<Llama> model = Llama::from_gguf(file(), kModel);
  return *model;
}
const std::shared_ptr<Llama>& dequantized_model() {
  static const std::shared_ptr<Llama> model = Llama::from_gguf(file(), kModel, {.dequantize = true});
  return model;
}
Llama& dequantized() { return *dequantized_model(); }

Tensor ids_of(const json& ids) { return from_vector(ids.get<std::vector<int64_t>>()).view({1, -1}); }

// exp of the mean next-token cross-entropy over positions 1..T-1 of logits (T, vocab).
double perplexity(const Tensor& logits, const std::vector<int64_t>& ids) {
  const int64_t t = static_cast<int64_t>(ids.size());
  const Tensor targets = from_vector(std::vector<int64_t>(ids.begin() + 1, ids.end()));
  return std::exp(cross_entropy(logits.narrow(0, 0, t - 1).to(kFloat64), targets).item<double>());
}

TEST(Llama, ConfigComesFromTheMetadata) {
  const LlamaConfig c = llama_config(file(), kModel);
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.ffn_dim, 1536);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_kv_head, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_DOUBLE_EQ(c.rope_base, 100000.0);
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c.tied_output);
  // The weights stay as stored: q4_1 products, the q8_0 embedding doubling as the output layer.
  const Llama& model = quantized();
  EXPECT_EQ(model.token_embd.dtype(), kQ8_0);
  EXPECT_EQ(model.blk->at<LlamaBlock>(0)->ffn_down->weight.dtype(), kQ4_1);
  EXPECT_EQ(model.output->weight.data_ptr(), model.token_embd.data_ptr());
  // state_dict() names are the file's.
  const auto state = model.state_dict();
  EXPECT_EQ(state.size(), file().tensors.size());
  for (const auto& [name, tensor] : file().tensors) EXPECT_TRUE(state.contains(name)) << name;
}

// Every weight shape of the model (q4_1 projections, the q8_0 tied output) gives the same products
// through its interleaved copy as through the file's layout, one row of x or many: the integer sums
// are exact, only the float sums of the blocks run in another order.
TEST(Llama, InterleavedWeightsGiveTheFilesProducts) {
  manual_seed(21);
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                           "token_embd.weight"}) {
    const Tensor& w = file().tensor(name);
    const InterleavedWeight fast = interleave(w);
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{37}}) {
      const Tensor x = randn({rows, w.size(1)});
      const Tensor expected = quantized_linear(x, w), got = quantized_linear(x, fast);
      const double bound = abs(x).sum(Axes{1}).max().item<double>() * abs(dequantize(w)).max().item<double>();
      EXPECT_LT((got - expected).abs().max().item<double>(), 1e-6 * bound) << name << " rows=" << rows;
    }
  }
}

TEST(Llama, FloatLogitsMatchTransformers) {
  const json& passage = reference()["passage"];
  const std::vector<int64_t> ids = passage["ids"].get<std::vector<int64_t>>();
  const autograd::NoGradGuard no_grad;
  const Tensor logits = dequantized().forward(ids_of(passage["ids"])).select(0, 0);
  const Tensor expected = load_npy(kData + "passage_logits.npy");
  const std::vector<int64_t> rows = passage["logits_positions"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Tensor got = logits.select(0, rows[i]), want = expected.select(0, static_cast<int64_t>(i));
    const double scale = want.abs().max().item<double>();
    EXPECT_LT((got - want).abs().max().item<double>() / scale, 1e-3) << "position " << rows[i];
  }
  // The most likely next token at every position, unless transformers' own margin is within noise.
  const Tensor argmax = logits.argmax(-1);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (passage["argmax_margin"][t].get<double>() < 1e-3) continue;
    EXPECT_EQ(argmax.select(0, static_cast<int64_t>(t)).item<int64_t>(), passage["argmax"][t].get<int64_t>())
        << "position " << t;
  }
  EXPECT_NEAR(perplexity(logits, ids), passage["perplexity"].get<double>(), 1e-3 * passage["perplexity"].get<double>());
}

TEST(Llama, FloatGreedyTokensMatchTransformers) {
#ifdef EMBER_TEST_SANITIZED
  // 192 float decode steps take 42 s under the sanitizers; the same code runs there in
  // FloatLogitsMatchTransformers and the quantized generation tests.
  GTEST_SKIP() << "the Release run checks the tokens";
#endif
  for (const json& prompt : reference()["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const std::vector<int64_t> ids = prompt["ids"].get<std::vector<int64_t>>();
    const std::vector<int64_t> expected = prompt["new_ids"].get<std::vector<int64_t>>();
    LlamaCache cache = dequantized().make_cache(256);
    const std::vector<int64_t> got = generate(dequantized(), cache, ids, 48, {.temperature = 0.0}, {2});
    EXPECT_EQ(got, expected);
  }
}

// Perplexity over 512 tokens of Shakespeare (data/shakespeare): the quantized model within 1% of
// the float one (which matches transformers above). A 60-token passage is too short for a 1% test:
// its quantized perplexity moved by 1.5% between instruction sets (6.05 to 6.14 against 6.005),
// where the rounding of the activations to q8_0 flips on last-bit differences; over 512 tokens
// they stay within 0.9% (interleaved weights: AVX-512 VNNI 25.28, AVX2 25.31, scalar 25.29; the
// row layout's VNNI tiles 25.24; float 25.09).
TEST(Llama, QuantizedPerplexityIsWithinOnePercentOfTheFloatOne) {
#ifdef EMBER_TEST_SANITIZED
  GTEST_SKIP() << "the Release run checks the perplexity (two 512-token passes take 89 s under the sanitizers)";
#endif
  const std::string text = data::read_text_file(std::string(EMBER_DATA_DIR) + "/shakespeare/input.txt");
  const data::BpeTokenizer tokenizer = bpe_tokenizer(file(), kModel);
  std::vector<int64_t> ids = tokenizer.encode(text.substr(200000, 3000));
  ASSERT_GE(ids.size(), 512u);
  ids.resize(512);
  const Tensor idx = from_vector(ids).view({1, -1});
  const autograd::NoGradGuard no_grad;
  const double got = perplexity(quantized().forward(idx).select(0, 0), ids);
  const double want = perplexity(dequantized().forward(idx).select(0, 0), ids);
  EXPECT_LT(std::abs(got - want) / want, 0.01) << "quantized " << got << ", float " << want;
  std::printf("perplexity over 512 tokens: quantized %.4f, float %.4f (%+.2f%%)\n", got, want,
              100 * (got - want) / want);
}

// With the activations quantized to q8_0 on the fly (llama.cpp's scheme) the logits move by up to
// ~0.9 (of ~25): the greedy tokens are transformers' float ones up to the first step where the
// quantization error can swap the float model's choice with the token the quantized model takes.
// Where they part, with a the float choice, b the quantized one and e the largest difference between
// the quantized and the float logits at that step, the float margin l[a] - l[b] must be below 2e
// (each logit moved by at most e); otherwise the quantized model chose against its own error bound.
// Measured parting margins: AVX-512 VNNI 0.082 and 0.049 (two prompts never part); AVX2 0.091,
// 0.139, 0.082, 0.049; scalar 0.220, 0.069, 0.049; SSE4 0.220, 0.275 (token 47, where a fixed
// bound of 0.25 failed), 0.082, 0.049. e was 0.47-1.19 at those steps.
TEST(Llama, QuantizedGreedyTokensPartOnlyAtNearTies) {
  for (const json& prompt : reference()["prompts"]) {
    SCOPED_TRACE(prompt["name"].get<std::string>());
    const std::vector<int64_t> expected = prompt["new_ids"].get<std::vector<int64_t>>();
    std::vector<int64_t> ids = prompt["ids"].get<std::vector<int64_t>>();
    LlamaCache cache = quantized().make_cache(256);
    const std::vector<int64_t> got = generate(quantized(), cache, ids, 48, {.temperature = 0.0}, {2});
    size_t same = 0;
    while (same < got.size() && same < expected.size() && got[same] == expected[same]) ++same;
    if (same >= expected.size() || same >= got.size()) continue;
    ids.insert(ids.end(), expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(same));
    const autograd::NoGradGuard no_grad;
    const Tensor idx = from_vector(ids).view({1, -1});
    const Tensor q = quantized().forward(idx).select(0, 0).select(0, -1);
    const Tensor f = dequantized().forward(idx).select(0, 0).select(0, -1);
    const double error = (q - f).abs().max().item<double>();
    const double margin = f.at<double>({expected[same]}) - f.at<double>({got[same]});
    EXPECT_LT(margin, 2 * error) << "parted at token " << same << ": float margin " << margin << " (transformers' "
                                 << prompt["new_margins"][same].get<double>() << "), largest logit error " << error;
  }
}

// Prompt processing in chunks through the cache, then one token at a time, gives the logits of one
// pass over the whole sequence.
TEST(Llama, CachedChunksMatchOnePass) {
  const std::vector<int64_t> ids = reference()["passage"]["ids"].get<std::vector<int64_t>>();
  const int64_t t = 20;
  const Tensor all = from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + t)).view({1, -1});
  const autograd::NoGradGuard no_grad;
  const Tensor expected = quantized().forward(all);
  LlamaCache cache = quantized().make_cache(32);
  std::vector<Tensor> pieces{quantized().forward_cached(all.narrow(1, 0, 7), cache),
                             quantized().forward_cached(all.narrow(1, 7, 9), cache)};
  for (int64_t i = 16; i < t; ++i) pieces.push_back(quantized().forward_cached(all.narrow(1, i, 1), cache));
  EXPECT_EQ(cache.length, t);
  const Tensor got = cat(pieces, 1);
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-3 * expected.abs().max().item<double>());
  // last_only gives the last row alone.
  LlamaCache again = quantized().make_cache(32);
  const Tensor last = quantized().forward_cached(all, again, /*last_only=*/true);
  EXPECT_EQ(last.shape(), (Shape{1, 1, 49152}));
  EXPECT_LT((last.select(1, 0) - expected.select(1, t - 1)).abs().max().item<double>(),
            1e-4 * expected.abs().max().item<double>());
}

// Several sequences at different lengths decode together (the products once for all, attention per
// sequence): each row of the logits is, bit for bit, what that sequence gives alone.
TEST(Llama, DecodingSeveralSequencesGivesEachOnesLogits) {
  const autograd::NoGradGuard no_grad;
  const std::vector<int64_t> ids = reference()["passage"]["ids"].get<std::vector<int64_t>>();
  const std::vector<int64_t> lengths{5, 9, 2};
  std::vector<LlamaCache> together, alone;
  for (const int64_t length : lengths) {
    const Tensor prompt = from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + length)).view({1, -1});
    for (auto* caches : {&together, &alone}) {
      caches->push_back(quantized().make_cache(16));
      quantized().forward_cached(prompt, caches->back(), true);
    }
  }
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<int64_t> next{ids[static_cast<size_t>(20 + step)], ids[static_cast<size_t>(30 + step)],
                                    ids[static_cast<size_t>(40 + step)]};
    const Tensor logits = quantized().decode(next, {&together[0], &together[1], &together[2]});
    ASSERT_EQ(logits.shape(), (Shape{3, 49152}));
    for (size_t b = 0; b < next.size(); ++b) {
      const Tensor own =
          quantized().forward_cached(from_vector(std::vector<int64_t>{next[b]}).view({1, 1}), alone[b], true);
      EXPECT_TRUE(test_util::bitwise_equal(logits.select(0, static_cast<int64_t>(b)), own.view({49152})))
          << "sequence " << b << ", step " << step;
      EXPECT_EQ(together[b].length, alone[b].length);
    }
  }
  // Bad calls are errors that leave the caches as they were.
  LlamaCache full = quantized().make_cache(1), batch2 = quantized().make_cache(4, 2);
  quantized().forward_cached(from_vector(std::vector<int64_t>{1}).view({1, 1}), full, true);
  expect_error([&] { quantized().decode({1, 2}, {&together[0]}); }, {"one id per cache, got 2 ids and 1 caches"});
  expect_error([&] { quantized().decode({1, 2}, {&together[0], &together[0]}); }, {"are the same cache"});
  expect_error([&] { quantized().decode({1}, {&full}); }, {"cache 0 is full (1 positions)"});
  expect_error([&] { quantized().decode({1}, {&batch2}); }, {"not a batch-1 cache"});
  expect_error([&] { quantized().decode({49152}, {&together[0]}); }, {"token id 49152 is outside the vocabulary"});
  EXPECT_EQ(together[0].length, lengths[0] + 3);
}

// The KV cache is preallocated and every temporary of a decode step comes from the caching
// allocator: after the first step, a step asks the system for no memory.
TEST(Llama, DecodingAllocatesNothingPerTokenAfterTheFirst) {
  const autograd::NoGradGuard no_grad;
  LlamaCache cache = quantized().make_cache(64);
  quantized().forward_cached(from_vector(std::vector<int64_t>{1, 504, 3575}).view({1, -1}), cache, true);
  const Tensor next = from_vector(std::vector<int64_t>{282}).view({1, 1});
  quantized().forward_cached(next, cache, true);
  const int64_t before = memory_stats().system_allocations;
  for (int i = 0; i < 20; ++i) quantized().forward_cached(next, cache, true);
  EXPECT_EQ(memory_stats().system_allocations, before);
}

// A chat's second turn reuses the cache: the ids it already holds are not run again, and the
// tokens drawn are those of a fresh cache.
TEST(Llama, GenerateReusesTheCachedPrefix) {
  const json& prompt = reference()["prompts"][2];
  const std::vector<int64_t> ids = prompt["ids"].get<std::vector<int64_t>>();
  LlamaCache cache = quantized().make_cache(256);
  const std::vector<int64_t> first = generate(quantized(), cache, ids, 8, {.temperature = 0.0});
  std::vector<int64_t> longer = ids;
  longer.insert(longer.end(), first.begin(), first.end());
  longer.push_back(ids.back());
  const std::vector<int64_t> reused = generate(quantized(), cache, longer, 4, {.temperature = 0.0});
  LlamaCache fresh = quantized().make_cache(256);
  EXPECT_EQ(reused, generate(quantized(), fresh, longer, 4, {.temperature = 0.0}));
  EXPECT_EQ(static_cast<int64_t>(cache.tokens.size()), cache.length);
  expect_error([&] { generate(quantized(), cache, ids, 300, {}); }, {"[generate]", "do not fit the context of 256"});
}

// The file's ChatML template, recognised (with SmolLM2's default system message), renders every
// conversation as transformers' Jinja rendering of it does.
TEST(Llama, ChatTemplateRendersAsTheFilesJinja) {
  const gguf::Value* jinja = file().find_value("tokenizer.chat_template");
  ASSERT_NE(jinja, nullptr);
  const ChatTemplate chat = ChatTemplate::recognise(jinja->as_string(), kModel);
  EXPECT_EQ(chat.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  for (const json& case_ : reference()["chat_renderings"]) {
    SCOPED_TRACE(case_["name"].get<std::string>());
    std::vector<ChatMessage> messages;
    for (const json& m : case_["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(chat.render(messages, false), case_["text"].get<std::string>());
    EXPECT_EQ(chat.render(messages, true), case_["text_with_generation_prompt"].get<std::string>());
  }
  for (const json& prompt : reference()["prompts"]) {
    if (prompt["kind"] != "chat") continue;
    std::vector<ChatMessage> messages;
    for (const json& m : prompt["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(chat.render(messages, true), prompt["prompt"].get<std::string>());
  }
  expect_error([&] { chat.render({{"tool", "x"}}, true); }, {"[chat] unknown role \"tool\""});
  expect_error([] { ChatTemplate::recognise("{{ bos_token }}[INST] {{ m }} [/INST]", "mistral.gguf"); },
               {"[chat] mistral.gguf's chat template is not one ember recognises", "--chat-template chatml"});
  expect_error([] { ChatTemplate::named("llama2"); }, {"[chat] unknown chat template \"llama2\""});
  EXPECT_EQ(ChatTemplate::named("chatml").render({{"user", "Hi!"}}, true),
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
}

// A chat's replies at temperature 0 are the greedy tokens, decoded: with the float weights,
// transformers' reply to the reference chat; the second turn sees the first.
TEST(Llama, ChatSessionRepliesAndKeepsTheConversation) {
  const LlamaFile llm = load_llama(kModel);
  EXPECT_EQ(llm.tokenizer->vocab_size(), 49152);
  const LlamaFile float_llm{kModel, dequantized_model(), llm.tokenizer, llm.chat_template};
  const json& prompt = reference()["prompts"][2];
  ChatSession chat(float_llm, ChatTemplate::from_file(float_llm), {.max_tokens = 24, .sampling = {.temperature = 0.0}});
  std::string streamed;
  const std::string answer = chat.reply(prompt["messages"][0]["content"], [&](const std::string& t) { streamed += t; });
  EXPECT_EQ(streamed, answer);
  EXPECT_EQ(answer + "<|im_end|>", prompt["text"].get<std::string>());
  EXPECT_TRUE(chat.finished());
  EXPECT_EQ(chat.prompt_tokens(), static_cast<int64_t>(prompt["ids"].size()));
  const std::string second = chat.reply("And of Germany?");
  EXPECT_FALSE(second.empty());
  ASSERT_EQ(chat.messages().size(), 4u);
  EXPECT_EQ(chat.messages()[1], (ChatMessage{"assistant", answer}));
  chat.reset();
  EXPECT_TRUE(chat.messages().empty());
  // With the weights as stored the reply is the quantized model's greedy tokens, decoded.
  ChatSession quantized_chat(llm, ChatTemplate::from_file(llm), {.max_tokens = 12, .sampling = {.temperature = 0.0}});
  const std::string reply = quantized_chat.reply(prompt["messages"][0]["content"]);
  LlamaCache cache = llm.model->make_cache(64);
  std::vector<int64_t> ids =
      generate(*llm.model, cache, prompt["ids"].get<std::vector<int64_t>>(), 12, {.temperature = 0.0}, {2});
  if (!ids.empty() && ids.back() == 2) ids.pop_back();
  EXPECT_EQ(reply, llm.tokenizer->decode(ids));
  ChatSession tiny(llm, ChatTemplate::from_file(llm), {.context = 16});
  expect_error([&] { tiny.reply("Hello there"); }, {"[chat] the conversation", "no longer fits the context of 16"});
}

// A tiny random Llama in every weight type a file may hold (F16, BF16, Q8_0, Q4_0, Q4_1), with a
// tied or its own output layer, grouped-query attention (4 heads, 2 for keys and values) and RoPE
// on half of each head: it loads, keeps block-quantized weights as stored, and gives the logits of
// the same model with its weights dequantized (exactly for the float types, within the activations'
// quantization for the block types).
gguf::File tiny_llama(DType type, bool tied) {
  manual_seed(21);
  gguf::File f;
  f.metadata = {{"general.architecture", "llama"},           {"llama.block_count", uint32_t{2}},
                {"llama.embedding_length", uint32_t{64}},    {"llama.feed_forward_length", uint32_t{96}},
                {"llama.attention.head_count", uint32_t{4}}, {"llama.attention.head_count_kv", uint32_t{2}},
                {"llama.context_length", uint32_t{32}},      {"llama.rope.dimension_count", uint32_t{8}},
                {"llama.rope.freq_base", 10000.0f},          {"llama.attention.layer_norm_rms_epsilon", 1e-5f}};
  const auto weight = [&](int64_t out, int64_t in) {
    const Tensor w = randn({out, in}) * 0.2;
    return is_block_quantized(type) ? quantize(w, type) : w.to(type);
  };
  const auto norm = [] { return 1.0 + randn({64}) * 0.1; };
  f.tensors.emplace_back("token_embd.weight", weight(50, 64));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    f.tensors.emplace_back(p + "attn_norm.weight", norm());
    f.tensors.emplace_back(p + "attn_q.weight", weight(64, 64));
    f.tensors.emplace_back(p + "attn_k.weight", weight(32, 64));
    f.tensors.emplace_back(p + "attn_v.weight", weight(32, 64));
    f.tensors.emplace_back(p + "attn_output.weight", weight(64, 64));
    f.tensors.emplace_back(p + "ffn_norm.weight", norm());
    f.tensors.emplace_back(p + "ffn_gate.weight", weight(96, 64));
    f.tensors.emplace_back(p + "ffn_up.weight", weight(96, 64));
    f.tensors.emplace_back(p + "ffn_down.weight", weight(64, 96));
  }
  f.tensors.emplace_back("output_norm.weight", norm());
  if (!tied) f.tensors.emplace_back("output.weight", weight(50, 64));
  return f;
}

TEST(Llama, EveryWeightTypeLoadsAndMatchesItsDequantizedModel) {
  const Tensor ids = from_vector(std::vector<int64_t>{3, 17, 42, 8, 0, 49, 5}).view({1, -1});
  const autograd::NoGradGuard no_grad;
  for (const DType type : {kFloat16, kBFloat16, kQ8_0, kQ4_0, kQ4_1}) {
    for (const bool tied : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + (tied ? " tied" : " untied"));
      const gguf::File f = tiny_llama(type, tied);
      const std::shared_ptr<Llama> model = Llama::from_gguf(f, "tiny.gguf");
      EXPECT_EQ(model->config.tied_output, tied);
      EXPECT_EQ(model->config.rope_dim, 8);
      EXPECT_EQ(model->config.head_dim, 16);
      const DType stored = model->blk->at<LlamaBlock>(1)->ffn_up->weight.dtype();
      EXPECT_EQ(stored, is_block_quantized(type) ? type : kFloat32);
      const Tensor logits = model->forward(ids);
      EXPECT_EQ(logits.shape(), (Shape{1, 7, 50}));
      const Tensor expected = Llama::from_gguf(f, "tiny.gguf", {.dequantize = true})->forward(ids);
      const double scale = expected.abs().max().item<double>();
      const double error = (logits - expected).abs().max().item<double>() / scale;
      EXPECT_LE(error, is_block_quantized(type) ? 0.05 : 0.0) << error;
      // The cache gives the same logits, a position at a time.
      LlamaCache cache = model->make_cache(16);
      std::vector<Tensor> steps;
      for (int64_t t = 0; t < 7; ++t) steps.push_back(model->forward_cached(ids.narrow(1, t, 1), cache));
      EXPECT_LT((cat(steps, 1) - logits).abs().max().item<double>(), 1e-4 * logits.abs().max().item<double>());
    }
  }
}

TEST(Llama, BadFilesAreClearErrors) {
  expect_error([] { Llama::from_gguf("/nonexistent/model.gguf"); }, {"cannot open '/nonexistent/model.gguf'"});
  expect_error([] { Llama::from_gguf(std::string(EMBER_TEST_DATA_DIR) + "/gguf/mixed.gguf"); },
               {"[Llama]", "general.architecture is \"ember-test\"; ember runs the llama architecture only"});
  // The file's metadata with tensors missing, extra and mis-shaped: one error lists them all.
  gguf::File broken;
  broken.metadata = file().metadata;
  for (const auto& [name, tensor] : file().tensors) {
    if (name == "blk.3.ffn_up.weight") continue;
    broken.tensors.emplace_back(name, name == "output_norm.weight" ? zeros({575}) : tensor);
  }
  broken.tensors.emplace_back("blk.30.attn_q.weight", zeros({4, 4}));
  expect_error([&] { Llama::from_gguf(broken, "broken.gguf"); },
               {"[Llama] broken.gguf: the tensors do not match", "missing (1): blk.3.ffn_up.weight",
                "unexpected (1): blk.30.attn_q.weight", "mis-shaped (1): output_norm.weight is [575], expected [576]"});
  gguf::File no_heads = broken;
  std::erase_if(no_heads.metadata, [](const auto& entry) { return entry.first == "llama.attention.head_count"; });
  expect_error([&] { llama_config(no_heads, "x.gguf"); },
               {"[Llama] x.gguf: the metadata has no 'llama.attention.head_count'"});
  expect_error([&] { quantized().make_cache(8193); }, {"[Llama] a cache holds 1 to 8192 positions"});
  LlamaCache small = quantized().make_cache(4);
  expect_error(
      [&] {
        quantized().forward_cached(ones({1, 5}, kInt64), small);
      },
      {"0 cached and 5 new positions exceed the cache's 4"});
  expect_error([&] { quantized().forward(full({1, 2}, 49152, kInt64)); }, {"token id 49152 is outside the vocabulary"});
}

}  // namespace
}  // namespace ember::models

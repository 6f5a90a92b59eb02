// The serving engine and OpenAI's API over it (ember/train/serve.h) on SmolLM2-135M-Instruct
// (data/smollm2): batched decoding gives each request the tokens it gets alone, whatever else runs
// beside it, however its prompt is cut into chunks and whatever a slot held before; the queue, cancelling
// and draining; and the API's answers to good and bad requests, without sockets (tests/serve talks to
// `ember serve` over HTTP with the openai client).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/models/chat.h"
#include "ember/models/llama.h"
#include "ember/train/serve.h"
#include "test_util.h"

namespace ember::serve {
namespace {

using nlohmann::json;
using test_util::expect_error;

const std::string kModel = std::string(EMBER_DATA_DIR) + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kMiniLM = std::string(EMBER_DATA_DIR) + "/minilm";

const models::LlamaFile& llm() {
  static const models::LlamaFile file = [] {
    if (!std::filesystem::exists(kModel)) ADD_FAILURE() << kModel << " is missing: run scripts/setup";
    return models::load_llama(kModel);
  }();
  return file;
}

// The ids generate() gives a prompt alone, from an empty cache.
std::vector<int64_t> alone(const std::vector<int64_t>& prompt, int64_t max_tokens,
                           const models::SamplingOptions& sampling, const std::vector<int64_t>& stop = {}) {
  models::LlamaCache cache = llm().model->make_cache(static_cast<int64_t>(prompt.size()) + max_tokens);
  return models::generate(*llm().model, cache, prompt, max_tokens, sampling, stop);
}

// A generation that records its ids and outcome, and a future for the outcome.
struct Recorded {
  std::shared_ptr<Generation> generation = std::make_shared<Generation>();
  std::vector<int64_t> ids;
  std::promise<Outcome> promise;
  std::future<Outcome> done = promise.get_future();

  Recorded(std::vector<int64_t> prompt, int64_t max_tokens, models::SamplingOptions sampling) {
    generation->prompt = std::move(prompt);
    generation->max_tokens = max_tokens;
    generation->sampling = sampling;
    generation->on_token = [this](int64_t id) {
      ids.push_back(id);
      return true;
    };
    generation->on_done = [this](const Outcome& o) { promise.set_value(o); };
  }
};

std::vector<int64_t> encode(const std::string& text) { return llm().tokenizer->encode(text); }

// Prompts of different lengths, some sharing a beginning (the slots' cached prefixes get reused), one
// longer than several chunks.
std::vector<std::vector<int64_t>> prompts() {
  const std::string system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n";
  std::string long_text = system;
  for (int i = 0; i < 12; ++i)
    long_text += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  return {encode(system + "What is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"),
          encode(system + "Name a colour.<|im_end|>\n<|im_start|>assistant\n"),
          encode("The capital of France is"),
          encode(long_text + "<|im_end|>\n<|im_start|>assistant\n"),
          encode("Once upon a time"),
          encode(system + "What is 2 + 2?<|im_end|>\n<|im_start|>assistant\nFour"),
          encode("1, 2, 3,"),
          {42}};
}

// Eight requests at once on four slots, prompts in chunks of 16 (24 while nothing generates): each
// gets the ids it gets alone, greedy or sampled with its seed, and a second round (the slots now holding earlier
// prompts, reused where they share a beginning) gives them again.
TEST(ServeEngine, RequestsTogetherGiveWhatEachGivesAlone) {
  Engine engine(llm().model, {.parallel = 4, .context = 256, .queue = 8, .prompt_chunk = 16, .prompt_chunk_alone = 24});
  const std::vector<std::vector<int64_t>> all = prompts();
  std::vector<models::SamplingOptions> sampling;
  for (size_t i = 0; i < all.size(); ++i) {
    sampling.push_back(i % 3 == 2 ? models::SamplingOptions{.temperature = 0.8, .top_p = 0.95, .seed = i}
                                  : models::SamplingOptions{.temperature = 0});
  }
  const int64_t max_tokens = 12;
  std::vector<std::vector<int64_t>> expected;
  for (size_t i = 0; i < all.size(); ++i) expected.push_back(alone(all[i], max_tokens, sampling[i]));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<Recorded>> requests;
    for (size_t i = 0; i < all.size(); ++i) {
      requests.push_back(std::make_unique<Recorded>(all[i], max_tokens, sampling[i]));
      ASSERT_TRUE(engine.submit(requests.back()->generation));
    }
    int64_t cached = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const Outcome outcome = requests[i]->done.get();
      EXPECT_EQ(outcome.finish, Finish::kLength) << outcome.error;
      EXPECT_EQ(outcome.generated_tokens, max_tokens);
      EXPECT_EQ(outcome.prompt_tokens, static_cast<int64_t>(all[i].size()));
      cached += outcome.cached_tokens;
      EXPECT_EQ(requests[i]->ids, expected[i]) << "request " << i << ", round " << round;
    }
    if (round == 1) {
      EXPECT_GT(cached, 0) << "the second round reuses what the slots hold";
    }
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.generated_tokens, 2 * all.size() * max_tokens);
  EXPECT_GT(stats.batched_sequences, stats.steps) << "sequences decoded together";
  EXPECT_EQ(stats.first_token_seconds.count, 2 * all.size());
}

// A long prompt cut into chunks of 7 (its keys past the flash kernel's split size), then the same
// prompt longer by one and by two tokens from a slot that holds it, on 8 threads (where a one-token
// step or a masked chunk could split the keys over threads): the tokens each gives alone.
TEST(ServeEngine, PromptsCutAnywhereGiveWhatOnePassGives) {
  const int threads = get_num_threads();
  set_num_threads(8);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Line " + std::to_string(i) + " of the poem. ";
  const std::vector<int64_t> base = encode(text);
  ASSERT_GT(base.size(), 256u);
  // The last position's logits, from one pass and from chunks of 7: the same bits.
  {
    const autograd::NoGradGuard no_grad;
    models::LlamaCache one = llm().model->make_cache(512), cut = llm().model->make_cache(512);
    const Tensor whole = llm().model->forward_cached(from_vector(base).view({1, -1}), one, true);
    Tensor last;
    for (size_t begin = 0; begin < base.size(); begin += 7) {
      const size_t end = std::min(base.size(), begin + 7);
      const std::vector<int64_t> ids(base.begin() + static_cast<std::ptrdiff_t>(begin),
                                     base.begin() + static_cast<std::ptrdiff_t>(end));
      last = llm().model->forward_cached(from_vector(ids).view({1, -1}), cut, true);
    }
    ASSERT_GE(base.size() % 7, 2u) << "the last chunk must hold two or more positions";
    EXPECT_TRUE(test_util::bitwise_equal(whole, last));
  }
  Engine engine(llm().model, {.parallel = 1, .context = 512, .queue = 4, .prompt_chunk = 7, .prompt_chunk_alone = 7});
  for (size_t extra : {0, 1, 2}) {
    std::vector<int64_t> prompt = base;
    for (size_t i = 0; i < extra; ++i) prompt.push_back(encode(" And")[0]);
    Recorded r(prompt, 4, {.temperature = 0});
    ASSERT_TRUE(engine.submit(r.generation));
    const Outcome o = r.done.get();
    EXPECT_EQ(r.ids, alone(prompt, 4, {.temperature = 0})) << extra << " extra tokens";
    if (extra > 0) {
      EXPECT_EQ(o.cached_tokens, static_cast<int64_t>(prompt.size()) - 2) << "all but the last two reused";
    }
  }
  set_num_threads(threads);
}

// A stop id ends a generation after it is passed on; on_token returning false ends it too; both
// report Finish::kStop, and max_tokens Finish::kLength.
TEST(ServeEngine, StopsAtStopIdsAndWhenAsked) {
  Engine engine(llm().model, {.parallel = 2, .context = 64});
  const std::vector<int64_t> prompt = encode("The capital of France is");
  const std::vector<int64_t> greedy = alone(prompt, 6, {.temperature = 0});
  Recorded by_id(prompt, 6, {.temperature = 0});
  by_id.generation->stop_ids = {greedy[2]};
  Recorded by_callback(prompt, 6, {.temperature = 0});
  by_callback.generation->on_token = [&](int64_t id) {
    by_callback.ids.push_back(id);
    return by_callback.ids.size() < 2;
  };
  ASSERT_TRUE(engine.submit(by_id.generation));
  ASSERT_TRUE(engine.submit(by_callback.generation));
  EXPECT_EQ(by_id.done.get().finish, Finish::kStop);
  EXPECT_EQ(by_id.ids, std::vector<int64_t>(greedy.begin(), greedy.begin() + 3));
  const Outcome o = by_callback.done.get();
  EXPECT_EQ(o.finish, Finish::kStop);
  EXPECT_EQ(o.generated_tokens, 2);
}

// A full queue refuses; a cancelled generation, waiting or running, ends as cancelled and frees its
// slot; drain() waits for what runs and refuses the rest; malformed generations are errors.
TEST(ServeEngine, QueueCancelDrainAndBadGenerations) {
  Engine engine(llm().model, {.parallel = 1, .context = 128, .queue = 1});
  const std::vector<int64_t> prompt = encode("Once upon a time");
  Recorded running(prompt, 100, {.temperature = 0});
  std::promise<void> first_token;
  running.generation->on_token = [&](int64_t id) {
    if (running.ids.empty()) first_token.set_value();
    running.ids.push_back(id);
    return true;
  };
  Recorded waiting(prompt, 4, {.temperature = 0});
  Recorded refused(prompt, 4, {.temperature = 0});
  ASSERT_TRUE(engine.submit(running.generation));
  first_token.get_future().wait();
  ASSERT_TRUE(engine.submit(waiting.generation));
  EXPECT_FALSE(engine.submit(refused.generation)) << "one slot busy, one request waiting: the queue is full";
  waiting.generation->cancel();
  running.generation->cancel();
  EXPECT_EQ(running.done.get().finish, Finish::kCancelled);
  EXPECT_LT(running.ids.size(), 100u);
  EXPECT_EQ(waiting.done.get().finish, Finish::kCancelled);
  EXPECT_TRUE(waiting.ids.empty());

  Recorded last(prompt, 3, {.temperature = 0});
  ASSERT_TRUE(engine.submit(last.generation));
  engine.drain();
  EXPECT_EQ(last.done.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(last.ids, alone(prompt, 3, {.temperature = 0}));
  EXPECT_FALSE(engine.submit(Recorded(prompt, 3, {}).generation)) << "a draining engine takes nothing more";

  Engine other(llm().model, {.parallel = 1, .context = 16});
  expect_error([&] { other.submit(Recorded({}, 3, {}).generation); }, {"[generate] the prompt must hold at least one"});
  expect_error([&] { other.submit(Recorded({49152}, 3, {}).generation); },
               {"token id 49152 is outside the vocabulary"});
  expect_error([&] { other.submit(Recorded(prompt, 0, {}).generation); }, {"[serve] max_tokens must be >= 1"});
  expect_error([&] { other.submit(Recorded(prompt, 14, {}).generation); }, {"do not fit the context of 16"});
  expect_error([&] { other.submit(Recorded(prompt, 2, {.top_p = 2}).generation); }, {"top_p must be in (0, 1]"});
  expect_error([&] { Engine(llm().model, {.parallel = 0}); }, {"[serve] parallel must be in [1, 256]"});
  expect_error([&] { Engine(llm().model, {.context = 1 << 20}); }, {"[serve] the context must be in [2, 8192]"});
}

// --- the API --------------------------------------------------------------------------------------

struct Server {
  Engine engine;
  Api api;
  Server(const ApiOptions& options, std::shared_ptr<const models::SentenceEncoder> encoder = nullptr,
         EngineOptions engine_options = {.parallel = 4, .context = 256, .queue = 16, .prompt_chunk = 32})
      : engine(llm().model, engine_options), api(engine, llm(), options, std::move(encoder)) {}
  Response post(const std::string& path, const std::string& body, const std::string& key = {}) {
    return api.handle({.method = "POST", .path = path, .body = body, .authorization = key});
  }
  json post_json(const std::string& path, const json& body, int status = 200) {
    const Response r = post(path, body.dump());
    EXPECT_EQ(r.status, status) << r.body;
    return json::parse(r.body);
  }
};

// Everything a stream sends, and the JSON of its events but [DONE].
std::vector<json> events(const Response& r, bool* done = nullptr) {
  EXPECT_NE(r.stream, nullptr);
  std::string text;
  std::string chunk;
  while (r.stream->next(chunk)) {
  }
  text = chunk;
  std::vector<json> out;
  size_t at = 0;
  while ((at = text.find("data: ", at)) != std::string::npos) {
    const size_t end = text.find("\n\n", at);
    const std::string data = text.substr(at + 6, end - at - 6);
    if (data == "[DONE]") {
      if (done) *done = true;
    } else {
      out.push_back(json::parse(data));
    }
    at = end;
  }
  return out;
}

// A temperature-0 chat reply is ChatSession's (what `ember chat --prompt` prints) for the same
// messages; streamed, its pieces join into the same text; usage counts the tokens.
TEST(ServeApi, ChatRepliesAsChatSessionDoesAndStreams) {
  Server server({.model_id = "smollm2"});
  const std::string system = "You are a concise assistant. Answer in one sentence.";
  const json request = {
      {"model", "anything"},
      {"messages",
       {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Why is the sky blue?"}}}},
      {"temperature", 0},
      {"max_tokens", 12}};
  const json reply = server.post_json("/v1/chat/completions", request);
  models::ChatSession session(llm(), models::ChatTemplate::from_file(llm()),
                              {.system = system, .max_tokens = 12, .sampling = {.temperature = 0}});
  const std::string expected = session.reply("Why is the sky blue?");
  EXPECT_EQ(reply["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply["choices"][0]["finish_reason"], session.finished() ? "stop" : "length");
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["model"], "smollm2");
  EXPECT_EQ(reply["usage"]["prompt_tokens"], session.prompt_tokens());
  EXPECT_EQ(reply["usage"]["completion_tokens"], session.reply_tokens());
  EXPECT_EQ(reply["usage"]["total_tokens"], session.prompt_tokens() + session.reply_tokens());

  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const Response r = server.post("/v1/chat/completions", streamed.dump());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  bool done = false;
  const std::vector<json> chunks = events(r, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, expected);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], reply["choices"][0]["finish_reason"]);
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], session.reply_tokens());
  EXPECT_GT(chunks.back()["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "the same prompt again";
}

// Completions continue the raw text; a stop string cuts the text before it, streamed or not, even
// when it spans tokens; echo puts the prompt first; a list of token ids is a prompt too.
TEST(ServeApi, CompletionsStopStringsAndEcho) {
  Server server({});
  const std::vector<int64_t> prompt = encode("The capital of France is");
  const std::vector<int64_t> greedy = alone(prompt, 8, {.temperature = 0});
  const std::string text = llm().tokenizer->decode(greedy);
  json request = {{"prompt", "The capital of France is"}, {"temperature", 0}, {"max_tokens", 8}};
  json reply = server.post_json("/v1/completions", request);
  EXPECT_EQ(reply["choices"][0]["text"], text);
  EXPECT_EQ(reply["object"], "text_completion");
  // Stop at the text's second word, whose first characters arrive in one token and the rest later.
  const size_t second = text.find(' ', 1);
  ASSERT_NE(second, std::string::npos) << text;
  const std::string stop = text.substr(second, 3);
  request["stop"] = {stop, "never there"};
  reply = server.post_json("/v1/completions", request);
  EXPECT_EQ(reply["choices"][0]["text"], text.substr(0, second));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
  request["stream"] = true;
  std::string streamed;
  for (const json& c : events(server.post("/v1/completions", request.dump()))) {
    streamed += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text.substr(0, second));
  const json by_ids =
      server.post_json("/v1/completions", {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 8}, {"echo", true}});
  EXPECT_EQ(by_ids["choices"][0]["text"], "The capital of France is" + text);
}

// Embeddings equal SentenceEncoder::encode's (what `ember embed` prints), as floats or base64.
TEST(ServeApi, EmbeddingsAreTheEncodersAsFloatsOrBase64) {
  auto loaded = train::load_model(kMiniLM, "test", {.kinds = {"minilm"}});
  auto encoder = std::make_shared<const models::SentenceEncoder>(std::move(*loaded.encoder));
  Server server({}, encoder);
  const std::vector<std::string> texts = {"A cat sits on the mat.", "Un chat est assis sur le tapis. 🐈"};
  const Tensor expected = encoder->encode(texts).contiguous();
  const float* want = expected.data_ptr<float>();
  const json reply = server.post_json("/v1/embeddings", {{"input", texts}, {"model", "minilm"}});
  ASSERT_EQ(reply["data"].size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<float> got = reply["data"][i]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), expected.size(1));
    for (int64_t j = 0; j < expected.size(1); ++j) ASSERT_EQ(got[j], want[i * expected.size(1) + j]) << i << ", " << j;
  }
  EXPECT_GT(reply["usage"]["prompt_tokens"], 10);
  const json b64 = server.post_json("/v1/embeddings", {{"input", texts[0]}, {"encoding_format", "base64"}});
  const std::string encoded = b64["data"][0]["embedding"];
  // Decoded: the first text's little-endian float32 values (embedded alone: in a batch, its padding
  // to the longest text's length changes the last bits).
  const Tensor alone_vector = encoder->encode({texts[0]}).contiguous();
  const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i + 4 <= encoded.size(); i += 4) {
    uint32_t word = 0;
    for (size_t k = 0; k < 4; ++k) word = (word << 6) | static_cast<uint32_t>(digits.find(encoded[i + k]));
    for (int shift : {16, 8, 0}) bytes.push_back(static_cast<unsigned char>(word >> shift));
  }
  ASSERT_EQ(bytes.size(), static_cast<size_t>(expected.size(1)) * sizeof(float)) << "1,536 bytes: no padding";
  EXPECT_EQ(std::memcmp(bytes.data(), alone_vector.data_ptr<float>(), bytes.size()), 0);
}

// Bad requests: OpenAI's error object, 400 naming the field (or 401, 404, 405, 503), never a crash;
// the server answers normally after them all.
TEST(ServeApi, BadRequestsGetErrorObjectsNamingTheField) {
  Server server({.api_key = "s3cret", .max_body_bytes = 1 << 16}, nullptr,
                {.parallel = 1, .context = 64, .queue = 0, .prompt_chunk = 16});
  const std::string key = "Bearer s3cret";
  const std::string hi = R"("messages": [{"role": "user", "content": "Hi"}])";
  struct Case {
    std::string body;
    int status;
    std::string param;  // "-": null
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", 400, "-", "not valid JSON"},
      {"{\"messages\": [", 400, "-", "not valid JSON"},
      {"[1, 2]", 400, "-", "must be a JSON object"},
      {"{\"messages\": \"Hi\"}", 400, "messages", "messages must be an array of messages, got \"Hi\""},
      {"{\"messages\": []}", 400, "messages", "at least one message"},
      {"{}", 400, "messages", "messages is required"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", 400, "messages[0].role", "got \"tool\""},
      {R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "is required"},
      {R"({"messages": [{"role": 7, "content": "x"}]})", 400, "messages[0].role", "must be a string, got 7"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400, "messages[0].content[0].type",
       "not supported"},
      {R"({"messages": [3]})", 400, "messages[0]", "must be an object"},
      {"{" + hi + R"(, "max_tokens": -1})", 400, "max_tokens", "between 1 and"},
      {"{" + hi + R"(, "max_tokens": 1e300})", 400, "max_tokens", "between 1 and"},
      {"{" + hi + R"(, "max_tokens": 18446744073709551615})", 400, "max_tokens", "between 1 and"},
      {"{" + hi + R"(, "max_tokens": 2.5})", 400, "max_tokens", "must be an integer"},
      {"{" + hi + R"(, "max_tokens": "10"})", 400, "max_tokens", "must be an integer, got \"10\""},
      {"{" + hi + R"(, "max_tokens": 1000})", 400, "max_tokens", "context is 64 tokens"},
      {"{" + hi + R"(, "temperature": 3})", 400, "temperature", "between 0 and 2"},
      {"{" + hi + R"(, "temperature": -1e308})", 400, "temperature", "between 0 and 2"},
      {"{" + hi + R"(, "top_p": true})", 400, "top_p", "must be a number"},
      {"{" + hi + R"(, "seed": 1.5})", 400, "seed", "must be an integer"},
      {"{" + hi + R"(, "stop": [1]})", 400, "stop", "a string or an array of strings"},
      {"{" + hi + R"(, "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "at most 4"},
      {"{" + hi + R"(, "stream": "yes"})", 400, "stream", "must be a boolean"},
      {"{" + hi + R"(, "n": 2})", 400, "n", "not supported"},
      {"{" + hi + R"(, "logprobs": true})", 400, "logprobs", "not supported"},
      {"{" + hi + R"(, "tools": [{"type": "function"}]})", 400, "tools", "not supported"},
      {"{" + hi + R"(, "model": ["x"]})", 400, "model", "must be a string"},
      {R"({"messages": [{"role": "user", "content": ")" + std::string(300, 'x') + "\"}]}", 400, "messages",
       "context is 64 tokens"},
      {std::string(70000, ' '), 400, "-", "more than this server's limit of 65536"},
      {std::string(5000, '[') + std::string(5000, ']'), 400, "-", "must be a JSON object"},
  };
  for (const Case& c : cases) {
    const Response r = server.post("/v1/chat/completions", c.body, key);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 200) << " -> " << r.body;
    const json error = json::parse(r.body)["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["param"], c.param == "-" ? json(nullptr) : json(c.param)) << r.body;
    EXPECT_NE(error["message"].get<std::string>().find(c.message), std::string::npos)
        << "expected \"" << c.message << "\" in " << r.body;
  }
  // Completions and embeddings.
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": {"a": 1}})", key).status, 400);
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": [99999999]})", key).status, 400);
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": ""})", key).status, 400);
  EXPECT_EQ(json::parse(server.post("/v1/embeddings", R"({"input": "x"})", key).body)["error"]["param"], "model");
  // Keys, paths and methods.
  EXPECT_EQ(server.post("/v1/chat/completions", "{" + hi + "}").status, 401);
  EXPECT_EQ(server.post("/v1/chat/completions", "{" + hi + "}", "Bearer s3cre").status, 401);
  EXPECT_EQ(server.post("/v1/chat/completions", "{" + hi + "}", "s3cret").status, 401);
  EXPECT_EQ(server.api.handle({.method = "GET", .path = "/health"}).status, 401);
  EXPECT_EQ(server.api.handle({.method = "GET", .path = "/nope", .authorization = key}).status, 404);
  const Response wrong = server.api.handle({.method = "GET", .path = "/v1/chat/completions", .authorization = key});
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers, (std::vector<std::pair<std::string, std::string>>{{"Allow", "POST"}}));
  // Still answering; unknown fields are ignored, as OpenAI's clients add their own.
  const Response ok = server.post("/v1/chat/completions", "{" + hi + R"(, "max_tokens": 2, "user": "x", "x": 1})", key);
  EXPECT_EQ(ok.status, 200) << ok.body;
  const std::string metrics = server.api.handle({.method = "GET", .path = "/metrics", .authorization = key}).body;
  EXPECT_NE(metrics.find("ember_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 31"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("ember_requests_total{endpoint=\"other\",status=\"404\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("ember_generated_tokens_total 2"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE ember_time_to_first_token_seconds histogram"), std::string::npos);
}

// A busy server answers 503 with Retry-After; a draining one 503 too, and /health says so.
TEST(ServeApi, BusyAndDrainingServersAnswer503) {
  Server server({}, nullptr, {.parallel = 1, .context = 128, .queue = 0, .prompt_chunk = 16});
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 100, "stream": true})";
  const Response first = server.post("/v1/completions", body);
  ASSERT_EQ(first.status, 200);
  std::string chunk;
  ASSERT_TRUE(first.stream->next(chunk));  // it holds the only slot
  const Response busy = server.post("/v1/completions", body);
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(json::parse(busy.body)["error"]["code"], "server_busy");
  EXPECT_EQ(busy.headers, (std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}}));
  first.stream->cancel();  // the client is gone
  std::thread drain([&] { server.engine.drain(); });
  while (!server.engine.draining()) std::this_thread::yield();
  EXPECT_EQ(server.post("/v1/completions", body).status, 503);
  EXPECT_EQ(server.api.handle({.method = "GET", .path = "/health"}).status, 503);
  drain.join();
  while (first.stream->next(chunk)) {
  }
  EXPECT_NE(chunk.find("data: [DONE]"), std::string::npos);
}

TEST(ServeApi, KeysCompareWhole) {
  EXPECT_TRUE(same_key("abc", "abc"));
  EXPECT_FALSE(same_key("abd", "abc"));
  EXPECT_FALSE(same_key("ab", "abc"));
  EXPECT_FALSE(same_key("abcd", "abc"));
  EXPECT_FALSE(same_key("", "abc"));
  EXPECT_TRUE(same_key("", ""));
  EXPECT_FALSE(same_key(std::string("ab\0", 3), "ab"));
}

}  // namespace
}  // namespace ember::serve

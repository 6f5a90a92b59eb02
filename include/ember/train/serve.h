// Serving a Llama-family model to many clients at once: the engine that decodes their sequences
// together (continuous batching), and OpenAI's HTTP API over it (chat, completions, embeddings,
// models, health, metrics) as requests and responses independent of any HTTP library. `ember
// serve` puts the Api behind cpp-httplib; a test or another server can call Api::handle directly.
//
//   models::LlamaFile llm = models::load_llama("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
//   serve::Engine engine(llm.model, {.parallel = 4, .context = 2048});
//   serve::Api api(engine, llm, {.model_id = "smollm2"});
//   serve::Response r = api.handle({.method = "POST", .path = "/v1/chat/completions",
//                                   .body = R"({"messages": [{"role": "user", "content": "Hi"}]})"});
//
// Note [batched serving]: every step of the engine's thread runs one Llama::decode over all the
// sequences that are generating (one token each, each in its own KV cache: the slot), then at most
// one chunk of one waiting prompt. A sequence joins the batch when its prompt is done and leaves it
// when it stops, so a long prompt delays the others by one chunk per step, never by its whole
// length: a short chunk while others generate (32 positions add about as much to their step as
// the step itself takes, on SmolLM2-135M), a long one when none does (the first token sooner). The decode kernels sum
// every row in one order whatever the batch (Note [interleaved weights]), and a prompt's keys and values do not depend
// on how it is cut into chunks, so a temperature-0 request gets the same tokens alone or among others.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ember/models/bert.h"
#include "ember/models/chat.h"
#include "ember/models/language_model.h"
#include "ember/models/llama.h"

namespace ember::serve {

/// Counts of observations in cumulative buckets (Prometheus's histogram).
struct Histogram {
  std::vector<double> bounds;    // upper bounds, increasing
  std::vector<uint64_t> counts;  // counts[i]: observations <= bounds[i]; one more slot for +Inf
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
  /// The smallest bound with at least q of the observations below it (the +Inf bucket: the last bound).
  double quantile(double q) const;
};

struct EngineOptions {
  int parallel = 4;                  // sequences decoding together, each with a KV cache of `context` positions
  int64_t context = 2048;            // positions per sequence: prompt + generated tokens
  int64_t queue = 64;                // requests waiting for a slot beyond those; a full queue refuses more
  int64_t prompt_chunk = 32;         // prompt tokens processed per step while other sequences generate
  int64_t prompt_chunk_alone = 512;  // ... and while none does
};

/// How a generation ended.
enum class Finish {
  kStop,       // a stop id was drawn, or on_token ended it (a stop string)
  kLength,     // max_tokens were drawn
  kCancelled,  // Generation::cancel(), or the engine stopped
  kError,      // the model failed (Outcome::error says why)
};

struct Outcome {
  Finish finish = Finish::kStop;
  int64_t prompt_tokens = 0;     // the prompt's ids
  int64_t cached_tokens = 0;     // of them, those whose keys the slot already held (not processed again)
  int64_t generated_tokens = 0;  // ids drawn, a final stop id included
  std::string error{};
};

/// One request to the engine. The callbacks run on the engine's thread, must be quick and must not
/// throw; on_done runs exactly once, last.
struct Generation {
  std::vector<int64_t> prompt;  // at least one id
  int64_t max_tokens = 1;       // >= 1; prompt + max_tokens - 1 must fit the context
  models::SamplingOptions sampling{};
  std::vector<int64_t> stop_ids;  // drawing one ends the generation (it is passed to on_token first)
  /// Each id as it is drawn; returning false ends the generation (Finish::kStop).
  std::function<bool(int64_t id)> on_token;
  std::function<void(const Outcome&)> on_done;
  /// Ends the generation at the engine's next step (from any thread): Finish::kCancelled.
  void cancel() { cancelled.store(true, std::memory_order_relaxed); }
  std::atomic<bool> cancelled{false};
};

/// Counters and gauges of an engine, for /metrics.
struct EngineStats {
  int slots = 0;
  int active = 0;  // slots holding a sequence
  int64_t queued = 0;
  uint64_t prompt_tokens = 0;      // processed (cached ones not counted)
  uint64_t generated_tokens = 0;   // drawn
  uint64_t steps = 0;              // decode steps (one Llama::decode each)
  uint64_t batched_sequences = 0;  // sum over decode steps of the sequences in the step
  Histogram queue_seconds, first_token_seconds, token_seconds;
};

/// The batched decoding loop (Note [batched serving]) on its own thread.
class Engine {
 public:
  Engine(std::shared_ptr<models::Llama> model, EngineOptions options = {});
  ~Engine();  // cancels what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a generation; false when the queue is full or the engine drains (nothing is called).
  /// An ember::Error when it is malformed: no prompt, an id outside the vocabulary, max_tokens < 1,
  /// more positions than the context.
  bool submit(std::shared_ptr<Generation> generation);
  /// Runs fn on the engine's thread between two steps and returns (or rethrows) its result: work
  /// that uses the thread pool (embeddings) without competing with the decoding.
  void run(const std::function<void()>& fn);
  /// Refuses new generations from now on and waits until every queued and running one has ended.
  void drain();
  bool draining() const { return draining_.load(); }
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  const models::Llama& model() const { return *model_; }

 private:
  struct Slot;
  void loop();
  bool admit(std::unique_lock<std::mutex>& lock);
  void step();
  void prefill(Slot& slot, int64_t chunk);
  void deliver(Slot& slot, const Tensor& logits);
  void finish(Slot& slot, Finish finish, const std::string& error = {});
  int64_t free_slots() const;  // mutex_ held (the slots themselves are the engine thread's alone)

  std::shared_ptr<models::Llama> model_;
  EngineOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  struct Waiting;
  std::deque<Waiting> queue_;
  struct Job;
  std::deque<std::shared_ptr<Job>> jobs_;
  EngineStats stats_;  // under mutex_
  std::atomic<bool> draining_{false};
  bool stopping_ = false;
  uint64_t admitted_ = 0;  // order of admission: the oldest waiting prompt goes first
  std::thread thread_;
};

/// An HTTP request as the Api reads it.
struct Request {
  std::string method{};  // "GET", "POST", ...
  std::string path{};    // without the query
  std::string body{};
  std::string authorization{};  // the Authorization header's value, empty when absent
};

/// What the Api answers: a complete body, or a stream of server-sent events the transport writes as
/// they come (Response::stream).
class EventStream {
 public:
  /// Blocks until the next chunk of the stream (appended to out) or its end (false).
  bool next(std::string& out);
  /// The client is gone: ends the generation (its slot is free at the next step).
  void cancel();

  // The producer's side (the engine's thread).
  void push(std::string chunk);
  void close();
  std::function<void()> on_cancel;

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::string> chunks_;
  bool closed_ = false;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body{};
  std::vector<std::pair<std::string, std::string>> headers{};  // beyond Content-Type
  std::shared_ptr<EventStream> stream{};                       // set: body is empty, the events follow
};

struct ApiOptions {
  std::string model_id = "ember";             // /v1/models and the responses name the model so
  std::string embedding_model_id = "minilm";  // the same for the embedding model, when there is one
  std::string api_key{};                      // non-empty: every request needs "Authorization: Bearer <key>"
  int64_t max_body_bytes = 4 << 20;           // larger bodies are refused
  int64_t max_embedding_inputs = 256;         // texts per /v1/embeddings request
  /// The sampling when a request does not say (OpenAI's defaults: temperature 1, top_p 1).
  models::SamplingOptions sampling{};
};

/// OpenAI's API over an engine (Note [batched serving]): POST /v1/chat/completions and
/// /v1/completions (streamed as server-sent events with "stream": true), POST /v1/embeddings (with
/// an encoder), GET /v1/models, /health and /metrics (Prometheus text). Errors are OpenAI's error
/// objects ({"error": {"message", "type", "param", "code"}}) naming the field at fault. Thread-safe:
/// the transport calls handle() from as many threads as it likes.
class Api {
 public:
  Api(Engine& engine, models::LlamaFile llm, ApiOptions options,
      std::shared_ptr<const models::SentenceEncoder> encoder = nullptr);
  Response handle(const Request& request);
  /// The Prometheus text of /metrics.
  std::string metrics() const;
  const ApiOptions& options() const { return options_; }

 private:
  Response route(const Request& request, std::string& endpoint);
  Response generate(const Request& request, bool chat);
  Response embeddings(const Request& request);
  Response models() const;
  void count(const std::string& endpoint, int status, double seconds);

  Engine& engine_;
  models::LlamaFile llm_;
  std::optional<models::ChatTemplate> template_;
  ApiOptions options_;
  std::shared_ptr<const models::SentenceEncoder> encoder_;
  std::vector<int64_t> end_ids_;  // the end-of-text and end-of-turn ids: a chat reply stops at them
  int64_t created_;               // when the server started (/v1/models)
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  Histogram request_seconds_;
  std::atomic<uint64_t> next_id_{0};
};

/// Whether `given` equals `key`, in a time that depends only on key's length.
bool same_key(const std::string& given, const std::string& key);

}  // namespace ember::serve

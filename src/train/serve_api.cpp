// OpenAI's HTTP API over the batched engine (ember/train/serve.h): request validation, the chat
// template, stop strings, server-sent events, embeddings and the Prometheus metrics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/json_text.h"
#include "clock.h"
#include "ember/error.h"
#include "ember/ops.h"
#include "ember/train/serve.h"

namespace ember::serve {

using nlohmann::json;

bool same_key(const std::string& given, const std::string& key) {
  // Every byte of the key is compared, whatever `given` is: the time tells nothing of where they differ.
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    const char g = i < given.size() ? given[i] : '\0';
    diff = static_cast<unsigned char>(diff | (static_cast<unsigned char>(g) ^ static_cast<unsigned char>(key[i])));
  }
  return diff == 0;
}

// --- streams --------------------------------------------------------------------------------------

bool EventStream::next(std::string& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !chunks_.empty() || closed_; });
  if (chunks_.empty()) return false;
  while (!chunks_.empty()) {  // everything ready, in one write
    out += chunks_.front();
    chunks_.pop_front();
  }
  return true;
}

void EventStream::cancel() {
  if (on_cancel) on_cancel();
}

void EventStream::push(std::string chunk) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    chunks_.push_back(std::move(chunk));
  }
  ready_.notify_all();
}

void EventStream::close() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
}

namespace {

// --- errors ---------------------------------------------------------------------------------------

// A request the API refuses: the HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message{};
  std::string param{};  // the field at fault, empty for none
  std::string code{};   // empty for none
  std::string type = "invalid_request_error";
};

// JSON text that never throws: bytes that are not UTF-8 (which only an error message quoting a
// malformed body can hold) become U+FFFD.
std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

Response error_response(const ApiError& e) {
  json error = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return Response{.status = e.status, .body = dump(json{{"error", error}})};
}

ApiError invalid(std::string param, std::string message, std::string code = "invalid_value") {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param), .code = std::move(code)};
}

// --- reading a request body -----------------------------------------------------------------------

// A JSON object's fields, each read as the type OpenAI documents or refused naming the field.
class Fields {
 public:
  Fields(const json& object, std::string prefix = {}) : object_(object), prefix_(std::move(prefix)) {}

  // nullptr when absent or null.
  const json* find(const std::string& name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string name(const std::string& field) const { return prefix_ + field; }

  std::optional<double> number(const std::string& field, double min, double max) const {
    const json* v = find(field);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) throw wrong_type(field, "a number", *v);
    const double x = v->get<double>();
    if (!(x >= min && x <= max)) {
      throw invalid(name(field), name(field) + " must be between " + text(min) + " and " + text(max) + ", got " +
                                     detail::json_text(*v));
    }
    return x;
  }
  std::optional<int64_t> integer(const std::string& field, int64_t min, int64_t max) const {
    const json* v = find(field);
    if (v == nullptr) return std::nullopt;
    const bool integral = v->is_number_integer() || (v->is_number_float() && std::isfinite(v->get<double>()) &&
                                                     std::trunc(v->get<double>()) == v->get<double>());
    if (!integral) throw wrong_type(field, "an integer", *v);
    // Integers beyond int64 (a uint64, or a float) are out of range either way.
    const double approx = v->get<double>();
    if (approx < static_cast<double>(min) || approx > static_cast<double>(max) ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max))) {
      throw invalid(name(field), name(field) + " must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + ", got " + detail::json_text(*v));
    }
    const auto x = v->is_number_float() ? static_cast<int64_t>(approx) : v->get<int64_t>();
    if (x < min || x > max) {
      throw invalid(name(field), name(field) + " must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + ", got " + detail::json_text(*v));
    }
    return x;
  }
  std::optional<bool> boolean(const std::string& field) const {
    const json* v = find(field);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) throw wrong_type(field, "a boolean", *v);
    return v->get<bool>();
  }
  std::optional<std::string> string(const std::string& field) const {
    const json* v = find(field);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) throw wrong_type(field, "a string", *v);
    return v->get<std::string>();
  }
  // A field ember does not implement: refused unless absent, null or `neutral` (false, 1, an empty
  // list...), so that a request never silently gets something other than what it asked for.
  void unsupported(const std::string& field, const std::function<bool(const json&)>& neutral) const {
    const json* v = find(field);
    if (v != nullptr && !neutral(*v)) {
      throw invalid(name(field), name(field) + " is not supported by this server", "unsupported_parameter");
    }
  }

  ApiError wrong_type(const std::string& field, const std::string& expected, const json& got) const {
    return invalid(name(field), name(field) + " must be " + expected + ", got " + detail::json_text(got),
                   "invalid_type");
  }

 private:
  static std::string text(double x) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", x);
    return buffer;
  }
  const json& object_;
  std::string prefix_;
};

json parse_body(const Request& request, int64_t max_bytes) {
  if (static_cast<int64_t>(request.body.size()) > max_bytes) {
    throw ApiError{.status = 400,
                   .message = "the request body is " + std::to_string(request.body.size()) +
                              " bytes, more than this server's limit of " + std::to_string(max_bytes),
                   .code = "request_too_large"};
  }
  json body;
  try {
    body = json::parse(request.body);
  } catch (const json::exception& e) {
    throw invalid("", std::string("the request body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!body.is_object()) {
    throw invalid("", "the request body must be a JSON object, got " + detail::json_text(body), "invalid_json");
  }
  return body;
}

// The sampling options of a request, over the server's defaults.
models::SamplingOptions sampling_options(const Fields& f, models::SamplingOptions s) {
  s.temperature = f.number("temperature", 0, 2).value_or(s.temperature);
  s.top_p = f.number("top_p", 0, 1).value_or(s.top_p);
  if (s.top_p == 0) {  // no nucleus at all: the most likely token
    s.top_p = 1;
    s.temperature = 0;
  }
  s.top_k = f.integer("top_k", 0, std::numeric_limits<int32_t>::max()).value_or(s.top_k);
  s.min_p = f.number("min_p", 0, 1).value_or(s.min_p);
  // llama.cpp's server calls it repeat_penalty, Hugging Face's repetition_penalty.
  s.repetition_penalty = f.number("repeat_penalty", 1e-3, 100).value_or(s.repetition_penalty);
  s.repetition_penalty = f.number("repetition_penalty", 1e-3, 100).value_or(s.repetition_penalty);
  s.frequency_penalty = f.number("frequency_penalty", -2, 2).value_or(s.frequency_penalty);
  s.presence_penalty = f.number("presence_penalty", -2, 2).value_or(s.presence_penalty);
  s.penalty_last_n = f.integer("repeat_last_n", 0, 1 << 20).value_or(s.penalty_last_n);
  if (const auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  return s;
}

// "stop": a string or up to 4 strings (empty ones mean nothing).
std::vector<std::string> stop_strings(const Fields& f) {
  const json* v = f.find("stop");
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) throw f.wrong_type("stop", "a string or an array of strings", *v);
  if (v->size() > 4) throw invalid("stop", "stop holds at most 4 sequences, got " + std::to_string(v->size()));
  for (const json& item : *v) {
    if (!item.is_string()) throw f.wrong_type("stop", "a string or an array of strings", item);
    if (!item.get<std::string>().empty()) out.push_back(item.get<std::string>());
  }
  return out;
}

// The fields both generation endpoints refuse unless neutral.
void refuse_unsupported(const Fields& f) {
  f.unsupported("n", [](const json& v) { return v.is_number() && v.get<double>() == 1; });
  f.unsupported("best_of", [](const json& v) { return v.is_number() && v.get<double>() == 1; });
  f.unsupported("logprobs", [](const json& v) { return v.is_boolean() && !v.get<bool>(); });
  f.unsupported("top_logprobs", [](const json& v) { return v.is_number() && v.get<double>() == 0; });
  f.unsupported("logit_bias", [](const json& v) { return v.is_object() && v.empty(); });
  f.unsupported("tools", [](const json& v) { return v.is_array() && v.empty(); });
  f.unsupported("functions", [](const json& v) { return v.is_array() && v.empty(); });
  f.unsupported("tool_choice", [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; });
  f.unsupported("suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); });
  f.unsupported("response_format", [](const json& v) {
    return v.is_object() && v.contains("type") && v["type"].is_string() && v["type"].get<std::string>() == "text";
  });
}

// The text of a chat message's content: a string, or a list of text parts.
std::string message_content(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw invalid(field, field + " must be a string or an array of text parts, got " + detail::json_text(content),
                  "invalid_type");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string name = field + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      throw invalid(name, name + " must be an object with a \"type\", got " + detail::json_text(part), "invalid_type");
    }
    if (part["type"].get<std::string>() != "text") {
      throw invalid(
          name + ".type",
          "content parts of type " + detail::json_text(part["type"]) + " are not supported by this server (text only)",
          "unsupported_parameter");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      throw invalid(name + ".text", name + ".text must be a string", "invalid_type");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<models::ChatMessage> chat_messages(const Fields& f) {
  const json* v = f.find("messages");
  if (v == nullptr) throw invalid("messages", "messages is required", "missing_required_parameter");
  if (!v->is_array()) throw f.wrong_type("messages", "an array of messages", *v);
  if (v->empty()) throw invalid("messages", "messages must hold at least one message");
  std::vector<models::ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid(name, name + " must be an object, got " + detail::json_text(m), "invalid_type");
    const Fields message(m, name + ".");
    const std::optional<std::string> role = message.string("role");
    if (!role) throw invalid(name + ".role", name + ".role is required", "missing_required_parameter");
    std::string as = *role == "developer" ? "system" : *role;  // OpenAI's newer name for the system message
    if (as != "system" && as != "user" && as != "assistant") {
      throw invalid(name + ".role",
                    name + ".role must be system, developer, user or assistant, got " + detail::json_text(m["role"]));
    }
    message.unsupported("tool_calls", [](const json& x) { return x.is_array() && x.empty(); });
    const json* content = message.find("content");
    if (content == nullptr) {
      throw invalid(name + ".content", name + ".content is required", "missing_required_parameter");
    }
    out.push_back({as, message_content(*content, name + ".content")});
  }
  return out;
}

// The chunk of `held` that can be shown: all of it but a tail that may be the start of a stop
// string. Sets `stopped` and cuts the text where a stop string begins.
std::string releasable(std::string& held, const std::vector<std::string>& stops, bool& stopped, bool final) {
  size_t cut = std::string::npos;
  for (const std::string& s : stops) cut = std::min(cut, held.find(s));
  if (cut != std::string::npos) {
    stopped = true;
    std::string out = held.substr(0, cut);
    held.clear();
    return out;
  }
  size_t keep = 0;  // the longest tail of `held` that is a proper prefix of a stop string
  if (!final) {
    for (const std::string& s : stops) {
      for (size_t n = std::min(held.size(), s.size() - 1); n > keep; --n) {
        if (held.compare(held.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
  }
  std::string out = held.substr(0, held.size() - keep);
  held.erase(0, held.size() - keep);
  return out;
}

const char* finish_reason(Finish finish) {
  switch (finish) {
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kError:
      return "error";
  }
  return "stop";
}

std::string base64(const void* data, size_t size) {
  static const char* const kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t b0 = bytes[i], b1 = i + 1 < size ? bytes[i + 1] : 0, b2 = i + 2 < size ? bytes[i + 2] : 0;
    const uint32_t word = (b0 << 16) | (b1 << 8) | b2;
    out += kDigits[(word >> 18) & 63];
    out += kDigits[(word >> 12) & 63];
    out += i + 1 < size ? kDigits[(word >> 6) & 63] : '=';
    out += i + 2 < size ? kDigits[word & 63] : '=';
  }
  return out;
}

// A completion's prompt: a string, a list of token ids, or a list of one of them; its text in `text`.
std::vector<int64_t> completion_prompt(const Fields& f, const data::BpeTokenizer& tokenizer, int64_t vocab,
                                       std::string& text) {
  std::vector<int64_t> prompt;
  const json* p = f.find("prompt");
  if (p == nullptr) throw invalid("prompt", "prompt is required", "missing_required_parameter");
  const json* value = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) value = &(*p)[0];
  if (value->is_string()) {
    text = value->get<std::string>();
    prompt = tokenizer.encode(text);
  } else if (value->is_array() && !value->empty() &&
             std::all_of(value->begin(), value->end(), [](const json& x) { return x.is_number_integer(); })) {
    for (const json& x : *value) {
      // nlohmann reads a non-negative integer as unsigned: one beyond int64 is out of range too.
      const int64_t id =
          x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(vocab) ? -1 : x.get<int64_t>();
      if (id < 0 || id >= vocab) {
        throw invalid("prompt", "prompt holds token id " + detail::json_text(x) + ", outside the vocabulary of " +
                                    std::to_string(vocab));
      }
      prompt.push_back(id);
    }
    text = tokenizer.decode(prompt);
  } else {
    throw invalid("prompt",
                  "prompt must be a string, a list of token ids, or a list of one of them (one prompt per "
                  "request), got " +
                      detail::json_text(*p),
                  "invalid_type");
  }
  return prompt;
}

// max_tokens, or the rest of the context when the request does not say: an error naming the field
// when the prompt and the reply do not fit.
int64_t checked_max_tokens(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t context, bool chat) {
  const char* prompt_field = chat ? "messages" : "prompt";
  if (prompt_tokens >= context) {
    throw invalid(prompt_field,
                  "the " + std::string(prompt_field) + " take " + std::to_string(prompt_tokens) +
                      " tokens, and this server's context is " + std::to_string(context) +
                      " tokens per request: shorten them or start the server with a larger --context",
                  "context_length_exceeded");
  }
  if (!max_tokens) max_tokens = context - prompt_tokens + 1;
  if (prompt_tokens + *max_tokens - 1 > context) {
    throw invalid("max_tokens",
                  "this server's context is " + std::to_string(context) + " tokens per request, and the " +
                      std::to_string(prompt_tokens) + " tokens of the " + prompt_field + " leave room for at most " +
                      std::to_string(context - prompt_tokens + 1) + " new tokens; max_tokens asks for " +
                      std::to_string(*max_tokens),
                  "context_length_exceeded");
  }
  return *max_tokens;
}

json usage_json(const Outcome& o) {
  return json{{"prompt_tokens", o.prompt_tokens},
              {"completion_tokens", o.generated_tokens},
              {"total_tokens", o.prompt_tokens + o.generated_tokens},
              {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

// One generation as the API follows it on the engine's thread: the text so far, the stop strings,
// and either a stream of events or a waiting handler.
struct Reply {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool chat = true;
  bool stream = false;
  bool usage_in_stream = false;
  std::vector<std::string> stops;
  std::vector<int64_t> end_ids;  // ids that end the reply without being text
  std::optional<data::BpeDecoder> decoder;
  std::string held;  // decoded text not yet released (it may begin a stop string)
  std::string text;  // released text
  bool stopped = false;
  std::shared_ptr<EventStream> events;
  // The non-streaming handler waits for the outcome.
  std::mutex mutex;
  std::condition_variable done_signal;
  std::optional<Outcome> outcome;

  json chunk(const json& choice) const {
    return json{{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"system_fingerprint", "ember"},
                {"choices", json::array({choice})}};
  }
  void send(const json& value) const { events->push("data: " + dump(value) + "\n\n"); }
  void send_text(const std::string& piece) const {
    if (piece.empty()) return;
    if (chat) {
      send(chunk({{"index", 0}, {"delta", {{"content", piece}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    } else {
      send(chunk({{"index", 0}, {"text", piece}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    }
  }
  // The end: the text held back, and for a stream its last events; then the waiting handler's outcome.
  void finish(const Outcome& done) {
    if (!stopped) add(decoder->flush(), true);
    const bool stop = stopped || done.finish == Finish::kStop;
    const char* reason = stop ? "stop" : finish_reason(done.finish);
    if (stream) {
      if (done.finish == Finish::kError) {
        send({{"error", {{"message", done.error}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
      } else if (done.finish != Finish::kCancelled) {
        if (chat) {
          send(chunk({{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}));
        } else {
          send(chunk({{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", reason}}));
        }
        if (usage_in_stream) {
          json last = chunk(json::object());
          last["choices"] = json::array();
          last["usage"] = usage_json(done);
          send(last);
        }
      }
      events->push("data: [DONE]\n\n");
      events->close();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex);
      outcome = done;
      if (stop) outcome->finish = Finish::kStop;
    }
    done_signal.notify_all();
  }
  // The whole answer of a request that was not streamed.
  json completion(const Outcome& done) const {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(done.finish)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["text"] = text;
    }
    return {{"id", id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"system_fingerprint", "ember"},
            {"choices", json::array({choice})},
            {"usage", usage_json(done)}};
  }
  // A piece of decoded text: what can be shown is shown (streamed) or kept; false once a stop string matched.
  bool add(const std::string& piece, bool final) {
    held += piece;
    const std::string out = releasable(held, stops, stopped, final);
    text += out;
    if (stream) send_text(out);
    return !stopped;
  }
};

std::string endpoint_label(const std::string& path) {
  for (const char* known :
       {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health", "/metrics"}) {
    if (path == known) return known;
  }
  return "other";  // any other path: one label, so that random paths cannot grow the metrics
}

}  // namespace

// --- the API --------------------------------------------------------------------------------------

Api::Api(Engine& engine, models::LlamaFile llm, ApiOptions options,
         std::shared_ptr<const models::SentenceEncoder> encoder)
    : engine_(engine),
      llm_(std::move(llm)),
      options_(std::move(options)),
      encoder_(std::move(encoder)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      request_seconds_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {
  EMBER_CHECK(llm_.model != nullptr && llm_.tokenizer != nullptr, "[serve] the model file is not loaded");
  EMBER_CHECK(options_.max_body_bytes > 0 && options_.max_embedding_inputs > 0,
              "[serve] the body and input limits must be positive");
  models::Sampler check(options_.sampling);
  try {
    template_ = models::ChatTemplate::from_file(llm_);
  } catch (const Error&) {  // no chat template ember knows: /v1/chat/completions says so
  }
  std::vector<std::optional<int64_t>> ends = {llm_.tokenizer->options().eos_id};
  if (template_) ends.push_back(llm_.tokenizer->token_to_id(template_->end_of_turn()));
  for (const std::optional<int64_t>& id : ends) {
    if (id && std::find(end_ids_.begin(), end_ids_.end(), *id) == end_ids_.end()) end_ids_.push_back(*id);
  }
}

Response Api::handle(const Request& request) {
  const auto start = train::Clock::now();
  std::string endpoint = endpoint_label(request.path);
  Response response;
  try {
    response = route(request, endpoint);
  } catch (const ApiError& e) {
    response = error_response(e);
  } catch (const std::exception& e) {
    response = error_response({.status = 500, .message = e.what(), .type = "server_error"});
  }
  count(endpoint, response.status, train::seconds_since(start));
  return response;
}

void Api::count(const std::string& endpoint, int status, double seconds) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  request_seconds_.observe(seconds);
}

Response Api::route(const Request& request, std::string& endpoint) {
  if (!options_.api_key.empty()) {
    const std::string prefix = "Bearer ";
    const bool bearer = request.authorization.compare(0, prefix.size(), prefix) == 0;
    if (!bearer || !same_key(request.authorization.substr(prefix.size()), options_.api_key)) {
      throw ApiError{.status = 401,
                     .message = bearer ? "Incorrect API key provided"
                                       : "This server needs an API key: send \"Authorization: Bearer <key>\"",
                     .code = "invalid_api_key"};
    }
  }
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route kRoutes[] = {{"/v1/chat/completions", "POST"},
                                  {"/v1/completions", "POST"},
                                  {"/v1/embeddings", "POST"},
                                  {"/v1/models", "GET"},
                                  {"/health", "GET"},
                                  {"/metrics", "GET"}};
  const auto route =
      std::find_if(std::begin(kRoutes), std::end(kRoutes), [&](const Route& r) { return request.path == r.path; });
  if (route == std::end(kRoutes)) {
    throw ApiError{.status = 404, .message = "no such endpoint: " + endpoint, .code = "unknown_url"};
  }
  if (request.method != route->method) {
    ApiError e{.status = 405,
               .message = std::string(route->path) + " takes " + route->method + ", not " + request.method,
               .code = "method_not_allowed"};
    Response r = error_response(e);
    r.headers.emplace_back("Allow", route->method);
    return r;
  }
  if (endpoint == "/v1/chat/completions") return generate(request, true);
  if (endpoint == "/v1/completions") return generate(request, false);
  if (endpoint == "/v1/embeddings") return embeddings(request);
  if (endpoint == "/v1/models") return models();
  if (endpoint == "/metrics") {
    return Response{.content_type = "text/plain; version=0.0.4; charset=utf-8", .body = metrics()};
  }
  // /health
  if (engine_.draining()) {
    return Response{.status = 503, .body = dump(json{{"status", "draining"}}), .headers = {{"Retry-After", "5"}}};
  }
  return Response{.body = dump(json{{"status", "ok"}})};
}

Response Api::models() const {
  json data = json::array();
  data.push_back({{"id", options_.model_id}, {"object", "model"}, {"created", created_}, {"owned_by", "ember"}});
  if (encoder_) {
    data.push_back(
        {{"id", options_.embedding_model_id}, {"object", "model"}, {"created", created_}, {"owned_by", "ember"}});
  }
  return Response{.body = dump(json{{"object", "list"}, {"data", data}})};
}

Response Api::generate(const Request& request, bool chat) {
  const json body = parse_body(request, options_.max_body_bytes);
  const Fields f(body);
  f.string("model");  // any name is taken (clients send theirs); it must be a string
  refuse_unsupported(f);
  const bool stream = f.boolean("stream").value_or(false);
  bool usage_in_stream = false;
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) throw f.wrong_type("stream_options", "an object", *so);
    usage_in_stream = Fields(*so, "stream_options.").boolean("include_usage").value_or(false);
  }
  const models::SamplingOptions sampling = sampling_options(f, options_.sampling);
  const std::vector<std::string> stops = stop_strings(f);
  const int64_t context = engine_.options().context;
  std::optional<int64_t> max_tokens = f.integer("max_completion_tokens", 1, std::numeric_limits<int32_t>::max());
  if (!max_tokens) max_tokens = f.integer("max_tokens", 1, std::numeric_limits<int32_t>::max());

  // The prompt's ids.
  std::vector<int64_t> prompt;
  std::string prompt_text;  // completions: echoed with "echo"
  bool echo = false;
  if (chat) {
    if (!template_) {
      throw invalid("messages", "this model has no chat template ember knows: use /v1/completions",
                    "unsupported_model");
    }
    prompt = llm_.tokenizer->encode(template_->render(chat_messages(f), true));
  } else {
    echo = f.boolean("echo").value_or(false);
    prompt = completion_prompt(f, *llm_.tokenizer, engine_.model().config.vocab_size, prompt_text);
    if (prompt.empty()) throw invalid("prompt", "prompt is empty: give at least one token of text");
  }
  const int64_t new_tokens = checked_max_tokens(static_cast<int64_t>(prompt.size()), max_tokens, context, chat);

  auto reply = std::make_shared<Reply>();
  char id[40];
  std::snprintf(id, sizeof id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl", static_cast<unsigned long long>(created_),
                static_cast<unsigned long long>(next_id_.fetch_add(1)));
  reply->id = id;
  reply->created = static_cast<int64_t>(std::time(nullptr));
  reply->model = options_.model_id;
  reply->chat = chat;
  reply->stream = stream;
  reply->usage_in_stream = usage_in_stream;
  reply->stops = stops;
  reply->end_ids = chat ? end_ids_ : std::vector<int64_t>{};
  if (!chat && llm_.tokenizer->options().eos_id) reply->end_ids.push_back(*llm_.tokenizer->options().eos_id);
  reply->decoder.emplace(*llm_.tokenizer);
  if (echo) reply->text = prompt_text;
  if (stream) reply->events = std::make_shared<EventStream>();

  auto generation = std::make_shared<Generation>();
  generation->prompt = std::move(prompt);
  generation->max_tokens = new_tokens;
  generation->sampling = sampling;
  generation->stop_ids = reply->end_ids;
  generation->on_token = [reply](int64_t token) {
    if (std::find(reply->end_ids.begin(), reply->end_ids.end(), token) != reply->end_ids.end()) return true;
    return reply->add(reply->decoder->push(token), false);
  };
  generation->on_done = [reply](const Outcome& outcome) { reply->finish(outcome); };

  if (stream) {
    // The role comes first, as OpenAI's streams start.
    if (chat) {
      reply->send(reply->chunk({{"index", 0},
                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}}));
    }
    // Weakly: the generation's callbacks hold the reply, which holds the stream.
    reply->events->on_cancel = [weak = std::weak_ptr<Generation>(generation)] {
      if (const std::shared_ptr<Generation> g = weak.lock()) g->cancel();
    };
  }
  if (!engine_.submit(generation)) {
    const bool draining = engine_.draining();
    const EngineStats stats = engine_.stats();
    Response r = error_response(
        {.status = 503,
         .message = draining ? "the server is shutting down"
                             : "the server is busy: " + std::to_string(stats.queued) +
                                   " requests are waiting for a slot; retry after the time in Retry-After",
         .code = draining ? "server_shutting_down" : "server_busy",
         .type = "server_error"});
    r.headers.emplace_back("Retry-After", draining ? "30" : "1");
    return r;
  }
  if (stream) {
    return Response{
        .content_type = "text/event-stream", .headers = {{"Cache-Control", "no-cache"}}, .stream = reply->events};
  }
  std::unique_lock<std::mutex> lock(reply->mutex);
  reply->done_signal.wait(lock, [&] { return reply->outcome.has_value(); });
  const Outcome outcome = *reply->outcome;
  if (outcome.finish == Finish::kError) {
    throw ApiError{.status = 500, .message = outcome.error, .type = "server_error"};
  }
  if (outcome.finish == Finish::kCancelled) {
    throw ApiError{.status = 503,
                   .message = "the server stopped before the reply was complete",
                   .code = "server_shutting_down",
                   .type = "server_error"};
  }
  return Response{.body = dump(reply->completion(outcome))};
}

Response Api::embeddings(const Request& request) {
  const json body = parse_body(request, options_.max_body_bytes);
  const Fields f(body);
  f.string("model");
  f.string("user");
  if (!encoder_) {
    throw invalid("model", "this server has no embedding model: start it with --embedding-model", "model_not_found");
  }
  const json* input = f.find("input");
  if (input == nullptr) throw invalid("input", "input is required", "missing_required_parameter");
  std::vector<std::string> texts;
  if (input->is_string()) {
    texts.push_back(input->get<std::string>());
  } else if (input->is_array() && !input->empty() &&
             std::all_of(input->begin(), input->end(), [](const json& x) { return x.is_string(); })) {
    if (static_cast<int64_t>(input->size()) > options_.max_embedding_inputs) {
      throw invalid("input", "input holds " + std::to_string(input->size()) +
                                 " texts, more than this server's limit of " +
                                 std::to_string(options_.max_embedding_inputs));
    }
    for (const json& x : *input) texts.push_back(x.get<std::string>());
  } else {
    throw invalid("input", "input must be a string or a non-empty array of strings, got " + detail::json_text(*input),
                  "invalid_type");
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) throw invalid("input", "input[" + std::to_string(i) + "] is empty");
  }
  const std::string format = f.string("encoding_format").value_or("float");
  if (format != "float" && format != "base64") {
    throw invalid("encoding_format",
                  "encoding_format must be \"float\" or \"base64\", got " + detail::json_text(body["encoding_format"]));
  }
  const int64_t dims = encoder_->model().config.hidden_size;
  if (const auto wanted = f.integer("dimensions", 1, std::numeric_limits<int32_t>::max()); wanted && *wanted != dims) {
    throw invalid("dimensions",
                  "this embedding model gives " + std::to_string(dims) + " dimensions, not " + std::to_string(*wanted),
                  "unsupported_parameter");
  }
  int64_t tokens = 0;
  for (const std::string& text : texts) {
    tokens += static_cast<int64_t>(encoder_->tokenizer().encode(text, encoder_->max_seq_length()).size());
  }
  Tensor vectors;
  engine_.run([&] { vectors = encoder_->encode(texts).contiguous(); });
  const float* v = vectors.data_ptr<float>();
  json data = json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    const float* row = v + static_cast<int64_t>(i) * dims;
    json embedding = format == "base64" ? json(base64(row, static_cast<size_t>(dims) * sizeof(float)))
                                        : json(std::vector<float>(row, row + dims));
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  const json out = {{"object", "list"},
                    {"data", data},
                    {"model", options_.embedding_model_id},
                    {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  return Response{.body = dump(out)};
}

// --- /metrics -------------------------------------------------------------------------------------

namespace {

void write_histogram(std::ostringstream& out, const std::string& name, const std::string& help, const Histogram& h) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out << name << "_bucket{le=\"" << h.bounds[i] << "\"} " << cumulative << '\n';
  }
  out << name << "_bucket{le=\"+Inf\"} " << h.count << '\n';
  out << name << "_sum " << h.sum << '\n' << name << "_count " << h.count << '\n';
}

template <class T>
void write_value(std::ostringstream& out, const std::string& name, const char* type, const std::string& help, T value) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
}

}  // namespace

std::string Api::metrics() const {
  const EngineStats s = engine_.stats();
  std::ostringstream out;
  out.precision(9);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    out << "# HELP ember_requests_total HTTP requests answered, by endpoint and status.\n"
           "# TYPE ember_requests_total counter\n";
    for (const auto& [key, n] : requests_) {
      out << "ember_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
    }
    write_histogram(out, "ember_request_duration_seconds", "Time to answer a request (a stream: until its headers).",
                    request_seconds_);
  }
  write_value(out, "ember_prompt_tokens_total", "counter", "Prompt tokens processed (cached ones not counted).",
              s.prompt_tokens);
  write_value(out, "ember_generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
  write_value(out, "ember_decode_steps_total", "counter", "Batched decode steps.", s.steps);
  write_value(out, "ember_decode_sequences_total", "counter", "Sequences summed over the decode steps.",
              s.batched_sequences);
  write_value(out, "ember_queue_depth", "gauge", "Requests waiting for a slot.", s.queued);
  write_value(out, "ember_slots_busy", "gauge", "Slots holding a sequence.", s.active);
  write_value(out, "ember_slots", "gauge", "Slots (--parallel).", s.slots);
  write_histogram(out, "ember_queue_wait_seconds", "Time from a request's arrival to its slot.", s.queue_seconds);
  write_histogram(out, "ember_time_to_first_token_seconds", "Time from a request's arrival to its first token.",
                  s.first_token_seconds);
  write_histogram(out, "ember_inter_token_seconds", "Time between two tokens of a sequence.", s.token_seconds);
  return out.str();
}

}  // namespace ember::serve

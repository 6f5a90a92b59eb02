// Llama GGUF files with their tokenizer and chat template, and conversations (ember/models/chat.h).
#include "ember/models/chat.h"

#include <algorithm>
#include <filesystem>

#include "ember/autograd.h"
#include "ember/error.h"

namespace ember::models {
namespace {

std::optional<int64_t> optional_id(const gguf::File& file, const std::string& key) {
  const gguf::Value* value = file.find_value(key);
  if (value == nullptr) return std::nullopt;
  return value->as_integer();
}

}  // namespace

data::BpeTokenizer bpe_tokenizer(const gguf::File& file, const std::string& what) {
  const gguf::Value* model = file.find_value("tokenizer.ggml.model");
  EMBER_CHECK(model != nullptr, "[tokenizer] ", what, ": the metadata has no tokenizer.ggml.model");
  EMBER_CHECK(model->type() == gguf::ValueType::kString && model->as_string() == "gpt2", "[tokenizer] ", what,
              ": tokenizer.ggml.model is ", *model, "; ember reads byte-level BPE (\"gpt2\") vocabularies only");
  try {
    std::vector<std::string> tokens = file.value("tokenizer.ggml.tokens").to_vector<std::string>();
    std::vector<int32_t> types = file.find_value("tokenizer.ggml.token_type") != nullptr
                                     ? file.value("tokenizer.ggml.token_type").to_vector<int32_t>()
                                     : std::vector<int32_t>(tokens.size(), 1);
    std::vector<std::string> merges = file.value("tokenizer.ggml.merges").to_vector<std::string>();
    data::BpeOptions options;
    if (const gguf::Value* pre = file.find_value("tokenizer.ggml.pre"); pre != nullptr) options.pre = pre->as_string();
    options.bos_id = optional_id(file, "tokenizer.ggml.bos_token_id");
    options.eos_id = optional_id(file, "tokenizer.ggml.eos_token_id");
    if (const gguf::Value* add_bos = file.find_value("tokenizer.ggml.add_bos_token"); add_bos != nullptr) {
      options.add_bos = add_bos->as_bool();
    }
    return data::BpeTokenizer(std::move(tokens), std::move(types), std::move(merges), std::move(options));
  } catch (const Error& e) {
    EMBER_FAIL("[tokenizer] ", what, ": ", e.what());
  }
}

LlamaFile load_llama(const std::string& path, const LlamaLoadOptions& options) {
  EMBER_CHECK(std::filesystem::exists(path), "[Llama] ", path,
              " does not exist (scripts/setup downloads the default "
              "model, SmolLM2-135M-Instruct, to data/smollm2/)");
  const gguf::File file = gguf::map(path);
  LlamaFile out;
  out.path = path;
  out.model = Llama::from_gguf(file, path, options);
  out.tokenizer = std::make_shared<data::BpeTokenizer>(bpe_tokenizer(file, path));
  EMBER_CHECK(out.tokenizer->vocab_size() == out.model->config.vocab_size, "[Llama] ", path, ": the tokenizer has ",
              out.tokenizer->vocab_size(), " tokens but the model ", out.model->config.vocab_size);
  if (const gguf::Value* chat = file.find_value("tokenizer.chat_template"); chat != nullptr) {
    out.chat_template = chat->as_string();
  }
  return out;
}

// --- templates ------------------------------------------------------------------------------------

ChatTemplate ChatTemplate::named(const std::string& name) {
  EMBER_CHECK(name == "chatml", "[chat] unknown chat template \"", name, "\"; ember knows: chatml");
  ChatTemplate t;
  t.name_ = "chatml";
  t.end_of_turn_ = "<|im_end|>";
  return t;
}

ChatTemplate ChatTemplate::recognise(const std::string& jinja, const std::string& what) {
  EMBER_CHECK(!jinja.empty(), "[chat] ", what,
              " has no chat template (tokenizer.chat_template); name one with "
              "--chat-template chatml");
  EMBER_CHECK(jinja.find("<|im_start|>") != std::string::npos && jinja.find("<|im_end|>") != std::string::npos,
              "[chat] ", what,
              "'s chat template is not one ember recognises (it renders ChatML only; it does not "
              "run Jinja); if the model was trained on ChatML, pass --chat-template chatml");
  ChatTemplate t = named("chatml");
  // A default system message is a literal "<|im_start|>system\n...<|im_end|>" in the template; the
  // one that renders a message's own content has an expression there instead.
  const std::string open = "<|im_start|>system\n";
  for (size_t at = jinja.find(open); at != std::string::npos; at = jinja.find(open, at + 1)) {
    const size_t begin = at + open.size(), end = jinja.find("<|im_end|>", begin);
    if (end == std::string::npos) break;
    const std::string text = jinja.substr(begin, end - begin);
    if (text.find_first_of("{}'\"+") == std::string::npos) {
      t.default_system_ = text;
      break;
    }
  }
  return t;
}

ChatTemplate ChatTemplate::from_file(const LlamaFile& file) { return recognise(file.chat_template, file.path); }

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && (messages.empty() || messages[0].role != "system")) {
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    EMBER_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "[chat] unknown role \"", m.role,
                "\" (expected system, user or assistant)");
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// --- conversations --------------------------------------------------------------------------------

ChatSession::ChatSession(LlamaFile llm, ChatTemplate chat_template, ChatOptions options)
    : llm_(std::move(llm)), template_(std::move(chat_template)), options_(std::move(options)) {
  EMBER_CHECK(llm_.model != nullptr && llm_.tokenizer != nullptr, "[chat] the model file is not loaded");
  EMBER_CHECK(options_.max_tokens > 0, "[chat] max_tokens must be positive, got ", options_.max_tokens);
  cache_ = llm_.model->make_cache(options_.context);
  for (const std::optional<int64_t> id :
       {llm_.tokenizer->options().eos_id, llm_.tokenizer->token_to_id(template_.end_of_turn())}) {
    if (id && std::find(stop_.begin(), stop_.end(), *id) == stop_.end()) stop_.push_back(*id);
  }
  reset();
}

void ChatSession::reset() {
  messages_.clear();
  if (!options_.system.empty()) messages_.push_back({"system", options_.system});
}

std::string ChatSession::reply(const std::string& message, const std::function<void(const std::string&)>& on_text) {
  std::vector<ChatMessage> conversation = messages_;
  conversation.push_back({"user", message});
  const std::vector<int64_t> prompt = llm_.tokenizer->encode(template_.render(conversation, true));
  const int64_t room = cache_.capacity() - static_cast<int64_t>(prompt.size()) + 1;
  EMBER_CHECK(room >= 1, "[chat] the conversation (", prompt.size(), " tokens) no longer fits the context of ",
              cache_.capacity(), ": start over (/reset) or give a larger --context");
  data::BpeDecoder decoder(*llm_.tokenizer);
  std::string text;
  std::vector<int64_t> out = generate(*llm_.model, cache_, prompt, std::min(options_.max_tokens, room),
                                      options_.sampling, stop_, [&](int64_t id) {
                                        if (std::find(stop_.begin(), stop_.end(), id) != stop_.end()) return;
                                        const std::string piece = decoder.push(id);
                                        text += piece;
                                        if (on_text && !piece.empty()) on_text(piece);
                                      });
  const std::string rest = decoder.flush();
  text += rest;
  if (on_text && !rest.empty()) on_text(rest);
  prompt_tokens_ = static_cast<int64_t>(prompt.size());
  reply_tokens_ = static_cast<int64_t>(out.size());
  finished_ = !out.empty() && std::find(stop_.begin(), stop_.end(), out.back()) != stop_.end();
  messages_ = std::move(conversation);
  messages_.push_back({"assistant", text});
  return text;
}

}  // namespace ember::models

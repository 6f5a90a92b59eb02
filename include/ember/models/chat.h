// Chatting with a Llama-family GGUF model: the file's model, byte-level BPE tokenizer and chat
// template loaded together, the ChatML template, and a conversation that keeps its KV cache
// across turns.
//
//   models::LlamaFile llm = models::load_llama("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
//   models::ChatSession chat(llm, models::ChatTemplate::from_file(llm), {.sampling = {.temperature = 0}});
//   std::string answer = chat.reply("What is the capital of France?", [](const std::string& text) {
//     std::cout << text << std::flush;                      // streamed as the tokens come
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/gguf.h"
#include "ember/models/llama.h"
#include "ember/tokenizer.h"

namespace ember::models {

// A Llama GGUF file's model, tokenizer and chat template.
struct LlamaFile {
  std::string path;
  std::shared_ptr<Llama> model;
  std::shared_ptr<data::BpeTokenizer> tokenizer;
  std::string chat_template;  // tokenizer.chat_template, empty when the file has none
};

// Reads all three; errors name the path (a missing file suggests scripts/setup when it is the
// default model's).
LlamaFile load_llama(const std::string& path, const LlamaLoadOptions& options = {});

// The byte-level BPE tokenizer of a GGUF file's tokenizer.ggml.* metadata (tokenizer.ggml.model
// "gpt2"; SentencePiece files are refused with a clear error).
data::BpeTokenizer bpe_tokenizer(const gguf::File& file, const std::string& what);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  bool operator==(const ChatMessage&) const = default;
};

// A chat template ember renders itself. Templates are recognised, not interpreted (ember has no
// Jinja engine): ChatML ("<|im_start|>role\ncontent<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" to prompt the reply), with the default system message a template
// inserts when the conversation starts without one (SmolLM2's does).
class ChatTemplate {
 public:
  // The template of a file: its tokenizer.chat_template recognised; an ember::Error naming the
  // file when there is none or it is of a kind ember does not know (--chat-template chatml
  // overrides it).
  static ChatTemplate from_file(const LlamaFile& file);
  static ChatTemplate recognise(const std::string& jinja, const std::string& what);
  // By name: "chatml" (no default system message).
  static ChatTemplate named(const std::string& name);

  // The text of the conversation; with add_generation_prompt, the start of the assistant's turn.
  // Roles other than system, user and assistant are an ember::Error.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  const std::string& name() const { return name_; }
  const std::string& default_system() const { return default_system_; }
  // The text that ends a turn ("<|im_end|>"): generation stops at its token.
  const std::string& end_of_turn() const { return end_of_turn_; }

 private:
  std::string name_;
  std::string default_system_;
  std::string end_of_turn_;
};

struct ChatOptions {
  std::string system{};        // the system message; empty: the template's default (if any)
  int64_t context = 2048;      // positions of the KV cache: the whole conversation must fit
  int64_t max_tokens = 512;    // per reply
  SamplingOptions sampling{};  // seed included: the same seed and messages give the same replies
};

// A conversation: each reply() renders the whole conversation, encodes it and generates; the KV
// cache already holds every earlier turn, so only the new message is processed.
class ChatSession {
 public:
  ChatSession(LlamaFile llm, ChatTemplate chat_template, ChatOptions options = {});
  // Adds the user's message, generates the assistant's reply (each piece of text to on_text as
  // its tokens complete it), adds the reply and returns it. A conversation that no longer fits the
  // context is an ember::Error (reset() starts over).
  std::string reply(const std::string& message, const std::function<void(const std::string&)>& on_text = {});
  // Forgets the turns (the system message stays).
  void reset();
  const std::vector<ChatMessage>& messages() const { return messages_; }
  // The last reply's token counts and whether it ended at the end of its turn.
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t reply_tokens() const { return reply_tokens_; }
  bool finished() const { return finished_; }

 private:
  LlamaFile llm_;
  ChatTemplate template_;
  ChatOptions options_;
  LlamaCache cache_;
  std::vector<ChatMessage> messages_;
  std::vector<int64_t> stop_;
  int64_t prompt_tokens_ = 0, reply_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace ember::models

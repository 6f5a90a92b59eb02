// `ember chat`: a conversation with a Llama-family GGUF model (models::ChatSession), its reply
// streamed to stdout as the tokens come. With --prompt, one reply; otherwise a line per message from
// stdin until /exit or the end of input (/reset starts over). Rates go to stderr.
#include "ember/models/chat.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli_util.h"

namespace ember::cli {
namespace {

struct ChatCliOptions {
  std::string model = "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";  // scripts/setup fetches it
  std::string prompt;
  std::string chat_template;  // empty: the file's
  // SmolLM2's recommended sampling, with llama.cpp's classic repeat penalty: a 135M model left
  // without one falls into loops ("la femme, la femme, ...").
  models::ChatOptions chat{.sampling = {.temperature = 0.2, .top_p = 0.9, .repetition_penalty = 1.1}};
  int threads = 0;
};

int run_chat(const ChatCliOptions& o) {
  use_threads(o.threads);
  const auto load_start = Clock::now();
  models::LlamaFile llm = models::load_llama(o.model);
  models::ChatTemplate chat_template =
      o.chat_template.empty() ? models::ChatTemplate::from_file(llm) : models::ChatTemplate::named(o.chat_template);
  models::ChatSession session(std::move(llm), std::move(chat_template), o.chat);
  const bool interactive = o.prompt.empty() && isatty(STDIN_FILENO) != 0;
  if (interactive)
    std::fprintf(stderr, "loaded %s in %.0f ms; /reset starts over, /exit or Ctrl-D ends\n", o.model.c_str(),
                 milliseconds_since(load_start));
  const auto answer = [&](const std::string& message) {
    const auto start = Clock::now();
    session.reply(message, [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    std::fflush(stdout);
    const double seconds = seconds_since(start);
    std::fprintf(stderr, "[%lld prompt tokens, %lld tokens in %.2fs: %.1f tokens/s%s]\n",
                 static_cast<long long>(session.prompt_tokens()), static_cast<long long>(session.reply_tokens()),
                 seconds, seconds > 0 ? static_cast<double>(session.reply_tokens()) / seconds : 0.0,
                 session.finished() ? "" : "; cut at --max-tokens");
  };
  if (!o.prompt.empty()) {
    answer(o.prompt);
    return 0;
  }
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      session.reset();
      continue;
    }
    if (line.empty()) continue;
    answer(line);
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<ChatCliOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a Llama-family GGUF model (SmolLM2-135M-Instruct by default)");
  cmd->add_option("--model", o->model, "A Llama-family GGUF file")->capture_default_str();
  cmd->add_option("--system", o->chat.system, "The system message (default: the template's, if any)");
  cmd->add_option("--prompt", o->prompt, "One message: print the reply and exit (default: read messages from stdin)");
  cmd->add_option("--context", o->chat.context, "Positions of the KV cache: the whole conversation must fit")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->chat.max_tokens, "Longest reply, in tokens")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--chat-template", o->chat_template,
                  "Render the conversation as this template (chatml) instead of the file's");
  add_sampling_options(cmd, o->chat.sampling);
  add_threads(cmd, o->threads);
  commands.add(cmd, [o] { return run_chat(*o); });
}

}  // namespace ember::cli

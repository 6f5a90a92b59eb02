// `ember generate`: rebuilds a GPT or Mamba model from a checkpoint of `ember train gpt|ssm --save`
// or a GGUF file of `ember quantize` (train::load_model) and streams a continuation of the prompt to
// stdout, a character at a time: the GPT with its KV cache (or, with --no-cache, recomputing the
// window per character), the Mamba model with its recurrent state. The rate goes to stderr so stdout
// holds only the text.
#include <cstdio>
#include <limits>

#include "cli_util.h"
#include "ember/train/registry.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  int64_t tokens = 500;
  models::SamplingOptions sampling{.temperature = 0.8};
  int threads = 0;
  bool no_cache = false;
};

int run_generate(const GenerateOptions& o) {
  use_threads(o.threads);
  const train::LoadedModel loaded = train::load_model(
      o.checkpoint, "generate", {.kinds = {"gpt", "ssm"}, .expected = "a language model from `ember train gpt|ssm`"});
  const bool gpt = loaded.kind == "gpt";
  EMBER_CHECK(gpt || !o.no_cache, "[generate] --no-cache applies to GPT checkpoints; ", o.checkpoint,
              " holds a Mamba model, which carries a fixed-size state instead of a cache");
  const data::CharTokenizer& tokenizer = *loaded.tokenizer;
  std::vector<int64_t> prompt;
  try {
    prompt = tokenizer.encode(o.prompt);
  } catch (const Error& e) {
    EMBER_FAIL("[generate] --prompt cannot be encoded with the checkpoint's vocabulary: ", e.what());
  }
  EMBER_CHECK(!prompt.empty(), "[generate] --prompt must not be empty");
  EMBER_CHECK(!gpt || static_cast<int64_t>(prompt.size()) <= loaded.context, "[generate] the prompt has ",
              prompt.size(), " characters, more than the model's context of ", loaded.context);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  const auto start = Clock::now();
  const std::vector<int64_t> out = train::generate_text(
      loaded.as<models::LanguageModel>(), prompt, o.tokens, o.sampling, !o.no_cache, [&](int64_t id) {
        std::fputc(tokenizer.vocabulary()[static_cast<size_t>(id)], stdout);
        std::fflush(stdout);
      });
  const double seconds = seconds_since(start);
  std::printf("\n");
  std::fprintf(stderr, "%zu tokens in %.2fs: %.0f tokens/s (%s)\n", out.size(), seconds,
               seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0,
               !gpt         ? "recurrent state"
               : o.no_cache ? "no cache"
                            : "KV cache");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd =
      app.add_subcommand("generate", "Stream text from a checkpoint of `ember train gpt` or `ember train ssm`");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "A checkpoint written by `ember train gpt|ssm --save`, or a GGUF file of `ember quantize`")
      ->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: a newline)");
  cmd->add_option("--tokens", o->tokens, "Characters to generate")->check(kNonNegativeCount)->capture_default_str();
  cmd->add_option("--temperature", o->sampling.temperature, "Sampling temperature (0: greedy)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely (0: all)")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling: the most likely tokens summing to p")
      ->check(finite_number(std::numeric_limits<double>::min(), 1, "a number in (0, 1]"))
      ->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Seed of the sampler")->capture_default_str();
  add_threads(cmd, o->threads);
  cmd->add_flag("--no-cache", o->no_cache, "Recompute the whole window for every token");
  commands.add(cmd, [o] { return run_generate(*o); });
}

}  // namespace ember::cli

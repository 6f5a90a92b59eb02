// `ember generate`: rebuilds a GPT or Mamba model from a checkpoint of `ember train gpt|ssm --save`
// or a GGUF file of `ember quantize` (architecture and vocabulary from its metadata) and streams a
// continuation of the prompt to stdout, a character at a time: the GPT with its KV cache (or, with
// --no-cache, recomputing the window per character), the Mamba model with its recurrent state. The
// rate goes to stderr so stdout holds only the text.
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "cli_util.h"
#include "ember/ember.h"
#include "ember/models/gpt.h"
#include "train_gpt.h"

namespace ember::cli {

int run_generate(const GenerateOptions& o) {
  EMBER_CHECK(!o.checkpoint.empty(), "[generate] --checkpoint is required");
  if (o.threads > 0) set_num_threads(o.threads);
  const TextModelCheckpoint checkpoint = load_text_model_checkpoint(o.checkpoint, "generate");
  const bool gpt = checkpoint.source.kind == "gpt";
  EMBER_CHECK(gpt || !o.no_cache, "[generate] --no-cache applies to GPT checkpoints; ", o.checkpoint,
              " holds a Mamba model, which carries a fixed-size state instead of a cache");
  models::LanguageModel& model = *checkpoint.model;
  const data::CharTokenizer& tokenizer = checkpoint.tokenizer;
  std::vector<int64_t> prompt;
  try {
    prompt = tokenizer.encode(o.prompt);
  } catch (const Error& e) {
    EMBER_FAIL("[generate] --prompt cannot be encoded with the checkpoint's vocabulary: ", e.what());
  }
  EMBER_CHECK(!prompt.empty(), "[generate] --prompt must not be empty");
  EMBER_CHECK(!gpt || static_cast<int64_t>(prompt.size()) <= checkpoint.context, "[generate] the prompt has ",
              prompt.size(), " characters, more than the model's context of ", checkpoint.context);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  const auto start = Clock::now();
  const std::vector<int64_t> out = generate_text(
      model, prompt, o.tokens, {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed},
      !o.no_cache, [&](int64_t id) {
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

}  // namespace ember::cli

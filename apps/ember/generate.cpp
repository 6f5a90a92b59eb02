// `ember generate`: rebuilds a GPT or Mamba model from a checkpoint of `ember train gpt|ssm --save`
// or a GGUF file of `ember quantize` (train::load_model) and streams a continuation of the prompt to
// stdout, a character at a time: the GPT with its KV cache (or, with --no-cache, recomputing the
// window per character), the Mamba model with its recurrent state. With --model, a Llama-family
// GGUF file (models::load_llama) continues the prompt token by token, its raw text (no chat
// template). The rate goes to stderr so stdout holds only the text.
#include <cstdio>

#include "cli_util.h"
#include "ember/models/chat.h"
#include "ember/train/registry.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string model;  // a Llama-family GGUF file instead of a checkpoint
  std::string prompt = "\n";
  int64_t tokens = 500;
  models::SamplingOptions sampling{.temperature = 0.8};
  int threads = 0;
  bool no_cache = false;
  std::string device = "cpu";
};

int run_llm_generate(const GenerateOptions& o) {
  EMBER_CHECK(device_option(o.device).is_cpu(), "[generate] --device ", o.device,
              ": Llama-family GGUF models run on the CPU for now (their quantized products have no CUDA kernels)");
  const models::LlamaFile llm = models::load_llama(o.model);
  const std::vector<int64_t> prompt = llm.tokenizer->encode(o.prompt);
  EMBER_CHECK(!prompt.empty(), "[generate] --prompt must not be empty");
  const int64_t context = std::min<int64_t>(llm.model->config.context_length,
                                            static_cast<int64_t>(prompt.size()) + std::max<int64_t>(o.tokens, 1));
  models::LlamaCache cache = llm.model->make_cache(context);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  data::BpeDecoder decoder(*llm.tokenizer);
  const auto start = Clock::now();
  const std::vector<int64_t> eos =
      llm.tokenizer->options().eos_id ? std::vector<int64_t>{*llm.tokenizer->options().eos_id} : std::vector<int64_t>{};
  const std::vector<int64_t> out =
      models::generate(*llm.model, cache, prompt, o.tokens, o.sampling, eos, [&](int64_t id) {
        const std::string text = decoder.push(id);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      });
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  const double seconds = seconds_since(start);
  std::printf("\n");
  std::fprintf(stderr, "%zu prompt tokens, %zu tokens in %.2fs: %.1f tokens/s\n", prompt.size(), out.size(), seconds,
               seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0);
  return 0;
}

int run_generate(const GenerateOptions& o) {
  use_threads(o.threads);
  EMBER_CHECK(o.checkpoint.empty() != o.model.empty(),
              "[generate] give either --checkpoint (a model of `ember "
              "train gpt|ssm`) or --model (a Llama-family GGUF file)");
  if (!o.model.empty()) return run_llm_generate(o);
  const train::LoadedModel loaded = train::load_model(
      o.checkpoint, "generate", {.kinds = {"gpt", "ssm"}, .expected = "a language model from `ember train gpt|ssm`"});
  const bool gpt = loaded.kind == "gpt";
  const Device device = device_option(o.device);
  if (!device.is_cpu()) {
    EMBER_CHECK(gpt, "[generate] --device ", o.device, ": ", o.checkpoint,
                " holds a Mamba model, whose selective scan has no CUDA kernel yet; GPT checkpoints run there");
    loaded.model->to(device);
  }
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
      app.add_subcommand("generate", "Stream text from a checkpoint of `ember train gpt|ssm` or a Llama GGUF file");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "A checkpoint written by `ember train gpt|ssm --save`, or a GGUF file of `ember quantize`");
  cmd->add_option("--model", o->model, "A Llama-family GGUF file (e.g. data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)");
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: a newline)");
  cmd->add_option("--tokens", o->tokens, "Characters (tokens with --model) to generate")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  add_sampling_options(cmd, o->sampling);
  add_threads(cmd, o->threads);
  cmd->add_flag("--no-cache", o->no_cache, "Recompute the whole window for every token");
  cmd->add_option("--device", o->device, "Where the model runs: cpu, cuda or cuda:N (GPT checkpoints)")
      ->capture_default_str();
  commands.add(cmd, [o] { return run_generate(*o); });
}

}  // namespace ember::cli

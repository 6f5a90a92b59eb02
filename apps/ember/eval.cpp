// `ember eval gpt|mnist`: a checkpoint's validation loss or test accuracy, measured as `ember train`
// measures it (train::text_split_loss, train::classification_accuracy), from a safetensors checkpoint
// or a GGUF file of `ember quantize`.
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli_util.h"
#include "ember/train/registry.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct EvalOptions {
  std::string checkpoint{};
  std::string data{};
  int64_t batches = 20;                 // `ember train gpt`'s default --eval-batches
  std::optional<int64_t> batch_size{};  // unset: the run's, from the checkpoint
  std::optional<uint64_t> seed{};       // unset: the run's, from the checkpoint
  int threads = 0;
  bool json = false;
};

// "q8_0 GGUF", "f32 safetensors".
std::string file_label(const train::Checkpoint& c) { return c.quantization + " " + std::string(format_name(c.format)); }

nlohmann::json file_json(const train::Checkpoint& c) {
  return {{"checkpoint", c.path}, {"format", format_name(c.format)}, {"quantization", c.quantization}};
}

// The seed a checkpoint of `ember train gpt` records (any uint64), or nullopt.
std::optional<uint64_t> run_seed(const train::Checkpoint& checkpoint) {
  const auto it = checkpoint.settings.find("seed");
  if (it == checkpoint.settings.end()) return std::nullopt;
  const std::string& text = it->second;
  EMBER_CHECK(!text.empty() && text.size() <= 20 && text.find_first_not_of("0123456789") == std::string::npos,
              "[eval gpt] checkpoint ", checkpoint.path, " has no valid seed entry (got \"", text, "\")");
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    EMBER_FAIL("[eval gpt] checkpoint ", checkpoint.path, " has no valid seed entry (got \"", text, "\")");
  }
}

int run_eval_gpt(const EvalOptions& o) {
  use_threads(o.threads);
  const auto start = Clock::now();
  const train::LoadedModel loaded = train::load_model(
      o.checkpoint, "eval gpt", {.kinds = {"gpt", "ssm"}, .expected = "a language model from `ember train gpt|ssm`"});
  const train::Checkpoint& source = loaded.source;
  // The run's batch size and seed, as its evaluations used them (a checkpoint without them: the defaults).
  const train::TextOptions defaults;
  const int64_t batch_size = o.batch_size.value_or(
      source.settings.count("batch_size") != 0 ? source.count("batch_size", "eval gpt") : defaults.batch_size);
  EMBER_CHECK(batch_size >= 1, "[eval gpt] --batch-size must be at least 1, got ", batch_size);
  const uint64_t seed = o.seed.value_or(run_seed(source).value_or(defaults.seed));
  std::string text;
  try {
    text = data::read_text_file(o.data);
  } catch (const Error&) {
    EMBER_FAIL("[eval gpt] cannot read ", o.data, ": run scripts/setup, which downloads Shakespeare there");
  }
  std::vector<int64_t> tokens;
  try {
    tokens = loaded.tokenizer->encode(text);
  } catch (const Error& e) {
    EMBER_FAIL("[eval gpt] ", o.data, " cannot be encoded with the checkpoint's vocabulary: ", e.what());
  }
  const data::TextSplit split(std::move(tokens));
  const double loss = train::text_split_loss(loaded.as<models::LanguageModel>(), split, "val", o.batches, batch_size,
                                             loaded.context, train::text_eval_seed(seed, "val"));
  const double seconds = seconds_since(start);
  if (o.json) {
    nlohmann::json result = file_json(source);
    result.update({{"task", source.kind},
                   {"val_loss", loss},
                   {"batches", o.batches},
                   {"batch_size", batch_size},
                   {"context", loaded.context},
                   {"seed", seed},
                   {"seconds", seconds}});
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("val loss %.4f  (%lld batches of %lld x %lld characters, seed %llu; %s, %.1fs)\n", loss,
                static_cast<long long>(o.batches), static_cast<long long>(batch_size),
                static_cast<long long>(loaded.context), static_cast<unsigned long long>(seed),
                file_label(source).c_str(), seconds);
  }
  return 0;
}

int run_eval_mnist(const EvalOptions& o) {
  use_threads(o.threads);
  const auto start = Clock::now();
  const train::LoadedModel loaded = train::load_model(o.checkpoint, "eval mnist", kMnistClassifier);
  const data::MNIST test_set(o.data, data::Split::kTest);
  const double accuracy = train::classification_accuracy(*loaded.model, test_set.images(), test_set.labels());
  const double seconds = seconds_since(start);
  const std::string model = loaded.kind.substr(std::string("mnist_").size());
  if (o.json) {
    nlohmann::json result = file_json(loaded.source);
    result.update({{"task", "mnist"},
                   {"model", model},
                   {"test_accuracy", accuracy},
                   {"test_samples", test_set.size()},
                   {"seconds", seconds}});
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("test accuracy %.2f%% on %lld images  (%s, %s, %.1fs)\n", 100 * accuracy,
                static_cast<long long>(test_set.size()), model.c_str(), file_label(loaded.source).c_str(), seconds);
  }
  return 0;
}

}  // namespace

void add_eval_commands(CLI::App& app, Commands& commands) {
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a checkpoint (safetensors or GGUF) as training does");
  eval->require_subcommand(1);
  auto gpt = std::make_shared<EvalOptions>(EvalOptions{.data = "data/shakespeare/input.txt"});
  CLI::App* gpt_cmd =
      eval->add_subcommand("gpt", "The validation loss of `ember train gpt`'s (or `train ssm`'s) evaluation");
  gpt_cmd->add_option("--checkpoint", gpt->checkpoint, "`ember train gpt|ssm --save`'s or `ember quantize`'s")
      ->required();
  gpt_cmd->add_option("--data", gpt->data, "The text the model was trained on")->capture_default_str();
  gpt_cmd->add_option("--batches", gpt->batches, "Batches of the validation split")
      ->check(kPositiveCount)
      ->capture_default_str();
  gpt_cmd->add_option("--batch-size", gpt->batch_size, "Sequences per batch (default: the run's)")
      ->check(kPositiveCount);
  gpt_cmd->add_option("--seed", gpt->seed, "The run's seed, which picks the batches (default: the run's)");
  add_threads(gpt_cmd, gpt->threads);
  gpt_cmd->add_flag("--json", gpt->json, "Print one JSON line");
  commands.add(gpt_cmd, [gpt] { return run_eval_gpt(*gpt); });
  auto mnist = std::make_shared<EvalOptions>(EvalOptions{.data = "data/mnist"});
  CLI::App* mnist_cmd = eval->add_subcommand("mnist", "The test accuracy of `ember train mnist`");
  mnist_cmd->add_option("--checkpoint", mnist->checkpoint, "`ember train mnist --save`'s or `ember quantize`'s")
      ->required();
  mnist_cmd->add_option("--data", mnist->data, "MNIST folder (as for `ember train mnist`)")->capture_default_str();
  add_threads(mnist_cmd, mnist->threads);
  mnist_cmd->add_flag("--json", mnist->json, "Print one JSON line");
  commands.add(mnist_cmd, [mnist] { return run_eval_mnist(*mnist); });
}

}  // namespace ember::cli

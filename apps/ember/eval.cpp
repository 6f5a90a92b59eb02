// `ember eval gpt|mnist` and the evaluations `ember train` runs (eval.h): a GPT's or Mamba model's
// validation loss on the batches train gpt|ssm evaluates (the same split, seed and batch size, read from the
// checkpoint), and the MNIST test accuracy.
#include "eval.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "cli_util.h"
#include "ember/autograd.h"
#include "ember/data.h"
#include "ember/threads.h"
#include "train_gpt.h"

namespace ember::cli {

double text_split_loss(models::LanguageModel& model, const data::TextSplit& split, std::string_view name,
                       int64_t batches, int64_t batch_size, int64_t context, uint64_t seed) {
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  uint64_t state = seed;
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const auto [x, y] = split.batch(name, batch_size, context, state);
    total += model.loss(x, y).item<double>();
  }
  model.train(was_training);
  return total / static_cast<double>(batches);
}

uint64_t gpt_eval_seed(uint64_t run_seed, std::string_view split) { return run_seed + (split == "train" ? 1 : 2); }

double mnist_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels) {
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  int64_t correct = 0;
  constexpr int64_t kChunk = 1000;
  for (int64_t start = 0; start < images.size(0); start += kChunk) {
    const int64_t n = std::min(kChunk, images.size(0) - start);
    const Tensor predicted = model(images.narrow(0, start, n)).argmax(1);
    correct += predicted.eq(labels.narrow(0, start, n)).sum().item<int64_t>();
  }
  model.train(was_training);
  return images.size(0) > 0 ? static_cast<double>(correct) / static_cast<double>(images.size(0)) : 0.0;
}

namespace {

// "q8_0 GGUF", "f32 safetensors".
std::string file_label(const Checkpoint& checkpoint) {
  return checkpoint.quantization + " " + std::string(format_name(checkpoint.format));
}

// The seed a checkpoint of `ember train gpt` records (any uint64), or nullopt.
std::optional<uint64_t> run_seed(const Checkpoint& checkpoint) {
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

nlohmann::json file_json(const Checkpoint& checkpoint) {
  return {{"checkpoint", checkpoint.path},
          {"format", format_name(checkpoint.format)},
          {"quantization", checkpoint.quantization}};
}

}  // namespace

int run_eval_gpt(const EvalGptOptions& o) {
  EMBER_CHECK(o.batches >= 1, "[eval gpt] --batches must be at least 1, got ", o.batches);
  if (o.threads > 0) set_num_threads(o.threads);
  const auto start = Clock::now();
  TextModelCheckpoint checkpoint = load_text_model_checkpoint(o.checkpoint, "eval gpt");
  const Checkpoint& source = checkpoint.source;
  // The run's batch size and seed, as its evaluations used them (a checkpoint without them: the defaults).
  const TrainGptOptions defaults;
  const int64_t batch_size = o.batch_size.value_or(
      source.settings.count("batch_size") != 0 ? setting_count(source, "batch_size", "eval gpt") : defaults.batch_size);
  EMBER_CHECK(batch_size >= 1, "[eval gpt] --batch-size must be at least 1, got ", batch_size);
  const uint64_t seed = o.seed.value_or(run_seed(source).value_or(defaults.seed));
  std::string text;
  try {
    text = data::read_text_file(o.data_path);
  } catch (const Error&) {
    EMBER_FAIL("[eval gpt] cannot read ", o.data_path, ": run scripts/setup, which downloads Shakespeare there");
  }
  std::vector<int64_t> tokens;
  try {
    tokens = checkpoint.tokenizer.encode(text);
  } catch (const Error& e) {
    EMBER_FAIL("[eval gpt] ", o.data_path, " cannot be encoded with the checkpoint's vocabulary: ", e.what());
  }
  const data::TextSplit split(std::move(tokens));
  const int64_t context = checkpoint.context;
  const uint64_t val_seed = gpt_eval_seed(seed, "val");
  const double loss = text_split_loss(*checkpoint.model, split, "val", o.batches, batch_size, context, val_seed);
  const double seconds = seconds_since(start);
  if (o.json) {
    nlohmann::json result = file_json(source);
    result.update({{"task", source.kind},
                   {"val_loss", loss},
                   {"batches", o.batches},
                   {"batch_size", batch_size},
                   {"context", context},
                   {"seed", seed},
                   {"seconds", seconds}});
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("val loss %.4f  (%lld batches of %lld x %lld characters, seed %llu; %s, %.1fs)\n", loss,
                static_cast<long long>(o.batches), static_cast<long long>(batch_size), static_cast<long long>(context),
                static_cast<unsigned long long>(seed), file_label(source).c_str(), seconds);
  }
  return 0;
}

int run_eval_mnist(const EvalMnistOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  const auto start = Clock::now();
  MnistCheckpoint checkpoint = load_mnist_checkpoint(o.checkpoint, "eval mnist");
  const data::MNIST test_set(o.data_dir, data::Split::kTest);
  const double accuracy = mnist_accuracy(*checkpoint.model, test_set.images(), test_set.labels());
  const double seconds = seconds_since(start);
  if (o.json) {
    nlohmann::json result = file_json(checkpoint.source);
    result.update({{"task", "mnist"},
                   {"model", checkpoint.model_name},
                   {"test_accuracy", accuracy},
                   {"test_samples", test_set.size()},
                   {"seconds", seconds}});
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("test accuracy %.2f%% on %lld images  (%s, %s, %.1fs)\n", 100 * accuracy,
                static_cast<long long>(test_set.size()), checkpoint.model_name.c_str(),
                file_label(checkpoint.source).c_str(), seconds);
  }
  return 0;
}

}  // namespace ember::cli

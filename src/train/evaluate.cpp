// The evaluations training runs and `ember eval` share, and generation from any of the character
// language models (ember/train/tasks.h).
#include "ember/autograd.h"
#include "ember/models/gpt.h"
#include "ember/models/mamba.h"
#include "ember/ops.h"
#include "ember/train/tasks.h"

namespace ember::train {

double text_split_loss(models::LanguageModel& model, const data::TextSplit& split, std::string_view name,
                       int64_t batches, int64_t batch_size, int64_t context, uint64_t seed) {
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  uint64_t state = seed;
  double total = 0;
  const std::vector<Tensor> parameters = model.parameters();
  const Device device = parameters.empty() ? kCPU : parameters.front().device();
  for (int64_t i = 0; i < batches; ++i) {
    const auto [x, y] = split.batch(name, batch_size, context, state);
    total += model.loss(x.to(device), y.to(device)).item<double>();
  }
  model.train(was_training);
  return total / static_cast<double>(batches);
}

uint64_t text_eval_seed(uint64_t run_seed, std::string_view split) { return run_seed + (split == "train" ? 1 : 2); }

double classification_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels) {
  autograd::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  int64_t correct = 0;
  // The images go, a chunk at a time, to where the model's parameters are.
  const std::vector<Tensor> parameters = model.parameters();
  const Device device = parameters.empty() ? images.device() : parameters.front().device();
  constexpr int64_t kChunk = 1000;
  for (int64_t start = 0; start < images.size(0); start += kChunk) {
    const int64_t n = std::min(kChunk, images.size(0) - start);
    const Tensor predicted = model(images.narrow(0, start, n).to(device)).argmax(1);
    correct += predicted.eq(labels.narrow(0, start, n).to(device)).sum().item<int64_t>();
  }
  model.train(was_training);
  return images.size(0) > 0 ? static_cast<double>(correct) / static_cast<double>(images.size(0)) : 0.0;
}

std::vector<int64_t> generate_text(models::LanguageModel& model, const std::vector<int64_t>& prompt, int64_t tokens,
                                   const models::SamplingOptions& options, bool use_cache,
                                   const std::function<void(int64_t)>& on_token) {
  if (auto* mamba = dynamic_cast<models::Mamba*>(&model)) {
    return models::generate(*mamba, prompt, tokens, options, on_token);
  }
  auto* gpt = dynamic_cast<models::GPT*>(&model);
  EMBER_CHECK(gpt != nullptr, "[generate] ", model.name(), " is neither a GPT nor a Mamba model");
  return models::generate(*gpt, prompt, tokens, options, use_cache, on_token);
}

}  // namespace ember::train

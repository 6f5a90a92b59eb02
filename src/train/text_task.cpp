// The character language-model run (ember/train/tasks.h): nanoGPT's character model, or a Mamba
// model of the same characters, on a text, with nanoGPT's recipe for both (AdamW with decay on the
// 2-D weights, betas (0.9, 0.99), gradient clipping at 1, linear warmup then cosine decay to lr / 10),
// evaluations of both splits, and checkpoints that record the architecture and the vocabulary (which
// the registry reads back).
#include <cmath>
#include <cstdio>

#include "ember/models/gpt.h"
#include "ember/models/mamba.h"
#include "ember/train/registry.h"
#include "ember/train/tasks.h"

namespace ember::train {
namespace {

std::string read_training_text(const TextOptions& o) {
  const std::string op = "train " + o.model;
  std::string text;
  try {
    text = data::read_text_file(o.data_path);
  } catch (const Error&) {
    EMBER_FAIL("[", op, "] cannot read ", o.data_path, ": run scripts/setup, which downloads Shakespeare there");
  }
  EMBER_CHECK(!text.empty(), "[", op, "] ", o.data_path, " is empty: there is no text to train on");
  return text;
}

const TextOptions& checked(const TextOptions& o) {
  const std::string op = "train " + o.model;
  EMBER_CHECK(o.model == "gpt" || o.model == "ssm", "[train] unknown language model \"", o.model, "\"");
  EMBER_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.context >= 1 && o.eval_every >= 1 && o.eval_batches >= 1, "[", op,
              "] --steps, --batch-size, --context, --eval-every and --eval-batches must be at least 1");
  EMBER_CHECK(o.warmup >= 0 && o.warmup < o.steps, "[", op, "] --warmup must be in [0, --steps), got ", o.warmup);
  EMBER_CHECK(o.lr > 0 && std::isfinite(o.lr), "[", op, "] --lr must be a positive number, got ", o.lr);
  if (o.group) {
    EMBER_CHECK(o.batch_size % o.group->world_size() == 0, "[", op, "] --batch-size ", o.batch_size,
                " is not divisible by the ", o.group->world_size(), " ranks");
  }
  if (!o.device.is_cpu()) {
    EMBER_CHECK(!o.compile && !o.group, "[", op, "] on ", o.device,
                " training runs eagerly in one process: --compile and --ddp are CPU-only for now");
    EMBER_CHECK(o.model == "gpt", "[", op, "] on ", o.device, ": only the GPT trains on a GPU for now (the ", o.model,
                " model's selective scan has no CUDA kernel yet)");
  }
  return o;
}

}  // namespace

TextOptions TextOptions::ssm_defaults() {
  TextOptions o;
  o.model = "ssm";
  o.dim = 256;
  o.steps = 1000;  // about 6,500 tokens/s on 2 cores: about the GPT's 5 minutes
  o.lr = 2e-3;
  o.eval_every = 250;
  return o;
}

TextTask::TextTask(TextOptions options) : TextTask(checked(options), read_training_text(options)) {}

TextTask::TextTask(TextOptions options, const std::string& text)
    : options_(std::move(options)),
      tokenizer_(data::CharTokenizer::from_text(text)),
      split_(tokenizer_.encode(text)),
      batch_state_(options_.seed) {
  if (options_.group) {
    rank_ = options_.group->rank();
    world_size_ = options_.group->world_size();
  }
}

std::map<std::string, std::string> TextTask::settings() const {
  const TextOptions& o = options_;
  std::map<std::string, std::string> settings = {{keys::kTask, o.model},
                                                 {"layers", std::to_string(o.layers)},
                                                 {"dim", std::to_string(o.dim)},
                                                 {"context", std::to_string(o.context)},
                                                 {keys::kVocabulary, vocabulary_to_hex(tokenizer_.vocabulary())},
                                                 {"lr", number_setting(o.lr)},
                                                 {"warmup", std::to_string(o.warmup)},
                                                 {"steps", std::to_string(o.steps)},
                                                 {"batch_size", std::to_string(o.batch_size)},
                                                 {"seed", std::to_string(o.seed)}};
  if (o.model == "ssm") {
    settings.insert(
        {{"state", std::to_string(o.state)}, {"expand", std::to_string(o.expand)}, {"conv", std::to_string(o.conv)}});
  } else {
    settings.insert({{"heads", std::to_string(o.heads)}, {"dropout", number_setting(o.dropout)}});
  }
  if (o.amp) settings[keys::kAmp] = *o.amp == kFloat16 ? "f16" : "bf16";
  return settings;
}

ResumeRules TextTask::resume_rules() const {
  return {.vocabulary_source = options_.data_path, .architecture_keys = model_kind(options_.model).architecture_keys};
}

std::shared_ptr<nn::Module> TextTask::model() {
  if (!model_) {
    const TextOptions& o = options_;
    if (o.model == "ssm") {
      model_ = std::make_shared<models::Mamba>(models::MambaConfig{.vocab_size = tokenizer_.vocab_size(),
                                                                   .d_model = o.dim,
                                                                   .n_layer = o.layers,
                                                                   .d_state = o.state,
                                                                   .d_conv = o.conv,
                                                                   .expand = o.expand});
    } else {
      model_ = std::make_shared<models::GPT>(models::GPTConfig{.vocab_size = tokenizer_.vocab_size(),
                                                               .block_size = o.context,
                                                               .n_layer = o.layers,
                                                               .n_head = o.heads,
                                                               .n_embd = o.dim,
                                                               .dropout = o.dropout});
    }
    model_->to(o.device);
  }
  return model_;
}

std::vector<optim::ParamGroup> TextTask::param_groups() {
  // AdamW with weight decay on the matrices only.
  return {{.params = model_->decayed_parameters(), .options = {{"weight_decay", 0.1}}},
          {.params = model_->undecayed_parameters(), .options = {{"weight_decay", 0.0}}}};
}

OptimizerFactory TextTask::optimizer() { return adamw_factory({.lr = options_.lr, .beta1 = 0.9, .beta2 = 0.99}); }

LossFn TextTask::loss() {
  return [this](const std::vector<Tensor>& batch) { return std::vector<Tensor>{model_->loss(batch[0], batch[1])}; };
}

StepOptions TextTask::step_options() const {
  return {.clip_grad_norm = 1.0,
          .autocast = options_.amp,
          .compile = options_.compile,
          .bucket_cap_mb = options_.bucket_cap_mb,
          .zero = options_.zero};
}

std::optional<double> TextTask::lr_at(int64_t step) const {
  return warmup_cosine_lr(step, options_.lr, options_.warmup, options_.steps);
}

std::vector<Tensor> TextTask::batch(int64_t step) {
  auto [x, y] = split_.batch("train", options_.batch_size, options_.context, batch_state_);
  if (world_size_ > 1) {  // this rank's rows of the global batch
    const int64_t rows = options_.batch_size / world_size_;
    x = x.narrow(0, rank_ * rows, rows);
    y = y.narrow(0, rank_ * rows, rows);
  }
  return {x.to(options_.device), y.to(options_.device)};
}

StepMetrics TextTask::metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs) {
  return {.loss = outputs[0].item<double>(), .samples = batch[0].numel()};  // tokens
}

std::map<std::string, double> TextTask::evaluate(int64_t) {
  const TextOptions& o = options_;
  // The same batches at every evaluation, so the curve compares like with like.
  return {{"train_loss", text_split_loss(*model_, split_, "train", o.eval_batches, o.batch_size, o.context,
                                         text_eval_seed(o.seed, "train"))},
          {"val_loss", text_split_loss(*model_, split_, "val", o.eval_batches, o.batch_size, o.context,
                                       text_eval_seed(o.seed, "val"))}};
}

void TextTask::save(TrainingState&, std::map<std::string, std::string>& metadata) {
  metadata[keys::kBatchState] = std::to_string(batch_state_);
}

void TextTask::load(const Checkpoint&, const std::map<std::string, uint64_t>& state) {
  batch_state_ = state.at(keys::kBatchState);
}

std::string TextTask::sample(int64_t tokens) {
  const std::vector<int64_t> prompt = tokenizer_.encode("\n");
  return tokenizer_.decode(
      generate_text(*model_, prompt, tokens, {.temperature = 0.8, .top_k = 40, .seed = options_.seed}));
}

std::string TextTask::describe() const {
  const TextOptions& o = options_;
  char text[160];
  if (o.model == "ssm") {
    std::snprintf(text, sizeof text, "%lld layers, %lld dims (%lld inner), state %lld, conv %lld, context %lld",
                  static_cast<long long>(o.layers), static_cast<long long>(o.dim),
                  static_cast<long long>(o.expand * o.dim), static_cast<long long>(o.state),
                  static_cast<long long>(o.conv), static_cast<long long>(o.context));
  } else {
    std::snprintf(text, sizeof text, "%lld layers, %lld heads, %lld dims, context %lld, dropout %g",
                  static_cast<long long>(o.layers), static_cast<long long>(o.heads), static_cast<long long>(o.dim),
                  static_cast<long long>(o.context), o.dropout);
  }
  return text;
}

}  // namespace ember::train

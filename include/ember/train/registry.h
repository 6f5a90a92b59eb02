// The model registry: every kind of model ember trains or runs, in one table (as llama.cpp keeps
// its architecture tables in its library), with how its config is recorded in a checkpoint's
// settings and how it is rebuilt from them.
//
//   train::LoadedModel m = train::load_model("gpt.safetensors");   // or a GGUF of `ember quantize`
//   auto& gpt = m.as<models::GPT>();
//   std::string text = m.tokenizer->decode(models::generate(gpt, m.tokenizer->encode("\n"), 100, {}));
//
// Kinds: "mnist_mlp", "mnist_cnn" (models/mnist.h), "gpt" (models/gpt.h), "ssm" (the Mamba model,
// models/mamba.h), "diffusion" (the U-Net of models/diffusion.h), "minilm" (a sentence encoder,
// models/bert.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ember/models/bert.h"
#include "ember/models/diffusion.h"
#include "ember/models/gpt.h"
#include "ember/models/mamba.h"
#include "ember/models/mnist.h"
#include "ember/tokenizer.h"
#include "ember/train/checkpoint.h"

namespace ember::train {

/// One row of the registry.
struct ModelKind {
  std::string name{};  // "gpt"
  std::string task{};  // the "task" setting of its training runs ("mnist" for both MNIST models)
  std::string description{};
  /// The settings whose values make the model: a checkpoint that differs in one is another model.
  std::vector<std::string> architecture_keys{};
};

/// Every kind, in the order above.
const std::vector<ModelKind>& model_kinds();
/// The row of `name`; an unknown name is an ember::Error listing the kinds.
const ModelKind& model_kind(std::string_view name);

/// A model's configuration, whatever its kind.
using ModelConfig =
    std::variant<models::MnistConfig, models::GPTConfig, models::MambaConfig, models::UNetConfig, models::BertConfig>;

/// The kind a config builds ("mnist_cnn", "gpt", ...).
std::string kind_of(const ModelConfig& config);

/// The settings a config is recorded as (for a character model, without its vocabulary).
std::map<std::string, std::string> config_settings(const ModelConfig& config);

/// The model a config describes, freshly initialized from ember's generator (manual_seed first).
std::shared_ptr<nn::Module> build_model(const ModelConfig& config);

/// A model rebuilt from a file, and what came with it.
struct LoadedModel {
  std::string kind{};
  ModelConfig config{};
  std::shared_ptr<nn::Module> model{};  // in eval mode, holding the file's weights
  Checkpoint source{};                  // the file's settings and format (its tensors are in the model)
  /// Character models ("gpt", "ssm"): the vocabulary and the context they were trained with.
  std::optional<data::CharTokenizer> tokenizer{};
  int64_t context = 0;
  /// "diffusion": the noise schedule the model was trained with.
  std::optional<models::DiffusionSchedule> schedule{};
  /// "minilm": tokenizer, model and pooling.
  std::optional<models::SentenceEncoder> encoder{};

  /// The model as its class; an ember::Error naming both kinds when it is another.
  template <class M>
  M& as() const {
    M* model_as = dynamic_cast<M*>(model.get());
    if (model_as == nullptr) fail_as(typeid(M).name());
    return *model_as;
  }

 private:
  [[noreturn]] void fail_as(const char* type) const;
};

/// What load_model() accepts.
struct LoadOptions {
  /// The kinds the caller can use (empty: any). A file of another kind is an ember::Error
  /// "[op] checkpoint <path> is not <expected> (it holds a <kind> model)".
  std::vector<std::string> kinds{};
  std::string expected{};
  /// kAveragePrefix: a diffusion checkpoint's moving average of the weights instead of the weights.
  std::string_view weights = kModelPrefix;
};

/// Rebuilds the model a file holds: a training checkpoint (safetensors) of any kind, a GGUF file of
/// `ember quantize` (Linear layers quantized as stored), or a sentence-transformers folder (MiniLM;
/// a path that does not exist is taken for a folder when MiniLM is accepted). A file of no known
/// kind, settings no model can have, or tensors that do not fit the model are ember::Errors
/// starting with [op] and naming the file.
LoadedModel load_model(const std::string& path, std::string_view op = "load_model", const LoadOptions& options = {});
LoadedModel load_model(Checkpoint checkpoint, std::string_view op = "load_model", const LoadOptions& options = {});

/// What a GGUF file needs to rebuild `encoder` alone: the BERT config (ember.bert.*, config.json's
/// names), the vocabulary (tokenizer.ggml.tokens, llama.cpp's key) and tokenizer settings
/// (ember.tokenizer.*), and the pooling (ember.sentence.*).
std::vector<std::pair<std::string, gguf::Value>> sentence_encoder_metadata(const models::SentenceEncoder& encoder);

}  // namespace ember::train

// The model files the CLI reads and writes, and the models rebuilt from them:
// - safetensors checkpoints of `ember train gpt|ssm|mnist --save`: the model's tensors under "model.",
//   the optimizer's (and schedule's) under their own prefixes, the run's settings as metadata;
// - GGUF files of `ember quantize`: the model's tensors (Linear weights quantized or not), the
//   source's settings carried over as string values under their own keys, and ember.* keys (the
//   model kind, the quantization; for MiniLM its config, tokenizer and pooling as well);
// - a sentence-transformers folder (MiniLM) for `ember embed`.
// A file's format is told by its first bytes, never by its name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/gguf.h"
#include "ember/models/bert.h"
#include "ember/models/gpt.h"
#include "ember/models/mamba.h"
#include "ember/state_dict.h"
#include "ember/tokenizer.h"

namespace ember::cli {

enum class FileFormat { kSafetensors, kGguf };
std::string_view format_name(FileFormat format);  // "safetensors", "gguf"

// The GGUF keys ember writes beside the source's settings.
inline constexpr const char* kGgufModelKey = "ember.model";                // "gpt", "mnist_mlp", "mnist_cnn", "minilm"
inline constexpr const char* kGgufQuantizationKey = "ember.quantization";  // "f32", "q8_0", "q4_0", "int8"
inline constexpr const char* kGgufDynamicKey = "ember.dynamic_activations";  // false: --weights-only

// "GGUF" at the start, or a safetensors header (an 8-byte length, then '{'). A folder, a file that
// cannot be read or one of neither format is an ember::Error starting with [op].
FileFormat detect_format(const std::string& path, std::string_view op);

// A model file read whole: what it holds and how to rebuild the model.
struct Checkpoint {
  std::string path;
  FileFormat format = FileFormat::kSafetensors;
  // "gpt", "ssm", "diffusion", "mnist_mlp", "mnist_cnn", "minilm"; empty for a safetensors file no
  // `ember train` wrote.
  std::string kind;
  std::string quantization = "f32";
  bool dynamic_activations = true;
  // The safetensors metadata, or the GGUF's string values.
  std::map<std::string, std::string> settings;
  // The model's tensors under its state_dict names ("model." stripped from a training checkpoint).
  StateDict state;
  // A GGUF's metadata (typed), for models whose config is not strings (MiniLM); no tensors.
  gguf::File gguf;

  // "a mnist_cnn model", or `task "..."` for a file of no known kind; for error messages.
  std::string describe() const;
};
Checkpoint read_checkpoint(const std::string& path, std::string_view op);

// Loads checkpoint.state into `model` (held by a std::shared_ptr): the Linear layers the state
// holds quantized are quantized first (quant::prepare; --weights-only files multiply in float). A
// state that does not fit is an ember::Error naming the file and listing the keys.
void load_model_state(nn::Module& model, const Checkpoint& checkpoint, std::string_view op);

// --- character language models: the GPT (`ember train gpt`) and Mamba (`ember train ssm`), read by
// `ember generate` and `ember eval gpt` ---------------------------------------------------------------

// The keys whose values make the model: a checkpoint that differs in one of them is another model.
inline constexpr const char* kGptArchitectureKeys[] = {"layers", "heads", "dim", "context", "vocabulary"};
inline constexpr const char* kSsmArchitectureKeys[] = {"layers", "dim", "state", "expand", "conv", "vocabulary"};
std::vector<std::string> architecture_keys(std::string_view task);  // "gpt" or "ssm"

// The vocabulary as hex, so any byte survives a checkpoint's JSON header.
std::string vocabulary_to_hex(const std::string& vocabulary);

// A whole number recorded in a checkpoint's settings; a missing or malformed one is an ember::Error.
int64_t setting_count(const Checkpoint& checkpoint, const std::string& key, std::string_view op);

struct GptCheckpoint {
  std::shared_ptr<models::GPT> model;
  data::CharTokenizer tokenizer;
  Checkpoint source;  // its settings and format (the tensors are in the model)
};
// The architecture and the vocabulary from the settings, the weights from the tensors. A file that
// holds another kind of model is an ember::Error saying so.
GptCheckpoint load_gpt_checkpoint(const std::string& path, std::string_view op);
GptCheckpoint load_gpt_checkpoint(Checkpoint checkpoint, std::string_view op);

// A GPT or Mamba checkpoint: the model, the vocabulary and the context it was trained with.
struct TextModelCheckpoint {
  std::shared_ptr<models::LanguageModel> model;  // a models::GPT or a models::Mamba
  data::CharTokenizer tokenizer;
  int64_t context = 0;  // the training context (the GPT's limit; the Mamba model has none)
  Checkpoint source;
};
TextModelCheckpoint load_text_model_checkpoint(const std::string& path, std::string_view op);

// --- MNIST (`ember train mnist`, `ember eval mnist`) ------------------------------------------------

struct MnistCheckpoint {
  std::shared_ptr<nn::Sequential> model;
  std::string model_name;  // "mlp" or "cnn"
  Checkpoint source;
};
MnistCheckpoint load_mnist_checkpoint(const std::string& path, std::string_view op);
MnistCheckpoint load_mnist_checkpoint(Checkpoint checkpoint, std::string_view op);

// --- MiniLM (`ember embed`) -------------------------------------------------------------------------

// A sentence-transformers folder, or a GGUF file `ember quantize` wrote from one.
models::SentenceEncoder load_sentence_encoder(const std::string& folder_or_file, std::string_view op);
models::SentenceEncoder load_sentence_encoder(const Checkpoint& checkpoint, std::string_view op);

// What a GGUF file needs to rebuild `encoder` alone: the BERT config (ember.bert.*, config.json's
// names), the vocabulary (tokenizer.ggml.tokens, llama.cpp's key) and tokenizer settings
// (ember.tokenizer.*), and the pooling (ember.sentence.*).
std::vector<std::pair<std::string, gguf::Value>> sentence_encoder_metadata(const models::SentenceEncoder& encoder);

// --- writing ------------------------------------------------------------------------------------------

// Writes `state` (a model's state_dict) as a GGUF file, atomically: general.architecture "ember",
// the ember.* keys, `extra`, then the source's `settings` as strings (except keys of the general.,
// ember. and tokenizer. namespaces, which the file's own keys describe).
void save_model_gguf(const std::string& path, const std::string& kind, const std::string& quantization,
                     bool dynamic_activations, const std::map<std::string, std::string>& settings,
                     std::vector<std::pair<std::string, gguf::Value>> extra, const StateDict& state);

}  // namespace ember::cli

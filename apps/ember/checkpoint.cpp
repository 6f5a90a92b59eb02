// Model files: format detection, reading safetensors checkpoints and GGUF files into one
// Checkpoint, rebuilding the GPT, the MNIST models and MiniLM from them, and writing GGUF
// (checkpoint.h).
#include "checkpoint.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "ember/autograd.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/nn/quantize.h"

namespace ember::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelPrefix = "model.";

std::string from_hex(const std::string& hex, const std::string& path, std::string_view op) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    EMBER_FAIL("[", op, "] checkpoint ", path, " has a corrupt vocabulary");
  };
  EMBER_CHECK(hex.size() % 2 == 0 && !hex.empty(), "[", op, "] checkpoint ", path, " has a corrupt vocabulary");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  return out;
}

// A GGUF metadata value of the expected type, with the key in the error when it is missing or of
// another type.
const gguf::Value& gguf_entry(const Checkpoint& c, const std::string& key, std::string_view op) {
  const gguf::Value* value = c.gguf.find_value(key);
  EMBER_CHECK(value != nullptr, "[", op, "] ", c.path, " has no ", key, " entry");
  return *value;
}
template <class Read>
auto read_entry(const Checkpoint& c, const std::string& key, std::string_view op, Read read) {
  const gguf::Value& value = gguf_entry(c, key, op);
  try {
    return read(value);
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] ", c.path, ": ", key, ": ", e.what());
  }
}
int64_t gguf_integer(const Checkpoint& c, const std::string& key, std::string_view op) {
  return read_entry(c, key, op, [](const gguf::Value& v) { return v.as_integer(); });
}
std::string gguf_string(const Checkpoint& c, const std::string& key, std::string_view op) {
  return read_entry(c, key, op, [](const gguf::Value& v) { return v.as_string(); });
}
bool gguf_bool(const Checkpoint& c, const std::string& key, std::string_view op) {
  return read_entry(c, key, op, [](const gguf::Value& v) { return v.as_bool(); });
}
double gguf_float(const Checkpoint& c, const std::string& key, std::string_view op) {
  return read_entry(c, key, op, [](const gguf::Value& v) { return v.as_float64(); });
}

// A model whose weights hold NaN or Inf computes nothing but NaN (a run that diverged saved it, or
// the file was damaged): an error naming the tensor, rather than a loss or a text of garbage.
void check_finite(const Checkpoint& c, std::string_view op) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, tensor] : c.state) {
    if (!tensor.is_floating_point() || tensor.numel() == 0) continue;
    const int64_t nan = isnan(tensor).sum().item<int64_t>(), inf = isinf(tensor).sum().item<int64_t>();
    EMBER_CHECK(nan == 0 && inf == 0, "[", op, "] checkpoint ", c.path, ": tensor \"", name, "\" holds ", nan,
                " NaN and ", inf, " infinite values (of ", tensor.numel(),
                "): the run that wrote it diverged, or the file is damaged");
  }
}

// The model a checkpoint's settings describe, built by `build`: settings no model can have (zero
// heads, a width too large for memory) are an error naming the file.
template <class Build>
auto build_model(const Checkpoint& c, std::string_view op, Build build) {
  try {
    return build();
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] checkpoint ", c.path, ": its settings do not make a ", c.kind, " model: ", e.what());
  }
}

}  // namespace

std::string_view format_name(FileFormat format) { return format == FileFormat::kGguf ? "gguf" : "safetensors"; }

FileFormat detect_format(const std::string& path, std::string_view op) {
  std::error_code error;
  EMBER_CHECK(!fs::is_directory(path, error), "[", op, "] ", path, " is a folder, not a checkpoint file");
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "[", op, "] cannot open ", path, ": ", std::strerror(errno));
  char head[9] = {};
  in.read(head, sizeof head);
  const std::streamsize got = in.gcount();
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return FileFormat::kGguf;
  if (got == sizeof head && head[8] == '{') return FileFormat::kSafetensors;
  EMBER_FAIL("[", op, "] ", path, " is neither a safetensors checkpoint nor a GGUF file");
}

std::string Checkpoint::describe() const {
  if (!kind.empty()) return "a " + kind + " model";
  const auto task = settings.find("task");
  return "task \"" + (task == settings.end() ? std::string() : task->second) + "\"";
}

Checkpoint read_checkpoint(const std::string& path, std::string_view op) {
  Checkpoint c;
  c.path = path;
  c.format = detect_format(path, op);
  if (c.format == FileFormat::kSafetensors) {
    c.settings = load_metadata(path);
    const std::string task = c.settings.count("task") != 0 ? c.settings.at("task") : "";
    if (task == "gpt" || task == "ssm" || task == "diffusion") c.kind = task;
    if (task == "mnist" && c.settings.count("model") != 0) c.kind = "mnist_" + c.settings.at("model");
    c.state = strip_prefix(load(path), kModelPrefix);
    check_finite(c, op);
    return c;
  }
  c.gguf = gguf::load(path);
  for (auto& [name, tensor] : c.gguf.tensors) c.state.emplace(name, std::move(tensor));
  c.gguf.tensors.clear();
  for (const auto& [key, value] : c.gguf.metadata) {
    if (value.type() == gguf::ValueType::kString) c.settings.emplace(key, value.as_string());
  }
  EMBER_CHECK(c.gguf.find_value(kGgufModelKey) != nullptr, "[", op, "] ", path, " is a GGUF file without an ",
              kGgufModelKey, " entry: not a model `ember quantize` wrote");
  c.kind = gguf_string(c, kGgufModelKey, op);
  c.quantization = gguf_string(c, kGgufQuantizationKey, op);
  if (c.gguf.find_value(kGgufDynamicKey) != nullptr) c.dynamic_activations = gguf_bool(c, kGgufDynamicKey, op);
  check_finite(c, op);
  return c;
}

void load_model_state(nn::Module& model, const Checkpoint& checkpoint, std::string_view op) {
  try {
    quant::prepare(model, checkpoint.state);
    if (!checkpoint.dynamic_activations) {
      for (const auto& [name, module] : model.named_modules()) {
        if (auto* linear = module->as<nn::Linear>(); linear != nullptr && linear->is_quantized()) {
          linear->dynamic_activations = false;
        }
      }
    }
    model.load_state_dict(checkpoint.state);
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] checkpoint ", checkpoint.path, " does not fit the ", checkpoint.kind,
               " model its metadata describes: ", e.what());
  }
}

// --- GPT ----------------------------------------------------------------------------------------------

std::string vocabulary_to_hex(const std::string& vocabulary) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : vocabulary) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

int64_t setting_count(const Checkpoint& checkpoint, const std::string& key, std::string_view op) {
  const auto it = checkpoint.settings.find(key);
  const bool ok = it != checkpoint.settings.end() && !it->second.empty() && it->second.size() < 12 &&
                  it->second.find_first_not_of("0123456789") == std::string::npos;
  EMBER_CHECK(ok, "[", op, "] checkpoint ", checkpoint.path, " has no valid ", key, " entry");
  return std::stoll(it->second);
}

GptCheckpoint load_gpt_checkpoint(const std::string& path, std::string_view op) {
  return load_gpt_checkpoint(read_checkpoint(path, op), op);
}

GptCheckpoint load_gpt_checkpoint(Checkpoint checkpoint, std::string_view op) {
  EMBER_CHECK(checkpoint.kind == "gpt", "[", op, "] checkpoint ", checkpoint.path,
              " is not a GPT checkpoint from `ember train gpt` (it holds ", checkpoint.describe(), ")");
  for (const char* key : kGptArchitectureKeys) {
    EMBER_CHECK(checkpoint.settings.count(key) != 0, "[", op, "] checkpoint ", checkpoint.path, " has no ", key,
                " entry");
  }
  data::CharTokenizer tokenizer(from_hex(checkpoint.settings.at("vocabulary"), checkpoint.path, op));
  const models::GPTConfig config{.vocab_size = tokenizer.vocab_size(),
                                 .block_size = setting_count(checkpoint, "context", op),
                                 .n_layer = setting_count(checkpoint, "layers", op),
                                 .n_head = setting_count(checkpoint, "heads", op),
                                 .n_embd = setting_count(checkpoint, "dim", op)};
  auto model = build_model(checkpoint, op, [&] { return std::make_shared<models::GPT>(config); });
  load_model_state(*model, checkpoint, op);
  checkpoint.state.clear();
  return {.model = std::move(model), .tokenizer = std::move(tokenizer), .source = std::move(checkpoint)};
}

std::vector<std::string> architecture_keys(std::string_view task) {
  if (task == "ssm") return {std::begin(kSsmArchitectureKeys), std::end(kSsmArchitectureKeys)};
  return {std::begin(kGptArchitectureKeys), std::end(kGptArchitectureKeys)};
}

TextModelCheckpoint load_text_model_checkpoint(const std::string& path, std::string_view op) {
  Checkpoint checkpoint = read_checkpoint(path, op);
  if (checkpoint.kind == "gpt") {
    GptCheckpoint gpt = load_gpt_checkpoint(std::move(checkpoint), op);
    const int64_t context = gpt.model->config.block_size;
    return {.model = std::move(gpt.model),
            .tokenizer = std::move(gpt.tokenizer),
            .context = context,
            .source = std::move(gpt.source)};
  }
  EMBER_CHECK(checkpoint.kind == "ssm", "[", op, "] checkpoint ", checkpoint.path,
              " is not a language model from `ember train gpt|ssm` (it holds ", checkpoint.describe(), ")");
  for (const std::string& key : architecture_keys("ssm")) {
    EMBER_CHECK(checkpoint.settings.count(key) != 0, "[", op, "] checkpoint ", checkpoint.path, " has no ", key,
                " entry");
  }
  data::CharTokenizer tokenizer(from_hex(checkpoint.settings.at("vocabulary"), checkpoint.path, op));
  const models::MambaConfig config{.vocab_size = tokenizer.vocab_size(),
                                   .d_model = setting_count(checkpoint, "dim", op),
                                   .n_layer = setting_count(checkpoint, "layers", op),
                                   .d_state = setting_count(checkpoint, "state", op),
                                   .d_conv = setting_count(checkpoint, "conv", op),
                                   .expand = setting_count(checkpoint, "expand", op)};
  auto model = build_model(checkpoint, op, [&] { return std::make_shared<models::Mamba>(config); });
  load_model_state(*model, checkpoint, op);
  checkpoint.state.clear();
  const int64_t context = setting_count(checkpoint, "context", op);
  return {.model = std::move(model),
          .tokenizer = std::move(tokenizer),
          .context = context,
          .source = std::move(checkpoint)};
}

// --- MNIST ----------------------------------------------------------------------------------------------

MnistCheckpoint load_mnist_checkpoint(const std::string& path, std::string_view op) {
  return load_mnist_checkpoint(read_checkpoint(path, op), op);
}

MnistCheckpoint load_mnist_checkpoint(Checkpoint checkpoint, std::string_view op) {
  EMBER_CHECK(checkpoint.kind == "mnist_mlp" || checkpoint.kind == "mnist_cnn", "[", op, "] checkpoint ",
              checkpoint.path, " is not an MNIST checkpoint from `ember train mnist` (it holds ", checkpoint.describe(),
              ")");
  const std::string name = checkpoint.kind.substr(std::string("mnist_").size());
  std::shared_ptr<nn::Sequential> model = models::mnist_model(name);
  load_model_state(*model, checkpoint, op);
  model->eval();
  checkpoint.state.clear();
  return {.model = std::move(model), .model_name = name, .source = std::move(checkpoint)};
}

// --- MiniLM ---------------------------------------------------------------------------------------------

models::SentenceEncoder load_sentence_encoder(const std::string& folder_or_file, std::string_view op) {
  std::error_code error;
  // A folder, or nothing at all: from_folder's error names scripts/setup.
  if (fs::is_directory(folder_or_file, error) || !fs::exists(folder_or_file, error)) {
    return models::SentenceEncoder::from_folder(folder_or_file);
  }
  return load_sentence_encoder(read_checkpoint(folder_or_file, op), op);
}

models::SentenceEncoder load_sentence_encoder(const Checkpoint& c, std::string_view op) {
  EMBER_CHECK(c.format == FileFormat::kGguf && c.kind == "minilm", "[", op, "] ", c.path,
              " is not a sentence-transformers folder or a GGUF file of one (it holds ", c.describe(), ")");
  models::BertConfig config;
  config.vocab_size = gguf_integer(c, "ember.bert.vocab_size", op);
  config.hidden_size = gguf_integer(c, "ember.bert.hidden_size", op);
  config.num_hidden_layers = gguf_integer(c, "ember.bert.num_hidden_layers", op);
  config.num_attention_heads = gguf_integer(c, "ember.bert.num_attention_heads", op);
  config.intermediate_size = gguf_integer(c, "ember.bert.intermediate_size", op);
  config.hidden_act = gguf_string(c, "ember.bert.hidden_act", op);
  config.max_position_embeddings = gguf_integer(c, "ember.bert.max_position_embeddings", op);
  config.type_vocab_size = gguf_integer(c, "ember.bert.type_vocab_size", op);
  config.layer_norm_eps = gguf_float(c, "ember.bert.layer_norm_eps", op);
  config.validate(c.path);

  data::WordPieceOptions tokenizer_options;
  tokenizer_options.lower_case = gguf_bool(c, "ember.tokenizer.lower_case", op);
  if (c.gguf.find_value("ember.tokenizer.strip_accents") != nullptr) {
    tokenizer_options.strip_accents = gguf_bool(c, "ember.tokenizer.strip_accents", op);
  }
  tokenizer_options.tokenize_chinese_chars = gguf_bool(c, "ember.tokenizer.tokenize_chinese_chars", op);
  tokenizer_options.max_input_chars_per_word = gguf_integer(c, "ember.tokenizer.max_input_chars_per_word", op);
  tokenizer_options.model_max_length = gguf_integer(c, "ember.tokenizer.model_max_length", op);
  tokenizer_options.unk_token = gguf_string(c, "ember.tokenizer.unk_token", op);
  tokenizer_options.cls_token = gguf_string(c, "ember.tokenizer.cls_token", op);
  tokenizer_options.sep_token = gguf_string(c, "ember.tokenizer.sep_token", op);
  tokenizer_options.pad_token = gguf_string(c, "ember.tokenizer.pad_token", op);
  tokenizer_options.mask_token = gguf_string(c, "ember.tokenizer.mask_token", op);
  std::vector<std::string> tokens =
      read_entry(c, "tokenizer.ggml.tokens", op, [](const gguf::Value& v) { return v.to_vector<std::string>(); });

  const std::string pooling = gguf_string(c, "ember.sentence.pooling", op);
  EMBER_CHECK(pooling == "mean" || pooling == "cls", "[", op, "] ", c.path,
              ": ember.sentence.pooling must be \"mean\" or \"cls\", got \"", pooling, "\"");
  const models::SentenceOptions options{.max_seq_length = gguf_integer(c, "ember.sentence.max_seq_length", op),
                                        .mean_pooling = pooling == "mean",
                                        .normalize = gguf_bool(c, "ember.sentence.normalize", op)};

  auto model = std::make_shared<models::BertModel>(config);
  load_model_state(*model, c, op);  // the file holds the model's own names (no "bert." prefix)
  model->eval();
  return models::SentenceEncoder(data::WordPieceTokenizer(std::move(tokens), tokenizer_options), std::move(model),
                                 options);
}

std::vector<std::pair<std::string, gguf::Value>> sentence_encoder_metadata(const models::SentenceEncoder& encoder) {
  const models::BertConfig& config = encoder.model().config;
  const data::WordPieceTokenizer& tokenizer = encoder.tokenizer();
  const data::WordPieceOptions& t = tokenizer.options();
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(tokenizer.vocab_size()));
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) tokens.push_back(tokenizer.id_to_token(id));
  std::vector<std::pair<std::string, gguf::Value>> out = {
      {"ember.bert.vocab_size", config.vocab_size},
      {"ember.bert.hidden_size", config.hidden_size},
      {"ember.bert.num_hidden_layers", config.num_hidden_layers},
      {"ember.bert.num_attention_heads", config.num_attention_heads},
      {"ember.bert.intermediate_size", config.intermediate_size},
      {"ember.bert.hidden_act", config.hidden_act},
      {"ember.bert.max_position_embeddings", config.max_position_embeddings},
      {"ember.bert.type_vocab_size", config.type_vocab_size},
      {"ember.bert.layer_norm_eps", config.layer_norm_eps},
      {"ember.sentence.max_seq_length", encoder.max_seq_length()},
      {"ember.sentence.pooling", encoder.options().mean_pooling ? "mean" : "cls"},
      {"ember.sentence.normalize", encoder.normalizes()},
      {"tokenizer.ggml.model", "bert"},
      {"tokenizer.ggml.tokens", gguf::Value::array(tokens)},
      {"ember.tokenizer.lower_case", t.lower_case},
      {"ember.tokenizer.tokenize_chinese_chars", t.tokenize_chinese_chars},
      {"ember.tokenizer.max_input_chars_per_word", t.max_input_chars_per_word},
      {"ember.tokenizer.model_max_length", t.model_max_length},
      {"ember.tokenizer.unk_token", t.unk_token},
      {"ember.tokenizer.cls_token", t.cls_token},
      {"ember.tokenizer.sep_token", t.sep_token},
      {"ember.tokenizer.pad_token", t.pad_token},
      {"ember.tokenizer.mask_token", t.mask_token},
  };
  if (t.strip_accents.has_value()) out.emplace_back("ember.tokenizer.strip_accents", *t.strip_accents);
  return out;
}

// --- writing --------------------------------------------------------------------------------------------

void save_model_gguf(const std::string& path, const std::string& kind, const std::string& quantization,
                     bool dynamic_activations, const std::map<std::string, std::string>& settings,
                     std::vector<std::pair<std::string, gguf::Value>> extra, const StateDict& state) {
  gguf::File file;
  file.metadata = {{"general.architecture", "ember"},
                   {kGgufModelKey, kind},
                   {kGgufQuantizationKey, quantization},
                   {kGgufDynamicKey, dynamic_activations}};
  for (auto& entry : extra) file.metadata.push_back(std::move(entry));
  for (const auto& [key, value] : settings) {
    if (key.starts_with("general.") || key.starts_with("ember.") || key.starts_with("tokenizer.")) continue;
    file.metadata.emplace_back(key, value);
  }
  for (const auto& [name, tensor] : state) file.tensors.emplace_back(name, tensor);
  gguf::save(path, file);
}

}  // namespace ember::cli

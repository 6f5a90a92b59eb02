// The model registry (ember/train/registry.h): the kinds, their settings, and rebuilding each from
// a file.
#include "ember/train/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

namespace ember::train {
namespace {

namespace fs = std::filesystem;

// A setting written as number_setting() wrote it; a malformed one is an error naming the key.
double float_setting(const Checkpoint& c, const std::string& key, std::string_view op) {
  const std::string& text = c.setting(key, op);
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  EMBER_CHECK(error == std::errc() && end == text.data() + text.size() && std::isfinite(value), "[", op,
              "] checkpoint ", c.path, " has no valid ", key, " entry (got \"", text, "\")");
  return value;
}

// "1,2,2" as a list of whole numbers.
std::vector<int64_t> list_setting(const Checkpoint& c, const std::string& key, std::string_view op) {
  const std::string& text = c.setting(key, op);
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    EMBER_CHECK(!item.empty() && item.size() < 6 && item.find_first_not_of("0123456789") == std::string::npos, "[", op,
                "] checkpoint ", c.path, " has a malformed ", key, " entry \"", text, "\"");
    values.push_back(std::stoll(item));
    start = comma + 1;
  }
  return values;
}

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (const int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// A GGUF metadata value of the expected type, with the key in the error when it is missing or of
// another type.
template <class Read>
auto gguf_entry(const Checkpoint& c, const std::string& key, std::string_view op, Read read) {
  const gguf::Value* value = c.gguf.find_value(key);
  EMBER_CHECK(value != nullptr, "[", op, "] ", c.path, " has no ", key, " entry");
  try {
    return read(*value);
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] ", c.path, ": ", key, ": ", e.what());
  }
}
int64_t gguf_integer(const Checkpoint& c, const std::string& key, std::string_view op) {
  return gguf_entry(c, key, op, [](const gguf::Value& v) { return v.as_integer(); });
}
std::string gguf_string(const Checkpoint& c, const std::string& key, std::string_view op) {
  return gguf_entry(c, key, op, [](const gguf::Value& v) { return v.as_string(); });
}
bool gguf_bool(const Checkpoint& c, const std::string& key, std::string_view op) {
  return gguf_entry(c, key, op, [](const gguf::Value& v) { return v.as_bool(); });
}
double gguf_float(const Checkpoint& c, const std::string& key, std::string_view op) {
  return gguf_entry(c, key, op, [](const gguf::Value& v) { return v.as_float64(); });
}

// --- each kind's config from a checkpoint's settings ------------------------------------------------

models::GPTConfig gpt_config(const Checkpoint& c, int64_t vocab_size, std::string_view op) {
  models::GPTConfig config{.vocab_size = vocab_size,
                           .block_size = c.count("context", op),
                           .n_layer = c.count("layers", op),
                           .n_head = c.count("heads", op),
                           .n_embd = c.count("dim", op)};
  if (c.settings.count("dropout") != 0) config.dropout = float_setting(c, "dropout", op);
  return config;
}

models::MambaConfig mamba_config(const Checkpoint& c, int64_t vocab_size, std::string_view op) {
  return {.vocab_size = vocab_size,
          .d_model = c.count("dim", op),
          .n_layer = c.count("layers", op),
          .d_state = c.count("state", op),
          .d_conv = c.count("conv", op),
          .expand = c.count("expand", op)};
}

models::UNetConfig unet_config(const Checkpoint& c, std::string_view op) {
  return {.channels = c.count("channels", op),
          .multipliers = list_setting(c, "multipliers", op),
          .groups = c.count("groups", op),
          .num_classes = c.count("classes", op)};
}

models::BertConfig bert_config(const Checkpoint& c, std::string_view op) {
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
  return config;
}

// The sentence encoder of a GGUF file `ember quantize` wrote from a MiniLM folder.
models::SentenceEncoder sentence_encoder(const Checkpoint& c, std::string_view op) {
  EMBER_CHECK(c.format == FileFormat::kGguf, "[", op, "] ", c.path,
              " is not a sentence-transformers folder or a GGUF file of one (it holds ", c.describe(), ")");
  const models::BertConfig config = bert_config(c, op);
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
      gguf_entry(c, "tokenizer.ggml.tokens", op, [](const gguf::Value& v) { return v.to_vector<std::string>(); });
  const std::string pooling = gguf_string(c, "ember.sentence.pooling", op);
  EMBER_CHECK(pooling == "mean" || pooling == "cls", "[", op, "] ", c.path,
              ": ember.sentence.pooling must be \"mean\" or \"cls\", got \"", pooling, "\"");
  const models::SentenceOptions options{.max_seq_length = gguf_integer(c, "ember.sentence.max_seq_length", op),
                                        .mean_pooling = pooling == "mean",
                                        .normalize = gguf_bool(c, "ember.sentence.normalize", op)};
  auto model = std::make_shared<models::BertModel>(config);
  load_model_state(*model, c.model_state(), c, op);  // the file holds the model's own names (no "bert.")
  model->eval();
  return models::SentenceEncoder(data::WordPieceTokenizer(std::move(tokens), tokenizer_options), std::move(model),
                                 options);
}

// The model a checkpoint's settings describe, built by `build`: settings no model can have (zero
// heads, a width too large for memory) are an error naming the file.
template <class Build>
auto build_checked(const Checkpoint& c, std::string_view op, Build build) {
  try {
    return build();
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] checkpoint ", c.path, ": its settings do not make a ", c.kind, " model: ", e.what());
  }
}

}  // namespace

const std::vector<ModelKind>& model_kinds() {
  static const std::vector<ModelKind> kinds = {
      {"mnist_mlp", "mnist", "MNIST classifier: Linear(784, 128), ReLU, Linear(128, 10)", {"model"}},
      {"mnist_cnn", "mnist", "MNIST classifier: LeNet-style CNN", {"model"}},
      {"gpt", "gpt", "character GPT (nanoGPT)", {"layers", "heads", "dim", "context", "vocabulary"}},
      {"ssm", "ssm", "character Mamba model", {"layers", "dim", "state", "expand", "conv", "vocabulary"}},
      {"diffusion",
       "diffusion",
       "class-conditional DDPM U-Net",
       {"channels", "multipliers", "groups", "classes", "image_size", "timesteps", "schedule"}},
      {"minilm", "", "sentence encoder (BERT, all-MiniLM-L6-v2)", {}},
  };
  return kinds;
}

const ModelKind& model_kind(std::string_view name) {
  std::string names;
  for (const ModelKind& kind : model_kinds()) {
    if (kind.name == name) return kind;
    names += (names.empty() ? "" : ", ") + kind.name;
  }
  EMBER_FAIL("[model_kind] unknown model kind \"", name, "\"; the kinds: ", names);
}

std::string kind_of(const ModelConfig& config) {
  struct Visitor {
    std::string operator()(const models::MnistConfig& c) const { return "mnist_" + c.model; }
    std::string operator()(const models::GPTConfig&) const { return "gpt"; }
    std::string operator()(const models::MambaConfig&) const { return "ssm"; }
    std::string operator()(const models::UNetConfig&) const { return "diffusion"; }
    std::string operator()(const models::BertConfig&) const { return "minilm"; }
  };
  return std::visit(Visitor{}, config);
}

std::map<std::string, std::string> config_settings(const ModelConfig& config) {
  struct Visitor {
    using Settings = std::map<std::string, std::string>;
    Settings operator()(const models::MnistConfig& c) const { return {{"model", c.model}}; }
    Settings operator()(const models::GPTConfig& c) const {
      return {{"layers", std::to_string(c.n_layer)},
              {"heads", std::to_string(c.n_head)},
              {"dim", std::to_string(c.n_embd)},
              {"context", std::to_string(c.block_size)},
              {"dropout", number_setting(c.dropout)}};
    }
    Settings operator()(const models::MambaConfig& c) const {
      return {{"layers", std::to_string(c.n_layer)},
              {"dim", std::to_string(c.d_model)},
              {"state", std::to_string(c.d_state)},
              {"expand", std::to_string(c.expand)},
              {"conv", std::to_string(c.d_conv)}};
    }
    Settings operator()(const models::UNetConfig& c) const {
      return {{"channels", std::to_string(c.channels)},
              {"multipliers", join(c.multipliers)},
              {"groups", std::to_string(c.groups)},
              {"classes", std::to_string(c.num_classes)}};
    }
    Settings operator()(const models::BertConfig&) const { return {}; }  // GGUF metadata: sentence_encoder_metadata
  };
  return std::visit(Visitor{}, config);
}

std::shared_ptr<nn::Module> build_model(const ModelConfig& config) {
  struct Visitor {
    std::shared_ptr<nn::Module> operator()(const models::MnistConfig& c) const { return models::mnist_model(c.model); }
    std::shared_ptr<nn::Module> operator()(const models::GPTConfig& c) const {
      return std::make_shared<models::GPT>(c);
    }
    std::shared_ptr<nn::Module> operator()(const models::MambaConfig& c) const {
      return std::make_shared<models::Mamba>(c);
    }
    std::shared_ptr<nn::Module> operator()(const models::UNetConfig& c) const {
      return std::make_shared<models::UNet>(c);
    }
    std::shared_ptr<nn::Module> operator()(const models::BertConfig& c) const {
      return std::make_shared<models::BertModel>(c);
    }
  };
  return std::visit(Visitor{}, config);
}

void LoadedModel::fail_as(const char* type) const {
  EMBER_FAIL("[load_model] ", source.path, " holds a ", kind, " model (", model ? model->name() : "none",
             "), not the class asked for (", type, ")");
}

LoadedModel load_model(const std::string& path, std::string_view op, const LoadOptions& options) {
  std::error_code error;
  // A folder, or nothing at all: a sentence-transformers folder (from_folder's error names scripts/setup).
  const bool minilm =
      options.kinds.empty() || std::find(options.kinds.begin(), options.kinds.end(), "minilm") != options.kinds.end();
  if (minilm && (fs::is_directory(path, error) || !fs::exists(path, error))) {
    models::SentenceEncoder encoder = models::SentenceEncoder::from_folder(path);
    LoadedModel loaded{.kind = "minilm", .config = encoder.model().config};
    loaded.model = encoder.model().shared_from_this();
    loaded.source.path = path;
    loaded.source.kind = "minilm";
    loaded.encoder.emplace(std::move(encoder));
    return loaded;
  }
  return load_model(read_checkpoint(path, op), op, options);
}

LoadedModel load_model(Checkpoint c, std::string_view op, const LoadOptions& options) {
  if (!options.kinds.empty() && std::find(options.kinds.begin(), options.kinds.end(), c.kind) == options.kinds.end()) {
    EMBER_FAIL("[", op, "] checkpoint ", c.path, " is not ", options.expected, " (it holds ", c.describe(), ")");
  }
  const std::string_view weights = options.weights;
  LoadedModel loaded{.kind = c.kind};
  if (c.kind == "minilm") {
    models::SentenceEncoder encoder = sentence_encoder(c, op);
    loaded.config = encoder.model().config;
    loaded.model = encoder.model().shared_from_this();
    loaded.encoder.emplace(std::move(encoder));
    c.tensors.clear();
    loaded.source = std::move(c);
    return loaded;
  }
  std::string names;
  bool known = false;
  for (const ModelKind& kind : model_kinds()) {
    known = known || kind.name == c.kind;
    names += (names.empty() ? "" : ", ") + kind.name;
  }
  EMBER_CHECK(known, "[", op, "] ", c.path, " holds ", c.describe(), ": not a model ember knows (", names, ")");
  for (const std::string& key : model_kind(c.kind).architecture_keys) {
    EMBER_CHECK(c.settings.count(key) != 0, "[", op, "] checkpoint ", c.path, " has no ", key, " entry");
  }
  if (c.kind == "gpt" || c.kind == "ssm") {
    loaded.tokenizer.emplace(vocabulary_from_hex(c.setting(keys::kVocabulary, op), c.path, op));
    const int64_t vocab_size = loaded.tokenizer->vocab_size();
    if (c.kind == "gpt") {
      loaded.config = gpt_config(c, vocab_size, op);
    } else {
      loaded.config = mamba_config(c, vocab_size, op);
    }
    loaded.context = c.count("context", op);
  } else if (c.kind == "diffusion") {
    loaded.config = unet_config(c, op);
    loaded.schedule.emplace(c.count("timesteps", op), models::noise_schedule(c.setting("schedule", op)));
  } else {
    loaded.config = models::MnistConfig{.model = c.kind.substr(std::string("mnist_").size())};
  }
  loaded.model = build_checked(c, op, [&] { return build_model(loaded.config); });
  StateDict state = weights == kModelPrefix ? c.model_state() : c.part(weights);
  if (weights != kModelPrefix) {
    EMBER_CHECK(c.format == FileFormat::kSafetensors && !state.empty(), "[", op, "] checkpoint ", c.path,
                " holds no tensors under \"", weights, "\"");
  }
  load_model_state(*loaded.model, state, c, op);
  loaded.model->eval();
  c.tensors.clear();
  loaded.source = std::move(c);
  return loaded;
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

}  // namespace ember::train

// BERT in Hugging Face's BertModel layout, its loader, and sentence-transformers' encoder
// (ember/models/bert.h). Shapes: B texts, S tokens, H hidden features, h heads of H / h features.
#include "ember/models/bert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "base/json_text.h"
#include "ember/autograd.h"
#include "ember/io.h"

namespace ember::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What a missing model folder should tell the user: how to get the one ember uses.
constexpr const char* kSetupHint = "scripts/setup downloads all-MiniLM-L6-v2 to data/minilm";

json read_json(const fs::path& path, const char* op) {
  std::error_code error;
  EMBER_CHECK(fs::is_regular_file(path, error), "[", op, "] '", path.string(), "' does not exist");
  std::ifstream in(path);
  EMBER_CHECK(in.good(), "[", op, "] cannot open '", path.string(), "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    EMBER_FAIL("[", op, "] '", path.string(), "' is not valid JSON: ", e.what());
  }
}

void require_folder(const std::string& folder, const char* op) {
  std::error_code error;
  EMBER_CHECK(fs::is_directory(folder, error), "[", op, "] the model folder '", folder, "' does not exist (",
              kSetupHint, ")");
}

template <class T>
void read_field(const json& config, const char* key, T& field, const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return;
  try {
    field = config[key].get<T>();
  } catch (const json::exception&) {
    EMBER_FAIL("[bert] '", path, "': \"", key, "\" has the wrong type: ", detail::json_text(config[key]));
  }
}

// The GELU form of a Hugging Face activation name (nullopt: ReLU).
std::optional<std::string_view> gelu_form(const std::string& hidden_act) {
  if (hidden_act == "gelu") return "none";
  if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh") return "tanh";
  return std::nullopt;
}

}  // namespace

// --- config --------------------------------------------------------------------------------------

BertConfig BertConfig::from_json_file(const std::string& path) {
  const json config = read_json(path, "bert");
  EMBER_CHECK(config.is_object(), "[bert] '", path, "' must hold a JSON object");
  BertConfig c;
  read_field(config, "vocab_size", c.vocab_size, path);
  read_field(config, "hidden_size", c.hidden_size, path);
  read_field(config, "num_hidden_layers", c.num_hidden_layers, path);
  read_field(config, "num_attention_heads", c.num_attention_heads, path);
  read_field(config, "intermediate_size", c.intermediate_size, path);
  read_field(config, "hidden_act", c.hidden_act, path);
  read_field(config, "max_position_embeddings", c.max_position_embeddings, path);
  read_field(config, "type_vocab_size", c.type_vocab_size, path);
  read_field(config, "layer_norm_eps", c.layer_norm_eps, path);
  read_field(config, "hidden_dropout_prob", c.hidden_dropout_prob, path);
  read_field(config, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, path);
  std::string model_type = "bert", position_embedding_type = "absolute";
  read_field(config, "model_type", model_type, path);
  read_field(config, "position_embedding_type", position_embedding_type, path);
  EMBER_CHECK(model_type == "bert", "[bert] '", path, "' describes a \"", model_type, "\" model, not \"bert\"");
  EMBER_CHECK(position_embedding_type == "absolute", "[bert] '", path, "': position_embedding_type \"",
              position_embedding_type, "\" is not supported (only \"absolute\")");
  c.validate(path);
  return c;
}

void BertConfig::validate(const std::string& source) const {
  EMBER_CHECK(hidden_act == "relu" || gelu_form(hidden_act).has_value(), "[bert] '", source, "': hidden_act \"",
              hidden_act, "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh or relu)");
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size},
                                    {"hidden_size", hidden_size},
                                    {"num_hidden_layers", num_hidden_layers},
                                    {"num_attention_heads", num_attention_heads},
                                    {"intermediate_size", intermediate_size},
                                    {"max_position_embeddings", max_position_embeddings},
                                    {"type_vocab_size", type_vocab_size}}) {
    EMBER_CHECK(value > 0, "[bert] '", source, "': ", name, " must be positive, got ", value);
  }
  EMBER_CHECK(hidden_size % num_attention_heads == 0, "[bert] '", source, "': hidden_size ", hidden_size,
              " is not a multiple of num_attention_heads ", num_attention_heads);
  EMBER_CHECK(layer_norm_eps > 0, "[bert] '", source, "': layer_norm_eps must be positive, got ", layer_norm_eps);
}

// --- modules -------------------------------------------------------------------------------------

BertEmbeddings::BertEmbeddings(const BertConfig& config) {
  word_embeddings =
      register_module("word_embeddings", std::make_shared<nn::Embedding>(config.vocab_size, config.hidden_size));
  position_embeddings = register_module(
      "position_embeddings", std::make_shared<nn::Embedding>(config.max_position_embeddings, config.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings",
                                          std::make_shared<nn::Embedding>(config.type_vocab_size, config.hidden_size));
  LayerNorm =
      register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{config.hidden_size}, config.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.hidden_dropout_prob));
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids) {
  EMBER_CHECK(input_ids.dim() == 2 && input_ids.dtype() == DType::kInt64, "[bert] input_ids must be (B, S) int64, got ",
              input_ids.shape(), " ", input_ids.dtype());
  const int64_t length = input_ids.size(1);
  EMBER_CHECK(length <= position_embeddings->num_embeddings, "[bert] a sequence of ", length,
              " tokens is longer than the model's ", position_embeddings->num_embeddings, " positions");
  // (B, S, H) + (S, H) + (B, S, H) or (H)
  Tensor x = (*word_embeddings)(input_ids) + (*position_embeddings)(arange(length, DType::kInt64));
  if (token_type_ids.defined()) {
    EMBER_CHECK(token_type_ids.shape() == input_ids.shape(), "[bert] token_type_ids ", token_type_ids.shape(),
                " must have input_ids' shape ", input_ids.shape());
    x = x + (*token_type_embeddings)(token_type_ids);
  } else {
    x = x + token_type_embeddings->weight.select(0, 0);
  }
  return (*dropout)((*LayerNorm)(x));
}

BertSelfAttention::BertSelfAttention(const BertConfig& config)
    : num_heads(config.num_attention_heads), dropout_p(config.attention_probs_dropout_prob) {
  query = register_module("query", std::make_shared<nn::Linear>(config.hidden_size, config.hidden_size));
  key = register_module("key", std::make_shared<nn::Linear>(config.hidden_size, config.hidden_size));
  value = register_module("value", std::make_shared<nn::Linear>(config.hidden_size, config.hidden_size));
}

Tensor BertSelfAttention::forward(const Tensor& hidden, const Tensor& mask) {
  const int64_t batch = hidden.size(0), length = hidden.size(1), features = hidden.size(2);
  // (B, S, H) -> (B, h, S, H / h), a view
  auto split_heads = [&](const Tensor& x) {
    return x.view({batch, length, num_heads, features / num_heads}).transpose(1, 2);
  };
  const Tensor context = scaled_dot_product_attention(
      split_heads((*query)(hidden)), split_heads((*key)(hidden)), split_heads((*value)(hidden)),
      mask.defined() ? std::optional<Tensor>(mask) : std::nullopt, is_training() ? dropout_p : 0.0);
  return context.transpose(1, 2).reshape({batch, length, features});
}

BertResidualOutput::BertResidualOutput(int64_t in_features, const BertConfig& config) {
  dense = register_module("dense", std::make_shared<nn::Linear>(in_features, config.hidden_size));
  LayerNorm =
      register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{config.hidden_size}, config.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.hidden_dropout_prob));
}

Tensor BertResidualOutput::forward(const Tensor& hidden, const Tensor& residual) {
  return (*LayerNorm)((*dropout)((*dense)(hidden)) + residual);
}

BertAttention::BertAttention(const BertConfig& config) {
  self = register_module("self", std::make_shared<BertSelfAttention>(config));
  output = register_module("output", std::make_shared<BertResidualOutput>(config.hidden_size, config));
}

Tensor BertAttention::forward(const Tensor& hidden, const Tensor& mask) {
  return output->forward(self->forward(hidden, mask), hidden);
}

BertIntermediate::BertIntermediate(const BertConfig& config) : hidden_act(config.hidden_act) {
  dense = register_module("dense", std::make_shared<nn::Linear>(config.hidden_size, config.intermediate_size));
}

Tensor BertIntermediate::forward(const Tensor& hidden) {
  // The activation runs in the GEMM's epilogue (linear_gelu) rather than as a second pass; a
  // quantized layer (Linear::quantize_) has no such epilogue and runs its own product first.
  if (const std::optional<std::string_view> form = gelu_form(hidden_act)) {
    if (dense->is_quantized()) return gelu((*dense)(hidden), *form);
    return linear_gelu(hidden, dense->weight, dense->bias, *form);
  }
  return relu((*dense)(hidden));
}

BertLayer::BertLayer(const BertConfig& config) {
  attention = register_module("attention", std::make_shared<BertAttention>(config));
  intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(config));
  output = register_module("output", std::make_shared<BertResidualOutput>(config.intermediate_size, config));
}

Tensor BertLayer::forward(const Tensor& hidden, const Tensor& mask) {
  const Tensor attended = attention->forward(hidden, mask);
  return output->forward((*intermediate)(attended), attended);
}

BertEncoder::BertEncoder(const BertConfig& config) {
  layer = register_module("layer", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layer->push_back(std::make_shared<BertLayer>(config));
}

Tensor BertEncoder::forward(const Tensor& hidden, const Tensor& mask) {
  Tensor x = hidden;
  for (const std::shared_ptr<nn::Module>& block : *layer) x = static_cast<BertLayer&>(*block).forward(x, mask);
  return x;
}

BertPooler::BertPooler(const BertConfig& config) {
  dense = register_module("dense", std::make_shared<nn::Linear>(config.hidden_size, config.hidden_size));
}

Tensor BertPooler::forward(const Tensor& hidden) { return tanh((*dense)(hidden.select(1, 0))); }

BertModel::BertModel(const BertConfig& bert_config) : config(bert_config) {
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(config));
  encoder = register_module("encoder", std::make_shared<BertEncoder>(config));
  pooler = register_module("pooler", std::make_shared<BertPooler>(config));
}

BertOutput BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  Tensor mask;  // (B, 1, 1, S) bool: which keys each query may attend to; undefined when all
  if (attention_mask.defined()) {
    EMBER_CHECK(attention_mask.shape() == input_ids.shape(), "[bert] attention_mask ", attention_mask.shape(),
                " must have input_ids' shape ", input_ids.shape());
    const Tensor keep = attention_mask.ne(0);
    if (!all(keep).item<bool>()) mask = keep.view({input_ids.size(0), 1, 1, input_ids.size(1)});
  }
  const Tensor hidden = encoder->forward(embeddings->forward(input_ids, token_type_ids), mask);
  return {hidden, (*pooler)(hidden)};
}

// --- loading -------------------------------------------------------------------------------------

void load_bert_state(BertModel& model, const StateDict& state, const std::string& source) {
  StateDict renamed;
  for (const auto& [key, tensor] : state) {
    std::string name = key.starts_with("bert.") ? key.substr(5) : key;
    if (name == "embeddings.position_ids") continue;  // a buffer of arange(max_positions) in old checkpoints
    renamed.insert_or_assign(std::move(name), tensor);
  }
  try {
    model.load_state_dict(renamed);
  } catch (const Error& e) {
    EMBER_FAIL("[load_bert] cannot load ", source, ": ", e.what());
  }
}

std::shared_ptr<BertModel> load_bert(const std::string& folder) {
  require_folder(folder, "load_bert");
  const fs::path dir(folder);
  const std::string weights = (dir / "model.safetensors").string();
  std::error_code error;
  EMBER_CHECK(fs::is_regular_file(weights, error), "[load_bert] '", weights, "' does not exist (", kSetupHint, ")");
  auto model = std::make_shared<BertModel>(BertConfig::from_json_file((dir / "config.json").string()));
  load_bert_state(*model, load(weights), "'" + weights + "'");
  model->eval();
  return model;
}

// --- sentence embeddings -------------------------------------------------------------------------

Tensor mean_pooling(const Tensor& last_hidden_state, const Tensor& attention_mask) {
  EMBER_CHECK(last_hidden_state.dim() == 3 && attention_mask.dim() == 2 &&
                  attention_mask.size(0) == last_hidden_state.size(0) &&
                  attention_mask.size(1) == last_hidden_state.size(1),
              "[mean_pooling] expects hidden states (B, S, H) and a mask (B, S), got ", last_hidden_state.shape(),
              " and ", attention_mask.shape());
  const Tensor weights = attention_mask.to(last_hidden_state.dtype()).unsqueeze(-1);  // (B, S, 1)
  const Tensor counts = weights.sum({1}).clamp(1e-9, std::nullopt);                   // (B, 1)
  return (last_hidden_state * weights).sum({1}) / counts;
}

Tensor l2_normalize(const Tensor& x, double eps) { return x / x.norm(2.0, {-1}, true).clamp(eps, std::nullopt); }

SentenceEncoder::SentenceEncoder(data::WordPieceTokenizer tokenizer, std::shared_ptr<BertModel> model,
                                 const SentenceOptions& options)
    : tokenizer_(std::move(tokenizer)), model_(std::move(model)), options_(options) {
  EMBER_CHECK(model_ != nullptr, "[SentenceEncoder] needs a model");
  EMBER_CHECK(tokenizer_.vocab_size() <= model_->config.vocab_size, "[SentenceEncoder] the tokenizer has ",
              tokenizer_.vocab_size(), " tokens, more than the model's vocab_size ", model_->config.vocab_size);
  options_.max_seq_length = std::min(options_.max_seq_length, model_->config.max_position_embeddings);
  EMBER_CHECK(options_.max_seq_length >= 2, "[SentenceEncoder] max_seq_length must be at least 2, got ",
              options_.max_seq_length);
}

SentenceEncoder SentenceEncoder::from_folder(const std::string& folder) {
  require_folder(folder, "SentenceEncoder");
  const fs::path dir(folder);
  data::WordPieceTokenizer tokenizer = data::WordPieceTokenizer::from_folder(folder);
  SentenceOptions options{.max_seq_length = tokenizer.options().model_max_length};
  std::error_code error;
  if (fs::exists(dir / "sentence_bert_config.json", error)) {
    const json config = read_json(dir / "sentence_bert_config.json", "SentenceEncoder");
    read_field(config, "max_seq_length", options.max_seq_length, (dir / "sentence_bert_config.json").string());
  }
  const fs::path pooling_path = dir / "1_Pooling" / "config.json";
  if (fs::exists(pooling_path, error)) {
    const json pooling = read_json(pooling_path, "SentenceEncoder");
    auto mode = [&](const char* key) { return pooling.contains(key) && pooling[key] == true; };
    EMBER_CHECK(mode("pooling_mode_mean_tokens") != mode("pooling_mode_cls_token") &&
                    !mode("pooling_mode_max_tokens") && !mode("pooling_mode_mean_sqrt_len_tokens") &&
                    !mode("pooling_mode_weightedmean_tokens") && !mode("pooling_mode_lasttoken"),
                "[SentenceEncoder] '", pooling_path.string(),
                "': only mean pooling or the [CLS] token is supported, one of them alone; got ",
                detail::json_text(pooling));
    options.mean_pooling = mode("pooling_mode_mean_tokens");
  }
  if (fs::exists(dir / "modules.json", error)) {
    const json modules = read_json(dir / "modules.json", "SentenceEncoder");
    options.normalize = false;
    for (const json& module : modules) {
      if (module.contains("type") && module["type"] == "sentence_transformers.models.Normalize") {
        options.normalize = true;
      }
    }
  }
  return SentenceEncoder(std::move(tokenizer), load_bert(folder), options);
}

Tensor SentenceEncoder::encode(const std::vector<std::string>& texts, int64_t batch_size) const {
  EMBER_CHECK(batch_size > 0, "[SentenceEncoder] batch_size must be positive, got ", batch_size);
  const int64_t hidden = model_->config.hidden_size;
  if (texts.empty()) return zeros({0, hidden});
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(texts.size());
  for (const std::string& text : texts) ids.push_back(tokenizer_.encode(text, options_.max_seq_length));
  // Longest first, so each batch holds texts of similar lengths.
  std::vector<int64_t> order(texts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a].size() > ids[b].size(); });

  autograd::NoGradGuard no_grad;
  struct EvalMode {  // eval() for the call, the caller's mode restored after (also on error)
    nn::Module& model;
    const bool was_training = model.is_training();
    explicit EvalMode(nn::Module& m) : model(m) { model.eval(); }
    ~EvalMode() { model.train(was_training); }
  } eval_mode(*model_);
  std::vector<Tensor> batches;
  for (size_t first = 0; first < order.size(); first += static_cast<size_t>(batch_size)) {
    const size_t count = std::min(static_cast<size_t>(batch_size), order.size() - first);
    const size_t length = ids[order[first]].size();
    Tensor input_ids =
        full({static_cast<int64_t>(count), static_cast<int64_t>(length)}, tokenizer_.pad_id(), DType::kInt64);
    Tensor attention_mask = zeros({static_cast<int64_t>(count), static_cast<int64_t>(length)}, DType::kInt64);
    auto* id_data = input_ids.data_ptr<int64_t>();
    auto* mask_data = attention_mask.data_ptr<int64_t>();
    for (size_t row = 0; row < count; ++row) {
      const std::vector<int64_t>& text = ids[order[first + row]];
      std::copy(text.begin(), text.end(), id_data + row * length);
      std::fill_n(mask_data + row * length, text.size(), int64_t{1});
    }
    const Tensor states = model_->forward(input_ids, attention_mask).last_hidden_state;
    Tensor pooled = options_.mean_pooling ? mean_pooling(states, attention_mask) : states.select(1, 0);
    batches.push_back(options_.normalize ? l2_normalize(pooled) : pooled);
  }
  // Back to the order of `texts`: row i of the batches is text order[i], so text t is row position[t].
  std::vector<int64_t> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return index_select(cat(batches, 0), 0, from_vector(position)).contiguous();
}

}  // namespace ember::models

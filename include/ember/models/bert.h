// BERT (Devlin et al. 2018) with Hugging Face's BertModel layout: the same modules under the same
// names, so a checkpoint's keys ("encoder.layer.3.attention.self.query.weight", ...) load by name,
// and a SentenceEncoder that turns texts into sentence embeddings as sentence-transformers does
// (tokenize, BERT, mean over the tokens, L2-normalize). all-MiniLM-L6-v2, which scripts/setup
// fetches to data/minilm, is one: 6 layers, 12 heads, hidden size 384.
//
//   auto encoder = ember::models::SentenceEncoder::from_folder("data/minilm");
//   ember::Tensor vectors = encoder.encode({"A man is eating food.", "A man eats."});  // (2, 384)
//   ember::Tensor similarity = vectors.matmul(vectors.t());                           // cosines
//
// The modules are ordinary nn modules (trainable, state_dict, to(dtype)); attention runs through
// ember::scaled_dot_product_attention with the padding as a bool mask.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/nn.h"
#include "ember/tokenizer.h"

namespace ember::models {

/// A BERT's hyper-parameters, as the fields of a Hugging Face config.json (the defaults are
/// bert-base-uncased's).
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh form) or "relu"
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;

  /// Reads a config.json; absent fields keep their defaults. Models other than BERT's absolute
  /// position embeddings, and inconsistent sizes, throw an ember::Error naming the field.
  static BertConfig from_json_file(const std::string& path);
  /// Throws an ember::Error naming `source` (where the values came from) for a hidden_act ember
  /// does not run, a size that is not positive, or hidden_size not a multiple of the heads.
  void validate(const std::string& source) const;
};

/// Word, position and token-type embeddings, summed, then LayerNorm and dropout.
class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  using nn::Module::forward;
  /// input_ids (B, S) int64; token_type_ids (B, S) int64 or undefined (all zeros) -> (B, S, hidden).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  std::string name() const override { return "BertEmbeddings"; }

  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;  // NOLINT(readability-identifier-naming): the checkpoint's name
  std::shared_ptr<nn::Dropout> dropout;
};

/// Multi-head self-attention's projections (query, key, value) and the attention itself.
class BertSelfAttention : public nn::Module {
 public:
  explicit BertSelfAttention(const BertConfig& config);
  using nn::Module::forward;
  /// hidden (B, S, hidden); mask undefined or bool, broadcastable to (B, heads, S, S), true = attend.
  Tensor forward(const Tensor& hidden, const Tensor& mask);
  std::string name() const override { return "BertSelfAttention"; }

  const int64_t num_heads;
  const double dropout_p;
  std::shared_ptr<nn::Linear> query, key, value;
};

/// dense, dropout, then LayerNorm of that plus the residual input: after attention (BertSelfOutput)
/// and after the feed-forward network (BertOutput) alike.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in_features, const BertConfig& config);
  using nn::Module::forward;
  Tensor forward(const Tensor& hidden, const Tensor& residual);
  std::string name() const override { return "BertResidualOutput"; }

  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;  // NOLINT(readability-identifier-naming)
  std::shared_ptr<nn::Dropout> dropout;
};

/// Self-attention ("self") and its output block ("output").
class BertAttention : public nn::Module {
 public:
  explicit BertAttention(const BertConfig& config);
  using nn::Module::forward;
  Tensor forward(const Tensor& hidden, const Tensor& mask);
  std::string name() const override { return "BertAttention"; }

  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

/// The feed-forward network's first half: dense then the activation (fused into the GEMM, unless
/// dense is quantized).
class BertIntermediate : public nn::Module {
 public:
  explicit BertIntermediate(const BertConfig& config);
  Tensor forward(const Tensor& hidden) override;
  std::string name() const override { return "BertIntermediate"; }

  const std::string hidden_act;
  std::shared_ptr<nn::Linear> dense;
};

/// One transformer block: attention, then the feed-forward network (intermediate, output).
class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& config);
  using nn::Module::forward;
  Tensor forward(const Tensor& hidden, const Tensor& mask);
  std::string name() const override { return "BertLayer"; }

  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

/// The stack of blocks, "layer.0" ... "layer.N-1".
class BertEncoder : public nn::Module {
 public:
  explicit BertEncoder(const BertConfig& config);
  using nn::Module::forward;
  Tensor forward(const Tensor& hidden, const Tensor& mask);
  std::string name() const override { return "BertEncoder"; }

  std::shared_ptr<nn::ModuleList> layer;
};

/// tanh(dense(hidden of the first token, [CLS])).
class BertPooler : public nn::Module {
 public:
  explicit BertPooler(const BertConfig& config);
  Tensor forward(const Tensor& hidden) override;
  std::string name() const override { return "BertPooler"; }

  std::shared_ptr<nn::Linear> dense;
};

struct BertOutput {
  Tensor last_hidden_state;  // (B, S, hidden)
  Tensor pooler_output;      // (B, hidden)
};

class BertModel : public nn::Module {
 public:
  explicit BertModel(const BertConfig& config);
  using nn::Module::forward;
  /// input_ids (B, S) int64; attention_mask (B, S), non-zero for tokens and 0 for padding, or
  /// undefined (every position attends); token_type_ids (B, S) int64 or undefined (zeros).
  BertOutput forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids = {});
  std::string name() const override { return "BertModel"; }

  const BertConfig config;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;
};

/// The BERT of a Hugging Face model folder: config.json and model.safetensors. Keys load by name;
/// a "bert." prefix (checkpoints of BertFor* heads) is dropped, as is the position_ids buffer old
/// checkpoints carry. Missing, unexpected and mis-shaped keys throw one ember::Error listing them
/// all; a missing folder names scripts/setup, which fetches all-MiniLM-L6-v2 to data/minilm.
std::shared_ptr<BertModel> load_bert(const std::string& folder);

/// Loads `state` (checkpoint keys, as load_bert reads them) into `model`, with load_bert's key rules.
void load_bert_state(BertModel& model, const StateDict& state, const std::string& source = "the state dict");

/// Mean of last_hidden_state over the positions where attention_mask is non-zero: (B, S, H),
/// (B, S) -> (B, H). A row with no tokens gives zeros.
Tensor mean_pooling(const Tensor& last_hidden_state, const Tensor& attention_mask);

/// Each row divided by its L2 norm (at least eps), as torch.nn.functional.normalize.
Tensor l2_normalize(const Tensor& x, double eps = 1e-12);

/// How a SentenceEncoder turns BERT's hidden states into one vector per text.
struct SentenceOptions {
  int64_t max_seq_length = 512;  // texts are cut to this many tokens, specials included
  bool mean_pooling = true;      // false: the [CLS] token's hidden state
  bool normalize = true;         // L2-normalize the pooled vectors
};

/// Texts to sentence embeddings, as a sentence-transformers folder describes: tokenizer, BERT,
/// pooling (1_Pooling/config.json: mean or [CLS]), normalization (when modules.json lists it, or
/// when there is no modules.json), texts cut to max_seq_length tokens (sentence_bert_config.json).
class SentenceEncoder {
 public:
  static SentenceEncoder from_folder(const std::string& folder);
  /// From parts loaded elsewhere (a GGUF file's, say). max_seq_length is capped at the model's
  /// positions; a tokenizer with more tokens than the model's vocab_size is an ember::Error.
  SentenceEncoder(data::WordPieceTokenizer tokenizer, std::shared_ptr<BertModel> model, const SentenceOptions& options);

  /// (N, hidden) float32 embeddings of `texts`, computed without gradients in eval mode, in
  /// batches of up to batch_size texts of similar length (less padding). Empty `texts` gives
  /// (0, hidden).
  Tensor encode(const std::vector<std::string>& texts, int64_t batch_size = 32) const;

  const data::WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  BertModel& model() const { return *model_; }
  int64_t max_seq_length() const { return options_.max_seq_length; }
  bool normalizes() const { return options_.normalize; }
  const SentenceOptions& options() const { return options_; }

 private:
  data::WordPieceTokenizer tokenizer_;
  std::shared_ptr<BertModel> model_;
  SentenceOptions options_;
};

}  // namespace ember::models

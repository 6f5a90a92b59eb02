// BERT and sentence embeddings: the pretrained MiniLM in data/minilm (all-MiniLM-L6-v2) against
// Hugging Face in PyTorch (tests/golden/make_minilm.py wrote minilm.json): BertModel's hidden
// states and pooler output, and sentence-transformers' embeddings of 50 sentences within 1e-4.
// On a tiny random BERT (no data needed): parameter names, padding that changes nothing, a
// backward pass reaching every parameter, and the loader's errors (missing folder, mis-shaped,
// missing and unexpected keys).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/bert.h"
#include "minilm_golden.h"

namespace ember::models {
namespace {

namespace fs = std::filesystem;
using minilm_golden::expect_error;
using minilm_golden::golden;
using minilm_golden::kMiniLM;
using nlohmann::json;

// The MiniLM, loaded once; a clear failure when scripts/setup has not fetched it.
const SentenceEncoder& minilm() {
  static const SentenceEncoder encoder = [] {
    if (!fs::exists(kMiniLM + "/model.safetensors")) {
      ADD_FAILURE() << kMiniLM << " is missing: run scripts/setup (it downloads all-MiniLM-L6-v2 there)";
    }
    return SentenceEncoder::from_folder(kMiniLM);
  }();
  return encoder;
}

// Nested JSON lists of numbers as a float32 tensor of `shape`.
Tensor tensor_of(const json& values, const Shape& shape) {
  std::vector<float> flat;
  std::function<void(const json&)> walk = [&](const json& v) {
    if (v.is_array()) {
      for (const json& e : v) walk(e);
    } else {
      flat.push_back(v.get<float>());
    }
  };
  walk(values);
  return from_vector(flat, shape);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return (a.to(DType::kFloat64) - b.to(DType::kFloat64)).abs().max().item<double>();
}

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 32;
  c.max_position_embeddings = 24;
  return c;
}

// A folder per test, removed afterwards.
class BertFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("ember_bert_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string folder() const { return dir_.string(); }
  void write_tiny_config() const {
    std::ofstream(dir_ / "config.json") << R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 32, "hidden_act": "gelu",
      "max_position_embeddings": 24, "type_vocab_size": 2, "layer_norm_eps": 1e-12})";
  }
  fs::path dir_;
};

TEST(BertMiniLM, ConfigAndParameterNamesMatchTheCheckpoint) {
  const BertConfig config = BertConfig::from_json_file(kMiniLM + "/config.json");
  EXPECT_EQ(config.hidden_size, 384);
  EXPECT_EQ(config.num_hidden_layers, 6);
  EXPECT_EQ(config.num_attention_heads, 12);
  EXPECT_EQ(config.intermediate_size, 1536);
  EXPECT_EQ(config.vocab_size, 30522);
  EXPECT_EQ(config.hidden_act, "gelu");
  EXPECT_DOUBLE_EQ(config.layer_norm_eps, 1e-12);

  std::set<std::string> checkpoint;
  for (const auto& [key, tensor] : load(kMiniLM + "/model.safetensors")) checkpoint.insert(key);
  checkpoint.erase("embeddings.position_ids");
  std::set<std::string> model;
  for (const auto& [key, tensor] : minilm().model().state_dict()) model.insert(key);
  EXPECT_EQ(model, checkpoint);
  EXPECT_EQ(minilm().max_seq_length(), golden()["embeddings"]["max_seq_length"].get<int64_t>());
  EXPECT_TRUE(minilm().normalizes());
}

TEST(BertMiniLM, HiddenStatesMatchHuggingFace) {
  const json& g = golden()["model"];
  const auto ids = g["input_ids"].get<std::vector<std::vector<int64_t>>>();
  const auto batch = static_cast<int64_t>(ids.size()), length = static_cast<int64_t>(ids[0].size());
  std::vector<int64_t> flat_ids, flat_mask;
  for (size_t i = 0; i < ids.size(); ++i) {
    flat_ids.insert(flat_ids.end(), ids[i].begin(), ids[i].end());
    const auto mask = g["attention_mask"][i].get<std::vector<int64_t>>();
    flat_mask.insert(flat_mask.end(), mask.begin(), mask.end());
  }
  // Our tokenizer gives the same ids.
  const data::BatchEncoding encoded = minilm().tokenizer().encode_batch(g["texts"].get<std::vector<std::string>>());
  const Tensor input_ids = from_vector(flat_ids, Shape{batch, length});
  const Tensor attention_mask = from_vector(flat_mask, Shape{batch, length});
  EXPECT_EQ(max_abs_diff(encoded.input_ids, input_ids), 0.0);

  autograd::NoGradGuard no_grad;
  const BertOutput out = minilm().model().forward(input_ids, attention_mask);
  const double hidden_error =
      max_abs_diff(out.last_hidden_state, tensor_of(g["last_hidden_state"], Shape{batch, length, 384}));
  const double pooler_error = max_abs_diff(out.pooler_output, tensor_of(g["pooler_output"], Shape{batch, 384}));
  EXPECT_LT(hidden_error, 1e-4);
  EXPECT_LT(pooler_error, 1e-4);
  RecordProperty("max_abs_error_last_hidden_state", std::to_string(hidden_error));
  std::printf("[ minilm   ] last_hidden_state max-abs error %.3g, pooler_output %.3g\n", hidden_error, pooler_error);
}

TEST(BertMiniLM, SentenceEmbeddingsMatchSentenceTransformers) {
  const json& g = golden()["embeddings"];
  const auto sentences = g["sentences"].get<std::vector<std::string>>();
  const auto count = static_cast<int64_t>(sentences.size());
  const Tensor expected = tensor_of(g["vectors"], Shape{count, 384});
  // Small batches: the longest sentence (256 tokens after truncation) pads only its own batch.
  const Tensor got = minilm().encode(sentences, 4);
  ASSERT_EQ(got.shape(), (Shape{count, 384}));
  const double error = max_abs_diff(got, expected);
  EXPECT_LT(error, 1e-4);
  RecordProperty("max_abs_error_embeddings", std::to_string(error));
  std::printf("[ minilm   ] %lld sentence embeddings: max-abs error %.3g against sentence-transformers\n",
              static_cast<long long>(count), error);
  // Unit vectors; batching changes nothing but rounding.
  EXPECT_LT((got.norm(2.0, {1}) - 1.0).abs().max().item<double>(), 1e-5);
  const std::vector<std::string> few(sentences.begin(), sentences.begin() + 5);
  EXPECT_LT(max_abs_diff(minilm().encode(few, 1), got.narrow(0, 0, 5)), 1e-5);
  EXPECT_EQ(minilm().encode({}).shape(), (Shape{0, 384}));
}

TEST(Bert, ParameterNamesFollowHuggingFace) {
  BertModel model(tiny_config());
  const StateDict state = model.state_dict();
  EXPECT_EQ(state.size(), 5U + 16U * 2U + 2U);
  for (const char* key :
       {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
        "encoder.layer.1.attention.self.query.weight", "encoder.layer.1.attention.self.key.bias",
        "encoder.layer.1.attention.self.value.weight", "encoder.layer.1.attention.output.dense.weight",
        "encoder.layer.1.attention.output.LayerNorm.bias", "encoder.layer.1.intermediate.dense.weight",
        "encoder.layer.1.output.dense.bias", "encoder.layer.1.output.LayerNorm.weight", "pooler.dense.weight"}) {
    EXPECT_TRUE(state.contains(key)) << key;
  }
  EXPECT_EQ(state.at("encoder.layer.0.intermediate.dense.weight").shape(), (Shape{32, 16}));
}

TEST(Bert, PaddingChangesNothingAndEveryParameterLearns) {
  manual_seed(0);
  BertModel model(tiny_config());
  model.eval();
  const Tensor ids = tensor<int64_t>({5, 9, 3, 7, 11}, Shape{1, 5});
  const Tensor padded_ids = tensor<int64_t>({5, 9, 3, 7, 11, 0, 0, 0}, Shape{1, 8});
  const Tensor mask = tensor<int64_t>({1, 1, 1, 1, 1, 0, 0, 0}, Shape{1, 8});
  {
    autograd::NoGradGuard no_grad;
    const Tensor alone = model.forward(ids, {}).last_hidden_state;
    const Tensor padded = model.forward(padded_ids, mask).last_hidden_state.narrow(1, 0, 5);
    EXPECT_LT(max_abs_diff(alone, padded), 1e-5);
    EXPECT_LT(max_abs_diff(mean_pooling(padded, mask.narrow(1, 0, 5)), alone.mean({1})), 1e-5);
  }
  model.train();
  const BertOutput out = model.forward(padded_ids, mask, zeros({1, 8}, DType::kInt64));
  (out.last_hidden_state.square().mean() + out.pooler_output.sum()).backward();
  for (const auto& [name, parameter] : model.named_parameters()) {
    ASSERT_TRUE(parameter.grad().defined()) << name;
    EXPECT_GT(parameter.grad().abs().sum().item<double>(), 0.0) << name;
  }
  const std::string message = expect_error([&] { model.forward(zeros({1, 30}, DType::kInt64), {}); });
  EXPECT_NE(message.find("[bert] a sequence of 30 tokens is longer than the model's 24 positions"), std::string::npos)
      << message;
}

TEST_F(BertFiles, MissingFolderNamesSetup) {
  std::string message = expect_error([&] { load_bert(folder() + "/minilm"); });
  EXPECT_NE(message.find("[load_bert] the model folder '" + folder() + "/minilm' does not exist"), std::string::npos)
      << message;
  EXPECT_NE(message.find("scripts/setup"), std::string::npos) << message;
  message = expect_error([&] { SentenceEncoder::from_folder(folder() + "/minilm"); });
  EXPECT_NE(message.find("scripts/setup"), std::string::npos) << message;
  message = expect_error([&] { load_bert(folder()); });
  EXPECT_NE(message.find("model.safetensors' does not exist"), std::string::npos) << message;
}

TEST_F(BertFiles, LoadsByNameAndListsEveryBadKey) {
  write_tiny_config();
  manual_seed(1);
  BertModel source(tiny_config());
  // A BertFor* checkpoint: keys under "bert.", plus the position_ids buffer old checkpoints have.
  StateDict state;
  for (const auto& [key, tensor] : source.state_dict()) state.emplace("bert." + key, tensor);
  state.emplace("bert.embeddings.position_ids", arange(24, DType::kInt64).reshape({1, 24}));
  save(state, folder() + "/model.safetensors");
  const std::shared_ptr<BertModel> loaded = load_bert(folder());
  EXPECT_FALSE(loaded->is_training());
  for (const auto& [key, tensor] : source.state_dict()) {
    EXPECT_EQ(max_abs_diff(loaded->state_dict().at(key), tensor), 0.0) << key;
  }

  // One mis-shaped, one missing and one unexpected key: one error names all three.
  StateDict bad = source.state_dict();
  bad["encoder.layer.1.attention.self.query.weight"] = zeros({16, 8});
  bad.erase("pooler.dense.bias");
  bad.emplace("cls.predictions.bias", zeros({50}));
  save(bad, folder() + "/model.safetensors");
  const std::string message = expect_error([&] { load_bert(folder()); });
  EXPECT_NE(message.find("[load_bert] cannot load '" + folder() + "/model.safetensors'"), std::string::npos) << message;
  EXPECT_NE(message.find("missing keys: \"pooler.dense.bias\""), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected keys: \"cls.predictions.bias\""), std::string::npos) << message;
  EXPECT_NE(message.find("shape mismatch for \"encoder.layer.1.attention.self.query.weight\": the state dict has "
                         "[16, 8], the module has [16, 16]"),
            std::string::npos)
      << message;
}

TEST_F(BertFiles, ConfigErrors) {
  std::ofstream(dir_ / "config.json") << R"({"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4})";
  EXPECT_NE(expect_error([&] {
              BertConfig::from_json_file(folder() + "/config.json");
            }).find("hidden_size 30 is not a multiple of num_attention_heads 4"),
            std::string::npos);
  std::ofstream(dir_ / "config.json") << R"({"model_type": "roberta"})";
  EXPECT_NE(expect_error([&] {
              BertConfig::from_json_file(folder() + "/config.json");
            }).find("describes a \"roberta\" model"),
            std::string::npos);
  std::ofstream(dir_ / "config.json") << R"({"hidden_size": "big"})";
  EXPECT_NE(expect_error([&] {
              BertConfig::from_json_file(folder() + "/config.json");
            }).find("\"hidden_size\" has the wrong type"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { BertConfig::from_json_file(folder() + "/missing.json"); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
}  // namespace ember::models

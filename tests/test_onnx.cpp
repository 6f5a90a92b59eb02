// ONNX import: every committed model (tests/data/onnx/<case>/, made by tests/onnx/make_onnx.py from
// PyTorch exports) runs compiled and eagerly and matches onnxruntime's outputs saved beside it; the
// imported MNIST CNN fine-tunes like PyTorch; malformed files and inputs give errors naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/npy.h"
#include "ember/onnx.h"
#include "test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kCases = fs::path(EMBER_TEST_DATA_DIR) / "onnx";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

// max |a - b| - (atol + rtol |b|) over the elements: <= 0 when within tolerance.
double excess(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const std::vector<double> a = actual.to(kFloat64).to_vector<double>();
  const std::vector<double> b = expected.to(kFloat64).to_vector<double>();
  double worst = -INFINITY;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::isnan(a[i]) || std::isnan(b[i]) ? (std::isnan(a[i]) == std::isnan(b[i]) ? -1 : INFINITY)
                                                          : std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
    worst = std::max(worst, e);
  }
  return a.empty() ? 0.0 : worst;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCases)) {
    if (fs::exists(entry.path() / "case.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class OnnxCase : public ::testing::TestWithParam<std::string> {};

// Each case: compiled inference (twice: the second replays) and eager forward match onnxruntime.
TEST_P(OnnxCase, MatchesOnnxruntime) {
  const fs::path dir = kCases / GetParam();
  const nlohmann::json spec = read_json(dir / "case.json");
  const auto model = onnx::load((dir / "model.onnx").string());
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, file] : spec["inputs"].items())
    inputs[name] = load_npy((dir / file.get<std::string>()).string());
  const double atol = spec["atol"], rtol = spec["rtol"];

  for (int call = 0; call < 2; ++call) {
    const std::map<std::string, Tensor> outputs = model->run(inputs);
    for (const auto& [name, file] : spec["outputs"].items()) {
      const Tensor expected = load_npy((dir / file.get<std::string>()).string());
      ASSERT_TRUE(outputs.contains(name)) << name;
      EXPECT_LE(excess(outputs.at(name), expected, atol, rtol), 0.0) << GetParam() << " output " << name;
    }
  }
  EXPECT_EQ(model->compile_stats().compiles, 1);
  EXPECT_EQ(model->compile_stats().replays, 1);

  std::vector<Tensor> ordered;
  for (const std::string& name : model->input_names()) ordered.push_back(inputs.at(name));
  const std::vector<Tensor> eager = model->forward(ordered);
  for (size_t i = 0; i < eager.size(); ++i) {
    const std::string& name = model->output_names()[i];
    const Tensor expected = load_npy((dir / spec["outputs"][name].get<std::string>()).string());
    EXPECT_LE(excess(eager[i], expected, atol, rtol), 0.0) << GetParam() << " eager output " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, OnnxCase, ::testing::ValuesIn(case_names()),
                         [](const auto& test) { return test.param; });

TEST(Onnx, InfoListsInputsOutputsAndCoverage) {
  const onnx::ModelInfo info = onnx::inspect((kCases / "mlp" / "model.onnx").string());
  EXPECT_EQ(info.opset, 17);
  ASSERT_EQ(info.inputs.size(), 1U);
  ASSERT_TRUE(info.inputs[0].shape.has_value());
  EXPECT_EQ(info.inputs[0].shape->at(0).size, -1);  // the dynamic batch
  EXPECT_FALSE(info.inputs[0].shape->at(0).symbol.empty());
  EXPECT_EQ(info.inputs[0].dtype, kFloat32);
  EXPECT_TRUE(info.supported());
  EXPECT_THAT(info.report(), HasSubstr("all supported"));
  EXPECT_THAT(info.report(), HasSubstr("Gemm"));
}

// A dynamic batch: a new batch size compiles again and gives the right rows.
TEST(Onnx, DynamicBatchRecompilesPerShape) {
  const fs::path dir = kCases / "mlp";
  const auto model = onnx::load((dir / "model.onnx").string());
  const Tensor x = load_npy((dir / "input.npy").string());
  const Tensor expected = load_npy((dir / "expected_logits.npy").string());
  const Tensor first = model->run(std::vector<Tensor>{x.narrow(0, 0, 1)}).at(0);
  EXPECT_LE(excess(first, expected.narrow(0, 0, 1), 1e-4, 1e-4), 0.0);
  (void)model->run(std::vector<Tensor>{x});
  EXPECT_EQ(model->compile_stats().compiles, 2);
}

// BERT's GELU, exported as x * 0.5 * (1 + erf(x / sqrt(2))), runs as one gelu once compiled (the
// graph compiler's fuse_gelu), with the reference's values.
TEST(Onnx, GeluChainIsFusedWhenCompiled) {
  const fs::path dir = kCases / "bert_tiny";
  const auto model = onnx::load((dir / "model.onnx").string());
  const std::map<std::string, Tensor> inputs{{"input_ids", load_npy((dir / "input_ids.npy").string())},
                                             {"attention_mask", load_npy((dir / "attention_mask.npy").string())}};
  const Tensor expected = load_npy((dir / "expected_last_hidden_state.npy").string());
  for (bool compiled : {false, true}) {
    const auto run = compiled ? model : onnx::load((dir / "model.onnx").string(), {.compile = false});
    const auto outputs = run->run(inputs);
    ASSERT_EQ(outputs.size(), 1U);
    EXPECT_LE(excess(outputs.begin()->second, expected, 1e-4, 1e-4), 0.0) << (compiled ? "compiled" : "eager");
  }
  EXPECT_THAT(model->explain(), HasSubstr("GELU patterns: 2 -> gelu"));
  EXPECT_EQ(model->compile_stats().gelus, 2);
}

// The MNIST CNN fine-tunes in ember as in PyTorch (tests/onnx/make_onnx.py wrote the reference).
TEST(Onnx, FineTuningMatchesPyTorch) {
  const fs::path dir = kCases / "mnist_cnn";
  const nlohmann::json spec = read_json(dir / "finetune.json");
  const auto model = onnx::load((dir / "model.onnx").string());
  model->train();
  const Tensor x = load_npy((dir / spec["inputs"].get<std::string>()).string());
  const Tensor y = load_npy((dir / spec["targets"].get<std::string>()).string());
  optim::SGD sgd(model->parameters(), {.lr = spec["lr"], .momentum = spec["momentum"]});
  const std::vector<double> losses = spec["losses"];
  for (size_t step = 0; step < losses.size(); ++step) {
    sgd.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(std::vector<Tensor>{x}).at(0), y);
    EXPECT_NEAR(loss.item<float>(), losses[step], 1e-4) << "step " << step;
    loss.backward();
    sgd.step();
  }
  const StateDict expected = load((dir / spec["weights"].get<std::string>()).string());
  const StateDict actual = model->state_dict();
  EXPECT_EQ(actual.size(), expected.size());
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(actual.contains(name)) << name;
    EXPECT_LE(excess(actual.at(name), value, 1e-4, 1e-4), 0.0) << name;
  }
  // The fine-tuned weights go back to safetensors under the same names and load into a fresh import.
  const fs::path saved = fs::temp_directory_path() / "ember_onnx_finetuned.safetensors";
  save(actual, saved.string());
  const auto fresh = onnx::load((dir / "model.onnx").string());
  fresh->load_state_dict(load(saved.string()));
  fs::remove(saved);
  const Tensor out = fresh->run(std::vector<Tensor>{x}).at(0);
  const Tensor ref = model->run(std::vector<Tensor>{x}).at(0);
  EXPECT_LE(excess(out, ref, 1e-6, 0), 0.0);
}

// --- errors: small models built here with the protobuf API -----------------------------------------

::onnx::ModelProto relu_model() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->add_dim()->set_dim_param("n");
  shape->add_dim()->set_dim_value(3);
  auto* node = g->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

// A float initializer named "w" of shape `dims` with no data yet.
::onnx::TensorProto* add_weight(::onnx::ModelProto& m, std::initializer_list<int64_t> dims) {
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) w->add_dims(d);
  return w;
}

std::shared_ptr<onnx::Model> load_proto(const ::onnx::ModelProto& m) {
  const std::string bytes = m.SerializeAsString();
  return onnx::load_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

std::string load_error(const ::onnx::ModelProto& m) {
  try {
    load_proto(m);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Outputs that are an input passed through Identity, a constant, and a computed value, compiled
// (the second call replays) and eager.
TEST(Onnx, IdentityAndConstantOutputs) {
  ::onnx::ModelProto m = relu_model();
  auto* g = m.mutable_graph();
  auto* identity = g->add_node();
  identity->set_op_type("Identity");
  identity->add_input("x");
  identity->add_output("same");
  auto* constant = g->add_node();
  constant->set_op_type("Constant");
  constant->add_output("c");
  auto* value = constant->add_attribute();
  value->set_name("value");
  value->set_type(::onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(::onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(2);
  value->mutable_t()->add_int64_data(4);
  value->mutable_t()->add_int64_data(5);
  g->add_output()->set_name("same");
  g->add_output()->set_name("c");
  const auto model = load_proto(m);
  const Tensor x = tensor<float>({-1, 2, 3}, Shape{1, 3});
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> out = model->run(std::vector<Tensor>{x});
    ASSERT_EQ(out.size(), 3U);
    EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{0, 2, 3}));
    EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{-1, 2, 3}));
    EXPECT_EQ(out[2].to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  }
  EXPECT_EQ(model->compile_stats().replays, 1);
  EXPECT_EQ(model->forward(std::vector<Tensor>{x}).at(2).to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
}

// CumSum's reverse and exclusive attributes (PyTorch exports neither), against the spec's examples.
TEST(Onnx, CumSumReverseAndExclusive) {
  const Tensor x = tensor<float>({1, 2, 3, 4}, Shape{1, 4});
  for (const auto& [reverse, exclusive, expected] :
       {std::tuple{0, 0, std::vector<float>{1, 3, 6, 10}}, std::tuple{0, 1, std::vector<float>{0, 1, 3, 6}},
        std::tuple{1, 0, std::vector<float>{10, 9, 7, 4}}, std::tuple{1, 1, std::vector<float>{9, 7, 4, 0}}}) {
    ::onnx::ModelProto m = relu_model();
    m.mutable_graph()
        ->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(1)
        ->set_dim_value(4);
    auto* axis = m.mutable_graph()->add_initializer();
    axis->set_name("axis");
    axis->set_data_type(::onnx::TensorProto::INT64);
    axis->add_int64_data(-1);
    auto* node = m.mutable_graph()->mutable_node(0);
    node->set_op_type("CumSum");
    node->add_input("axis");
    for (const auto& [name, value] : {std::pair{"reverse", reverse}, std::pair{"exclusive", exclusive}}) {
      auto* attr = node->add_attribute();
      attr->set_name(name);
      attr->set_type(::onnx::AttributeProto::INT);
      attr->set_i(value);
    }
    EXPECT_EQ(load_proto(m)->run(std::vector<Tensor>{x}).at(0).to_vector<float>(), expected)
        << "reverse " << reverse << " exclusive " << exclusive;
  }
}

TEST(OnnxErrors, MalformedBytes) {
  const std::string garbage = "this is not a protobuf \xff\xff\xff\xff";
  EXPECT_THAT(
      [&] {
        onnx::load_bytes({reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size()});
      },
      ThrowsMessage<Error>(HasSubstr("not an ONNX model")));
  const std::string bytes = relu_model().SerializeAsString();
  EXPECT_THROW(onnx::load_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() / 2}), Error);
  EXPECT_THAT([] { onnx::load("/nonexistent/model.onnx"); }, ThrowsMessage<Error>(HasSubstr("cannot open")));
}

TEST(OnnxErrors, VersionsAreChecked) {
  ::onnx::ModelProto m = relu_model();
  m.set_ir_version(99);
  EXPECT_THAT(load_error(m), HasSubstr("IR version 99"));
  m = relu_model();
  m.mutable_opset_import(0)->set_version(29);
  EXPECT_THAT(load_error(m), HasSubstr("opset 29"));
  m = relu_model();
  m.clear_opset_import();
  EXPECT_THAT(load_error(m), HasSubstr("no opset of the default ONNX domain"));
  m = relu_model();
  m.set_ir_version(14);  // what the onnx 1.23 package writes, newer than the packaged schema: read
  m.mutable_opset_import(0)->set_version(28);
  EXPECT_NO_THROW(load_proto(m));
}

TEST(OnnxErrors, GraphStructure) {
  ::onnx::ModelProto m = relu_model();
  m.mutable_graph()->mutable_node(0)->set_input(0, "missing");
  EXPECT_THAT(load_error(m), HasSubstr("reads \"missing\", which no graph input, initializer or earlier node"));
  m = relu_model();
  m.mutable_graph()->mutable_output(0)->set_name("nowhere");
  EXPECT_THAT(load_error(m), HasSubstr("graph output \"nowhere\" is not defined"));
}

TEST(OnnxErrors, InitializerSizes) {
  ::onnx::ModelProto m = relu_model();
  auto* w = add_weight(m, {2, 3});
  w->set_raw_data(std::string(20, '\0'));  // 24 needed
  EXPECT_THAT(load_error(m), HasSubstr("holds 20 bytes of raw data, but its shape and type need 24"));
  w->clear_raw_data();
  w->add_float_data(1.0F);
  EXPECT_THAT(load_error(m), HasSubstr("holds 1 values, but its shape needs 6"));
  w->set_dims(0, -2);
  EXPECT_THAT(load_error(m), HasSubstr("negative dimension"));
  w->set_dims(0, 2);
  w->set_data_type(::onnx::TensorProto::STRING);
  EXPECT_THAT(load_error(m), HasSubstr("STRING, which ember does not read"));
}

TEST(OnnxErrors, ExternalData) {
  ::onnx::ModelProto m = relu_model();
  auto* w = add_weight(m, {4});
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto* location = w->add_external_data();
  location->set_key("location");
  location->set_value("../../etc/passwd");
  EXPECT_THAT(load_error(m), HasSubstr("must stay inside the model's folder"));
  location->set_value("weights.bin");
  EXPECT_THAT(load_error(m), HasSubstr("was not read from a file"));
  // From a file: the data file is missing, then too short.
  const fs::path dir = fs::temp_directory_path() / "ember_onnx_external";
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "model.onnx", std::ios::binary);
    out << m.SerializeAsString();
  }
  EXPECT_THAT([&] { onnx::load((dir / "model.onnx").string()); },
              ThrowsMessage<Error>(HasSubstr("cannot open its external data file")));
  {
    std::ofstream out(dir / "weights.bin", std::ios::binary);
    out << std::string(8, '\0');
  }
  EXPECT_THAT([&] { onnx::load((dir / "model.onnx").string()); }, ThrowsMessage<Error>(HasSubstr("run past the end")));
  // Dims claiming terabytes: refused from the file's size before anything is allocated.
  w->set_dims(0, int64_t{1} << 40);
  {
    std::ofstream out(dir / "model.onnx", std::ios::binary);
    out << m.SerializeAsString();
  }
  EXPECT_THAT([&] { onnx::load((dir / "model.onnx").string()); }, ThrowsMessage<Error>(HasSubstr("run past the end")));
  EXPECT_THAT(load_error(m), HasSubstr("was not read from a file"));
  fs::remove_all(dir);
}

TEST(OnnxErrors, UnsupportedOpsAreListedTogether) {
  ::onnx::ModelProto m = relu_model();
  auto* g = m.mutable_graph();
  for (const char* op : {"NonMaxSuppression", "RoiAlign"}) {
    auto* node = g->add_node();
    node->set_op_type(op);
    node->add_input("y");
    node->add_output(std::string(op) + "_out");
  }
  const std::string error = load_error(m);
  EXPECT_THAT(error, HasSubstr("NonMaxSuppression (1 nodes): no ember mapping"));
  EXPECT_THAT(error, HasSubstr("RoiAlign (1 nodes)"));
  const std::string bytes = m.SerializeAsString();
  const fs::path path = fs::temp_directory_path() / "ember_onnx_unsupported.onnx";
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  const onnx::ModelInfo info = onnx::inspect(path.string());
  fs::remove(path);
  EXPECT_FALSE(info.supported());
  EXPECT_EQ(std::count_if(info.ops.begin(), info.ops.end(), [](const auto& op) { return !op.supported; }), 2);
}

TEST(OnnxErrors, InputsAreChecked) {
  const auto model = load_proto(relu_model());
  EXPECT_THAT([&] { model->run(std::vector<Tensor>{}); }, ThrowsMessage<Error>(HasSubstr("takes 1 inputs (x), got 0")));
  EXPECT_THAT(
      [&] {
        model->run(std::vector<Tensor>{zeros({2, 4})});
      },
      ThrowsMessage<Error>(HasSubstr("input \"x\" has shape [n, 3], got [2, 4]")));
  EXPECT_THAT(
      [&] {
        model->run(std::vector<Tensor>{zeros({2, 3}, kInt64)});
      },
      ThrowsMessage<Error>(HasSubstr("input \"x\" is FLOAT (float32), got int64")));
  // A misspelt name is named before the input it leaves missing.
  EXPECT_THAT(
      [&] {
        model->run(std::map<std::string, Tensor>{{"z", zeros({2, 3})}});
      },
      ThrowsMessage<Error>(HasSubstr("has no input \"z\" (it takes x)")));
  EXPECT_THAT([&] { model->run(std::map<std::string, Tensor>{}); },
              ThrowsMessage<Error>(HasSubstr("no value for input \"x\"")));
  const Tensor y = model->run(std::vector<Tensor>{tensor<float>({-1, 2, -3, 4, -5, 6}, Shape{2, 3})}).at(0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 2, 0, 4, 0, 6}));
  // Zero-size batch.
  EXPECT_EQ(model->run(std::vector<Tensor>{zeros({0, 3})}).at(0).shape(), Shape({0, 3}));
}

}  // namespace
}  // namespace ember

// ONNX import: a model exported from PyTorch (or anything that writes ONNX) runs in ember, compiled,
// and trains.
//
//   auto model = ember::onnx::load("resnet18.onnx");
//   std::vector<Tensor> out = model->run({image});          // inference: compiled, no autograd
//
//   model->train();                                          // fine-tuning: eager, with autograd
//   ember::optim::SGD opt(model->parameters(), {.lr = 0.05});
//   Tensor loss = nn::functional::cross_entropy(model->forward(std::vector{x})[0], y);
//   loss.backward();
//   opt.step();
//   ember::save(model->state_dict(), "finetuned.safetensors");
//
// Each ONNX node maps onto ember ops (the table in src/io/onnx/ops.cpp, by opset), so an imported
// model is an ordinary ember module: its float initializers are parameters under their ONNX names
// (a PyTorch export's initializers are the PyTorch state_dict keys, "layer1.0.conv1.weight"),
// BatchNormalization's running statistics are buffers, and run() compiles the graph with
// ember::compile: fusion, memory planning and the allocation-free replay apply to it. Shape
// arithmetic (Shape, Gather, Concat on shapes...) is evaluated on the host from constants and the
// inputs' shapes, never traced: a new input shape recompiles. Symbolic dimensions (a dynamic batch)
// accept any size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ember/compile.h"
#include "ember/nn/module.h"
#include "ember/tensor.h"

namespace ember::onnx {

// One dimension of a declared input or output: a size, or dynamic (size -1) with its symbol.
struct Dim {
  int64_t size = -1;
  std::string symbol;
};

struct ValueInfo {
  std::string name;
  std::string type;                       // the ONNX element type ("FLOAT", "INT64", ...)
  std::optional<DType> dtype;             // ember's, when it has one
  std::optional<std::vector<Dim>> shape;  // none: rank unknown
};

// An op type the model uses, and whether ember imports it at the model's opset.
struct OpSupport {
  std::string domain;  // "" for the default ONNX domain
  std::string op_type;
  int count = 0;  // nodes using it
  bool supported = false;
  std::string note;  // why not, or what is limited
};

struct ModelInfo {
  int64_t ir_version = 0;
  int64_t opset = 0;  // the default domain's
  std::vector<std::pair<std::string, int64_t>> opsets;
  std::string producer;           // name and version
  std::vector<ValueInfo> inputs;  // the graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  int64_t nodes = 0;
  int64_t initializers = 0;
  int64_t initializer_bytes = 0;
  std::vector<OpSupport> ops;  // every op type, in order of first use

  bool supported() const;  // every op is
  // The `ember onnx info` text: inputs, outputs, opsets and the coverage table.
  std::string report() const;
};

// Reads and validates `path` and reports what it holds, including ops ember does not import (it
// does not throw for those: the report lists all of them). Malformed files throw ember::Error.
ModelInfo inspect(const std::string& path);

struct LoadOptions {
  bool trainable = true;  // float initializers require grad (else they are buffers)
  bool compile = true;    // run() compiles; false runs it eagerly
  CompileOptions compile_options = {};
};

// An imported graph. Starts in eval mode: BatchNormalization uses its running statistics and
// Dropout is the identity, as the exported graph does; train() switches both to training
// behaviour (batch statistics with the node's momentum; dropout at the node's ratio).
class Model : public nn::Module {
 public:
  ~Model() override;

  const ModelInfo& info() const;
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;

  // Runs the graph eagerly with autograd: gradients reach the parameters (fine-tuning). `inputs`
  // in the order of info().inputs. Returns the graph's outputs in order.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);
  // The single-input form of nn::Module; the first output.
  Tensor forward(const Tensor& input) override;

  // Inference: no autograd, compiled (LoadOptions::compile). Thread-compatible, like a compiled
  // function: calls run one at a time.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  // The compiled inference function's statistics and explanation (CompileStats, explain()).
  const CompileStats& compile_stats() const;
  std::string explain() const;
  // The last compiled graph (text and Graphviz), as Compiled::graph().
  GraphText graph() const;

  std::string name() const override { return "onnx::Model"; }

  // The imported graph (src/io/onnx/import.cpp); a Model is made by load().
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Imports `path`: validates it, checks that every op is supported (the error lists all that are
// not), reads initializers (external data next to the file too) and builds the module.
std::shared_ptr<Model> load(const std::string& path, LoadOptions options = {});
// The same from bytes in memory (external data is an error: it has no folder).
std::shared_ptr<Model> load_bytes(std::span<const uint8_t> bytes, LoadOptions options = {});

}  // namespace ember::onnx

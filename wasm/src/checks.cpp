#include "checks.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/data.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/nn/quantize.h"
#include "ember/ops.h"
#include "ember/train/checkpoint.h"

namespace ember::wasm {
namespace {

class Outputs {
 public:
  Outputs(StateDict& out, std::map<std::string, std::string>& errors) : out_(out), errors_(errors) {}

  // Records `make()`'s result as `name`, or the message it throws.
  void add(const std::string& name, const std::function<Tensor()>& make) {
    try {
      out_.emplace(name, make().contiguous());
    } catch (const Error& e) {
      errors_.emplace(name, e.what());
    }
  }

 private:
  StateDict& out_;
  std::map<std::string, std::string>& errors_;
};

const Tensor& input(const StateDict& inputs, const std::string& name) {
  auto it = inputs.find(name);
  EMBER_CHECK(it != inputs.end(), "[checks] the inputs have no tensor '", name, "'");
  return it->second;
}

std::shared_ptr<nn::Sequential> read_cnn(const std::string& checkpoint) {
  std::shared_ptr<nn::Sequential> cnn = models::mnist_cnn();
  cnn->load_state_dict(train::read_checkpoint(checkpoint, "checks").model_state());
  cnn->eval();
  return cnn;
}

// The CNN's logits on the committed digits (uint8, N x 28 x 28), normalized as in training.
void cnn_checks(const StateDict& inputs, const std::string& checkpoint, Outputs& out) {
  const Tensor digits = input(inputs, "digits");
  const Tensor x = ((digits.to(kFloat32) / 255.0) - data::MNIST::kMean) / data::MNIST::kStd;
  const Tensor batch = x.reshape({digits.size(0), 1, 28, 28});
  std::shared_ptr<nn::Sequential> cnn = read_cnn(checkpoint);
  autograd::NoGradGuard no_grad;
  out.add("cnn_logits", [&] { return cnn->forward(batch); });
  auto compiled = compile([&](const Tensor& t) { return cnn->forward(t); });
  out.add("cnn_logits_compiled", [&] { return compiled(batch); });
  // One digit at a time, as the page runs it.
  out.add("cnn_logits_single", [&] { return cnn->forward(batch.slice(0, 0, 1)); });
  for (const DType dtype : {kQ8_0, kQ4_0, kInt8}) {
    std::shared_ptr<nn::Sequential> quantized = read_cnn(checkpoint);
    quant::quantize(*quantized, {.dtype = dtype});
    out.add(std::string("cnn_logits_").append(dtype_name(dtype)), [&] { return quantized->forward(batch); });
  }
}

// Ops on `a` (3 x 5 x 7) and `b` (5 x 7) of one dtype, named "<op>_<dtype>".
void op_checks(const Tensor& a, const Tensor& b, Outputs& out) {
  const std::string_view dtype = dtype_name(a.dtype());
  auto add = [&](std::string name, const std::function<Tensor()>& make) {
    out.add(name.append("_").append(dtype), make);
  };
  add("add", [&] { return a + b; });
  add("mul", [&] { return a * b; });
  add("sub_scalar", [&] { return a - 3; });
  add("sum", [&] { return sum(a, {1}); });
  add("sum_all", [&] { return sum(a); });
  add("mean", [&] { return mean(a, {2}); });
  add("amax", [&] { return amax(a, {0}); });
  add("argmax", [&] { return argmax(a, 2); });
  add("cumsum", [&] { return cumsum(a, 1); });
  add("sort", [&] { return sort(a, -1, false, true).values; });
  add("argsort", [&] { return argsort(a, -1, false, true); });
  add("transpose", [&] { return a.transpose(0, 2).contiguous(); });
  add("gt", [&] { return gt(a, b); });
  add("where", [&] { return where(gt(a, b), a, b); });
  add("abs", [&] { return abs(a); });
  add("relu", [&] { return relu(a); });
  add("exp", [&] { return exp(a); });
  add("tanh", [&] { return tanh(a); });
  add("sigmoid", [&] { return sigmoid(a); });
  add("gelu", [&] { return gelu(a); });
  add("softmax", [&] { return softmax(a, -1); });
  add("log_softmax", [&] { return log_softmax(a, 1); });
  add("matmul", [&] { return matmul(a, b.transpose(0, 1)); });
  add("layer_norm", [&] { return layer_norm(a, {7}); });
  add("logical_and", [&] { return logical_and(a, b); });
  add("any", [&] { return any(a, {2}); });
}

}  // namespace

StateDict run_checks(const StateDict& inputs, const std::string& checkpoint,
                     std::map<std::string, std::string>& errors) {
  StateDict out;
  Outputs outputs(out, errors);
  cnn_checks(inputs, checkpoint, outputs);
  for (const DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
    const std::string_view name = dtype_name(dtype);
    op_checks(input(inputs, std::string("a_").append(name)), input(inputs, std::string("b_").append(name)), outputs);
  }
  // Convolution and pooling (float): an image batch, a kernel bank.
  const Tensor image = input(inputs, "image");
  const Tensor kernel = input(inputs, "kernel");
  outputs.add("conv2d", [&] { return conv2d(image, kernel, std::nullopt, 1, 1); });
  outputs.add("conv2d_stride2", [&] { return conv2d(image, kernel, std::nullopt, 2, 0); });
  outputs.add("max_pool2d", [&] { return max_pool2d(image, 2); });
  outputs.add("linear_large", [&] { return linear(input(inputs, "rows"), input(inputs, "weight")); });
  return out;
}

void write_checks(const std::string& inputs, const std::string& checkpoint, const std::string& output) {
  std::map<std::string, std::string> errors;
  const StateDict out = run_checks(load(inputs), checkpoint, errors);
  save(out, output, errors);
}

}  // namespace ember::wasm

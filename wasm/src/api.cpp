// The C ABI of the WebAssembly module, which wasm/ember.js wraps in a JavaScript API.
//
// Functions that can fail return 0 (or a null pointer) and leave the ember::Error's message for
// ember_last_error(); nothing throws across the boundary. Handles are small positive integers.
// Files (checkpoints, inputs) reach the module through Emscripten's in-memory file system, where
// ember.js writes the caller's ArrayBuffer.
#include <cxxabi.h>
#include <emscripten/emscripten.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "checks.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/gguf.h"
#include "ember/info.h"
#include "ember/io.h"
#include "ember/models/mnist.h"
#include "ember/nn/quantize.h"
#include "ember/ops.h"
#include "ember/threads.h"
#include "ember/train/checkpoint.h"

namespace {

using ember::Tensor;

std::string& last_error() {
  static std::string message;
  return message;
}

// Runs `body`; an exception becomes last_error() and `failed` is returned.
template <class Fn, class R>
R guarded(Fn&& body, R failed) {
  try {
    last_error().clear();
    return body();
  } catch (const std::exception& e) {
    last_error() = e.what();
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    last_error() = std::string("[wasm] an exception of type ") + (type != nullptr ? type->name() : "unknown") +
                   " (not a std::exception)";
  }
  return failed;
}

// A model read from a checkpoint of `ember train mnist` (safetensors) or `ember quantize` (GGUF).
struct Model {
  std::string kind;          // "mnist_cnn" or "mnist_mlp"
  std::string quantization;  // "f32", "q8_0", "q4_0", "q4_1" or "int8"
  std::shared_ptr<ember::nn::Sequential> net;
  // The forward pass through the graph compiler: traced on the first call of each input shape.
  std::function<Tensor(const Tensor&)> compiled;
  Tensor output;
};

std::map<int, std::unique_ptr<Model>>& models() {
  static std::map<int, std::unique_ptr<Model>> table;
  return table;
}

Model& model_at(int handle) {
  auto it = models().find(handle);
  EMBER_CHECK(it != models().end(), "[wasm] no model has handle ", handle, " (freed, or never loaded)");
  return *it->second;
}

std::unique_ptr<Model> read_model(const std::string& path) {
  auto model = std::make_unique<Model>();
  // A checkpoint of `ember train mnist` or a GGUF file of `ember quantize` (ember/train/checkpoint.h).
  const ember::train::Checkpoint checkpoint = ember::train::read_checkpoint(path, "wasm");
  EMBER_CHECK(checkpoint.kind == "mnist_cnn" || checkpoint.kind == "mnist_mlp", "[wasm] ", path,
              " is not a checkpoint of `ember train mnist` or a GGUF file of one (it holds ", checkpoint.describe(),
              "); this module runs mnist_cnn and mnist_mlp");
  model->kind = checkpoint.kind;
  model->quantization = checkpoint.quantization;
  model->net = ember::models::mnist_model(model->kind.substr(std::string("mnist_").size()));
  ember::train::load_model_state(*model->net, checkpoint.model_state(), checkpoint, "wasm");
  model->net->eval();
  auto net = model->net;
  model->compiled = ember::compile([net](const Tensor& x) { return net->forward(x); });
  return model;
}

}  // namespace

extern "C" {

EMSCRIPTEN_KEEPALIVE const char* ember_last_error() { return last_error().c_str(); }

// "0.1.0 wasm_128" style facts, for the page and the benchmark.
EMSCRIPTEN_KEEPALIVE const char* ember_version() {
  static const std::string version = ember::build_info().version;
  return version.c_str();
}
EMSCRIPTEN_KEEPALIVE const char* ember_simd_target() {
  static const std::string target = ember::build_info().simd_target;
  return target.c_str();
}
EMSCRIPTEN_KEEPALIVE int ember_num_threads() { return ember::get_num_threads(); }

// Reads the checkpoint at `path`; returns its handle, or 0.
EMSCRIPTEN_KEEPALIVE int ember_model_load(const char* path) {
  return guarded(
      [&] {
        static int next = 1;
        models()[next] = read_model(path);
        return next++;
      },
      0);
}

EMSCRIPTEN_KEEPALIVE const char* ember_model_kind(int handle) {
  return guarded([&] { return model_at(handle).kind.c_str(); }, static_cast<const char*>(nullptr));
}
EMSCRIPTEN_KEEPALIVE const char* ember_model_quantization(int handle) {
  return guarded([&] { return model_at(handle).quantization.c_str(); }, static_cast<const char*>(nullptr));
}

EMSCRIPTEN_KEEPALIVE void ember_model_free(int handle) { models().erase(handle); }

// Runs the model on `rank`-d float32 `input` of `shape`, through the compiled forward pass (or
// eagerly, `compiled` = 0); with `probabilities` = 1 the output is the softmax of the logits over
// their last dim. The output stays in the model until the next run: its data is
// ember_model_output(), its geometry ember_model_output_rank() and _dim(). Returns 1, or 0.
EMSCRIPTEN_KEEPALIVE int ember_model_run(int handle, const float* input, const int* shape, int rank, int compiled,
                                         int probabilities) {
  return guarded(
      [&] {
        Model& model = model_at(handle);
        EMBER_CHECK(rank >= 0 && rank <= 8, "[wasm] input rank ", rank, " is not in 0..8");
        ember::Shape dims(shape, shape + rank);
        // A copy: the caller's memory is reused for the next call.
        const Tensor x = ember::from_blob(const_cast<float*>(input), dims, ember::kFloat32).clone();
        ember::autograd::NoGradGuard no_grad;
        Tensor logits = compiled != 0 ? model.compiled(x) : model.net->forward(x);
        model.output = (probabilities != 0 ? ember::softmax(logits, -1) : logits).contiguous();
        return 1;
      },
      0);
}
EMSCRIPTEN_KEEPALIVE const float* ember_model_output(int handle) {
  return guarded([&] { return model_at(handle).output.data_ptr<float>(); }, static_cast<const float*>(nullptr));
}
EMSCRIPTEN_KEEPALIVE int ember_model_output_rank(int handle) {
  return guarded([&] { return static_cast<int>(model_at(handle).output.dim()); }, -1);
}
EMSCRIPTEN_KEEPALIVE int ember_model_output_dim(int handle, int i) {
  return guarded([&] { return static_cast<int>(model_at(handle).output.size(i)); }, -1);
}

// The cross-platform checks (checks.h): reads `inputs` and `checkpoint`, writes `output`. 1, or 0.
EMSCRIPTEN_KEEPALIVE int ember_run_checks(const char* inputs, const char* checkpoint, const char* output) {
  return guarded(
      [&] {
        ember::wasm::write_checks(inputs, checkpoint, output);
        return 1;
      },
      0);
}

}  // extern "C"

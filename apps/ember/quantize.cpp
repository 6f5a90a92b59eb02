// `ember quantize`: rebuilds the model a checkpoint (or a MiniLM folder) holds, quantizes its
// Linear layers with ember::quant::quantize, and writes its state dict as GGUF with the source's
// settings (checkpoint.h's save_model_gguf); prints the summary and the sizes on disk.
#include "quantize.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "checkpoint.h"
#include "ember/io.h"
#include "ember/nn/quantize.h"
#include "ember/threads.h"

namespace ember::cli {
namespace {

namespace fs = std::filesystem;

// --type's dtype; nullopt for f32 (the float model written as GGUF).
std::optional<DType> quantized_dtype(const std::string& type) {
  if (type == "q8_0") return kQ8_0;
  if (type == "q4_0") return kQ4_0;
  if (type == "int8") return kInt8;
  EMBER_CHECK(type == "f32", "[quantize] --type must be q8_0, q4_0, int8 or f32, got \"", type, "\"");
  return std::nullopt;
}

// The model to quantize and what its GGUF file carries besides the tensors.
struct Source {
  std::string kind;
  std::string format;  // "safetensors", "gguf" or "folder"
  std::shared_ptr<nn::Module> model;
  std::map<std::string, std::string> settings;
  std::vector<std::pair<std::string, gguf::Value>> extra;
  std::string weights_path;  // the file whose size is the input's
};

Source minilm_source(const models::SentenceEncoder& encoder, std::string format) {
  return {.kind = "minilm",
          .format = std::move(format),
          .model = encoder.model().shared_from_this(),
          .settings = {},
          .extra = sentence_encoder_metadata(encoder),
          .weights_path = {}};
}

Source load_source(const std::string& input) {
  std::error_code error;
  if (fs::is_directory(input, error)) {
    Source source = minilm_source(load_sentence_encoder(input, "quantize"), "folder");
    source.weights_path = (fs::path(input) / "model.safetensors").string();
    source.settings = load_metadata(source.weights_path);
    return source;
  }
  Checkpoint checkpoint = read_checkpoint(input, "quantize");
  EMBER_CHECK(checkpoint.quantization == "f32", "[quantize] ", input, " is already quantized (",
              checkpoint.quantization, "): quantize the float checkpoint it was made from");
  const std::string format(format_name(checkpoint.format));
  if (checkpoint.kind == "gpt") {
    GptCheckpoint gpt = load_gpt_checkpoint(std::move(checkpoint), "quantize");
    return {.kind = "gpt",
            .format = format,
            .model = gpt.model,
            .settings = gpt.source.settings,
            .extra = {},
            .weights_path = input};
  }
  if (checkpoint.kind == "mnist_mlp" || checkpoint.kind == "mnist_cnn") {
    MnistCheckpoint mnist = load_mnist_checkpoint(std::move(checkpoint), "quantize");
    return {.kind = mnist.source.kind,
            .format = format,
            .model = mnist.model,
            .settings = mnist.source.settings,
            .extra = {},
            .weights_path = input};
  }
  if (checkpoint.kind == "minilm") {
    Source source = minilm_source(load_sentence_encoder(checkpoint, "quantize"), format);
    source.settings = checkpoint.settings;
    source.weights_path = input;
    return source;
  }
  EMBER_FAIL("[quantize] ", input, " holds ", checkpoint.describe(),
             ": expected a checkpoint of `ember train gpt|mnist --save`, a MiniLM folder or a float GGUF file of one");
}

// Every --skip name must be a module of the model: a typo would silently quantize the layer.
void check_skip(nn::Module& model, const std::vector<std::string>& skip, const std::string& kind) {
  std::set<std::string> names;
  std::vector<std::string> linears;
  for (const auto& [name, module] : model.named_modules()) {
    names.insert(name);
    if (module->as<nn::Linear>() != nullptr) linears.push_back(name);
  }
  for (const std::string& name : skip) {
    if (!name.empty() && names.count(name) != 0) continue;
    std::string listed;
    for (size_t i = 0; i < linears.size() && i < 6; ++i) listed += (i > 0 ? ", " : "") + linears[i];
    if (linears.size() > 6) listed += ", ... (" + std::to_string(linears.size()) + " in all)";
    const std::string hint = kind == "gpt" && name == "lm_head"
                                 ? " (the GPT's output layer is tied to the token embedding transformer.wte, which "
                                   "is no Linear layer and stays in float)"
                                 : "";
    EMBER_FAIL("[quantize] --skip \"", name, "\" names no module of the ", kind, " model", hint,
               "; its Linear layers: ", listed.empty() ? "none" : listed);
  }
}

int64_t state_bytes(const StateDict& state) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : state) bytes += storage_bytes(tensor.dtype(), tensor.numel());
  return bytes;
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

int run_quantize(const QuantizeOptions& o) {
  const std::optional<DType> dtype = quantized_dtype(o.type);
  EMBER_CHECK(dtype.has_value() || (o.skip.empty() && !o.weights_only),
              "[quantize] --skip and --weights-only need a quantized --type (q8_0, q4_0 or int8)");
  std::error_code error;
  EMBER_CHECK(!fs::equivalent(o.input, o.output, error), "[quantize] the output ", o.output,
              " is the input: write the GGUF file elsewhere");
  if (o.threads > 0) set_num_threads(o.threads);
  Source source = load_source(o.input);
  nn::Module& model = *source.model;
  check_skip(model, o.skip, source.kind);
  const int64_t bytes_before = state_bytes(model.state_dict());
  quant::Summary summary;
  if (dtype) {
    summary = quant::quantize(model, {.dtype = *dtype, .dynamic_activations = !o.weights_only, .skip = o.skip});
  }
  const StateDict state = model.state_dict();
  save_model_gguf(o.output, source.kind, o.type, !o.weights_only, source.settings, std::move(source.extra), state);
  const auto input_bytes = static_cast<int64_t>(fs::file_size(source.weights_path));
  const auto output_bytes = static_cast<int64_t>(fs::file_size(o.output));
  const int64_t bytes_after = state_bytes(state);

  if (o.json) {
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& [name, why] : summary.skipped) skipped.push_back({{"name", name}, {"why", why}});
    const nlohmann::json result = {{"model", source.kind},
                                   {"type", o.type},
                                   {"weights_only", o.weights_only},
                                   {"quantized", summary.quantized},
                                   {"skipped", skipped},
                                   {"float_bytes", summary.float_bytes},
                                   {"quantized_bytes", summary.quantized_bytes},
                                   {"input", source.weights_path},
                                   {"input_format", source.format},
                                   {"input_bytes", input_bytes},
                                   {"output", o.output},
                                   {"output_bytes", output_bytes},
                                   {"model_bytes_before", bytes_before},
                                   {"model_bytes_after", bytes_after}};
    std::cout << result.dump() << std::endl;
    return 0;
  }
  std::printf("ember quantize: %s model from %s (%s) to %s%s\n", source.kind.c_str(), o.input.c_str(),
              source.format.c_str(), o.type.c_str(), o.weights_only ? ", weights only" : "");
  if (dtype) std::cout << summary.report();
  std::printf("  in   %s: %s (the model's tensors %s)\n", source.weights_path.c_str(), megabytes(input_bytes).c_str(),
              megabytes(bytes_before).c_str());
  std::printf("  out  %s: %s (the model's tensors %s), %.2fx smaller\n", o.output.c_str(),
              megabytes(output_bytes).c_str(), megabytes(bytes_after).c_str(),
              static_cast<double>(input_bytes) / static_cast<double>(output_bytes));
  return 0;
}

}  // namespace ember::cli

// Quantizing a model file (ember/train/quantize.h).
#include "ember/train/quantize.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "ember/io.h"
#include "ember/train/registry.h"

namespace ember::train {
namespace {

namespace fs = std::filesystem;

// --type's dtype; nullopt for f32 (the float model written as GGUF).
std::optional<DType> quantized_dtype(const std::string& type) {
  if (type == "q8_0") return kQ8_0;
  if (type == "q4_0") return kQ4_0;
  if (type == "q4_1") return kQ4_1;
  if (type == "int8") return kInt8;
  EMBER_CHECK(type == "f32", "[quantize] --type must be q8_0, q4_0, q4_1, int8 or f32, got \"", type, "\"");
  return std::nullopt;
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

}  // namespace

QuantizeReport quantize_model_file(const std::string& input, const std::string& output,
                                   const QuantizeFileOptions& options) {
  const std::optional<DType> dtype = quantized_dtype(options.type);
  EMBER_CHECK(dtype.has_value() || (options.skip.empty() && !options.weights_only),
              "[quantize] --skip and --weights-only need a quantized --type (q8_0, q4_0, q4_1 or int8)");
  std::error_code error;
  EMBER_CHECK(!fs::equivalent(input, output, error), "[quantize] the output ", output,
              " is the input: write the GGUF file elsewhere");
  QuantizeReport report;
  const bool folder = fs::is_directory(input, error);
  LoadedModel loaded;
  if (folder) {
    loaded = load_model(input, "quantize");
    report.input_format = "folder";
    report.weights_path = (fs::path(input) / "model.safetensors").string();
    loaded.source.settings = load_metadata(report.weights_path);
  } else {
    Checkpoint checkpoint = read_checkpoint(input, "quantize");
    EMBER_CHECK(checkpoint.quantization == "f32", "[quantize] ", input, " is already quantized (",
                checkpoint.quantization, "): quantize the float checkpoint it was made from");
    const std::string& kind = checkpoint.kind;
    EMBER_CHECK(kind == "gpt" || kind == "mnist_mlp" || kind == "mnist_cnn" || kind == "minilm", "[quantize] ", input,
                " holds ", checkpoint.describe(),
                ": expected a checkpoint of `ember train gpt|mnist --save`, a MiniLM folder or a float GGUF file of "
                "one");
    report.input_format = std::string(format_name(checkpoint.format));
    report.weights_path = input;
    loaded = load_model(std::move(checkpoint), "quantize");
  }
  report.kind = loaded.kind;
  nn::Module& model = *loaded.model;
  check_skip(model, options.skip, loaded.kind);
  report.model_bytes_before = state_bytes(model.state_dict());
  if (dtype) {
    report.summary =
        quant::quantize(model, {.dtype = *dtype, .dynamic_activations = !options.weights_only, .skip = options.skip});
  }
  const StateDict state = model.state_dict();
  std::vector<std::pair<std::string, gguf::Value>> extra;
  if (loaded.encoder) extra = sentence_encoder_metadata(*loaded.encoder);
  save_model_gguf(output, loaded.kind, options.type, !options.weights_only, loaded.source.settings, std::move(extra),
                  state);
  report.input_bytes = static_cast<int64_t>(fs::file_size(report.weights_path));
  report.output_bytes = static_cast<int64_t>(fs::file_size(output));
  report.model_bytes_after = state_bytes(state);
  return report;
}

}  // namespace ember::train

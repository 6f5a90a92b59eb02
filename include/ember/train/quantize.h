// Post-training quantization of a model file (`ember quantize`): rebuilds the model a checkpoint
// (or a MiniLM folder) holds, quantizes its Linear layers (ember::quant::quantize) and writes its
// state dict as a GGUF file with the source's settings, which load_model() reads back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/nn/quantize.h"

namespace ember::train {

struct QuantizeFileOptions {
  std::string type{};               // "q8_0", "q4_0", "q4_1", "int8", or "f32" (the float model as GGUF)
  std::vector<std::string> skip{};  // Linear layers (or modules) to leave in float, by dotted name
  bool weights_only = false;        // float activations times the dequantized weight
};

struct QuantizeReport {
  std::string kind{};          // the model kind
  std::string input_format{};  // "safetensors", "gguf" or "folder"
  std::string weights_path{};  // the file whose size is the input's
  quant::Summary summary{};
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
  int64_t model_bytes_before = 0;  // the model's tensors
  int64_t model_bytes_after = 0;
};

/// Quantizes the model of `input` (a training checkpoint of a GPT or an MNIST model, a MiniLM
/// folder, or a float GGUF file of one) and writes `output` atomically. An unknown --skip name, an
/// input already quantized, or an output that is the input are ember::Errors starting [quantize].
QuantizeReport quantize_model_file(const std::string& input, const std::string& output,
                                   const QuantizeFileOptions& options);

}  // namespace ember::train

// `ember quantize IN OUT.gguf --type q8_0|q4_0|int8|f32`: post-training quantization of a trained
// model's Linear layers (ember::quant::quantize), written as a GGUF file that `ember generate`,
// `ember eval` and `ember embed` load.
#pragma once

#include <string>
#include <vector>

namespace ember::cli {

struct QuantizeOptions {
  std::string input;              // a checkpoint of `ember train gpt|mnist --save`, or a MiniLM folder
  std::string output;             // the GGUF file to write
  std::string type;               // q8_0, q4_0, int8, or f32 (no quantization: the float model as GGUF)
  std::vector<std::string> skip;  // Linear layers (or modules) to leave in float
  bool weights_only = false;      // float activations times the dequantized weight
  bool json = false;
  int threads = 0;
};

int run_quantize(const QuantizeOptions& options);

}  // namespace ember::cli

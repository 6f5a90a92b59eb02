// Post-training quantization of a trained model's Linear layers (Linear::quantize_), for inference:
//
//   ember::quant::Summary s = ember::quant::quantize(*model, {.dtype = ember::kQ8_0, .skip = {"head"}});
//   std::cout << s.report();       // layers, bytes before and after, layers left in float and why
//
// and the inverse step of loading: prepare() quantizes the layers a saved state dict holds
// quantized, so that load_state_dict fits it (a GGUF file written from a quantized model).
#pragma once

#include <string>
#include <vector>

#include "ember/nn/module.h"
#include "ember/state_dict.h"

namespace ember::quant {

struct Scheme {
  DType dtype = kQ8_0;  // kQ8_0, kQ4_0, kQ4_1 or kInt8 (per output channel)
  // true: activations quantized on the fly (q8_0 blocks, or per-row int8), integer products;
  // false: weights only: the weight is dequantized for each call and multiplied in float.
  bool dynamic_activations = true;
  // Dotted names of Linear layers to leave in float (an output layer, "lm_head"), or of modules
  // whose Linear layers all stay in float.
  std::vector<std::string> skip = {};
};

struct Summary {
  std::vector<std::string> quantized;                        // the layers' dotted names
  std::vector<std::pair<std::string, std::string>> skipped;  // name, why
  int64_t float_bytes = 0;                                   // of the quantized layers' weights before
  int64_t quantized_bytes = 0;                               // after (int8's scales included)
  std::string report() const;
};

// Quantizes every Linear layer of `model` not skipped, in place (Linear::quantize_).
Summary quantize(nn::Module& model, const Scheme& scheme);

// Quantizes each Linear layer whose weight `state` holds in q8_0, q4_0 or int8 to that dtype (int8
// weights come with their "weight_scale"), so that model.load_state_dict(state) fits.
void prepare(nn::Module& model, const StateDict& state);

}  // namespace ember::quant

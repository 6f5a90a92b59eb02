// Post-training quantization of a model's Linear layers (ember/nn/quantize.h).
#include "ember/nn/quantize.h"

#include <cstdio>
#include <sstream>

#include "ember/nn/modules.h"

namespace ember::quant {

namespace {

bool skipped_by(const std::string& name, const std::vector<std::string>& skip) {
  for (const std::string& s : skip) {
    if (name == s || name.rfind(s + ".", 0) == 0) return true;
  }
  return false;
}

}  // namespace

Summary quantize(nn::Module& model, const Scheme& scheme) {
  EMBER_CHECK(is_block_quantized(scheme.dtype) || scheme.dtype == kInt8,
              "[quant::quantize] expected a scheme of q8_0, q4_0, q4_1 or int8, got ", scheme.dtype);
  Summary summary;
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = module->as<nn::Linear>();
    if (linear == nullptr) continue;
    const std::string shown = name.empty() ? "(the model)" : name;
    if (linear->is_quantized()) {
      summary.skipped.emplace_back(shown, "already " + std::string(dtype_name(linear->weight.dtype())));
    } else if (skipped_by(name, scheme.skip)) {
      summary.skipped.emplace_back(shown, "skipped as asked");
    } else {
      summary.float_bytes += linear->weight.numel() * linear->weight.element_size();
      linear->quantize_(scheme.dtype, scheme.dynamic_activations);
      summary.quantized_bytes += storage_bytes(linear->weight.dtype(), linear->weight.numel()) +
                                 (linear->weight_scale.defined() ? linear->weight_scale.numel() * 4 : 0);
      summary.quantized.push_back(shown);
    }
  }
  return summary;
}

std::string Summary::report() const {
  std::ostringstream out;
  out << "quantized " << quantized.size() << " Linear layer" << (quantized.size() == 1 ? "" : "s");
  if (float_bytes > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", static_cast<double>(float_bytes) / static_cast<double>(quantized_bytes));
    out << ": weights " << float_bytes << " -> " << quantized_bytes << " bytes (" << ratio << "x smaller)";
  }
  out << "\n";
  for (const auto& [name, why] : skipped) out << "  kept " << name << " in float: " << why << "\n";
  return out.str();
}

void prepare(nn::Module& model, const StateDict& state) {
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = module->as<nn::Linear>();
    if (linear == nullptr || linear->is_quantized()) continue;
    const auto it = state.find(name.empty() ? "weight" : name + ".weight");
    if (it == state.end() || it->second.is_floating_point()) continue;
    const DType dtype = it->second.dtype();
    EMBER_CHECK(is_block_quantized(dtype) || dtype == kInt8, "[quant::prepare] \"", it->first, "\" has dtype ", dtype,
                ", which is not a weight dtype (float, q8_0, q4_0, q4_1 or int8)");
    linear->quantize_(dtype);
  }
}

}  // namespace ember::quant

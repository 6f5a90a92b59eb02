// `ember quantize IN OUT.gguf --type q8_0|q4_0|q4_1|int8|f32`: post-training quantization of a trained
// model's Linear layers (train::quantize_model_file), written as a GGUF file that `ember generate`,
// `ember eval` and `ember embed` load; prints the summary and the sizes on disk.
#include "ember/train/quantize.h"

#include <cstdio>
#include <iostream>

#include "cli_util.h"

namespace ember::cli {
namespace {

struct QuantizeOptions {
  std::string input;   // a checkpoint of `ember train gpt|mnist --save`, or a MiniLM folder
  std::string output;  // the GGUF file to write
  train::QuantizeFileOptions file;
  bool json = false;
  int threads = 0;
};

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

int run_quantize(const QuantizeOptions& o) {
  use_threads(o.threads);
  const train::QuantizeReport r = train::quantize_model_file(o.input, o.output, o.file);
  const bool quantized = o.file.type != "f32";
  if (o.json) {
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& [name, why] : r.summary.skipped) skipped.push_back({{"name", name}, {"why", why}});
    std::cout << nlohmann::json{{"model", r.kind},
                                {"type", o.file.type},
                                {"weights_only", o.file.weights_only},
                                {"quantized", r.summary.quantized},
                                {"skipped", skipped},
                                {"float_bytes", r.summary.float_bytes},
                                {"quantized_bytes", r.summary.quantized_bytes},
                                {"input", r.weights_path},
                                {"input_format", r.input_format},
                                {"input_bytes", r.input_bytes},
                                {"output", o.output},
                                {"output_bytes", r.output_bytes},
                                {"model_bytes_before", r.model_bytes_before},
                                {"model_bytes_after", r.model_bytes_after}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("ember quantize: %s model from %s (%s) to %s%s\n", r.kind.c_str(), o.input.c_str(),
              r.input_format.c_str(), o.file.type.c_str(), o.file.weights_only ? ", weights only" : "");
  if (quantized) std::cout << r.summary.report();
  std::printf("  in   %s: %s (the model's tensors %s)\n", r.weights_path.c_str(), megabytes(r.input_bytes).c_str(),
              megabytes(r.model_bytes_before).c_str());
  std::printf("  out  %s: %s (the model's tensors %s), %.2fx smaller\n", o.output.c_str(),
              megabytes(r.output_bytes).c_str(), megabytes(r.model_bytes_after).c_str(),
              static_cast<double>(r.input_bytes) / static_cast<double>(r.output_bytes));
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantize a trained model's Linear layers (q8_0, q4_0 or int8) and write it as GGUF");
  cmd->add_option("input", o->input, "A checkpoint of `ember train gpt|mnist --save`, or a MiniLM folder (data/minilm)")
      ->required();
  cmd->add_option("output", o->output, "The GGUF file to write")->required();
  cmd->add_option(
         "--type", o->file.type,
         "q8_0, q4_0 or q4_1 (llama.cpp's 32-value blocks), int8 (per output channel), or f32 (no quantization)")
      ->required();
  cmd->add_option("--skip", o->file.skip, "Linear layers (or modules) to keep in float, by dotted name")
      ->delimiter(',');
  cmd->add_flag("--weights-only", o->file.weights_only,
                "Keep the activations in float: each call multiplies by the dequantized weight");
  cmd->add_flag("--json", o->json, "Print one JSON line");
  add_threads(cmd, o->threads);
  commands.add(cmd, [o] { return run_quantize(*o); });
}

}  // namespace ember::cli

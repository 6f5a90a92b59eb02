// `ember onnx info MODEL` and `ember onnx run MODEL --input name=x.npy ...`.
#pragma once

#include <string>
#include <vector>

namespace ember::cli {

struct OnnxOptions {
  std::string model;                // a .onnx file
  std::vector<std::string> inputs;  // "name=file.npy" (or "file.npy" for a single-input model)
  std::string output_dir = ".";     // where each output goes, as <output name>.npy
  bool bench = false;               // time repeated runs after the first
  double bench_seconds = 2.0;
  bool eager = false;           // run without compiling
  bool detect_anomaly = false;  // run eagerly with autograd's anomaly mode: the first op making NaN or Inf fails
  bool json = false;            // one JSON object instead of text
  int threads = 0;              // 0: all cores
};

// Prints the model's inputs, outputs, opsets and which of its ops ember imports (all of them, at
// once); returns 0 when every op is supported, 1 when some are not.
int run_onnx_info(const OnnxOptions& options);
// Loads the model, runs it on the .npy inputs, writes the outputs (and with bench, the latency).
int run_onnx_run(const OnnxOptions& options);

}  // namespace ember::cli

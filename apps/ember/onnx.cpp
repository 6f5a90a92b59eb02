// `ember onnx`: the coverage report of a model (info) and running one on NumPy files (run).
#include "ember/onnx.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "cli_util.h"
#include "ember/ember.h"
#include "ember/npy.h"

namespace ember::cli {
namespace {

struct OnnxOptions {
  std::string model;                // a .onnx file
  std::vector<std::string> inputs;  // "name=file.npy" (or "file.npy" for a single-input model)
  std::string output_dir = ".";     // where each output goes, as <output name>.npy
  bool bench = false;               // time repeated runs after the first
  double bench_seconds = 2.0;
  bool eager = false;           // run without compiling
  bool detect_anomaly = false;  // run eagerly with autograd's anomaly mode: the first op making NaN or Inf fails
  bool json = false;            // one JSON object instead of text
  bool explain = false;         // print what the graph compiler did (Model::explain())
  int threads = 0;              // 0: all cores
};

// Prints the model's inputs, outputs, opsets and which of its ops ember imports (all of them, at
// once); returns 0 when every op is supported, 1 when some are not.

// An output name as a file name: characters outside [A-Za-z0-9_.-] become '_'.
std::string file_name_of(const std::string& name) {
  std::string out = name.empty() ? std::string("output") : name;
  for (char& c : out) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
    if (!keep) c = '_';
  }
  if (out == "." || out == "..") out = "_";
  return out;
}

nlohmann::json info_json(const std::string& path, const onnx::ModelInfo& info) {
  auto values = [](const std::vector<onnx::ValueInfo>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : list) {
      nlohmann::json shape = nullptr;
      if (v.shape) {
        shape = nlohmann::json::array();
        for (const auto& d : *v.shape) shape.push_back(d.size >= 0 ? nlohmann::json(d.size) : nlohmann::json(d.symbol));
      }
      out.push_back({{"name", v.name}, {"type", v.type}, {"shape", shape}});
    }
    return out;
  };
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : info.ops) {
    ops.push_back({{"domain", op.domain},
                   {"op", op.op_type},
                   {"count", op.count},
                   {"supported", op.supported},
                   {"note", op.note}});
  }
  nlohmann::json opsets = nlohmann::json::object();
  for (const auto& [domain, version] : info.opsets) opsets[domain] = version;
  return {{"model", path},
          {"ir_version", info.ir_version},
          {"opsets", opsets},
          {"producer", info.producer},
          {"inputs", values(info.inputs)},
          {"outputs", values(info.outputs)},
          {"nodes", info.nodes},
          {"initializers", info.initializers},
          {"initializer_bytes", info.initializer_bytes},
          {"ops", ops},
          {"supported", info.supported()}};
}

// A warning on stderr when `t` holds NaN or infinite values (`what` names it): they reach the
// outputs, and --detect-anomaly names the op they first come from.
void warn_non_finite(const std::string& what, const Tensor& t) {
  if (!t.is_floating_point() || t.numel() == 0) return;
  const autograd::NoGradGuard no_grad;
  const int64_t nan = isnan(t).sum().item<int64_t>(), inf = isinf(t).sum().item<int64_t>();
  if (nan == 0 && inf == 0) return;
  std::fprintf(stderr, "[onnx run] warning: %s holds %lld NaN and %lld infinite values (of %lld)\n", what.c_str(),
               static_cast<long long>(nan), static_cast<long long>(inf), static_cast<long long>(t.numel()));
}

// The outputs of an eager run under anomaly mode: inputs that require grad, so that autograd
// records (and anomaly mode checks) every op from the first; the first op that makes NaN or Inf
// is an error naming it.
std::map<std::string, Tensor> run_detecting_anomalies(onnx::Model& model, const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> ordered;
  for (const std::string& name : model.input_names()) {
    const auto it = inputs.find(name);
    EMBER_CHECK(it != inputs.end(), "[onnx run] no value for input \"", name, "\" (give --input ", name, "=file.npy)");
    ordered.push_back(it->second.is_floating_point() ? it->second.detach().requires_grad_(true) : it->second);
  }
  const autograd::DetectAnomalyGuard anomaly;
  const std::vector<Tensor> outputs = model.forward(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outputs.size(); ++i) named.emplace(model.output_names()[i], outputs[i].detach());
  return named;
}

int run_onnx_info(const OnnxOptions& options) {
  const onnx::ModelInfo info = onnx::inspect(options.model);
  if (options.json) {
    std::cout << info_json(options.model, info).dump() << "\n";
  } else {
    std::cout << options.model << "\n" << info.report();
  }
  return info.supported() ? 0 : 1;
}

int run_onnx_run(const OnnxOptions& options) {
  use_threads(options.threads);
  onnx::LoadOptions load_options;
  load_options.compile = !options.eager && !options.detect_anomaly;
  load_options.trainable = options.detect_anomaly;  // anomaly mode checks the ops autograd records
  const Clock::time_point load_start = Clock::now();
  const std::shared_ptr<onnx::Model> model = onnx::load(options.model, load_options);
  const double load_ms = milliseconds_since(load_start);

  std::map<std::string, Tensor> inputs;
  for (const std::string& arg : options.inputs) {
    const size_t eq = arg.find('=');
    std::string name, file;
    if (eq == std::string::npos) {
      EMBER_CHECK(model->input_names().size() == 1, "[onnx run] --input ", arg, ": the model takes ",
                  model->input_names().size(), " inputs, so each needs a name (--input name=file.npy)");
      name = model->input_names()[0];
      file = arg;
    } else {
      name = arg.substr(0, eq);
      file = arg.substr(eq + 1);
    }
    EMBER_CHECK(inputs.emplace(name, load_npy(file)).second, "[onnx run] input \"", name, "\" is given twice");
    warn_non_finite("input \"" + name + "\" (" + file + ")", inputs.at(name));
  }

  const Clock::time_point first_start = Clock::now();
  const std::map<std::string, Tensor> outputs =
      options.detect_anomaly ? run_detecting_anomalies(*model, inputs) : model->run(inputs);
  const double first_ms = milliseconds_since(first_start);

  std::error_code error;
  std::filesystem::create_directories(options.output_dir, error);
  EMBER_CHECK(!error, "[onnx run] cannot create the output folder '", options.output_dir, "': ", error.message());
  nlohmann::json written = nlohmann::json::array();
  for (const std::string& name : model->output_names()) {
    const Tensor& t = outputs.at(name);
    warn_non_finite("output \"" + name + "\"", t);
    const std::string path = (std::filesystem::path(options.output_dir) / (file_name_of(name) + ".npy")).string();
    save_npy(t, path);
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    written.push_back(
        {{"name", name}, {"file", path}, {"shape", shape}, {"dtype", std::string(dtype_name(t.dtype()))}});
  }

  nlohmann::json report = {{"model", options.model},
                           {"load_ms", load_ms},
                           {"first_run_ms", first_ms},
                           {"compiled", load_options.compile},
                           {"outputs", written}};
  if (options.bench) {
    std::vector<double> times;
    const Clock::time_point bench_start = Clock::now();
    while (times.size() < 3 ||
           (milliseconds_since(bench_start) < options.bench_seconds * 1000 && times.size() < 100000)) {
      const Clock::time_point start = Clock::now();
      (void)(options.detect_anomaly ? run_detecting_anomalies(*model, inputs) : model->run(inputs));
      times.push_back(milliseconds_since(start));
    }
    std::sort(times.begin(), times.end());
    report["runs"] = times.size();
    report["median_ms"] = times[times.size() / 2];
    report["p90_ms"] = times[times.size() * 9 / 10];
    report["min_ms"] = times.front();
  }
  if (options.explain) report["explain"] = model->explain();
  if (options.json) {
    std::cout << report.dump() << "\n";
    return 0;
  }
  std::printf("%s: loaded in %.1f ms, first run (%s) %.1f ms\n", options.model.c_str(), load_ms,
              load_options.compile ? "tracing and compiling" : "eager", first_ms);
  for (const auto& w : written) {
    std::printf("  %s  %s %s -> %s\n", w["name"].get<std::string>().c_str(), w["dtype"].get<std::string>().c_str(),
                w["shape"].dump().c_str(), w["file"].get<std::string>().c_str());
  }
  if (options.bench) {
    const double median = report["median_ms"].get<double>();
    const bool small = median < 1.0;  // microseconds read better below a millisecond
    const double unit = small ? 1000.0 : 1.0;
    std::printf("latency: median %.3f %s, p90 %.3f, min %.3f over %zu runs\n", median * unit, small ? "us" : "ms",
                report["p90_ms"].get<double>() * unit, report["min_ms"].get<double>() * unit,
                report["runs"].get<size_t>());
  }
  if (options.explain) std::printf("%s", report["explain"].get<std::string>().c_str());
  return 0;
}

}  // namespace

void add_onnx_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<OnnxOptions>();
  CLI::App* onnx_cmd = app.add_subcommand("onnx", "Import ONNX models: what they use, and run them");
  onnx_cmd->require_subcommand(1);
  CLI::App* info = onnx_cmd->add_subcommand("info", "Inputs, outputs, opsets and which ops ember imports");
  info->add_option("model", o->model, "A .onnx file")->required();
  info->add_flag("--json", o->json, "Print one JSON object");
  commands.add(info, [o] { return run_onnx_info(*o); });
  CLI::App* run = onnx_cmd->add_subcommand("run", "Run a model on NumPy .npy inputs; write each output as .npy");
  run->add_option("model", o->model, "A .onnx file")->required();
  run->add_option("--input,-i", o->inputs, "name=file.npy (just file.npy for a single-input model)");
  run->add_option("--output-dir,-o", o->output_dir, "Folder for <output name>.npy")->capture_default_str();
  run->add_flag("--bench", o->bench, "Time repeated runs after the first (median, p90, min)");
  run->add_option("--bench-seconds", o->bench_seconds, "How long --bench runs")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  run->add_flag("--eager", o->eager, "Run the graph op by op instead of compiling it");
  run->add_flag("--detect-anomaly", o->detect_anomaly,
                "Run op by op, checking every op's output for NaN and Inf; stop at the first with an error naming "
                "the op");
  run->add_flag("--json", o->json, "Print one JSON object");
  run->add_flag("--explain", o->explain,
                "Print what the graph compiler did with the model: its passes, fusions and memory plan")
      ->excludes("--eager")
      ->excludes("--detect-anomaly");
  add_threads(run, o->threads);
  commands.add(run, [o] { return run_onnx_run(*o); });
}

}  // namespace ember::cli

// `ember roofline`: measures (or reads from the cache) this machine's FMA peaks and DRAM/L2
// bandwidths, places ops from a profile trace (aggregated per op name) or benchmark workloads on
// the roofline, and prints a table, a JSON object or a self-contained SVG plot.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_util.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/peaks.h"
#include "ember/profiler.h"

namespace ember::cli {
namespace {

struct RooflineOptions {
  bool json = false;
  std::string svg_path;    // write the plot here
  std::string from_trace;  // a Chrome trace from `ember train ... --profile` or Profiler::export_chrome_trace
  std::string from_bench;  // bench/results/latest.json from scripts/bench
  bool refresh = false;    // measure the peaks again instead of reading the cache
  int threads = 0;         // 0: all cores
};

// Prints (and draws) the roofline; returns the process exit code. Throws ember::Error on bad input.

nlohmann::json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  EMBER_CHECK(in.good(), "[roofline] cannot open ", what, " ", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  EMBER_CHECK(!j.is_discarded(), "[roofline] ", path, " is not valid JSON");
  return j;
}

// Op events of a Chrome trace, per op name: time summed over calls (each call's own, nested ops
// included, as the profile table counts it) and the calls' FLOPs and bytes.
std::vector<profiler::RooflinePoint> points_from_trace(const std::string& path) {
  const nlohmann::json trace = read_json_file(path, "trace");
  EMBER_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(), "[roofline] ",
              path, " has no traceEvents array (expected a Chrome trace from --profile)");
  struct Totals {
    double us = 0, flops = 0, bytes = 0;
  };
  std::map<std::string, Totals> ops;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") != "op") continue;
    const nlohmann::json args = e.value("args", nlohmann::json::object());
    if (!args.contains("flops") || !args.contains("bytes")) continue;  // no cost rule
    Totals& t = ops[e.value("name", "?")];
    t.us += e.value("dur", 0.0);
    t.flops += args["flops"].get<double>();
    t.bytes += args["bytes"].get<double>();
  }
  std::vector<profiler::RooflinePoint> points;
  for (const auto& [name, t] : ops) {
    if (t.flops > 0 && t.bytes > 0 && t.us > 0) points.push_back({name, t.flops / t.bytes, t.flops / (t.us * 1e3)});
  }
  return points;
}

// bench/results/latest.json: {"machine": {...}, "results": [{"name", "ember_s", "flops", "bytes", ...}]}.
std::vector<profiler::RooflinePoint> points_from_bench(const std::string& path, std::string* machine) {
  const nlohmann::json bench = read_json_file(path, "benchmark results");
  EMBER_CHECK(bench.is_object() && bench.contains("results") && bench["results"].is_array(), "[roofline] ", path,
              " has no results array (expected bench/results/latest.json from scripts/bench)");
  if (bench.contains("machine") && bench["machine"].is_object()) {
    *machine =
        bench["machine"].value("cpu", "") + ", " + std::to_string(bench["machine"].value("threads", 0)) + " threads";
  }
  std::vector<profiler::RooflinePoint> points;
  for (const nlohmann::json& r : bench["results"]) {
    const double seconds = r.value("ember_s", 0.0), flops = r.value("flops", 0.0), bytes = r.value("bytes", 0.0);
    if (seconds > 0 && flops > 0 && bytes > 0)
      points.push_back({r.value("name", "?"), flops / bytes, flops / seconds * 1e-9});
  }
  return points;
}

std::string fixed(double value, const char* fmt) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

int run_roofline(const RooflineOptions& options) {
  EMBER_CHECK(options.threads >= 0, "[roofline] --threads must be >= 0, got ", options.threads);
  if (options.threads > 0) set_num_threads(options.threads);
  // Read the inputs before measuring, so a bad path fails at once.
  std::vector<profiler::RooflinePoint> points;
  std::string bench_machine, source;
  if (!options.from_trace.empty()) {
    points = points_from_trace(options.from_trace);
    source = "ops of " + options.from_trace;
  }
  if (!options.from_bench.empty()) {
    const std::vector<profiler::RooflinePoint> bench = points_from_bench(options.from_bench, &bench_machine);
    points.insert(points.end(), bench.begin(), bench.end());
    source += (source.empty() ? "" : " and ") + std::string("workloads of ") + options.from_bench;
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.gflops > b.gflops; });

  const profiler::MachinePeaks peaks = profiler::cached_peaks(options.refresh, options.threads);
  const profiler::Roof roof = profiler::roof_from(peaks);
  const double ridge = roof.f32_gflops / roof.dram_gbps;
  const std::string machine = peaks.cpu + ", " + std::to_string(peaks.threads) + " threads";
  const std::string title = "roofline: " + machine;

  if (!options.svg_path.empty()) {
    save_bytes(options.svg_path, profiler::roofline_svg(roof, points, title), "roofline");
  }

  auto bound_kind = [&](double intensity) { return intensity < ridge ? "memory" : "compute"; };
  if (options.json) {
    nlohmann::json j = {{"machine",
                         {{"cpu", peaks.cpu},
                          {"threads", peaks.threads},
                          {"fma_gflops_f32", peaks.fma_gflops_f32},
                          {"fma_gflops_f64", peaks.fma_gflops_f64},
                          {"dram_gbps", peaks.dram_gbps},
                          {"l2_gbps", peaks.l2_gbps}}},
                        {"ridge_flop_per_byte", ridge},
                        {"peaks_cache", profiler::peaks_cache_path()},
                        {"points", nlohmann::json::array()}};
    for (const profiler::RooflinePoint& p : points) {
      const double bound = profiler::roofline_bound(roof, p.intensity);
      j["points"].push_back({{"name", p.label},
                             {"flop_per_byte", p.intensity},
                             {"gflops", p.gflops},
                             {"bound_gflops", bound},
                             {"fraction_of_roof", p.gflops / bound},
                             {"bound_by", bound_kind(p.intensity)}});
    }
    if (!bench_machine.empty()) j["bench_machine"] = bench_machine;
    if (!options.svg_path.empty()) j["svg"] = options.svg_path;
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::cout << "roofline of this machine: " << machine << "\n"
            << "  f32 FMA peak   " << fixed(roof.f32_gflops, "%8.1f") << " GFLOP/s\n"
            << "  f64 FMA peak   " << fixed(roof.f64_gflops, "%8.1f") << " GFLOP/s\n"
            << "  DRAM bandwidth " << fixed(roof.dram_gbps, "%8.1f") << " GB/s\n"
            << "  L2 bandwidth   " << fixed(roof.l2_gbps, "%8.1f") << " GB/s\n"
            << "  ridge point    " << fixed(ridge, "%8.2f")
            << " FLOP/byte (below it an op is memory bound, above it compute bound)\n";
  const std::string cache = profiler::peaks_cache_path();
  std::cout << "  (peaks " << (options.refresh ? "measured now" : "cached") << " in "
            << (cache.empty() ? std::string("no cache file") : cache) << "; --refresh measures again)\n";
  if (!bench_machine.empty() && bench_machine != machine) {
    std::cout << "  note: the benchmark ran on " << bench_machine << "\n";
  }
  if (!points.empty()) {
    std::cout << "\n" << source << ":\n";
    std::printf("  %-28s %10s %10s %10s %8s  %s\n", "name", "FLOP/B", "GFLOP/s", "roof", "% roof", "bound by");
    for (const profiler::RooflinePoint& p : points) {
      const double bound = profiler::roofline_bound(roof, p.intensity);
      std::printf("  %-28s %10.3f %10.2f %10.1f %7.1f%%  %s\n", p.label.substr(0, 28).c_str(), p.intensity, p.gflops,
                  bound, 100 * p.gflops / bound, bound_kind(p.intensity));
    }
  } else if (!source.empty()) {
    std::cout << "\n" << source << ": nothing with both FLOPs and bytes to place\n";
  }
  if (!options.svg_path.empty()) std::cout << "\nplot written to " << options.svg_path << "\n";
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_roofline_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<RooflineOptions>();
  CLI::App* cmd =
      app.add_subcommand("roofline", "This machine's roofline (measured peaks), with ops from a profile or benchmark");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--svg", o->svg_path, "Draw the roofline as a self-contained SVG file");
  cmd->add_option("--from-trace", o->from_trace, "Place the ops of a trace written by --profile");
  cmd->add_option("--from-bench", o->from_bench, "Place the workloads of bench/results/latest.json");
  cmd->add_flag("--refresh", o->refresh, "Measure the peaks again (the cache keeps the best of old and new)");
  add_threads(cmd, o->threads);
  commands.add(cmd, [o] { return run_roofline(*o); });
}

}  // namespace ember::cli

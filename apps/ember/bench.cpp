// `ember bench`: sets up each workload once, warms it up, then times it. A sample runs the
// workload enough times in a row to last about 20 ms (so the clock's resolution and the call of
// the clock do not matter), and the median of the samples' per-call times is reported, with the
// spread of the samples as a measure of the machine's noise. scripts/bench calls this once per
// workload and round, interleaved with the peers (bench/run.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
// GCC 12 warns, wrongly, that std::regex's NFA states may be used uninitialized (-O2 with the
// sanitizers); the pragma covers the headers where the warning points.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop

#include "cli_util.h"
#include "ember/ember.h"
#include "ember/models/llama.h"
#include "ember/peaks.h"
#include "workloads.h"

namespace ember::cli {
namespace {

using bench::Workload;
using bench::WorkloadSpec;

struct BenchOptions {
  std::string filter;                   // a regular expression searched in each workload's name; empty: all
  bool quick = false;                   // shorter samples, fewer of them
  bool list = false;                    // print the workloads instead of running them
  bool json = false;                    // one JSON object per line
  bool machine = false;                 // measure this machine's peaks (ember/peaks.h) instead
  int threads = 0;                      // 0: ember's default (all cores)
  int repeats = 5;                      // samples per workload (the median is reported)
  double latency = 0;                   // > 0: time single calls for this many seconds instead (median, p99)
  bool warmup = true;                   // one untimed call before calibrating
  double cold_call = 10.0;              // a warm-up call at least this long (seconds) is the one sample
  std::string data_dir = "data/mnist";  // for train_mnist_epoch
};

struct TimingPolicy {
  double sample_seconds;  // a sample repeats the call until it lasts about this long
  double budget_seconds;  // fewer samples (never fewer than 1) when they would take longer than this
  int repeats;            // samples wanted
  // A call lasting at least this long is timed once: the first calibration call is the one sample
  // (a training run of seconds needs no second call to be measured, and a full benchmark run of
  // such rows would otherwise repeat each several times per side and round).
  double long_call_seconds = 1.0;
  // The untimed call before calibration. scripts/bench skips it for a workload whose first round
  // was one long call: a call of seconds is its own warm-up, and repeating a 40 s training run
  // only to discard it doubled the full benchmark's time on that row.
  bool warmup = true;
  // A warm-up call lasting at least this long is the one sample: what a first call costs beyond
  // the others (allocations, first touches of memory, the thread pool waking) is a fraction of a
  // percent of a training run of tens of seconds, and the 2,000-step row would otherwise run a
  // whole extra time per side in every full benchmark.
  double cold_call_seconds = 10.0;
};

struct Timing {
  double median_s = 0;  // seconds per call: the median over the samples
  double min_s = 0;
  double max_s = 0;
  int samples = 0;
  int64_t iterations = 0;  // calls per sample
};

double time_calls(const Workload& w, int64_t calls) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) w.run();
  return std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(calls);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Timing measure(const Workload& w, const TimingPolicy& policy) {
  if (!policy.warmup) {
    // No untimed call: calibration's first call is the first call.
  } else if (w.warmup) {
    w.warmup();
  } else {
    const double first = time_calls(w, 1);
    if (first >= policy.cold_call_seconds)
      return Timing{.median_s = first, .min_s = first, .max_s = first, .samples = 1, .iterations = 1};
  }
  // Calibration: the calls per sample grow until a sample lasts sample_seconds (one slow call,
  // disturbed by another process, cannot make every sample a single call).
  Timing t;
  t.iterations = 1;
  double sample_cost = 0;
  for (;;) {
    sample_cost = time_calls(w, t.iterations) * static_cast<double>(t.iterations);
    if (sample_cost >= policy.sample_seconds) break;
    const double growth = std::clamp(1.2 * policy.sample_seconds / std::max(sample_cost, 1e-9), 2.0, 10.0);
    t.iterations = static_cast<int64_t>(std::ceil(static_cast<double>(t.iterations) * growth));
  }
  std::vector<double> per_call;
  if (t.iterations == 1 && sample_cost >= policy.long_call_seconds) {
    t.samples = 1;
    per_call.push_back(sample_cost);
  } else {
    t.samples = std::clamp(static_cast<int>(policy.budget_seconds / sample_cost), 1, policy.repeats);
    for (int s = 0; s < t.samples; ++s) per_call.push_back(time_calls(w, t.iterations));
  }
  t.median_s = median(per_call);
  t.min_s = *std::min_element(per_call.begin(), per_call.end());
  t.max_s = *std::max_element(per_call.begin(), per_call.end());
  return t;
}

// Latency: single calls, each timed on its own, for about `seconds` (at least 5 calls, at most
// 5000), after the warm-up. A call the OS delayed shows in the p99, where averaging samples would
// hide it; the mean is the throughput (a few very slow calls move it, not the median).
struct Latency {
  double median_s = 0;
  double mean_s = 0;
  double p99_s = 0;
  int64_t calls = 0;
};

Latency measure_latency(const Workload& w, double seconds) {
  if (w.warmup) {
    w.warmup();
  } else {
    w.run();
  }
  std::vector<double> calls;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (calls.size() < 5 || (calls.size() < 5000 && Clock::now() < deadline)) {
    const auto start = Clock::now();
    w.run();
    calls.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  Latency l;
  l.calls = static_cast<int64_t>(calls.size());
  for (double c : calls) l.mean_s += c / static_cast<double>(calls.size());
  std::sort(calls.begin(), calls.end());
  l.median_s = median(calls);
  l.p99_s =
      calls[std::min(calls.size() - 1, static_cast<size_t>(std::ceil(0.99 * static_cast<double>(calls.size()))) - 1)];
  return l;
}

std::string format_seconds(double s) {
  char text[32];
  if (s < 1e-6) {
    std::snprintf(text, sizeof text, "%.1f ns", s * 1e9);
  } else if (s < 1e-3) {
    std::snprintf(text, sizeof text, "%.2f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.3f s", s);
  }
  return text;
}

int print_machine(const BenchOptions& options) {
  const profiler::MachinePeaks peaks = profiler::measure_peaks(options.threads);
  if (options.json) {
    const nlohmann::json j = {{"cpu", peaks.cpu},
                              {"threads", peaks.threads},
                              {"fma_gflops_f32", peaks.fma_gflops_f32},
                              {"fma_gflops_f64", peaks.fma_gflops_f64},
                              {"dram_gbps", peaks.dram_gbps},
                              {"l2_gbps", peaks.l2_gbps}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "%s, %d threads\n  FMA peak  %8.1f GFLOP/s f32  %8.1f GFLOP/s f64\n  bandwidth %8.1f GB/s DRAM  "
        "%8.1f GB/s L2\n",
        peaks.cpu.c_str(), peaks.threads, peaks.fma_gflops_f32, peaks.fma_gflops_f64, peaks.dram_gbps, peaks.l2_gbps);
  }
  return 0;
}

int run_bench(const BenchOptions& options) {
  EMBER_CHECK(options.threads >= 0, "[bench] --threads must be >= 0 (0: all cores), got ", options.threads);
  EMBER_CHECK(options.repeats >= 1, "[bench] --repeats must be at least 1, got ", options.repeats);
  use_threads(options.threads);
  if (options.machine) return print_machine(options);

  std::regex filter;
  try {
    filter = std::regex(options.filter.empty() ? std::string(".*") : options.filter);
  } catch (const std::regex_error& e) {
    EMBER_FAIL("[bench] --filter '", options.filter, "' is not a valid regular expression: ", e.what());
  }
  std::vector<WorkloadSpec> selected;
  for (WorkloadSpec& spec : bench::workloads(options.data_dir)) {
    if (std::regex_search(spec.name, filter)) selected.push_back(std::move(spec));
  }
  EMBER_CHECK(!selected.empty(), "[bench] no workload matches --filter '", options.filter,
              "' (ember bench --list shows them)");

  if (options.list) {
    for (const WorkloadSpec& spec : selected) {
      if (options.json) {
        std::cout << nlohmann::json{{"name", spec.name}, {"slow", spec.slow}}.dump() << "\n";
      } else {
        std::cout << spec.name << (spec.slow ? "  (slow: scripts/bench --quick skips it)" : "") << "\n";
      }
    }
    return 0;
  }

  TimingPolicy policy =
      options.quick ? TimingPolicy{0.005, 0.5, std::min(options.repeats, 3)} : TimingPolicy{0.02, 3.0, options.repeats};
  policy.warmup = options.warmup;
  policy.cold_call_seconds = options.cold_call;
  if (!options.json) {
    std::printf("ember bench: %d threads, median of up to %d samples of >= %.0f ms each\n", get_num_threads(),
                policy.repeats, policy.sample_seconds * 1e3);
    std::printf("%-30s %12s %10s %10s %14s %8s\n", "workload", "time/call", "GFLOP/s", "GB/s", "samples x calls",
                "spread");
  }
  EMBER_CHECK(options.latency >= 0, "[bench] --latency must be >= 0 seconds, got ", options.latency);
  if (options.latency > 0) {
    for (const WorkloadSpec& spec : selected) {
      const Workload workload = spec.setup();
      const Latency l = measure_latency(workload, options.latency);
      if (options.json) {
        std::cout << nlohmann::json{{"name", spec.name}, {"median_s", l.median_s}, {"mean_s", l.mean_s},
                                    {"p99_s", l.p99_s},  {"calls", l.calls},       {"threads", get_num_threads()}}
                         .dump()
                  << std::endl;
      } else {
        std::printf("%-30s median %12s  mean %12s  p99 %12s  (%lld calls)\n", spec.name.c_str(),
                    format_seconds(l.median_s).c_str(), format_seconds(l.mean_s).c_str(),
                    format_seconds(l.p99_s).c_str(), static_cast<long long>(l.calls));
        std::fflush(stdout);
      }
    }
    return 0;
  }
  for (const WorkloadSpec& spec : selected) {
    const Workload workload = spec.setup();
    const Timing t = measure(workload, policy);
    if (options.json) {
      const nlohmann::json j = {{"name", spec.name},       {"seconds", t.median_s},   {"min_s", t.min_s},
                                {"max_s", t.max_s},        {"samples", t.samples},    {"iterations", t.iterations},
                                {"flops", workload.flops}, {"bytes", workload.bytes}, {"threads", get_num_threads()}};
      std::cout << j.dump() << std::endl;
    } else {
      char samples[32];
      std::snprintf(samples, sizeof samples, "%d x %lld", t.samples, static_cast<long long>(t.iterations));
      std::printf("%-30s %12s %10.2f %10.2f %14s %7.1f%%\n", spec.name.c_str(), format_seconds(t.median_s).c_str(),
                  workload.flops / t.median_s / 1e9, workload.bytes / t.median_s / 1e9, samples,
                  100.0 * (t.max_s / t.min_s - 1.0));
      std::fflush(stdout);
    }
  }
  return 0;
}

struct LlmBenchOptions {
  std::string model = "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int repeats = 3;
  int64_t batch = 1;
  bool json = false;
  int threads = 0;
};

int run_llm_bench(const LlmBenchOptions& o) {
  use_threads(o.threads);
  const auto load_start = Clock::now();
  const std::shared_ptr<models::Llama> model = models::Llama::from_gguf(o.model);
  const double load_ms = milliseconds_since(load_start);
  const models::LlamaSpeed speed = models::measure_speed(*model, o.prompt_tokens, o.gen_tokens, o.repeats, o.batch);
  if (o.json) {
    std::cout << nlohmann::json{{"model", o.model},
                                {"load_ms", load_ms},
                                {"threads", get_num_threads()},
                                {"pp", o.prompt_tokens},
                                {"pp_tokens_per_s", speed.prompt_tokens_per_s},
                                {"tg", o.gen_tokens},
                                {"batch", o.batch},
                                {"tg_tokens_per_s", speed.gen_tokens_per_s}}
                     .dump()
              << "\n";
    return 0;
  }
  std::printf("%s (%d threads), loaded in %.0f ms\n", o.model.c_str(), get_num_threads(), load_ms);
  std::printf("pp%lld  %8.1f tokens/s\n", static_cast<long long>(o.prompt_tokens), speed.prompt_tokens_per_s);
  if (o.batch == 1) {
    std::printf("tg%lld  %8.1f tokens/s\n", static_cast<long long>(o.gen_tokens), speed.gen_tokens_per_s);
  } else {
    std::printf("tg%lld  %8.1f tokens/s (%lld sequences together, %.1f each)\n", static_cast<long long>(o.gen_tokens),
                speed.gen_tokens_per_s, static_cast<long long>(o.batch),
                speed.gen_tokens_per_s / static_cast<double>(o.batch));
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time ember on the benchmark's workloads (scripts/bench compares)");
  cmd->add_option("--filter", o->filter, "Only workloads whose name matches this regular expression");
  cmd->add_flag("--quick", o->quick, "Shorter and fewer samples");
  cmd->add_flag("--list", o->list, "List the workloads instead of running them");
  cmd->add_flag("--json", o->json, "One JSON object per line");
  cmd->add_flag("--machine", o->machine, "Measure this machine's FMA peak and bandwidths instead");
  add_threads(cmd, o->threads);
  cmd->add_option("--repeats", o->repeats, "Samples per workload")->check(kPositiveInt)->capture_default_str();
  cmd->add_option("--latency", o->latency,
                  "Time single calls for this many seconds and report their median and p99 instead")
      ->check(kNonNegativeNumber);
  cmd->add_option("--data", o->data_dir, "MNIST folder for train_mnist_epoch")->capture_default_str();
  cmd->add_flag("!--no-warmup", o->warmup,
                "No untimed call before timing (for workloads whose one call lasts seconds and warms up itself)");
  cmd->add_option("--cold-call", o->cold_call,
                  "A first call lasting at least this many seconds is the one sample, not an untimed warm-up")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  // `ember bench llm`: llama-bench's prompt-processing and generation rates of a GGUF model.
  auto llm = std::make_shared<LlmBenchOptions>();
  CLI::App* llm_cmd =
      cmd->add_subcommand("llm", "Prompt processing and generation tokens/s of a Llama GGUF file (pp, tg)");
  llm_cmd->add_option("--model", llm->model, "A Llama-family GGUF file")->capture_default_str();
  llm_cmd->add_option("--pp", llm->prompt_tokens, "Prompt tokens")->check(kPositiveCount)->capture_default_str();
  llm_cmd->add_option("--tg", llm->gen_tokens, "Generated tokens")->check(kPositiveCount)->capture_default_str();
  llm_cmd->add_option("--repeats", llm->repeats, "Runs of each (the median is reported)")
      ->check(kPositiveInt)
      ->capture_default_str();
  llm_cmd->add_option("--batch", llm->batch, "Sequences generating together (Llama::decode); tokens/s counts them all")
      ->check(kPositiveCount)
      ->capture_default_str();
  llm_cmd->add_flag("--json", llm->json, "One JSON object");
  add_threads(llm_cmd, llm->threads);
  cmd->require_subcommand(0, 1);
  commands.add(llm_cmd, [llm] { return run_llm_bench(*llm); });  // before `bench`, which is parsed too
  commands.add(cmd, [o] { return run_bench(*o); });
}

}  // namespace ember::cli

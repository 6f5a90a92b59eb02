// What the commands share: how each registers itself, the option checks, wall time, and the
// printing of what a run reports (the --profile table, the --compile statistics, the --ddp report).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ember/compile.h"
#include "ember/dist.h"
#include "ember/models/language_model.h"
#include "ember/profiler.h"
#include "ember/train/registry.h"

namespace ember::cli {

// What main needs of the command that ran: its body, and the flags its error handling reads.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// The commands and the flags the training commands share.
struct Commands {
  std::vector<Command> list;
  bool detect_anomaly = false;  // --detect-anomaly of the command that ran
  bool ddp = false;             // its --ddp: a rank of a data-parallel job (an error ends the job at once)
  void add(CLI::App* app, std::function<int()> run) { list.push_back({app, std::move(run)}); }
  // A training command's body, under autograd's anomaly mode with --detect-anomaly (which a
  // compiled step cannot honour: an error).
  int run_training(const std::string& op, bool compile, bool ddp, const std::function<int()>& body);
};

// Each file's commands.
void add_info_command(CLI::App& app, Commands& commands);
void add_train_mnist_command(CLI::App& train, Commands& commands);
void add_train_text_commands(CLI::App& train, Commands& commands);  // gpt, ssm
void add_diffusion_commands(CLI::App& train, CLI::App& sample, Commands& commands);
void add_generate_command(CLI::App& app, Commands& commands);
void add_chat_command(CLI::App& app, Commands& commands);
void add_serve_command(CLI::App& app, Commands& commands);
void add_eval_commands(CLI::App& app, Commands& commands);
void add_embed_command(CLI::App& app, Commands& commands);
void add_quantize_command(CLI::App& app, Commands& commands);
void add_nas_command(CLI::App& app, Commands& commands);
void add_onnx_commands(CLI::App& app, Commands& commands);
void add_bench_command(CLI::App& app, Commands& commands);
void add_roofline_command(CLI::App& app, Commands& commands);

// --- option checks ---------------------------------------------------------------------------------

// A whole number in [min, max], with a short message otherwise (CLI11's PositiveNumber names its
// range up to the largest double, some 300 digits, and a number too large for an int field is
// only "Could not convert").
CLI::Validator count_in(long long min, long long max);
CLI::Validator count_at_least(long long min);
// A finite number in [min, max] (`what` says which in the message). CLI11's Range and
// PositiveNumber let NaN through (NaN fails no comparison), and a NaN or infinite learning rate,
// probability or duration would train or sample garbage, or loop, without a word.
CLI::Validator finite_number(double min, double max, const std::string& what);
extern const CLI::Validator kPositiveCount;  // an int64_t field
extern const CLI::Validator kNonNegativeCount;
extern const CLI::Validator kPositiveInt;  // an int field
extern const CLI::Validator kThreadCount;  // 0: all cores; set_num_threads takes up to 4096
extern const CLI::Validator kFiniteNumber;
extern const CLI::Validator kNonNegativeNumber;
extern const CLI::Validator kPositiveNumber;
extern const CLI::Validator kFraction;

// --threads (and --json) as every command has them.
void add_threads(CLI::App* command, int& threads);
// The sampler's options: --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n
// and --seed.
void add_sampling_options(CLI::App* command, models::SamplingOptions& sampling);
// Sets the thread count when the option was given (0: all cores).
void use_threads(int threads);
// --detect-anomaly of a training command.
void add_detect_anomaly(CLI::App* command, Commands& commands);

// --amp: "bf16" -> bfloat16, "f16" -> float16, "none" -> no autocast.
std::optional<DType> amp_option(const std::string& value);

// --device: "cpu", "cuda" (cuda:0) or "cuda:N"; an ember::Error when that device is not usable.
Device device_option(const std::string& value);

// What `ember eval mnist` and the diffusion sampler's --classifier accept.
inline const train::LoadOptions kMnistClassifier{.kinds = {"mnist_mlp", "mnist_cnn"},
                                                 .expected = "an MNIST checkpoint from `ember train mnist`"};

// --- time and printing ------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
inline double milliseconds_since(Clock::time_point start) { return 1000 * seconds_since(start); }

// A progress bar of `width` characters, `done` of `total` filled.
std::string progress_bar(int64_t done, int64_t total, int width = 24);

// --profile: the run's totals, then the 15 ops that took the most time with their share of this
// machine's roofline, and how to plot the trace written to trace_path.
void print_profile(const profiler::Profiler& profile, const std::string& trace_path, std::ostream& out);

// --compile: a compiled training step's traces (compiles), replays and arena (the last plan's
// temporaries, in bytes) as fields of the --json line, or as one line of text.
void add_compile_stats(nlohmann::json& result, const CompileStats& stats);
void print_compile_stats(const CompileStats& stats);

// --ddp: the all-reduce times summed over the steps, the ranks and the ZeRO-1 shard, as JSON fields
// or as text.
void add_ddp_report(nlohmann::json& result, const dist::DdpStats& totals, const dist::ProcessGroup& group,
                    const dist::DistributedDataParallel& ddp, const dist::ZeroRedundancyOptimizer* sharded);
void print_ddp_report(const dist::DdpStats& totals, const dist::ProcessGroup& group,
                      const dist::ZeroRedundancyOptimizer* sharded);

// A double as JSON, NaN as null.
nlohmann::json json_number(double value);

}  // namespace ember::cli

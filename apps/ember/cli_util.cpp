#include "cli_util.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "ember/autograd.h"
#include "ember/cuda.h"
#include "ember/threads.h"

namespace ember::cli {

CLI::Validator count_in(long long min, long long max) {
  const bool open = max == std::numeric_limits<long long>::max();
  const std::string range =
      open ? "of at least " + std::to_string(min) : "from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        try {
          size_t used = 0;
          const long long n = std::stoll(value, &used);
          if (used == value.size() && n >= min && n <= max) return "";
        } catch (const std::exception&) {
        }
        return "must be a whole number " + range + ", got " + value;
      },
      open ? "INT >= " + std::to_string(min) : "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

CLI::Validator count_at_least(long long min) { return count_in(min, std::numeric_limits<long long>::max()); }

CLI::Validator finite_number(double min, double max, const std::string& what) {
  return CLI::Validator(
      [min, max, what](std::string& value) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(value, &used);
          if (used == value.size() && std::isfinite(x) && x >= min && x <= max) return "";
        } catch (const std::exception&) {
        }
        return "must be " + what + ", got " + value;
      },
      "NUMBER: " + what);
}

namespace {
constexpr double kHuge = std::numeric_limits<double>::max();
}  // namespace

const CLI::Validator kPositiveCount = count_at_least(1);
const CLI::Validator kNonNegativeCount = count_at_least(0);
const CLI::Validator kPositiveInt = count_in(1, std::numeric_limits<int>::max());
const CLI::Validator kThreadCount = count_in(0, 4096);
const CLI::Validator kFiniteNumber = finite_number(-kHuge, kHuge, "a finite number");
const CLI::Validator kNonNegativeNumber = finite_number(0, kHuge, "a finite number >= 0");
const CLI::Validator kPositiveNumber = finite_number(std::numeric_limits<double>::min(), kHuge, "a finite number > 0");
const CLI::Validator kFraction = finite_number(0, 1, "a number from 0 to 1");

void add_threads(CLI::App* command, int& threads) {
  command->add_option("--threads", threads, "Threads (default: all cores)")->check(kThreadCount);
}

void add_sampling_options(CLI::App* cmd, models::SamplingOptions& sampling) {
  cmd->add_option("--temperature", sampling.temperature, "Sampling temperature (0: greedy)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-k", sampling.top_k, "Sample among the k most likely (0: all)")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  cmd->add_option("--top-p", sampling.top_p, "Nucleus sampling: the most likely tokens summing to p")
      ->check(finite_number(std::numeric_limits<double>::min(), 1, "a number in (0, 1]"))
      ->capture_default_str();
  cmd->add_option("--min-p", sampling.min_p, "Drop tokens less likely than min-p times the most likely one")
      ->check(finite_number(0, 1, "a number in [0, 1]"))
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", sampling.repetition_penalty,
                  "Penalize the tokens of the last --repeat-last-n (1: off)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", sampling.penalty_last_n, "Tokens the repeat penalty looks back over")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  cmd->add_option("--seed", sampling.seed, "Seed of the sampler")->capture_default_str();
}

void use_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

void add_detect_anomaly(CLI::App* command, Commands& commands) {
  command->add_flag("--detect-anomaly", commands.detect_anomaly,
                    "Check every op's output and gradient for NaN and Inf, and stop at the first with an error naming "
                    "the op (slower; not with --compile, whose replays skip the checks)");
}

int Commands::run_training(const std::string& op, bool compile, bool data_parallel, const std::function<int()>& body) {
  ddp = data_parallel;
  std::optional<autograd::DetectAnomalyGuard> anomaly;
  if (detect_anomaly) {
    EMBER_CHECK(!compile, "[", op,
                "] --detect-anomaly checks ops as they run eagerly; it cannot be combined with --compile");
    anomaly.emplace();
  }
  return body();
}

std::optional<DType> amp_option(const std::string& value) {
  if (value == "bf16") return kBFloat16;
  if (value == "f16") return kFloat16;
  return std::nullopt;  // "none": CLI11 checks the choices
}

Device device_option(const std::string& value) {
  if (value == "cpu") return kCPU;
  int index = 0;
  if (value != "cuda") {
    const bool numbered = value.starts_with("cuda:") && value.size() > 5 &&
                          value.find_first_not_of("0123456789", 5) == std::string::npos && value.size() < 10;
    EMBER_CHECK(numbered, "[--device] expected cpu, cuda or cuda:N, got \"", value, "\"");
    index = std::stoi(value.substr(5));
  }
  EMBER_CHECK(index < cuda::device_count(), "[--device] ", value, " is not available: ", cuda::status());
  return Device{DeviceType::kCUDA, index};
}

std::string progress_bar(int64_t done, int64_t total, int width) {
  const int filled = total > 0 ? static_cast<int>(width * std::min(done, total) / total) : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  return bar;
}

void print_profile(const profiler::Profiler& profile, const std::string& trace_path, std::ostream& out) {
  // "% roof" needs this machine's peaks: measured once (about two seconds), then cached.
  const profiler::Roof roof = profiler::cached_roof();
  out << "\n"
      << profile.summary().to_string() << "\n"
      << profile.table(profiler::SortBy::kTotalTime, 15, &roof) << "\n"
      << "trace written to " << trace_path << " (open it in https://ui.perfetto.dev); plot the ops with\n"
      << "  ember roofline --from-trace " << trace_path << " --svg roofline.svg\n";
}

void add_compile_stats(nlohmann::json& result, const CompileStats& stats) {
  result["compiles"] = stats.compiles;
  result["replays"] = stats.replays;
  result["arena_bytes"] = stats.arena_bytes;
  result["last_trace_seconds"] = stats.trace_seconds;
  result["last_pass_seconds"] = stats.pass_seconds;
}

void print_compile_stats(const CompileStats& stats) {
  std::printf(
      "compiled step: %d trace%s, %lld replays, plan of %d steps (%d fused groups), arena %.2f MB; the last trace "
      "%.1f ms, its passes %.1f ms\n",
      stats.compiles, stats.compiles == 1 ? "" : "s", static_cast<long long>(stats.replays), stats.steps,
      stats.fused_groups, static_cast<double>(stats.arena_bytes) / 1e6, stats.trace_seconds * 1e3,
      stats.pass_seconds * 1e3);
}

void add_ddp_report(nlohmann::json& result, const dist::DdpStats& totals, const dist::ProcessGroup& group,
                    const dist::DistributedDataParallel& ddp, const dist::ZeroRedundancyOptimizer* sharded) {
  result["ranks"] = group.world_size();
  result["backend"] = dist::backend_name(group.backend());
  result["zero"] = sharded != nullptr;
  result["buckets"] = ddp.buckets().size();
  result["communication_seconds"] = totals.communication_seconds;
  result["hidden_communication_seconds"] = totals.hidden_seconds;
  result["exposed_communication_seconds"] = totals.exposed_seconds;
  if (sharded) result["optimizer_state_bytes_per_rank"] = sharded->local_state_bytes();
}

void print_ddp_report(const dist::DdpStats& totals, const dist::ProcessGroup& group,
                      const dist::ZeroRedundancyOptimizer* sharded) {
  const double seconds = totals.communication_seconds;
  std::printf(
      "all-reduce: %.2fs on the communication thread, %.0f%% of it while backward ran; backward's end "
      "waited %.2fs\n",
      seconds, seconds > 0 ? 100 * totals.hidden_seconds / seconds : 0.0, totals.exposed_seconds);
  if (sharded) {
    std::printf("optimizer state held by rank %d: %.2f MB (ZeRO-1 shards it over the %d ranks)\n", group.rank(),
                static_cast<double>(sharded->local_state_bytes()) / 1e6, group.world_size());
  }
}

nlohmann::json json_number(double value) { return std::isnan(value) ? nlohmann::json() : nlohmann::json(value); }

}  // namespace ember::cli

#include "cli_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ember::cli {

StateDict with_prefix(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  for (const auto& [key, value] : dict) out.emplace(prefix + key, value);
  return out;
}

double warmup_cosine_lr(int64_t step, double lr, int64_t warmup, int64_t steps) {
  const double min_lr = lr / 10;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  const double span = static_cast<double>(std::max<int64_t>(steps - warmup, 1));
  const double ratio = std::min(1.0, static_cast<double>(step - warmup) / span);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

std::optional<DType> amp_option(const std::string& value, const char* command) {
  if (value == "bf16") return kBFloat16;
  if (value == "f16") return kFloat16;
  EMBER_CHECK(value == "none" || value.empty(), "[", command, "] --amp must be bf16, f16 or none, got \"", value, "\"");
  return std::nullopt;
}

StateDict strip_prefix(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  for (const auto& [key, value] : dict) {
    if (key.rfind(prefix, 0) == 0) out.emplace(key.substr(prefix.size()), value);
  }
  return out;
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
}

void print_compile_stats(const CompileStats& stats) {
  std::printf("compiled step: %d trace%s, %lld replays, plan of %d steps (%d fused groups), arena %.2f MB\n",
              stats.compiles, stats.compiles == 1 ? "" : "s", static_cast<long long>(stats.replays), stats.steps,
              stats.fused_groups, static_cast<double>(stats.arena_bytes) / 1e6);
}

void DdpReport::add(const dist::DdpStats& step) {
  communication_seconds += step.communication_seconds;
  hidden_seconds += step.hidden_seconds;
  exposed_seconds += step.exposed_seconds;
}

void DdpReport::write(nlohmann::json& result, const dist::ProcessGroup& group, const dist::DistributedDataParallel& ddp,
                      const dist::ZeroRedundancyOptimizer* sharded) const {
  result["ranks"] = group.world_size();
  result["backend"] = dist::backend_name(group.backend());
  result["zero"] = sharded != nullptr;
  result["buckets"] = ddp.buckets().size();
  result["communication_seconds"] = communication_seconds;
  result["hidden_communication_seconds"] = hidden_seconds;
  result["exposed_communication_seconds"] = exposed_seconds;
  if (sharded) result["optimizer_state_bytes_per_rank"] = sharded->local_state_bytes();
}

void DdpReport::print(const dist::ProcessGroup& group, const dist::ZeroRedundancyOptimizer* sharded) const {
  std::printf(
      "all-reduce: %.2fs on the communication thread, %.0f%% of it while backward ran; backward's end "
      "waited %.2fs\n",
      communication_seconds, communication_seconds > 0 ? 100 * hidden_seconds / communication_seconds : 0.0,
      exposed_seconds);
  if (sharded) {
    std::printf("optimizer state held by rank %d: %.2f MB (ZeRO-1 shards it over the %d ranks)\n", group.rank(),
                static_cast<double>(sharded->local_state_bytes()) / 1e6, group.world_size());
  }
}

}  // namespace ember::cli

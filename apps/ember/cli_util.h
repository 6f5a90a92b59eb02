// Helpers the training commands share: checkpoint key prefixes, wall time, the --profile report,
// the --compile statistics.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "ember/compile.h"
#include "ember/dist.h"
#include "ember/profiler.h"
#include "ember/state_dict.h"

namespace ember::cli {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A checkpoint holds several state dicts under prefixes ("model.", "optimizer.", ...).
StateDict with_prefix(const StateDict& dict, const std::string& prefix);
StateDict strip_prefix(const StateDict& dict, const std::string& prefix);

// nanoGPT's get_lr: linear warmup to lr over `warmup` steps, then cosine decay to lr / 10 at
// step `steps`.
double warmup_cosine_lr(int64_t step, double lr, int64_t warmup, int64_t steps);

// The GradScaler's state in a checkpoint of an --amp f16 run.
inline constexpr const char* kScalerPrefix = "grad_scaler.";

// --amp: "bf16" -> bfloat16, "f16" -> float16, "none" -> no autocast; anything else is an error
// naming the command.
std::optional<DType> amp_option(const std::string& value, const char* command);

// --profile: the run's totals, then the 15 ops that took the most time with their share of this
// machine's roofline, and how to plot the trace written to trace_path.
void print_profile(const profiler::Profiler& profile, const std::string& trace_path, std::ostream& out);

// --compile: a compiled training step's traces (compiles), replays and arena (the last plan's
// temporaries, in bytes) as fields of the --json line, or as one line of text.
void add_compile_stats(nlohmann::json& result, const CompileStats& stats);
void print_compile_stats(const CompileStats& stats);

// What a --ddp training run reports: its all-reduce times summed over the steps (DdpStats), the
// ranks and the ZeRO-1 shard, as JSON fields or as text.
struct DdpReport {
  double communication_seconds = 0;
  double hidden_seconds = 0;
  double exposed_seconds = 0;

  void add(const dist::DdpStats& step);
  void write(nlohmann::json& result, const dist::ProcessGroup& group, const dist::DistributedDataParallel& ddp,
             const dist::ZeroRedundancyOptimizer* sharded) const;
  void print(const dist::ProcessGroup& group, const dist::ZeroRedundancyOptimizer* sharded) const;
};

}  // namespace ember::cli

// Helpers the training commands share: checkpoint key prefixes, wall time, the --profile report.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

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

// --profile: the run's totals, then the 15 ops that took the most time with their share of this
// machine's roofline, and how to plot the trace written to trace_path.
void print_profile(const profiler::Profiler& profile, const std::string& trace_path, std::ostream& out);

}  // namespace ember::cli

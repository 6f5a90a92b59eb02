#include "cli_util.h"

namespace ember::cli {

StateDict with_prefix(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  for (const auto& [key, value] : dict) out.emplace(prefix + key, value);
  return out;
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

}  // namespace ember::cli

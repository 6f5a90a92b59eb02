// This machine's peaks, measured once and kept in a small JSON file (see cached_peaks() in
// ember/profiler.h), so the profile table and `ember roofline` don't spend two seconds measuring
// on every run. Entries are keyed by CPU model and thread count; a file that cannot be read or
// written is not an error (the peaks are then measured and used without caching).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>

#include "base/atomic_file.h"
#include "ember/error.h"
#include "ember/info.h"
#include "ember/peaks.h"
#include "ember/profiler.h"

namespace ember::profiler {
namespace {

constexpr int kCacheVersion = 1;

nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("version", 0) != kCacheVersion || !j.contains("entries") || !j["entries"].is_array()) {
    return nlohmann::json::object();  // missing, corrupt or from another version: measure again
  }
  return j;
}

// Written atomically (base/atomic_file.h), so a reader never sees half a file.
void write_cache(const std::string& path, const nlohmann::json& j) {
  std::error_code error;
  const std::filesystem::path file(path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), error);
  const std::string text = j.dump(2) + "\n";
  try {
    ember::detail::AtomicFile out(path, "cached_peaks");
    out.write(text.data(), text.size());
    out.commit();
  } catch (const Error&) {
    // not cached: the peaks are measured again next time
  }
}

nlohmann::json to_json(const MachinePeaks& p) {
  return {{"cpu", p.cpu},
          {"threads", p.threads},
          {"fma_gflops_f32", p.fma_gflops_f32},
          {"fma_gflops_f64", p.fma_gflops_f64},
          {"dram_gbps", p.dram_gbps},
          {"l2_gbps", p.l2_gbps}};
}

}  // namespace

std::string peaks_cache_path() {
  if (const char* path = std::getenv("EMBER_PEAKS_CACHE"); path != nullptr && *path != '\0') return path;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/ember/peaks.json";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/ember/peaks.json";
  }
  return "";
}

MachinePeaks cached_peaks(bool refresh, int threads) {
  EMBER_CHECK(threads >= 0, "[cached_peaks] threads must be >= 0, got ", threads);
  if (threads == 0) threads = get_num_threads();
  const std::string path = peaks_cache_path();
  const std::string cpu = cpu_model();
  nlohmann::json cache = path.empty() ? nlohmann::json::object() : read_cache(path);
  if (!cache.contains("entries")) cache = {{"version", kCacheVersion}, {"entries", nlohmann::json::array()}};
  nlohmann::json& entries = cache["entries"];
  MachinePeaks previous;  // zeros unless this machine has an entry
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (!it->is_object() || it->value("cpu", "") != cpu || it->value("threads", 0) != threads) continue;
    previous.fma_gflops_f32 = it->value("fma_gflops_f32", 0.0);
    previous.fma_gflops_f64 = it->value("fma_gflops_f64", 0.0);
    previous.dram_gbps = it->value("dram_gbps", 0.0);
    previous.l2_gbps = it->value("l2_gbps", 0.0);
    if (!refresh && previous.fma_gflops_f32 > 0 && previous.dram_gbps > 0) {
      previous.cpu = cpu;
      previous.threads = threads;
      return previous;
    }
    entries.erase(it);  // refreshed (or unusable): measured again below
    break;
  }
  MachinePeaks measured = measure_peaks(threads);
  measured.cpu = cpu;  // the key, exactly as looked up
  // A peak is the most the machine can do, and a busy machine only lowers a measurement: a refresh
  // keeps the best of the cached and the new number (delete the file to start over).
  measured.fma_gflops_f32 = std::max(measured.fma_gflops_f32, previous.fma_gflops_f32);
  measured.fma_gflops_f64 = std::max(measured.fma_gflops_f64, previous.fma_gflops_f64);
  measured.dram_gbps = std::max(measured.dram_gbps, previous.dram_gbps);
  measured.l2_gbps = std::max(measured.l2_gbps, previous.l2_gbps);
  entries.push_back(to_json(measured));
  if (!path.empty()) write_cache(path, cache);
  return measured;
}

Roof roof_from(const MachinePeaks& peaks) {
  return {peaks.fma_gflops_f32, peaks.fma_gflops_f64, peaks.dram_gbps, peaks.l2_gbps};
}

Roof cached_roof(bool refresh, int threads) { return roof_from(cached_peaks(refresh, threads)); }

}  // namespace ember::profiler

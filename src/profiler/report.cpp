// The profiler's outputs: the per-op table, the summary and the Chrome trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "base/atomic_file.h"
#include "ember/error.h"
#include "ember/profiler.h"

namespace ember::profiler {
namespace {

std::string format(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, value);
  return text;
}

// 1234 -> "1.23 us" style helpers for the summary.
std::string seconds_text(int64_t ns) {
  const double s = static_cast<double>(ns) * 1e-9;
  if (s >= 1) return format("%.2f s", s);
  if (s >= 1e-3) return format("%.1f ms", s * 1e3);
  return format("%.1f us", s * 1e6);
}

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return format("%.2f GB", bytes * 1e-9);
  if (bytes >= 1e6) return format("%.2f MB", bytes * 1e-6);
  if (bytes >= 1e3) return format("%.1f kB", bytes * 1e-3);
  return format("%.0f B", bytes);
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}
std::string pad_right(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string Summary::to_string() const {
  std::ostringstream out;
  out << "profile: " << seconds_text(wall_ns) << " wall, " << op_calls << " op calls (" << distinct_ops
      << " distinct ops) on " << threads << (threads == 1 ? " thread" : " threads") << "\n";
  out << "  time in ops " << seconds_text(op_ns) << ": forward " << seconds_text(phase_ns[0]) << ", backward "
      << seconds_text(phase_ns[1]) << ", optimizer " << seconds_text(phase_ns[2]) << "\n";
  out << "  " << format("%.3f", flops * 1e-9) << " GFLOP, " << bytes_text(bytes)
      << " moved (each op's cost counted once, at the outermost op with a cost rule)";
  if (op_ns > 0) {
    out << "; " << format("%.1f", flops / static_cast<double>(op_ns)) << " GFLOP/s over the time in ops";
  }
  out << "\n  peak memory in use " << bytes_text(static_cast<double>(peak_bytes_in_use)) << "\n";
  return out.str();
}

std::string Profiler::table(SortBy sort_by, int max_rows, const Roof* roof) const {
  const std::vector<OpStats> stats = op_stats(sort_by);
  int64_t self_total = 0;
  for (const OpStats& s : stats) self_total += s.self_ns;

  // The dtype each op mostly ran in picks the FMA peak for its roof (f64 ops against the f64 peak).
  std::vector<DType> dtypes(stats.size(), kFloat32);
  {
    std::unordered_map<std::string_view, size_t> index;
    for (size_t i = 0; i < stats.size(); ++i) index.emplace(stats[i].name, i);
    std::vector<bool> seen(stats.size(), false);
    for (const Event& e : events()) {
      if (e.kind != EventKind::kOp || e.inputs.empty()) continue;
      const size_t i = index.at(e.name);
      if (!seen[i]) {
        dtypes[i] = e.inputs.front().dtype;
        seen[i] = true;
      }
    }
  }

  const std::vector<std::string> header = {"op",     "calls",   "total ms", "self ms", "self %",
                                           "avg us", "GFLOP/s", "GB/s",     "FLOP/B",  "% roof"};
  std::vector<std::vector<std::string>> rows;
  const size_t count = max_rows > 0 ? std::min(stats.size(), static_cast<size_t>(max_rows)) : stats.size();
  for (size_t i = 0; i < count; ++i) {
    const OpStats& s = stats[i];
    std::vector<std::string> row;
    row.push_back(s.name.size() > 32 ? s.name.substr(0, 31) + "~" : s.name);
    row.push_back(std::to_string(s.calls));
    row.push_back(format("%.2f", static_cast<double>(s.total_ns) * 1e-6));
    row.push_back(format("%.2f", static_cast<double>(s.self_ns) * 1e-6));
    row.push_back(self_total > 0
                      ? format("%.1f%%", 100.0 * static_cast<double>(s.self_ns) / static_cast<double>(self_total))
                      : "-");
    row.push_back(format("%.1f", static_cast<double>(s.total_ns) * 1e-3 / static_cast<double>(s.calls)));
    if (s.has_cost) {
      row.push_back(format("%.2f", s.gflops_per_second()));
      row.push_back(format("%.2f", s.gbytes_per_second()));
      row.push_back(s.bytes > 0 ? format("%.2f", s.intensity()) : "-");
      if (roof != nullptr && s.total_ns > 0 && (s.flops > 0 || s.bytes > 0)) {
        // The roofline as a time bound: the op can't finish faster than its FLOPs at the FMA peak
        // or its bytes at DRAM bandwidth; the attained share is that bound over the time taken.
        const double seconds = static_cast<double>(s.total_ns) * 1e-9;
        const double bound = roofline_time_bound(*roof, s.flops, s.bytes, dtypes[i]);
        row.push_back(format("%.1f%%", 100.0 * bound / seconds));
      } else {
        row.push_back("-");
      }
    } else {
      row.insert(row.end(), {"-", "-", "-", "-"});
    }
    rows.push_back(std::move(row));
  }

  std::vector<size_t> widths(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    widths[c] = header[c].size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  std::ostringstream out;
  auto write_row = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      out << (c == 0 ? pad_right(row[c], widths[c]) : "  " + pad_left(row[c], widths[c]));
    }
    out << "\n";
  };
  write_row(header);
  out << std::string(std::accumulate(widths.begin(), widths.end(), size_t{0}) + 2 * (widths.size() - 1), '-') << "\n";
  for (const auto& row : rows) write_row(row);
  if (count < stats.size()) out << "(" << stats.size() - count << " more ops)\n";
  if (roof == nullptr) out << "(% roof needs the machine's peaks: table(sort_by, rows, &roof))\n";
  return out.str();
}

void Profiler::export_chrome_trace(const std::string& path) const {
  const std::vector<Event>& all = events();
  // Per thread by start time; at equal starts the enclosing event first (longer, then shallower),
  // so a viewer nests them as recorded.
  std::vector<int> depth(all.size(), 0);
  for (size_t i = 0; i < all.size(); ++i) depth[i] = all[i].parent >= 0 ? depth[all[i].parent] + 1 : 0;
  std::vector<size_t> order(all.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = all[a], &y = all[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    if (x.end_ns != y.end_ns) return x.end_ns > y.end_ns;
    return depth[a] < depth[b];
  });

  std::ostringstream file;
  constexpr int kPid = 1;
  auto micros = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  bool first = true;
  auto emit = [&](const nlohmann::json& j) {
    file << (first ? "\n" : ",\n") << j.dump();
    first = false;
  };
  file << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  emit({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", 0}, {"args", {{"name", "ember"}}}});
  int threads = 0;
  for (const Event& e : all) threads = std::max(threads, e.thread + 1);
  for (int t = 0; t < std::max(threads, 1); ++t) {
    emit({{"name", "thread_name"},
          {"ph", "M"},
          {"pid", kPid},
          {"tid", t},
          {"args", {{"name", t == 0 ? std::string("main") : "thread " + std::to_string(t)}}}});
  }
  for (size_t i : order) {
    const Event& e = all[i];
    nlohmann::json args = {{"phase", phase_name(e.phase)}};
    if (e.kind == EventKind::kOp) {
      nlohmann::json shapes = nlohmann::json::array(), dtypes = nlohmann::json::array();
      for (const TensorInfo& t : e.inputs) {
        shapes.push_back(t.shape);
        dtypes.push_back(dtype_name(t.dtype));
      }
      args["shapes"] = std::move(shapes);
      args["dtypes"] = std::move(dtypes);
      if (!e.inputs.empty()) {
        const Device d = e.inputs.front().device;
        args["device"] = d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
      }
      if (e.has_cost) {
        args["flops"] = e.flops;
        args["bytes"] = e.bytes;
        args["counted"] = e.counted;
      }
      args["allocated_bytes"] = e.allocated_bytes;
    }
    const char* category = e.kind == EventKind::kOp ? "op" : e.kind == EventKind::kModule ? "module" : "range";
    emit({{"name", e.name},
          {"cat", category},
          {"ph", "X"},
          {"pid", kPid},
          {"tid", e.thread},
          {"ts", micros(e.start_ns)},
          {"dur", micros(e.end_ns - e.start_ns)},
          {"args", std::move(args)}});
  }
  // The memory timeline: one counter track per device; samples at the same microsecond keep the
  // last value, repeated values are skipped.
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> last;  // track -> (ts in us, bytes)
  const std::vector<MemorySample>& memory = memory_samples();
  for (size_t i = 0; i < memory.size(); ++i) {
    const MemorySample& m = memory[i];
    const std::string track = m.device.is_cpu() ? std::string("memory in use (cpu)")
                                                : "memory in use (cuda:" + std::to_string(m.device.index) + ")";
    const int64_t us = m.time_ns / 1000;
    bool later_same_us = false;
    for (size_t j = i + 1; j < memory.size() && memory[j].time_ns / 1000 == us && !later_same_us; ++j) {
      later_same_us = memory[j].device.type == m.device.type && memory[j].device.index == m.device.index;
    }
    if (later_same_us) continue;
    auto it = last.find(track);
    if (it != last.end() && it->second.second == m.bytes_in_use) continue;
    last[track] = {us, m.bytes_in_use};
    emit({{"name", track},
          {"ph", "C"},
          {"pid", kPid},
          {"tid", 0},
          {"ts", static_cast<double>(us)},
          {"args", {{"bytes", m.bytes_in_use}}}});
  }
  file << "\n]}\n";
  // Whole or not at all: a process killed while writing leaves the previous trace.
  const std::string text = file.str();
  ember::detail::AtomicFile out(path, "export_chrome_trace");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace ember::profiler

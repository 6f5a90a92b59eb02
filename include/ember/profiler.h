// ember's profiler: where the time goes, and how it compares with what the machine can do.
//
//   ember::profiler::Profiler prof;          // starts recording
//   train_step();
//   prof.stop();
//   std::cout << prof.table();               // per op: calls, time, GFLOP/s, GB/s, % of the roof
//   prof.export_chrome_trace("trace.json");  // open in https://ui.perfetto.dev
//
// While a Profiler runs, every op call records its name, input shapes and dtypes, device, thread,
// start and end, FLOPs and bytes moved (from the op's cost rule), bytes allocated, and the phase
// (forward, backward inside autograd, optimizer inside Optimizer::step). Each Module's forward and
// each profiler::Range is a named range around the ops it runs. With no profiler running an op
// pays one predictable branch. See docs/profiling.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/phase.h"

namespace ember::profiler {

struct MachinePeaks;  // ember/peaks.h: this machine's measured FMA throughput and bandwidths

// What the roofline needs: FMA peaks and streaming bandwidths (GFLOP/s, GB/s). roof_from() takes
// them from measured MachinePeaks; tests and what-ifs can give them by hand.
struct Roof {
  double f32_gflops = 0;
  double f64_gflops = 0;
  double dram_gbps = 0;
  double l2_gbps = 0;
};

// What a thread was doing when an op ran.
using ember::Phase;                        // ember/phase.h
std::string_view phase_name(Phase phase);  // "forward", "backward", "optimizer"

enum class EventKind : uint8_t {
  kOp,      // one call of an op (a backward node's work is an op named "<node>_backward")
  kModule,  // a Module's forward, named after its type ("Conv2d")
  kRange,   // a user's profiler::Range
};

struct TensorInfo {
  std::vector<int64_t> shape;
  DType dtype = kFloat32;
  Device device;
};

// One recorded interval. Times are nanoseconds since the profiler started.
struct Event {
  std::string name;
  EventKind kind = EventKind::kOp;
  Phase phase = Phase::kForward;
  int thread = 0;  // 0: the thread that started the profiler; others numbered as they first record
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int parent = -1;  // the enclosing event on the same thread (an index into events()), -1 at top level
  std::vector<TensorInfo> inputs;
  bool has_cost = false;  // the op has a cost rule; flops and bytes are its whole call's
  double flops = 0;
  double bytes = 0;
  // Counted in totals: has a cost and no enclosing op has one (the outermost costed op owns its
  // subtree, so nested ops are never counted twice).
  bool counted = false;
  int64_t allocated_bytes = 0;  // allocated by this thread during the event (caching allocator, size classes)
};

// Bytes in use in a device's caching allocator, after an allocation or a release.
struct MemorySample {
  int64_t time_ns = 0;
  Device device;
  int64_t bytes_in_use = 0;
};

// One op name, aggregated over its calls.
struct OpStats {
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;  // inclusive of nested ops
  int64_t self_ns = 0;   // minus everything nested inside
  double flops = 0;      // the calls' own costs (nested ones included: see Event::counted)
  double bytes = 0;
  bool has_cost = false;
  double gflops_per_second() const { return total_ns > 0 ? flops / static_cast<double>(total_ns) : 0.0; }
  double gbytes_per_second() const { return total_ns > 0 ? bytes / static_cast<double>(total_ns) : 0.0; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0.0; }  // FLOPs per byte
};

enum class SortBy { kTotalTime, kSelfTime, kCalls, kFlops, kName };

struct Summary {
  int64_t wall_ns = 0;  // from start() to stop()
  int threads = 0;
  int64_t op_calls = 0;
  int64_t distinct_ops = 0;
  double flops = 0;  // counted events only
  double bytes = 0;
  int64_t op_ns = 0;                // time in outermost ops
  int64_t phase_ns[3] = {0, 0, 0};  // time in outermost ops, per Phase
  int64_t peak_bytes_in_use = 0;    // highest memory sample (0 when nothing was allocated)
  std::string to_string() const;
};

// Records while running. One profiler runs at a time (a second start() throws ember::Error).
// The results are read after stop(); the destructor stops a running profiler.
class Profiler {
 public:
  Profiler();                         // starts recording
  explicit Profiler(bool start_now);  // Profiler(false): start() later
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void start();  // discards earlier results
  void stop();
  bool running() const;

  const std::vector<Event>& events() const;
  const std::vector<MemorySample>& memory_samples() const;
  std::vector<OpStats> op_stats(SortBy sort_by = SortBy::kTotalTime) const;
  Summary summary() const;

  // A text table of the ops: calls, total and self time, self %, average, GFLOP/s, GB/s,
  // arithmetic intensity and, given the machine's peaks, the attained share of the roofline
  // bound at that intensity (min(FMA peak, intensity x DRAM bandwidth)). max_rows 0: all.
  std::string table(SortBy sort_by = SortBy::kTotalTime, int max_rows = 0, const Roof* roof = nullptr) const;

  // Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev): complete events with shapes,
  // dtypes, FLOPs, bytes and phase in args, and a memory counter per device.
  void export_chrome_trace(const std::string& path) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

namespace detail {
// Set while a Profiler is running. Relaxed: a thread that sees the change a little late records
// (or skips) a few extra ops, which is harmless; the recording itself is synchronized.
extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
// Out-of-line recording, called only while enabled().
void begin_range(std::string_view name, bool is_module);
void end_event();
}  // namespace detail

// A named range whose name `make_name()` makes only while a profiler runs (a module's forward
// names itself: LazyRange range([&] { return name(); }, /*is_module=*/true)). Costs one relaxed
// load and a predictable branch when no profiler runs.
class LazyRange {
 public:
  template <class MakeName>
  explicit LazyRange(MakeName&& make_name, bool is_module = false) : active_(detail::enabled()) {
    if (active_) [[unlikely]]
      detail::begin_range(std::forward<MakeName>(make_name)(), is_module);
  }
  ~LazyRange() {
    if (active_) [[unlikely]]
      detail::end_event();
  }
  LazyRange(const LazyRange&) = delete;
  LazyRange& operator=(const LazyRange&) = delete;

 private:
  bool active_;
};

// A named range in the trace around whatever runs inside it, e.g. Range r("data loading").
// Costs one branch when no profiler runs.
class Range {
 public:
  explicit Range(std::string_view name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool active_;
};

struct Latency {
  double median_ns = 0;
  double min_ns = 0;
  double max_ns = 0;
  int iterations = 0;
};

// Runs fn `warmup` times, then times `iterations` calls one by one.
Latency measure_latency(const std::function<void()>& fn, int warmup = 3, int iterations = 20);

struct CostTotals {
  double flops = 0;
  double bytes = 0;
};
// Runs fn once under a profiler and sums the costs of its ops (see Event::counted). Throws
// ember::Error when another profiler is running.
CostTotals count_cost(const std::function<void()>& fn);
double count_flops(const std::function<void()>& fn);

// This machine's peaks, measured once and then read from a small JSON cache keyed by CPU model and
// thread count: $EMBER_PEAKS_CACHE if set, else $XDG_CACHE_HOME/ember/peaks.json, else
// ~/.cache/ember/peaks.json. refresh measures again and keeps, per number, the better of the
// cached and the new value (noise on a shared machine only lowers a peak; delete the file to start
// over). threads 0: ember's thread count.
MachinePeaks cached_peaks(bool refresh = false, int threads = 0);
std::string peaks_cache_path();
Roof roof_from(const MachinePeaks& peaks);
// roof_from(cached_peaks(refresh, threads)).
Roof cached_roof(bool refresh = false, int threads = 0);

// --- roofline -------------------------------------------------------------------------------------

struct RooflinePoint {
  std::string label;
  double intensity = 0;  // FLOPs per byte
  double gflops = 0;     // attained GFLOP/s
};

// One point per op with a cost (time and FLOPs summed over its calls).
std::vector<RooflinePoint> roofline_points(const std::vector<OpStats>& stats);

// The attainable GFLOP/s at an intensity (FLOPs per byte): min(FMA peak for the dtype, intensity x
// DRAM bandwidth).
double roofline_bound(const Roof& roof, double intensity, DType dtype = kFloat32);
// The least time, in seconds, for `flops` and `bytes`: max(flops / FMA peak, bytes / DRAM bandwidth).
// Its ratio to a measured time is the table's "% roof".
double roofline_time_bound(const Roof& roof, double flops, double bytes, DType dtype = kFloat32);

// A self-contained SVG: log-log axes, the f32 FMA roof, the DRAM and L2 bandwidth slopes, the
// ridge point and one labelled marker (<circle class="point">) per point.
std::string roofline_svg(const Roof& roof, const std::vector<RooflinePoint>& points, const std::string& title);

}  // namespace ember::profiler

// The profiler's named ranges, and how it records. While a Profiler runs it observes the dispatch
// seam (every primitive, composite and backward node: src/ops/dispatch.h) and the CPU allocator;
// modules and user code open named ranges with the hooks below. With no profiler running a range
// costs one relaxed atomic load and a predictable branch.
//
// Note [profiler cost counting]: an op event carries the cost of its own call (FLOPs and bytes).
// Only primitives have cost rules (src/ops/cost.h); a composite such as mean, or a backward node,
// is a range without a cost around the primitives it runs. Totals (summary(), count_flops(), the
// table's footer) count an event only when no enclosing op on the same thread has a cost.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "ember/device.h"
#include "ember/profiler.h"

namespace ember {
class Tensor;
}

namespace ember::profiler::detail {

// Set while a Profiler is running. Relaxed: a thread that sees the change a little late records
// (or skips) a few extra ops, which is harmless; the recording itself is synchronized.
extern std::atomic<bool> g_enabled;

inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// Out-of-line recording, called only while enabled().
void begin_range(std::string_view name, bool is_module);
void end_event();

// A named range (a module's forward, a user's Range) whose name is produced by `make_name()`
// only while profiling, e.g. `LazyRange range([&] { return name(); }, true);`.
class LazyRange {
 public:
  template <class MakeName>
  explicit LazyRange(MakeName&& make_name, bool is_module = false) : active_(enabled()) {
    if (active_) [[unlikely]]
      begin_range(std::forward<MakeName>(make_name)(), is_module);
  }
  ~LazyRange() {
    if (active_) [[unlikely]]
      end_event();
  }
  LazyRange(const LazyRange&) = delete;
  LazyRange& operator=(const LazyRange&) = delete;

 private:
  bool active_;
};

}  // namespace ember::profiler::detail

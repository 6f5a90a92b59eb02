// The profiler's hooks inside the library: what op front-ends, the autograd engine, optimizers,
// modules and the allocator call. With no profiler running each hook is one relaxed atomic load
// and a predictable branch; everything else (the clock, input shapes, cost rules, names) happens
// only while a Profiler is active, out of line in profiler.cpp.
//
// Note [profiler cost counting]: every op event carries the cost of its own call (FLOPs and bytes
// of everything it does, nested ops included). Totals (summary(), count_flops(), the table's
// footer) count an event only when no enclosing op on the same thread has a cost: the outermost
// op with a cost rule owns its subtree. An op without a cost rule (a composite such as mean, or a
// backward node whose work is done by ordinary ops) leaves its nested ops to be counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "ember/device.h"
#include "ember/profiler.h"
#include "ops/primitives.h"

namespace ember {
class Tensor;
}

namespace ember::profiler::detail {

// Set while a Profiler is running. Relaxed: a thread that sees the change a little late records
// (or skips) a few extra ops, which is harmless; the recording itself is synchronized.
extern std::atomic<bool> g_enabled;

inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// What the current thread is doing, recorded with each op. Set by the autograd engine and by
// Optimizer::step; forward otherwise.
Phase current_phase();
void set_current_phase(Phase phase);

// Out-of-line recording, called only while enabled().
void begin_op(const char* name, std::initializer_list<const Tensor*> inputs);
void begin_op(std::string_view name, std::string_view suffix, std::initializer_list<const Tensor*> inputs);
void begin_range(std::string_view name, bool is_module);
void set_cost(const OpCost& cost);  // on this thread's innermost open op
void end_event();
void record_memory(Device device, int64_t bytes_in_use, int64_t delta);

// One op call: `OpScope scope("conv2d", {&input, &weight});` at the top of a front-end, then
// `scope.cost([&] { return conv2d_cost(...); });` once the shapes are known.
class OpScope {
 public:
  OpScope(const char* name, std::initializer_list<const Tensor*> inputs) : active_(enabled()) {
    if (active_) [[unlikely]]
      begin_op(name, inputs);
  }
  // For names built at run time, `name + suffix` (a backward node's "conv2d" + "_backward", an
  // optimizer's "Adam" + ".step"): put together and kept only while profiling.
  OpScope(std::string_view name, std::string_view suffix, std::initializer_list<const Tensor*> inputs)
      : active_(enabled()) {
    if (active_) [[unlikely]]
      begin_op(name, suffix, inputs);
  }
  ~OpScope() {
    if (active_) [[unlikely]]
      end_event();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  bool active() const { return active_; }

  // Evaluates the cost rule `f() -> OpCost` only while profiling.
  template <class F>
  void cost(F&& f) {
    if (active_) [[unlikely]]
      set_cost(std::forward<F>(f)());
  }
  // The same for a rule that may have no answer (`f() -> std::optional<OpCost>`).
  template <class F>
  void cost_if_known(F&& f) {
    if (active_) [[unlikely]] {
      if (const auto known = std::forward<F>(f)()) set_cost(*known);
    }
  }

 private:
  bool active_;
};

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

// Sets the phase for a scope (autograd's backward, an optimizer's step) and restores the previous
// one, also when an exception passes. Not conditional: these scopes are per pass, not per op.
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase) : previous_(current_phase()) { set_current_phase(phase); }
  ~PhaseScope() { set_current_phase(previous_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase previous_;
};

}  // namespace ember::profiler::detail

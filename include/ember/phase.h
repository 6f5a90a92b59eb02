// What a training step is doing when an op runs. The autograd engine sets kBackward while it runs
// vjps and optimizers set kOptimizer during step(); the profiler and the tracer record it with
// every op call.
#pragma once

#include <cstdint>

namespace ember {

enum class Phase : uint8_t { kForward, kBackward, kOptimizer };

// The current thread's phase (kForward unless a PhaseGuard says otherwise).
Phase current_phase();

// Sets the phase for a scope and restores the previous one, also when an exception passes.
class PhaseGuard {
 public:
  explicit PhaseGuard(Phase phase) : previous_(current_phase()) { set(phase); }
  ~PhaseGuard() { set(previous_); }
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  static void set(Phase phase);
  Phase previous_;
};

}  // namespace ember

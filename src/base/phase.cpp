// The per-thread phase (forward, backward, optimizer) of ember/phase.h.
#include "ember/phase.h"

namespace ember {
namespace {
thread_local Phase t_phase = Phase::kForward;
}  // namespace

Phase current_phase() { return t_phase; }
void PhaseGuard::set(Phase phase) { t_phase = phase; }

}  // namespace ember

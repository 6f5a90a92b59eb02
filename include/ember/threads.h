// The number of threads CPU kernels use: set_num_threads, else the environment variable
// EMBER_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this process may run on (its affinity
// mask). ember runs its own thread pool (no OpenMP), whose threads hand work out in small tasks,
// so a thread the OS deschedules on a busy machine holds up at most one task.
#pragma once

namespace ember {

int get_num_threads();
// Throws ember::Error unless 1 <= num_threads <= 4096.
void set_num_threads(int num_threads);
// Where get_num_threads() comes from: "set_num_threads", "EMBER_NUM_THREADS", "OMP_NUM_THREADS"
// or "the CPUs this process may use".
const char* num_threads_source();

}  // namespace ember

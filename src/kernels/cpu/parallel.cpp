// The thread pool behind parallel_for (kernels/cpu/parallel.h) and the thread count of
// ember/threads.h.
//
// Note [thread pool]: why not OpenMP. A `#pragma omp parallel` region splits the work into fixed
// shares and ends at a barrier that every thread of the team must reach. On a machine where
// another process takes a core, the OS deschedules one of ember's threads for a whole time slice
// (several ms), and the others spin at the barrier, on the very core the late thread could have
// run on: `a * b` on 1M floats went from 0.13 ms to 8 ms. Here instead:
// - Work is a job of `count` independent tasks. Threads claim task indices one at a time from one
//   atomic word, the calling thread first. A thread that never wakes up claims nothing and holds
//   nothing up: the caller runs every task itself and returns.
// - The caller waits only for tasks that were claimed and have not finished. It spins briefly
//   (a task usually ends within microseconds), then sleeps, which frees its core for the late
//   thread (the OS moves a runnable thread to an idle core at once).
// - Between jobs a worker spins a little while for the next one (a training step launches
//   hundreds of small jobs back to back), then sleeps on a futex (std::atomic::wait). It does not
//   burn a core that another process wants.
//
// The job word. `state` packs the job's epoch (high 32 bits) with the next unclaimed index (low
// 32 bits). A worker reads the word, then the job's fields (fn, context, count, how many workers
// may join), then claims an index with a compare-exchange that expects the word it read. Before
// the caller of the next job rewrites the fields, it closes the word (index all ones); after, it
// publishes the new epoch. So a compare-exchange succeeds only on the word of a job that is open
// and whose fields were the ones read. A worker that wakes up late sees a finished job (next >=
// count), a closed word or a later epoch, and claims nothing; it never touches `done`.
#include "kernels/cpu/parallel.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

#include "ember/error.h"
#include "ember/threads.h"

namespace ember {
namespace {

// --- the thread count --------------------------------------------------------------------------

// The CPUs this process may run on (its affinity mask, which taskset and container cpusets
// narrow), or the hardware's count where there is no such mask.
int available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
#endif
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? static_cast<int>(hardware) : 1;
}

// A positive thread count from the environment variable `name`, or 0 when it is not set. OpenMP's
// OMP_NUM_THREADS may be a list ("4,2"): its first entry counts.
int threads_from_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  const bool list = *end == ',' && std::string(name) == "OMP_NUM_THREADS";
  EMBER_CHECK(end != value && (*end == '\0' || list) && n >= 1 && n <= 4096, "[threads] ", name, "=", value,
              " is not a thread count (a whole number from 1 to 4096)");
  return static_cast<int>(n);
}

struct DefaultThreads {
  int count;
  const char* source;
};

DefaultThreads default_threads() {
  if (const int n = threads_from_env("EMBER_NUM_THREADS")) return {n, "EMBER_NUM_THREADS"};
  if (const int n = threads_from_env("OMP_NUM_THREADS")) return {n, "OMP_NUM_THREADS"};
  return {available_cpus(), "the CPUs this process may use"};
}

std::atomic<int> g_num_threads{0};  // 0: not set, use the default

const DefaultThreads& defaults() {
  static const DefaultThreads d = default_threads();
  return d;
}

}  // namespace

int get_num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : defaults().count;
}

const char* num_threads_source() {
  return g_num_threads.load(std::memory_order_relaxed) > 0 ? "set_num_threads" : defaults().source;
}

void set_num_threads(int num_threads) {
  EMBER_CHECK(num_threads >= 1 && num_threads <= 4096, "[set_num_threads] expected 1 to 4096 threads, got ",
              num_threads);
  g_num_threads.store(num_threads, std::memory_order_relaxed);
}

namespace cpu {

int num_threads() { return get_num_threads(); }

namespace {

// --- waiting -----------------------------------------------------------------------------------

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

using Clock = std::chrono::steady_clock;

// How long a caller spins for its job's last tasks before it sleeps, and a worker for the next
// job. Longer spins (200 us and 1 ms) were no faster on a quiet machine (a + b and relu on 1M
// floats, 6 interleaved rounds), and an idle worker that spins longer keeps more of a core that
// another process may want.
constexpr auto kJoinSpin = std::chrono::microseconds(50);
constexpr auto kIdleSpin = std::chrono::microseconds(200);

// Spins until ready() or `limit` has passed; true if ready.
template <class Ready>
bool spin_until(const Ready& ready, Clock::duration limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return ready();
  }
}

// --- the pool ----------------------------------------------------------------------------------

constexpr int kIndexBits = 32;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
inline uint32_t epoch_of(uint64_t state) { return static_cast<uint32_t>(state >> kIndexBits); }
inline int64_t index_of(uint64_t state) { return static_cast<int64_t>(state & kIndexMask); }

// True on a thread while it runs a task: a parallel_for inside runs on that thread alone.
thread_local bool t_in_task = false;

class Pool {
 public:
  static Pool& get() {
    // Never destroyed: workers may still be asleep in it while the process exits.
    static Pool* pool = new Pool();
    return *pool;
  }

  // Runs the job on up to `threads` threads; false (nothing run) if this thread cannot use the
  // pool now: it is inside a task, or another thread's job holds the pool.
  bool run(int64_t count, int threads, TaskFn fn, const void* context) {
    if (t_in_task) return false;
    std::unique_lock<std::mutex> lock(owner_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    ensure_workers(threads - 1);

    // Close the last job's word before its fields change: a worker that still holds that word
    // (from a compare-exchange that failed after the job's last claim) could otherwise claim an
    // index with it, reading the new job's fields before the new job is out.
    state_.store((uint64_t{epoch_} << kIndexBits) | kIndexMask, std::memory_order_seq_cst);
    fn_.store(fn, std::memory_order_release);
    context_.store(context, std::memory_order_release);
    count_.store(count, std::memory_order_release);
    joiners_.store(threads - 1, std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t epoch = ++epoch_;
    state_.store(uint64_t{epoch} << kIndexBits, std::memory_order_seq_cst);  // publishes the fields
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      wake_.fetch_add(1, std::memory_order_seq_cst);
      wake_.notify_all();
    }

    // The caller's share: claim until none are left (fetch_add may run past count; harmless).
    t_in_task = true;
    for (;;) {
      const int64_t t = index_of(state_.fetch_add(1, std::memory_order_acq_rel));
      if (t >= count) break;
      fn(context, t);
      done_.fetch_add(1, std::memory_order_release);
    }
    t_in_task = false;

    // Wait for tasks other threads claimed: spin, then sleep so a late thread can have this core.
    const auto finished = [&] { return done_.load(std::memory_order_acquire) == static_cast<uint32_t>(count); };
    if (!spin_until(finished, kJoinSpin)) {
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      for (uint32_t d = done_.load(std::memory_order_seq_cst); d != static_cast<uint32_t>(count);
           d = done_.load(std::memory_order_seq_cst)) {
        done_.wait(d, std::memory_order_seq_cst);
      }
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    return true;
  }

 private:
  Pool() = default;

  // Called by the owner only.
  void ensure_workers(int wanted) {
    while (workers_ < wanted) {
      // The worker starts from the epoch before the job about to be published, so it joins that
      // job even if it starts running only after the job is out (run_team needs it to).
      const int id = workers_++;
      std::thread([this, id, epoch = epoch_] { worker(id, epoch); }).detach();
    }
  }

  // Tries to claim and run one task of the job whose word was `seen`; false if there is none.
  bool try_one(uint64_t& seen, int id) {
    // Acquire: a field already rewritten for a later job orders its closing store before the
    // compare-exchange below, which then fails.
    const TaskFn fn = fn_.load(std::memory_order_acquire);
    const void* context = context_.load(std::memory_order_acquire);
    const int64_t count = count_.load(std::memory_order_acquire);
    const int joiners = joiners_.load(std::memory_order_acquire);
    if (id >= joiners || index_of(seen) >= count) return false;
    if (!state_.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return true;  // `seen` now holds the current word: read the fields again and retry
    }
    t_in_task = true;
    fn(context, index_of(seen));
    t_in_task = false;
    seen += 1;
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<uint32_t>(count) &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      done_.notify_one();
    }
    return true;
  }

  void worker(int id, uint32_t last_epoch) {
    for (;;) {
      // Wait for a job this worker has not seen yet: spin a while, then sleep.
      const auto new_job = [&] { return epoch_of(state_.load(std::memory_order_acquire)) != last_epoch; };
      if (!spin_until(new_job, kIdleSpin)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        for (;;) {
          const uint32_t ticket = wake_.load(std::memory_order_seq_cst);
          if (epoch_of(state_.load(std::memory_order_seq_cst)) != last_epoch) break;
          wake_.wait(ticket, std::memory_order_seq_cst);
        }
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      uint64_t seen = state_.load(std::memory_order_acquire);
      last_epoch = epoch_of(seen);
      while (try_one(seen, id) && epoch_of(seen) == last_epoch) {
      }
    }
  }

  std::mutex owner_;  // held by the thread whose job is running
  uint32_t epoch_ = 0;
  std::atomic<uint64_t> state_{0};
  std::atomic<TaskFn> fn_{nullptr};
  std::atomic<const void*> context_{nullptr};
  std::atomic<int64_t> count_{0};
  std::atomic<int> joiners_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<uint32_t> wake_{0};
  std::atomic<int> sleepers_{0};
  int workers_ = 0;  // started (detached) worker threads
};

}  // namespace

void run_tasks(int64_t count, int threads, TaskFn fn, const void* context) {
  if (count <= 0) return;
  EMBER_CHECK(count <= static_cast<int64_t>(kIndexMask / 2), "[parallel] too many tasks: ", count);
  threads = static_cast<int>(std::min<int64_t>(threads, count));
  if (threads > 1 && Pool::get().run(count, threads, fn, context)) return;
  const bool nested = t_in_task;
  t_in_task = true;
  for (int64_t t = 0; t < count; ++t) fn(context, t);
  t_in_task = nested;
}

void run_team(int threads, TaskFn fn, const void* context) {
  if (threads <= 1) {
    fn(context, 0);
    return;
  }
  // Each member waits for the others inside fn, so no thread can take two members' tasks: the
  // caller and threads - 1 workers each take one.
  EMBER_CHECK(!t_in_task, "[parallel] a team of ", threads, " threads cannot start inside a parallel task");
  EMBER_CHECK(Pool::get().run(threads, threads, fn, context), "[parallel] a team of ", threads,
              " threads cannot start while another thread's parallel work holds the pool");
}

}  // namespace cpu
}  // namespace ember

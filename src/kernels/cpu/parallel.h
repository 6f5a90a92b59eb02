// ember's thread pool and parallel_for (Note [thread pool] in parallel.cpp).
//
// Work is cut into tasks that threads claim one at a time, the calling thread among them, so a
// thread the OS has descheduled holds up at most the one task it is running, and a waiting thread
// sleeps instead of spinning on the core the late one needs. Tasks must not throw: a kernel that
// can meet bad input (an index out of range) records it and the caller throws after the loop.
// A parallel_for inside a task, or while another thread's parallel_for holds the pool, runs on
// its own thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember::cpu {

// The thread count of ember/threads.h.
int num_threads();

// Elements below which elementwise kernels stay on one thread.
inline constexpr int64_t kElementwiseGrain = 32768;

// Tasks per thread that parallel_for cuts a range into when it is large enough: more tasks
// balance better when a thread falls behind, fewer cost less to hand out.
inline constexpr int64_t kTasksPerThread = 4;

// Called on the pool's threads: noexcept, since an exception could not reach the caller.
using TaskFn = void (*)(const void* context, int64_t task) noexcept;

// Calls fn(context, t) once for every t in [0, count), on up to `threads` threads including the
// calling one, and returns when all have finished. The tasks are independent: no task may wait
// for another (run_team is for that).
void run_tasks(int64_t count, int threads, TaskFn fn, const void* context);

// run_tasks with a callable: f(t).
template <class F>
void parallel_tasks(int64_t count, int threads, const F& f) {
  if (count <= 0) return;
  if (threads <= 1 || count == 1) {
    for (int64_t t = 0; t < count; ++t) f(t);
    return;
  }
  run_tasks(
      count, threads, [](const void* context, int64_t t) noexcept { (*static_cast<const F*>(context))(t); }, &f);
}

// Calls f(thread, threads) on exactly `threads` distinct threads that run at the same time, for
// work that synchronizes inside (the peak measurements). Throws if the pool cannot provide them
// (called from inside a task, or while another thread holds the pool).
void run_team(int threads, TaskFn fn, const void* context);

// f(begin, end) over sub-ranges of [begin, end) on up to `threads` threads: ranges smaller than
// `grain` run on the calling thread; larger ones are cut into at most kTasksPerThread tasks per
// thread of at least `grain` elements each. The cuts depend only on the range, the grain and the
// thread count, never on which thread is free, so results never depend on the timing.
template <class F>
void parallel_for_threads(int threads, int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  threads = static_cast<int>(std::min<int64_t>(threads, n / grain));
  if (threads <= 1) {
    f(begin, end);
    return;
  }
  const int64_t tasks_wanted = std::min(n / grain, threads * kTasksPerThread);
  const int64_t chunk = (n + tasks_wanted - 1) / tasks_wanted;
  const int64_t tasks = (n + chunk - 1) / chunk;
  parallel_tasks(tasks, threads, [&](int64_t t) {
    const int64_t b = begin + t * chunk;
    f(b, std::min(end, b + chunk));
  });
}

// parallel_for_threads on num_threads() threads.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  parallel_for_threads(num_threads(), begin, end, grain, f);
}

}  // namespace ember::cpu

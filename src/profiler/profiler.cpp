// The profiler's recording: per-thread buffers of raw events, filled while a session runs by its
// observer of the dispatch seam (OpRecorder, below), the CPU allocator's memory observer and the
// ranges of ember/profiler.h (LazyRange, Range), and turned into the public Event list when it stops.
//
// Each thread records into its own buffer, registered with the running session the first time the
// thread records. A buffer has its own mutex, taken by its thread for each record and by stop()
// to read it, so stopping while another thread is inside an op is safe (uncontended, the lock
// costs a few nanoseconds of the profiler-on overhead; nothing when off).
#include "ember/profiler.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "core/allocator.h"
#include "ember/error.h"
#include "ember/tensor.h"
#include "ops/cost.h"
#include "ops/dispatch.h"

// Note [profiler cost counting]: an op event carries the cost of its own call (FLOPs and bytes).
// Only primitives have cost rules (src/ops/cost.h); a composite such as mean, or a backward node,
// is a range without a cost around the primitives it runs. Totals (summary(), count_flops(), the
// table's footer) count an event only when no enclosing op on the same thread has a cost.

namespace ember::profiler {
namespace detail {

std::atomic<bool> g_enabled{false};

namespace {

using Clock = std::chrono::steady_clock;

struct RawEvent {
  const char* name;  // a literal or interned in the buffer
  int64_t start_ns;
  int64_t end_ns;
  double flops;
  double bytes;
  int64_t allocated_at_start;
  int64_t allocated_at_end;
  int32_t parent;
  uint32_t shapes_begin;  // words in ThreadBuffer::shapes: per input dtype, device, ndim, dims...
  uint32_t shapes_end;
  EventKind kind;
  Phase phase;
  bool has_cost;
  bool closed;
};

struct RawMemory {
  int64_t time_ns;
  Device device;
  int64_t bytes_in_use;
};

// std::string keys looked up by string_view without building a string.
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct ThreadBuffer {
  std::mutex mutex;
  Clock::time_point start;
  std::vector<RawEvent> events;
  std::vector<int32_t> open;  // indices of the events begun and not yet ended, innermost last
  std::vector<int64_t> shapes;
  std::vector<RawMemory> memory;
  int64_t allocated = 0;  // bytes this thread has allocated since it joined the session
  std::unordered_set<std::string, NameHash, std::equal_to<>> names;  // interned dynamic names
  std::string scratch;

  int64_t now() const { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(); }

  const char* intern(std::string_view name) {
    auto it = names.find(name);
    if (it == names.end()) it = names.emplace(name).first;
    return it->c_str();
  }

  RawEvent& push(const char* name, EventKind kind) {
    RawEvent e{};
    e.name = name;
    e.kind = kind;
    e.phase = current_phase();
    e.parent = open.empty() ? -1 : open.back();
    e.allocated_at_start = allocated;
    e.shapes_begin = e.shapes_end = static_cast<uint32_t>(shapes.size());
    open.push_back(static_cast<int32_t>(events.size()));
    events.push_back(e);
    return events.back();
  }
};

struct Session {
  uint64_t id = 0;
  Clock::time_point start;
  std::mutex mutex;  // guards buffers
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
};

std::mutex g_session_mutex;             // guards g_session
std::shared_ptr<Session> g_session;     // the running session, if any
std::atomic<uint64_t> g_session_id{0};  // its id (0: none)
uint64_t g_next_session_id = 1;

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local uint64_t t_buffer_session = 0;

// This thread's buffer in the running session, registering it on first use; null when none runs.
ThreadBuffer* thread_buffer() {
  const uint64_t id = g_session_id.load(std::memory_order_acquire);
  if (id != 0 && id == t_buffer_session) return t_buffer.get();
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (!g_session) return nullptr;
  auto buffer = std::make_shared<ThreadBuffer>();
  buffer->start = g_session->start;
  {
    std::lock_guard<std::mutex> session_lock(g_session->mutex);
    g_session->buffers.push_back(buffer);
  }
  t_buffer = std::move(buffer);
  t_buffer_session = g_session->id;
  return t_buffer.get();
}

void record_inputs(ThreadBuffer& b, RawEvent& e, std::span<const Tensor* const> inputs) {
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    const Device device = t->device();
    b.shapes.push_back(static_cast<int64_t>(t->dtype()));
    b.shapes.push_back(static_cast<int64_t>(device.type) | (static_cast<int64_t>(device.index) << 8));
    b.shapes.push_back(t->dim());
    for (int64_t size : t->shape()) b.shapes.push_back(size);
  }
  e.shapes_end = static_cast<uint32_t>(b.shapes.size());
}

void begin_op_named(ThreadBuffer& b, const char* name, std::span<const Tensor* const> inputs) {
  RawEvent& e = b.push(name, EventKind::kOp);
  record_inputs(b, e, inputs);
  e.start_ns = b.now();  // read last: the bookkeeping is the profiler's time, not the op's
}

void begin_op(const char* name, std::span<const Tensor* const> inputs) {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  begin_op_named(*b, name, inputs);
}

void begin_op(std::string_view name, std::string_view suffix, std::span<const Tensor* const> inputs) {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  b->scratch.assign(name);
  b->scratch.append(suffix);
  begin_op_named(*b, b->intern(b->scratch), inputs);
}

}  // namespace

void begin_range(std::string_view name, bool is_module) {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  RawEvent& e = b->push(b->intern(name), is_module ? EventKind::kModule : EventKind::kRange);
  e.start_ns = b->now();
}

namespace {

void set_cost(const OpCost& cost) {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->open.empty()) return;
  RawEvent& e = b->events[b->open.back()];
  e.has_cost = true;
  e.flops = cost.flops;
  e.bytes = cost.bytes;
}

}  // namespace

void end_event() {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  const int64_t end = b->now();
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->open.empty()) return;  // begun in an earlier session
  RawEvent& e = b->events[b->open.back()];
  b->open.pop_back();
  e.end_ns = end;
  e.allocated_at_end = b->allocated;
  e.closed = true;
}

namespace {

void record_memory(Device device, int64_t bytes_in_use, int64_t delta) {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  if (delta > 0) b->allocated += delta;
  b->memory.push_back({b->now(), device, bytes_in_use});
}

// The profiler's view of the dispatch seam: an event per primitive (with its cost rule's FLOPs and
// bytes), per composite op and per backward node ("<op>_backward"); views are not recorded.
class OpRecorder final : public dispatch::Observer {
 public:
  void begin(const dispatch::OpCall& call) override {
    switch (call.call_kind) {
      case dispatch::CallKind::kView:
        return;
      case dispatch::CallKind::kBackward:
        return begin_op(op_name(call.kind), "_backward", call.inputs);
      case dispatch::CallKind::kKernel:
      case dispatch::CallKind::kComposite:
        return begin_op(op_name(call.kind), call.inputs);
    }
  }
  void end(const dispatch::OpCall& call) override {
    if (call.call_kind == dispatch::CallKind::kView) return;
    if (call.kernel != nullptr && !call.failed) set_cost(op_cost(*call.kernel));
    end_event();
  }
  // A compiled graph's fused group: one event with the group's FLOPs and the bytes it moves.
  void begin_step(std::string_view name, const OpCost& cost) override {
    begin_op(name, "", {});
    set_cost(cost);
  }
  void end_step() override { end_event(); }
};

OpRecorder g_recorder;

}  // namespace

}  // namespace detail

// --- Profiler -------------------------------------------------------------------------------------

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

struct Profiler::State {
  std::shared_ptr<detail::Session> session;  // while running
  int64_t wall_ns = 0;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
};

namespace {

// Turns the session's raw buffers into events: names copied, shapes decoded, parents re-based to
// the merged list, events still open at stop() closed there, and `counted` decided.
void collect(detail::Session& session, int64_t stop_ns, std::vector<Event>& events, std::vector<MemorySample>& memory) {
  std::lock_guard<std::mutex> session_lock(session.mutex);
  for (size_t thread = 0; thread < session.buffers.size(); ++thread) {
    detail::ThreadBuffer& b = *session.buffers[thread];
    std::lock_guard<std::mutex> lock(b.mutex);
    const int offset = static_cast<int>(events.size());
    for (const detail::RawEvent& raw : b.events) {
      Event e;
      e.name = raw.name;
      e.kind = raw.kind;
      e.phase = raw.phase;
      e.thread = static_cast<int>(thread);
      e.start_ns = raw.start_ns;
      e.end_ns = raw.closed ? raw.end_ns : std::max(raw.start_ns, stop_ns);
      e.parent = raw.parent < 0 ? -1 : raw.parent + offset;
      e.has_cost = raw.has_cost;
      e.flops = raw.flops;
      e.bytes = raw.bytes;
      e.allocated_bytes = (raw.closed ? raw.allocated_at_end : b.allocated) - raw.allocated_at_start;
      for (uint32_t i = raw.shapes_begin; i < raw.shapes_end;) {
        TensorInfo info;
        info.dtype = static_cast<DType>(b.shapes[i]);
        info.device.type = static_cast<DeviceType>(b.shapes[i + 1] & 0xff);
        info.device.index = static_cast<int>(b.shapes[i + 1] >> 8);
        const int64_t ndim = b.shapes[i + 2];
        info.shape.assign(b.shapes.begin() + i + 3, b.shapes.begin() + i + 3 + ndim);
        i += 3 + static_cast<uint32_t>(ndim);
        e.inputs.push_back(std::move(info));
      }
      events.push_back(std::move(e));
    }
    for (const detail::RawMemory& m : b.memory) memory.push_back({m.time_ns, m.device, m.bytes_in_use});
  }
  // Note [profiler cost counting] (above): the outermost op with a cost counts.
  for (Event& e : events) {
    if (!e.has_cost || e.kind != EventKind::kOp) continue;
    bool owned = false;
    for (int p = e.parent; p >= 0 && !owned; p = events[p].parent) {
      owned = events[p].kind == EventKind::kOp && events[p].has_cost;
    }
    e.counted = !owned;
  }
  std::stable_sort(memory.begin(), memory.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.time_ns < b.time_ns; });
}

}  // namespace

Profiler::Profiler() : Profiler(true) {}

Profiler::Profiler(bool start_now) : state_(std::make_unique<State>()) {
  if (start_now) start();
}

Profiler::~Profiler() {
  if (running()) stop();
}

bool Profiler::running() const { return state_->session != nullptr; }

void Profiler::start() {
  EMBER_CHECK(!running(), "[profiler] start() called on a profiler that is already running");
  auto session = std::make_shared<detail::Session>();
  {
    std::lock_guard<std::mutex> lock(detail::g_session_mutex);
    EMBER_CHECK(!detail::g_session,
                "[profiler] another Profiler is already running; stop it first (one profiler "
                "records at a time)");
    session->id = detail::g_next_session_id++;
    session->start = detail::Clock::now();
    detail::g_session = session;
    detail::g_session_id.store(session->id, std::memory_order_release);
  }
  state_->events.clear();
  state_->memory.clear();
  state_->wall_ns = 0;
  state_->session = std::move(session);
  detail::thread_buffer();  // the starting thread is thread 0
  detail::g_enabled.store(true, std::memory_order_release);
  dispatch::add_observer(&detail::g_recorder);
  set_memory_observer(&detail::record_memory);
}

void Profiler::stop() {
  EMBER_CHECK(running(), "[profiler] stop() called on a profiler that is not running");
  set_memory_observer(nullptr);
  dispatch::remove_observer(&detail::g_recorder);
  detail::g_enabled.store(false, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(detail::g_session_mutex);
    detail::g_session.reset();
    detail::g_session_id.store(0, std::memory_order_release);
  }
  const int64_t stop_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(detail::Clock::now() - state_->session->start).count();
  state_->wall_ns = stop_ns;
  collect(*state_->session, stop_ns, state_->events, state_->memory);
  state_->session.reset();
}

namespace {
void check_stopped(bool running, const char* what) {
  EMBER_CHECK(!running, "[profiler] ", what, "() reads the results: call stop() first");
}
}  // namespace

const std::vector<Event>& Profiler::events() const {
  check_stopped(running(), "events");
  return state_->events;
}

const std::vector<MemorySample>& Profiler::memory_samples() const {
  check_stopped(running(), "memory_samples");
  return state_->memory;
}

std::vector<OpStats> Profiler::op_stats(SortBy sort_by) const {
  check_stopped(running(), "op_stats");
  const std::vector<Event>& events = state_->events;
  std::vector<int64_t> nested_ns(events.size(), 0);
  for (const Event& e : events) {
    if (e.parent >= 0) nested_ns[e.parent] += e.end_ns - e.start_ns;
  }
  std::vector<OpStats> stats;
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.kind != EventKind::kOp) continue;
    auto [it, inserted] = index.emplace(e.name, stats.size());
    if (inserted) {
      stats.emplace_back();
      stats.back().name = e.name;
    }
    OpStats& s = stats[it->second];
    const int64_t duration = e.end_ns - e.start_ns;
    ++s.calls;
    s.total_ns += duration;
    s.self_ns += std::max<int64_t>(0, duration - nested_ns[i]);
    s.flops += e.flops;
    s.bytes += e.bytes;
    s.has_cost = s.has_cost || e.has_cost;
  }
  auto key = [sort_by](const OpStats& s) -> double {
    switch (sort_by) {
      case SortBy::kTotalTime:
        return static_cast<double>(s.total_ns);
      case SortBy::kSelfTime:
        return static_cast<double>(s.self_ns);
      case SortBy::kCalls:
        return static_cast<double>(s.calls);
      case SortBy::kFlops:
        return s.flops;
      case SortBy::kName:
        return 0;
    }
    return 0;
  };
  std::stable_sort(stats.begin(), stats.end(), [&](const OpStats& a, const OpStats& b) {
    if (sort_by == SortBy::kName) return a.name < b.name;
    return key(a) > key(b);
  });
  return stats;
}

Summary Profiler::summary() const {
  check_stopped(running(), "summary");
  Summary s;
  s.wall_ns = state_->wall_ns;
  int max_thread = -1;
  std::unordered_set<std::string_view> names;
  const std::vector<Event>& events = state_->events;
  for (const Event& e : events) {
    max_thread = std::max(max_thread, e.thread);
    if (e.kind != EventKind::kOp) continue;
    ++s.op_calls;
    names.insert(e.name);
    if (e.counted) {
      s.flops += e.flops;
      s.bytes += e.bytes;
    }
    bool outermost = true;
    for (int p = e.parent; p >= 0 && outermost; p = events[p].parent) outermost = events[p].kind != EventKind::kOp;
    if (outermost) {
      s.op_ns += e.end_ns - e.start_ns;
      s.phase_ns[static_cast<int>(e.phase)] += e.end_ns - e.start_ns;
    }
  }
  s.threads = max_thread + 1;
  s.distinct_ops = static_cast<int64_t>(names.size());
  for (const MemorySample& m : state_->memory) s.peak_bytes_in_use = std::max(s.peak_bytes_in_use, m.bytes_in_use);
  return s;
}

// --- Range and helpers ------------------------------------------------------------------------------

Range::Range(std::string_view name) : active_(detail::enabled()) {
  if (active_) detail::begin_range(name, false);
}

Range::~Range() {
  if (active_) detail::end_event();
}

Latency measure_latency(const std::function<void()>& fn, int warmup, int iterations) {
  EMBER_CHECK(warmup >= 0 && iterations >= 1, "[measure_latency] needs warmup >= 0 and iterations >= 1, got ", warmup,
              " and ", iterations);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times(static_cast<size_t>(iterations));
  for (double& t : times) {
    const auto start = detail::Clock::now();
    fn();
    t = std::chrono::duration<double, std::nano>(detail::Clock::now() - start).count();
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  Latency latency;
  latency.median_ns = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  latency.min_ns = times.front();
  latency.max_ns = times.back();
  latency.iterations = iterations;
  return latency;
}

CostTotals count_cost(const std::function<void()>& fn) {
  Profiler profiler(false);
  profiler.start();
  fn();
  profiler.stop();
  const Summary s = profiler.summary();
  return {s.flops, s.bytes};
}

double count_flops(const std::function<void()>& fn) { return count_cost(fn).flops; }

}  // namespace ember::profiler

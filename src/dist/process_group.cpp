// The ProcessGroup: collectives queued to one communication thread that runs them, in order, on a
// CommBackend (MPI or Gloo), so that the caller (a DDP hook in the middle of backward) never blocks
// on the network. A Work completes when its collective has run; waiting on it is bounded by the
// group's timeout (Note [timeouts]).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "dist/backend.h"
#include "dist/store.h"
#include "ember/error.h"
#include "ember/profiler.h"
#include "ember/tensor.h"
#include "ops/collective.h"
#include "ops/dispatch.h"

namespace ember::dist {

const char* backend_name(Backend backend) { return backend == Backend::kMpi ? "mpi" : "gloo"; }

bool is_available(Backend backend) {
#ifdef EMBER_WITH_MPI
  if (backend == Backend::kMpi) return true;
#endif
#ifdef EMBER_WITH_GLOO
  if (backend == Backend::kGloo) return true;
#endif
  (void)backend;
  return false;
}

WorkHandle ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  return start(static_cast<int>(OpKind::kAllReduce), Tensor(), tensor, op, 0);
}

WorkHandle ProcessGroup::broadcast(const Tensor& tensor, int root) {
  EMBER_CHECK(root >= 0 && root < world_size_, "[dist] broadcast from rank ", root, " in a group of ", world_size_);
  return start(static_cast<int>(OpKind::kBroadcast), Tensor(), tensor, ReduceOp::kSum, root);
}

WorkHandle ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  EMBER_CHECK(output.defined() && input.defined() && output.numel() == input.numel() * world_size_,
              "[dist] all_gather needs an output of world_size (", world_size_, ") x ",
              input.defined() ? input.numel() : 0, " elements, got ", output.defined() ? output.numel() : 0);
  return start(static_cast<int>(OpKind::kAllGather), input, output, ReduceOp::kSum, 0);
}

WorkHandle ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  EMBER_CHECK(output.defined() && input.defined() && input.numel() == output.numel() * world_size_,
              "[dist] reduce_scatter needs an input of world_size (", world_size_, ") x ",
              output.defined() ? output.numel() : 0, " elements, got ", input.defined() ? input.numel() : 0);
  return start(static_cast<int>(OpKind::kReduceScatter), input, output, op, 0);
}

WorkHandle ProcessGroup::barrier() { return enqueue({.collective = Collective::kBarrier}); }

uint64_t ProcessGroup::sequence_number() const { return issued(); }

namespace {

using Clock = std::chrono::steady_clock;

const char* collective_name(int collective) {
  static const char* const kNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"};
  return kNames[collective];
}

void check_tensor(const Tensor& t, const char* collective, const char* role) {
  EMBER_CHECK(t.defined(), "[dist] ", collective, ": the ", role, " is an undefined tensor");
  EMBER_CHECK(t.device().is_cpu(), "[dist] ", collective, ": the ", role, " is on ", t.device(),
              "; only CPU tensors are supported");
  EMBER_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64 || t.dtype() == kInt64, "[dist] ", collective, ": the ",
              role, " is ", t.dtype(), "; supported: float32, float64, int64");
  EMBER_CHECK(t.is_contiguous(), "[dist] ", collective, ": the ", role, " must be contiguous");
}

// A collective's Work as its caller holds it: wait() runs collective_wait through the dispatch seam
// (so a tracer records it), the timings are the communication thread's. Holds the tensors until
// the collective is waited for.
class SeamWork final : public Work {
 public:
  SeamWork(CollectiveAttrs attrs, Tensor input, Tensor output, WorkHandle work)
      : attrs_(attrs), input_(std::move(input)), output_(std::move(output)), work_(std::move(work)) {}
  void wait() override {
    if (waited_) return;
    waited_ = true;
    // The input is an operand of the wait too: its memory is read until the collective is done.
    if (input_.defined()) {
      dispatch::run(OpKind::kCollectiveWait, attrs_, {&input_}, {&output_});
    } else {
      dispatch::run(OpKind::kCollectiveWait, attrs_, {}, {&output_});
    }
  }
  bool is_completed() const override { return work_->is_completed(); }
  double seconds() const override { return work_->seconds(); }
  Clock::time_point started() const override { return work_->started(); }

 private:
  CollectiveAttrs attrs_;
  Tensor input_, output_;
  WorkHandle work_;
  bool waited_ = false;
};

}  // namespace

WorkHandle ProcessGroup::start(int kind, const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  const OpKind op_kind = static_cast<OpKind>(kind);
  const char* name = op_name(op_kind);
  check_tensor(output, name, input.defined() ? "output" : "tensor");
  if (input.defined()) {
    check_tensor(input, name, "input");
    EMBER_CHECK(input.dtype() == output.dtype(), "[dist] ", name, ": the input is ", input.dtype(), " and the output ",
                output.dtype());
  }
  const CollectiveAttrs attrs{.group = id_, .reduce = static_cast<int64_t>(op), .root = root};
  if (input.defined()) {
    dispatch::run(op_kind, attrs, {&input}, {&output});
  } else {
    dispatch::run(op_kind, attrs, {}, {&output});
  }
  return std::make_shared<SeamWork>(attrs, input, output, started(output.data_ptr()));
}

namespace {

// Note [timeouts]
// A collective that does not complete within the group's timeout, or that fails in the library
// (Gloo reports a peer that closed its connection), makes wait() throw on every rank that reached
// it. To name the culprit, each such rank writes "stuck/<rank>" = the collective's sequence
// number to the store and gives the others a short grace period to do the same: a rank that
// answers with the same number is waiting too; one with another number is in another collective
// (the ranks issued different collectives); one that never answers died or hangs outside the
// collectives. The store lives on rank 0, so when rank 0 is the one gone, the store is too and the
// message says so. The communication thread may stay inside the library (MPI has no timeouts):
// the group is unusable afterwards and the caller should end the job (abort_job).
class GroupImpl;

class WorkImpl final : public Work {
 public:
  WorkImpl(GroupImpl& group, uint64_t seq, std::string description)
      : group_(group), seq_(seq), description_(std::move(description)) {}
  void wait() override;
  bool is_completed() const override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  double seconds() const override {
    std::lock_guard lock(mutex_);
    return seconds_;
  }
  Clock::time_point started() const override {
    std::lock_guard lock(mutex_);
    return started_;
  }
  void finish(std::exception_ptr error, Clock::time_point started, double seconds) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      started_ = started;
      seconds_ = seconds;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

  uint64_t seq() const { return seq_; }
  const std::string& description() const { return description_; }
  bool succeeded() const {
    std::lock_guard lock(mutex_);
    return done_ && !error_;
  }

 private:
  friend class GroupImpl;
  GroupImpl& group_;
  uint64_t seq_;
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  double seconds_ = 0;
  Clock::time_point started_{};
  std::exception_ptr error_;
};

// Divides count elements by `divisor` (kAvg is a sum, then this).
void divide(void* data, int64_t count, DType dtype, int divisor) {
  if (dtype == kFloat32) {
    float* values = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= static_cast<float>(divisor);
  } else if (dtype == kFloat64) {
    double* values = static_cast<double*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= divisor;
  } else {
    int64_t* values = static_cast<int64_t*>(data);
    for (int64_t i = 0; i < count; ++i) values[i] /= divisor;
  }
}

// The one concrete group: ProcessGroup's protected interface, and the communicator the collective
// primitives' kernels call (Note [collectives as primitives] in src/ops/collective.h).
class GroupImpl final : public ProcessGroup, public collective::Communicator {
 public:
  GroupImpl(int rank, int world_size, Backend backend, std::chrono::milliseconds timeout,
            std::unique_ptr<detail::CommBackend> comm, std::unique_ptr<detail::TcpStore> store)
      : ProcessGroup(rank, world_size, backend, timeout), comm_(std::move(comm)), store_(std::move(store)) {
    id_ = collective::register_communicator(this);
    thread_ = std::thread([this] { run(); });
  }

  ~GroupImpl() override {
    collective::unregister_communicator(id_);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (broken_.load()) {
      thread_.detach();  // it may be inside the library for good (Note [timeouts])
      // The thread still uses the library and the store's server may still answer its peers: both
      // stay (MPI_Finalize would wait for the stuck collective); the process is about to end.
      (void)comm_.release();
      (void)store_.release();
    } else {
      thread_.join();
    }
  }

  // Throws the error for the collective `work` (timed out when `cause` is empty).
  [[noreturn]] void fail(const WorkImpl& work, const std::string& cause) {
    broken_ = true;
    std::ostringstream message;
    message << "[dist] " << work.description() << " ";
    if (cause.empty()) {
      message << "did not complete within " << timeout().count() / 1000.0 << " s";
    } else {
      message << "failed (" << cause << ")";
    }
    message << " on rank " << rank() << " of " << world_size() << " (" << backend_name(backend()) << ")";
    message << diagnose(work.seq());
    throw Error(message.str());
  }

  // The collective running now, and since when (a time_point of 0 when idle).
  std::pair<std::shared_ptr<WorkImpl>, Clock::time_point> running() {
    std::lock_guard lock(mutex_);
    return {running_, running_since_};
  }

 protected:
  WorkHandle enqueue(Request request) override {
    const char* name = collective_name(static_cast<int>(request.collective));
    EMBER_CHECK(!broken_.load(), "[dist] the process group is unusable after an earlier collective failed");
    std::lock_guard lock(mutex_);
    const uint64_t seq = issued_++;
    std::ostringstream description;
    description << name << " #" << seq;
    if (request.collective != Collective::kBarrier) {
      description << " (" << request.dtype << ", " << request.count << " elements)";
    }
    auto work = std::make_shared<WorkImpl>(*this, seq, description.str());
    if (request.output != nullptr) {
      // Completed collectives on this buffer that went well are forgotten; a failed one stays until
      // waited for, so its error is not lost.
      std::deque<std::shared_ptr<WorkImpl>>& on_buffer = pending_[request.output];
      std::erase_if(on_buffer, [](const std::shared_ptr<WorkImpl>& w) { return w->succeeded(); });
      on_buffer.push_back(work);
    }
    queue_.push_back({work, request});
    cv_.notify_all();
    return work;
  }

  WorkHandle started(const void* data) override {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(data);
    return it == pending_.end() || it->second.empty() ? nullptr : it->second.back();
  }

  // --- collective::Communicator: the kernels of the collective primitives -----------------------

  void start(OpKind kind, const Operand& input, const Operand& output, const CollectiveAttrs& attrs) override {
    Request request{.collective = Collective::kAllReduce,
                    .output = output.data,
                    .input = input.data,
                    .count = input.numel(),
                    .output_count = output.numel(),
                    .dtype = output.dtype,
                    .op = static_cast<ReduceOp>(attrs.reduce),
                    .root = static_cast<int>(attrs.root)};
    if (kind == OpKind::kBroadcast) request.collective = Collective::kBroadcast;
    if (kind == OpKind::kAllGather) request.collective = Collective::kAllGather;
    if (kind == OpKind::kReduceScatter) request.collective = Collective::kReduceScatter;
    (void)enqueue(request);
  }

  void wait(const void* data) override {
    std::deque<std::shared_ptr<WorkImpl>> works;
    {
      std::lock_guard lock(mutex_);
      const auto it = pending_.find(data);
      if (it == pending_.end()) return;
      works.swap(it->second);
      pending_.erase(it);
    }
    for (const std::shared_ptr<WorkImpl>& work : works) work->wait();
  }

  uint64_t issued() const override {
    std::lock_guard lock(mutex_);
    return issued_;
  }

  double busy_seconds() const override {
    std::lock_guard lock(mutex_);
    return busy_seconds_;
  }

 private:
  void run() {
    for (;;) {
      Queued item;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        running_ = item.work;
        running_since_ = Clock::now();
      }
      std::exception_ptr error;
      const auto start = Clock::now();
      try {
        const profiler::Range range(item.work->description());  // its own track in a trace
        execute(item.request);
      } catch (...) {
        error = std::current_exception();
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      {
        std::lock_guard lock(mutex_);
        running_.reset();
        busy_seconds_ += seconds;
      }
      item.work->finish(error, start, seconds);
    }
  }

  void execute(const Request& r) {
    switch (r.collective) {
      case Collective::kAllReduce: {
        const ReduceOp op = r.op == ReduceOp::kAvg ? ReduceOp::kSum : r.op;
        comm_->all_reduce(r.output, r.count, r.dtype, op);
        if (r.op == ReduceOp::kAvg) divide(r.output, r.count, r.dtype, world_size());
        break;
      }
      case Collective::kBroadcast:
        comm_->broadcast(r.output, r.count, r.dtype, r.root);
        break;
      case Collective::kAllGather:
        comm_->all_gather(r.input, r.output, r.count, r.dtype);
        break;
      case Collective::kReduceScatter: {
        const ReduceOp op = r.op == ReduceOp::kAvg ? ReduceOp::kSum : r.op;
        comm_->reduce_scatter(r.input, r.output, r.output_count, r.dtype, op);
        if (r.op == ReduceOp::kAvg) divide(r.output, r.output_count, r.dtype, world_size());
        break;
      }
      case Collective::kBarrier:
        comm_->barrier();
        break;
    }
  }

  // Which ranks are stuck where (Note [timeouts]); a sentence starting with ": ", or "".
  std::string diagnose(uint64_t seq) {
    if (!store_ || world_size() == 1) return "";
    const std::lock_guard lock(diagnose_mutex_);  // the store's client is one connection
    const auto grace = std::min<std::chrono::milliseconds>(timeout(), std::chrono::seconds(5));
    std::vector<int64_t> answers(static_cast<size_t>(world_size()), -1);
    try {
      const std::string mine = std::to_string(seq);
      store_->set("stuck/" + std::to_string(rank()), std::vector<char>(mine.begin(), mine.end()));
      const auto deadline = Clock::now() + grace;
      for (;;) {
        bool all = true;
        for (int r = 0; r < world_size(); ++r) {
          const std::string key = "stuck/" + std::to_string(r);
          if (answers[static_cast<size_t>(r)] < 0 && store_->check({key})) {
            const std::vector<char> value = store_->get(key, grace);
            answers[static_cast<size_t>(r)] = std::stoll(std::string(value.begin(), value.end()));
          }
          all = all && answers[static_cast<size_t>(r)] >= 0;
        }
        if (all || Clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const Error&) {
      return rank() == 0 ? "" : ": rank 0 does not answer (it died or hangs; it also hosts the job's store)";
    }
    std::ostringstream out;
    const char* separator = ": ";
    for (int r = 0; r < world_size(); ++r) {
      const int64_t answer = answers[static_cast<size_t>(r)];
      if (answer == static_cast<int64_t>(seq)) continue;
      out << separator << "rank " << r;
      if (answer < 0) {
        out << " did not reach it (it died, hangs, or runs code without collectives)";
      } else {
        out << " is in collective #" << answer << " instead (the ranks issued different collectives)";
      }
      separator = "; ";
    }
    return out.str();
  }

  struct Queued {
    std::shared_ptr<WorkImpl> work;
    Request request;
  };

  std::unique_ptr<detail::CommBackend> comm_;
  std::unique_ptr<detail::TcpStore> store_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  // The collectives started on each output buffer and not yet waited for (by the wait primitive).
  std::unordered_map<const void*, std::deque<std::shared_ptr<WorkImpl>>> pending_;
  bool stopping_ = false;
  uint64_t issued_ = 0;
  double busy_seconds_ = 0;
  std::shared_ptr<WorkImpl> running_;
  Clock::time_point running_since_{};
  std::atomic<bool> broken_{false};
  std::mutex diagnose_mutex_;
};

void WorkImpl::wait() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return done_; })) break;
    lock.unlock();
    // The collective holding the queue (this one, or one issued before it) has run too long.
    const auto [running, since] = group_.running();
    if (running && Clock::now() - since > group_.timeout()) group_.fail(*running, "");
    lock.lock();
  }
  if (error_) {
    std::string cause = "unknown error";
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      cause = e.what();
    }
    lock.unlock();
    group_.fail(*this, cause);
  }
}

std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  EMBER_CHECK(*end == '\0' && parsed >= 0 && parsed <= 1'000'000, "[dist] ", name, "=", value,
              " is not a non-negative integer");
  return static_cast<int>(parsed);
}

std::string env_string(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string local_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  const Backend backend = options.backend.value_or(under_mpirun ? Backend::kMpi : Backend::kGloo);
  std::chrono::milliseconds timeout = options.timeout;
  if (const char* seconds = std::getenv("EMBER_DIST_TIMEOUT"); seconds != nullptr && *seconds != '\0') {
    char* end = nullptr;
    const double parsed = std::strtod(seconds, &end);
    EMBER_CHECK(*end == '\0' && parsed > 0, "[dist] EMBER_DIST_TIMEOUT=", seconds,
                " is not a positive number of seconds");
    timeout = std::chrono::milliseconds(static_cast<int64_t>(parsed * 1000));
  }
  EMBER_CHECK(timeout.count() > 0, "[dist] the timeout must be positive");
  EMBER_CHECK(is_available(backend), "[dist] ember was built without ", backend_name(backend), " (install ",
              backend == Backend::kMpi ? "libopenmpi-dev" : "libgloo-dev", " and rebuild)");

  int rank = 0;
  int world_size = 1;
  std::unique_ptr<detail::CommBackend> comm;
  std::unique_ptr<detail::TcpStore> store;
  if (backend == Backend::kMpi) {
    comm = detail::make_mpi_backend(rank, world_size);
    // The store (for diagnosing timeouts) on rank 0: its port and host reach the others by MPI.
    // Rank 0's address: EMBER_MASTER_ADDR, else loopback when every rank runs on this node (as
    // OpenMPI tells), else this host's name.
    const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    const bool one_node = local_size != nullptr && size != nullptr && std::string(local_size) == size;
    const std::string host = env_string("EMBER_MASTER_ADDR", one_node ? "127.0.0.1" : local_hostname().c_str());
    if (rank == 0) store = std::make_unique<detail::TcpStore>(host, 0, true, timeout);
    int64_t port = rank == 0 ? store->port() : 0;
    comm->broadcast(&port, 1, kInt64, 0);
    std::vector<int64_t> host_bytes(32, 0);  // 256 bytes, as int64 (the collectives' smallest type)
    std::memcpy(host_bytes.data(), host.data(), std::min<size_t>(host.size(), 255));
    comm->broadcast(host_bytes.data(), 32, kInt64, 0);
    if (rank != 0)
      store = std::make_unique<detail::TcpStore>(reinterpret_cast<const char*>(host_bytes.data()),
                                                 static_cast<int>(port), false, timeout);
  } else {
    const std::optional<int> env_rank = env_int("EMBER_RANK");
    const std::optional<int> env_world = env_int("EMBER_WORLD_SIZE");
    EMBER_CHECK(env_rank && env_world, "[dist] the gloo backend needs EMBER_RANK and EMBER_WORLD_SIZE (and ",
                "EMBER_MASTER_ADDR, EMBER_MASTER_PORT for rank 0's address), or launch with mpirun for MPI");
    rank = *env_rank;
    world_size = *env_world;
    EMBER_CHECK(world_size >= 1 && rank < world_size, "[dist] EMBER_RANK=", rank,
                " is not below EMBER_WORLD_SIZE=", world_size);
    const std::string host = env_string("EMBER_MASTER_ADDR", "127.0.0.1");
    const int port = env_int("EMBER_MASTER_PORT").value_or(29500);
    EMBER_CHECK(port < 65536 && (port > 0 || world_size == 1), "[dist] EMBER_MASTER_PORT=", port, " is not a TCP port",
                port == 0 ? " (0, any free port, is only for a one-rank job)" : "");
    store = std::make_unique<detail::TcpStore>(host, port, rank == 0, timeout);
    comm = detail::make_gloo_backend(rank, world_size, *store, timeout);
  }
  return std::make_shared<GroupImpl>(rank, world_size, backend, timeout, std::move(comm), std::move(store));
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace ember::dist

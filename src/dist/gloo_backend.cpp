// The Gloo backend (backend.h): a full mesh of TCP pairs, found through the job's TcpStore, and
// Gloo's collectives on host buffers. Gloo reports failures with its own exception types; each is
// turned into an ember::Error naming the collective (process_group.cpp adds the rank and sequence).
#include "dist/backend.h"
#include "ember/error.h"

#ifdef EMBER_WITH_GLOO

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace ember::dist::detail {
namespace {

// Gloo's rendezvous goes through the job's store, under "gloo/".
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::chrono::milliseconds timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override { store_.set("gloo/" + key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get("gloo/" + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back("gloo/" + key);
    EMBER_CHECK(store_.wait(prefixed, timeout), "[dist] gloo rendezvous: not every rank published its address within ",
                static_cast<double>(timeout.count()) / 1000, " s (did every rank start?)");
  }

 private:
  TcpStore& store_;
  std::chrono::milliseconds timeout_;
};

// Gloo writes to its sockets with writev, which raises SIGPIPE once a peer is gone; its default action
// would end the process before Gloo reports the error. Ignores it, unless the program handles it.
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
      current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Runs a Gloo call, turning its exceptions into ember::Errors naming `what`.
template <class F>
void run_gloo(const char* what, F&& f) {
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {  // gloo::IoException, gloo::EnforceNotMet and the rest
    EMBER_FAIL("[dist] gloo ", what, " failed: ", error.what());
  }
}

// Calls f(TypeTag<T>{}) for the dtypes the collectives carry.
template <class F>
void dispatch_collective_dtype(DType dtype, const char* what, F&& f) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t>) {
      f(tag);
    } else {
      EMBER_FAIL("[dist] gloo ", what, " supports float32, float64 and int64, got ", dtype_name(dtype));
    }
  });
}

class GlooBackend final : public CommBackend {
 public:
  GlooBackend(int rank, int world_size, TcpStore& store, std::chrono::milliseconds timeout)
      : rank_(rank), world_size_(world_size), store_(store, timeout) {
    ignore_sigpipe();
    gloo::transport::tcp::attr attr;
    attr.hostname = local_hostname();
    run_gloo("rendezvous", [&] {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
      context->setTimeout(timeout);
      context->connectFullMesh(store_, device);
      context_ = std::move(context);
    });
  }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return;
    dispatch_collective_dtype(dtype, "all_reduce", [&](auto tag) {
      using T = typename decltype(tag)::type;
      gloo::AllreduceOptions options(context_);
      options.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
      options.setReduceFunction(reduce_function<T>(op));
      options.setTag(next_tag_++);
      run_gloo("all_reduce", [&] { gloo::allreduce(options); });
    });
  }

  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    if (count == 0) return;
    dispatch_collective_dtype(dtype, "broadcast", [&](auto tag) {
      using T = typename decltype(tag)::type;
      gloo::BroadcastOptions options(context_);
      options.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
      options.setRoot(root);
      options.setTag(next_tag_++);
      run_gloo("broadcast", [&] { gloo::broadcast(options); });
    });
  }

  void all_gather(const void* input, void* output, int64_t count, DType dtype) override {
    if (count == 0) return;
    dispatch_collective_dtype(dtype, "all_gather", [&](auto tag) {
      using T = typename decltype(tag)::type;
      gloo::AllgatherOptions options(context_);
      options.setInput(const_cast<T*>(static_cast<const T*>(input)), static_cast<size_t>(count));  // only read
      options.setOutput(static_cast<T*>(output), static_cast<size_t>(count) * world_size_);
      options.setTag(next_tag_++);
      run_gloo("all_gather", [&] { gloo::allgather(options); });
    });
  }

  // All-reduces the whole input and keeps chunk `rank`: world_size times the traffic of a ring
  // reduce-scatter, but one simple, well-tested algorithm.
  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return;
    const size_t chunk_bytes = static_cast<size_t>(count * dtype_size(dtype));
    scratch_.resize(chunk_bytes * world_size_);
    std::memcpy(scratch_.data(), input, scratch_.size());
    all_reduce(scratch_.data(), count * world_size_, dtype, op);
    std::memcpy(output, scratch_.data() + chunk_bytes * rank_, chunk_bytes);
  }

  void barrier() override {
    gloo::BarrierOptions options(context_);
    options.setTag(next_tag_++);
    run_gloo("barrier", [&] { gloo::barrier(options); });
  }

 private:
  // The address the peers reach this rank at: loopback for a job on one machine (its master is
  // local), else this machine's name.
  static std::string local_hostname() {
    const char* master = std::getenv("EMBER_MASTER_ADDR");
    const std::string master_addr = master != nullptr ? master : "";
    if (master_addr.empty() || master_addr == "localhost" || master_addr == "127.0.0.1") return "127.0.0.1";
    char name[256] = {};
    EMBER_CHECK(gethostname(name, sizeof(name) - 1) == 0, "[dist] gethostname failed: ", std::strerror(errno));
    return name;
  }

  template <class T>
  static gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
    using Reduce = void (*)(void*, const void*, const void*, size_t);
    EMBER_CHECK(op != ReduceOp::kAvg, "[dist] gloo all_reduce got kAvg: the process group divides a sum");
    return op == ReduceOp::kMax ? static_cast<Reduce>(&gloo::max<T>) : static_cast<Reduce>(&gloo::sum<T>);
  }

  int rank_;
  int world_size_;
  GlooStore store_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;  // every rank issues the same collectives, so their tags agree
  std::vector<char> scratch_;
};

}  // namespace

std::unique_ptr<CommBackend> make_gloo_backend(int rank, int world_size, TcpStore& store,
                                               std::chrono::milliseconds timeout) {
  return std::make_unique<GlooBackend>(rank, world_size, store, timeout);
}

}  // namespace ember::dist::detail

#else  // EMBER_WITH_GLOO

namespace ember::dist::detail {

std::unique_ptr<CommBackend> make_gloo_backend(int, int, TcpStore&, std::chrono::milliseconds) {
  EMBER_FAIL("[dist] ember was built without Gloo (install libgloo-dev and rebuild)");
}

}  // namespace ember::dist::detail

#endif  // EMBER_WITH_GLOO

// ember::dist: data-parallel training across processes, over the communication libraries clusters
// already run: OpenMPI (launched by mpirun) or Gloo over TCP (launched with EMBER_RANK,
// EMBER_WORLD_SIZE, EMBER_MASTER_ADDR and EMBER_MASTER_PORT, as torchrun sets its variables).
//
//   auto group = ember::dist::init_process_group();               // mpirun -np 2 ./train
//   auto ddp = ember::dist::DistributedDataParallel(model, group); // broadcasts rank 0's weights
//   for (...) { loss = ...(*model)(x)...; loss.backward(); optimizer.step(); }
//
// Every collective runs on the group's one communication thread, in the order it was issued, and
// returns a Work handle at once; wait() blocks until it is done, or throws an ember::Error naming
// the collective and the ranks that did not reach it once the group's timeout has passed
// (docs/distributed.md: Note [timeouts]).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/dtype.h"
#include "ember/handle.h"
#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::nn {
class Module;
}

namespace ember::dist {

enum class Backend { kMpi, kGloo };
enum class ReduceOp { kSum, kAvg, kMax };

const char* backend_name(Backend backend);  // "mpi", "gloo"
// Whether this build has the backend (MPI and Gloo are optional at build time).
bool is_available(Backend backend);

// One collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is done; rethrows its error, or throws once the group's timeout has
  // passed, naming the collective (and its sequence number) and the ranks that did not reach it.
  virtual void wait() = 0;
  virtual bool is_completed() const = 0;
  // Seconds the collective ran on the communication thread (0 until it completes), and when it
  // started there.
  virtual double seconds() const = 0;
  virtual std::chrono::steady_clock::time_point started() const = 0;
};
using WorkHandle = std::shared_ptr<Work>;

struct InitOptions {
  // Unset: MPI when launched by mpirun (OMPI_COMM_WORLD_RANK or PMI_RANK is set), else Gloo.
  std::optional<Backend> backend;
  // How long any collective may wait for the other ranks (EMBER_DIST_TIMEOUT, in seconds,
  // overrides the default).
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  Backend backend() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The collectives, on contiguous CPU tensors of float32, float64 or int64, in place where one
  // tensor is given. Every rank must issue the same collectives in the same order with the same
  // shapes. The tensors must stay alive and unchanged until the Work completes.
  //
  // Reduces `tensor` over the ranks; every rank gets the result.
  WorkHandle all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Copies root's `tensor` into every rank's.
  WorkHandle broadcast(const Tensor& tensor, int root = 0);
  // output (world_size * input.numel() elements) = every rank's input, by rank.
  WorkHandle all_gather(const Tensor& output, const Tensor& input);
  // output = the reduction over ranks of chunk `rank` of input (world_size * output.numel()).
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  WorkHandle barrier();

  // Seconds the communication thread has spent running collectives so far.
  virtual double busy_seconds() const = 0;

  // Collectives issued so far (their sequence numbers name them in errors).
  uint64_t sequence_number() const;

 protected:
  ProcessGroup(int rank, int world_size, Backend backend, std::chrono::milliseconds timeout)
      : rank_(rank), world_size_(world_size), backend_(backend), timeout_(timeout) {}

  // all_reduce, broadcast, all_gather and reduce_scatter are primitives (Note [collectives as
  // primitives] in src/ops/collective.h): they run through the dispatch seam, whose kernel starts
  // them on the group (the communicator the group registers under id_), and the Work they return
  // waits through the seam too, so a traced step records both. The barrier has no buffer: it is
  // queued directly.
  enum class Collective { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };
  struct Request {
    Collective collective;
    void* output = nullptr;  // in place: also the input
    const void* input = nullptr;
    int64_t count = 0;         // the input's elements
    int64_t output_count = 0;  // the output's elements
    DType dtype = kFloat32;
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
  };
  virtual WorkHandle enqueue(Request request) = 0;
  virtual uint64_t issued() const = 0;
  // The work of the last collective started on the buffer at `data`.
  virtual WorkHandle started(const void* data) = 0;
  int64_t id_ = 0;

 private:
  // Checks the tensors, runs the collective primitive `kind` (an OpKind) through the seam and
  // returns the Work whose wait() runs collective_wait.
  WorkHandle start(int kind, const Tensor& input, const Tensor& output, ReduceOp op, int root);

  int rank_;
  int world_size_;
  Backend backend_;
  std::chrono::milliseconds timeout_;
};

// Joins the job: reads the rank and world size from the launcher and connects to the others.
// Throws an ember::Error naming what is missing or wrong (no launcher variables, a port in use, a
// peer that never came).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});

// Ends the process at once with `code` after an unrecoverable error (a collective that timed out
// leaves its thread inside the communication library, so a normal exit could hang). Under mpirun a
// rank that exits with an error makes mpirun stop the others.
[[noreturn]] void abort_job(int code);

// --- DistributedDataParallel ----------------------------------------------------------------------

struct DdpOptions {
  // Gradients are all-reduced in flat buckets of about this size, filled in reverse registration
  // order (the order backward produces them); a bucket's all-reduce starts from the hook of its last
  // gradient, while backward goes on.
  double bucket_cap_mb = 25;
  // false: a parameter that gets no gradient in a synchronized backward is an error naming it
  // (ranks would otherwise disagree on what to reduce). true: its gradient counts as zero.
  bool find_unused_parameters = false;
};

// What the last synchronized backward spent on communication.
struct DdpStats {
  int64_t buckets = 0;
  int64_t bytes = 0;                 // all-reduced, per rank
  double communication_seconds = 0;  // the buckets' all-reduces on the communication thread
  double hidden_seconds = 0;         // of which ran before backward ended
  double exposed_seconds = 0;        // how long the end of backward waited for them
};

// Averages the gradients of `module`'s parameters over the group's ranks during backward, so that
// every rank's optimizer sees the gradient of the global batch. Wrapping broadcasts rank 0's
// parameters and buffers to every rank and checks that every rank has the same parameter shapes.
// The module is used as before: `(*module)(x)`, `loss.backward()`; the DDP object must outlive the
// training (its hooks live on the parameters until it is destroyed).
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  // Within the guard's scope backward accumulates gradients locally; the next backward outside it
  // all-reduces the accumulated sum (gradient accumulation without a collective per micro-batch).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The buckets in all-reduce order, each as indices into the module's parameters that require grad
  // (in parameters() order).
  const std::vector<std::vector<size_t>>& buckets() const;
  const DdpStats& last_stats() const;

 private:
  struct State;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<State> state_;
  std::vector<RemovableHandle> hooks_;
  bool sync_ = true;
};

// --- ZeroRedundancyOptimizer (ZeRO stage 1) -----------------------------------------------------

// Shards the optimizer state over the ranks: parameters are assigned to ranks greedily by size
// (largest first, to the rank with the fewest elements, as PyTorch does), each rank runs the inner
// optimizer (made by `make` from the groups cut down to its own parameters) on its shard only, and
// after each step one all-gather gives every rank every updated parameter. The gradients must
// already be averaged (DistributedDataParallel does it). Parameters are numbered across groups in
// order, as in Optimizer::state_dict().
class ZeroRedundancyOptimizer {
 public:
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup> groups)>;
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                          const Factory& make);
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group, const Factory& make);
  ~ZeroRedundancyOptimizer();

  void step();
  void zero_grad(bool set_to_none = true);
  // The inner optimizer of this rank's shard (its learning rate is set through it). Its groups are
  // the non-empty ones of the shard, in order.
  optim::Optimizer& local_optimizer();
  // The rank that owns each parameter.
  const std::vector<int>& owners() const { return owners_; }
  // Bytes of optimizer state this rank holds.
  int64_t local_state_bytes() const;
  // Every rank's state in the numbering of the unsharded optimizer (the keys of
  // Optimizer::state_dict()), gathered to every rank; every rank must call it.
  StateDict consolidated_state_dict();
  // Loads a state_dict() of the unsharded optimizer: each rank keeps its shard's entries.
  void load_state_dict(const StateDict& state_dict);

 private:
  std::vector<Tensor> params_;    // every group's, in order
  std::vector<size_t> group_of_;  // per parameter
  size_t num_groups_ = 0;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<int> owners_;
  std::vector<size_t> local_to_global_;  // the local optimizer's parameters, by global index
  std::vector<size_t> local_groups_;     // the local optimizer's groups, by global group
  std::unique_ptr<optim::Optimizer> local_;
};

// --- DistributedSampler ---------------------------------------------------------------------------

// The examples a rank visits in an epoch, as torch.utils.data.DistributedSampler: the (seeded,
// per-epoch) order of 0..size-1 is padded by repeating its start to a multiple of world_size (or cut
// to one, with drop_last), and rank r takes every world_size-th index starting at r. Every rank gets
// the same number of examples and together they cover the dataset.
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int world_size, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(uint64_t epoch) const;
  int64_t num_samples() const;  // per rank

 private:
  int64_t size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
};

}  // namespace ember::dist

// The communication libraries behind a ProcessGroup. A backend runs blocking collectives on
// contiguous host buffers and is called from the group's one communication thread only
// (process_group.cpp), so it needs no locking of its own. kAvg never reaches it: the group sums and
// divides.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/store.h"
#include "ember/dist.h"
#include "ember/dtype.h"

namespace ember::dist::detail {

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  // data: count elements of dtype (float32, float64 or int64), reduced in place over the ranks.
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // output: world_size * count elements, rank r's input at r * count.
  virtual void all_gather(const void* input, void* output, int64_t count, DType dtype) = 0;
  // input: world_size * count elements; output (count) = the reduction of chunk `rank` over ranks.
  virtual void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void barrier() = 0;
};

// MPI_COMM_WORLD; initializes MPI (MPI_THREAD_SERIALIZED: the calls come from one thread at a time)
// and reads the rank and world size. Throws when ember was built without MPI.
std::unique_ptr<CommBackend> make_mpi_backend(int& rank, int& world_size);

// A Gloo TCP context of `world_size` ranks, connected through `store` (rendezvous keys under
// "gloo/"), every operation bounded by `timeout`. Throws when ember was built without Gloo.
std::unique_ptr<CommBackend> make_gloo_backend(int rank, int world_size, TcpStore& store,
                                               std::chrono::milliseconds timeout);

}  // namespace ember::dist::detail

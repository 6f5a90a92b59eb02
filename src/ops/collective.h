// Collectives as primitives: all_reduce, all_gather, reduce_scatter and broadcast run through the
// dispatch seam like any kernel, so a tracer records a data-parallel step and a compiled plan
// issues its collectives in the traced order (as MLX keeps its collectives among its primitives).
//
// Note [collectives as primitives]: a collective's kernel only starts the transfer, on the
// communicator of the group its attributes name (dist's ProcessGroup, which queues it to its
// communication thread), and returns; the kernel of `collective_wait` on the buffer the collective
// writes blocks until it is done. Both are kUpdate ops of that buffer, so every pass keeps the
// order start, wait, then the readers, and whatever the step does in between (the rest of backward)
// overlaps with the transfer, in a replay as when traced. The buffers must stay alive and unwritten
// between the two: DDP's buckets and ZeRO's shards are state the tracer keeps at their addresses.
#pragma once

#include <cstdint>
#include <functional>

#include "base/kernel.h"
#include "ember/attrs.h"
#include "ember/primitives.h"

namespace ember::collective {

// Collectives talk to the other ranks: a graph pass never folds, merges or drops one (every rank
// must issue the same collectives in the same order).
constexpr bool is_collective(OpKind kind) {
  return kind == OpKind::kAllReduce || kind == OpKind::kAllGather || kind == OpKind::kReduceScatter ||
         kind == OpKind::kBroadcast || kind == OpKind::kCollectiveWait;
}

// The side of a process group the kernels call (dist's implementation is process_group.cpp).
class Communicator {
 public:
  virtual ~Communicator() = default;
  // Starts collective `kind` (kAllReduce, kAllGather, kReduceScatter, kBroadcast) from `input` into
  // `output` (the same memory for all_reduce and broadcast; contiguous host buffers, checked by the
  // front-end); returns before it completes.
  virtual void start(OpKind kind, const Operand& input, const Operand& output, const CollectiveAttrs& attrs) = 0;
  // Blocks until the collectives started on `data` (an output's first element) are done; rethrows
  // the error of one that failed or timed out. No collective started on it: returns at once.
  virtual void wait(const void* data) = 0;
};

// Registers a communicator: the id collectives name it by in CollectiveAttrs::group. Unregistered by
// its owner before it is destroyed; a collective naming an unknown id is an error.
int64_t register_communicator(Communicator* communicator);
void unregister_communicator(int64_t id);

// The kernels (for every device type whose memory the host can address: the CPU) and cost rules.
void register_collective_kernels(KernelTable& table);

}  // namespace ember::collective

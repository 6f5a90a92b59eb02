// Differentiable collectives: each returns a new tensor (its input is left as it is) and records a
// backward, so a model split over ranks (tensor parallelism, a loss summed over ranks) trains
// through them. They run ProcessGroup's collectives (primitives of the dispatch seam) on a copy and
// wait for them.
//
// Their gradients treat the ranks' losses as one sum (as PyTorch's torch.distributed.nn does): the
// gradient of an input is what every rank's loss says about it.
//   all_reduce (sum)   dx = all_reduce(dy)         every rank's output reads every rank's input
//   all_reduce (avg)   dx = all_reduce(dy) / world
//   all_gather         dx = reduce_scatter(dy)     this rank's rows, summed over the ranks
//   reduce_scatter     dx = all_gather(dy)
//   broadcast          dx = all_reduce(dy) on the root, zeros elsewhere
// all_reduce with ReduceOp::kMax has no gradient: backward through it is an ember::Error. Every
// rank must call them in the same order with the same shapes, and run backward through them in the
// same order too (backward issues collectives).
#pragma once

#include <memory>

#include "ember/dist.h"
#include "ember/tensor.h"

namespace ember::dist::functional {

// The reduction of `x` over the ranks (float32, float64 or int64 on the CPU; any layout).
Tensor all_reduce(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, ReduceOp op = ReduceOp::kSum);
// Every rank's `x` stacked along dim 0 by rank: [world * x.size(0), ...] (x has at least one dim).
Tensor all_gather(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
// Rows [rank * n, (rank + 1) * n) of `x` (n = x.size(0) / world, which must divide), reduced over
// the ranks.
Tensor reduce_scatter(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, ReduceOp op = ReduceOp::kSum);
// The root's `x` on every rank.
Tensor broadcast(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int root = 0);

}  // namespace ember::dist::functional

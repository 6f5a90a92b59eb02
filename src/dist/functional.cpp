// Differentiable collectives (ember/dist/functional.h): ProcessGroup's collectives on a copy, with
// the backward of the sum of the ranks' losses.
#include "ember/dist/functional.h"

#include "autograd/function.h"
#include "ember/attrs.h"
#include "ember/error.h"
#include "ember/ops.h"

namespace ember::dist::functional {
namespace {

using autograd::GradMask;
using autograd::Grads;

ProcessGroup& checked(const std::shared_ptr<ProcessGroup>& group, const char* name, const Tensor& x) {
  EMBER_CHECK(group != nullptr, "[dist] ", name, ": the process group is null");
  EMBER_CHECK(x.defined(), "[dist] ", name, ": the input is an undefined tensor");
  return *group;
}

CollectiveAttrs attrs_of(ReduceOp op, int root = 0) {
  return {.group = 0, .reduce = static_cast<int64_t>(op), .root = root};
}

// The gradient's scale for a reduction: 1 for a sum, 1 / world for a mean; a max has none.
double gradient_scale(ReduceOp op, int world, const char* name) {
  EMBER_CHECK(op != ReduceOp::kMax, "[dist] ", name, " with ReduceOp::kMax has no gradient");
  return op == ReduceOp::kAvg ? 1.0 / world : 1.0;
}

}  // namespace

Tensor all_reduce(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, ReduceOp op) {
  ProcessGroup& g = checked(group, "all_reduce", x);
  Tensor out = x.detach().clone();
  g.all_reduce(out, op)->wait();
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kAllReduce, attrs_of(op), out, {&x}, [group, op](const Tensor& grad, GradMask) -> Grads {
      const double scale = gradient_scale(op, group->world_size(), "all_reduce");
      const Tensor summed = all_reduce(grad, group, ReduceOp::kSum);
      return {scale == 1.0 ? summed : mul(summed, scale)};
    });
  }
  return out;
}

Tensor all_gather(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  ProcessGroup& g = checked(group, "all_gather", x);
  EMBER_CHECK(x.dim() >= 1, "[dist] all_gather stacks along dim 0: the input needs a dim, got shape ", x.shape());
  Shape shape = x.shape();
  shape[0] *= g.world_size();
  Tensor out = empty(shape, TensorOptions(x.dtype()));
  g.all_gather(out, x.detach().contiguous())->wait();
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kAllGather, attrs_of(ReduceOp::kSum), out, {&x}, [group](const Tensor& grad, GradMask) {
      return Grads{reduce_scatter(grad, group, ReduceOp::kSum)};
    });
  }
  return out;
}

Tensor reduce_scatter(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, ReduceOp op) {
  ProcessGroup& g = checked(group, "reduce_scatter", x);
  const int world = g.world_size();
  EMBER_CHECK(x.dim() >= 1 && x.size(0) % world == 0, "[dist] reduce_scatter splits dim 0 into world_size (", world,
              ") parts: got shape ", x.shape());
  Shape shape = x.shape();
  shape[0] /= world;
  Tensor out = empty(shape, TensorOptions(x.dtype()));
  g.reduce_scatter(out, x.detach().contiguous(), op)->wait();
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kReduceScatter, attrs_of(op), out, {&x}, [group, op](const Tensor& grad, GradMask) {
      const double scale = gradient_scale(op, group->world_size(), "reduce_scatter");
      const Tensor gathered = all_gather(grad, group);
      return Grads{scale == 1.0 ? gathered : mul(gathered, scale)};
    });
  }
  return out;
}

Tensor broadcast(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int root) {
  ProcessGroup& g = checked(group, "broadcast", x);
  EMBER_CHECK(root >= 0 && root < g.world_size(), "[dist] broadcast: root ", root, " is not a rank of the ",
              g.world_size(), " in the group");
  Tensor out = x.detach().clone();
  g.broadcast(out, root)->wait();
  if (autograd::needs_grad(x)) {
    autograd::record(OpKind::kBroadcast, attrs_of(ReduceOp::kSum, root), out, {&x},
                     [group, root](const Tensor& grad, GradMask) {
                       const Tensor summed = all_reduce(grad, group, ReduceOp::kSum);
                       return Grads{group->rank() == root ? summed : zeros_like(summed)};
                     });
  }
  return out;
}

}  // namespace ember::dist::functional

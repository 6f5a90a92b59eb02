// Tracing: runs a function once, eagerly, while a dispatch observer records every kernel it runs as
// a graph (graph/ir.h). No op is defined twice: the tracer sees the primitives the front-ends, the
// autograd engine and the optimizers dispatch, with their attributes and operands.
#pragma once

#include <functional>
#include <vector>

#include "graph/ir.h"

namespace ember::graph {

struct Trace {
  Graph graph;
  std::vector<Tensor> results;  // the eager results of the traced call, detached
};

// Runs `body` and records it. `arguments[i]` is the i-th argument (undefined for a non-tensor one):
// its storage becomes a kArgument buffer. Throws (naming the op) when the function reads a tensor's
// value on the host (item(), to_vector()), which a graph cannot capture.
Trace trace(const std::vector<Tensor>& arguments, const std::function<std::vector<Tensor>()>& body);

}  // namespace ember::graph

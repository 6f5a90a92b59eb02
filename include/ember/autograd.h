// Reverse-mode automatic differentiation, as in PyTorch: ops on tensors that require gradients
// record a graph of Nodes (a dynamic tape); backward() walks it in reverse and accumulates into the
// leaves' .grad. Gradients are computed with ember ops, so they work on every device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/handle.h"
#include "ember/primitives.h"
#include "ember/tensor.h"

namespace ember::autograd {

// --- modes (thread-local, like PyTorch's) ---------------------------------------------------------

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Disables graph recording in its scope (optimizer steps, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Re-enables graph recording inside a NoGradGuard scope.
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Anomaly mode: every recorded op's output and every computed gradient is checked, and the first
// op that produces NaN or Inf is named in the thrown error ("[anomaly] ...").
bool is_anomaly_enabled();
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// --- the graph ----------------------------------------------------------------------------------

// A gradient hook: receives the gradient; returns a replacement, or an undefined Tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
};

// One recorded op (or a leaf's gradient accumulator). Every Node has one output; its apply() maps
// the gradient of that output to one gradient per input (undefined where none flows). A recorded
// op's node carries the op's identity: its OpKind and typed attributes.
class Node {
 public:
  // `kind` and `attrs`: the op that recorded the node; none for a leaf's gradient accumulator.
  Node(std::optional<OpKind> kind, Attrs attrs);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  std::optional<OpKind> kind() const { return kind_; }
  const Attrs& attrs() const { return attrs_; }
  // The op's name, e.g. "mul" ("accumulate_grad" for a leaf's sink); used in error messages,
  // anomaly mode and the profiler.
  const char* name() const { return kind_ ? op_name(*kind_) : "accumulate_grad"; }
  // Creation order; later nodes run first when several are ready. A leaf's accumulator ranks above
  // every op: it runs as soon as its gradient is complete.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // What each input looked like, so the engine can reduce broadcast gradients and cast dtypes.
  struct Input {
    Edge edge;
    Shape shape;
    DType dtype = kFloat32;
  };
  const std::vector<Input>& inputs() const { return inputs_; }
  void add_input(const Tensor& t);  // edge from t's grad_fn or its gradient accumulator

  // Hooks that see (and may replace) the gradient flowing into this node before apply().
  uint64_t add_pre_hook(GradHook hook);
  void remove_pre_hook(uint64_t id);
  Tensor run_pre_hooks(Tensor grad) const;

  virtual std::vector<Tensor> apply(const Tensor& grad) = 0;
  // Frees what the node saved for backward (called after it ran unless retain_graph).
  virtual void release() {}
  virtual bool released() const { return false; }

 private:
  std::optional<OpKind> kind_;
  Attrs attrs_;
  uint64_t sequence_nr_;
  std::vector<Input> inputs_;
  std::vector<std::pair<uint64_t, GradHook>> pre_hooks_;
  uint64_t next_hook_id_ = 0;
};

// The node a leaf tensor that requires grad uses to receive its gradient (one per leaf).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// Runs hook(leaf) each time a backward pass has accumulated a gradient into leaf.grad (PyTorch's
// register_post_accumulate_grad_hook): the hook may read and change leaf.grad.
RemovableHandle register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor& leaf)> hook);

// --- running backward ---------------------------------------------------------------------------

// Runs fn once when the backward pass now running has finished, before backward() returns (as
// PyTorch's queue_callback); callbacks run in the order queued and may throw. Only valid while a
// backward pass runs (from a hook).
void queue_callback(std::function<void()> fn);

// Computes the gradients of `roots` (with the given output gradients; undefined means ones for a
// one-element root) and accumulates them into the leaves' .grad. Frees the graph unless
// retain_graph.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// Returns d(outputs)/d(inputs) weighted by grad_outputs, without touching any .grad. An input that
// the outputs do not depend on gets an undefined Tensor when allow_unused, else an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

// --- checking gradients -------------------------------------------------------------------------

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

// Compares the analytical Jacobian of fn (vector-Jacobian products from backward, one per output
// element) with central finite differences, for every input that requires grad. Inputs should be
// float64. Returns true, or throws ember::Error naming the input, the element and both values.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;
bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace ember::autograd

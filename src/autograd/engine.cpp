// The backward engine: counts each node's consumers, then runs nodes whose gradients are complete,
// latest-created first, summing the gradients that reach a node from several consumers.
#include "autograd/engine.h"

#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember::autograd {
namespace {

thread_local const char* t_current_node = nullptr;
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;  // the running pass's

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// One backward pass. With `capture` set, the gradients arriving at the captured nodes are returned
// instead of being accumulated into leaves.
struct GraphTask {
  bool retain_graph = false;
  bool accumulate = true;
  std::unordered_map<const Node*, size_t> capture;  // node -> slot in captured
  std::vector<Tensor> captured;
};

// Brings a gradient to the shape and dtype of the input it belongs to.
Tensor conform(const Node& node, size_t index, Tensor grad) {
  const Node::Input& input = node.inputs()[index];
  if (grad.shape() != input.shape) {
    EMBER_CHECK(broadcast_shapes(input.shape, grad.shape(), "backward") == grad.shape(), "[backward] ", node.name(),
                " returned a gradient of shape ", grad.shape(), " for input ", index, " of shape ", input.shape);
    grad = sum_to(grad, input.shape);
  }
  if (grad.dtype() != input.dtype) grad = grad.to(input.dtype);
  return grad;
}

void run_nodes(const std::vector<std::pair<std::shared_ptr<Node>, Tensor>>& roots, GraphTask& task);

// One backward pass, then the callbacks queued during it (a callback may queue another).
void execute(const std::vector<std::pair<std::shared_ptr<Node>, Tensor>>& roots, GraphTask& task) {
  std::vector<std::function<void()>> callbacks;
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() { t_callbacks = outer; }
  } restore{std::exchange(t_callbacks, &callbacks)};
  run_nodes(roots, task);
  for (size_t i = 0; i < callbacks.size(); ++i) {
    const std::function<void()> callback = callbacks[i];  // queueing may reallocate
    callback();
  }
}

void run_nodes(const std::vector<std::pair<std::shared_ptr<Node>, Tensor>>& roots, GraphTask& task) {
  NoGradGuard no_grad;
  const PhaseGuard phase(Phase::kBackward);
  // Consumers per node, over everything reachable from the roots.
  std::unordered_map<const Node*, int> dependencies;
  std::vector<Node*> stack;
  for (const auto& [node, grad] : roots) {
    if (dependencies.emplace(node.get(), 0).second) stack.push_back(node.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Node::Input& input : node->inputs()) {
      Node* next = input.edge.node.get();
      if (next == nullptr) continue;
      auto [it, inserted] = dependencies.emplace(next, 0);
      ++it->second;
      if (inserted) stack.push_back(next);
    }
  }

  std::unordered_map<const Node*, Tensor> buffers;
  auto add_to_buffer = [&](const Node* node, Tensor grad) {
    Tensor& slot = buffers[node];
    slot = slot.defined() ? ember::add(slot, grad) : std::move(grad);
  };
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (const auto& [node, grad] : roots) add_to_buffer(node.get(), grad);
  for (const auto& [node, grad] : roots) {
    int& deps = dependencies[node.get()];
    if (deps == 0) {
      deps = -1;  // queued
      ready.push(node.get());
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor grad;
    if (auto it = buffers.find(node); it != buffers.end()) {
      grad = std::move(it->second);
      buffers.erase(it);
    }
    std::vector<Tensor> outputs;
    if (grad.defined()) {
      grad = node->run_pre_hooks(std::move(grad));
      if (auto it = task.capture.find(node); it != task.capture.end()) task.captured[it->second] = grad;
      const std::optional<OpKind> kind = node->kind();
      if (kind || task.accumulate) {
        t_current_node = node->name();
        try {
          if (kind) {
            // The vjp as one observed range ("<name>_backward" in the profiler) around its ops.
            const dispatch::Scope scope(*kind, {&grad}, node->attrs(), dispatch::CallKind::kBackward);
            outputs = node->apply(grad);
          } else {
            outputs = node->apply(grad);  // a leaf's sink: its add is observed as an op of its own
          }
        } catch (...) {
          t_current_node = nullptr;
          throw;
        }
        t_current_node = nullptr;
      }
      if (!task.retain_graph) node->release();
    }
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      const Node* next = node->inputs()[i].edge.node.get();
      if (next == nullptr) continue;
      if (i < outputs.size() && outputs[i].defined()) {
        Tensor g = conform(*node, i, std::move(outputs[i]));
        check_gradient_finite(*node, g);
        add_to_buffer(next, std::move(g));
      }
      if (--dependencies[next] == 0) ready.push(const_cast<Node*>(next));
    }
  }
}

std::shared_ptr<Node> root_node(const Tensor& t, size_t index) {
  EMBER_CHECK(t.defined(), "[backward] output ", index, " is an undefined tensor");
  EMBER_CHECK(t.requires_grad(), "[backward] output ", index,
              " does not require grad and has no grad_fn: nothing it depends on requires grad (or it was computed "
              "under NoGradGuard)");
  return t.grad_fn() ? t.grad_fn() : grad_accumulator(t);
}

std::vector<std::pair<std::shared_ptr<Node>, Tensor>> make_roots(const std::vector<Tensor>& roots,
                                                                 const std::vector<Tensor>& grads) {
  EMBER_CHECK(grads.empty() || grads.size() == roots.size(), "[backward] got ", grads.size(), " gradients for ",
              roots.size(), " outputs");
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> out;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    std::shared_ptr<Node> node = root_node(root, i);
    Tensor grad = grads.empty() ? Tensor() : grads[i];
    if (!grad.defined()) {
      EMBER_CHECK(root.numel() == 1, "[backward] a gradient can be created implicitly only for one-element outputs; ",
                  "output ", i, " has shape ", root.shape(), ", pass its gradient explicitly");
      grad = ones_like(root);
    } else {
      EMBER_CHECK(grad.shape() == root.shape(), "[backward] gradient of shape ", grad.shape(), " for output ", i,
                  " of shape ", root.shape());
      EMBER_CHECK(grad.device() == root.device(), "[backward] gradient on ", grad.device(), " for output ", i, " on ",
                  root.device());
      if (grad.dtype() != root.dtype()) grad = grad.to(root.dtype());
    }
    out.emplace_back(std::move(node), std::move(grad));
  }
  return out;
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  EMBER_CHECK(t_callbacks != nullptr, "[queue_callback] called outside a backward pass");
  t_callbacks->push_back(std::move(fn));
}

const char* current_node_name() { return t_current_node != nullptr ? t_current_node : "an op"; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  GraphTask task;
  task.retain_graph = retain_graph;
  execute(make_roots(roots, grad_roots), task);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused) {
  GraphTask task;
  task.retain_graph = retain_graph;
  task.accumulate = false;
  task.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    EMBER_CHECK(input.defined() && input.requires_grad(), "[grad] input ", i, " does not require grad");
    const std::shared_ptr<Node> node = input.is_leaf() ? grad_accumulator(input) : input.grad_fn();
    const bool inserted = task.capture.emplace(node.get(), i).second;
    EMBER_CHECK(inserted, "[grad] input ", i, " is listed twice");
  }
  execute(make_roots(outputs, grad_outputs), task);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& g = task.captured[i];
    if (!g.defined()) {
      EMBER_CHECK(allow_unused, "[grad] input ", i,
                  " was not used to compute the outputs; pass allow_unused=true to get an undefined gradient");
      continue;
    }
    if (g.dtype() != inputs[i].dtype()) g = g.to(inputs[i].dtype());
  }
  return std::move(task.captured);
}

}  // namespace ember::autograd

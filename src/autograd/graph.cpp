// The recorded graph: grad mode, nodes, gradient accumulators, saved tensors, hooks, and how ops
// record themselves (function.h).
#include <algorithm>
#include <limits>
#include <mutex>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember::autograd {
namespace {

thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
thread_local uint64_t t_next_sequence_nr = 0;

// A node whose backward is a function of the output gradient (every op's node).
class FunctionNode final : public Node {
 public:
  FunctionNode(OpKind kind, const Attrs& attrs, BackwardFn fn) : Node(kind, attrs), fn_(std::move(fn)) {}

  std::vector<Tensor> apply(const Tensor& grad) override {
    EMBER_CHECK(!released_, "[backward] tried to run backward through the graph of ", name(),
                " a second time, but its saved tensors were already freed; pass retain_graph=true to the first ",
                "backward()");
    uint64_t bits = 0;
    for (size_t i = 0; i < inputs().size() && i < 64; ++i) {
      if (inputs()[i].edge.node) bits |= uint64_t{1} << i;
    }
    return fn_(grad, GradMask(bits));
  }
  void release() override {
    fn_ = nullptr;
    released_ = true;
  }
  bool released() const override { return released_; }

 private:
  BackwardFn fn_;
  bool released_ = false;
};

void check_finite(const char* what, const char* op, const Tensor& t) {
  if (!t.defined() || !t.is_floating_point()) return;
  NoGradGuard no_grad;
  const bool nan = ember::isnan(t).any().item<bool>();
  const bool inf = !nan && ember::isinf(t).any().item<bool>();
  EMBER_CHECK(!nan && !inf, "[anomaly] the ", what, " of ", op, " produced ", nan ? "NaN" : "Inf", " (shape ",
              t.shape(), ")");
}

}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool is_anomaly_enabled() { return t_anomaly; }
DetectAnomalyGuard::DetectAnomalyGuard() : previous_(t_anomaly) { t_anomaly = true; }
DetectAnomalyGuard::~DetectAnomalyGuard() { t_anomaly = previous_; }

void check_gradient_finite(const Node& node, const Tensor& grad) {
  if (t_anomaly) check_finite("backward", node.name(), grad);
}

// --- Node -----------------------------------------------------------------------------------------

Node::Node(std::optional<OpKind> kind, Attrs attrs)
    : kind_(kind),
      attrs_(std::move(attrs)),
      // A leaf's accumulator runs as soon as its gradient is complete (as in PyTorch), so that the
      // hooks on it (DistributedDataParallel's) see each gradient while backward goes on.
      sequence_nr_(kind ? t_next_sequence_nr++ : std::numeric_limits<uint64_t>::max()) {}
Node::~Node() = default;

void Node::add_input(const Tensor& t) {
  Input input;
  if (t.defined()) {
    input.shape = t.shape();
    input.dtype = t.dtype();
    if (t.grad_fn()) {
      input.edge.node = t.grad_fn();
    } else if (t.requires_grad()) {
      input.edge.node = grad_accumulator(t);
    }
  }
  inputs_.push_back(std::move(input));
}

uint64_t Node::add_pre_hook(GradHook hook) {
  pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Node::remove_pre_hook(uint64_t id) {
  std::erase_if(pre_hooks_, [id](const auto& entry) { return entry.first == id; });
}

Tensor Node::run_pre_hooks(Tensor grad) const {
  // Copy: a hook may remove itself (or others) while running.
  const auto hooks = pre_hooks_;
  for (const auto& [id, hook] : hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) {
      EMBER_CHECK(replaced.shape() == grad.shape(), "[hook] a gradient hook on ", name(), " returned shape ",
                  replaced.shape(), ", expected ", grad.shape());
      grad = std::move(replaced);
    }
  }
  return grad;
}

// --- leaves ---------------------------------------------------------------------------------------

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : Node(std::nullopt, NoAttrs{}), leaf_(leaf) {}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad) {
  const std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  if (!leaf || !grad.defined()) return {};
  accumulate_into(leaf->grad, grad, Tensor(leaf));
  if (!post_hooks_.empty()) {
    const auto hooks = post_hooks_;  // a hook may remove itself
    const Tensor owner(leaf);
    for (const auto& [id, hook] : hooks) hook(owner);
  }
  return {};
}

uint64_t AccumulateGrad::add_post_hook(std::function<void(const Tensor& leaf)> hook) {
  post_hooks_.emplace_back(next_post_hook_id_, std::move(hook));
  return next_post_hook_id_++;
}

void AccumulateGrad::remove_post_hook(uint64_t id) {
  std::erase_if(post_hooks_, [id](const auto& entry) { return entry.first == id; });
}

RemovableHandle register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor& leaf)> hook) {
  EMBER_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
              "[register_post_accumulate_grad_hook] needs a leaf tensor that requires grad");
  const auto node = std::static_pointer_cast<AccumulateGrad>(grad_accumulator(leaf));
  const uint64_t id = node->add_post_hook(std::move(hook));
  return RemovableHandle([weak = std::weak_ptr<AccumulateGrad>(node), id] {
    if (auto n = weak.lock()) n->remove_post_hook(id);
  });
}

void accumulate_into(std::shared_ptr<TensorImpl>& slot, const Tensor& grad, const Tensor& owner) {
  NoGradGuard no_grad;
  if (!slot) {
    // Keep the gradient itself when nobody else can see it; otherwise store a private copy.
    // (A tracer's references to the storage do not count: tracing must not change what is stored.)
    const long traced = dispatch::observed() ? dispatch::observer_storage_refs(grad.impl().storage.get()) : 0;
    const bool exclusive = grad.impl_ptr().use_count() == 1 && grad.impl().storage.use_count() - traced == 1 &&
                           grad.is_contiguous() && !grad.impl().is_view;
    Tensor stored = exclusive ? grad : grad.clone();
    if (stored.dtype() != owner.dtype()) stored = stored.to(owner.dtype());
    if (dispatch::observed()) [[unlikely]]
      dispatch::notify_grad_slot(owner, stored, false);
    slot = stored.impl_ptr();
  } else {
    Tensor existing(slot);
    if (dispatch::observed()) [[unlikely]]
      dispatch::notify_grad_slot(owner, existing, true);
    existing.add_(grad);
  }
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  EMBER_CHECK(leaf.is_leaf(), "[autograd] grad_accumulator of a non-leaf tensor");
  // Threads that record ops over the same parameters (one model serving several threads with grad
  // mode on) reach a leaf's slot at once: the first makes the accumulator, the others must see it,
  // or their nodes would lead to an accumulator the leaf no longer holds (tests/threads/).
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<Node>& slot = leaf.impl().grad_accumulator;
  if (!slot) slot = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  return slot;
}

// --- recording ----------------------------------------------------------------------------------

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  if (!is_grad_enabled()) return false;
  return std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

namespace {

template <class Inputs, class Get>
void record_impl(OpKind kind, const Attrs& attrs, const Tensor& out, const Inputs& inputs, Get get,
                 BackwardFn backward) {
  EMBER_CHECK(attrs.index() == op_info(kind).attrs_index, "[", op_name(kind),
              "] internal error: recorded with the attributes of another op");
  if (!out.is_floating_point()) return;
  for (const auto& entry : inputs) {
    const Tensor& t = get(entry);
    if (t.defined() && t.is_same(out)) return;  // the op returned its input unchanged
  }
  if (t_anomaly) check_finite("forward", op_name(kind), out);
  auto node = std::make_shared<FunctionNode>(kind, attrs, std::move(backward));
  for (const auto& entry : inputs) node->add_input(get(entry));
  TensorImpl& impl = out.impl();
  impl.grad_fn = std::move(node);
  impl.requires_grad = true;
}

}  // namespace

void record(OpKind kind, const Attrs& attrs, const Tensor& out, std::initializer_list<const Tensor*> inputs,
            BackwardFn backward) {
  record_impl(
      kind, attrs, out, inputs, [](const Tensor* t) -> const Tensor& { return *t; }, std::move(backward));
}

void record(OpKind kind, const Attrs& attrs, const Tensor& out, const std::vector<Tensor>& inputs,
            BackwardFn backward) {
  record_impl(
      kind, attrs, out, inputs, [](const Tensor& t) -> const Tensor& { return t; }, std::move(backward));
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::get() const {
  if (data_.defined() && data_.version() != version_) {
    EMBER_FAIL("[backward] a tensor of shape ", data_.shape(), " that ", current_node_name(),
               " saved for its backward was modified by an in-place operation (saved at version ", version_,
               ", now at version ", data_.version(), "); compute on a clone() instead of modifying it in place");
  }
  return data_;
}

Tensor& inplace(const char* name, Tensor& self, const std::function<Tensor(const Tensor& self_copy)>& compute) {
  EMBER_CHECK(!(self.is_leaf() && self.requires_grad()), "[", name,
              "] a leaf tensor that requires grad cannot be modified in place while grad mode is on; do it inside "
              "NoGradGuard, or use the out-of-place op");
  EMBER_CHECK(!self.impl().is_view, "[", name,
              "] in-place ops on views are not differentiable in ember; use the out-of-place op (or cat/stack to ",
              "assemble results)");
  const Tensor result = compute(self.clone());
  {
    NoGradGuard no_grad;
    self.copy_(result);
  }
  if (result.grad_fn()) {
    self.impl().grad_fn = result.grad_fn();
    self.impl().requires_grad = true;
  }
  return self;
}

Tensor zeros_for(const Shape& shape, const Tensor& grad) {
  TensorOptions options(grad.dtype());
  options.device = grad.device();
  return zeros(shape, options);
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int lead = grad.dim() - shape.size();
  EMBER_CHECK(lead >= 0, "[backward] gradient of shape ", grad.shape(), " cannot be reduced to shape ", shape);
  Axes axes;
  for (int d = 0; d < grad.dim(); ++d) {
    if (d < lead) {
      axes.push_back(d);
    } else if (shape[d - lead] == 1 && grad.shape()[d] != 1) {
      axes.push_back(d);
    } else {
      EMBER_CHECK(shape[d - lead] == grad.shape()[d], "[backward] gradient of shape ", grad.shape(),
                  " cannot be reduced to shape ", shape);
    }
  }
  Tensor reduced = axes.empty() ? grad : ember::sum(grad, axes, /*keepdim=*/true);
  return reduced.reshape(shape);
}

}  // namespace ember::autograd

// --- the autograd surface of Tensor ---------------------------------------------------------------

namespace ember {

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    EMBER_CHECK(grad.shape() == shape(), "[set_grad] gradient of shape ", grad.shape(), " for a tensor of shape ",
                shape());
    EMBER_CHECK(grad.dtype() == dtype(), "[set_grad] gradient of dtype ", grad.dtype(), " for a tensor of dtype ",
                dtype());
  }
  impl().grad = grad.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

RemovableHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  EMBER_CHECK(requires_grad(), "[register_hook] cannot register a hook on a tensor that doesn't require grad");
  const std::shared_ptr<autograd::Node> node = is_leaf() ? autograd::grad_accumulator(*this) : grad_fn();
  const uint64_t id = node->add_pre_hook(std::move(hook));
  return RemovableHandle([weak = std::weak_ptr<autograd::Node>(node), id] {
    if (auto n = weak.lock()) n->remove_pre_hook(id);
  });
}

void Tensor::retain_grad() const {
  EMBER_CHECK(requires_grad(), "[retain_grad] cannot retain the gradient of a tensor that doesn't require grad");
  if (is_leaf()) return;
  grad_fn()->add_pre_hook([weak = std::weak_ptr<TensorImpl>(impl_ptr())](const Tensor& grad) {
    if (auto impl = weak.lock()) autograd::accumulate_into(impl->grad, grad, Tensor(impl));
    return Tensor();
  });
}

}  // namespace ember

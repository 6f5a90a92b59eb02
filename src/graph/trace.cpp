// The tracer: a dispatch observer that turns the kernel calls of one eager run into a Graph.
//
// Every storage an operand lives in becomes a buffer, found by its address. A storage first seen as
// the output of a kernel was made inside the call (a temporary); one first seen as an input came
// from outside (a parameter, a captured tensor: state). The tracer holds every storage until the
// call ends, so no address is reused while tracing; then a temporary that someone else still holds
// (a .grad, an optimizer's state, a module's buffer) is state too, and one held only by the results
// is an output.
#include "graph/trace.h"

#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "ops/dispatch.h"

namespace ember::graph {
namespace {

class Tracer final : public dispatch::Observer {
 public:
  Tracer(Graph& graph, const std::vector<Tensor>& arguments) : g_(graph), thread_(std::this_thread::get_id()) {
    g_.num_arguments = static_cast<int>(arguments.size());
    for (size_t i = 0; i < arguments.size(); ++i) {
      const Tensor& a = arguments[i];
      if (!a.defined()) continue;
      const StorageImpl* s = a.impl().storage.get();
      if (buffer_of_.count(s) != 0) continue;  // an alias of an earlier argument (the signature says which)
      Buffer b;
      b.kind = BufferKind::kArgument;
      b.nbytes = s->nbytes();
      b.device = s->device();
      b.storage = a.impl().storage;
      b.argument = static_cast<int>(i);
      b.argument_offset = a.offset() * a.element_size();
      buffer_of_[s] = g_.add_buffer(std::move(b));
    }
  }

  void begin(const dispatch::OpCall& call) override {
    if (std::this_thread::get_id() != thread_ || call.call_kind != dispatch::CallKind::kKernel) return;
    // A compiled function's replay reports its kernels without tensors (for the profiler): its
    // operands cannot be recorded.
    EMBER_CHECK(call.kernel == nullptr || call.inputs.size() + call.outputs.size() > 0 ||
                    call.kernel->inputs.size() + call.kernel->outputs.size() == 0,
                "[compile] a compiled function was called while another one was being traced; call the inner "
                "function uncompiled inside the outer one");
    if (host_depth_ > 0) {
      touch_in_host(call);
      return;
    }
    Node n;
    n.op = call.kind;
    n.attrs = call.attrs;
    n.phase = call.phase;
    for (const Tensor* t : call.inputs) n.inputs.push_back(view_of(t, false));
    const bool update = has_trait(call.kind, kUpdate);
    for (const Tensor* t : call.outputs) n.outputs.push_back(view_of(t, !update));
    // Random ops, and ops that carry a random op's key (attention with dropout and its gradient).
    n.draw = find_draw(call.attrs);
    if (call.host != nullptr) n.host_attrs = *call.host;
    g_.nodes.push_back(std::move(n));
  }
  void end(const dispatch::OpCall&) override {}

  long storage_refs(const StorageImpl* storage) override {
    if (std::this_thread::get_id() != thread_) return 0;
    return buffer_of_.count(storage) != 0 ? 1 : 0;
  }

  void random_draw(uint64_t seed, uint64_t first_block, int64_t blocks) override {
    if (std::this_thread::get_id() != thread_ || host_depth_ > 0) return;
    g_.draws.push_back({seed, first_block, blocks});
  }

  void host_read(const char* what) override {
    // Inside a host region the read is fine: the region is replayed, reading the values anew.
    if (std::this_thread::get_id() != thread_ || host_depth_ > 0) return;
    EMBER_FAIL("[compile] ", what,
               "() reads a tensor's value on the host while tracing: a compiled graph cannot depend on it (the value "
               "would be frozen into the graph). Move the read out of the compiled function, or keep it a tensor");
  }

  void grad_slot(const Tensor& leaf, const Tensor& grad, bool accumulate) override {
    if (std::this_thread::get_id() != thread_ || host_depth_ > 0) return;
    const bool first = leaves_.insert(&leaf.impl()).second;
    if (accumulate) {
      if (first) g_.grad_guards.push_back({leaf.impl_ptr(), grad.defined() ? &grad.impl() : nullptr});
      return;
    }
    GradSlot slot;
    slot.leaf = leaf.impl_ptr();
    if (grad.defined()) {
      slot.grad = grad.impl_ptr();
      slot.buffer = buffer_for(grad, false);
    }
    Node n;
    n.kind = NodeKind::kGradSlot;
    n.index = static_cast<int>(g_.grad_slots.size());
    if (grad.defined()) n.inputs.push_back(view_of(&grad, false));
    g_.grad_slots.push_back(std::move(slot));
    g_.nodes.push_back(std::move(n));
  }

  void begin_host(const char* name, const std::function<void()>& replay,
                  std::span<const Tensor* const> reads) override {
    if (std::this_thread::get_id() != thread_) return;
    if (host_depth_ > 0) {
      ++host_depth_;
      return;
    }
    // A replay runs the region again, reading what it read at the addresses the trace saw: an
    // argument lives elsewhere on every call, so the replay would read the traced call's value.
    for (const Tensor* t : reads) {
      EMBER_CHECK(g_.buffers[view_of(t, false).buffer].kind != BufferKind::kArgument, "[compile] ", name,
                  " reads an argument of the compiled function on the host, which a replay cannot follow (it would "
                  "read the traced call's value). Keep that tensor outside the arguments (captured state the "
                  "function updates, as a GradScaler's flag) or call ",
                  name, " outside the compiled function");
    }
    ++host_depth_;
    Node n;
    n.kind = NodeKind::kHost;
    n.label = name;
    n.index = static_cast<int>(g_.hosts.size());
    // What the region reads on the host: inputs of its node (computed before it, kept at their
    // addresses).
    for (const Tensor* t : reads) {
      n.inputs.push_back(view_of(t, false));
      host_touched_.insert(n.inputs.back().buffer);
    }
    g_.hosts.push_back({name, replay});
    g_.nodes.push_back(std::move(n));
    host_node_ = static_cast<int>(g_.nodes.size()) - 1;
  }
  void end_host() override {
    if (std::this_thread::get_id() != thread_) return;
    --host_depth_;
  }

  // After the call: which temporaries escaped (state), which are the results (outputs).
  void finish(const std::vector<Tensor>& results) {
    std::unordered_map<const StorageImpl*, int> result_refs;
    std::unordered_set<const TensorImpl*> seen;
    for (const Tensor& r : results) {
      if (seen.insert(&r.impl()).second) ++result_refs[r.impl().storage.get()];
      g_.outputs.push_back(view_of(&r, false));
    }
    for (Buffer& b : g_.buffers) {
      if (b.kind != BufferKind::kTemp) continue;
      const long held_by_results = result_refs.count(b.storage.get()) ? result_refs[b.storage.get()] : 0;
      const long others = b.storage.use_count() - 1 - held_by_results;
      if (others > 0) {
        b.kind = BufferKind::kState;
      } else if (held_by_results > 0) {
        b.kind = BufferKind::kOutput;
      }
    }
    for (int b : host_touched_) {
      if (g_.buffers[b].kind == BufferKind::kTemp || g_.buffers[b].kind == BufferKind::kOutput)
        g_.buffers[b].kind = BufferKind::kState;
    }
    for (const GradSlot& s : g_.grad_slots) {
      if (s.buffer >= 0) g_.buffers[s.buffer].kind = BufferKind::kState;
    }
  }

 private:
  int buffer_for(const Tensor& t, bool written_first) {
    const StorageImpl* s = t.impl().storage.get();
    if (auto it = buffer_of_.find(s); it != buffer_of_.end()) return it->second;
    Buffer b;
    b.kind = written_first ? BufferKind::kTemp : BufferKind::kState;
    b.nbytes = s->nbytes();
    b.device = s->device();
    b.storage = t.impl().storage;
    const int id = g_.add_buffer(std::move(b));
    buffer_of_[s] = id;
    return id;
  }

  View view_of(const Tensor* t, bool written) {
    View v;
    if (t == nullptr || !t->defined()) return v;
    v.buffer = buffer_for(*t, written);
    v.offset = t->offset() * t->element_size();
    v.dtype = t->dtype();
    v.shape = t->shape();
    v.strides = t->strides();
    return v;
  }

  // Inside a host region: the buffers it reads and writes (those the graph knows) become operands of
  // the host node and stay at their addresses.
  void touch_in_host(const dispatch::OpCall& call) {
    Node& host = g_.nodes[host_node_];
    auto touch = [&](const Tensor* t) {
      if (t == nullptr || !t->defined()) return;
      auto it = buffer_of_.find(t->impl().storage.get());
      if (it == buffer_of_.end()) return;  // made inside the region: the replay makes its own
      View v = view_of(t, false);
      host_touched_.insert(v.buffer);
      for (const View& u : host.outputs) {
        if (u == v) return;
      }
      host.outputs.push_back(std::move(v));
    };
    for (const Tensor* t : call.inputs) touch(t);
    for (const Tensor* t : call.outputs) touch(t);
  }

  // The recorded draw whose key a random op's attributes carry.
  int find_draw(const Attrs& attrs) const {
    uint64_t seed = 0, block = 0;
    bool keyed = false;
    std::visit(
        [&](const auto& a) {
          if constexpr (requires {
                          a.seed;
                          a.first_block;
                        }) {
            seed = a.seed;
            block = a.first_block;
            keyed = true;
          }
          if constexpr (requires { a.dropout_p; }) keyed = keyed && a.dropout_p > 0;  // no draw without dropout
        },
        attrs);
    if (!keyed) return -1;
    for (int i = static_cast<int>(g_.draws.size()) - 1; i >= 0; --i) {
      if (g_.draws[i].seed == seed && g_.draws[i].first_block == block) return i;
    }
    return -1;
  }

  Graph& g_;
  std::thread::id thread_;
  std::unordered_map<const StorageImpl*, int> buffer_of_;
  std::unordered_set<const TensorImpl*> leaves_;
  std::unordered_set<int> host_touched_;
  int host_depth_ = 0;
  int host_node_ = -1;
};

// Attaches a tracer for the scope.
struct Attach {
  explicit Attach(dispatch::Observer* o) : observer(o) { dispatch::add_observer(o); }
  ~Attach() { dispatch::remove_observer(observer); }
  Attach(const Attach&) = delete;
  Attach& operator=(const Attach&) = delete;
  dispatch::Observer* observer;
};

}  // namespace

Trace trace(const std::vector<Tensor>& arguments, const std::function<std::vector<Tensor>()>& body) {
  Trace t;
  Tracer tracer(t.graph, arguments);
  std::vector<Tensor> results;
  {
    const Attach attach(&tracer);
    results = body();
  }
  // The results leave without autograd history (a compiled call replays without recording one), so
  // that what the history saved is not mistaken for state.
  for (Tensor& r : results) {
    EMBER_CHECK(r.defined(), "[compile] the function returned an undefined tensor");
    r = r.detach();
  }
  tracer.finish(results);
  // Random ops whose key was not drawn in this call (a fixed key chosen by the caller) replay it as is.
  t.results = std::move(results);
  return t;
}

}  // namespace ember::graph

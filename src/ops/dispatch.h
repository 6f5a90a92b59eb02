// The dispatch seam: the one way a kernel runs. A front-end validates its arguments, allocates its
// outputs and calls
//
//   dispatch::run(OpKind::kConv2d, Conv2dAttrs{...}, {&input, &weight, &bias}, {&out});
//
// which checks once that every operand is on one device, that the device's backend has a kernel for
// the op and takes the operands' dtype (else "[conv2d] not implemented on cuda:0"), tells the
// observers (the profiler, a tracer), and calls the kernel registered for (op, device) with the raw
// operands (base/kernel.h). View ops pass the seam too (dispatch::view), without a kernel, and
// composite ops (mean, linear, cross_entropy, ...) open a dispatch::Scope around the primitives they
// are made of. With no observer attached, observing costs one relaxed load and a predictable branch.
//
// Note [error names]: a kernel's error names the op the user called. Inside a composite's Scope
// that is the composite (embedding's index check says "[embedding] index 7 is out of bounds ..."),
// elsewhere the primitive itself.
#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "base/kernel.h"
#include "base/op_context.h"
#include "ember/phase.h"
#include "ember/primitives.h"
#include "ember/tensor.h"

namespace ember::dispatch {

// What an observer sees of one op call.
enum class CallKind : uint8_t {
  kKernel,     // a primitive running its kernel (kernel is set)
  kView,       // a view op: outputs[0] views inputs[0]
  kComposite,  // a composite op's scope: its primitives follow, then end()
  kBackward,   // the autograd engine running a node's vjp (kind is the node's op)
};

// Note [host attributes]: the attributes of a kernel that host code computes for each call from
// state outside tensors (an optimizer's learning rate, step count and bias corrections), and
// whether the kernel runs at all this time (not when a loss scaler found Inf or NaN). The host
// code that fills them runs in a HostRegion, which a compiled step replays; the kernel itself is a
// node of the graph that reads its attributes from here at every replay. So an optimizer's update
// is a kernel of the plan like any other, and a compiled step reads the current learning rate.
struct HostAttrs {
  Attrs attrs;
  bool skip = false;
};

struct OpCall {
  OpKind kind;
  CallKind call_kind;
  Phase phase;
  const Attrs& attrs;
  std::span<const Tensor* const> inputs;   // null entries: absent optional operands
  std::span<const Tensor* const> outputs;  // empty for scopes
  const KernelCall* kernel = nullptr;      // kKernel only: the operands as the kernel sees them
  bool failed = false;                     // end() only: the call threw
  // A kernel whose attributes the host computes (Note [host attributes]); it did not run when skip.
  const std::shared_ptr<HostAttrs>* host = nullptr;
};

// Sees every op call on every thread while attached: begin() before the kernel runs (or the scope
// opens), end() after (also when it throws: then `failed` is set). Calls from several threads may
// overlap, and an observer attached or detached while other threads run ops may see an end()
// without its begin() or the reverse. Callbacks must not attach or detach observers. An exception
// from begin() fails the op before it runs; one from a scope's end() is dropped (a destructor
// cannot throw it).
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void begin(const OpCall& call) = 0;
  virtual void end(const OpCall& call) = 0;

  // What happens besides op calls, for a tracer (graph/): the default ignores it.
  // A random op reserved `blocks` counter blocks of the Philox generator, starting at (seed, first_block).
  virtual void random_draw(uint64_t seed, uint64_t first_block, int64_t blocks) {}
  // Host code is about to read a tensor's values (item(), to_vector()): `what` names the call.
  virtual void host_read(const char* what) {}
  // A leaf's .grad slot is about to change: set to `grad` (undefined: to none) or, with
  // `accumulate`, added to in place (its current value read).
  virtual void grad_slot(const Tensor& leaf, const Tensor& grad, bool accumulate) {}
  // Host code that changes state outside tensors (an optimizer step, a scheduler step) runs between
  // begin_host and end_host; `replay` repeats it (HostRegion); `reads` are tensors whose values it
  // reads on the host.
  virtual void begin_host(const char* name, const std::function<void()>& replay, std::span<const Tensor* const> reads) {
  }
  virtual void end_host() {}
  // A step of a compiled graph that is not one kernel call (a fused group, named after what it
  // fused), with the FLOPs and bytes of the whole step; end_step() closes it.
  virtual void begin_step(std::string_view name, const OpCost& cost) {}
  virtual void end_step() {}
  // References to `storage` the observer holds (a tracer keeps every storage it saw alive), so that
  // code asking whether a tensor is the only user of its memory can leave them out.
  virtual long storage_refs(const StorageImpl* storage) { return 0; }
};

// Attaches / detaches an observer (not owned), from any thread, while other threads run ops. Once
// remove_observer returns, no thread is inside or will enter the observer's callbacks.
void add_observer(Observer* observer);
void remove_observer(Observer* observer);

namespace detail {
extern std::atomic<int> g_num_observers;
extern thread_local int t_unobserved;
void run_observed(const OpCall& call, KernelFn kernel);
void notify(const OpCall& call, bool begin);
}  // namespace detail

inline bool observed() { return detail::g_num_observers.load(std::memory_order_relaxed) != 0; }

// Ops run on this thread while one exists are hidden from every observer (they run, but a tracer
// does not record them and the profiler does not see them): host-side bookkeeping inside a traced
// function, such as the ONNX importer computing shapes from constants.
class Unobserved {
 public:
  Unobserved() { ++detail::t_unobserved; }
  ~Unobserved() { --detail::t_unobserved; }
  Unobserved(const Unobserved&) = delete;
  Unobserved& operator=(const Unobserved&) = delete;
};

// The kernel table of every backend (built on first use).
const KernelTable& kernel_table();
// Whether `device`'s backend has a kernel for `kind` (fused ops fall back to their decomposition
// where it has not).
inline bool has_kernel(OpKind kind, Device device) { return kernel_table().at(kind, device.type).fn != nullptr; }
// And whether that kernel writes results of `dtype`.
inline bool has_kernel(OpKind kind, Device device, DType dtype) {
  const KernelEntry& entry = kernel_table().at(kind, device.type);
  return entry.fn != nullptr && entry.dtypes.contains(dtype);
}

// Runs primitive `kind`. Every output is allocated by the caller; a null pointer or an undefined
// tensor is an absent optional operand.
void run(OpKind kind, const Attrs& attrs, std::span<const Tensor* const> inputs,
         std::span<const Tensor* const> outputs);
inline void run(OpKind kind, const Attrs& attrs, std::initializer_list<const Tensor*> inputs,
                std::initializer_list<const Tensor*> outputs) {
  run(kind, attrs, std::span<const Tensor* const>(inputs.begin(), inputs.size()),
      std::span<const Tensor* const>(outputs.begin(), outputs.size()));
}

// Runs primitive `kind` with the host's attributes (Note [host attributes]), or, when host->skip,
// tells the observers of the call without running the kernel (a tracer records it either way).
void run_host(OpKind kind, const std::shared_ptr<HostAttrs>& host, std::span<const Tensor* const> inputs,
              std::span<const Tensor* const> outputs);
inline void run_host(OpKind kind, const std::shared_ptr<HostAttrs>& host, std::initializer_list<const Tensor*> inputs,
                     std::initializer_list<const Tensor*> outputs) {
  run_host(kind, host, std::span<const Tensor* const>(inputs.begin(), inputs.size()),
           std::span<const Tensor* const>(outputs.begin(), outputs.size()));
}

// Tells observers that view op `kind` made `output` from `input` (a view runs no kernel).
void view_slow(OpKind kind, const Attrs& attrs, const Tensor& input, const Tensor& output);
inline void view(OpKind kind, const Attrs& attrs, const Tensor& input, const Tensor& output) {
  if (observed()) [[unlikely]]
    view_slow(kind, attrs, input, output);
}

// A composite op's scope (or, with CallKind::kBackward, the engine running a node's vjp): names
// kernel errors inside it (Note [error names]) and is an observed range around its primitives.
// Observers see at most the first four inputs.
class Scope {
 public:
  // `attrs` must be of the type the primitive table gives `kind` (NoAttrs for most composites).
  Scope(OpKind kind, std::initializer_list<const Tensor*> inputs, const Attrs& attrs = NoAttrs{},
        CallKind call_kind = CallKind::kComposite)
      : kind_(kind), call_kind_(call_kind) {
    if (attrs.index() != op_info(kind).attrs_index) [[unlikely]]
      fail_attrs(kind, attrs);
    // Observers first: if one throws, the scope never existed and the error context is untouched.
    if (observed()) [[unlikely]]
      begin(inputs, attrs);
    if (call_kind == CallKind::kComposite && op_context() == nullptr) {
      set_op_context(op_name(kind));
      owns_context_ = true;
    }
  }
  ~Scope() {
    if (owns_context_) set_op_context(nullptr);
    if (attrs_) [[unlikely]]
      end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(std::initializer_list<const Tensor*> inputs, const Attrs& attrs);
  void end() noexcept;
  OpCall call() const;
  [[noreturn]] static void fail_attrs(OpKind kind, const Attrs& attrs);

  OpKind kind_;
  CallKind call_kind_ = CallKind::kComposite;
  bool owns_context_ = false;
  int num_inputs_ = 0;
  const Tensor* inputs_[4] = {};
  int exceptions_ = 0;          // in flight when the scope began (an end with more: it threw)
  std::optional<Attrs> attrs_;  // set while observed
};

// The host-side events of Observer, sent to every observer (no-ops when none is attached).
void notify_random_draw(uint64_t seed, uint64_t first_block, int64_t blocks);
void notify_host_read(const char* what);
void notify_grad_slot(const Tensor& leaf, const Tensor& grad, bool accumulate);
// A compiled graph's step around `run` (Observer::begin_step / end_step).
void notify_begin_step(std::string_view name, const OpCost& cost);
void notify_end_step();
// The references to `storage` that observers hold (Observer::storage_refs).
long observer_storage_refs(const StorageImpl* storage);

// Marks host code that changes state a traced graph cannot see in its ops (an optimizer's step
// counters and learning rate, a scheduler's epoch, a loss scaler's decision to step): a tracer
// records `replay` as one step of the graph and replays it instead of the ops run inside the region,
// which it only notes as reads and writes. The region may read tensors' values on the host (a replay
// reads them anew): `reads` names them, so that the graph computes them before the region runs.
// Without observers, constructing one costs a load and a branch.
class HostRegion {
 public:
  HostRegion(const char* name, const std::function<void()>& replay, std::span<const Tensor* const> reads = {}) {
    if (observed()) [[unlikely]]
      begin(name, replay, reads);
  }
  HostRegion(const char* name, const std::function<void()>& replay, std::initializer_list<const Tensor*> reads)
      : HostRegion(name, replay, std::span<const Tensor* const>(reads.begin(), reads.size())) {}
  ~HostRegion() {
    if (active_) [[unlikely]]
      end();
  }
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;

 private:
  void begin(const char* name, const std::function<void()>& replay, std::span<const Tensor* const> reads);
  void end() noexcept;
  bool active_ = false;
};

}  // namespace ember::dispatch

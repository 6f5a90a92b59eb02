// The dispatch seam (dispatch.h): operand checks, the kernel table, observers.
#include "ops/dispatch.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "cuda/device_allocator.h"
#include "kernels/cpu/registry.h"
#include "ops/collective.h"

namespace ember::dispatch {
namespace detail {

std::atomic<int> g_num_observers{0};
thread_local int t_unobserved = 0;

namespace {

// Held shared while observers are called, exclusively while the list changes: detaching waits for
// the calls in flight (glibc's rwlock prefers readers, so a nested op inside a callback is fine).
std::shared_mutex g_observers_mutex;
std::vector<Observer*>& observers() {
  static std::vector<Observer*> list;
  return list;
}

}  // namespace

void notify(const OpCall& call, bool begin) {
  if (t_unobserved != 0) return;
  const std::shared_lock<std::shared_mutex> lock(g_observers_mutex);
  for (Observer* o : observers()) {
    if (begin) {
      o->begin(call);
    } else {
      o->end(call);
    }
  }
}

void run_observed(const OpCall& call, KernelFn kernel) {
  notify(call, true);
  try {
    kernel(*call.kernel);
  } catch (...) {
    OpCall failed = call;
    failed.failed = true;
    notify(failed, false);
    throw;
  }
  notify(call, false);
}

}  // namespace detail

void add_observer(Observer* observer) {
  ember::detail::set_host_read_hook(&notify_host_read);
  const std::lock_guard<std::shared_mutex> lock(detail::g_observers_mutex);
  detail::observers().push_back(observer);
  detail::g_num_observers.store(static_cast<int>(detail::observers().size()), std::memory_order_relaxed);
}

void remove_observer(Observer* observer) {
  const std::lock_guard<std::shared_mutex> lock(detail::g_observers_mutex);
  std::erase(detail::observers(), observer);
  detail::g_num_observers.store(static_cast<int>(detail::observers().size()), std::memory_order_relaxed);
}

namespace {
template <class Fn>
void for_each_observer(Fn fn) {
  if (!observed() || detail::t_unobserved != 0) return;
  const std::shared_lock<std::shared_mutex> lock(detail::g_observers_mutex);
  for (Observer* o : detail::observers()) fn(*o);
}
}  // namespace

void notify_random_draw(uint64_t seed, uint64_t first_block, int64_t blocks) {
  for_each_observer([&](Observer& o) { o.random_draw(seed, first_block, blocks); });
}
void notify_host_read(const char* what) {
  for_each_observer([&](Observer& o) { o.host_read(what); });
}
void notify_grad_slot(const Tensor& leaf, const Tensor& grad, bool accumulate) {
  for_each_observer([&](Observer& o) { o.grad_slot(leaf, grad, accumulate); });
}

void notify_begin_step(std::string_view name, const OpCost& cost) {
  for_each_observer([&](Observer& o) { o.begin_step(name, cost); });
}
void notify_end_step() {
  for_each_observer([](Observer& o) { o.end_step(); });
}

long observer_storage_refs(const StorageImpl* storage) {
  long refs = 0;
  for_each_observer([&](Observer& o) { refs += o.storage_refs(storage); });
  return refs;
}

void HostRegion::begin(const char* name, const std::function<void()>& replay, std::span<const Tensor* const> reads) {
  for_each_observer([&](Observer& o) { o.begin_host(name, replay, reads); });
  active_ = true;
}
void HostRegion::end() noexcept {
  try {
    for_each_observer([](Observer& o) { o.end_host(); });
  } catch (...) {  // NOLINT(bugprone-empty-catch): an observer's failure cannot fail the region
  }
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    cpu::register_kernels(t);
    collective::register_collective_kernels(t);
    cuda::register_backend(t);
    return t;
  }();
  return table;
}

namespace {

constexpr int kMaxOperands = 10;  // the attention gradient: 7 inputs, 3 outputs

// The operand a kernel sees of tensor `t` (absent: null or undefined).
inline Operand operand_of(const Tensor* t) {
  if (t == nullptr || !t->defined()) return {nullptr, kFloat32, kCPU, nullptr, nullptr, false, nullptr};
  const TensorImpl& impl = t->impl();
  void* data = static_cast<char*>(impl.storage->data()) + impl.offset * dtype_size(impl.dtype);
  return {data, impl.dtype, impl.storage->device(), &impl.shape, &impl.strides, impl.contiguous, impl.storage.get()};
}

// Room for the operands of one call, constructed one by one (the unused slots stay untouched).
union OperandSlots {
  OperandSlots() {}
  Operand slots[kMaxOperands];
};

[[noreturn]] void fail_device(const char* name, Device a, Device b) {
  EMBER_FAIL("[", name, "] expected all tensors on the same device, got ", a, " and ", b);
}

std::string dtype_list(DTypeSet set) {
  std::string out;
  for (int d = 0; d < kNumDTypes; ++d) {
    if (!set.contains(static_cast<DType>(d))) continue;
    out += (out.empty() ? "" : ", ") + std::string(dtype_name(static_cast<DType>(d)));
  }
  return out;
}

}  // namespace

namespace {

void run_call(OpKind kind, const Attrs& attrs, std::span<const Tensor* const> inputs,
              std::span<const Tensor* const> outputs, const std::shared_ptr<HostAttrs>* host) {
  EMBER_CHECK(attrs.index() == op_info(kind).attrs_index, "[", op_name(kind), "] internal error: called with the ",
              "attributes of another op (alternative ", attrs.index(), ")");
  OperandSlots slots;
  Operand* operands = slots.slots;
  const int num_inputs = static_cast<int>(inputs.size()), num_outputs = static_cast<int>(outputs.size());
  EMBER_CHECK(num_outputs >= 1 && num_inputs + num_outputs <= kMaxOperands, "[", op_name(kind),
              "] internal error: expected 1 to ", kMaxOperands, " operands with at least one output");
  // One device for all operands; the leading operand (first input, else first output) gives it.
  const Operand* lead = nullptr;
  int k = 0;
  auto add = [&](const Tensor* t) {
    const Operand* o = std::construct_at(&operands[k++], operand_of(t));
    if (!o->defined()) return;
    if (lead == nullptr) {
      lead = o;
    } else if (o->device != lead->device) [[unlikely]] {
      fail_device(error_name(kind), lead->device, o->device);
    }
  };
  for (const Tensor* t : inputs) add(t);
  for (const Tensor* t : outputs) add(t);
  EMBER_CHECK(lead != nullptr, "[", op_name(kind), "] internal error: no operands");
  const KernelEntry& entry = kernel_table().at(kind, lead->device.type);
  if (entry.fn == nullptr) [[unlikely]] {
    EMBER_FAIL("[", error_name(kind), "] not implemented on ", lead->device);
  }
  const Operand& result = operands[num_inputs];
  if (result.defined() && !entry.dtypes.contains(result.dtype)) [[unlikely]] {
    EMBER_FAIL("[", error_name(kind), "] the ", lead->device.is_cpu() ? "CPU" : "CUDA", " kernel computes ",
               dtype_list(entry.dtypes), ", not ", result.dtype);
  }

  const KernelCall call{kind, attrs, std::span<const Operand>(operands, num_inputs),
                        std::span<const Operand>(operands + num_inputs, num_outputs)};
  const bool skip = host != nullptr && (*host)->skip;
  if (observed()) [[unlikely]] {
    const OpCall observed_call{kind, CallKind::kKernel, current_phase(), attrs, inputs, outputs, &call, false, host};
    if (skip) {
      detail::notify(observed_call, true);
      detail::notify(observed_call, false);
    } else {
      detail::run_observed(observed_call, entry.fn);
    }
    return;
  }
  if (!skip) entry.fn(call);
}

}  // namespace

void run(OpKind kind, const Attrs& attrs, std::span<const Tensor* const> inputs,
         std::span<const Tensor* const> outputs) {
  run_call(kind, attrs, inputs, outputs, nullptr);
}

void run_host(OpKind kind, const std::shared_ptr<HostAttrs>& host, std::span<const Tensor* const> inputs,
              std::span<const Tensor* const> outputs) {
  run_call(kind, host->attrs, inputs, outputs, &host);
}

void view_slow(OpKind kind, const Attrs& attrs, const Tensor& input, const Tensor& output) {
  const Tensor* in[1] = {&input};
  const Tensor* out[1] = {&output};
  const OpCall call{kind, CallKind::kView, current_phase(), attrs, in, out, nullptr};
  detail::notify(call, true);
  detail::notify(call, false);
}

void Scope::begin(std::initializer_list<const Tensor*> inputs, const Attrs& attrs) {
  for (const Tensor* t : inputs) {
    if (num_inputs_ == 4) break;
    inputs_[num_inputs_++] = t;
  }
  attrs_.emplace(attrs);
  exceptions_ = std::uncaught_exceptions();
  detail::notify(call(), true);
}

void Scope::end() noexcept {
  OpCall c = call();
  c.failed = std::uncaught_exceptions() > exceptions_;
  try {
    detail::notify(c, false);
  } catch (...) {  // NOLINT(bugprone-empty-catch): an observer's failure cannot fail the op
  }
}

void Scope::fail_attrs(OpKind kind, const Attrs& attrs) {
  EMBER_FAIL("[", op_name(kind), "] internal error: a scope with the attributes of another op (alternative ",
             attrs.index(), ")");
}

OpCall Scope::call() const {
  return {kind_, call_kind_, current_phase(), *attrs_, {inputs_, static_cast<size_t>(num_inputs_)}, {}, nullptr};
}

}  // namespace ember::dispatch

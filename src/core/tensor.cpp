// Tensor metadata and element access. Views, copies and every other op are in src/ops/; the
// autograd surface of Tensor (backward, hooks, grad) is in src/autograd/graph.cpp.
#include <atomic>
#include <utility>

#include "base/kernel.h"
#include "core/allocator.h"
#include "core/block_pool.h"
#include "core/tensor_impl.h"

namespace ember {

namespace {

// A spin lock over the derived forms: they are looked up once per kernel call, and held for a few
// comparisons, never while a form is made.
class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& flag) : flag_(flag) {
    while (flag_.test_and_set(std::memory_order_acquire)) flag_.wait(true, std::memory_order_relaxed);
  }
  ~SpinGuard() {
    flag_.clear(std::memory_order_release);
    flag_.notify_one();
  }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag& flag_;
};

// Forms kept per storage; a storage read by kernels under more keys keeps the newest.
constexpr size_t kMaxDerivedForms = 4;

}  // namespace

std::shared_ptr<const void> StorageImpl::derived(const DerivedKey& key) const {
  if (shared_outside()) return nullptr;
  const SpinGuard guard(derived_lock_);
  for (const DerivedForm& d : derived_) {
    if (d.key == key) return d.version == version() ? d.form : nullptr;
  }
  return nullptr;
}

void StorageImpl::keep_derived(const DerivedKey& key, uint32_t version, std::shared_ptr<const void> form) {
  if (shared_outside()) return;
  std::shared_ptr<const void> retired;  // freed after the lock is released
  const SpinGuard guard(derived_lock_);
  for (DerivedForm& d : derived_) {
    if (d.key == key) {
      retired = std::exchange(d.form, std::move(form));
      d.version = version;
      return;
    }
  }
  if (derived_.size() == kMaxDerivedForms) {
    retired = std::move(derived_.front().form);
    derived_.erase(derived_.begin());
  }
  derived_.push_back({key, version, std::move(form)});
}

std::shared_ptr<const void> derived_form(const Operand& o, const DerivedKey& key,
                                         const std::function<std::shared_ptr<const void>()>& make) {
  if (o.storage == nullptr) return make();
  std::shared_ptr<const void> form = o.storage->derived(key);
  if (form == nullptr) {
    const uint32_t version = o.storage->version();  // read first: a write while make() runs retires the form
    form = make();
    o.storage->keep_derived(key, version, form);
  }
  return form;
}

std::shared_ptr<const void> derived_form_on_reuse(const Operand& o, const DerivedKey& key,
                                                  const std::function<std::shared_ptr<const void>()>& make) {
  if (o.storage == nullptr) return nullptr;
  if (std::shared_ptr<const void> form = o.storage->derived(key)) return form;
  const uint32_t version = o.storage->version();  // read first: a write while make() runs retires the form
  DerivedKey seen = key;
  seen[0] = ~seen[0];
  if (o.storage->derived(seen) == nullptr) {
    static const std::shared_ptr<const void> kSeen = std::make_shared<int>(0);
    o.storage->keep_derived(seen, version, kSeen);
    // A form of an older version (a weight packed for an evaluation, then trained on) is freed
    // now rather than held until the next one replaces it.
    o.storage->keep_derived(key, version, nullptr);
    return nullptr;
  }
  std::shared_ptr<const void> form = make();
  o.storage->keep_derived(key, version, form);
  return form;
}

namespace detail {

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset) {
  // A block-quantized tensor's values are not addressable one by one: only the whole tensor, as it
  // is, can be seen again (detach, an identity reshape).
  EMBER_CHECK(!is_block_quantized(base.dtype()) || (shape == base.shape() && strides == base.strides() && offset == 0),
              "[view] a ", base.dtype(), " tensor is block-quantized and cannot be viewed as shape ", shape,
              "; dequantize it first");
  auto impl = detail::make_pooled<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->set_geometry(shape, strides, offset);
  impl->dtype = base.dtype();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

}  // namespace detail

int64_t Tensor::size(int64_t dim) const { return shape()[normalize_axis(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[normalize_axis(dim, this->dim(), "stride")]; }

void* Tensor::data_ptr() const { return static_cast<char*>(impl().storage->data()) + impl().offset * element_size(); }

Tensor& Tensor::requires_grad_(bool value) {
  EMBER_CHECK(!value || is_floating_point(), "[requires_grad_] only floating-point tensors can require gradients, got ",
              dtype());
  impl().requires_grad = value;
  return *this;
}

namespace detail {
namespace {
std::atomic<HostReadHook> g_host_read_hook{nullptr};
}  // namespace
void set_host_read_hook(HostReadHook hook) { g_host_read_hook.store(hook, std::memory_order_relaxed); }
void note_host_read(const char* what) {
  if (HostReadHook hook = g_host_read_hook.load(std::memory_order_relaxed)) hook(what);
}
}  // namespace detail

Scalar Tensor::item() const {
  detail::note_host_read("item");
  EMBER_CHECK(numel() == 1, "[item] a tensor with ", numel(), " elements (shape ", shape(),
              ") cannot be converted to a scalar");
  return dispatch_dtype(dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    T value;
    copy_bytes(&value, kCPU, data_ptr(), device(), sizeof(T));
    return Scalar(value);
  });
}

Scalar Tensor::at(const Shape& index) const {
  detail::note_host_read("at");
  EMBER_CHECK(index.size() == dim(), "[at] index has ", index.size(), " entries, tensor of shape ", shape(), " has ",
              dim(), " dimensions");
  int64_t offset = 0;
  for (int d = 0; d < dim(); ++d) {
    int64_t i = index[d];
    EMBER_CHECK(i >= -shape()[d] && i < shape()[d], "[at] index ", i, " is out of range for dimension ", d, " of size ",
                shape()[d]);
    if (i < 0) i += shape()[d];
    offset += i * strides()[d];
  }
  return dispatch_dtype(dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    T value;
    copy_bytes(&value, kCPU, static_cast<const T*>(data_ptr()) + offset, device(), sizeof(T));
    return Scalar(value);
  });
}

}  // namespace ember

// Tensor: a cheap, refcounted handle to a TensorImpl (storage + shape + strides + offset + dtype +
// device + autograd links). Views share storage; ops live in ember/ops.h and are also reachable
// as methods and operators here.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/handle.h"
#include "ember/op_list.h"
#include "ember/scalar.h"
#include "ember/shape.h"

namespace ember {

namespace autograd {
class Node;
}

struct ValuesAndIndices;  // sort and topk's result (below Tensor)

// One allocation of device memory. Views share it; the version counter lives here so that every
// view of the same memory sees in-place writes.
class StorageImpl {
 public:
  using Deleter = void (*)(void* data, int64_t nbytes, void* context);
  StorageImpl(void* data, int64_t nbytes, Device device, Deleter deleter, void* context)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), context_(context) {}
  ~StorageImpl() {
    if (deleter_ != nullptr) deleter_(data_, nbytes_, context_);
  }
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Note [derived forms]: a kernel may keep a form it derived from this memory (a convolution's
  // packed weight) here, under a key of its own that names what was derived and how, so the next
  // call finds it instead of deriving it again. A form is valid for the version it was made at:
  // any write through ember (an optimizer step, copy_, load_state_dict, an in-place op) bumps the
  // version and retires it; code that writes through data_ptr() must call bump_version() after.
  // Memory shared with another library (NumPy, DLPack: share_outside) keeps no form, since its
  // writes never reach the version. A form is freed with the storage, or when a newer form takes
  // its key. Both calls are thread-safe.
  using DerivedKey = std::array<int64_t, 8>;
  // The form kept under `key` for the current version, or null.
  std::shared_ptr<const void> derived(const DerivedKey& key) const;
  // Keeps `form` under `key`, made at version `version` (read before deriving it).
  void keep_derived(const DerivedKey& key, uint32_t version, std::shared_ptr<const void> form);
  // The memory is also another library's to read and write (exported to or imported from NumPy
  // or DLPack): nothing derived from it is kept from then on.
  void share_outside() { shared_outside_.store(true, std::memory_order_relaxed); }
  bool shared_outside() const { return shared_outside_.load(std::memory_order_relaxed); }

 private:
  struct DerivedForm {
    DerivedKey key{};
    uint32_t version = 0;
    std::shared_ptr<const void> form;
  };
  void* data_;
  int64_t nbytes_;
  Device device_;
  Deleter deleter_;
  void* context_;
  std::atomic<uint32_t> version_{0};
  mutable std::atomic_flag derived_lock_;
  std::vector<DerivedForm> derived_;
  std::atomic<bool> shared_outside_{false};
};

struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  Shape shape;
  Strides strides;     // in elements; may be 0 (broadcast)
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  bool contiguous = true;  // is_contiguous_layout(shape, strides), kept in step by set_geometry()
  // Sets shape, strides and offset (and with them `contiguous`): the one way to change them once
  // made (make_tensor gives a fresh tensor its contiguous layout directly).
  void set_geometry(const Shape& new_shape, const Strides& new_strides, int64_t new_offset) {
    shape = new_shape;
    strides = new_strides;
    offset = new_offset;
    contiguous = is_contiguous_layout(new_shape, new_strides);
  }
  // autograd links, used by the autograd layer
  bool requires_grad = false;
  bool is_view = false;  // shares another tensor's storage (made by a view op or detach)
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;           // the op that produced this tensor (null: leaf)
  std::shared_ptr<autograd::Node> grad_accumulator;  // a leaf's gradient sink, made on first use
};

// Options for factory functions: dtype (unset means the function's default), device, requires_grad.
struct TensorOptions {
  std::optional<DType> dtype;
  Device device = kCPU;
  bool requires_grad = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}    // NOLINT(google-explicit-constructor)
  TensorOptions(Device d) : device(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions with_dtype(DType d) const {
    TensorOptions o = *this;
    o.dtype = d;
    return o;
  }
  TensorOptions with_requires_grad(bool r) const {
    TensorOptions o = *this;
    o.requires_grad = r;
    return o;
  }
  DType dtype_or(DType fallback) const { return dtype.value_or(fallback); }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata -------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int dim() const { return impl().shape.size(); }
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t offset() const { return impl().offset; }
  int64_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const { return impl().contiguous; }
  bool is_floating_point() const { return is_floating(dtype()); }
  uint32_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }

  // Pointer to the first element (storage base + offset). Typed access checks the dtype. A write
  // through it does not move the version: call bump_version() after (Note [derived forms]).
  void* data_ptr() const;
  template <class T>
  T* data_ptr() const {
    EMBER_CHECK(dtype_of<T>() == dtype(), "[data_ptr] tensor has dtype ", dtype(), ", requested ", dtype_of<T>());
    return static_cast<T*>(data_ptr());
  }

  TensorImpl& impl() const {
    EMBER_CHECK(impl_ != nullptr, "[tensor] use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  bool shares_storage(const Tensor& other) const { return impl().storage == other.impl().storage; }

  // --- autograd (see ember/autograd.h) ------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool value = true);
  // The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& grad) const;
  // A leaf was made by the user (no grad_fn); only leaves (and retain_grad tensors) get .grad.
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  // Backpropagates from this tensor (a one-element tensor unless `gradient` is given).
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  // Calls hook(grad) whenever the gradient with respect to this tensor is computed; a defined
  // return value replaces the gradient.
  RemovableHandle register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Keeps .grad for a non-leaf tensor too.
  void retain_grad() const;

  // --- element access ---------------------------------------------------------------------------
  Scalar item() const;
  template <class T>
  T item() const {
    return item().to<T>();
  }
  // The element at a full index (one entry per dim, negative counts from the end).
  Scalar at(const Shape& index) const;
  template <class T>
  T at(const Shape& index) const {
    return at(index).to<T>();
  }
  // Copies the elements out, in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // --- views (share storage) --------------------------------------------------------------------
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Axes& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor as_strided(const Shape& shape, const Strides& strides, std::optional<int64_t> offset = std::nullopt) const;
  Tensor detach() const;

  // --- copies -----------------------------------------------------------------------------------
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor when it is there already), recorded for autograd: the gradient
  // flows back to this tensor's device. cuda() and cpu() are to(cuda:index) and to(cpu).
  Tensor to(Device device) const;
  Tensor cuda(int index = 0) const;
  Tensor cpu() const;
  // Copies src's values (broadcast to this tensor's shape, converted to its dtype) into this
  // tensor; src may be on another device.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();

  // --- ops as methods (see ember/ops.h) -----------------------------------------------------------
  // One set per row of the op table's uniform families (ember/op_list.h): x.neg(), x.neg_(),
  // x.add(y), x.add(2.0), x.add_(y), x.eq(y), x.sum(), x.sum({0}, true), ...
#define EMBER_DECLARE_UNARY_METHODS(kind, fn, ...) \
  Tensor fn() const;                               \
  Tensor& fn##_();
  EMBER_UNARY_MATH(EMBER_DECLARE_UNARY_METHODS)
#undef EMBER_DECLARE_UNARY_METHODS
#define EMBER_DECLARE_PREDICATE_METHOD(kind, fn, ...) Tensor fn() const;
  EMBER_UNARY_PREDICATES(EMBER_DECLARE_PREDICATE_METHOD)
#undef EMBER_DECLARE_PREDICATE_METHOD
#define EMBER_DECLARE_BINARY_METHODS(kind, fn, ...) \
  Tensor fn(const Tensor& o) const;                 \
  Tensor& fn##_(const Tensor& o);
  EMBER_BINARY_MATH(EMBER_DECLARE_BINARY_METHODS)
#undef EMBER_DECLARE_BINARY_METHODS
#define EMBER_DECLARE_SCALAR_BINARY_METHODS(kind, fn, ...) \
  Tensor fn(const Scalar& o) const;                        \
  Tensor& fn##_(const Scalar& o);
  EMBER_BINARY_ARITHMETIC(EMBER_DECLARE_SCALAR_BINARY_METHODS)
#undef EMBER_DECLARE_SCALAR_BINARY_METHODS
#define EMBER_DECLARE_COMPARISON_METHOD(kind, fn, ...) Tensor fn(const Tensor& o) const;
  EMBER_COMPARISONS(EMBER_DECLARE_COMPARISON_METHOD)
#undef EMBER_DECLARE_COMPARISON_METHOD
#define EMBER_DECLARE_SCALAR_COMPARISON_METHOD(kind, fn, ...) Tensor fn(const Scalar& o) const;
  EMBER_RELATIONS(EMBER_DECLARE_SCALAR_COMPARISON_METHOD)
#undef EMBER_DECLARE_SCALAR_COMPARISON_METHOD
#define EMBER_DECLARE_REDUCTION_METHODS(kind, fn, ...) \
  Tensor fn() const;                                   \
  Tensor fn(const Axes& dims, bool keepdim = false) const;
  EMBER_DIM_REDUCTIONS(EMBER_DECLARE_REDUCTION_METHODS)
#undef EMBER_DECLARE_REDUCTION_METHODS

  Tensor gelu(std::string_view approximate = "none") const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);

  Tensor max() const;  // amax
  Tensor max(const Axes& dims, bool keepdim = false) const;
  Tensor min() const;  // amin
  Tensor min(const Axes& dims, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor var(const Axes& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Axes& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const Axes& dims, bool keepdim = false) const;
  Tensor norm(double p = 2.0, const Axes& dims = {}, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  Tensor matmul(const Tensor& o) const;

  Tensor repeat(const Shape& repeats) const;
  Tensor flip(const Axes& dims) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  ValuesAndIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  ValuesAndIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// What sort and topk return: the values and their int64 indices along the sorted dim.
struct ValuesAndIndices {
  Tensor values;
  Tensor indices;
};

// Operators, as in PyTorch: arithmetic and comparisons return tensors.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Scalar& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Scalar& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Scalar& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Scalar& b);

// Prints like PyTorch: values, then shape/dtype details where PyTorch would show them.
std::ostream& operator<<(std::ostream& out, const Tensor& t);

namespace detail {
// Host code reading a tensor's values (item, at, to_vector): a tracer (ember::compile) rejects it,
// as the value would be baked into the compiled graph.
using HostReadHook = void (*)(const char* what);
void set_host_read_hook(HostReadHook hook);
void note_host_read(const char* what);
}  // namespace detail

template <class T>
std::vector<T> Tensor::to_vector() const {
  detail::note_host_read("to_vector");
  const Tensor c = to(kCPU).to(dtype_of<T>()).contiguous();
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}

}  // namespace ember

// What a kernel sees of an op call, and the table of kernels per (op, device type).
//
// A kernel is a function of one KernelCall: the op, its typed attributes, and its operands as raw
// memory (a pointer to the first element, dtype, device, shape and strides in elements), never a
// Tensor. The dispatch seam (src/ops/dispatch.h) builds the call from tensors; the graph executor
// and importers can build it from their own buffers. Each backend fills its column of the
// KernelTable once (kernels/cpu/registry.cpp for the CPU); an empty slot is an op the backend does
// not implement, and dispatch says so ("[conv2d] not implemented on cuda:0").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "base/op_context.h"
#include "ember/attrs.h"
#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/primitives.h"
#include "ember/shape.h"

namespace ember {

class StorageImpl;

// One tensor operand of a kernel. An optional operand that was not given (a linear without bias)
// has no shape.
struct Operand {
  void* data = nullptr;  // the first element (storage + offset)
  DType dtype = kFloat32;
  Device device;
  const Shape* shape = nullptr;
  const Strides* strides = nullptr;  // in elements; 0 on broadcast dims
  bool contiguous = false;           // is_contiguous_layout(*shape, *strides)
  // The tensor storage `data` lies in, where there is one (a compiled plan's temporaries have
  // none): a kernel may keep a form derived from it there (derived_form below).
  StorageImpl* storage = nullptr;

  bool defined() const { return shape != nullptr; }
  int dim() const { return shape->size(); }
  int64_t numel() const { return shape->numel(); }
  // Size and stride of dim d; negative d counts from the end.
  int64_t size(int d) const { return (*shape)[d < 0 ? d + dim() : d]; }
  int64_t stride(int d) const { return (*strides)[d < 0 ? d + dim() : d]; }
  bool is_contiguous() const { return contiguous; }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

struct KernelCall {
  OpKind kind;
  const Attrs& attrs;
  std::span<const Operand> inputs;
  std::span<const Operand> outputs;

  // The op's name for an error message: the composite the user called, if any (op_context.h).
  const char* name() const { return error_name(kind); }
  // The op's attributes as their type (dispatch has checked that they are the op's type).
  template <class A>
  const A& get() const {
    return *std::get_if<A>(&attrs);
  }
};

using KernelFn = void (*)(const KernelCall& call);

// The form `make` derives from operand o's memory (a convolution's packed weight), kept on o's
// storage under `key` (what was derived, and how) and made again only once the memory was written
// (Note [derived forms] in ember/tensor.h). Without a storage, make() every call. Thread-safe;
// defined by the core layer (src/core/tensor.cpp), which owns the storage.
using DerivedKey = std::array<int64_t, 8>;
std::shared_ptr<const void> derived_form(const Operand& o, const DerivedKey& key,
                                         const std::function<std::shared_ptr<const void>()>& make);
// As derived_form, for forms that pay only when they are used again: make() runs at the second
// request of a version. The first returns null, leaves a marker (no allocation) under `key`
// with its first element complemented, and frees the form of an older version. Without a
// storage: null, make() never runs.
std::shared_ptr<const void> derived_form_on_reuse(const Operand& o, const DerivedKey& key,
                                                  const std::function<std::shared_ptr<const void>()>& make);

// A set of dtypes (a bit per DType).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= bit(d);
  }
  static constexpr DTypeSet all() {
    DTypeSet s;
    s.bits_ = (1u << kNumElementDTypes) - 1;  // the block-quantized dtypes are opt-in
    return s;
  }
  constexpr bool contains(DType d) const { return (bits_ & bit(d)) != 0; }
  constexpr DTypeSet without(DType d) const {
    DTypeSet s;
    s.bits_ = bits_ & ~bit(d);
    return s;
  }

 private:
  static constexpr uint32_t bit(DType d) { return 1u << static_cast<int>(d); }
  uint32_t bits_ = 0;
};

inline constexpr DTypeSet kFloatTypes{kFloat32, kFloat64, kFloat16, kBFloat16};
inline constexpr DTypeSet kFloat32Or64{kFloat32, kFloat64};

// A kernel and the dtypes of the results it can write (its first output's dtype); dispatch rejects
// the others with a clear error. The other operands' dtypes are the front-end's contract with the
// kernel (the same dtype as the result, int64 indices, a bool condition), checked by the front-ends:
// a caller of dispatch::run that builds calls itself must keep it.
struct KernelEntry {
  KernelFn fn = nullptr;
  DTypeSet dtypes;
};

class KernelTable {
 public:
  void add(OpKind kind, DeviceType device, KernelFn fn, DTypeSet dtypes) {
    entries_[static_cast<int>(kind)][static_cast<int>(device)] = {fn, dtypes};
  }
  const KernelEntry& at(OpKind kind, DeviceType device) const {
    return entries_[static_cast<int>(kind)][static_cast<int>(device)];
  }

 private:
  KernelEntry entries_[kNumOps][kNumDeviceTypes] = {};
};

}  // namespace ember

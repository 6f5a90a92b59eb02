// Copies: contiguous, clone, to(dtype), copy_, fill_ and zero_, on the Copy and Fill primitives.
// Shape rule: copy_ broadcasts its source to the destination's shape. Dtype rule: to() converts as a
// C++ static_cast would after clamping (float -> integer saturates at int64's range, NaN -> 0).
// Cost: none computed; bytes = source read + destination written (the Copy and Fill cost rules).
// Backward: a copy passes the gradient through (the engine casts it back to the input's dtype);
// copy_'s overwritten value and fill_'s get a zero gradient. In-place forms take part in autograd
// through autograd::inplace.
#include <cstring>

#include "autograd/function.h"
#include "core/allocator.h"
#include "ember/ops.h"
#include "ember/quant.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using autograd::GradMask;
using autograd::Grads;

// A block-quantized tensor (always contiguous) is copied as its bytes; converting to or from a block
// dtype quantizes or dequantizes (ember/quant.h).
Tensor block_copy_of(const Tensor& t, DType dtype) {
  if (is_block_quantized(dtype) && t.dtype() != dtype) return quantize(t, dtype);
  if (t.dtype() != dtype) return dequantize(t).to(dtype);
  Tensor out = detail::make_empty(t.shape(), dtype, t.device(), "copy");
  EMBER_CHECK(t.device().is_cpu(), "[copy] ", dtype, " tensors are copied on the CPU only, got one on ", t.device());
  std::memcpy(out.data_ptr(), t.data_ptr(), static_cast<size_t>(storage_bytes(dtype, t.numel())));
  return out;
}

// A contiguous copy of `t` in `dtype`, recording nothing.
Tensor copy_of(const Tensor& t, DType dtype) {
  if (is_block_quantized(t.dtype()) || is_block_quantized(dtype)) return block_copy_of(t, dtype);
  Tensor out = detail::make_empty(t.shape(), dtype, t.device(), "copy");
  detail::copy_into(out, t);
  return out;
}

// A copy of `t` whose gradient passes through.
Tensor copy_with_grad(const Tensor& t, DType dtype) {
  Tensor out = copy_of(t, dtype);
  if (autograd::needs_grad(t) && !is_block_quantized(dtype)) {  // quantizing records no gradient
    autograd::record(OpKind::kCopy, {}, out, {&t}, [](const Tensor& g, GradMask) -> Grads { return {g}; });
  }
  return out;
}

}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const { return copy_with_grad(*this, dtype()); }

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  return copy_with_grad(*this, dtype);
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  const Tensor source = is_contiguous() ? *this : copy_of(*this, dtype());  // on its own device
  Tensor out = detail::make_empty(shape(), dtype(), device, "to");
  copy_bytes(out.data_ptr(), device, source.data_ptr(), this->device(), storage_bytes(dtype(), numel()));
  if (autograd::needs_grad(*this)) {
    autograd::record(OpKind::kCopy, {}, out, {this},
                     [from = this->device()](const Tensor& g, GradMask) -> Grads { return {g.to(from)}; });
  }
  return out;
}

Tensor Tensor::cuda(int index) const { return to(Device{DeviceType::kCUDA, index}); }
Tensor Tensor::cpu() const { return to(kCPU); }

Tensor& Tensor::copy_(const Tensor& src) {
  if (src.defined() && defined() && src.device() != device()) return copy_(src.to(device()));
  detail::check_same_device("copy_", {this, &src});
  if (is_block_quantized(dtype()) || is_block_quantized(src.dtype())) {
    EMBER_CHECK(dtype() == src.dtype() && shape() == src.shape(), "[copy_] a ",
                is_block_quantized(dtype()) ? dtype() : src.dtype(),
                " tensor copies only into one of the same dtype and shape, got ", src.dtype(), " ", src.shape(),
                " into ", dtype(), " ", shape());
    if (!is_same(src)) std::memcpy(data_ptr(), src.data_ptr(), static_cast<size_t>(storage_bytes(dtype(), numel())));
    bump_version();
    return *this;
  }
  EMBER_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), "[copy_] source of shape ", src.shape(),
              " cannot be broadcast to the destination's shape ", shape());
  detail::check_no_internal_overlap("copy_", *this);
  if (autograd::needs_grad(*this, src)) {
    // The old value gets no gradient (it is overwritten); src gets the gradient, summed over the
    // dims it was broadcast along and cast to its dtype by the engine. src is read before *this is
    // written, so sharing memory with it is harmless.
    return autograd::inplace("copy_", *this, [&src](const Tensor& old) {
      Tensor result = detail::make_empty(old.shape(), old.dtype(), old.device());
      detail::copy_into(result, src);
      autograd::record(OpKind::kCopy, {}, result, {&old, &src}, [](const Tensor& g, GradMask needs) -> Grads {
        return {needs[0] ? zeros_like(g) : Tensor(), needs[1] ? g : Tensor()};
      });
      return result;
    });
  }
  // Overlapping source and destination: copy through a temporary.
  const Tensor source = shares_storage(src) ? copy_of(src, src.dtype()) : src;
  detail::copy_into(*this, source);
  bump_version();
  return *this;
}

namespace {

// fill_ and zero_: with autograd, the old value gets a zero gradient (it is overwritten). Writing
// one value through a tensor whose elements share memory is harmless, as in PyTorch.
Tensor& fill_impl(Tensor& self, const Scalar& value, const char* name) {
  if (autograd::needs_grad(self)) {
    return autograd::inplace(name, self, [&value](const Tensor& old) {
      Tensor result = detail::make_empty(old.shape(), old.dtype(), old.device());
      dispatch::run(OpKind::kFill, FillAttrs{value}, {}, {&result});
      autograd::record(OpKind::kFill, FillAttrs{value}, result, {&old},
                       [](const Tensor& g, GradMask) -> Grads { return {zeros_like(g)}; });
      return result;
    });
  }
  dispatch::run(OpKind::kFill, FillAttrs{value}, {}, {&self});
  self.bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::fill_(const Scalar& value) { return fill_impl(*this, value, "fill_"); }

Tensor& Tensor::zero_() { return fill_impl(*this, 0, "zero_"); }

}  // namespace ember

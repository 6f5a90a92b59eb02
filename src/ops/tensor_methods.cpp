// Tensor methods and operators: each forwards to the free function in ember/ops.h.
#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/elementwise.h"
#include "ops/tensor_util.h"

namespace ember {

// The uniform families' methods, one set per row of the op table (ember/op_list.h).
#define EMBER_DEFINE_UNARY_METHOD(kind, fn, ...) \
  Tensor Tensor::fn() const { return ember::fn(*this); }
EMBER_UNARY_MATH(EMBER_DEFINE_UNARY_METHOD)
EMBER_UNARY_PREDICATES(EMBER_DEFINE_UNARY_METHOD)
#undef EMBER_DEFINE_UNARY_METHOD
#define EMBER_DEFINE_BINARY_METHOD(kind, fn, ...) \
  Tensor Tensor::fn(const Tensor& o) const { return ember::fn(*this, o); }
EMBER_BINARY_MATH(EMBER_DEFINE_BINARY_METHOD)
EMBER_COMPARISONS(EMBER_DEFINE_BINARY_METHOD)
#undef EMBER_DEFINE_BINARY_METHOD
#define EMBER_DEFINE_SCALAR_BINARY_METHOD(kind, fn, ...) \
  Tensor Tensor::fn(const Scalar& o) const { return ember::fn(*this, o); }
EMBER_BINARY_ARITHMETIC(EMBER_DEFINE_SCALAR_BINARY_METHOD)
EMBER_RELATIONS(EMBER_DEFINE_SCALAR_BINARY_METHOD)
#undef EMBER_DEFINE_SCALAR_BINARY_METHOD
#define EMBER_DEFINE_REDUCTION_METHOD(kind, fn, ...)     \
  Tensor Tensor::fn() const { return ember::fn(*this); } \
  Tensor Tensor::fn(const Axes& dims, bool keepdim) const { return ember::fn(*this, dims, keepdim); }
EMBER_DIM_REDUCTIONS(EMBER_DEFINE_REDUCTION_METHOD)
#undef EMBER_DEFINE_REDUCTION_METHOD

Tensor Tensor::gelu(std::string_view approximate) const { return ember::gelu(*this, approximate); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return ember::clamp(*this, min, max);
}
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value) const {
  return ember::masked_fill(*this, mask, value);
}

// --- in place: the result is written over *this (its shape and dtype must hold it) ----------------
//
// Without autograd the kernels write straight into *this. When *this or the other operand requires
// grad (and grad mode is on), autograd::inplace computes the op out of place on a copy of the old
// value, records it, writes the result back and makes it *this's grad_fn.

namespace {

void check_writable(const Tensor& self, const Tensor& result, const char* op) {
  EMBER_CHECK(result.shape() == self.shape(), "[", op, "] the result's shape ", result.shape(),
              " does not match the in-place tensor's shape ", self.shape());
  EMBER_CHECK(detail::can_cast(result.dtype(), self.dtype()), "[", op, "] result type ", result.dtype(),
              " can't be cast to the in-place tensor's dtype ", self.dtype());
}

Tensor& write_back(Tensor& self, const Tensor& result, const char* op) {
  check_writable(self, result, op);
  return self.copy_(result);
}

// The in-place op `op` through autograd: compute(old value of self) gives the new value.
template <class Compute>
Tensor& differentiable_inplace(const char* op, Tensor& self, Compute compute) {
  return autograd::inplace(op, self, [&](const Tensor& old) {
    Tensor result = compute(old);
    check_writable(self, result, op);
    return result;
  });
}

// The other operand of a binary in-place op, as the out-of-place op must see it: the old value of
// self when it is self, a copy when it shares self's memory otherwise (the write-back would change
// it under the saved tensors of the recorded op).
Tensor other_operand(const Tensor& other, const Tensor& self, const Tensor& old_self) {
  if (other.is_same(self)) return old_self;
  if (other.shares_storage(self)) return other.clone();
  return other;
}

}  // namespace

#define EMBER_DEFINE_INPLACE_BINARY(Kind, fn, ...)                                                                    \
  Tensor& Tensor::fn##_(const Tensor& o) {                                                                            \
    detail::check_no_internal_overlap(#fn "_", *this);                                                                \
    if (autograd::needs_grad(*this, o)) {                                                                             \
      return differentiable_inplace(#fn "_", *this,                                                                   \
                                    [&](const Tensor& old) { return ember::fn(old, other_operand(o, *this, old)); }); \
    }                                                                                                                 \
    detail::binary_op(OpKind::k##Kind, {this, nullptr}, {&o, nullptr}, this);                                         \
    return *this;                                                                                                     \
  }
EMBER_BINARY_MATH(EMBER_DEFINE_INPLACE_BINARY)
#undef EMBER_DEFINE_INPLACE_BINARY
#define EMBER_DEFINE_INPLACE_SCALAR_BINARY(Kind, fn, ...)                                                  \
  Tensor& Tensor::fn##_(const Scalar& o) {                                                                 \
    detail::check_no_internal_overlap(#fn "_", *this);                                                     \
    if (autograd::needs_grad(*this)) {                                                                     \
      return differentiable_inplace(#fn "_", *this, [&](const Tensor& old) { return ember::fn(old, o); }); \
    }                                                                                                      \
    detail::binary_op(OpKind::k##Kind, {this, nullptr}, {nullptr, &o}, this);                              \
    return *this;                                                                                          \
  }
EMBER_BINARY_ARITHMETIC(EMBER_DEFINE_INPLACE_SCALAR_BINARY)
#undef EMBER_DEFINE_INPLACE_SCALAR_BINARY

#define EMBER_DEFINE_INPLACE_UNARY(Kind, fn, ...)                                                      \
  Tensor& Tensor::fn##_() {                                                                            \
    detail::check_no_internal_overlap(#fn "_", *this);                                                 \
    if (autograd::needs_grad(*this)) {                                                                 \
      return differentiable_inplace(#fn "_", *this, [](const Tensor& old) { return ember::fn(old); }); \
    }                                                                                                  \
    detail::unary_op(OpKind::k##Kind, *this, this);                                                    \
    return *this;                                                                                      \
  }
EMBER_UNARY_MATH(EMBER_DEFINE_INPLACE_UNARY)
#undef EMBER_DEFINE_INPLACE_UNARY

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  detail::check_no_internal_overlap("clamp_", *this);
  if (autograd::needs_grad(*this)) {
    return differentiable_inplace("clamp_", *this, [&](const Tensor& old) { return ember::clamp(old, min, max); });
  }
  return write_back(*this, ember::clamp(*this, min, max), "clamp_");
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  detail::check_no_internal_overlap("masked_fill_", *this);
  if (autograd::needs_grad(*this)) {
    return differentiable_inplace("masked_fill_", *this,
                                  [&](const Tensor& old) { return ember::masked_fill(old, mask, value); });
  }
  return write_back(*this, ember::masked_fill(*this, mask, value), "masked_fill_");
}

// --- reductions, matmul, shape and indexing -------------------------------------------------------

Tensor Tensor::max() const { return ember::amax(*this); }
Tensor Tensor::max(const Axes& dims, bool keepdim) const { return ember::amax(*this, dims, keepdim); }
Tensor Tensor::min() const { return ember::amin(*this); }
Tensor Tensor::min(const Axes& dims, bool keepdim) const { return ember::amin(*this, dims, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return ember::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const Axes& dims, int64_t correction, bool keepdim) const {
  return ember::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const Axes& dims, int64_t correction, bool keepdim) const {
  return ember::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const Axes& dims, bool keepdim) const { return ember::logsumexp(*this, dims, keepdim); }
Tensor Tensor::norm(double p, const Axes& dims, bool keepdim) const { return ember::norm(*this, p, dims, keepdim); }
Tensor Tensor::softmax(int64_t dim) const { return ember::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return ember::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& o) const { return ember::matmul(*this, o); }
Tensor Tensor::repeat(const Shape& repeats) const { return ember::repeat(*this, repeats); }
Tensor Tensor::flip(const Axes& dims) const { return ember::flip(*this, dims); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return ember::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return ember::gather(*this, dim, index); }
Tensor Tensor::tril(int64_t diagonal) const { return ember::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return ember::triu(*this, diagonal); }
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const { return ember::cumsum(*this, dim, dtype); }
ValuesAndIndices Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return ember::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return ember::argsort(*this, dim, descending, stable);
}
ValuesAndIndices Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ember::topk(*this, k, dim, largest, sorted);
}

// --- operators ------------------------------------------------------------------------------------

#define EMBER_OPERATOR(op, fn)                                                     \
  Tensor operator op(const Tensor& a, const Tensor& b) { return ember::fn(a, b); } \
  Tensor operator op(const Tensor& a, const Scalar& b) { return ember::fn(a, b); }
EMBER_OPERATOR(+, add)
EMBER_OPERATOR(-, sub)
EMBER_OPERATOR(*, mul)
EMBER_OPERATOR(/, div)
EMBER_OPERATOR(==, eq)
EMBER_OPERATOR(!=, ne)
EMBER_OPERATOR(<, lt)
EMBER_OPERATOR(<=, le)
EMBER_OPERATOR(>, gt)
EMBER_OPERATOR(>=, ge)
#undef EMBER_OPERATOR

Tensor operator+(const Scalar& a, const Tensor& b) { return ember::add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return ember::rsub(b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return ember::mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return ember::div(a, b); }
Tensor operator-(const Tensor& a) { return ember::neg(a); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return ember::logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return ember::logical_or(a, b); }
Tensor operator!(const Tensor& a) { return ember::logical_not(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return a.div_(b); }

}  // namespace ember

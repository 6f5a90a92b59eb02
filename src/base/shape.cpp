// Shape, Strides and the layout helpers of ember/shape.h.
#include "ember/shape.h"

#include <limits>

namespace ember {

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t running = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    strides[d] = running;
    running *= shape[d] > 1 ? shape[d] : 1;
  }
  return strides;
}

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  bool overflow = false, zero = false;
  for (const int64_t size : shape) {
    EMBER_CHECK(size >= 0, "[", op, "] negative dimension in shape ", shape);
    zero = zero || size == 0;  // a zero makes the product 0, even after an overflow
    overflow = __builtin_mul_overflow(n, size, &n) || overflow;
  }
  if (zero) return 0;
  EMBER_CHECK(!overflow, "[", op, "] shape ", shape, " has more elements than a 64-bit count holds");
  return n;
}

int normalize_axis(int64_t axis, int ndim, const char* op) {
  const int64_t rank = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts axis 0 and -1, as PyTorch
  EMBER_CHECK(axis >= -rank && axis < rank, "[", op, "] dimension ", axis, " is out of range for a tensor with ", ndim,
              " dimensions (expected in [", -rank, ", ", rank - 1, "])");
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  const int nd = a.size() > b.size() ? a.size() : b.size();
  Shape out(nd);
  for (int i = 0; i < nd; ++i) {
    const int ia = a.size() - nd + i, ib = b.size() - nd + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", a, " and ", b, " cannot be broadcast: dimension ",
                i, " has sizes ", da, " and ", db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& to) {
  const int nd = to.size(), od = shape.size();
  Strides out(nd);
  for (int i = 0; i < nd; ++i) {
    const int j = od - nd + i;
    out[i] = (j < 0 || shape[j] == 1) ? 0 : strides[j];
  }
  return out;
}

std::pair<int64_t, int64_t> storage_extent(const Shape& shape, const Strides& strides, int64_t offset) {
  int64_t last = offset;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return {offset, offset};
    last += (shape[d] - 1) * strides[d];
  }
  return {offset, last + 1};
}

std::pair<int64_t, int64_t> checked_storage_extent(const Shape& shape, const Strides& strides, int64_t offset,
                                                   const char* op) {
  if (checked_numel(shape, op) == 0) return {offset, offset};
  int64_t last = offset;
  bool overflow = false;
  for (int d = 0; d < shape.size(); ++d) {
    int64_t step = 0;
    overflow = overflow || __builtin_mul_overflow(shape[d] - 1, strides[d], &step) ||
               __builtin_add_overflow(last, step, &last) || last == std::numeric_limits<int64_t>::max();
  }
  EMBER_CHECK(!overflow, "[", op, "] shape ", shape, " with strides ", strides, " and offset ", offset,
              " reaches beyond any storage (its extent overflows 64 bits)");
  return {offset, last + 1};
}

std::optional<int64_t> merged_stride(const int64_t* sizes, const int64_t* strides, int count) {
  std::optional<int64_t> inner;
  int64_t expected = 0;
  for (int d = count - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (!inner) {
      inner = strides[d];
    } else if (strides[d] != expected) {
      return std::nullopt;
    }
    expected = strides[d] * sizes[d];
  }
  return inner.value_or(1);
}

}  // namespace ember

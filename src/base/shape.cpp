#include "ember/shape.h"

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

}  // namespace ember

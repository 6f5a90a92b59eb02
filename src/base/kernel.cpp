#include "base/kernel.h"

namespace ember {

bool Operand::is_contiguous() const {
  int64_t expected = 1;
  for (int d = shape->size() - 1; d >= 0; --d) {
    const int64_t size = (*shape)[d];
    if (size == 1) continue;
    if (size == 0) return true;
    if ((*strides)[d] != expected) return false;
    expected *= size;
  }
  return true;
}

}  // namespace ember

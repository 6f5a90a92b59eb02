// DType names, sizes and the promotion rule of ember/dtype.h.
#include "ember/dtype.h"

namespace ember {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (dtype_size(a) == 2 && dtype_size(b) == 2) return kFloat32;  // float16 with bfloat16
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral. uint8 with a signed type needs a signed type wider than 8 bits.
  if (a == kUInt8 || b == kUInt8) {
    const DType other = a == kUInt8 ? b : a;
    return other == kInt8 ? kInt16 : other;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace ember

// DType names, sizes and the promotion rule of ember/dtype.h.
#include "ember/dtype.h"

#include "ember/error.h"

namespace ember {

namespace detail {
void fail_no_element_type(DType dtype) {
  EMBER_FAIL("[dtype] ", dtype, " is block-quantized: it has no element type; dequantize it first");
}
}  // namespace detail

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  EMBER_CHECK(!is_block_quantized(a) && !is_block_quantized(b), "[promote_types] ", is_block_quantized(a) ? a : b,
              " is block-quantized: dequantize it first");
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

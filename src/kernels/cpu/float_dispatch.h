// Kernels written for float and double only (conv, pooling, norms, losses): one dispatch for all.
#pragma once

#include "ember/dtype.h"
#include "ember/error.h"

namespace ember::cpu {

// Calls f(float{}) or f(double{}) for float32 / float64; anything else is an "[op]" error.
template <class F>
void dispatch_float(const char* op, DType dtype, const F& f) {
  if (dtype == kFloat32) {
    f(float{});
  } else if (dtype == kFloat64) {
    f(double{});
  } else {
    EMBER_FAIL("[", op, "] the CPU kernel takes float32 or float64, got ", dtype);
  }
}

// The typed view of a kernel's void* operand, inside a dispatch_float body.
template <class T>
const T* cast(const void* p) {
  return static_cast<const T*>(p);
}
template <class T>
T* cast(void* p) {
  return static_cast<T*>(p);
}

}  // namespace ember::cpu

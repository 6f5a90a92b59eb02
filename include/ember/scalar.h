// Scalar: a number from C++ code (bool, integer or floating) that takes part in ops like a
// Python number does in PyTorch: it never promotes a tensor to a wider type of its own category.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ember/dtype.h"

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { kBoolean, kInteger, kFloating };

  Scalar() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T value) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::kBoolean;
      i_ = value;
      d_ = value;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::kInteger;
      i_ = static_cast<int64_t>(value);
      d_ = static_cast<double>(value);
    } else {
      kind_ = Kind::kFloating;
      d_ = static_cast<double>(value);
      i_ = static_cast<int64_t>(value);
    }
  }
  Scalar(Half value) : Scalar(static_cast<float>(value)) {}      // NOLINT
  Scalar(BFloat16 value) : Scalar(static_cast<float>(value)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::kFloating; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  bool to_bool() const { return kind_ == Kind::kFloating ? d_ != 0.0 : i_ != 0; }

  // The dtype a tensor made from this scalar alone would have (float32 for floats, as PyTorch).
  DType default_dtype() const { return kind_ == Kind::kBoolean ? kBool : kind_ == Kind::kInteger ? kInt64 : kFloat32; }

  // Same kind and value; floats compare by their bits, so a NaN equals itself (attributes use this).
  friend bool operator==(const Scalar& a, const Scalar& b) {
    if (a.kind_ != b.kind_) return false;
    if (a.kind_ == Kind::kFloating) return ember::bit_cast<uint64_t>(a.d_) == ember::bit_cast<uint64_t>(b.d_);
    return a.i_ == b.i_;
  }

  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return to_bool();
    } else if constexpr (std::is_integral_v<T>) {
      return kind_ == Kind::kFloating ? static_cast<T>(d_) : static_cast<T>(i_);
    } else {
      return static_cast<T>(kind_ == Kind::kFloating ? d_ : static_cast<double>(i_));
    }
  }

 private:
  Kind kind_ = Kind::kInteger;
  int64_t i_ = 0;
  double d_ = 0.0;
};

}  // namespace ember

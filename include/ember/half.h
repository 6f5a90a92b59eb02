// 16-bit floating-point storage types: IEEE binary16 (Half) and bfloat16 (BFloat16).
// Arithmetic happens in float: both convert implicitly to float and are built from float
// with round-to-nearest-even, as PyTorch does.
#pragma once

#include <cstdint>
#include <type_traits>

namespace ember {

// std::bit_cast, which the C++ library of the WebAssembly toolchain (Emscripten 3.1's libc++)
// does not have yet.
template <class To, class From>
constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>);
  return __builtin_bit_cast(To, from);
}

namespace detail {

inline uint16_t float_to_half_bits(float value) {
  const uint32_t f = ember::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero): add magic to shift mantissa into place
    const float magic = ember::bit_cast<float>(0x3f000000u);  // 0.5
    const float shifted = ember::bit_cast<float>(abs) + magic;
    return static_cast<uint16_t>(sign | (ember::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  uint32_t rounded = abs + 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: value = mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return ember::bit_cast<float>(sign | ember::bit_cast<uint32_t>(magnitude));
  }
  if (exponent == 0x1f) return ember::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return ember::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t f = ember::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>((f + rounding) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t b) { return ember::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float value) : bits(detail::float_to_half_bits(value)) {}       // NOLINT(google-explicit-constructor)
  operator float() const { return detail::half_bits_to_float(bits); }  // NOLINT(google-explicit-constructor)
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float value) : bits(detail::float_to_bfloat16_bits(value)) {}   // NOLINT(google-explicit-constructor)
  operator float() const { return detail::bfloat16_bits_to_float(bits); }  // NOLINT(google-explicit-constructor)
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

}  // namespace ember

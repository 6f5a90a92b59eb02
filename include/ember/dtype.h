// Element types, their traits, and dispatch_dtype: the one place a runtime DType becomes a C++ type.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "ember/half.h"

namespace ember {

// X(Enumerator, C++ type, name) for every dtype; the enum, names and sizes all come from here.
#define EMBER_DTYPES(X)             \
  X(Float32, float, "float32")      \
  X(Float64, double, "float64")     \
  X(Float16, Half, "float16")       \
  X(BFloat16, BFloat16, "bfloat16") \
  X(Int64, int64_t, "int64")        \
  X(Int32, int32_t, "int32")        \
  X(Int16, int16_t, "int16")        \
  X(Int8, int8_t, "int8")           \
  X(UInt8, uint8_t, "uint8")        \
  X(Bool, bool, "bool")

// The element dtypes come first; the block-quantized dtypes follow them (see below).
enum class DType : uint8_t {
#define EMBER_DTYPE_ENUM(name, type, str) k##name,
  EMBER_DTYPES(EMBER_DTYPE_ENUM)
#undef EMBER_DTYPE_ENUM
      kQ8_0,
  kQ4_0,
  kQ4_1,
};

inline constexpr int kNumElementDTypes = 10;  // those with a C++ element type (dispatch_dtype)
inline constexpr int kNumDTypes = 13;

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kInt16 = DType::kInt16;
inline constexpr DType kInt8 = DType::kInt8;
inline constexpr DType kUInt8 = DType::kUInt8;
inline constexpr DType kBool = DType::kBool;

// Block-quantized dtypes, with llama.cpp's byte layouts (ember/quant.h): the values of each row
// are stored in blocks of 32, each a float16 scale and 32 8-bit (q8_0, 34 bytes) or 4-bit (q4_0,
// 18 bytes) integers, or a float16 scale, a float16 minimum and 32 4-bit integers (q4_1, 20 bytes). A tensor of a block
// dtype is contiguous, its last dim a multiple of 32; it is made by quantize (or read from a GGUF file), turned back by
// dequantize (or .to(float32)), and multiplied by quantized_matmul. Views and elementwise ops reject it.
inline constexpr DType kQ8_0 = DType::kQ8_0;
inline constexpr DType kQ4_0 = DType::kQ4_0;
inline constexpr DType kQ4_1 = DType::kQ4_1;

constexpr bool is_block_quantized(DType d) { return d == kQ8_0 || d == kQ4_0 || d == kQ4_1; }

// Values per block and bytes per block: (32, 34) for q8_0, (32, 18) for q4_0, (32, 20) for q4_1, (1, element size)
// for the element dtypes.
struct BlockLayout {
  int64_t values;
  int64_t bytes;
};

namespace detail {
// Throws "[dtype] q8_0 is block-quantized: it has no element type; dequantize it first".
[[noreturn]] void fail_no_element_type(DType dtype);
}  // namespace detail

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the C++ type of `dtype`.
template <class F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
#define EMBER_DTYPE_CASE(name, type, str) \
  case DType::k##name:                    \
    return f(TypeTag<type>{});
    EMBER_DTYPES(EMBER_DTYPE_CASE)
#undef EMBER_DTYPE_CASE
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
      break;
  }
  detail::fail_no_element_type(dtype);
}

template <class T>
constexpr DType dtype_of() {
#define EMBER_DTYPE_OF(name, type, str) \
  if constexpr (std::is_same_v<T, type>) return DType::k##name;
  EMBER_DTYPES(EMBER_DTYPE_OF)
#undef EMBER_DTYPE_OF
}

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
#define EMBER_DTYPE_NAME(name, type, str) \
  case DType::k##name:                    \
    return str;
    EMBER_DTYPES(EMBER_DTYPE_NAME)
#undef EMBER_DTYPE_NAME
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
  }
  return "?";
}

// Bytes per element; 0 for the block-quantized dtypes, whose elements have no size of their own
// (block_layout, storage_bytes).
constexpr int64_t dtype_size(DType dtype) {
  switch (dtype) {
#define EMBER_DTYPE_SIZE(name, type, str) \
  case DType::k##name:                    \
    return sizeof(type);
    EMBER_DTYPES(EMBER_DTYPE_SIZE)
#undef EMBER_DTYPE_SIZE
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
      return 0;
  }
  return 0;
}

constexpr BlockLayout block_layout(DType dtype) {
  if (dtype == kQ8_0) return {32, 34};
  if (dtype == kQ4_0) return {32, 18};
  if (dtype == kQ4_1) return {32, 20};
  return {1, dtype_size(dtype)};
}

// Bytes that `numel` values take (a whole number of blocks for the block dtypes: callers check).
constexpr int64_t storage_bytes(DType dtype, int64_t numel) {
  const BlockLayout layout = block_layout(dtype);
  return numel / layout.values * layout.bytes;
}

constexpr bool is_floating(DType d) { return d == kFloat32 || d == kFloat64 || d == kFloat16 || d == kBFloat16; }
constexpr bool is_integral(DType d, bool include_bool = false) {
  return d == kInt64 || d == kInt32 || d == kInt16 || d == kInt8 || d == kUInt8 || (include_bool && d == kBool);
}

// Type the math is done in: float for the 16-bit floats, the type itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// PyTorch's promote_types for two tensors of the same category tier.
DType promote_types(DType a, DType b);

inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace ember

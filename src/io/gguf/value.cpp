// gguf::Value (ember/gguf.h): construction of arrays, the typed accessors' errors, comparison and
// printing.
#include <cstdint>
#include <limits>
#include <ostream>
#include <type_traits>
#include <variant>

#include "ember/error.h"
#include "ember/gguf.h"

namespace ember::gguf {
namespace {

constexpr std::string_view kValueTypeNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                                "bool",  "string", "array",  "uint64", "int64",  "float64"};

constexpr size_t kMaxPrintedItems = 16;

}  // namespace

std::string_view value_type_name(ValueType type) {
  const auto index = static_cast<uint32_t>(type);
  return index < std::size(kValueTypeNames) ? kValueTypeNames[index] : "?";
}

std::ostream& operator<<(std::ostream& out, ValueType type) { return out << value_type_name(type); }

Value Value::array(ValueType element_type, std::vector<Value> items) {
  EMBER_CHECK(static_cast<uint32_t>(element_type) < std::size(kValueTypeNames), "[gguf::Value] ",
              static_cast<uint32_t>(element_type), " is not a GGUF value type");
  for (size_t i = 0; i < items.size(); ++i) {
    EMBER_CHECK(items[i].type() == element_type, "[gguf::Value] an array of ", element_type, " cannot hold item ", i,
                ", which is ", items[i].type());
  }
  return Value(Array{element_type, std::move(items)});
}

void Value::fail_type(ValueType expected, ValueType actual) {
  EMBER_FAIL("[gguf::Value] expected ", expected, ", but the value is ", actual);
}

void Value::fail_element_type(ValueType expected, ValueType actual) {
  EMBER_FAIL("[gguf::Value] expected an array of ", expected, ", but the array holds ", actual);
}

int64_t Value::as_integer() const {
  switch (type()) {
    case ValueType::kUInt8:
      return as_uint8();
    case ValueType::kInt8:
      return as_int8();
    case ValueType::kUInt16:
      return as_uint16();
    case ValueType::kInt16:
      return as_int16();
    case ValueType::kUInt32:
      return as_uint32();
    case ValueType::kInt32:
      return as_int32();
    case ValueType::kInt64:
      return as_int64();
    case ValueType::kUInt64:
      EMBER_CHECK(as_uint64() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  "[gguf::Value] the uint64 ", as_uint64(), " does not fit in an int64");
      return static_cast<int64_t>(as_uint64());
    case ValueType::kFloat32:
    case ValueType::kFloat64:
    case ValueType::kBool:
    case ValueType::kString:
    case ValueType::kArray:
      break;
  }
  EMBER_FAIL("[gguf::Value] expected an integer, but the value is ", type());
}

bool operator==(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.data_);
        if constexpr (std::is_same_v<T, float>) {
          return ember::bit_cast<uint32_t>(x) == ember::bit_cast<uint32_t>(y);
        } else if constexpr (std::is_same_v<T, double>) {
          return ember::bit_cast<uint64_t>(x) == ember::bit_cast<uint64_t>(y);
        } else if constexpr (std::is_same_v<T, Value::Array>) {
          return x.element_type == y.element_type && x.items == y.items;
        } else {
          return x == y;
        }
      },
      a.data_);
}

std::ostream& operator<<(std::ostream& out, const Value& value) {
  if (value.is_array()) {
    const std::vector<Value>& items = value.items();
    out << "array<" << value.element_type() << ">[";
    for (size_t i = 0; i < items.size() && i < kMaxPrintedItems; ++i) {
      if (i > 0) out << ", ";
      out << items[i];
    }
    if (items.size() > kMaxPrintedItems) out << ", ... (" << items.size() << " items)";
    return out << "]";
  }
  out << value.type() << " ";
  switch (value.type()) {
    case ValueType::kUInt8:
      return out << static_cast<unsigned>(value.as_uint8());
    case ValueType::kInt8:
      return out << static_cast<int>(value.as_int8());
    case ValueType::kUInt16:
      return out << value.as_uint16();
    case ValueType::kInt16:
      return out << value.as_int16();
    case ValueType::kUInt32:
      return out << value.as_uint32();
    case ValueType::kInt32:
      return out << value.as_int32();
    case ValueType::kUInt64:
      return out << value.as_uint64();
    case ValueType::kInt64:
      return out << value.as_int64();
    case ValueType::kFloat32: {
      const auto precision = out.precision(std::numeric_limits<float>::max_digits10);
      out << value.as_float32();
      out.precision(precision);
      return out;
    }
    case ValueType::kFloat64: {
      const auto precision = out.precision(std::numeric_limits<double>::max_digits10);
      out << value.as_float64();
      out.precision(precision);
      return out;
    }
    case ValueType::kBool:
      return out << (value.as_bool() ? "true" : "false");
    case ValueType::kString:
      return out << '"' << value.as_string() << '"';
    case ValueType::kArray:
      break;
  }
  return out;
}

}  // namespace ember::gguf

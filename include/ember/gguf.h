// GGUF files (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), the format llama.cpp and
// the `gguf` Python package read and write: typed metadata and tensors, quantized ones included.
//
//   ["GGUF"][version: u32 = 3][tensor count: u64][metadata count: u64]
//   [metadata: key (a string), value type (u32), value]...
//   [tensor infos: name (a string), n_dims (u32), ne[n_dims] (u64 each, innermost first),
//                  GGML type (u32), offset into the data section (u64)]...
//   [zero padding to general.alignment (32 unless the metadata says otherwise)][data section]
//
// Everything is little-endian; a string is a u64 byte count and the bytes (UTF-8, no terminator);
// an array is its element type (u32), a u64 count and the elements. In the data section each
// tensor starts at a multiple of the alignment.
//
//   ember::gguf::File f = ember::gguf::load("model.gguf");
//   int64_t layers = f.value("llama.block_count").as_integer();
//   const ember::Tensor& w = f.tensor("blk.0.ffn_up.weight");   // e.g. q4_0, shape (N, K)
//   ember::gguf::save("copy.gguf", f);
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ember/tensor.h"

namespace ember::gguf {

/// A metadata value's type, numbered as in the file (GGUF's gguf_metadata_value_type).
enum class ValueType : uint32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kUInt32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUInt64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

/// "uint8", "int8", ..., "string", "array", ..., "float64"; "?" for a number that is no type.
std::string_view value_type_name(ValueType type);
std::ostream& operator<<(std::ostream& out, ValueType type);

/// One metadata value: a scalar of one of GGUF's eleven scalar types, a string, or an array whose
/// items all have one type (arrays of arrays are allowed; each inner array has its own item type).
///
/// A Value is constructed from the C++ type that matches its GGUF type exactly (uint32_t for
/// uint32, float for float32, double for float64, std::string for string) or with
/// Value::array(); it does not change afterwards. Every typed accessor throws an ember::Error
/// naming the expected and the actual type when they differ: as_uint32() on an int32 is an error,
/// whereas as_integer() reads any integer type.
class Value {
 public:
  // Implicit, so that metadata reads as a list: {{"general.name", "tiny"}, {"n", uint32_t{4}}}.
  Value(uint8_t value) : data_(std::in_place_type<uint8_t>, value) {}                     // NOLINT
  Value(int8_t value) : data_(std::in_place_type<int8_t>, value) {}                       // NOLINT
  Value(uint16_t value) : data_(std::in_place_type<uint16_t>, value) {}                   // NOLINT
  Value(int16_t value) : data_(std::in_place_type<int16_t>, value) {}                     // NOLINT
  Value(uint32_t value) : data_(std::in_place_type<uint32_t>, value) {}                   // NOLINT
  Value(int32_t value) : data_(std::in_place_type<int32_t>, value) {}                     // NOLINT
  Value(uint64_t value) : data_(std::in_place_type<uint64_t>, value) {}                   // NOLINT
  Value(int64_t value) : data_(std::in_place_type<int64_t>, value) {}                     // NOLINT
  Value(float value) : data_(std::in_place_type<float>, value) {}                         // NOLINT
  Value(double value) : data_(std::in_place_type<double>, value) {}                       // NOLINT
  Value(bool value) : data_(std::in_place_type<bool>, value) {}                           // NOLINT
  Value(std::string value) : data_(std::in_place_type<std::string>, std::move(value)) {}  // NOLINT
  Value(const char* value) : data_(std::in_place_type<std::string>, value) {}             // NOLINT

  /// An array of `element_type`; every item must have that type (else an ember::Error). An empty
  /// array keeps its element type.
  static Value array(ValueType element_type, std::vector<Value> items);
  /// An array of the scalars or strings in `values`, its element type that of T.
  template <class T>
  static Value array(const std::vector<T>& values);

  ValueType type() const { return static_cast<ValueType>(data_.index()); }
  bool is_array() const { return type() == ValueType::kArray; }

  uint8_t as_uint8() const { return get<uint8_t>(); }
  int8_t as_int8() const { return get<int8_t>(); }
  uint16_t as_uint16() const { return get<uint16_t>(); }
  int16_t as_int16() const { return get<int16_t>(); }
  uint32_t as_uint32() const { return get<uint32_t>(); }
  int32_t as_int32() const { return get<int32_t>(); }
  uint64_t as_uint64() const { return get<uint64_t>(); }
  int64_t as_int64() const { return get<int64_t>(); }
  float as_float32() const { return get<float>(); }
  double as_float64() const { return get<double>(); }
  bool as_bool() const { return get<bool>(); }
  const std::string& as_string() const { return get<std::string>(); }

  /// Any of the eight integer types, as int64 (a uint64 above INT64_MAX is an error).
  int64_t as_integer() const;

  /// An array's element type and items (an ember::Error for a value that is not an array).
  ValueType element_type() const { return get<Array>().element_type; }
  const std::vector<Value>& items() const { return get<Array>().items; }

  /// The items of an array of T (uint32_t, float, std::string, ...): an ember::Error unless this
  /// is an array whose element type is T's.
  template <class T>
  std::vector<T> to_vector() const;

  /// Same type and same contents; floats compare by their bits (so NaN equals the same NaN and
  /// 0.0 differs from -0.0), and arrays by element type and items.
  friend bool operator==(const Value& a, const Value& b);

 private:
  struct Array {
    ValueType element_type;
    std::vector<Value> items;
  };
  // The alternatives in ValueType's order, so that type() is the index.
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array,
                            uint64_t, int64_t, double>;

  explicit Value(Array array) : data_(std::in_place_type<Array>, std::move(array)) {}

  template <class T>
  static constexpr ValueType type_of() {
    return static_cast<ValueType>(index_of<T, 0>());
  }
  template <class T, size_t I>
  static constexpr size_t index_of() {
    if constexpr (std::is_same_v<T, std::variant_alternative_t<I, Data>>) {
      return I;
    } else {
      return index_of<T, I + 1>();
    }
  }
  [[noreturn]] static void fail_type(ValueType expected, ValueType actual);
  [[noreturn]] static void fail_element_type(ValueType expected, ValueType actual);

  template <class T>
  const T& get() const {
    const T* value = std::get_if<T>(&data_);
    if (value == nullptr) fail_type(type_of<T>(), type());
    return *value;
  }

  Data data_;
};

/// Prints the type and the value: `uint32 7`, `string "llama"`, `array<int32>[1, 2, 3]` (arrays
/// longer than 16 items end with `, ... (N items)`).
std::ostream& operator<<(std::ostream& out, const Value& value);

template <class T>
Value Value::array(const std::vector<T>& values) {
  std::vector<Value> items;
  items.reserve(values.size());
  for (const T& v : values) items.emplace_back(v);
  return Value(Array{type_of<T>(), std::move(items)});
}

template <class T>
std::vector<T> Value::to_vector() const {
  const Array& array = get<Array>();
  if (array.element_type != type_of<T>()) fail_element_type(type_of<T>(), array.element_type);
  std::vector<T> out;
  out.reserve(array.items.size());
  for (const Value& item : array.items) out.push_back(item.get<T>());
  return out;
}

/// A GGUF file's contents, in file order.
struct File {
  std::vector<std::pair<std::string, Value>> metadata;
  /// CPU tensors, shaped as ember (and NumPy) shape them: GGUF's ne reversed, so a GGUF tensor
  /// with ne = [K, N] (K values per row) is a tensor of shape (N, K).
  std::vector<std::pair<std::string, Tensor>> tensors;

  /// The value of `key`, or nullptr.
  const Value* find_value(std::string_view key) const;
  /// The value of `key`; an ember::Error when there is none.
  const Value& value(std::string_view key) const;
  /// The tensor called `name`, or nullptr.
  const Tensor* find_tensor(std::string_view name) const;
  /// The tensor called `name`; an ember::Error when there is none.
  const Tensor& tensor(std::string_view name) const;
};

/// Reads a GGUF file (version 3, or version 2, which has the same layout) into CPU tensors.
///
/// Tensor types: F32, F16, BF16, F64, I8, I16, I32, I64 (as ember's dtypes of the same name) and
/// Q8_0, Q4_0, Q4_1 (as kQ8_0, kQ4_0, kQ4_1: the blocks exactly as stored). A tensor of any other GGML type
/// (Q4_K, IQ2_XXS, ...) is an ember::Error naming the tensor and its type. A tensor with no
/// dimensions (n_dims 0) is a 0-dim tensor holding one value.
///
/// Everything is validated before it is trusted, and every failure is an ember::Error naming the
/// path and the problem: the magic and version; the counts, string lengths and array lengths
/// against the bytes left in the file (before any memory is reserved for them); value types;
/// nesting of arrays (at most 16 deep); empty or duplicate keys; duplicate tensor names; n_dims
/// (at most 4); dimensions and their product (no overflow); rows of a block type a whole number
/// of 32-value blocks; general.alignment (a uint32, a nonzero power of two); each tensor's offset
/// (a multiple of the alignment), its bytes (inside the file) and no two tensors overlapping.
/// Bytes after the last tensor are ignored. A bool stored as a byte other than 0 or 1 is read as
/// true. Strings are kept as the bytes stored (not checked to be UTF-8).
///
/// The header is read in pieces and each tensor's bytes straight into its storage, so a large
/// file is read once and needs no memory beyond its tensors and metadata.
File load(const std::string& path);

/// load() with the tensors' bytes left in the file: it is mapped into memory copy-on-write, so
/// loading takes no time and no memory of its own, the pages are read on first use and shared with
/// other processes mapping the file, and writing a tensor changes this process's copy only, never
/// the file. The mapping lives as long as any tensor of it (views included). The file must not be
/// truncated while it is mapped. Where the system has no mmap (WebAssembly) this is load().
File map(const std::string& path);

/// load() from the bytes of a GGUF file in memory; `what` names them in errors.
File load_bytes(std::span<const uint8_t> bytes, const std::string& what = "<memory>");

/// Writes `file` to `path` as GGUF version 3, byte for byte as the `gguf` Python package's
/// GGUFWriter writes the same metadata (same order and types) and tensors (same order): the
/// header, zero padding to the alignment, then each tensor's bytes followed by zero padding to a
/// multiple of the alignment (the last tensor's included). The alignment is general.alignment when
/// the metadata holds it (a uint32, a nonzero power of two), else 32; no key is added.
///
/// Tensors must be CPU tensors of a dtype GGUF holds (float32, float16, bfloat16, float64, int8,
/// int16, int32, int64, q8_0, q4_0, q4_1; bool and uint8 are refused) with at most 4 dimensions;
/// non-contiguous ones are written contiguous. Keys must be nonempty and unique, tensor names
/// unique.
///
/// The write is atomic: the bytes go to a temporary file next to `path`, which is fsync'ed and
/// then renamed over `path`, and the folder is fsync'ed. If anything fails the temporary file is
/// removed, whatever was at `path` before is left untouched, and an ember::Error names the path.
void save(const std::string& path, const File& file);

}  // namespace ember::gguf

// The byte level of GGUF files (see format.h): read_header validates every count, length, type,
// dimension and offset against the bytes actually there before trusting it; encode_header writes
// what GGUFWriter (the `gguf` Python package) writes.
#include "io/gguf/format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "ember/error.h"

namespace ember::gguf_format {
namespace {

// GGUF is little-endian; scalars are copied to and from memory as they are.
static_assert(std::endian::native == std::endian::little, "GGUF IO assumes a little-endian host");

using gguf::Value;
using gguf::ValueType;
using Metadata = std::vector<std::pair<std::string, Value>>;

constexpr std::array<uint8_t, 4> kMagic = {'G', 'G', 'U', 'F'};
constexpr int kNumValueTypes = 13;
constexpr size_t kReadChunk = size_t{1} << 20;   // bytes of header read from the source at a time
constexpr size_t kMaxReserve = size_t{1} << 16;  // items reserved ahead of reading them

// The smallest encoding of one header record, to bound counts by the bytes left before reserving
// anything: a key or name (8-byte length), a value type (4) and a 1-byte value; a tensor info's
// name, n_dims (4), type (4) and offset (8).
constexpr uint64_t kMinMetadataBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

// --- GGML types -----------------------------------------------------------------------------------

struct SupportedType {
  uint32_t id;
  std::string_view name;
  DType dtype;
};

constexpr std::array<SupportedType, 11> kSupportedTypes{{
    {0, "F32", kFloat32},
    {1, "F16", kFloat16},
    {30, "BF16", kBFloat16},
    {8, "Q8_0", kQ8_0},
    {2, "Q4_0", kQ4_0},
    {3, "Q4_1", kQ4_1},
    {24, "I8", kInt8},
    {25, "I16", kInt16},
    {26, "I32", kInt32},
    {27, "I64", kInt64},
    {28, "F64", kFloat64},
}};

// Every type the gguf package (0.19) names, for the error about one ember does not read.
constexpr std::pair<uint32_t, std::string_view> kGgmlTypeNames[] = {
    {0, "F32"},      {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},   {6, "Q5_0"},    {7, "Q5_1"},   {8, "Q8_0"},
    {9, "Q8_1"},     {10, "Q2_K"},   {11, "Q3_K"},    {12, "Q4_K"},  {13, "Q5_K"},   {14, "Q6_K"},  {15, "Q8_K"},
    {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
    {23, "IQ4_XS"},  {24, "I8"},     {25, "I16"},     {26, "I32"},   {27, "I64"},    {28, "F64"},   {29, "IQ1_M"},
    {30, "BF16"},    {34, "TQ1_0"},  {35, "TQ2_0"},   {39, "MXFP4"}, {40, "NVFP4"},  {41, "Q1_0"},
};

// --- reading --------------------------------------------------------------------------------------

// Reads the header front to back, a chunk of the source at a time. Each read is checked against
// the bytes left; `context` names what is being read, for the error when the file ends inside it.
class Cursor {
 public:
  Cursor(const detail::Source& source, const std::string& what, const std::string& op)
      : source_(source), what_(what), op_(op) {}

  uint64_t position() const { return position_; }
  uint64_t remaining() const { return source_.size() - position_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    EMBER_FAIL("[", op_, "] ", what_, ": ", std::forward<Args>(args)...);
  }

  void read(void* out, size_t bytes) {
    if (bytes > remaining()) {
      fail("the file ends inside ", context_, " (", bytes, " bytes needed at byte ", position_, ", the file has ",
           source_.size(), "): it is truncated");
    }
    if (position_ >= buffer_start_ && position_ + bytes <= buffer_start_ + buffer_.size()) {
      std::memcpy(out, buffer_.data() + (position_ - buffer_start_), bytes);
    } else if (bytes >= kReadChunk) {
      source_.read(out, bytes, position_);
    } else {
      buffer_.resize(static_cast<size_t>(std::min<uint64_t>(kReadChunk, remaining())));
      source_.read(buffer_.data(), buffer_.size(), position_);
      buffer_start_ = position_;
      std::memcpy(out, buffer_.data(), bytes);
    }
    position_ += bytes;
  }

  template <class T>
  T scalar() {
    T value;
    read(&value, sizeof(T));
    return value;
  }

  std::string string() {
    const auto length = scalar<uint64_t>();
    if (length > remaining()) {
      fail("the string length ", length, " of ", context_, " (at byte ", position_ - 8, ") is more than the ",
           remaining(), " bytes left in the file: it is truncated or corrupt");
    }
    std::string text(static_cast<size_t>(length), '\0');
    read(text.data(), text.size());
    return text;
  }

 private:
  const detail::Source& source_;
  const std::string& what_;
  const std::string& op_;
  std::string context_;
  uint64_t position_ = 0;
  std::vector<uint8_t> buffer_;  // bytes [buffer_start_, buffer_start_ + size) of the source
  uint64_t buffer_start_ = 0;
};

// Bytes of the smallest encoding of one item of `type` inside an array.
uint64_t min_item_bytes(ValueType type) {
  switch (type) {
    case ValueType::kUInt8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUInt16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUInt32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUInt64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
    case ValueType::kString:  // its length
      return 8;
    case ValueType::kArray:  // its element type and count
      return 12;
  }
  return 1;
}

ValueType read_value_type(Cursor& cursor, const char* role) {
  const auto type = cursor.scalar<uint32_t>();
  if (type >= kNumValueTypes) {
    cursor.fail(cursor.context(), " has ", role, " ", type, ", which is not a GGUF value type (0 to ",
                kNumValueTypes - 1, ")");
  }
  return static_cast<ValueType>(type);
}

// A value of `type`; `depth` counts the arrays it is inside.
Value read_value(Cursor& cursor, ValueType type, int depth) {
  switch (type) {
    case ValueType::kUInt8:
      return cursor.scalar<uint8_t>();
    case ValueType::kInt8:
      return cursor.scalar<int8_t>();
    case ValueType::kUInt16:
      return cursor.scalar<uint16_t>();
    case ValueType::kInt16:
      return cursor.scalar<int16_t>();
    case ValueType::kUInt32:
      return cursor.scalar<uint32_t>();
    case ValueType::kInt32:
      return cursor.scalar<int32_t>();
    case ValueType::kFloat32:
      return cursor.scalar<float>();
    case ValueType::kBool:
      return cursor.scalar<uint8_t>() != 0;  // as ggml reads it
    case ValueType::kString:
      return cursor.string();
    case ValueType::kUInt64:
      return cursor.scalar<uint64_t>();
    case ValueType::kInt64:
      return cursor.scalar<int64_t>();
    case ValueType::kFloat64:
      return cursor.scalar<double>();
    case ValueType::kArray:
      break;
  }
  if (depth + 1 > kMaxArrayDepth) {
    cursor.fail(cursor.context(), " nests arrays more than ", kMaxArrayDepth, " deep");
  }
  const ValueType element_type = read_value_type(cursor, "an array of value type");
  const auto count = cursor.scalar<uint64_t>();
  if (count > cursor.remaining() / min_item_bytes(element_type)) {
    cursor.fail(cursor.context(), " has an array of ", count, " ", element_type, " items (at byte ",
                cursor.position() - 12, "), more than the ", cursor.remaining(),
                " bytes left in the file can hold: it is truncated or corrupt");
  }
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(std::min<uint64_t>(count, kMaxReserve)));
  for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(cursor, element_type, depth + 1));
  return Value::array(element_type, std::move(items));
}

void read_metadata(Cursor& cursor, uint64_t count, Metadata& metadata) {
  std::unordered_set<std::string> keys;
  for (uint64_t i = 0; i < count; ++i) {
    cursor.set_context("the key of metadata entry " + std::to_string(i));
    std::string key = cursor.string();
    if (key.empty()) cursor.fail("metadata entry ", i, " has an empty key");
    if (!keys.insert(key).second) cursor.fail("the metadata has the key '", key, "' twice");
    cursor.set_context("metadata '" + key + "'");
    const ValueType type = read_value_type(cursor, "value type");
    Value value = read_value(cursor, type, 0);
    metadata.emplace_back(std::move(key), std::move(value));
  }
}

TensorInfo read_tensor_info(Cursor& cursor, uint64_t index) {
  TensorInfo info;
  cursor.set_context("the name of tensor " + std::to_string(index));
  info.name = cursor.string();
  cursor.set_context("the tensor info of '" + info.name + "'");
  const auto n_dims = cursor.scalar<uint32_t>();
  if (n_dims > static_cast<uint32_t>(kMaxDims)) {
    cursor.fail("tensor '", info.name, "' has ", n_dims, " dimensions; GGUF allows at most ", kMaxDims);
  }
  std::array<uint64_t, kMaxDims> ne{};
  for (uint32_t d = 0; d < n_dims; ++d) ne[d] = cursor.scalar<uint64_t>();
  // ember's order: the innermost dim (ne[0]) last.
  int64_t numel = 1;
  for (uint32_t d = n_dims; d-- > 0;) {
    if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      cursor.fail("tensor '", info.name, "' has dimension ne[", d, "] = ", ne[d], ", more than 2^63 - 1");
    }
    info.shape.push_back(static_cast<int64_t>(ne[d]));
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(ne[d]), &numel)) {
      cursor.fail("tensor '", info.name, "' has more than 2^63 - 1 elements (ne[", d, "] = ", ne[d], ")");
    }
  }
  const auto type = cursor.scalar<uint32_t>();
  const std::optional<DType> dtype = dtype_of_ggml_type(type);
  if (!dtype.has_value()) {
    const std::string_view name = ggml_type_name(type);
    if (name.empty()) {
      cursor.fail("tensor '", info.name, "' has GGML type ", type, ", which GGML does not define; ember reads ",
                  supported_ggml_types());
    }
    cursor.fail("tensor '", info.name, "' has GGML type ", name, " (", type,
                "), which ember does not read; supported: ", supported_ggml_types());
  }
  info.ggml_type = type;
  info.dtype = *dtype;
  const BlockLayout layout = block_layout(info.dtype);
  if (is_block_quantized(info.dtype) && (n_dims == 0 || ne[0] % static_cast<uint64_t>(layout.values) != 0)) {
    cursor.fail("tensor '", info.name, "' of GGML type ", ggml_type_name(type), " and shape ", info.shape,
                " has rows of ", n_dims == 0 ? 1 : ne[0], " values, not a whole number of ", layout.values,
                "-value blocks");
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel) / static_cast<uint64_t>(layout.values),
                             static_cast<uint64_t>(layout.bytes), &info.bytes)) {
    cursor.fail("tensor '", info.name, "' of shape ", info.shape, " has more than 2^64 - 1 bytes");
  }
  info.offset = cursor.scalar<uint64_t>();  // relative to the data section until read_header resolves it
  return info;
}

// Each tensor's bytes inside the source and apart from the others'.
void place_tensors(const Cursor& cursor, Header& header, uint64_t source_size) {
  for (TensorInfo& info : header.tensors) {
    if (info.offset % header.alignment != 0) {
      cursor.fail("tensor '", info.name, "' starts at offset ", info.offset,
                  " of the data section, which is not a multiple of the alignment ", header.alignment);
    }
    const uint64_t available = header.data_offset <= source_size ? source_size - header.data_offset : 0;
    if (header.data_offset > source_size || info.offset > available || info.bytes > available - info.offset) {
      cursor.fail("tensor '", info.name, "' (", info.bytes, " bytes at offset ", info.offset,
                  " of the data section, which starts at byte ", header.data_offset, ") ends past the end of the ",
                  source_size, "-byte file: it is truncated or the offset is corrupt");
    }
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& info : header.tensors) {
    if (info.bytes > 0) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& previous = *by_offset[i - 1];
    const TensorInfo& next = *by_offset[i];
    if (next.offset < previous.offset + previous.bytes) {
      cursor.fail("tensors '", previous.name, "' (offsets ", previous.offset, " to ", previous.offset + previous.bytes,
                  ") and '", next.name, "' (offsets ", next.offset, " to ", next.offset + next.bytes,
                  " of the data section) overlap");
    }
  }
  for (TensorInfo& info : header.tensors) info.offset += header.data_offset;
}

// --- writing --------------------------------------------------------------------------------------

template <class T>
void append(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void append_string(std::string& out, std::string_view text) {
  append<uint64_t>(out, text.size());
  out.append(text);
}

// A value without its type (written before it by the caller); `depth` counts the arrays around it.
void append_value(std::string& out, const Value& value, int depth, const std::string& key, const std::string& what,
                  const std::string& op) {
  switch (value.type()) {
    case ValueType::kUInt8:
      return append(out, value.as_uint8());
    case ValueType::kInt8:
      return append(out, value.as_int8());
    case ValueType::kUInt16:
      return append(out, value.as_uint16());
    case ValueType::kInt16:
      return append(out, value.as_int16());
    case ValueType::kUInt32:
      return append(out, value.as_uint32());
    case ValueType::kInt32:
      return append(out, value.as_int32());
    case ValueType::kFloat32:
      return append(out, value.as_float32());
    case ValueType::kBool:
      return append<uint8_t>(out, value.as_bool() ? 1 : 0);
    case ValueType::kString:
      return append_string(out, value.as_string());
    case ValueType::kUInt64:
      return append(out, value.as_uint64());
    case ValueType::kInt64:
      return append(out, value.as_int64());
    case ValueType::kFloat64:
      return append(out, value.as_float64());
    case ValueType::kArray:
      break;
  }
  EMBER_CHECK(depth + 1 <= kMaxArrayDepth, "[", op, "] ", what, ": metadata '", key, "' nests arrays more than ",
              kMaxArrayDepth, " deep");
  append(out, static_cast<uint32_t>(value.element_type()));
  append<uint64_t>(out, value.items().size());
  for (const Value& item : value.items()) append_value(out, item, depth + 1, key, what, op);
}

}  // namespace

// --- GGML types -----------------------------------------------------------------------------------

std::optional<uint32_t> ggml_type_of(DType dtype) {
  for (const SupportedType& type : kSupportedTypes) {
    if (type.dtype == dtype) return type.id;
  }
  return std::nullopt;
}

std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type) {
  for (const SupportedType& type : kSupportedTypes) {
    if (type.id == ggml_type) return type.dtype;
  }
  return std::nullopt;
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  for (const auto& [id, name] : kGgmlTypeNames) {
    if (id == ggml_type) return name;
  }
  return "";
}

std::string supported_ggml_types() {
  std::string names;
  for (const SupportedType& type : kSupportedTypes) {
    if (!names.empty()) names += ", ";
    names += type.name;
  }
  return names;
}

// --- read_header ----------------------------------------------------------------------------------

Header read_header(const detail::Source& source, const std::string& what, const std::string& op) {
  Cursor cursor(source, what, op);
  Header header;
  if (source.size() < kMagic.size()) {
    cursor.fail("the file has ", source.size(),
                " bytes, too few for a GGUF header: it is truncated or not a GGUF file");
  }
  std::array<uint8_t, 4> magic{};
  cursor.set_context("the magic");
  cursor.read(magic.data(), magic.size());
  if (magic != kMagic) {
    std::ostringstream shown;
    for (const uint8_t byte : magic) shown << (byte >= 0x20 && byte < 0x7f ? static_cast<char>(byte) : '?');
    cursor.fail("the file starts with \"", shown.str(), "\", not \"GGUF\": it is not a GGUF file");
  }
  cursor.set_context("the header");
  header.version = cursor.scalar<uint32_t>();
  if (header.version != 2 && header.version != 3) {
    if (header.version == 1) {
      cursor.fail("GGUF version 1 (32-bit counts and lengths) is not supported; ember reads versions 2 and 3");
    }
    if (header.version != 0 && (header.version & 0xffff) == 0) {
      cursor.fail("GGUF version ", header.version, " is not supported: the file looks big-endian (version ",
                  __builtin_bswap32(header.version), "?), and ember reads little-endian files of versions 2 and 3");
    }
    cursor.fail("GGUF version ", header.version, " is not supported; ember reads versions 2 and 3");
  }
  const auto tensor_count = cursor.scalar<uint64_t>();
  const auto metadata_count = cursor.scalar<uint64_t>();
  // Checked before anything is reserved or read: each record takes some bytes of the file.
  if (tensor_count > cursor.remaining() / kMinTensorInfoBytes) {
    cursor.fail("the header says there are ", tensor_count, " tensors, more than the ", cursor.remaining(),
                " bytes left in the file can describe: it is truncated or corrupt");
  }
  if (metadata_count > (cursor.remaining() - tensor_count * kMinTensorInfoBytes) / kMinMetadataBytes) {
    cursor.fail("the header says there are ", metadata_count, " metadata entries, more than the ", cursor.remaining(),
                " bytes left in the file can hold: it is truncated or corrupt");
  }

  read_metadata(cursor, metadata_count, header.metadata);
  header.alignment = alignment_of(header.metadata, what, op);

  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo info = read_tensor_info(cursor, i);
    if (!names.insert(info.name).second) cursor.fail("the file has two tensors called '", info.name, "'");
    header.tensors.push_back(std::move(info));
  }
  header.data_offset = padded(cursor.position(), header.alignment);
  place_tensors(cursor, header, source.size());
  return header;
}

// --- writing --------------------------------------------------------------------------------------

uint64_t alignment_of(const Metadata& metadata, const std::string& what, const std::string& op) {
  for (const auto& [key, value] : metadata) {
    if (key != kAlignmentKey) continue;
    EMBER_CHECK(value.type() == ValueType::kUInt32, "[", op, "] ", what, ": metadata '", kAlignmentKey,
                "' must be a uint32, but it is ", value.type());
    const uint32_t alignment = value.as_uint32();
    EMBER_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0, "[", op, "] ", what, ": metadata '",
                kAlignmentKey, "' is ", alignment, ", which is not a nonzero power of two");
    return alignment;
  }
  return kDefaultAlignment;
}

std::string encode_header(const Metadata& metadata, const std::vector<TensorEntry>& tensors, const std::string& what,
                          const std::string& op) {
  const uint64_t alignment = alignment_of(metadata, what, op);
  std::string out;
  out.append(reinterpret_cast<const char*>(kMagic.data()), kMagic.size());
  append<uint32_t>(out, kVersion);
  append<uint64_t>(out, tensors.size());
  append<uint64_t>(out, metadata.size());

  std::unordered_set<std::string_view> keys;
  for (const auto& [key, value] : metadata) {
    EMBER_CHECK(!key.empty(), "[", op, "] ", what, ": a metadata key is empty");
    EMBER_CHECK(keys.insert(key).second, "[", op, "] ", what, ": the metadata has the key '", key, "' twice");
    append_string(out, key);
    append(out, static_cast<uint32_t>(value.type()));
    append_value(out, value, 0, key, what, op);
  }

  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorEntry& tensor : tensors) {
    EMBER_CHECK(names.insert(tensor.name).second, "[", op, "] ", what, ": two tensors are called '", tensor.name, "'");
    EMBER_CHECK(tensor.shape.size() <= kMaxDims, "[", op, "] ", what, ": tensor '", tensor.name, "' has shape ",
                tensor.shape, "; GGUF holds at most ", kMaxDims, " dimensions");
    append_string(out, tensor.name);
    append<uint32_t>(out, static_cast<uint32_t>(tensor.shape.size()));
    for (int d = tensor.shape.size() - 1; d >= 0; --d) append<uint64_t>(out, static_cast<uint64_t>(tensor.shape[d]));
    append<uint32_t>(out, tensor.ggml_type);
    append<uint64_t>(out, offset);
    offset += padded(tensor.bytes, alignment);
  }
  out.resize(static_cast<size_t>(padded(out.size(), alignment)), '\0');
  return out;
}

}  // namespace ember::gguf_format

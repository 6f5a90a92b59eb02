// The byte level of safetensors files (safetensors_format.h): the header is validated whole before
// a byte of it is trusted, and written as the reference implementation writes it.
#include "io/safetensors_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/json_text.h"
#include "ember/error.h"

namespace ember::safetensors_format {
namespace {

// The format is little-endian; ember writes and reads tensor memory as it is.
static_assert(std::endian::native == std::endian::little, "safetensors IO assumes a little-endian host");

using detail::json_text;
using nlohmann::json;
using nlohmann::ordered_json;

// safetensors' name of every ember dtype.
constexpr std::array<std::pair<DType, std::string_view>, kNumElementDTypes> kDTypeNames{{
    {kFloat32, "F32"},
    {kFloat64, "F64"},
    {kFloat16, "F16"},
    {kBFloat16, "BF16"},
    {kInt64, "I64"},
    {kInt32, "I32"},
    {kInt16, "I16"},
    {kInt8, "I8"},
    {kUInt8, "U8"},
    {kBool, "BOOL"},
}};

// Names the reference implementation defines that ember has no dtype for: a clearer message than
// "unknown" for a valid file ember cannot hold.
bool is_known_unsupported_dtype(std::string_view name) {
  static constexpr std::string_view kNames[] = {"U16",     "U32",     "U64",     "F8_E4M3", "F8_E5M2",
                                                "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",      "C64"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// nlohmann::json keeps the last of duplicate keys; the reference implementation rejects them,
// and so do we: a parse callback tracks the keys of every open object.
json parse_json_rejecting_duplicates(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        EMBER_CHECK(open_objects.back().insert(key).second, "[load] ", path, ": the header has the key '", key,
                    "' twice");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {
    EMBER_FAIL("[load] ", path, ": the header is not valid JSON (", e.what(), ")");
  }
}

Shape parse_shape(const json& value, const std::string& name, const std::string& path) {
  EMBER_CHECK(value.is_array(), "[load] ", path, ": tensor '", name,
              "' has a shape that is not a list: ", json_text(value));
  EMBER_CHECK(value.size() <= static_cast<size_t>(kMaxDims), "[load] ", path, ": tensor '", name, "' has ",
              value.size(), " dimensions; ember supports at most ", kMaxDims);
  Shape shape;
  for (const json& dim : value) {
    EMBER_CHECK(dim.is_number_integer(), "[load] ", path, ": tensor '", name,
                "' has a dimension that is not an integer: ", json_text(value));
    EMBER_CHECK(dim.is_number_unsigned() || dim.get<int64_t>() >= 0, "[load] ", path, ": tensor '", name,
                "' has a negative dimension: ", json_text(value));
    EMBER_CHECK(dim.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "[load] ", path, ": tensor '", name,
                "' has a dimension too large: ", json_text(value));
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

TensorEntry parse_entry(const std::string& name, const json& value, const std::string& path) {
  EMBER_CHECK(value.is_object(), "[load] ", path, ": the entry of tensor '", name,
              "' is not an object: ", json_text(value));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    EMBER_CHECK(value.contains(field), "[load] ", path, ": tensor '", name, "' has no \"", field, "\"");
  }
  TensorEntry entry;
  entry.name = name;
  const json& dtype = value["dtype"];
  EMBER_CHECK(dtype.is_string(), "[load] ", path, ": tensor '", name,
              "' has a dtype that is not a string: ", json_text(dtype));
  const std::string& dtype_name_text = dtype.get_ref<const std::string&>();
  const std::optional<DType> parsed = dtype_of(dtype_name_text);
  EMBER_CHECK(parsed.has_value() || !is_known_unsupported_dtype(dtype_name_text), "[load] ", path, ": tensor '", name,
              "' has dtype ", dtype_name_text, ", which ember does not support");
  EMBER_CHECK(parsed.has_value(), "[load] ", path, ": tensor '", name, "' has unknown dtype \"", dtype_name_text,
              "\" (expected one of F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  entry.dtype = *parsed;
  entry.shape = parse_shape(value["shape"], name, path);

  const json& offsets = value["data_offsets"];
  EMBER_CHECK(
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      "[load] ", path, ": tensor '", name,
      "' has data_offsets that are not two non-negative integers: ", json_text(offsets));
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  EMBER_CHECK(entry.begin <= entry.end, "[load] ", path, ": tensor '", name, "' has data_offsets [", entry.begin, ", ",
              entry.end, "] that end before they begin");

  uint64_t bytes = static_cast<uint64_t>(dtype_size(entry.dtype));
  for (int64_t dim : entry.shape) {
    EMBER_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes), "[load] ", path, ": tensor '", name,
                "' of shape ", entry.shape, " is too large");
  }
  EMBER_CHECK(entry.end - entry.begin == bytes, "[load] ", path, ": tensor '", name, "' of shape ", entry.shape,
              " and dtype ", dtype_name_text, " needs ", bytes, " bytes but its data_offsets [", entry.begin, ", ",
              entry.end, "] span ", entry.end - entry.begin);
  return entry;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& path) {
  EMBER_CHECK(value.is_object(), "[load] ", path, ": \"", kMetadataKey, "\" is not an object: ", json_text(value));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    EMBER_CHECK(item.is_string(), "[load] ", path, ": metadata '", key, "' is not a string: ", json_text(item));
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

}  // namespace

std::string_view name_of(DType dtype) {
  for (const auto& [candidate, name] : kDTypeNames) {
    if (candidate == dtype) return name;
  }
  return "?";  // a block-quantized dtype, which safetensors has no name for
}

std::optional<DType> dtype_of(std::string_view name) {
  for (const auto& [dtype, candidate] : kDTypeNames) {
    if (candidate == name) return dtype;
  }
  return std::nullopt;
}

Header read_header(const detail::Source& source, const std::string& path) {
  EMBER_CHECK(source.size() >= 8, "[load] ", path, ": the file has ", source.size(),
              " bytes, fewer than the 8 of the header length: it is truncated or not a safetensors file");
  uint8_t length_bytes[8];
  source.read(length_bytes, 8, 0);
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  EMBER_CHECK(header_length <= kMaxHeaderBytes, "[load] ", path, ": the header length ", header_length,
              " is larger than the 100 MB limit: the file is corrupt or not a safetensors file");
  EMBER_CHECK(header_length <= source.size() - 8, "[load] ", path, ": the header length ", header_length,
              " is larger than the rest of the file (", source.size() - 8, " bytes): the file is truncated or corrupt");

  std::string text(header_length, '\0');
  source.read(text.data(), text.size(), 8);
  EMBER_CHECK(!text.empty() && text[0] == '{', "[load] ", path,
              ": the header does not start with '{': the file is corrupt or not a safetensors file");
  const json root = parse_json_rejecting_duplicates(text, path);
  EMBER_CHECK(root.is_object(), "[load] ", path, ": the header is not a JSON object");

  Header header;
  header.data_start = 8 + header_length;
  const uint64_t data_size = source.size() - header.data_start;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      header.metadata = parse_metadata(value, path);
      continue;
    }
    TensorEntry entry = parse_entry(key, value, path);
    EMBER_CHECK(entry.end <= data_size, "[load] ", path, ": tensor '", key, "' has data_offsets [", entry.begin, ", ",
                entry.end, "] past the end of the ", data_size, "-byte data region: the file is truncated or corrupt");
    header.tensors.push_back(std::move(entry));
  }

  // The byte ranges, in order, must tile the data region: no holes, no overlaps, nothing left over.
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& e : header.tensors) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry* e : by_offset) {
    EMBER_CHECK(e->begin <= covered, "[load] ", path, ": tensor '", e->name, "' starts at byte ", e->begin,
                " of the data region, leaving a hole after byte ", covered);
    EMBER_CHECK(e->begin == covered, "[load] ", path, ": tensor '", e->name, "' (bytes ", e->begin, " to ", e->end,
                ") overlaps tensor '", previous->name, "' (bytes ", previous->begin, " to ", previous->end, ")");
    covered = e->end;
    previous = e;
  }
  EMBER_CHECK(covered == data_size, "[load] ", path, ": the tensors cover ", covered, " bytes but the data region has ",
              data_size, " bytes");
  return header;
}

void read_tensor(const detail::Source& source, const Header& header, const TensorEntry& entry, void* out) {
  const uint64_t bytes = entry.end - entry.begin;
  if (bytes == 0) return;
  source.read(out, static_cast<size_t>(bytes), header.data_start + entry.begin);
  if (entry.dtype == kBool) {
    auto* p = static_cast<uint8_t*>(out);
    for (uint64_t i = 0; i < bytes; ++i) p[i] = p[i] != 0 ? 1 : 0;
  }
}

std::string encode_header(const std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata,
                          const std::string& path) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::set<std::string_view> names;
  for (const TensorEntry& entry : tensors) {
    EMBER_CHECK(entry.name != kMetadataKey, "[save] cannot write '", path, "': the name '", kMetadataKey,
                "' is reserved for the metadata");
    EMBER_CHECK(names.insert(entry.name).second, "[save] cannot write '", path, "': two tensors are named '",
                entry.name, "'");
    header[entry.name] = ordered_json{{"dtype", std::string(name_of(entry.dtype))},
                                      {"shape", entry.shape.vec()},
                                      {"data_offsets", {entry.begin, entry.end}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
    EMBER_FAIL("[save] cannot write '", path, "': tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

}  // namespace ember::safetensors_format

// safetensors checkpoints: save (atomic: temp file, fsync, rename, fsync the folder) and load
// (validates the whole header before trusting a byte of it). Format notes are in ember/io.h.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ember/autograd.h"
#include "ember/io.h"
#include "ember/ops.h"
#include "io/atomic_file.h"

namespace ember {
namespace {

// The format is little-endian; ember writes and reads tensor memory as it is.
static_assert(std::endian::native == std::endian::little, "safetensors IO assumes a little-endian host");

using detail::AtomicFile;
using detail::errno_text;
using detail::FileDescriptor;
using detail::read_all;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

// --- dtype names ----------------------------------------------------------------------------------

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

std::string_view safetensors_name(DType dtype) {
  for (const auto& [candidate, name] : kDTypeNames) {
    if (candidate == dtype) return name;
  }
  return "?";  // unreachable: the table lists every dtype
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& [dtype, candidate] : kDTypeNames) {
    if (candidate == name) return dtype;
  }
  return std::nullopt;
}

// Names the reference implementation defines that ember has no dtype for: a clearer message than
// "unknown" for a valid file ember cannot hold.
bool is_known_unsupported_dtype(std::string_view name) {
  static constexpr std::string_view kNames[] = {"U16",     "U32",     "U64",     "F8_E4M3", "F8_E5M2",
                                                "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",      "C64"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// --- save -----------------------------------------------------------------------------------------

struct PlannedTensor {
  const std::string* name;
  Tensor data;  // contiguous
  uint64_t begin = 0;
  uint64_t end = 0;
};

}  // namespace

void save(const StateDict& tensors, const std::string& path, const std::map<std::string, std::string>& metadata) {
  EMBER_CHECK(!path.empty(), "[save] the path is empty");
  const autograd::NoGradGuard no_grad;  // contiguous copies of parameters are data, not graph
  // Everything that can be checked is checked before a byte is written.
  std::vector<PlannedTensor> plan;
  plan.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    EMBER_CHECK(name != kMetadataKey, "[save] cannot write '", path, "': the name '", kMetadataKey,
                "' is reserved for the metadata");
    EMBER_CHECK(tensor.defined(), "[save] cannot write '", path, "': tensor '", name, "' is undefined");
    EMBER_CHECK(tensor.device().is_cpu(), "[save] cannot write '", path, "': tensor '", name, "' is on ",
                tensor.device(), "; copy it to the CPU first");
    EMBER_CHECK(!is_block_quantized(tensor.dtype()), "[save] cannot write '", path, "': tensor '", name, "' is ",
                tensor.dtype(), ", which safetensors has no dtype for; save it as GGUF (ember::gguf::save)");
    plan.push_back({&name, tensor.contiguous()});
  }
  // Largest elements first, then by name: with an 8-byte aligned data region every tensor starts
  // at a multiple of its element size.
  std::stable_sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.data.element_size() > b.data.element_size();
  });
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (PlannedTensor& p : plan) {
    p.begin = offset;
    p.end = offset + static_cast<uint64_t>(p.data.numel() * p.data.element_size());
    offset = p.end;
    header[*p.name] = ordered_json{{"dtype", std::string(safetensors_name(p.data.dtype()))},
                                   {"shape", p.data.shape().vec()},
                                   {"data_offsets", {p.begin, p.end}}};
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
    EMBER_FAIL("[save] cannot write '", path, "': tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint8_t length_bytes[8];
  for (int i = 0; i < 8; ++i)
    length_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * i));

  AtomicFile file(path, "save");
  file.write(length_bytes, sizeof(length_bytes));
  file.write(header_text.data(), header_text.size());
  for (const PlannedTensor& p : plan) {
    if (p.end > p.begin) file.write(p.data.data_ptr(), p.end - p.begin);
  }
  file.commit();
}

// --- load -----------------------------------------------------------------------------------------

namespace {

struct TensorEntry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data region
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    EMBER_CHECK(fd_.get() >= 0, "[load] cannot open '", path, "': ", errno_text(errno));
    struct stat info {};
    EMBER_CHECK(::fstat(fd_.get(), &info) == 0, "[load] cannot stat '", path, "': ", errno_text(errno));
    EMBER_CHECK(S_ISREG(info.st_mode), "[load] '", path, "' is not a regular file");
    size_ = static_cast<uint64_t>(info.st_size);
  }
  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FileDescriptor fd_;
  uint64_t size_ = 0;
};

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
              "' has a shape that is not a list: ", value.dump());
  EMBER_CHECK(value.size() <= static_cast<size_t>(kMaxDims), "[load] ", path, ": tensor '", name, "' has ",
              value.size(), " dimensions; ember supports at most ", kMaxDims);
  Shape shape;
  for (const json& dim : value) {
    EMBER_CHECK(dim.is_number_integer(), "[load] ", path, ": tensor '", name,
                "' has a dimension that is not an integer: ", value.dump());
    EMBER_CHECK(dim.is_number_unsigned() || dim.get<int64_t>() >= 0, "[load] ", path, ": tensor '", name,
                "' has a negative dimension: ", value.dump());
    EMBER_CHECK(dim.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "[load] ", path, ": tensor '", name,
                "' has a dimension too large: ", value.dump());
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

TensorEntry parse_entry(const std::string& name, const json& value, const std::string& path) {
  EMBER_CHECK(value.is_object(), "[load] ", path, ": the entry of tensor '", name,
              "' is not an object: ", value.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    EMBER_CHECK(value.contains(field), "[load] ", path, ": tensor '", name, "' has no \"", field, "\"");
  }
  TensorEntry entry;
  entry.name = name;
  const json& dtype = value["dtype"];
  EMBER_CHECK(dtype.is_string(), "[load] ", path, ": tensor '", name,
              "' has a dtype that is not a string: ", dtype.dump());
  const std::string& dtype_name_text = dtype.get_ref<const std::string&>();
  const std::optional<DType> parsed = dtype_from_safetensors_name(dtype_name_text);
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
      "' has data_offsets that are not two non-negative integers: ", offsets.dump());
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
  EMBER_CHECK(value.is_object(), "[load] ", path, ": \"", kMetadataKey, "\" is not an object: ", value.dump());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    EMBER_CHECK(item.is_string(), "[load] ", path, ": metadata '", key, "' is not a string: ", item.dump());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

Header read_header(const SafetensorsFile& file) {
  const std::string& path = file.path();
  EMBER_CHECK(file.size() >= 8, "[load] ", path, ": the file has ", file.size(),
              " bytes, fewer than the 8 of the header length: it is truncated or not a safetensors file");
  uint8_t length_bytes[8];
  read_all(file.fd(), length_bytes, 8, 0, path, "load");
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  EMBER_CHECK(header_length <= kMaxHeaderBytes, "[load] ", path, ": the header length ", header_length,
              " is larger than the 100 MB limit: the file is corrupt or not a safetensors file");
  EMBER_CHECK(header_length <= file.size() - 8, "[load] ", path, ": the header length ", header_length,
              " is larger than the rest of the file (", file.size() - 8, " bytes): the file is truncated or corrupt");

  std::string text(header_length, '\0');
  read_all(file.fd(), text.data(), text.size(), 8, path, "load");
  EMBER_CHECK(!text.empty() && text[0] == '{', "[load] ", path,
              ": the header does not start with '{': the file is corrupt or not a safetensors file");
  const json root = parse_json_rejecting_duplicates(text, path);
  EMBER_CHECK(root.is_object(), "[load] ", path, ": the header is not a JSON object");

  Header header;
  header.data_start = 8 + header_length;
  const uint64_t data_size = file.size() - header.data_start;
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

}  // namespace

StateDict load(const std::string& path) {
  const SafetensorsFile file(path);
  const Header header = read_header(file);
  StateDict tensors;
  for (const TensorEntry& entry : header.tensors) {
    Tensor t = empty(entry.shape, entry.dtype);
    const uint64_t bytes = entry.end - entry.begin;
    if (bytes > 0) {
      read_all(file.fd(), t.data_ptr(), bytes, header.data_start + entry.begin, path, "load");
      if (entry.dtype == kBool) {
        // A C++ bool holding a byte other than 0 or 1 is undefined behaviour; read those as true.
        auto* p = static_cast<uint8_t*>(t.data_ptr());
        for (uint64_t i = 0; i < bytes; ++i) p[i] = p[i] != 0 ? 1 : 0;
      }
    }
    tensors.emplace(entry.name, std::move(t));
  }
  return tensors;
}

std::map<std::string, std::string> load_metadata(const std::string& path) {
  const SafetensorsFile file(path);
  return read_header(file).metadata;
}

}  // namespace ember

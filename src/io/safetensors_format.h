// The byte level of safetensors files: parsing and validating the header, reading a tensor's bytes,
// and encoding the header for the writer. Nothing here knows Tensor (only DType and Shape), so the
// fuzzer (fuzz/safetensors.cpp) links this file and base/error.cpp alone; ember/io.h has the
// format notes, safetensors.cpp the file reading and the writing on top of this.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ember/dtype.h"
#include "ember/shape.h"
#include "io/source.h"

namespace ember::safetensors_format {

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
inline constexpr std::string_view kMetadataKey = "__metadata__";

// safetensors' name of an ember dtype ("F32").
std::string_view name_of(DType dtype);
// The ember dtype of a safetensors name, if ember has one.
std::optional<DType> dtype_of(std::string_view name);

struct TensorEntry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0;  // the tensor's bytes are [begin, end) of the data region
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorEntry> tensors;  // by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // where the data region starts: 8 + the header length
};

// Reads and validates the header: the length against the source's size and the 100 MB limit,
// JSON with unique keys, each entry's dtype, shape and byte range (which must match), string
// metadata, and byte ranges that tile the data region exactly (no holes, no overlaps, nothing left
// over). After this, reading tensor i is reading tensors[i].end - tensors[i].begin bytes at
// data_start + tensors[i].begin. Errors read "[load] <path>: <problem>".
Header read_header(const detail::Source& source, const std::string& path);

// Copies `entry`'s bytes from `source` to `out` (end - begin bytes), BOOL bytes other than 0 and 1
// read as 1 (a C++ bool holding another byte is undefined behaviour).
void read_tensor(const detail::Source& source, const Header& header, const TensorEntry& entry, void* out);

// The bytes before the data region as save writes them: the header length, then the JSON header
// ("__metadata__" first when there is any, then the tensors in the given order, each with its
// dtype, shape and byte range) padded with spaces to a multiple of 8 bytes. Checks what read_header
// would refuse that the writer can be given: a tensor named "__metadata__", two tensors of one
// name, names or metadata that are not valid UTF-8. Errors read "[save] cannot write '<path>': <problem>".
std::string encode_header(const std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata,
                          const std::string& path);

}  // namespace ember::safetensors_format

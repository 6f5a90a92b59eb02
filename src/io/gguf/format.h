// The byte level of GGUF files: parsing and validating everything before the data section, and
// encoding it for the writer. Nothing here knows Tensor (only DType and Shape), so the fuzzer
// (fuzz/gguf.cpp) links this file, value.cpp and base/error.cpp alone; ember/gguf.h has the format
// notes, gguf.cpp the file and memory reading and the writing on top of this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/dtype.h"
#include "ember/gguf.h"
#include "ember/shape.h"
#include "io/source.h"

namespace ember::gguf_format {

inline constexpr uint32_t kVersion = 3;            // what the writer writes; 2 and 3 are read
inline constexpr uint64_t kDefaultAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT
inline constexpr int kMaxDims = 4;                 // GGML_MAX_DIMS
inline constexpr int kMaxArrayDepth = 16;          // arrays within arrays, counting the outermost
inline constexpr std::string_view kAlignmentKey = "general.alignment";

// The GGML tensor type (ggml_type) of an ember dtype, if GGUF has one (bool and uint8 have none).
std::optional<uint32_t> ggml_type_of(DType dtype);
// The ember dtype of a GGML type, if ember reads it.
std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type);
// GGML's name of a type ("Q4_K"), "" for a number GGML does not define.
std::string_view ggml_type_name(uint32_t ggml_type);
// "F32, F16, BF16, ..." for error messages.
std::string supported_ggml_types();

struct TensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = kFloat32;
  Shape shape;          // ember's order: GGUF's ne reversed
  uint64_t offset = 0;  // of the tensor's first byte, from the start of the file
  uint64_t bytes = 0;
};

struct Header {
  uint32_t version = kVersion;
  uint64_t alignment = kDefaultAlignment;
  std::vector<std::pair<std::string, gguf::Value>> metadata;
  std::vector<TensorInfo> tensors;
  uint64_t data_offset = 0;  // where the data section starts (the end of the header, padded)
};

// Reads and validates everything up to the data section, and checks that each tensor's bytes are
// inside the source, aligned and apart from the others: after this, reading tensor i is reading
// tensors[i].bytes bytes at tensors[i].offset. Errors read "[<op>] <what>: <problem>".
Header read_header(const detail::Source& source, const std::string& what, const std::string& op);

// --- writing ---------------------------------------------------------------------------------------

struct TensorEntry {
  std::string_view name;
  uint32_t ggml_type = 0;
  Shape shape;  // ember's order
  uint64_t bytes = 0;
};

// The alignment `metadata` asks for: general.alignment (a uint32, a nonzero power of two) or 32.
// Errors read "[<op>] <what>: <problem>".
uint64_t alignment_of(const std::vector<std::pair<std::string, gguf::Value>>& metadata, const std::string& what,
                      const std::string& op);

// Checks what the writer is given as read_header checks what it reads (nonempty unique keys,
// array nesting, the alignment, unique tensor names, at most 4 dims) and returns the bytes before
// the data section, padded to the alignment, as GGUFWriter writes them. Tensor i's data goes at
// data offset sum over j < i of padded(bytes_j, alignment).
std::string encode_header(const std::vector<std::pair<std::string, gguf::Value>>& metadata,
                          const std::vector<TensorEntry>& tensors, const std::string& what, const std::string& op);

// `bytes` rounded up to a multiple of `alignment` (a power of two).
constexpr uint64_t padded(uint64_t bytes, uint64_t alignment) { return (bytes + alignment - 1) & ~(alignment - 1); }

}  // namespace ember::gguf_format

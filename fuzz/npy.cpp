// libFuzzer target for the NumPy .npy reader (src/io/npy_format.cpp). Every input goes through
// read_header, the parse and validation ember::load_npy and load_npy_bytes run before they allocate
// a tensor; a header that passes has its data read as they read it (read_data: native byte order,
// bools of 0 and 1), and the array is then written again with encode_header (save_npy's header,
// row-major) and read back, which must give the same dtype, shape and bytes. ember::Error is the
// expected answer to a bad file; any other exception, a crash, a leak, a hang, a sanitizer report
// or a broken promise of the API (checked below) is a finding.
//
// Run: scripts/fuzz npy  (builds build-fuzz/npy with ASan + UBSan, replays fuzz/corpus/npy/ and the
// arrays in tests/data/, then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/npy FILE
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ember/error.h"
#include "fuzz/promise.h"
#include "io/npy_format.h"

const char* const ember_fuzz::kTarget = "npy";

namespace {

namespace format = ember::npy_format;
using ember::detail::MemorySource;

using ember_fuzz::require;

// The data, read as load_npy reads it, after checking what read_header promises.
std::string read_data(const format::Header& header, const MemorySource& source) {
  require(header.shape.size() <= ember::kMaxDims, "an array has at most kMaxDims dims");
  uint64_t count = 1;
  for (const int64_t dim : header.shape) {
    require(dim >= 0, "dims are not negative");
    count = dim == 0 ? 0 : count * static_cast<uint64_t>(dim);  // validated: no overflow
  }
  require(header.data_bytes == count * static_cast<uint64_t>(ember::dtype_size(header.type.dtype)),
          "the data is as many bytes as the shape and dtype say");
  require(header.data_offset <= source.size() && source.size() - header.data_offset == header.data_bytes,
          "the data fills the rest of the file exactly");
  std::string data(static_cast<size_t>(header.data_bytes), '\0');
  format::read_data(source, header, data.data());
  if (header.type.dtype == ember::kBool) {
    require(std::all_of(data.begin(), data.end(), [](char c) { return c == 0 || c == 1; }),
            "bool bytes are read as 0 or 1");
  }
  return data;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const MemorySource source(std::span(data, size));
  format::Header header;
  try {
    header = format::read_header(source, "<fuzz>");
  } catch (const ember::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  const std::string array = read_data(header, source);

  // Written again as save_npy writes it, then read back: the same dtype, shape and bytes. (A
  // column-major file's bytes are the transpose's, row-major: written as the transposed shape.)
  const std::optional<std::string_view> descr = format::descr_of(header.type.dtype);
  require(descr.has_value(), "every dtype the reader returns has a descr to write");
  ember::Shape shape = header.shape;
  if (header.fortran_order) std::reverse(shape.begin(), shape.end());
  std::string written = ember_fuzz::must_succeed("what read_header accepts, encode_header writes",
                                                 [&] { return format::encode_header(*descr, shape); });
  require(written.size() % format::kDataAlignment == 0, "the data starts at a multiple of 64 bytes");
  written += array;
  const MemorySource again_source(std::span(reinterpret_cast<const uint8_t*>(written.data()), written.size()));
  format::Header again = ember_fuzz::must_succeed("what the writer writes, the reader reads",
                                                  [&] { return format::read_header(again_source, "<fuzz again>"); });
  require(again.type.dtype == header.type.dtype && !again.type.big_endian && !again.fortran_order &&
              again.shape == shape && again.data_offset == written.size() - array.size(),
          "the dtype and shape survive a write and a read");
  require(read_data(again, again_source) == array, "the data survives a write and a read");
  return 0;
}

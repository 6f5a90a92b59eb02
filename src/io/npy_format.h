// The byte level of NumPy .npy files: the preamble, the header's Python literal, the data in
// native byte order, and np.save's header for the writer. Nothing here knows Tensor (only DType
// and Shape), so the fuzzer (fuzz/npy.cpp) links this file and base/error.cpp alone; ember/npy.h
// has the format notes, npy.cpp the file and memory reading and the writing on top of this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ember/dtype.h"
#include "ember/shape.h"
#include "io/source.h"

namespace ember::npy_format {

inline constexpr uint64_t kDataAlignment = 64;  // np.lib.format.ARRAY_ALIGN: where np.save starts the data

// The descr NumPy writes for an ember dtype ("<f4", "|b1"); none for bfloat16.
std::optional<std::string_view> descr_of(DType dtype);

struct ElementType {
  DType dtype = kFloat32;
  bool big_endian = false;
};

// A validated header: what the data is and where it is.
struct Header {
  ElementType type;
  bool fortran_order = false;
  Shape shape;  // as written; the data of a fortran_order file is the transpose's, row-major
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;  // the rest of the source, exactly
};

// Reads and validates the magic string, the version, the header length against the source's size,
// the header (exactly the dict literal NumPy writes), the dtype, the shape, and that the data fills
// the rest of the source exactly. Errors read "[load_npy] <what>: <problem>".
Header read_header(const detail::Source& source, const std::string& what);

// Copies the data (header.data_bytes at header.data_offset) to `out` in native byte order, BOOL
// bytes other than 0 and 1 read as 1; elements stay in the file's order.
void read_data(const detail::Source& source, const Header& header, void* out);

// np.save's header for a row-major array of `descr` and `shape`: the magic string, version 1.0
// (2.0 when the header outgrows 1.0's 16-bit length), the length and the dict, padded with spaces
// and a '\n' so that the data starts at a multiple of 64 bytes.
std::string encode_header(std::string_view descr, const Shape& shape);

}  // namespace ember::npy_format

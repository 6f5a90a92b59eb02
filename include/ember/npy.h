// NumPy's .npy files (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html),
// one array per file, as np.save writes and np.load reads them:
//
//   ["\x93NUMPY"][major][minor][header length: u16 (version 1.0) or u32 (2.0, 3.0), little-endian]
//   [header: a Python dict literal, padded with spaces and a '\n'][data]
//
// The header reads {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }: the dtype (byte
// order '<', '>' or '|', kind, item size), whether the data is in column-major order, and the
// shape. The data is the array's elements, back to back, and nothing after them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ember/tensor.h"

namespace ember {

/// Reads the .npy file at `path` (format version 1.0, 2.0 or 3.0) into a new contiguous CPU
/// tensor.
///
/// Supported dtypes: float16, float32, float64 ('f2', 'f4', 'f8'), int8, int16, int32, int64
/// ('i1', 'i2', 'i4', 'i8'), uint8 ('u1') and bool ('b1'), in either byte order (big-endian data
/// is byte-swapped). Column-major (fortran_order) data is transposed into row-major order.
/// 0-d and zero-size arrays are read as such. Bool bytes other than 0 and 1 are read as true.
///
/// Everything is validated before it is trusted: the magic string, the version, the header
/// length against the file size, the header's syntax (exactly the dict literal NumPy writes:
/// keys in any order, either quote style, trailing commas and extra spaces allowed), its three
/// keys, the dtype, non-negative dimensions, and that the data fills the rest of the file exactly
/// (a truncated file or trailing bytes are errors). Any problem throws an ember::Error naming the
/// path and what is wrong; a dtype ember cannot hold ('<c8', '<U5', '|O', structured dtypes) is
/// named in the error.
Tensor load_npy(const std::string& path);

/// load_npy() from the bytes of a .npy file in memory; `what` names them in errors.
Tensor load_npy_bytes(std::span<const uint8_t> bytes, const std::string& what = "<memory>");

/// Writes `tensor` (a CPU tensor of any layout; non-contiguous ones are written contiguous) to
/// `path` as NumPy's np.save does, byte for byte: format version 1.0 (2.0 if the header outgrew
/// 1.0's 16-bit length), little-endian, row-major, the header padded with spaces and a '\n' so that the data starts at
/// a multiple of 64 bytes. bfloat16 has no NumPy dtype and is refused: convert it with .to(kFloat32) first.
///
/// The write is atomic: the bytes go to a temporary file next to `path`, which is fsync'ed and
/// then renamed over `path`, and the folder is fsync'ed. If anything fails the temporary file is
/// removed, whatever was at `path` before is left untouched, and an ember::Error names the path.
void save_npy(const Tensor& tensor, const std::string& path);

}  // namespace ember

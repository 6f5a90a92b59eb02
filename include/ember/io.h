// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), the format
// PyTorch, JAX and the Hugging Face tools read and write:
//
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data region]
//
// The header maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}
// (byte offsets into the data region) and may hold "__metadata__": {string: string}. Tensors are
// stored contiguous, row-major, little-endian; together they cover the data region exactly.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ember/state_dict.h"

namespace ember {

/// Writes `tensors` (CPU tensors of any dtype and layout; non-contiguous ones are written
/// contiguous) and `metadata` to `path` in the safetensors format.
///
/// The write is atomic: the bytes go to a temporary file next to `path`, which is fsync'ed and
/// then renamed over `path`, and the folder is fsync'ed. If anything fails (an undefined or
/// non-CPU tensor, an unwritable folder, a full disk) the temporary file is removed, whatever was
/// at `path` before is left untouched, and an ember::Error names the path and the reason.
///
/// Data is laid out by element size (largest first), then by name, so every tensor is aligned
/// to its element size within the file. The header is padded with spaces to a multiple of 8
/// bytes, as the reference implementation does.
void save(const StateDict& tensors, const std::string& path, const std::map<std::string, std::string>& metadata = {});

/// Reads every tensor of a safetensors file into new CPU tensors.
///
/// The whole header is validated before any data is trusted: the header length against the
/// file size (and a 100 MB limit), the JSON, unique keys, dtype names, non-negative dimensions,
/// that each tensor's byte range matches its shape and dtype, and that the ranges cover the data
/// region exactly, with no holes or overlaps (as the reference implementation requires). Any
/// problem throws an ember::Error naming the path and what is wrong. Unknown fields inside a
/// tensor entry are ignored, as the reference implementation ignores them. BOOL bytes other than
/// 0 and 1 are read as true.
StateDict load(const std::string& path);

/// Writes `bytes` to `path` atomically, as save() writes: a failed write leaves whatever was at `path`
/// untouched, and the ember::Error starts with [op] and names the path and the reason.
void save_bytes(const std::string& path, std::string_view bytes, std::string_view op = "save");

/// Reads only the "__metadata__" of a safetensors file (validating the header as load() does);
/// empty when the file has none.
std::map<std::string, std::string> load_metadata(const std::string& path);

}  // namespace ember

// libFuzzer target for the safetensors reader (src/io/safetensors_format.cpp). Every input goes
// through read_header, the parse and validation ember::load and ember::load_metadata run before
// they allocate a tensor; a header that passes has each tensor's bytes read as load reads them
// (read_tensor), and is then written again with encode_header (the writer's header) and read back,
// which must give the same tensors, metadata and bytes. ember::Error is the expected answer to a
// bad file; any other exception, a crash, a leak, a hang, a sanitizer report or a broken promise of
// the API (checked below) is a finding.
//
// Run: scripts/fuzz safetensors  (builds build-fuzz/safetensors with ASan + UBSan, replays
// fuzz/corpus/safetensors/ and the checkpoints in tests/golden/, then fuzzes; see fuzz/README.md).
// Replay one input: build-fuzz/safetensors FILE
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "ember/error.h"
#include "fuzz/promise.h"
#include "io/safetensors_format.h"

const char* const ember_fuzz::kTarget = "safetensors";

namespace {

namespace format = ember::safetensors_format;
using ember::detail::MemorySource;

using ember_fuzz::require;

// Each tensor's bytes, read as ember::load reads them, after checking what read_header promises.
std::vector<std::string> read_tensors(const format::Header& header, const MemorySource& source) {
  require(header.data_start >= 8 && header.data_start <= source.size(), "the data region starts inside the file");
  const uint64_t data_size = source.size() - header.data_start;
  std::vector<const format::TensorEntry*> by_offset;
  for (const format::TensorEntry& entry : header.tensors) {
    require(entry.name != format::kMetadataKey, "no tensor is named __metadata__");
    require(entry.shape.size() <= ember::kMaxDims, "a tensor has at most kMaxDims dims");
    uint64_t bytes = static_cast<uint64_t>(ember::dtype_size(entry.dtype));
    for (const int64_t dim : entry.shape) {
      require(dim >= 0, "dims are not negative");
      require(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes), "a tensor's size fits in 64 bits");
    }
    require(entry.begin <= entry.end && entry.end - entry.begin == bytes,
            "a tensor's byte range matches its shape and dtype");
    by_offset.push_back(&entry);
  }
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    require(header.tensors[i - 1].name < header.tensors[i].name, "tensors come by name, each once");
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const format::TensorEntry* a, const format::TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  for (const format::TensorEntry* entry : by_offset) {
    require(entry->begin == covered, "the byte ranges tile the data region: no hole, no overlap");
    covered = entry->end;
  }
  require(covered == data_size, "the byte ranges tile the data region: nothing left over");

  std::vector<std::string> data;
  for (const format::TensorEntry& entry : header.tensors) {
    std::string bytes(static_cast<size_t>(entry.end - entry.begin), '\0');
    format::read_tensor(source, header, entry, bytes.data());
    if (entry.dtype == ember::kBool) {
      require(std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0 || c == 1; }),
              "BOOL bytes are read as 0 or 1");
    }
    data.push_back(std::move(bytes));
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
  const std::vector<std::string> tensor_data = read_tensors(header, source);

  // Written again as ember::save writes it (the tensors in data order), then read back: the same
  // tensors, metadata and bytes.
  std::vector<format::TensorEntry> in_data_order = header.tensors;
  std::sort(in_data_order.begin(), in_data_order.end(),
            [](const format::TensorEntry& a, const format::TensorEntry& b) { return a.begin < b.begin; });
  std::string written = ember_fuzz::must_succeed("what read_header accepts, encode_header writes", [&] {
    return format::encode_header(in_data_order, header.metadata, "<fuzz>");
  });
  require(written.size() % 8 == 0, "the header is padded to a multiple of 8 bytes");
  for (const format::TensorEntry& entry : in_data_order) {
    const auto it = std::find_if(header.tensors.begin(), header.tensors.end(),
                                 [&](const format::TensorEntry& e) { return e.name == entry.name; });
    written += tensor_data[static_cast<size_t>(it - header.tensors.begin())];
  }
  const MemorySource again_source(std::span(reinterpret_cast<const uint8_t*>(written.data()), written.size()));
  format::Header again = ember_fuzz::must_succeed("what the writer writes, the reader reads",
                                                  [&] { return format::read_header(again_source, "<fuzz again>"); });
  require(again.metadata == header.metadata, "metadata survives a write and a read");
  require(again.tensors.size() == header.tensors.size(), "every tensor survives a write and a read");
  const std::vector<std::string> again_data = read_tensors(again, again_source);
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const format::TensorEntry& a = header.tensors[i];
    const format::TensorEntry& b = again.tensors[i];
    require(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin && a.end == b.end,
            "a tensor's name, dtype, shape and byte range survive a write and a read");
    require(again_data[i] == tensor_data[i], "a tensor's bytes survive a write and a read");
  }
  return 0;
}

// libFuzzer target for the GGUF reader (src/io/gguf/format.cpp). Every input goes through
// read_header, the parse and validation gguf::load and gguf::load_bytes run before they allocate
// a tensor; a header that passes has each tensor's bytes read as load reads them, and is then
// written again with encode_header (the writer's header) and read back, which must give the same
// metadata and tensors. ember::Error is the expected answer to a bad file; any other exception, a
// crash, a leak, a hang, a sanitizer report or a broken promise of the API (checked below) is a
// finding.
//
// Run: scripts/fuzz gguf  (builds build-fuzz/gguf with ASan + UBSan, replays fuzz/corpus/gguf/ and
// the test files, then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/gguf FILE
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "ember/error.h"
#include "fuzz/promise.h"
#include "io/gguf/format.h"

const char* const ember_fuzz::kTarget = "gguf";

namespace {

namespace format = ember::gguf_format;

using ember_fuzz::require;

// Each tensor's bytes, read as gguf::load reads them, after checking what read_header promises.
std::vector<std::string> read_tensors(const format::Header& header, const ember::detail::Source& source) {
  std::vector<std::string> data;
  for (const format::TensorInfo& info : header.tensors) {
    require(
        info.offset >= header.data_offset && info.offset <= source.size() && info.bytes <= source.size() - info.offset,
        "a tensor's bytes are inside the file, after the header");
    require((info.offset - header.data_offset) % header.alignment == 0,
            "a tensor starts at a multiple of the alignment");
    require(info.shape.size() <= format::kMaxDims, "a tensor has at most 4 dims");
    const ember::BlockLayout layout = ember::block_layout(info.dtype);
    require(
        !ember::is_block_quantized(info.dtype) || (info.shape.size() >= 1 && info.shape.back() % layout.values == 0),
        "a block tensor's rows are whole blocks");
    require(static_cast<uint64_t>(ember::storage_bytes(info.dtype, info.shape.numel())) == info.bytes,
            "a tensor's byte count matches its shape and dtype");
    std::string bytes(static_cast<size_t>(info.bytes), '\0');
    source.read(bytes.data(), bytes.size(), info.offset);
    data.push_back(std::move(bytes));
  }
  return data;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::detail::MemorySource source(std::span(data, size));
  format::Header header;
  try {
    header = format::read_header(source, "<fuzz>", "gguf::load");
  } catch (const ember::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  const std::vector<std::string> tensor_data = read_tensors(header, source);
  // A file with no tensors may ask for any alignment; writing its padding (up to 2 GiB) would only
  // measure the allocator.
  if (header.alignment > (uint64_t{1} << 16)) return 0;

  // Written again as gguf::save writes it, then read back: the same file.
  std::vector<format::TensorEntry> entries;
  for (const format::TensorInfo& info : header.tensors) {
    entries.push_back({info.name, info.ggml_type, info.shape, info.bytes});
  }
  std::string written = ember_fuzz::must_succeed("what read_header accepts, encode_header writes", [&] {
    return format::encode_header(header.metadata, entries, "<fuzz>", "gguf::save");
  });
  require(written.size() % header.alignment == 0, "the header is padded to the alignment");
  for (const std::string& bytes : tensor_data) {
    written += bytes;
    written.resize(static_cast<size_t>(format::padded(written.size(), header.alignment)), '\0');
  }
  const ember::detail::MemorySource again_source(
      std::span(reinterpret_cast<const uint8_t*>(written.data()), written.size()));
  format::Header again = ember_fuzz::must_succeed("what the writer writes, the reader reads", [&] {
    return format::read_header(again_source, "<fuzz again>", "gguf::load");
  });
  require(again.metadata == header.metadata, "metadata survives a write and a read");
  require(again.alignment == header.alignment, "the alignment survives a write and a read");
  require(again.tensors.size() == header.tensors.size(), "every tensor survives a write and a read");
  const std::vector<std::string> again_data = read_tensors(again, again_source);
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const format::TensorInfo& a = header.tensors[i];
    const format::TensorInfo& b = again.tensors[i];
    require(a.name == b.name && a.ggml_type == b.ggml_type && a.dtype == b.dtype && a.shape == b.shape &&
                a.bytes == b.bytes,
            "a tensor's name, type and shape survive a write and a read");
    require(again_data[i] == tensor_data[i], "a tensor's bytes survive a write and a read");
  }
  return 0;
}

// Where a reader's bytes come from: memory (MemorySource, here) or a file on disk (FileSource,
// io/file_source.h). The byte-level readers (gguf/format.h, safetensors_format.h, npy_format.h)
// parse from a Source and know nothing of Tensor, so the fuzzers (fuzz/) link them without the
// library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace ember::detail {

class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Copies bytes [offset, offset + bytes) to `out`; the caller has checked they are in range.
  virtual void read(void* out, size_t bytes, uint64_t offset) const = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(void* out, size_t bytes, uint64_t offset) const override {
    if (bytes > 0) std::memcpy(out, bytes_.data() + offset, bytes);
  }

 private:
  std::span<const uint8_t> bytes_;
};

}  // namespace ember::detail

// A file on disk as a Source (io/source.h), for the readers' file paths: ember::load,
// load_npy, gguf::load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/atomic_file.h"
#include "io/source.h"

namespace ember::detail {

// A regular file opened for reading, read with pread. Opening fails with "[op] cannot open
// '<path>': <reason>" (or cannot stat, or is not a regular file); a read fails as read_all does.
class FileSource final : public Source {
 public:
  FileSource(std::string path, std::string op);
  uint64_t size() const override { return size_; }
  void read(void* out, size_t bytes, uint64_t offset) const override;

 private:
  std::string path_;
  std::string op_;
  FileDescriptor fd_;
  uint64_t size_ = 0;
};

}  // namespace ember::detail

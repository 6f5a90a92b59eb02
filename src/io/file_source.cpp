// FileSource (file_source.h).
#include "io/file_source.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "ember/error.h"

namespace ember::detail {

FileSource::FileSource(std::string path, std::string op)
    : path_(std::move(path)), op_(std::move(op)), fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)) {
  EMBER_CHECK(fd_.get() >= 0, "[", op_, "] cannot open '", path_, "': ", errno_text(errno));
  struct stat info {};
  EMBER_CHECK(::fstat(fd_.get(), &info) == 0, "[", op_, "] cannot stat '", path_, "': ", errno_text(errno));
  EMBER_CHECK(S_ISREG(info.st_mode), "[", op_, "] '", path_, "' is not a regular file");
  size_ = static_cast<uint64_t>(info.st_size);
}

void FileSource::read(void* out, size_t bytes, uint64_t offset) const {
  read_all(fd_.get(), out, bytes, offset, path_, op_);
}

}  // namespace ember::detail

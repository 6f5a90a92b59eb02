// Atomic file writes and the POSIX helpers the io layer shares (see atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "ember/error.h"
#include "ember/io.h"

namespace ember::detail {
namespace {

// The folder `path` is in ("." for a bare file name).
std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Creates a new, uniquely named file next to `path`; returns its name and descriptor.
std::pair<std::string, int> create_temp_file(const std::string& path, const std::string& op) {
  static std::atomic<uint64_t> counter{0};
  const std::string folder = folder_of(path);
  const std::string name = std::filesystem::path(path).filename().string();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp =
        folder + "/." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {temp, fd};
    if (errno != EEXIST) {
      EMBER_FAIL("[", op, "] cannot write '", path, "': creating a temporary file in '", folder,
                 "' failed: ", errno_text(errno));
    }
  }
  EMBER_FAIL("[", op, "] cannot write '", path, "': could not find a free temporary file name in '", folder, "'");
}

// Makes the rename durable: a crash after the write returns must not bring back the old file.
void sync_folder(const std::string& path, const std::string& op) {
  FileDescriptor fd(::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EMBER_CHECK(fd.get() >= 0, "[", op, "] wrote '", path,
              "' but could not open its folder to sync it: ", errno_text(errno));
  // Some filesystems cannot sync a folder (EINVAL); there is nothing more to do on those.
  EMBER_CHECK(::fsync(fd.get()) == 0 || errno == EINVAL, "[", op, "] wrote '", path,
              "' but syncing its folder failed: ", errno_text(errno));
}

}  // namespace

std::string errno_text(int error) { return std::generic_category().message(error); }

// --- FileDescriptor ---------------------------------------------------------------------------------

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

void FileDescriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int FileDescriptor::close() {
  const int result = ::close(fd_);
  fd_ = -1;
  return result;
}

void read_all(int fd, void* data, size_t bytes, uint64_t offset, const std::string& path, const std::string& op) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      EMBER_FAIL("[", op, "] ", path, ": read failed at byte ", offset, ": ", errno_text(errno));
    }
    EMBER_CHECK(got > 0, "[", op, "] ", path, ": unexpected end of file at byte ", offset,
                " (was it truncated while reading?)");
    p += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

// --- AtomicFile -------------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  auto [temp_path, fd] = create_temp_file(path_, op_);
  temp_path_ = std::move(temp_path);
  fd_.reset(fd);
}

AtomicFile::~AtomicFile() {
  if (!renamed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd_.get(), p, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      EMBER_FAIL("[", op_, "] writing '", path_, "' failed (temporary file '", temp_path_, "'): ", errno_text(errno));
    }
    p += written;
    bytes -= static_cast<size_t>(written);
  }
}

void AtomicFile::commit() {
  EMBER_CHECK(::fsync(fd_.get()) == 0, "[", op_, "] writing '", path_, "' failed: fsync of '", temp_path_,
              "': ", errno_text(errno));
  EMBER_CHECK(fd_.close() == 0, "[", op_, "] writing '", path_, "' failed: closing '", temp_path_,
              "': ", errno_text(errno));
  EMBER_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "[", op_, "] cannot write '", path_, "': renaming '",
              temp_path_, "' over it failed: ", errno_text(errno));
  renamed_ = true;
  sync_folder(path_, op_);
}

}  // namespace ember::detail

namespace ember {

void save_bytes(const std::string& path, std::string_view bytes, std::string_view op) {
  detail::AtomicFile file(path, std::string(op));
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace ember

// Atomic file writes and the POSIX helpers the readers share (see atomic_file.h and its
// Note [temporary files]).
#include "base/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "ember/error.h"

namespace ember::detail {
namespace {

// The folder `path` is in ("." for a bare file name).
std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// ".<name>.tmp.", the start of the temporary files' names for `path`.
std::string temp_prefix(const std::string& path) {
  std::string prefix = ".";  // (appended, not "." + name: GCC 12 warns falsely of overlapping copies)
  prefix += std::filesystem::path(path).filename().string();
  prefix += ".tmp.";
  return prefix;
}

bool all_digits(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

// Whether `name` is a temporary file for the path whose prefix is `prefix`: "<prefix><pid>.<n>".
bool is_temp_name(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  const std::string_view rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  return dot != std::string_view::npos && all_digits(rest.substr(0, dot)) && all_digits(rest.substr(dot + 1));
}

// Removes the temporary files of `path` that no process holds locked: those of writers killed
// mid-write. Best effort: whatever cannot be listed, opened, locked or removed stays.
void remove_abandoned_temp_files(const std::string& path) {
  const std::string folder = folder_of(path);
  const std::string prefix = temp_prefix(path);
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (is_temp_name(entry->d_name, prefix)) names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
  }
  for (const std::string& name : names) {
    const std::string temp = folder + "/" + name;
    // O_RDWR: on NFS a flock is a POSIX write lock, which needs a descriptor open for writing.
    const FileDescriptor fd(::open(temp.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live writer's
    // Still the file we locked (not one created under the same name since we listed it).
    struct stat locked {
    }, named{};
    if (::fstat(fd.get(), &locked) == 0 && S_ISREG(locked.st_mode) && ::lstat(temp.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino) {
      ::unlink(temp.c_str());
    }
  }
}

// Creates a new, uniquely named temporary file next to `path`, locked against
// remove_abandoned_temp_files(); returns its name and descriptor.
std::pair<std::string, int> create_temp_file(const std::string& path, const std::string& op) {
  static std::atomic<uint64_t> counter{0};
  const std::string folder = folder_of(path);
  const std::string start = folder + "/" + temp_prefix(path) + std::to_string(::getpid()) + ".";
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp = start + std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      EMBER_FAIL("[", op, "] cannot write '", path, "': creating a temporary file in '", folder,
                 "' failed: ", errno_text(errno));
    }
    // Another process's remove_abandoned_temp_files() may have found the file between the open and
    // the lock, and removed it: then take another name. (On a filesystem without locks none is
    // taken here, and none can be taken to remove the file either.)
    if (::flock(fd, LOCK_EX) == 0) {
      struct stat info {};
      if (::fstat(fd, &info) == 0 && info.st_nlink == 0) {
        ::close(fd);
        continue;
      }
    }
    return {temp, fd};
  }
  EMBER_FAIL("[", op, "] cannot write '", path, "': could not find a free temporary file name in '", folder, "'");
}

// Makes the rename durable: a crash after the write returns must not bring back the old file.
void sync_folder(const std::string& path, const std::string& op) {
  const FileDescriptor fd(::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
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
  EMBER_CHECK(!path_.empty(), "[", op_, "] the path is empty");
  EMBER_CHECK(!std::filesystem::path(path_).filename().empty(), "[", op_, "] cannot write '", path_,
              "': the path names a folder, not a file");
  remove_abandoned_temp_files(path_);
  auto [temp_path, fd] = create_temp_file(path_, op_);
  temp_path_ = std::move(temp_path);
  fd_.reset(fd);
  // A second descriptor of the same open file holds the lock (locks belong to the open file, not
  // to a descriptor) from the close in commit(), which must be checked, until the rename.
  lock_.reset(::dup(fd));
}

AtomicFile::~AtomicFile() {
  if (!renamed_) ::unlink(temp_path_.c_str());  // before the descriptors close and drop the lock
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
  lock_.reset(-1);
  sync_folder(path_, op_);
}

}  // namespace ember::detail

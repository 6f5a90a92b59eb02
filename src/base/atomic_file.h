// Atomic file writes for the io layer (AtomicFile: temp file, fsync, rename, fsync the folder),
// and the small POSIX helpers that it and the readers share. Every error starts with "[op]",
// the name of the public function doing the IO ("save", "load_npy"), and names the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::detail {

// strerror for `error`, thread-safe.
std::string errno_text(int error);

// Owns a file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes the descriptor held (if any) and takes ownership of `fd`.
  void reset(int fd);
  // Closes now and reports the error (close can report a failed delayed write on some filesystems).
  int close();

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset` of `fd`. The caller has checked that the file is long
// enough, so a short read means the file changed underneath us.
void read_all(int fd, void* data, size_t bytes, uint64_t offset, const std::string& path, const std::string& op);

// Writes `path` atomically: the bytes go to a new temporary file next to `path` (same folder, so
// the rename is atomic), which commit() fsyncs and renames over `path` before fsyncing the
// folder. Until commit() has renamed it, destroying the AtomicFile removes the temporary file,
// so a failed write leaves whatever was at `path` untouched.
class AtomicFile {
 public:
  // Creates the temporary file (0666 minus the umask, as any newly written file).
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename over the path, fsync the folder (a crash after commit() returns must not
  // bring back the old file).
  void commit();

 private:
  std::string path_;
  std::string op_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool renamed_ = false;
};

}  // namespace ember::detail

// Writing a file atomically, the one way ember writes every file (checkpoints, GGUF and .npy files,
// PNGs, traces, SVGs, the peaks cache): AtomicFile writes a temporary file next to the target,
// fsyncs it, renames it over the target and fsyncs the folder. It lives in base so that every
// layer, the profiler too, writes files this way; the readers share its small POSIX helpers
// (FileDescriptor, read_all). Errors start with "[op]" (the public function or command doing the
// IO), name the path and give the OS's reason.
//
// Note [temporary files]: the temporary file of `<folder>/<name>` is `<folder>/.<name>.tmp.<pid>.<n>`
// (hidden, and never ending in the target's extension, so no glob for checkpoints matches it). Its
// writer holds a flock on it until the rename. A write that fails removes it; a process killed
// mid-write (SIGKILL, power loss) cannot, and leaves it behind, unlocked. The next AtomicFile for
// the same path removes every such file that no live process holds locked: leftovers live only
// until the next write of the same file, and a live writer's file is never touched. (The pid only
// keeps names apart; the lock, not the pid, says whether a writer lives, so this holds across PID
// namespaces and NFS clients.)
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
// so a failed write leaves whatever was at `path` untouched. See Note [temporary files].
class AtomicFile {
 public:
  // Removes the temporary files that killed writers of `path` left, then creates this one (0666
  // minus the umask, as any newly written file).
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
  FileDescriptor lock_;  // the same open file, holding its flock until the rename
  bool renamed_ = false;
};

}  // namespace ember::detail

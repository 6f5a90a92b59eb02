// GGUF files: load and load_bytes (format.cpp validates the whole header, then each tensor's bytes
// are read straight into its storage) and save (atomic: temp file, fsync, rename, fsync the folder;
// the bytes GGUFWriter writes). Format notes are in ember/gguf.h.
#include "ember/gguf.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#if defined(__unix__) && !defined(__EMSCRIPTEN__)
#define EMBER_GGUF_MMAP 1
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#else
#define EMBER_GGUF_MMAP 0
#endif

#include "base/atomic_file.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "io/file_source.h"
#include "io/gguf/format.h"

namespace ember::gguf {
namespace {

using detail::AtomicFile;

const std::string kLoad = "gguf::load";
const std::string kSave = "gguf::save";

File read_file(const detail::Source& source, const std::string& what) {
  gguf_format::Header header = gguf_format::read_header(source, what, kLoad);
  File file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.tensors.size());
  for (gguf_format::TensorInfo& info : header.tensors) {
    // Validated: the bytes are inside the source, so the allocation is no larger than the file.
    Tensor tensor = empty(info.shape, info.dtype);
    if (info.bytes > 0) source.read(tensor.data_ptr(), static_cast<size_t>(info.bytes), info.offset);
    file.tensors.emplace_back(std::move(info.name), std::move(tensor));
  }
  return file;
}

// Writes `bytes` zeros.
void write_zeros(AtomicFile& out, uint64_t bytes) {
  static constexpr std::array<char, 4096> kZeros{};
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, kZeros.size()));
    out.write(kZeros.data(), chunk);
    bytes -= chunk;
  }
}

}  // namespace

const Value* File::find_value(std::string_view key) const {
  for (const auto& [name, value] : metadata) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Value& File::value(std::string_view key) const {
  const Value* value = find_value(key);
  EMBER_CHECK(value != nullptr, "[gguf::File] there is no metadata '", key, "'");
  return *value;
}

const Tensor* File::find_tensor(std::string_view name) const {
  for (const auto& [candidate, tensor] : tensors) {
    if (candidate == name) return &tensor;
  }
  return nullptr;
}

const Tensor& File::tensor(std::string_view name) const {
  const Tensor* tensor = find_tensor(name);
  EMBER_CHECK(tensor != nullptr, "[gguf::File] there is no tensor '", name, "'");
  return *tensor;
}

File load(const std::string& path) {
  const detail::FileSource source(path, kLoad);
  return read_file(source, path);
}

#if EMBER_GGUF_MMAP
namespace {

// A file mapped copy-on-write, unmapped when the last storage over it is freed.
struct Mapping {
  void* data = nullptr;
  size_t bytes = 0;
  std::atomic<int64_t> users{0};
};

void release_mapping(void*, int64_t, void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  if (mapping->users.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    munmap(mapping->data, mapping->bytes);
    delete mapping;
  }
}

}  // namespace

File map(const std::string& path) {
  const detail::FileSource source(path, kLoad);  // opens and checks the file, with load()'s errors
  const size_t bytes = static_cast<size_t>(source.size());
  if (bytes == 0) return load(path);  // nothing to map: load() gives the error
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EMBER_CHECK(fd >= 0, "[", kLoad, "] cannot open '", path, "': ", std::strerror(errno));
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  EMBER_CHECK(data != MAP_FAILED, "[", kLoad, "] cannot map '", path, "': ", std::strerror(map_errno));
  auto* mapping = new Mapping{data, bytes};
  mapping->users.store(1);  // this function's, until every tensor holds its own
  File file;
  try {
    const auto* base = static_cast<uint8_t*>(data);
    gguf_format::Header header = gguf_format::read_header(detail::MemorySource({base, bytes}), path, kLoad);
    file.metadata = std::move(header.metadata);
    file.tensors.reserve(header.tensors.size());
    for (gguf_format::TensorInfo& info : header.tensors) {
      auto impl = std::make_shared<TensorImpl>();
      mapping->users.fetch_add(1, std::memory_order_relaxed);
      impl->storage = std::make_shared<StorageImpl>(static_cast<uint8_t*>(data) + info.offset,
                                                    static_cast<int64_t>(info.bytes), kCPU, &release_mapping, mapping);
      impl->set_geometry(info.shape, contiguous_strides(info.shape), 0);
      impl->dtype = info.dtype;
      file.tensors.emplace_back(std::move(info.name), Tensor(std::move(impl)));
    }
  } catch (...) {
    file.tensors.clear();
    release_mapping(nullptr, 0, mapping);
    throw;
  }
  release_mapping(nullptr, 0, mapping);
  return file;
}
#else
File map(const std::string& path) { return load(path); }
#endif

File load_bytes(std::span<const uint8_t> bytes, const std::string& what) {
  return read_file(detail::MemorySource(bytes), what);
}

void save(const std::string& path, const File& file) {
  EMBER_CHECK(!path.empty(), "[", kSave, "] the path is empty");
  const std::string what = "cannot write '" + path + "'";
  const autograd::NoGradGuard no_grad;  // contiguous copies of parameters are data, not graph
  // Everything that can be checked is checked before a byte is written.
  std::vector<Tensor> data;
  std::vector<gguf_format::TensorEntry> entries;
  data.reserve(file.tensors.size());
  entries.reserve(file.tensors.size());
  for (const auto& [name, tensor] : file.tensors) {
    EMBER_CHECK(tensor.defined(), "[", kSave, "] ", what, ": tensor '", name, "' is undefined");
    const std::optional<uint32_t> ggml_type = gguf_format::ggml_type_of(tensor.dtype());
    EMBER_CHECK(ggml_type.has_value(), "[", kSave, "] ", what, ": tensor '", name, "' is ", tensor.dtype(),
                ", which GGUF has no type for (it holds float32, float16, bfloat16, float64, int8, int16, int32, "
                "int64, q8_0, q4_0 and q4_1); convert it first");
    data.push_back(tensor.to(kCPU).contiguous());  // a device tensor is written from a host copy
    entries.push_back(
        {name, *ggml_type, tensor.shape(), static_cast<uint64_t>(storage_bytes(tensor.dtype(), tensor.numel()))});
  }
  const std::string header = gguf_format::encode_header(file.metadata, entries, what, kSave);
  const uint64_t alignment = gguf_format::alignment_of(file.metadata, what, kSave);

  AtomicFile out(path, kSave);
  out.write(header.data(), header.size());
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t bytes = entries[i].bytes;
    if (bytes > 0) out.write(data[i].data_ptr(), static_cast<size_t>(bytes));
    write_zeros(out, gguf_format::padded(bytes, alignment) - bytes);
  }
  out.commit();
}

}  // namespace ember::gguf

// safetensors checkpoints: save (atomic: temp file, fsync, rename, fsync the folder) and load
// (safetensors_format.cpp validates the whole header before trusting a byte of it, then each
// tensor's bytes are read straight into its storage). Format notes are in ember/io.h.
#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "base/atomic_file.h"
#include "ember/autograd.h"
#include "ember/io.h"
#include "ember/ops.h"
#include "io/file_source.h"
#include "io/safetensors_format.h"

namespace ember {
namespace {
using detail::AtomicFile;

// --- save -----------------------------------------------------------------------------------------

struct PlannedTensor {
  const std::string* name;
  Tensor data;  // contiguous
  uint64_t begin = 0;
  uint64_t end = 0;
};

}  // namespace

void save(const StateDict& tensors, const std::string& path, const std::map<std::string, std::string>& metadata) {
  EMBER_CHECK(!path.empty(), "[save] the path is empty");
  const autograd::NoGradGuard no_grad;  // contiguous copies of parameters are data, not graph
  // Everything that can be checked is checked before a byte is written.
  std::vector<PlannedTensor> plan;
  plan.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    EMBER_CHECK(tensor.defined(), "[save] cannot write '", path, "': tensor '", name, "' is undefined");
    EMBER_CHECK(!is_block_quantized(tensor.dtype()), "[save] cannot write '", path, "': tensor '", name, "' is ",
                tensor.dtype(), ", which safetensors has no dtype for; save it as GGUF (ember::gguf::save)");
    plan.push_back({&name, tensor.to(kCPU).contiguous()});  // a device tensor is written from a host copy
  }
  // Largest elements first, then by name: with an 8-byte aligned data region every tensor starts
  // at a multiple of its element size.
  std::stable_sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.data.element_size() > b.data.element_size();
  });
  std::vector<safetensors_format::TensorEntry> entries;
  uint64_t offset = 0;
  for (PlannedTensor& p : plan) {
    p.begin = offset;
    p.end = offset + static_cast<uint64_t>(p.data.numel() * p.data.element_size());
    offset = p.end;
    entries.push_back({*p.name, p.data.dtype(), p.data.shape(), p.begin, p.end});
  }
  const std::string header = safetensors_format::encode_header(entries, metadata, path);

  AtomicFile file(path, "save");
  file.write(header.data(), header.size());
  for (const PlannedTensor& p : plan) {
    if (p.end > p.begin) file.write(p.data.data_ptr(), p.end - p.begin);
  }
  file.commit();
}

void save_bytes(const std::string& path, std::string_view bytes, std::string_view op) {
  AtomicFile file(path, std::string(op));
  file.write(bytes.data(), bytes.size());
  file.commit();
}

// --- load ---------------------------------------------------------------------------------------

StateDict load(const std::string& path) {
  const detail::FileSource file(path, "load");
  const safetensors_format::Header header = safetensors_format::read_header(file, path);
  StateDict tensors;
  for (const safetensors_format::TensorEntry& entry : header.tensors) {
    // Validated: the bytes are inside the file, so the allocation is no larger than the file.
    Tensor t = empty(entry.shape, entry.dtype);
    safetensors_format::read_tensor(file, header, entry, t.data_ptr());
    tensors.emplace(entry.name, std::move(t));
  }
  return tensors;
}

std::map<std::string, std::string> load_metadata(const std::string& path) {
  const detail::FileSource file(path, "load");
  return safetensors_format::read_header(file, path).metadata;
}

}  // namespace ember

// NumPy .npy files: load_npy and load_npy_bytes (npy_format.cpp validates the preamble and parses
// the header's Python literal strictly before trusting either; here the data becomes a row-major
// tensor) and save_npy (atomic, the bytes np.save writes). Format notes are in ember/npy.h.
#include "ember/npy.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "base/atomic_file.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "io/file_source.h"
#include "io/npy_format.h"

namespace ember {
namespace {
using detail::AtomicFile;

// The data of `header` from `source` as a row-major tensor: read into the transposed shape for a
// column-major file, then transposed.
Tensor read_tensor(const detail::Source& source, const npy_format::Header& header) {
  Shape shape = header.shape;
  if (header.fortran_order) std::reverse(shape.begin(), shape.end());
  // Validated: the bytes are inside the source, so the allocation is no larger than the source.
  Tensor raw = empty(shape, header.type.dtype);
  npy_format::read_data(source, header, raw.data_ptr());
  if (!header.fortran_order || raw.dim() < 2) return raw;
  Axes reversed;
  for (int axis = raw.dim() - 1; axis >= 0; --axis) reversed.push_back(axis);
  return raw.permute(reversed).contiguous();
}

}  // namespace

Tensor load_npy(const std::string& path) {
  const detail::FileSource file(path, "load_npy");
  return read_tensor(file, npy_format::read_header(file, path));
}

Tensor load_npy_bytes(std::span<const uint8_t> bytes, const std::string& what) {
  const detail::MemorySource source(bytes);
  return read_tensor(source, npy_format::read_header(source, what));
}

void save_npy(const Tensor& tensor, const std::string& path) {
  EMBER_CHECK(!path.empty(), "[save_npy] the path is empty");
  EMBER_CHECK(tensor.defined(), "[save_npy] cannot write '", path, "': the tensor is undefined");
  EMBER_CHECK(tensor.device().is_cpu(), "[save_npy] cannot write '", path, "': the tensor is on ", tensor.device(),
              "; copy it to the CPU first");
  const std::optional<std::string_view> descr = npy_format::descr_of(tensor.dtype());
  EMBER_CHECK(descr.has_value(), "[save_npy] cannot write '", path, "': NumPy has no ", tensor.dtype(),
              " dtype; convert the tensor with .to(kFloat32) first");
  const autograd::NoGradGuard no_grad;  // a contiguous copy of a parameter is data, not graph
  const Tensor data = tensor.contiguous();
  const std::string header = npy_format::encode_header(*descr, data.shape());
  const auto data_bytes = static_cast<size_t>(data.numel() * data.element_size());
  AtomicFile file(path, "save_npy");
  file.write(header.data(), header.size());
  if (data_bytes > 0) file.write(data.data_ptr(), data_bytes);
  file.commit();
}

}  // namespace ember

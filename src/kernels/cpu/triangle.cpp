// tril and triu: each row of each (M, N) matrix is a copied part and a zeroed part, split at the
// diagonal, so a row is one memcpy and one memset whatever the dtype (zero bytes are the zero of
// every dtype). Rows run in parallel.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

// Bytes below which the rows stay on one thread.
constexpr int64_t kTriangleGrainBytes = 1 << 17;

// inputs: x (..., M, N), contiguous; outputs: the same shape and dtype, contiguous.
void triangle_kernel(const KernelCall& c, bool lower) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  if (x.numel() == 0) return;
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const int64_t element = dtype_size(x.dtype);
  const int64_t row_bytes = cols * element;
  // Clamped so that i + diagonal cannot overflow; any diagonal outside [-rows, cols] acts as these.
  const int64_t diagonal = std::clamp<int64_t>(c.get<TriangleAttrs>().diagonal, -rows, cols);
  const char* in = x.ptr<const char>();
  char* o = out.ptr<char>();
  const int64_t grain = std::max<int64_t>(1, kTriangleGrainBytes / std::max<int64_t>(1, row_bytes));
  parallel_for(0, x.numel() / cols, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % rows;
      // tril keeps the columns j <= i + diagonal, triu the columns j >= i + diagonal.
      const int64_t split = std::clamp<int64_t>(lower ? i + diagonal + 1 : i + diagonal, 0, cols) * element;
      const char* src = in + r * row_bytes;
      char* dst = o + r * row_bytes;
      if (lower) {
        std::memcpy(dst, src, static_cast<size_t>(split));
        std::memset(dst + split, 0, static_cast<size_t>(row_bytes - split));
      } else {
        std::memset(dst, 0, static_cast<size_t>(split));
        std::memcpy(dst + split, src + split, static_cast<size_t>(row_bytes - split));
      }
    }
  });
}

void tril_kernel(const KernelCall& c) { triangle_kernel(c, true); }
void triu_kernel(const KernelCall& c) { triangle_kernel(c, false); }

}  // namespace

void register_triangle_kernels(KernelTable& table) {
  table.add(OpKind::kTril, DeviceType::kCPU, tril_kernel, DTypeSet::all());
  table.add(OpKind::kTriu, DeviceType::kCPU, triu_kernel, DTypeSet::all());
}

}  // namespace ember::cpu

// cumsum: running sums along one dim of a contiguous (outer, size, inner) buffer. The sums
// accumulate as PyTorch's CPU kernel does (its acc_type): float32 and float64 in double, float16 and
// bfloat16 in float, integers in int64, each result rounded once to the output's dtype. Lines along
// the last dim (inner == 1) run one scan each; otherwise blocks of up to kColumnBlock adjacent
// columns advance together, so the reads stay contiguous. Each sum is taken in index order by one
// thread: the results do not depend on the thread count.
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

constexpr int64_t kColumnBlock = 256;

// PyTorch's CPU accumulation type for cumsum.
template <class T>
using CumsumAcc = std::conditional_t<!is_floating(dtype_of<T>()), int64_t,
                                     std::conditional_t<std::is_same_v<compute_t<T>, T>, double, float>>;

template <class T>
void cumsum_lines(const T* in, T* out, int64_t outer, int64_t size, int64_t inner) {
  using Acc = CumsumAcc<T>;
  using C = compute_t<T>;
  const auto to_acc = [](T v) {
    if constexpr (std::is_same_v<T, bool>) {
      return static_cast<Acc>(v ? 1 : 0);
    } else {
      return static_cast<Acc>(static_cast<C>(v));
    }
  };
  const auto from_acc = [](Acc v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v != 0;
    } else {
      return static_cast<T>(static_cast<C>(v));
    }
  };
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, size)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     const T* src = in + o * size;
                     T* dst = out + o * size;
                     Acc sum = 0;
                     for (int64_t i = 0; i < size; ++i) {
                       sum += to_acc(src[i]);
                       dst[i] = from_acc(sum);
                     }
                   }
                 });
    return;
  }
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t work_per_task = size * std::min(inner, kColumnBlock);
  parallel_for(0, outer * blocks, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, work_per_task)),
               [&](int64_t begin, int64_t end) {
                 Acc sums[kColumnBlock];
                 for (int64_t task = begin; task < end; ++task) {
                   const int64_t o = task / blocks, j0 = task % blocks * kColumnBlock;
                   const int64_t width = std::min(kColumnBlock, inner - j0);
                   std::fill(sums, sums + width, Acc(0));
                   for (int64_t i = 0; i < size; ++i) {
                     const int64_t at = (o * size + i) * inner + j0;
                     for (int64_t j = 0; j < width; ++j) {
                       sums[j] += to_acc(in[at + j]);
                       out[at + j] = from_acc(sums[j]);
                     }
                   }
                 }
               });
}

// inputs: x, contiguous, in the output's dtype (at least 1-D); outputs: the same shape and dtype.
void cumsum_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &out = c.outputs[0];
  if (x.numel() == 0) return;
  const int d = static_cast<int>(c.get<DimAttrs>().dim);
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= x.size(k);
  for (int k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
  dispatch_dtype(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumsum_lines(x.ptr<const T>(), out.ptr<T>(), outer, x.size(d), inner);
  });
}

}  // namespace

void register_cumsum_kernels(KernelTable& table) {
  table.add(OpKind::kCumsum, DeviceType::kCPU, cumsum_kernel, DTypeSet::all());
}

}  // namespace ember::cpu

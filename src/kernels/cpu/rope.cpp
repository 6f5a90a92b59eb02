// rope: rotary position embedding over a contiguous x seen as (N, T, H, D), N the product of the
// leading dims, with cos and sin (T, R/2) shared by every n or (N, T, R/2) (ember/ops.h). Each (n, t)
// row rotates its H heads by one row of angles: pairs (2i, 2i + 1) for kAdjacent, (i, i + R/2) for
// kHalves, each (a, b) becoming (a cos - b sin, a sin + b cos), with sin negated for the inverse
// (the backward); the values past R are copied. Every value is computed by one thread from its own
// inputs: the result does not depend on the thread count.
#include <algorithm>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

template <class T>
void rope_rows(const T* x, const T* cos, const T* sin, T* y, int64_t rows, int64_t positions, int64_t heads,
               int64_t dim, int64_t half, bool shared, RopeAttrs attrs) {
  const int64_t stride = attrs.style == RopeStyle::kAdjacent ? 2 : 1,
                partner = attrs.style == RopeStyle::kAdjacent ? 1 : half;
  const T sign = attrs.inverse ? T(-1) : T(1);
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, heads * dim)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t row = begin; row < end; ++row) {
                   const int64_t angles = (shared ? row % positions : row) * half;
                   const T* c = cos + angles;
                   const T* s = sin + angles;
                   for (int64_t h = 0; h < heads; ++h) {
                     const T* in = x + (row * heads + h) * dim;
                     T* out = y + (row * heads + h) * dim;
                     for (int64_t i = 0; i < half; ++i) {
                       const T a = in[i * stride], b = in[i * stride + partner], si = sign * s[i];
                       out[i * stride] = a * c[i] - b * si;
                       out[i * stride + partner] = a * si + b * c[i];
                     }
                     std::copy(in + 2 * half, in + dim, out + 2 * half);
                   }
                 }
               });
}

// inputs: x (..., T, H, D), cos and sin (T, R/2) or (..., T, R/2), all contiguous in the output's
// dtype; outputs: x's shape.
void rope_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &cos = c.inputs[1], &sin = c.inputs[2], &y = c.outputs[0];
  const int64_t dim = x.size(-1), heads = x.size(-2), positions = x.size(-3), half = cos.size(-1);
  const int64_t rows = heads * dim == 0 ? 0 : x.numel() / (heads * dim);
  const bool shared = cos.dim() == 2;
  const RopeAttrs& attrs = c.get<RopeAttrs>();
  if (y.dtype == kFloat64) {
    rope_rows(x.ptr<const double>(), cos.ptr<const double>(), sin.ptr<const double>(), y.ptr<double>(), rows, positions,
              heads, dim, half, shared, attrs);
  } else {
    rope_rows(x.ptr<const float>(), cos.ptr<const float>(), sin.ptr<const float>(), y.ptr<float>(), rows, positions,
              heads, dim, half, shared, attrs);
  }
}

}  // namespace

void register_rope_kernels(KernelTable& table) {
  table.add(OpKind::kRope, DeviceType::kCPU, rope_kernel, {kFloat32, kFloat64});
}

}  // namespace ember::cpu

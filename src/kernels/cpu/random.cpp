// Kernels that fill their output from a formula or from the Philox4x32-10 generator: arange,
// linspace, rand, randn, randint and dropout. Element i of a random draw depends only on the key and
// the counter block in the op's attributes (RandomAttrs, DropoutAttrs), never on the thread count,
// so a recorded call replays the same numbers.
#include <cmath>
#include <type_traits>

#include "base/philox.h"
#include "ember/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {
namespace {

// Philox blocks a thread takes at a time.
constexpr int64_t kBlocksGrain = 2048;

// Uniform in [0, 1) from the top 24 (float) or 53 (double) bits.
inline double to_unit(uint32_t lo, uint32_t hi, bool wide) {
  if (wide) return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<double>(lo >> 8) * (1.0 / 16777216.0);
}

// Fills n values of a float dtype, two per Philox block: gen(block words, wide, out[2]).
template <class Gen>
void random_float(const Operand& out, const RandomAttrs& attrs, const Gen& gen) {
  const int64_t n = out.numel();
  const int64_t blocks = (n + 1) / 2;
  const detail::PhiloxDraw draw = detail::philox_draw(attrs.seed, attrs.first_block);
  const bool wide = out.dtype == kFloat64;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_of<T>())) {
      T* p = out.ptr<T>();
      parallel_for(0, blocks, kBlocksGrain, [&](int64_t b0, int64_t b1) {
        double values[2] = {};
        for (int64_t b = b0; b < b1; ++b) {
          gen(detail::philox_block(draw, static_cast<uint64_t>(b)), wide, values);
          for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
            p[2 * b + j] = static_cast<T>(static_cast<compute_t<T>>(values[j]));
          }
        }
      });
    }
  });
}

void rand_kernel(const KernelCall& c) {
  random_float(c.outputs[0], c.get<RandomAttrs>(), [](const std::array<uint32_t, 4>& w, bool wide, double* out) {
    out[0] = to_unit(w[0], w[1], wide);
    out[1] = to_unit(w[2], w[3], wide);
  });
}

void randn_kernel(const KernelCall& c) {
  // Box-Muller: one block gives two uniform pairs, hence two normals.
  random_float(c.outputs[0], c.get<RandomAttrs>(), [](const std::array<uint32_t, 4>& w, bool wide, double* out) {
    const double u1 = 1.0 - to_unit(w[0], w[1], wide);  // (0, 1]
    const double u2 = to_unit(w[2], w[3], wide);
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[0] = r * std::cos(2.0 * M_PI * u2);
    out[1] = r * std::sin(2.0 * M_PI * u2);
  });
}

// int64 values in [low, high), two per block.
void randint_kernel(const KernelCall& c) {
  const RandomAttrs& attrs = c.get<RandomAttrs>();
  const Operand& out = c.outputs[0];
  const int64_t n = out.numel();
  const detail::PhiloxDraw draw = detail::philox_draw(attrs.seed, attrs.first_block);
  const uint64_t range = static_cast<uint64_t>(attrs.high) - static_cast<uint64_t>(attrs.low);
  int64_t* p = out.ptr<int64_t>();
  parallel_for(0, (n + 1) / 2, kBlocksGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const auto w = detail::philox_block(draw, static_cast<uint64_t>(b));
      for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
        const uint64_t r = (static_cast<uint64_t>(w[2 * j + 1]) << 32) | w[2 * j];
        p[2 * b + j] = attrs.low + static_cast<int64_t>(r % range);  // bias below 2^-32 for ranges under 2^32
      }
    }
  });
}

// inputs: x; outputs: y = x * mask and the mask, both x's dtype, contiguous. The mask keeps an
// element with probability 1 - p (uniform float32 draw u < 1 - p, as rand() gives it) and holds
// 1 / (1 - p) there, 0 elsewhere; y is computed as x * mask in the dtype's compute type.
void dropout_kernel(const KernelCall& c) {
  const DropoutAttrs& attrs = c.get<DropoutAttrs>();
  const Operand &x = c.inputs[0], &y = c.outputs[0], &mask = c.outputs[1];
  const int64_t n = x.numel();
  const detail::PhiloxDraw draw = detail::philox_draw(attrs.seed, attrs.first_block);
  const float keep_below = static_cast<float>(1.0 - attrs.p);
  const double scale = 1.0 / (1.0 - attrs.p);
  dispatch_dtype(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_of<T>())) {
      using C = compute_t<T>;
      const T kept = static_cast<T>(static_cast<C>(scale)), dropped = static_cast<T>(C(0));
      const T* in = x.ptr<const T>();
      T* out = y.ptr<T>();
      T* m = mask.ptr<T>();
      parallel_for(0, (n + 1) / 2, kBlocksGrain, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const auto w = detail::philox_block(draw, static_cast<uint64_t>(b));
          for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
            const float u = static_cast<float>(to_unit(w[2 * j], w[2 * j + 1], false));
            const int64_t i = 2 * b + j;
            m[i] = u < keep_below ? kept : dropped;
            out[i] = static_cast<T>(static_cast<C>(in[i]) * static_cast<C>(m[i]));
          }
        }
      });
    }
  });
}

// outputs: a 1-D tensor of n values start + i * step (arange) or n points from start to end
// (linspace, the first half counted up from start and the second down from end, as PyTorch).
void arange_kernel(const KernelCall& c) {
  const RangeAttrs& r = c.get<RangeAttrs>();
  const Operand& out = c.outputs[0];
  const int64_t n = out.numel();
  const bool integral = !r.start.is_floating() && !r.step.is_floating() && !r.end.is_floating();
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.ptr<T>();
    if (integral && !is_floating(out.dtype)) {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(r.start.to_int() + i * r.step.to_int());
    } else {
      const double s = r.start.to_double(), d = r.step.to_double();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<compute_t<T>>(s + static_cast<double>(i) * d));
    }
  });
}

void linspace_kernel(const KernelCall& c) {
  const RangeAttrs& r = c.get<RangeAttrs>();
  const Operand& out = c.outputs[0];
  const int64_t steps = out.numel();
  const double start = r.start.to_double(), end = r.end.to_double();
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps / 2;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.ptr<T>();
    for (int64_t i = 0; i < steps; ++i) {
      const double v =
          i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
      p[i] = static_cast<T>(static_cast<compute_t<T>>(v));
    }
  });
}

}  // namespace

void register_random_kernels(KernelTable& table) {
  table.add(OpKind::kRandUniform, DeviceType::kCPU, rand_kernel, kFloatTypes);
  table.add(OpKind::kRandNormal, DeviceType::kCPU, randn_kernel, kFloatTypes);
  table.add(OpKind::kRandInt, DeviceType::kCPU, randint_kernel, {kInt64});
  table.add(OpKind::kDropout, DeviceType::kCPU, dropout_kernel, kFloatTypes);
  table.add(OpKind::kArange, DeviceType::kCPU, arange_kernel, DTypeSet::all());
  table.add(OpKind::kLinspace, DeviceType::kCPU, linspace_kernel, DTypeSet::all());
}

}  // namespace ember::cpu

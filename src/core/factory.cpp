// Creation functions: empty/zeros/ones/full, ranges, eye, *_like, from_blob, and random tensors.
#include <cmath>
#include <mutex>

#include "core/block_pool.h"
#include "core/random.h"
#include "core/tensor_internal.h"
#include "ember/ops.h"
#include "kernels/cpu/parallel.h"

namespace ember {

using detail::make_empty;

namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

bool scalars_integral(std::initializer_list<const Scalar*> values) {
  for (const Scalar* s : values) {
    if (s->is_floating()) return false;
  }
  return true;
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  return finish(make_empty(shape, options.dtype_or(kFloat32), options.device), options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(kFloat32), options.device);
  t.fill_(0);
  return finish(t, options);
}

Tensor ones(const Shape& shape, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(kFloat32), options.device);
  t.fill_(1);
  return finish(t, options);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(value.default_dtype()), options.device);
  t.fill_(value);
  return finish(t, options);
}

Tensor scalar_tensor(const Scalar& value, std::optional<DType> dtype) {
  Tensor t = make_empty({}, dtype.value_or(value.default_dtype()), kCPU);
  t.fill_(value);
  return t;
}

Tensor arange(const Scalar& end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  const DType dtype = options.dtype_or(scalars_integral({&start, &end, &step}) ? kInt64 : kFloat32);
  const double s = start.to_double(), e = end.to_double(), d = step.to_double();
  EMBER_CHECK(d != 0, "[arange] step must be nonzero");
  EMBER_CHECK(std::isfinite(s) && std::isfinite(e), "[arange] start ", s, " and end ", e, " must be finite");
  EMBER_CHECK((d > 0 && e >= s) || (d < 0 && e <= s), "[arange] upper bound and step sign are inconsistent: start ", s,
              ", end ", e, ", step ", d);
  const int64_t n = scalars_integral({&start, &end, &step})
                        ? (end.to_int() - start.to_int() + step.to_int() - (step.to_int() > 0 ? 1 : -1)) / step.to_int()
                        : static_cast<int64_t>(std::ceil((e - s) / d));
  Tensor t = make_empty({n}, dtype, options.device);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data_ptr());
    if (scalars_integral({&start, &end, &step}) && !is_floating(dtype)) {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start.to_int() + i * step.to_int());
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<compute_t<T>>(s + static_cast<double>(i) * d));
    }
  });
  return finish(t, options);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  EMBER_CHECK(steps >= 0, "[linspace] number of steps must be non-negative, got ", steps);
  Tensor t = make_empty({steps}, options.dtype_or(kFloat32), options.device);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps / 2;
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data_ptr());
    // Like PyTorch: the first half counts up from start, the second half down from end.
    for (int64_t i = 0; i < steps; ++i) {
      const double v =
          i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
      p[i] = static_cast<T>(static_cast<compute_t<T>>(v));
    }
  });
  return finish(t, options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t cols = m.value_or(n);
  EMBER_CHECK(n >= 0 && cols >= 0, "[eye] sizes must be non-negative, got ", n, " x ", cols);
  Tensor t = zeros({n, cols}, options.with_requires_grad(false));
  const int64_t diag = n < cols ? n : cols;
  if (diag > 0) t.as_strided({diag}, {cols + 1}, 0).fill_(1);
  return finish(t, options);
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return make_empty(t.shape(), dtype.value_or(t.dtype()), t.device());
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) { return zeros(t.shape(), dtype.value_or(t.dtype())); }
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) { return ones(t.shape(), dtype.value_or(t.dtype())); }
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype) {
  return full(t.shape(), value, dtype.value_or(t.dtype()));
}
Tensor rand_like(const Tensor& t, std::optional<DType> dtype) { return rand(t.shape(), dtype.value_or(t.dtype())); }
Tensor randn_like(const Tensor& t, std::optional<DType> dtype) { return randn(t.shape(), dtype.value_or(t.dtype())); }

namespace {
void release_nothing(void*, int64_t, void*) {}
}  // namespace

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::optional<Strides> strides) {
  EMBER_CHECK(data != nullptr || shape.numel() == 0, "[from_blob] data pointer is null");
  const Strides s = strides.value_or(contiguous_strides(shape));
  EMBER_CHECK(s.size() == shape.size(), "[from_blob] shape ", shape, " and strides ", s, " have different lengths");
  int64_t extent = shape.numel() == 0 ? 0 : 1;
  for (int d = 0; d < shape.size(); ++d) {
    EMBER_CHECK(shape[d] >= 0 && s[d] >= 0, "[from_blob] negative size or stride: shape ", shape, ", strides ", s);
    if (extent > 0) extent += (shape[d] - 1) * s[d];
  }
  auto impl = detail::make_pooled<TensorImpl>();
  impl->storage = detail::make_pooled<StorageImpl>(data, extent * dtype_size(dtype), kCPU, &release_nothing, nullptr);
  impl->shape = shape;
  impl->strides = s;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// --- random -------------------------------------------------------------------------------------

namespace detail {
namespace {
struct GlobalGenerator {
  std::mutex mutex;
  uint64_t seed = 67280421310721ull;
  uint64_t next_block = 0;
};
GlobalGenerator& generator() {
  static GlobalGenerator g;
  return g;
}
}  // namespace

PhiloxDraw reserve_random_blocks(int64_t blocks) {
  GlobalGenerator& g = generator();
  std::lock_guard<std::mutex> lock(g.mutex);
  PhiloxDraw draw{{static_cast<uint32_t>(g.seed), static_cast<uint32_t>(g.seed >> 32)}, g.next_block};
  g.next_block += static_cast<uint64_t>(blocks);
  return draw;
}
}  // namespace detail

void manual_seed(uint64_t seed) {
  auto& g = detail::generator();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.seed = seed;
  g.next_block = 0;
}

namespace {

// Uniform in [0, 1) from the top 24 (float) or 53 (double) bits.
inline double to_unit(uint32_t lo, uint32_t hi, bool wide) {
  if (wide) return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<double>(lo >> 8) * (1.0 / 16777216.0);
}

// Fills a float tensor with values from gen(block words) -> up to 4 values per Philox block.
template <class Gen>
Tensor random_float(const Shape& shape, const TensorOptions& options, const char* op, int values_per_block,
                    const Gen& gen) {
  const DType dtype = options.dtype_or(kFloat32);
  EMBER_CHECK(is_floating(dtype), "[", op, "] expects a floating-point dtype, got ", dtype);
  Tensor t = make_empty(shape, dtype, options.device);
  const int64_t n = t.numel();
  const int64_t blocks = (n + values_per_block - 1) / values_per_block;
  const detail::PhiloxDraw draw = detail::reserve_random_blocks(blocks);
  const bool wide = dtype == kFloat64;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating(dtype_of<T>())) {
      T* p = static_cast<T*>(t.data_ptr());
      cpu::parallel_for(0, blocks, 2048, [&](int64_t b0, int64_t b1) {
        double values[4] = {};
        for (int64_t b = b0; b < b1; ++b) {
          gen(detail::philox_block(draw, static_cast<uint64_t>(b)), wide, values);
          for (int j = 0; j < values_per_block && b * values_per_block + j < n; ++j) {
            p[b * values_per_block + j] = static_cast<T>(static_cast<compute_t<T>>(values[j]));
          }
        }
      });
    }
  });
  return finish(t, options);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options) {
  return random_float(shape, options, "rand", 2, [](const std::array<uint32_t, 4>& w, bool wide, double* out) {
    out[0] = to_unit(w[0], w[1], wide);
    out[1] = to_unit(w[2], w[3], wide);
  });
}

Tensor randn(const Shape& shape, TensorOptions options) {
  // Box-Muller: one block gives two uniform pairs, hence two normals.
  return random_float(shape, options, "randn", 2, [](const std::array<uint32_t, 4>& w, bool wide, double* out) {
    const double u1 = 1.0 - to_unit(w[0], w[1], wide);  // (0, 1]
    const double u2 = to_unit(w[2], w[3], wide);
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[0] = r * std::cos(2.0 * M_PI * u2);
    out[1] = r * std::sin(2.0 * M_PI * u2);
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options) {
  EMBER_CHECK(low < high, "[randint] low (", low, ") must be less than high (", high, ")");
  const DType dtype = options.dtype_or(kInt64);
  Tensor t = make_empty(shape, kInt64, options.device);
  const int64_t n = t.numel();
  const detail::PhiloxDraw draw = detail::reserve_random_blocks((n + 1) / 2);
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  int64_t* p = static_cast<int64_t*>(t.data_ptr());
  cpu::parallel_for(0, (n + 1) / 2, 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const auto w = detail::philox_block(draw, static_cast<uint64_t>(b));
      for (int j = 0; j < 2 && 2 * b + j < n; ++j) {
        const uint64_t r = (static_cast<uint64_t>(w[2 * j + 1]) << 32) | w[2 * j];
        p[2 * b + j] = low + static_cast<int64_t>(r % range);  // bias below 2^-32 for ranges under 2^32
      }
    }
  });
  return finish(dtype == kInt64 ? t : t.to(dtype), options);
}

}  // namespace ember

// Creation functions: empty/zeros/ones/full, ranges, eye, *_like, from_blob, and random tensors,
// on the creation primitives (Fill, Arange, Linspace, RandUniform, RandNormal, RandInt).
// Random draws: the global Philox4x32-10 generator hands each call a key and a range of counter
// blocks, which become the op's RandomAttrs, so a recorded call replays the same numbers and the
// values never depend on the thread count. Cost: bytes written.
#include "ops/factory.h"

#include <cmath>
#include <limits>
#include <mutex>

#include "core/block_pool.h"
#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

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
  return finish(make_empty(shape, options.dtype_or(kFloat32), options.device, "empty"), options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(kFloat32), options.device, "zeros");
  t.fill_(0);
  return finish(t, options);
}

Tensor ones(const Shape& shape, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(kFloat32), options.device, "ones");
  t.fill_(1);
  return finish(t, options);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  Tensor t = make_empty(shape, options.dtype_or(value.default_dtype()), options.device, "full");
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
  // The count, checked: a range of more than 2^63 elements is an error, never a wrapped-around size.
  int64_t n = 0;
  if (scalars_integral({&start, &end, &step})) {
    int64_t span = 0;
    const bool overflow = __builtin_sub_overflow(end.to_int(), start.to_int(), &span);
    EMBER_CHECK(!overflow && span != std::numeric_limits<int64_t>::min(), "[arange] start ", start.to_int(),
                " and end ", end.to_int(), " are too far apart: more elements than a 64-bit count holds");
    n = span / step.to_int() + (span % step.to_int() != 0 ? 1 : 0);  // same signs: a ceiling, no overflow
  } else {
    const double count = std::ceil((e - s) / d);
    EMBER_CHECK(count < 9.2e18, "[arange] start ", s, ", end ", e, " and step ", d, " give ", count,
                " elements, more than a 64-bit count holds");
    n = static_cast<int64_t>(count);
  }
  Tensor t = make_empty({n}, dtype, options.device, "arange");
  dispatch::run(OpKind::kArange, RangeAttrs{start, step, end}, {}, {&t});
  return finish(t, options);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  EMBER_CHECK(steps >= 0, "[linspace] number of steps must be non-negative, got ", steps);
  Tensor t = make_empty({steps}, options.dtype_or(kFloat32), options.device, "linspace");
  dispatch::run(OpKind::kLinspace, RangeAttrs{start, 0, end}, {}, {&t});
  return finish(t, options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t cols = m.value_or(n);
  EMBER_CHECK(n >= 0 && cols >= 0, "[eye] sizes must be non-negative, got ", n, " x ", cols);
  Tensor t = make_empty({n, cols}, options.dtype_or(kFloat32), options.device, "eye");
  t.fill_(0);
  const int64_t diag = n < cols ? n : cols;
  if (diag > 0) t.as_strided({diag}, {cols + 1}, 0).fill_(1);
  return finish(t, options);
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return make_empty(t.shape(), dtype.value_or(t.dtype()), t.device(), "empty_like");
}
// On t's device, as in PyTorch.
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) {
  return zeros(t.shape(), TensorOptions(t.device()).with_dtype(dtype.value_or(t.dtype())));
}
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) {
  return ones(t.shape(), TensorOptions(t.device()).with_dtype(dtype.value_or(t.dtype())));
}
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype) {
  return full(t.shape(), value, TensorOptions(t.device()).with_dtype(dtype.value_or(t.dtype())));
}
// On t's device, as the other *_like factories.
Tensor rand_like(const Tensor& t, std::optional<DType> dtype) {
  return rand(t.shape(), TensorOptions(t.device()).with_dtype(dtype.value_or(t.dtype())));
}
Tensor randn_like(const Tensor& t, std::optional<DType> dtype) {
  return randn(t.shape(), TensorOptions(t.device()).with_dtype(dtype.value_or(t.dtype())));
}

namespace {
void release_nothing(void*, int64_t, void*) {}
}  // namespace

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::optional<Strides> strides) {
  EMBER_CHECK(data != nullptr || shape.numel() == 0, "[from_blob] data pointer is null");
  const Strides s = strides.value_or(contiguous_strides(shape));
  EMBER_CHECK(s.size() == shape.size(), "[from_blob] shape ", shape, " and strides ", s, " have different lengths");
  for (int d = 0; d < shape.size(); ++d) {
    EMBER_CHECK(shape[d] >= 0 && s[d] >= 0, "[from_blob] negative size or stride: shape ", shape, ", strides ", s);
  }
  const int64_t extent = checked_storage_extent(shape, s, 0, "from_blob").second;
  int64_t nbytes = 0;
  EMBER_CHECK(!__builtin_mul_overflow(extent, dtype_size(dtype), &nbytes), "[from_blob] shape ", shape, " and strides ",
              s, " of ", dtype, " span more bytes than 64 bits count");
  auto impl = detail::make_pooled<TensorImpl>();
  impl->storage = detail::make_pooled<StorageImpl>(data, nbytes, kCPU, &release_nothing, nullptr);
  impl->set_geometry(shape, s, 0);
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

RandomDraw reserve_random_blocks(int64_t blocks) {
  GlobalGenerator& g = generator();
  RandomDraw draw;
  {
    const std::lock_guard<std::mutex> lock(g.mutex);
    draw = {g.seed, g.next_block};
    g.next_block += static_cast<uint64_t>(blocks);
  }
  if (dispatch::observed()) [[unlikely]]
    dispatch::notify_random_draw(draw.seed, draw.first_block, blocks);
  return draw;
}

RandomDraw generator_state() {
  GlobalGenerator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mutex);
  return {g.seed, g.next_block};
}

void set_generator_state(const RandomDraw& state) {
  GlobalGenerator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mutex);
  g.seed = state.seed;
  g.next_block = state.first_block;
}
}  // namespace detail

void manual_seed(uint64_t seed) {
  auto& g = detail::generator();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.seed = seed;
  g.next_block = 0;
}

namespace {

// A float tensor from random primitive `kind`, two values per Philox block.
Tensor random_float(OpKind kind, const Shape& shape, const TensorOptions& options) {
  const DType dtype = options.dtype_or(kFloat32);
  EMBER_CHECK(is_floating(dtype), "[", op_name(kind), "] expects a floating-point dtype, got ", dtype);
  Tensor t = make_empty(shape, dtype, options.device, kind == OpKind::kRandNormal ? "randn" : "rand");
  const detail::RandomDraw draw = detail::reserve_random_blocks((t.numel() + 1) / 2);
  dispatch::run(kind, RandomAttrs{draw.seed, draw.first_block, 0, 0}, {}, {&t});
  return finish(t, options);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options) { return random_float(OpKind::kRandUniform, shape, options); }

// Box-Muller: one block gives two uniform pairs, hence two normals.
Tensor randn(const Shape& shape, TensorOptions options) { return random_float(OpKind::kRandNormal, shape, options); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options) {
  EMBER_CHECK(low < high, "[randint] low (", low, ") must be less than high (", high, ")");
  const DType dtype = options.dtype_or(kInt64);
  Tensor t = make_empty(shape, kInt64, options.device, "randint");
  const detail::RandomDraw draw = detail::reserve_random_blocks((t.numel() + 1) / 2);
  dispatch::run(OpKind::kRandInt, RandomAttrs{draw.seed, draw.first_block, low, high}, {}, {&t});
  return finish(dtype == kInt64 ? t : t.to(dtype), options);
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

// Creation ops and copies: no arithmetic; bytes = what they read and write.
OpCost bytes_only(const KernelCall& call) { return {0.0, cost::operand_bytes(call)}; }

}  // namespace

void define_creation_ops(OpRuleTable& table) {
  for (OpKind kind : {OpKind::kCopy, OpKind::kFill, OpKind::kArange, OpKind::kLinspace, OpKind::kRandUniform,
                      OpKind::kRandNormal, OpKind::kRandInt}) {
    table.set_cost(kind, bytes_only);
  }
}

}  // namespace ember

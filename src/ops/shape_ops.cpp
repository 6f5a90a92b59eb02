// Shape ops: cat, stack, split, chunk, repeat, tile, flip, roll, pad. Each (but split and chunk) is
// a composite over the Copy and Fill primitives with one autograd node of its own.
// split and chunk return views that share the input's storage. The others allocate a contiguous
// result and fill it with detail::copy_into from views of the input: narrowed blocks (cat, roll,
// pad), a broadcast view (repeat, tile) or a view with negative strides (flip, built here and
// never handed out). The copy kernel handles any layout, dtype conversion and threading, so these
// ops need no kernels of their own. Dtype rules: cat and stack promote across their inputs as
// torch.cat; the rest keep the input's dtype. Cost: no FLOPs; bytes = input read + output written.
// Backward: cat's gradient is split back (narrow), stack's selected, repeat/tile's copies summed,
// flip's flipped, roll's rolled back and pad's cropped (pad with the negated pads, which also
// zero-fills what a negative pad cropped). split and chunk return slices, which record themselves.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using autograd::GradMask;
using autograd::Grads;
using autograd::needs_grad;

std::string format_list(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

// torch.cat skips "legacy" empty tensors of shape [0] whatever the other inputs' shapes.
bool is_legacy_empty(const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; }

DType common_dtype(const std::vector<Tensor>& tensors) {
  DType dtype = tensors.front().dtype();
  for (const Tensor& t : tensors) dtype = promote_types(dtype, t.dtype());
  return dtype;
}

// Copies src into dst, both of the same ndim, with dst.size(k) == src.size(k) * repeats[k]: one
// copy from a broadcast view where (r, s) dims with r, s > 1 become two dims (r with stride 0 in
// the source, s), or, when that would exceed kMaxDims, one copy per repetition of a leading dim.
void repeat_into(const Tensor& dst, const Tensor& src, Shape repeats) {
  const int nd = src.dim();
  int split = -1, extra = 0;
  for (int k = 0; k < nd; ++k) {
    if (repeats[k] > 1 && src.shape()[k] > 1) {
      if (split < 0) split = k;
      ++extra;
    }
  }
  if (nd + extra > kMaxDims) {
    const int64_t size = src.shape()[split], times = repeats[split];
    repeats[split] = 1;
    for (int64_t i = 0; i < times; ++i) repeat_into(dst.narrow(split, i * size, size), src, repeats);
    return;
  }
  Shape shape;
  Strides dst_strides, src_strides;
  for (int k = 0; k < nd; ++k) {
    const int64_t s = src.shape()[k], r = repeats[k];
    if (r > 1 && s > 1) {
      shape.push_back(r);
      dst_strides.push_back(dst.strides()[k] * s);
      src_strides.push_back(0);
    }
    shape.push_back(r > 1 && s > 1 ? s : r * s);
    dst_strides.push_back(dst.strides()[k]);
    src_strides.push_back(s == 1 ? 0 : src.strides()[k]);
  }
  detail::copy_into(detail::make_view(dst, shape, dst_strides, dst.offset()),
                    detail::make_view(src, shape, src_strides, src.offset()));
}

Tensor repeat_impl(const char* op, const Tensor& x, const Shape& repeats) {
  for (int64_t r : repeats) {
    EMBER_CHECK(r >= 0, "[", op, "] repeats must be non-negative, got ", repeats);
  }
  // The input with leading size-1 dims up to repeats.size().
  Shape padded(repeats.size(), int64_t{1}), strides(repeats.size(), int64_t{0}), shape(repeats.size(), int64_t{0});
  const int lead = repeats.size() - x.dim();
  for (int k = 0; k < x.dim(); ++k) {
    padded[lead + k] = x.shape()[k];
    strides[lead + k] = x.strides()[k];
  }
  for (int k = 0; k < repeats.size(); ++k) {
    EMBER_CHECK(!__builtin_mul_overflow(padded[k], repeats[k], &shape[k]), "[", op, "] repeating shape ", x.shape(),
                " by ", repeats, " gives more elements than a 64-bit count holds");
  }
  Tensor out = detail::make_empty(shape, x.dtype(), x.device(), op);
  if (out.numel() > 0) repeat_into(out, detail::make_view(x, padded, strides, x.offset()), repeats);
  return out;
}

// Copies src into dst rolled by rolls[i].second (in (0, size)) along dim rolls[i].first, for the
// rolls from `first` on: each rolled dim cuts both tensors into two blocks that swap places.
void roll_into(const Tensor& dst, const Tensor& src, const std::vector<std::pair<int, int64_t>>& rolls, size_t first) {
  if (first == rolls.size()) {
    detail::copy_into(dst, src);
    return;
  }
  const auto [d, shift] = rolls[first];
  const int64_t size = src.shape()[d];
  roll_into(dst.narrow(d, shift, size - shift), src.narrow(d, 0, size - shift), rolls, first + 1);
  roll_into(dst.narrow(d, 0, shift), src.narrow(d, size - shift, shift), rolls, first + 1);
}

void print_scalar(std::ostream& out, const Scalar& value) {
  switch (value.kind()) {
    case Scalar::Kind::kBoolean:
      out << (value.to_bool() ? "true" : "false");
      return;
    case Scalar::Kind::kInteger:
      out << value.to_int();
      return;
    case Scalar::Kind::kFloating:
      out << value.to_double();
      return;
  }
}

// PyTorch's overflow check for a fill value: integers must lie in the dtype's range (a float in
// [lowest, max + 1), so that truncation lands in range; NaN and infinity never fit), finite
// floats within the float dtype's largest magnitude; bool takes anything.
bool fits(const Scalar& value, DType dtype) {
  if (dtype == kBool) return true;
  if (is_floating(dtype)) {
    const double v = value.is_floating() ? value.to_double() : static_cast<double>(value.to_int());
    const double max = dtype == kFloat16    ? 65504.0
                       : dtype == kBFloat16 ? 3.3895313892515355e38
                       : dtype == kFloat32  ? static_cast<double>(std::numeric_limits<float>::max())
                                            : std::numeric_limits<double>::max();
    return !std::isfinite(v) || std::abs(v) <= max;
  }
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const int64_t lowest = std::numeric_limits<T>::lowest();
      const int64_t max = static_cast<int64_t>(std::numeric_limits<T>::max());
      if (!value.is_floating()) return value.to_int() >= lowest && value.to_int() <= max;
      const double v = value.to_double();
      return v >= static_cast<double>(lowest) && v < static_cast<double>(max) + 1.0;  // false for NaN
    } else {
      return true;
    }
  });
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "[cat] expected a non-empty list of tensors");
  const Tensor* first = nullptr;  // the first tensor that is not skipped
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device("cat", {&tensors.front(), &t});
    EMBER_CHECK(t.dim() > 0, "[cat] zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    if (first == nullptr && !is_legacy_empty(t)) first = &t;
  }
  const DType dtype = common_dtype(tensors);
  if (first == nullptr) return detail::make_empty({0}, dtype, tensors.front().device(), "cat");
  const int d = normalize_axis(dim, first->dim(), "cat");
  const dispatch::Scope scope(OpKind::kCat, {&tensors.front()}, DimAttrs{d});
  Shape shape = first->shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t)) continue;
    EMBER_CHECK(t.dim() == first->dim(), "[cat] tensors must have the same number of dimensions: got ", first->dim(),
                " and ", t.dim(), " (shapes ", first->shape(), " and ", t.shape(), ")");
    for (int k = 0; k < t.dim(); ++k) {
      EMBER_CHECK(k == d || t.shape()[k] == first->shape()[k], "[cat] sizes of tensors must match except in dimension ",
                  d, ": expected size ", first->shape()[k], " but got size ", t.shape()[k], " for tensor number ", i,
                  " in the list (shapes ", first->shape(), " and ", t.shape(), ")");
    }
    shape[d] += t.shape()[d];
  }
  Tensor out = detail::make_empty(shape, dtype, first->device(), "cat");
  int64_t offset = 0;
  std::vector<int64_t> starts;  // where each input begins along d (-1: skipped)
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t)) {
      starts.push_back(-1);
      continue;
    }
    detail::copy_into(out.narrow(d, offset, t.shape()[d]), t);
    starts.push_back(offset);
    offset += t.shape()[d];
  }
  if (autograd::any_requires_grad(tensors)) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(is_legacy_empty(t) ? 0 : t.shape()[d]);
    autograd::record(OpKind::kCat, DimAttrs{d}, out, tensors,
                     [d, starts, sizes](const Tensor& g, GradMask needs) -> Grads {
                       Grads grads(starts.size());
                       for (size_t i = 0; i < starts.size(); ++i) {
                         if (i < 64 && !needs[i]) continue;  // GradMask covers the first 64 inputs; compute the rest

                         grads[i] = starts[i] < 0 ? autograd::zeros_for({0}, g) : g.narrow(d, starts[i], sizes[i]);
                       }
                       return grads;
                     });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "[stack] expected a non-empty list of tensors");
  const Tensor& first = tensors.front();
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_same_device("stack", {&first, &tensors[i]});
    EMBER_CHECK(tensors[i].shape() == first.shape(), "[stack] expects each tensor to be equal size, but got ",
                first.shape(), " at entry 0 and ", tensors[i].shape(), " at entry ", i);
  }
  const int d = normalize_axis(dim, first.dim() + 1, "stack");
  const dispatch::Scope scope(OpKind::kStack, {&tensors.front()}, DimAttrs{d});
  Shape shape = first.shape();
  shape.insert(d, static_cast<int64_t>(tensors.size()));
  Tensor out = detail::make_empty(shape, common_dtype(tensors), first.device(), "stack");
  for (size_t i = 0; i < tensors.size(); ++i) detail::copy_into(out.select(d, static_cast<int64_t>(i)), tensors[i]);
  if (autograd::any_requires_grad(tensors)) {
    autograd::record(OpKind::kStack, DimAttrs{d}, out, tensors,
                     [d, count = tensors.size()](const Tensor& g, GradMask needs) -> Grads {
                       Grads grads(count);
                       for (size_t i = 0; i < count; ++i) {
                         if (i >= 64 || needs[i])
                           grads[i] = g.select(d, static_cast<int64_t>(i));  // GradMask covers 64
                       }
                       return grads;
                     });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  EMBER_CHECK(x.dim() > 0, "[split] expects at least a 1-dimensional tensor");
  EMBER_CHECK(split_size >= 0, "[split] split_size must be non-negative, got ", split_size);
  const int d = normalize_axis(dim, x.dim(), "split");
  const int64_t size = x.shape()[d];
  EMBER_CHECK(split_size > 0 || size == 0,
              "[split] split_size can only be 0 if dimension size is 0, but got dimension ", d, " of size ", size);
  const int64_t count = split_size == 0 ? 1 : std::max<int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t start = i * split_size;
    parts.push_back(x.narrow(d, start, std::min(split_size, size - start)));
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  EMBER_CHECK(x.dim() > 0, "[split] expects at least a 1-dimensional tensor");
  const int d = normalize_axis(dim, x.dim(), "split");
  const int64_t size = x.shape()[d];
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    EMBER_CHECK(s >= 0, "[split] split_sizes must be non-negative, got ", format_list(split_sizes));
    total += s;
  }
  EMBER_CHECK(total == size, "[split] split_sizes must sum exactly to ", size, " (the size of dimension ", d, "), got ",
              format_list(split_sizes));
  std::vector<Tensor> parts;
  parts.reserve(split_sizes.size());
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    parts.push_back(x.narrow(d, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  EMBER_CHECK(x.dim() > 0, "[chunk] expects at least a 1-dimensional tensor");
  EMBER_CHECK(chunks > 0, "[chunk] expects chunks to be greater than 0, got ", chunks);
  const int d = normalize_axis(dim, x.dim(), "chunk");
  const int64_t size = x.shape()[d];
  const int64_t split_size = (size + chunks - 1) / chunks;
  // An empty dim splits into `chunks` empty views, as PyTorch (split would give just one).
  if (size == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);
  return split(x, split_size, d);
}

namespace {

// repeat's backward: every dim k of g holds repeats[k] copies of the input's (padded) dim side by
// side; split it into (copies, size) and sum the copies away, one repeated dim at a time.
Tensor sum_repeats(const Tensor& g, const Shape& x_shape, const Shape& repeats) {
  const int lead = repeats.size() - x_shape.size();
  Tensor grad = g;
  for (int k = 0; k < repeats.size(); ++k) {
    const int64_t copies = repeats[k], size = k < lead ? 1 : x_shape[k - lead];
    if (copies == 1) continue;
    Shape split = grad.shape();
    split[k] = size;
    if (copies == 0) {
      grad = autograd::zeros_for(split, grad);
    } else if (grad.dim() < kMaxDims) {
      split.insert(k, copies);
      grad = sum(grad.reshape(split), {k});
    } else {  // no room for one more dim: add the copies up one by one
      Tensor total = grad.narrow(k, 0, size).clone();
      for (int64_t i = 1; i < copies; ++i) total.add_(grad.narrow(k, i * size, size));
      grad = total;
    }
  }
  return grad.reshape(x_shape);
}

Tensor repeat_with_grad(const char* op, const Tensor& x, const Shape& repeats) {
  const dispatch::Scope scope(OpKind::kRepeat, {&x}, ShapeAttrs{repeats});
  Tensor out = repeat_impl(op, x, repeats);
  if (needs_grad(x)) {
    autograd::record(OpKind::kRepeat, ShapeAttrs{repeats}, out, {&x},
                     [x_shape = x.shape(), repeats](const Tensor& g, GradMask) -> Grads {
                       return {sum_repeats(g, x_shape, repeats)};
                     });
  }
  return out;
}

}  // namespace

Tensor repeat(const Tensor& x, const Shape& repeats) {
  EMBER_CHECK(repeats.size() >= x.dim(), "[repeat] number of dimensions of repeat dims (", repeats.size(),
              ") can not be smaller than number of dimensions of tensor (", x.dim(), ")");
  return repeat_with_grad("repeat", x, repeats);
}

Tensor tile(const Tensor& x, const Shape& reps) {
  // Fewer reps than dims: leading 1s, as torch.tile.
  Shape repeats = reps;
  while (repeats.size() < x.dim()) repeats.insert(0, 1);
  return repeat_with_grad("tile", x, repeats);
}

Tensor flip(const Tensor& x, const Axes& dims) {
  Axes axes;  // normalized, so that flip(x, {-1}) and flip(x, {1}) of a 2-D x are the same call
  bool seen[kMaxDims] = {};
  for (int64_t dim : dims) {
    const int d = normalize_axis(dim, x.dim(), "flip");
    EMBER_CHECK(!seen[d], "[flip] dim ", d, " appears multiple times in the list of dims ", dims);
    seen[d] = true;
    axes.push_back(d);
  }
  const dispatch::Scope scope(OpKind::kFlip, {&x}, AxesAttrs{axes});
  Strides strides = x.strides();
  int64_t offset = x.offset();
  for (const int64_t d : axes) {
    if (x.dim() == 0 || x.shape()[d] == 0) continue;
    offset += (x.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  // A view read backwards along the flipped dims; it never leaves this function.
  detail::copy_into(out, detail::make_view(x, x.shape(), strides, offset));
  if (needs_grad(x)) {
    autograd::record(OpKind::kFlip, AxesAttrs{axes}, out, {&x},
                     [axes](const Tensor& g, GradMask) -> Grads { return {flip(g, axes)}; });
  }
  return out;
}

namespace {

Tensor roll_forward(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  EMBER_CHECK(!shifts.empty(), "[roll] shifts required");
  if (dims.empty()) {
    // Roll the flattened tensor, then restore the shape.
    EMBER_CHECK(shifts.size() == 1, "[roll] shifts and dims must align: got ", shifts.size(),
                " shifts and no dims (only one shift is allowed without dims)");
    return roll_forward(x.reshape({-1}), shifts, {0}).view(x.shape());
  }
  EMBER_CHECK(shifts.size() == dims.size(), "[roll] shifts and dims must align: got ", shifts.size(), " shifts and ",
              dims.size(), " dims");
  EMBER_CHECK(x.dim() > 0, "[roll] dimension specified as ", dims.front(), " but the tensor has no dimensions");
  int64_t total[kMaxDims] = {};  // a dim named twice rolls by the sum of its shifts
  bool named[kMaxDims] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = normalize_axis(dims[i], x.dim(), "roll");
    named[d] = true;
    const int64_t size = x.shape()[d];
    if (size > 0) total[d] = (total[d] + shifts[i] % size + size) % size;
  }
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  std::vector<std::pair<int, int64_t>> rolls;
  for (int d = 0; d < x.dim(); ++d) {
    if (named[d] && total[d] != 0) rolls.emplace_back(d, total[d]);
  }
  roll_into(out, x, rolls, 0);
  return out;
}

}  // namespace

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  EMBER_CHECK(shifts.size() <= kMaxDims && dims.size() <= kMaxDims, "[roll] at most ", kMaxDims,
              " shifts and dims, got ", shifts.size(), " shifts and ", dims.size(), " dims");
  const RollAttrs attrs{Shape(shifts), Axes(dims)};
  const dispatch::Scope scope(OpKind::kRoll, {&x}, attrs);
  if (!needs_grad(x)) return roll_forward(x, shifts, dims);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;  // its internal views and reshapes: one node for the whole roll
    out = roll_forward(x, shifts, dims);
  }
  {
    autograd::record(OpKind::kRoll, attrs, out, {&x}, [shifts, dims](const Tensor& g, GradMask) -> Grads {
      std::vector<int64_t> back;
      for (int64_t s : shifts) back.push_back(-s);
      return {roll(g, back, dims)};
    });
  }
  return out;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const Scalar& value) {
  EMBER_CHECK(pads.size() % 2 == 0, "[pad] padding length must be divisible by 2, got ", format_list(pads));
  const dispatch::Scope scope(OpKind::kPad, {&x}, PadAttrs{pads, value});
  const int padded_dims = static_cast<int>(pads.size() / 2);
  EMBER_CHECK(padded_dims <= x.dim(), "[pad] padding length should be less than or equal to two times the input ",
              "dimension but got padding length ", pads.size(), " and input of dimension ", x.dim());
  if (!fits(value, x.dtype())) {
    std::ostringstream v;
    print_scalar(v, value);
    EMBER_FAIL("[pad] value ", v.str(), " cannot be converted to type ", x.dtype(), " without overflow");
  }
  // The output, and where the kept part of x lands in it: pads[2i], pads[2i + 1] apply to dim
  // ndim - 1 - i; negative pads crop.
  Shape shape = x.shape();
  Tensor src = x;
  bool grows = false;
  std::vector<std::pair<int64_t, int64_t>> placement(static_cast<size_t>(x.dim()), {0, 0});  // (start, length)
  for (int d = 0; d < x.dim(); ++d) placement[d] = {0, x.shape()[d]};
  for (int i = 0; i < padded_dims; ++i) {
    const int d = x.dim() - 1 - i;
    const int64_t size = x.shape()[d], before = pads[2 * i], after = pads[2 * i + 1];
    const int64_t kept = size + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0);
    EMBER_CHECK(kept >= 0 && size + before + after >= 0, "[pad] the input size ", size, ", plus padding ", before,
                " and ", after, " resulted in a negative size in dimension ", d, " of input shape ", x.shape());
    EMBER_CHECK(!__builtin_add_overflow(size, before, &shape[d]) && !__builtin_add_overflow(shape[d], after, &shape[d]),
                "[pad] padding ", before, " and ", after, " of dimension ", d, " (size ", size,
                ") give more elements than a 64-bit count holds");
    src = src.narrow(d, std::max<int64_t>(-before, 0), kept);
    placement[d] = {std::max<int64_t>(before, 0), kept};
    grows = grows || before > 0 || after > 0;
  }
  Tensor out = detail::make_empty(shape, x.dtype(), x.device());
  if (grows) out.fill_(value);
  Tensor dst = out;
  for (int d = 0; d < x.dim(); ++d) dst = dst.narrow(d, placement[d].first, placement[d].second);
  detail::copy_into(dst, src);
  if (needs_grad(x)) {
    autograd::record(OpKind::kPad, PadAttrs{pads, value}, out, {&x}, [pads](const Tensor& g, GradMask) -> Grads {
      std::vector<int64_t> back;
      for (int64_t p : pads) back.push_back(-p);
      return {pad(g, back, 0)};
    });
  }
  return out;
}

}  // namespace ember

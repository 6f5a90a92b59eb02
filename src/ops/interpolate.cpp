// interpolate: a composite of index_select (forward) and scatter_add (backward), one spatial dim
// at a time.
//
// Note [interpolate]: both modes are separable. Nearest takes, along each dim, the source index
// floor(i * scale) (capped at in - 1), where scale is 1 / scale_factor when the caller gave one and
// in / out otherwise, computed in float32 as PyTorch's CPU kernel does, so that the indices agree
// with it exactly. The linear modes take, along each dim, src = (i + 0.5) * scale - 0.5 (clamped
// at 0) or i * (in - 1) / (out - 1) with align_corners, i0 = floor(src), i1 = min(i0 + 1, in - 1),
// l1 = src - i0, and out = l0 * x[i0] + l1 * x[i1]: along the last dim first, so that bilinear
// computes l0h (l0w x00 + l1w x01) + l1h (l0w x10 + l1w x11), PyTorch's order. The backward runs
// the dims in reverse, each a scatter_add of the weighted gradient into its source rows.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/dispatch.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

// Along one dim: the source rows of each output row, and for the linear modes the second source
// row and the weights of both (as float32 or float64 tensors shaped to broadcast along `dim`).
struct Resample {
  int dim = 0;
  int64_t in = 0, out = 0;
  Tensor first, second;      // int64 (out)
  Tensor w_first, w_second;  // the input's dtype, (1, .., out, 1, ..) along dim; linear only
};

// A host tensor as `dtype` on `device`.
Tensor placed(const Tensor& host, DType dtype, Device device) { return host.to(dtype).to(device); }

// PyTorch's compute_scales_value and area_pixel_compute_scale: S is the CPU kernel's type for the
// positions (float for every input but float64).
template <class S>
S source_scale(int64_t in, int64_t out, double scale, bool align_corners, bool linear) {
  if (linear && align_corners) return out > 1 ? static_cast<S>(in - 1) / static_cast<S>(out - 1) : S(0);
  if (scale > 0) return static_cast<S>(1.0 / scale);
  return static_cast<S>(in) / static_cast<S>(out);
}

template <class S>
Resample resample_as(const Tensor& x, int dim, int64_t out, double scale, InterpolateMode mode, bool align_corners) {
  Resample r;
  r.dim = dim;
  r.in = x.size(dim);
  r.out = out;
  const bool linear = mode == InterpolateMode::kLinear;
  const S s = source_scale<S>(r.in, out, scale, align_corners, linear);
  std::vector<int64_t> first(static_cast<size_t>(out)), second(static_cast<size_t>(out));
  std::vector<S> w_first(static_cast<size_t>(out)), w_second(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    if (!linear) {
      // PyTorch's nearest_idx: the same size and twice it are exact whatever the scale says.
      first[i] =
          out == r.in ? i
          : out == 2 * r.in
              ? i >> 1
              : std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * static_cast<float>(s))), r.in - 1);
      continue;
    }
    const S position = static_cast<S>(i);
    const S src = align_corners ? s * position : std::max(s * (position + S(0.5)) - S(0.5), S(0));
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), r.in - 1);
    first[i] = i0;
    second[i] = i0 + (i0 < r.in - 1 ? 1 : 0);
    w_second[i] = std::clamp(src - static_cast<S>(i0), S(0), S(1));
    w_first[i] = S(1) - w_second[i];
  }
  r.first = placed(from_vector(first), kInt64, x.device());
  if (linear) {
    Shape along(static_cast<size_t>(x.dim()), 1);
    along[dim] = out;
    r.second = placed(from_vector(second), kInt64, x.device());
    r.w_first = placed(from_vector(w_first, along), x.dtype(), x.device());
    r.w_second = placed(from_vector(w_second, along), x.dtype(), x.device());
  }
  return r;
}

Resample resample(const Tensor& x, int dim, int64_t out, double scale, InterpolateMode mode, bool align_corners) {
  return x.dtype() == kFloat64 ? resample_as<double>(x, dim, out, scale, mode, align_corners)
                               : resample_as<float>(x, dim, out, scale, mode, align_corners);
}

Tensor forward_one(const Tensor& x, const Resample& r) {
  const Tensor a = index_select(x, r.dim, r.first);
  if (!r.second.defined()) return a;
  return a * r.w_first + index_select(x, r.dim, r.second) * r.w_second;
}

// The gradient with respect to forward_one's input (of shape `in_shape`).
Tensor backward_one(const Tensor& g, const Shape& in_shape, const Resample& r) {
  Shape along(static_cast<size_t>(g.dim()), 1);
  along[r.dim] = r.out;
  const auto spread = [&](const Tensor& index) { return index.reshape(along).expand(g.shape()); };
  if (!r.second.defined()) return scatter_add(autograd::zeros_for(in_shape, g), r.dim, spread(r.first), g);
  const Tensor into = scatter_add(autograd::zeros_for(in_shape, g), r.dim, spread(r.first), g * r.w_first);
  return scatter_add(into, r.dim, spread(r.second), g * r.w_second);
}

InterpolateMode mode_of(std::string_view mode, int spatial) {
  if (mode == "nearest") return InterpolateMode::kNearest;
  const char* linear[] = {"linear", "bilinear", "trilinear"};
  for (int d = 1; d <= 3; ++d) {
    if (mode != linear[d - 1]) continue;
    EMBER_CHECK(spatial == d, "[interpolate] mode \"", mode, "\" expects a ", d + 2, "-D input, got a ", spatial + 2,
                "-D input");
    return InterpolateMode::kLinear;
  }
  EMBER_FAIL("[interpolate] mode must be \"nearest\", \"linear\", \"bilinear\" or \"trilinear\", got \"", mode, "\"");
}

}  // namespace

Tensor interpolate(const Tensor& input, const std::optional<std::vector<int64_t>>& size,
                   const std::optional<std::vector<double>>& scale_factor, std::string_view mode,
                   std::optional<bool> align_corners) {
  EMBER_CHECK(input.dim() >= 3 && input.dim() <= 5,
              "[interpolate] expected an input of 3 to 5 dims (N, C, spatial...), got shape ", input.shape());
  const int spatial = input.dim() - 2;
  const InterpolateMode kind = mode_of(mode, spatial);
  EMBER_CHECK(kind == InterpolateMode::kLinear || !align_corners.has_value(),
              "[interpolate] align_corners option can only be set with the interpolating modes: linear | bilinear | "
              "trilinear");
  EMBER_CHECK(is_floating(input.dtype()), "[interpolate] expects a floating-point input, got ", input.dtype());
  EMBER_CHECK(size.has_value() != scale_factor.has_value(),
              "[interpolate] exactly one of size and scale_factor must be given");
  const auto per_dim = [&](const auto& values, const char* what) {
    EMBER_CHECK(values.size() == 1 || static_cast<int>(values.size()) == spatial, "[interpolate] ", what,
                " must have 1 or ", spatial, " values for an input of shape ", input.shape(), ", got ", values.size());
    return [&values](int d) { return values.size() == 1 ? values[0] : values[static_cast<size_t>(d)]; };
  };
  InterpolateAttrs attrs;
  attrs.mode = kind;
  attrs.align_corners = align_corners.value_or(false);
  Shape out_shape = input.shape();
  for (int d = 0; d < spatial; ++d) {
    int64_t out = 0;
    double scale = 0;
    if (size) {
      out = per_dim(*size, "size")(d);
    } else {
      scale = per_dim(*scale_factor, "scale_factor")(d);
      EMBER_CHECK(std::isfinite(scale) && scale > 0, "[interpolate] scale_factor must be positive and finite, got ",
                  scale);
      out = static_cast<int64_t>(std::floor(static_cast<double>(input.size(d + 2)) * scale));
    }
    EMBER_CHECK(out > 0 && input.size(d + 2) > 0,
                "[interpolate] input and output sizes should be greater than 0, but got input (", input.shape(),
                ") and output size ", out, " in dim ", d + 2);
    out_shape[d + 2] = out;
    attrs.size.push_back(out);
    attrs.scales.push_back(scale);
  }
  const dispatch::Scope scope(OpKind::kInterpolate, {&input}, attrs);
  // Along the last dim first (Note [interpolate]).
  std::vector<Resample> steps;
  std::vector<Shape> shapes{input.shape()};
  Tensor out = input;
  {
    autograd::NoGradGuard no_grad;
    for (int d = spatial - 1; d >= 0; --d) {
      if (out.numel() == 0) {
        Shape next = out.shape();
        next[d + 2] = out_shape[d + 2];
        out = detail::make_empty(next, out.dtype(), out.device());
      } else {
        steps.push_back(
            resample(out, d + 2, out_shape[d + 2], attrs.scales[static_cast<size_t>(d)], kind, attrs.align_corners));
        out = forward_one(out, steps.back());
      }
      shapes.push_back(out.shape());
    }
  }
  if (autograd::needs_grad(input)) {
    autograd::record(OpKind::kInterpolate, attrs, out, {&input},
                     [steps, shapes](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       if (steps.size() + 1 != shapes.size()) return {autograd::zeros_for(shapes.front(), grad)};
                       Tensor g = grad;
                       for (size_t i = steps.size(); i-- > 0;) g = backward_one(g, shapes[i], steps[i]);
                       return {g};
                     });
  }
  return out;
}

}  // namespace ember

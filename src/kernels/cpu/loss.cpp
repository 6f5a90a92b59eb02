// Class-index loss kernels. Each position (one row of class scores) is independent, so threads
// split the positions; the reductions over classes run on one thread in a fixed order.
// Cross-entropy over contiguous rows (inner == 1, float32/float64) runs per Highway target: a max
// pass, a pass summing exp(x - max), and for the backward one pass writing softmax minus the
// target. Other layouts, and rows whose max is not finite or that hold a nan, take the scalar
// path, which gives PyTorch's answers for them.

// foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/loss.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/parallel.h"

// --- target-independent: the scalar kernels, compiled once ------------------------------------------
#ifndef EMBER_KERNELS_CPU_LOSS_ONCE
#define EMBER_KERNELS_CPU_LOSS_ONCE

namespace ember::cpu::loss_scalar {
namespace {

// loss and lse of position p whose first score is row[0], classes at `stride`.
template <class T>
void ce_forward_position(const ClassLossArgs& a, const T* row, int64_t stride, int64_t p, T* loss, T* lse) {
  const T smoothing = static_cast<T>(a.label_smoothing);
  T max = -std::numeric_limits<T>::infinity();
  T total = 0;
  for (int64_t c = 0; c < a.classes; ++c) {
    const T v = row[c * stride];
    max = std::isnan(v) ? v : std::max(max, v);
    total += v;
  }
  // A row of -inf (or with +inf) has no finite max to shift by; exp(-inf - -inf) would be nan.
  const T shift = std::isfinite(max) ? max : T(0);
  T sum_exp = 0;
  for (int64_t c = 0; c < a.classes; ++c) sum_exp += std::exp(row[c * stride] - shift);
  const T log_sum = std::log(sum_exp) + shift;
  lse[p] = log_sum;
  const int64_t t = a.target[p];
  if (t == a.ignore_index) {
    loss[p] = 0;
    return;
  }
  T value = log_sum - row[t * stride];
  if (smoothing != T(0)) {
    value = (1 - smoothing) * value + smoothing * (log_sum - total / static_cast<T>(a.classes));
  }
  loss[p] = value;
}

// The gradient row of position p (scores row[0], classes at `stride`) into out.
template <class T>
void ce_backward_position(const ClassLossArgs& a, const T* row, int64_t stride, int64_t p, T log_sum, T scale, T* out) {
  const T smoothing = static_cast<T>(a.label_smoothing);
  const T off_target = smoothing / static_cast<T>(a.classes);
  const int64_t t = a.target[p];
  if (t == a.ignore_index) {
    for (int64_t c = 0; c < a.classes; ++c) out[c * stride] = 0;
    return;
  }
  for (int64_t c = 0; c < a.classes; ++c) out[c * stride] = scale * (std::exp(row[c * stride] - log_sum) - off_target);
  out[t * stride] -= scale * (1 - smoothing);
}

}  // namespace
}  // namespace ember::cpu::loss_scalar
#endif  // EMBER_KERNELS_CPU_LOSS_ONCE

// --- per Highway target: cross-entropy over contiguous rows -------------------------------------------

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {
#include "kernels/cpu/exp_nonpositive-inl.h"  // exp_nonpositive_with_subnormals

// Row max, row sum (for label smoothing) and whether a nan was seen, over n contiguous scores.
template <class T>
T row_max_and_sum(const T* x, int64_t n, T* total, bool* has_nan) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  V m0 = hn::Set(d, -std::numeric_limits<T>::infinity()), m1 = m0;
  V s0 = hn::Zero(d), s1 = s0;
  auto bad = hn::Ne(hn::Zero(d), hn::Zero(d));  // all false
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const V x0 = hn::LoadU(d, x + i), x1 = hn::LoadU(d, x + i + lanes);
    m0 = hn::Max(m0, x0);
    m1 = hn::Max(m1, x1);
    s0 = hn::Add(s0, x0);
    s1 = hn::Add(s1, x1);
    bad = hn::Or(bad, hn::Or(hn::IsNaN(x0), hn::IsNaN(x1)));
  }
  for (; i + lanes <= n; i += lanes) {
    const V x0 = hn::LoadU(d, x + i);
    m0 = hn::Max(m0, x0);
    s0 = hn::Add(s0, x0);
    bad = hn::Or(bad, hn::IsNaN(x0));
  }
  T m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  bool nan = !hn::AllFalse(d, bad);
  for (; i < n; ++i) {
    nan = nan || x[i] != x[i];
    m = std::max(m, x[i]);
    s += x[i];
  }
  *total = s;
  *has_nan = nan;
  return m;
}

// sum(exp(x[i] - m)) for a row whose x - m lies in [-inf, 0] (finite m, no nan): Note [attention exp].
template <class T>
T sum_exp_shifted(const T* x, int64_t n, T m) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const V vm = hn::Set(d, m);
  V s0 = hn::Zero(d), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    s0 = hn::Add(s0, exp_nonpositive_with_subnormals(d, hn::Sub(hn::LoadU(d, x + i), vm)));
    s1 = hn::Add(s1, exp_nonpositive_with_subnormals(d, hn::Sub(hn::LoadU(d, x + i + lanes), vm)));
  }
  for (; i + lanes <= n; i += lanes)
    s0 = hn::Add(s0, exp_nonpositive_with_subnormals(d, hn::Sub(hn::LoadU(d, x + i), vm)));
  T s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += std::exp(x[i] - m);
  return s;
}

template <class T>
void ce_forward_rows(const ClassLossArgs& a, const T* x, T* loss, T* lse, int64_t begin, int64_t end) {
  const int64_t n = a.classes;
  const T smoothing = static_cast<T>(a.label_smoothing);
  for (int64_t p = begin; p < end; ++p) {
    const T* row = x + p * n;
    T total = 0;
    bool has_nan = false;
    const T m = row_max_and_sum(row, n, &total, &has_nan);
    if (has_nan || !std::isfinite(m)) {
      loss_scalar::ce_forward_position(a, row, 1, p, loss, lse);
      continue;
    }
    const T log_sum = std::log(sum_exp_shifted(row, n, m)) + m;
    lse[p] = log_sum;
    const int64_t t = a.target[p];
    if (t == a.ignore_index) {
      loss[p] = 0;
      continue;
    }
    T value = log_sum - row[t];
    if (smoothing != T(0)) value = (1 - smoothing) * value + smoothing * (log_sum - total / static_cast<T>(n));
    loss[p] = value;
  }
}

template <class T>
void ce_backward_rows(const ClassLossArgs& a, const T* x, const T* lse, const T* scale, int64_t scale_stride, T* grad,
                      int64_t begin, int64_t end) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = a.classes;
  const T smoothing = static_cast<T>(a.label_smoothing);
  const T off_target = smoothing / static_cast<T>(n);
  for (int64_t p = begin; p < end; ++p) {
    const T* row = x + p * n;
    T* out = grad + p * n;
    const int64_t t = a.target[p];
    const T s = scale[p * scale_stride], log_sum = lse[p];
    // lse >= every score of a row without nan, so x - lse <= 0; other rows take the scalar path.
    if (t == a.ignore_index || !std::isfinite(log_sum)) {
      loss_scalar::ce_backward_position(a, row, 1, p, log_sum, s, out);
      continue;
    }
    // out = s * exp(x - lse) - s * off_target
    const auto vs = hn::Set(d, s), vl = hn::Set(d, log_sum), voff = hn::Set(d, s * off_target);
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) {
      const auto e = exp_nonpositive_with_subnormals(d, hn::Sub(hn::LoadU(d, row + i), vl));
      hn::StoreU(hn::MulSub(vs, e, voff), d, out + i);
    }
    for (; i < n; ++i) out[i] = s * std::exp(row[i] - log_sum) - s * off_target;
    out[t] -= s * (1 - smoothing);
  }
}

}  // namespace

void CeForwardRows(const ClassLossArgs& a, const void* scores, void* loss, void* lse, int64_t begin, int64_t end) {
  if (a.dtype == kFloat32) {
    ce_forward_rows(a, static_cast<const float*>(scores), static_cast<float*>(loss), static_cast<float*>(lse), begin,
                    end);
  } else {
    ce_forward_rows(a, static_cast<const double*>(scores), static_cast<double*>(loss), static_cast<double*>(lse), begin,
                    end);
  }
}

void CeBackwardRows(const ClassLossArgs& a, const void* scores, const void* lse, const void* scale,
                    int64_t scale_stride, void* grad, int64_t begin, int64_t end) {
  if (a.dtype == kFloat32) {
    ce_backward_rows(a, static_cast<const float*>(scores), static_cast<const float*>(lse),
                     static_cast<const float*>(scale), scale_stride, static_cast<float*>(grad), begin, end);
  } else {
    ce_backward_rows(a, static_cast<const double*>(scores), static_cast<const double*>(lse),
                     static_cast<const double*>(scale), scale_stride, static_cast<double*>(grad), begin, end);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ember/error.h"
#include "kernels/cpu/registry.h"
namespace ember::cpu {

HWY_EXPORT(CeForwardRows);
HWY_EXPORT(CeBackwardRows);

namespace {

// Positions per task: at least kElementwiseGrain scores.
int64_t position_grain(const ClassLossArgs& a) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, a.classes));
}

template <class F>
void for_each_position(const ClassLossArgs& a, const F& body) {
  parallel_for(0, a.outer * a.inner, position_grain(a), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      // Position p = (o, i): its scores start at o * classes * inner + i, one class every `inner`.
      const int64_t o = p / a.inner, i = p % a.inner;
      body(p, o * a.classes * a.inner + i);
    }
  });
}

// Contiguous rows of float32/float64 scores: the per-target row kernels.
bool vector_rows(const ClassLossArgs& a) { return a.inner == 1 && (a.dtype == kFloat32 || a.dtype == kFloat64); }

template <class T>
void nll_forward(const ClassLossArgs& a, const T* x, T* loss) {
  for_each_position(a, [&](int64_t p, int64_t start) {
    const int64_t t = a.target[p];
    loss[p] = t == a.ignore_index ? T(0) : -x[start + t * a.inner];
  });
}

template <class T>
void nll_backward(const ClassLossArgs& a, const T* scale, int64_t scale_stride, T* grad) {
  for_each_position(a, [&](int64_t p, int64_t start) {
    T* out = grad + start;
    for (int64_t c = 0; c < a.classes; ++c) out[c * a.inner] = 0;
    const int64_t t = a.target[p];
    if (t != a.ignore_index) out[t * a.inner] = -scale[p * scale_stride];
  });
}

}  // namespace

void cross_entropy_forward(const ClassLossArgs& args, const void* scores, void* loss, void* lse) {
  if (vector_rows(args)) {
    parallel_for(0, args.outer, position_grain(args), [&](int64_t begin, int64_t end) {
      HWY_DYNAMIC_DISPATCH(CeForwardRows)(args, scores, loss, lse, begin, end);
    });
    return;
  }
  dispatch_float("cross_entropy", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(scores);
    for_each_position(args, [&](int64_t p, int64_t start) {
      loss_scalar::ce_forward_position(args, x + start, args.inner, p, static_cast<T*>(loss), static_cast<T*>(lse));
    });
  });
}

void cross_entropy_backward(const ClassLossArgs& args, const void* scores, const void* lse, const void* scale,
                            int64_t scale_stride, void* grad) {
  if (vector_rows(args)) {
    parallel_for(0, args.outer, position_grain(args), [&](int64_t begin, int64_t end) {
      HWY_DYNAMIC_DISPATCH(CeBackwardRows)(args, scores, lse, scale, scale_stride, grad, begin, end);
    });
    return;
  }
  dispatch_float("cross_entropy", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(scores);
    const T* log_sum = static_cast<const T*>(lse);
    const T* s = static_cast<const T*>(scale);
    for_each_position(args, [&](int64_t p, int64_t start) {
      loss_scalar::ce_backward_position(args, x + start, args.inner, p, log_sum[p], s[p * scale_stride],
                                        static_cast<T*>(grad) + start);
    });
  });
}

void nll_loss_forward(const ClassLossArgs& args, const void* scores, void* loss) {
  dispatch_float("nll_loss", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    nll_forward(args, static_cast<const T*>(scores), static_cast<T*>(loss));
  });
}

void nll_loss_backward(const ClassLossArgs& args, const void* scale, int64_t scale_stride, void* grad) {
  dispatch_float("nll_loss", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    nll_backward(args, static_cast<const T*>(scale), scale_stride, static_cast<T*>(grad));
  });
}

ClassLossArgs class_loss_args(const KernelCall& c, const Operand& scores, const Operand& target) {
  const ClassLossAttrs& attrs = c.get<ClassLossAttrs>();
  ClassLossArgs a;
  a.dtype = scores.dtype;
  a.classes = scores.dim() >= 2 ? scores.size(1) : scores.size(0);
  a.outer = scores.dim() >= 2 ? scores.size(0) : 1;
  a.inner = scores.dim() >= 2 && a.outer > 0 && a.classes > 0 ? scores.numel() / (a.outer * a.classes) : 1;
  a.target = target.ptr<const int64_t>();
  a.ignore_index = attrs.ignore_index;
  a.label_smoothing = attrs.label_smoothing;
  return a;
}

// --- registry entries ----------------------------------------------------------------------------
//
// Operands: scores (C), (N, C) or (N, C, d...), contiguous; target int64 of the scores' shape
// without the class dim, contiguous; per-position losses, log-sum-exps and gradient scales have the
// target's shape (a scale of one element applies to every position: a reduced loss).

namespace {

// Every target must be a class or ignore_index; checked before any kernel runs (kernels never throw
// inside a parallel region).
void check_targets(const KernelCall& c, const ClassLossArgs& a, const Operand& target) {
  const int64_t positions = target.numel();
  for (int64_t i = 0; i < positions; ++i) {
    const int64_t t = a.target[i];
    if (t == a.ignore_index) continue;
    EMBER_CHECK(t >= 0 && t < a.classes, "[", c.name(), "] target ", t, " at position ", i,
                " (flattened target of shape ", *target.shape, ") is out of bounds for ", a.classes,
                " classes: expected a class in [0, ", a.classes, ") or ignore_index (", a.ignore_index, ")");
  }
}

int64_t scale_stride(const Operand& scale) { return scale.numel() == 1 ? 0 : 1; }

// inputs: scores, target; outputs: loss, lse (per position).
void cross_entropy_forward_kernel(const KernelCall& c) {
  const Operand &scores = c.inputs[0], &target = c.inputs[1];
  const ClassLossArgs a = class_loss_args(c, scores, target);
  check_targets(c, a, target);
  if (c.outputs[0].numel() > 0) cross_entropy_forward(a, scores.data, c.outputs[0].data, c.outputs[1].data);
}
// inputs: scores, target, lse, scale; outputs: the scores' gradient.
void cross_entropy_backward_kernel(const KernelCall& c) {
  const Operand &scores = c.inputs[0], &target = c.inputs[1], &scale = c.inputs[3], &grad = c.outputs[0];
  if (grad.numel() == 0) return;
  cross_entropy_backward(class_loss_args(c, scores, target), scores.data, c.inputs[2].data, scale.data,
                         scale_stride(scale), grad.data);
}
// inputs: scores (log-probabilities), target; outputs: loss (per position).
void nll_loss_forward_kernel(const KernelCall& c) {
  const Operand &scores = c.inputs[0], &target = c.inputs[1];
  const ClassLossArgs a = class_loss_args(c, scores, target);
  check_targets(c, a, target);
  if (c.outputs[0].numel() > 0) nll_loss_forward(a, scores.data, c.outputs[0].data);
}
// inputs: target, scale; outputs: the scores' gradient (whose shape gives the classes).
void nll_loss_backward_kernel(const KernelCall& c) {
  const Operand &target = c.inputs[0], &scale = c.inputs[1], &grad = c.outputs[0];
  if (grad.numel() == 0) return;
  nll_loss_backward(class_loss_args(c, grad, target), scale.data, scale_stride(scale), grad.data);
}

}  // namespace

void register_loss_kernels(KernelTable& table) {
  table.add(OpKind::kCrossEntropyForward, DeviceType::kCPU, cross_entropy_forward_kernel, kFloat32Or64);
  table.add(OpKind::kCrossEntropyGrad, DeviceType::kCPU, cross_entropy_backward_kernel, kFloat32Or64);
  table.add(OpKind::kNllLossForward, DeviceType::kCPU, nll_loss_forward_kernel, kFloat32Or64);
  table.add(OpKind::kNllLossGrad, DeviceType::kCPU, nll_loss_backward_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

// Class-index loss kernels. Each position (one row of class scores) is independent, so threads
// split the positions; the reductions over classes run on one thread in a fixed order.
#include "kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ember/error.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/parallel.h"

namespace ember::cpu {
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

template <class T>
void ce_forward(const ClassLossArgs& a, const T* x, T* loss, T* lse) {
  const int64_t stride = a.inner;
  const T smoothing = static_cast<T>(a.label_smoothing);
  for_each_position(a, [&](int64_t p, int64_t start) {
    const T* row = x + start;
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
  });
}

template <class T>
void ce_backward(const ClassLossArgs& a, const T* x, const T* lse, const T* scale, int64_t scale_stride, T* grad) {
  const int64_t stride = a.inner;
  const T smoothing = static_cast<T>(a.label_smoothing);
  const T off_target = smoothing / static_cast<T>(a.classes);
  for_each_position(a, [&](int64_t p, int64_t start) {
    const T* row = x + start;
    T* out = grad + start;
    const int64_t t = a.target[p];
    if (t == a.ignore_index) {
      for (int64_t c = 0; c < a.classes; ++c) out[c * stride] = 0;
      return;
    }
    const T s = scale[p * scale_stride], log_sum = lse[p];
    for (int64_t c = 0; c < a.classes; ++c) out[c * stride] = s * (std::exp(row[c * stride] - log_sum) - off_target);
    out[t * stride] -= s * (1 - smoothing);
  });
}

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
  dispatch_float("cross_entropy", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    ce_forward(args, static_cast<const T*>(scores), static_cast<T*>(loss), static_cast<T*>(lse));
  });
}

void cross_entropy_backward(const ClassLossArgs& args, const void* scores, const void* lse, const void* scale,
                            int64_t scale_stride, void* grad) {
  dispatch_float("cross_entropy", args.dtype, [&](auto zero) {
    using T = decltype(zero);
    ce_backward(args, static_cast<const T*>(scores), static_cast<const T*>(lse), static_cast<const T*>(scale),
                scale_stride, static_cast<T*>(grad));
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

}  // namespace ember::cpu

// Fused optimizer updates (see optim.h), compiled for every Highway target and chosen at run time.
// Each update is a functor that advances one vector of elements: it loads the parameter, the
// gradient and the state at the given pointers, does PyTorch's arithmetic in PyTorch's order (so
// float32 rounds like torch's single-tensor path), and stores the parameter and the state.

// clang-format off: foreach_target.h must come first, right after HWY_TARGET_INCLUDE.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optim.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/optim.h"

HWY_BEFORE_NAMESPACE();
namespace ember::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// torch.lerp(self, end, weight): self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w),
// which is exact at both ends of [0, 1].
template <class V>
V lerp(V self, V end, V weight, V one_minus_weight, bool weight_is_small) {
  const V diff = hn::Sub(end, self);
  return weight_is_small ? hn::Add(self, hn::Mul(weight, diff)) : hn::Sub(end, hn::Mul(diff, one_minus_weight));
}

// torch.maximum: NaN in either operand gives NaN (x86 max instructions would return the second one).
template <class V>
V maximum(V a, V b) {
  const V r = hn::Max(a, b);
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, r));
}

template <class T>
T* advance(T* p, int64_t i) {
  return p == nullptr ? nullptr : p + i;
}

// Runs update(d, param, grad, s0, s1, s2) over [0, n) one vector at a time. The last partial
// vector is copied into padded buffers and run through the same vector code, so an element's
// result never depends on where a thread's chunk ends. Null state pointers stay null.
template <class T, class Update>
void run(const Update& update, T* param, const T* grad, T* s0, T* s1, T* s2, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    update(d, param + i, grad + i, advance(s0, i), advance(s1, i), advance(s2, i));
  }
  const int64_t rest = n - i;
  if (rest == 0) return;
  // Zero padding: the padded lanes compute finite or harmless values that are thrown away.
  HWY_ALIGN T buffers[5][hn::MaxLanes(d)] = {};
  T* const pointers[5] = {param + i, const_cast<T*>(grad + i), advance(s0, i), advance(s1, i), advance(s2, i)};
  for (int k = 0; k < 5; ++k) {
    if (pointers[k] != nullptr) std::memcpy(buffers[k], pointers[k], static_cast<size_t>(rest) * sizeof(T));
  }
  update(d, buffers[0], buffers[1], s0 ? buffers[2] : nullptr, s1 ? buffers[3] : nullptr, s2 ? buffers[4] : nullptr);
  for (int k = 0; k < 5; ++k) {
    if (k != 1 && pointers[k] != nullptr) std::memcpy(pointers[k], buffers[k], static_cast<size_t>(rest) * sizeof(T));
  }
}

template <class T>
void sgd_row(const SgdAttrs& s, T* param, const T* grad, T* buf, int64_t n) {
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T momentum = static_cast<T>(s.momentum);
  const T one_minus_dampening = static_cast<T>(1.0 - s.dampening);
  const T neg_lr = static_cast<T>(-s.lr);
  const bool use_weight_decay = s.weight_decay != 0;
  const bool use_momentum = s.momentum != 0;
  auto update = [&](auto d, T* p_ptr, const T* g_ptr, T* b_ptr, T*, T*) {
    const auto p = hn::LoadU(d, p_ptr);
    auto g = hn::LoadU(d, g_ptr);
    if (use_weight_decay) g = hn::Add(g, hn::Mul(hn::Set(d, weight_decay), p));
    if (use_momentum) {
      auto b = g;
      if (!s.first_step) {
        b = hn::Add(hn::Mul(hn::LoadU(d, b_ptr), hn::Set(d, momentum)), hn::Mul(hn::Set(d, one_minus_dampening), g));
      }
      hn::StoreU(b, d, b_ptr);
      g = s.nesterov ? hn::Add(g, hn::Mul(hn::Set(d, momentum), b)) : b;
    }
    hn::StoreU(hn::Add(p, hn::Mul(hn::Set(d, neg_lr), g)), d, p_ptr);
  };
  run<T>(update, param, grad, buf, nullptr, nullptr, n);
}

template <class T>
void adam_row(const AdamAttrs& s, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, int64_t n) {
  const T decay_factor = static_cast<T>(1.0 - s.lr * s.weight_decay);
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T weight1 = static_cast<T>(1.0 - s.beta1);  // lerp weight
  const T one_minus_weight1 = static_cast<T>(1.0 - static_cast<double>(weight1));
  const bool weight1_is_small = std::abs(static_cast<double>(weight1)) < 0.5;
  const T beta2 = static_cast<T>(s.beta2);
  const T one_minus_beta2 = static_cast<T>(1.0 - s.beta2);
  const T bias_correction2_sqrt = static_cast<T>(s.bias_correction2_sqrt);
  const T eps = static_cast<T>(s.eps);
  const T neg_step_size = static_cast<T>(-s.step_size);
  const bool use_weight_decay = s.weight_decay != 0;
  const bool decoupled = s.decoupled_weight_decay;
  auto update = [&](auto d, T* p_ptr, const T* g_ptr, T* m_ptr, T* v_ptr, T* v_max_ptr) {
    auto p = hn::LoadU(d, p_ptr);
    auto g = hn::LoadU(d, g_ptr);
    if (use_weight_decay) {
      if (decoupled) {
        p = hn::Mul(p, hn::Set(d, decay_factor));
      } else {
        g = hn::Add(g, hn::Mul(hn::Set(d, weight_decay), p));
      }
    }
    const auto m = lerp(hn::LoadU(d, m_ptr), g, hn::Set(d, weight1), hn::Set(d, one_minus_weight1), weight1_is_small);
    const auto v =
        hn::Add(hn::Mul(hn::LoadU(d, v_ptr), hn::Set(d, beta2)), hn::Mul(hn::Mul(hn::Set(d, one_minus_beta2), g), g));
    hn::StoreU(m, d, m_ptr);
    hn::StoreU(v, d, v_ptr);
    auto v_hat = v;
    if (v_max_ptr != nullptr) {
      v_hat = maximum(hn::LoadU(d, v_max_ptr), v);
      hn::StoreU(v_hat, d, v_max_ptr);
    }
    const auto denom = hn::Add(hn::Div(hn::Sqrt(v_hat), hn::Set(d, bias_correction2_sqrt)), hn::Set(d, eps));
    p = hn::Add(p, hn::Div(hn::Mul(hn::Set(d, neg_step_size), m), denom));
    hn::StoreU(p, d, p_ptr);
  };
  run<T>(update, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
}

template <class T>
void adagrad_row(const AdagradAttrs& s, T* param, const T* grad, T* sum, int64_t n) {
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T eps = static_cast<T>(s.eps);
  const T neg_clr = static_cast<T>(-s.clr);
  const bool use_weight_decay = s.weight_decay != 0;
  auto update = [&](auto d, T* p_ptr, const T* g_ptr, T* sum_ptr, T*, T*) {
    const auto p = hn::LoadU(d, p_ptr);
    auto g = hn::LoadU(d, g_ptr);
    if (use_weight_decay) g = hn::Add(g, hn::Mul(hn::Set(d, weight_decay), p));
    const auto acc = hn::Add(hn::LoadU(d, sum_ptr), hn::Mul(g, g));
    hn::StoreU(acc, d, sum_ptr);
    const auto std = hn::Add(hn::Sqrt(acc), hn::Set(d, eps));
    hn::StoreU(hn::Add(p, hn::Div(hn::Mul(hn::Set(d, neg_clr), g), std)), d, p_ptr);
  };
  run<T>(update, param, grad, sum, nullptr, nullptr, n);
}

template <class T>
void rmsprop_row(const RmspropAttrs& s, T* param, const T* grad, T* square_avg, T* grad_avg, T* buf, int64_t n) {
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T alpha = static_cast<T>(s.alpha);
  const T one_minus_alpha = static_cast<T>(1.0 - s.alpha);  // also grad_avg's lerp weight
  const T lerp_one_minus_weight = static_cast<T>(1.0 - static_cast<double>(one_minus_alpha));
  const bool lerp_weight_is_small = std::abs(static_cast<double>(one_minus_alpha)) < 0.5;
  const T eps = static_cast<T>(s.eps);
  const T momentum = static_cast<T>(s.momentum);
  const T neg_lr = static_cast<T>(-s.lr);
  const bool use_weight_decay = s.weight_decay != 0;
  auto update = [&](auto d, T* p_ptr, const T* g_ptr, T* sq_ptr, T* ga_ptr, T* b_ptr) {
    const auto p = hn::LoadU(d, p_ptr);
    auto g = hn::LoadU(d, g_ptr);
    if (use_weight_decay) g = hn::Add(g, hn::Mul(hn::Set(d, weight_decay), p));
    const auto sq =
        hn::Add(hn::Mul(hn::LoadU(d, sq_ptr), hn::Set(d, alpha)), hn::Mul(hn::Mul(hn::Set(d, one_minus_alpha), g), g));
    hn::StoreU(sq, d, sq_ptr);
    auto avg = sq;
    if (ga_ptr != nullptr) {
      const auto ga = lerp(hn::LoadU(d, ga_ptr), g, hn::Set(d, one_minus_alpha), hn::Set(d, lerp_one_minus_weight),
                           lerp_weight_is_small);
      hn::StoreU(ga, d, ga_ptr);
      avg = hn::Sub(sq, hn::Mul(ga, ga));  // addcmul with value -1
    }
    avg = hn::Add(hn::Sqrt(avg), hn::Set(d, eps));
    if (b_ptr != nullptr) {
      const auto b = hn::Add(hn::Mul(hn::LoadU(d, b_ptr), hn::Set(d, momentum)), hn::Div(g, avg));
      hn::StoreU(b, d, b_ptr);
      hn::StoreU(hn::Add(p, hn::Mul(hn::Set(d, neg_lr), b)), d, p_ptr);
    } else {
      hn::StoreU(hn::Add(p, hn::Div(hn::Mul(hn::Set(d, neg_lr), g), avg)), d, p_ptr);
    }
  };
  run<T>(update, param, grad, square_avg, grad_avg, buf, n);
}

// One entry point per optimizer and target; the dtype is float32 or float64 (checked by the caller).
void SgdRow(DType dtype, const SgdAttrs& s, void* param, const void* grad, void* buf, int64_t begin, int64_t end) {
  if (dtype == kFloat32) {
    sgd_row(s, static_cast<float*>(param) + begin, static_cast<const float*>(grad) + begin,
            advance(static_cast<float*>(buf), begin), end - begin);
  } else {
    sgd_row(s, static_cast<double*>(param) + begin, static_cast<const double*>(grad) + begin,
            advance(static_cast<double*>(buf), begin), end - begin);
  }
}

void AdamRow(DType dtype, const AdamAttrs& s, void* param, const void* grad, void* m, void* v, void* v_max,
             int64_t begin, int64_t end) {
  if (dtype == kFloat32) {
    adam_row(s, static_cast<float*>(param) + begin, static_cast<const float*>(grad) + begin,
             static_cast<float*>(m) + begin, static_cast<float*>(v) + begin, advance(static_cast<float*>(v_max), begin),
             end - begin);
  } else {
    adam_row(s, static_cast<double*>(param) + begin, static_cast<const double*>(grad) + begin,
             static_cast<double*>(m) + begin, static_cast<double*>(v) + begin,
             advance(static_cast<double*>(v_max), begin), end - begin);
  }
}

void AdagradRow(DType dtype, const AdagradAttrs& s, void* param, const void* grad, void* sum, int64_t begin,
                int64_t end) {
  if (dtype == kFloat32) {
    adagrad_row(s, static_cast<float*>(param) + begin, static_cast<const float*>(grad) + begin,
                static_cast<float*>(sum) + begin, end - begin);
  } else {
    adagrad_row(s, static_cast<double*>(param) + begin, static_cast<const double*>(grad) + begin,
                static_cast<double*>(sum) + begin, end - begin);
  }
}

void RmspropRow(DType dtype, const RmspropAttrs& s, void* param, const void* grad, void* square_avg, void* grad_avg,
                void* buf, int64_t begin, int64_t end) {
  if (dtype == kFloat32) {
    rmsprop_row(s, static_cast<float*>(param) + begin, static_cast<const float*>(grad) + begin,
                static_cast<float*>(square_avg) + begin, advance(static_cast<float*>(grad_avg), begin),
                advance(static_cast<float*>(buf), begin), end - begin);
  } else {
    rmsprop_row(s, static_cast<double*>(param) + begin, static_cast<const double*>(grad) + begin,
                static_cast<double*>(square_avg) + begin, advance(static_cast<double*>(grad_avg), begin),
                advance(static_cast<double*>(buf), begin), end - begin);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ember::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/registry.h"

namespace ember::cpu {

HWY_EXPORT(SgdRow);
HWY_EXPORT(AdamRow);
HWY_EXPORT(AdagradRow);
HWY_EXPORT(RmspropRow);

namespace {

// An update moves 3-5 arrays per element, so a thread pays off sooner than for a plain elementwise op.
constexpr int64_t kOptimizerGrain = 16384;
// Threads get whole blocks: chunk edges stay 256-byte aligned relative to the start, so no two threads
// write the same cache line.
constexpr int64_t kBlock = 64;

template <class Row>
void for_blocks(int64_t n, const Row& row) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(0, blocks, kOptimizerGrain / kBlock,
               [&](int64_t b0, int64_t b1) { row(b0 * kBlock, std::min(n, b1 * kBlock)); });
}

}  // namespace

void sgd_step(DType dtype, const SgdAttrs& step, void* param, const void* grad, void* momentum_buffer, int64_t n) {
  for_blocks(n, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(SgdRow)(dtype, step, param, grad, momentum_buffer, begin, end);
  });
}

void adam_step(DType dtype, const AdamAttrs& step, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, int64_t n) {
  for_blocks(n, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(AdamRow)(dtype, step, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, begin, end);
  });
}

void adagrad_step(DType dtype, const AdagradAttrs& step, void* param, const void* grad, void* sum, int64_t n) {
  for_blocks(n, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(AdagradRow)(dtype, step, param, grad, sum, begin, end);
  });
}

void rmsprop_step(DType dtype, const RmspropAttrs& step, void* param, const void* grad, void* square_avg,
                  void* grad_avg, void* momentum_buffer, int64_t n) {
  for_blocks(n, [&](int64_t begin, int64_t end) {
    HWY_DYNAMIC_DISPATCH(RmspropRow)(dtype, step, param, grad, square_avg, grad_avg, momentum_buffer, begin, end);
  });
}

namespace {

// Operands: input 0 the gradient; outputs the parameter, then the state in the order of the
// attributes' formula (absent optional state: undefined), all contiguous, updated in place.
void sgd_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  sgd_step(param.dtype, c.get<SgdAttrs>(), param.data, c.inputs[0].data, c.outputs[1].data, param.numel());
}
void adam_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  adam_step(param.dtype, c.get<AdamAttrs>(), param.data, c.inputs[0].data, c.outputs[1].data, c.outputs[2].data,
            c.outputs[3].data, param.numel());
}
void adagrad_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  adagrad_step(param.dtype, c.get<AdagradAttrs>(), param.data, c.inputs[0].data, c.outputs[1].data, param.numel());
}
void rmsprop_kernel(const KernelCall& c) {
  const Operand& param = c.outputs[0];
  rmsprop_step(param.dtype, c.get<RmspropAttrs>(), param.data, c.inputs[0].data, c.outputs[1].data, c.outputs[2].data,
               c.outputs[3].data, param.numel());
}

}  // namespace

void register_optim_kernels(KernelTable& table) {
  table.add(OpKind::kSgdStep, DeviceType::kCPU, sgd_kernel, kFloat32Or64);
  table.add(OpKind::kAdamStep, DeviceType::kCPU, adam_kernel, kFloat32Or64);
  table.add(OpKind::kAdagradStep, DeviceType::kCPU, adagrad_kernel, kFloat32Or64);
  table.add(OpKind::kRmspropStep, DeviceType::kCPU, rmsprop_kernel, kFloat32Or64);
}

}  // namespace ember::cpu
#endif  // HWY_ONCE

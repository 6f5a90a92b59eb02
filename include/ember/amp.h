// Automatic mixed precision, as torch.amp: run the matrix products in bfloat16 or float16 while
// the master weights and the numerically delicate ops stay in float32, and scale the loss so that
// float16 gradients do not underflow.
//
//   ember::amp::GradScaler scaler;                      // for float16; bfloat16 rarely needs it
//   for (...) {
//     optimizer.zero_grad();
//     ember::Tensor loss;
//     {
//       ember::amp::Autocast autocast(ember::kBFloat16);
//       loss = F::cross_entropy(model(x), y);
//     }
//     scaler.scale(loss).backward();
//     scaler.unscale_(optimizer);                        // before clipping, if you clip
//     ember::optim::clip_grad_norm_(model.parameters(), 1.0);
//     scaler.step(optimizer);                            // skipped if a gradient is Inf or NaN
//     scaler.update();
//   }
//
// Inside an Autocast guard (per thread, nestable) the ops of the lower-precision list (matmul,
// linear, linear_gelu, conv2d, conv_transpose2d, scaled_dot_product_attention) cast float32 inputs
// to the guard's dtype, and the ops of the float32 list (softmax, log_softmax, layer_norm, rms_norm,
// the losses, exp, log, sum, mean, var, std, logsumexp, norm) cast float16/bfloat16 inputs to
// float32; other ops run in their inputs' dtype. The policy is in src/ops/autocast.cpp; docs/amp.md
// lists it beside PyTorch's.
#pragma once

#include <optional>

#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::amp {

class Autocast {
 public:
  // dtype: kBFloat16 or kFloat16; enabled = false makes the guard a no-op (and turns autocast off
  // inside it, as torch.autocast(enabled=False)).
  explicit Autocast(DType dtype = kBFloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// Is an Autocast guard active on this thread, and with which dtype?
std::optional<DType> autocast_dtype();

// Dynamic loss scaling with PyTorch's semantics (torch.amp.GradScaler): the loss is multiplied by
// `scale` before backward; unscale_ divides the optimizer's gradients by it and records whether any
// is Inf or NaN; step skips the optimizer's step when one was; update halves the scale after a
// skipped step (backoff) and doubles it after `growth_interval` clean steps in a row.
//
// The scale and the Inf/NaN flag are tensors, and the two decisions that read the flag (step and
// update) are host regions (ops/dispatch.h), so a whole training step with a scaler compiles:
// ember::compile records the unscaling and the checks as kernels and replays the decisions, which
// read the flag anew every call.
class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    bool enabled = true;
  };
  GradScaler() : GradScaler(Options{}) {}
  explicit GradScaler(Options options);

  // loss * scale (loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `optimizer`'s parameters by the scale, once per step, and records
  // whether any of them holds Inf or NaN. Throws if called twice before update().
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (if not done yet), then optimizer.step() unless a gradient was Inf or NaN. Returns
  // whether the optimizer stepped (in a compiled function: whether it did when traced).
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale for the next step (after step()).
  void update();

  double get_scale() const;
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }
  // Whether the last unscale_ found Inf or NaN (until update()).
  bool found_inf() const;

  // "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" (PyTorch's
  // keys), 0-dim float64 tensors, for checkpoints.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  void update_host();

  // Moves the scale and the flag to `device` (that of the loss and gradients) when they are elsewhere.
  void follow(Device device) const;

  // Made on the CPU; they move to the device of the first loss scaled (follow), so that the scaling,
  // the checks and the decisions read them where the gradients are.
  mutable Tensor scale_;      // 0-dim float64
  mutable Tensor found_inf_;  // 0-dim bool
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  bool enabled_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
};

}  // namespace ember::amp

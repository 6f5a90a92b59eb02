// Autocast guards and GradScaler (ember/amp.h); the op lists are in src/ops/autocast.cpp.
#include "ember/amp.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/dispatch.h"

namespace ember::amp {

Autocast::Autocast(DType dtype, bool enabled) : previous_(amp::autocast_dtype()) {
  EMBER_CHECK(dtype == kBFloat16 || dtype == kFloat16, "[Autocast] expected bfloat16 or float16, got ", dtype);
  set_autocast_dtype(enabled ? std::optional<DType>(dtype) : std::nullopt);
}

Autocast::~Autocast() { set_autocast_dtype(previous_); }

GradScaler::GradScaler(Options options)
    : scale_(full({}, options.init_scale, kFloat64)),
      found_inf_(zeros({}, kBool)),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval),
      enabled_(options.enabled) {
  EMBER_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale),
              "[GradScaler] init_scale must be positive, got ", options.init_scale);
  EMBER_CHECK(options.growth_factor > 1.0, "[GradScaler] growth_factor must be above 1, got ", options.growth_factor);
  EMBER_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
              "[GradScaler] backoff_factor must be in (0, 1), got ", options.backoff_factor);
  EMBER_CHECK(options.growth_interval >= 1, "[GradScaler] growth_interval must be at least 1, got ",
              options.growth_interval);
}

double GradScaler::get_scale() const { return enabled_ ? scale_.item<double>() : 1.0; }

bool GradScaler::found_inf() const { return found_inf_.item<bool>(); }

void GradScaler::follow(Device device) const {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  found_inf_ = found_inf_.to(device);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  follow(loss.device());
  // The scale rounded to the loss's dtype, as multiplying by the number itself rounds it.
  return loss * scale_.to(loss.dtype());
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  EMBER_CHECK(!unscaled_, "[GradScaler] unscale_() has already been called on this optimizer since the last update()");
  const autograd::NoGradGuard no_grad;
  for (optim::ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      if (p.grad().defined()) {
        follow(p.grad().device());
        break;
      }
    }
  }
  const Tensor inverse = div(Scalar(1.0), scale_);  // float64, rounded to each gradient's dtype below
  Tensor found = zeros({}, TensorOptions(scale_.device()).with_dtype(kBool));
  for (optim::ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(inverse.to(g.dtype()));
      // |g| <= max is false for NaN and Inf alike.
      const double largest = std::numeric_limits<double>::max();
      found = logical_or(found, logical_not(le(abs(g.to(kFloat64)), largest).all()));
    }
  }
  found_inf_.copy_(found);
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale_(optimizer);
  // The optimizer reads the flag on the host, in the host part of its step that a compiled step
  // replays: the updates stay kernels of the plan.
  return optimizer.step(found_inf_);
}

void GradScaler::update() {
  if (!enabled_) return;
  const dispatch::HostRegion region("GradScaler.update", [this] { update_host(); }, {&found_inf_, &scale_});
  update_host();
  unscaled_ = false;
}

void GradScaler::update_host() {
  const autograd::NoGradGuard no_grad;
  if (found_inf()) {
    scale_.fill_(scale_.item<double>() * backoff_factor_);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    scale_.fill_(scale_.item<double>() * growth_factor_);
    growth_tracker_ = 0;
  }
  found_inf_.fill_(false);
}

StateDict GradScaler::state_dict() const {
  const auto number = [](double v) { return full({}, v, kFloat64); };
  return {{"scale", number(scale_.item<double>())},
          {"growth_factor", number(growth_factor_)},
          {"backoff_factor", number(backoff_factor_)},
          {"growth_interval", number(static_cast<double>(growth_interval_))},
          {"_growth_tracker", number(static_cast<double>(growth_tracker_))}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  const auto get = [&](const char* key) {
    const auto it = state.find(key);
    EMBER_CHECK(it != state.end(), "[GradScaler] load_state_dict: the state has no \"", key, "\"");
    EMBER_CHECK(it->second.numel() == 1, "[GradScaler] load_state_dict: \"", key, "\" must hold one value, got shape ",
                it->second.shape());
    return it->second.item<double>();
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("_growth_tracker");
  EMBER_CHECK(scale > 0 && std::isfinite(scale) && growth > 1 && backoff > 0 && backoff < 1 && interval >= 1 &&
                  tracker >= 0 && tracker < interval,
              "[GradScaler] load_state_dict: inconsistent values (scale ", scale, ", growth_factor ", growth,
              ", backoff_factor ", backoff, ", growth_interval ", interval, ", _growth_tracker ", tracker, ")");
  scale_.fill_(scale);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
}

}  // namespace ember::amp

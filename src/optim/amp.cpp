// Autocast guards and GradScaler (ember/amp.h); the op lists are in src/ops/autocast.cpp.
#include "ember/amp.h"

#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ops/autocast.h"

namespace ember::amp {

Autocast::Autocast(DType dtype, bool enabled) : previous_(amp::autocast_dtype()) {
  EMBER_CHECK(dtype == kBFloat16 || dtype == kFloat16, "[Autocast] expected bfloat16 or float16, got ", dtype);
  set_autocast_dtype(enabled ? std::optional<DType>(dtype) : std::nullopt);
}

Autocast::~Autocast() { set_autocast_dtype(previous_); }

GradScaler::GradScaler(Options options)
    : scale_(options.init_scale),
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

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  EMBER_CHECK(!unscaled_, "[GradScaler] unscale_() has already been called on this optimizer since the last update()");
  const autograd::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  bool found = false;
  for (optim::ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(inverse);
      // |g| <= max is false for NaN and Inf alike.
      const double largest = std::numeric_limits<double>::max();
      found = found || !le(abs(g.to(kFloat64)), largest).all().item<bool>();
    }
  }
  found_inf_ = found;
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  if (found_inf_) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    scale_ *= growth_factor_;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

StateDict GradScaler::state_dict() const {
  const auto number = [](double v) { return full({}, v, kFloat64); };
  return {{"scale", number(scale_)},
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
  scale_ = scale;
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
}

}  // namespace ember::amp

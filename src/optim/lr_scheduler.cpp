// Learning-rate schedulers (see ember/optim/lr_scheduler.h). Each get_lr() transcribes the formula
// PyTorch's step() uses, in the same order of operations, so the double results are identical.
#include "ember/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <set>
#include <utility>

#include "ember/ops.h"
#include "ops/dispatch.h"

namespace ember::optim {

// --- LRScheduler ----------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : optimizer_(optimizer), name_(std::move(name)), base_lrs_(current_lrs()) {}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> lrs;
  for (const ParamGroup& group : optimizer_.param_groups()) lrs.push_back(group.lr());
  return lrs;
}

void LRScheduler::initial_step() {
  is_initial_ = true;
  step();
  is_initial_ = false;
}

void LRScheduler::step() {
  const dispatch::HostRegion host(name_.c_str(), [this] { step(); });
  ++last_epoch_;
  const std::vector<double> lrs = get_lr();
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  EMBER_CHECK(lrs.size() == groups.size(), "[", name_, "] the optimizer has ", groups.size(),
              " param groups; the scheduler was made for ", lrs.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = current_lrs();
}

StateDict LRScheduler::state_dict() const {
  StateDict dict;
  dict["last_epoch"] = scalar_tensor(last_epoch_, kInt64);
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    dict["base_lrs." + std::to_string(g)] = scalar_tensor(base_lrs_[g], kFloat64);
  for (size_t g = 0; g < last_lr_.size(); ++g)
    dict["last_lr." + std::to_string(g)] = scalar_tensor(last_lr_[g], kFloat64);
  return dict;
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  const std::string op = "[" + name_ + ".load_state_dict]";
  std::set<std::string> used;
  auto number = [&](const std::string& key) -> double {
    const auto it = dict.find(key);
    EMBER_CHECK(it != dict.end(), op, " missing key '", key, "'");
    EMBER_CHECK(it->second.defined() && it->second.numel() == 1, op, " '", key, "' must hold one number");
    used.insert(key);
    return it->second.item<double>();
  };
  const double last_epoch = number("last_epoch");
  EMBER_CHECK(last_epoch >= 0 && last_epoch == std::floor(last_epoch), op,
              " 'last_epoch' must be a non-negative whole number, got ", last_epoch);
  const size_t groups = optimizer_.param_groups().size();
  std::vector<double> base_lrs(groups);
  std::vector<double> last_lr(groups);
  for (size_t g = 0; g < groups; ++g) {
    base_lrs[g] = number("base_lrs." + std::to_string(g));
    last_lr[g] = number("last_lr." + std::to_string(g));
  }
  for (const auto& [key, value] : dict) {
    EMBER_CHECK(used.count(key) != 0, op, " unexpected key '", key, "' (the optimizer has ", groups, " param groups)");
  }
  last_epoch_ = static_cast<int64_t>(last_epoch);
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
}

// --- StepLR ---------------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "[StepLR] step_size must be positive, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr *= gamma_;
  return lrs;
}

// --- CosineAnnealingLR ----------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), t_max_(t_max), eta_min_(eta_min) {
  EMBER_CHECK(t_max > 0, "[CosineAnnealingLR] T_max must be positive, got ", t_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (is_initial_) return lrs;
  constexpr double pi = std::numbers::pi;
  const auto t_max = static_cast<double>(t_max_);
  const auto epoch = static_cast<double>(last_epoch_);
  for (size_t g = 0; g < lrs.size(); ++g) {
    if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {
      // The bottom of a cycle (the ratio below would divide by zero): step back up from eta_min.
      lrs[g] = lrs[g] + (base_lrs_[g] - eta_min_) * (1 - std::cos(pi / t_max)) / 2;
    } else {
      lrs[g] = (1 + std::cos(pi * epoch / t_max)) / (1 + std::cos(pi * (epoch - 1) / t_max)) * (lrs[g] - eta_min_) +
               eta_min_;
    }
  }
  return lrs;
}

// --- LinearLR -------------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1, "[LinearLR] start_factor must be in (0, 1], got ", start_factor);
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1, "[LinearLR] end_factor must be in [0, 1], got ", end_factor);
  EMBER_CHECK(total_iters >= 0, "[LinearLR] total_iters must be non-negative, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = current_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_factor_;
    return lrs;
  }
  if (is_initial_ || last_epoch_ > total_iters_) return lrs;
  // The ratio of this step's factor to the previous one's.
  const double ratio =
      1.0 + (end_factor_ - start_factor_) / (static_cast<double>(total_iters_) * start_factor_ +
                                             static_cast<double>(last_epoch_ - 1) * (end_factor_ - start_factor_));
  for (double& lr : lrs) lr *= ratio;
  return lrs;
}

// --- OneCycleLR -----------------------------------------------------------------------------------

namespace {

enum LrIndex { kInitialLr = 0, kMaxLr = 1, kMinLr = 2 };

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleLROptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr), std::move(options)) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lr, OneCycleLROptions options)
    : LRScheduler(optimizer, "OneCycleLR"), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  EMBER_CHECK(o.total_steps > 0, "[OneCycleLR] expected a positive total_steps, got ", o.total_steps);
  EMBER_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "[OneCycleLR] expected pct_start between 0 and 1, got ",
              o.pct_start);
  EMBER_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
              "[OneCycleLR] anneal_strategy must be 'cos' or 'linear', got '", o.anneal_strategy, "'");
  EMBER_CHECK(o.div_factor > 0 && o.final_div_factor > 0,
              "[OneCycleLR] div_factor and final_div_factor must be positive, got ", o.div_factor, " and ",
              o.final_div_factor);
  std::vector<ParamGroup>& groups = optimizer.param_groups();
  EMBER_CHECK(max_lr.size() == groups.size(), "[OneCycleLR] expected ", groups.size(), " values for max_lr, got ",
              max_lr.size());

  const auto total = static_cast<double>(o.total_steps);
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1, kInitialLr, kMaxLr, true, false},
               {2 * o.pct_start * total - 2, kMaxLr, kInitialLr, false, true},
               {total - 1, kInitialLr, kMinLr, true, true}};
  } else {
    phases_ = {{o.pct_start * total - 1, kInitialLr, kMaxLr, true, false}, {total - 1, kMaxLr, kMinLr, false, true}};
  }

  for (size_t g = 0; g < groups.size(); ++g) {
    initial_lrs_.push_back(max_lr[g] / o.div_factor);
    max_lrs_.push_back(max_lr[g]);
    min_lrs_.push_back(initial_lrs_.back() / o.final_div_factor);
  }
  base_lrs_ = initial_lrs_;

  if (o.cycle_momentum) {
    const Options& defaults = optimizer.defaults();
    if (defaults.count("beta1") != 0) {
      momentum_option_ = "beta1";
    } else if (defaults.count("momentum") != 0) {
      momentum_option_ = "momentum";
    } else {
      EMBER_FAIL("[OneCycleLR] ", optimizer.name(), " has no momentum or beta1 to cycle; pass cycle_momentum = false");
    }
    for (ParamGroup& group : groups) group.options[momentum_option_] = o.max_momentum;
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "cos") {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() {
  EMBER_CHECK(last_epoch_ <= options_.total_steps, "[OneCycleLR] tried to step ", last_epoch_,
              " times; total_steps is ", options_.total_steps);
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  std::vector<double> lrs(groups.size());
  const auto step = static_cast<double>(last_epoch_);
  for (size_t g = 0; g < groups.size(); ++g) {
    const double group_lrs[3] = {initial_lrs_[g], max_lrs_[g], min_lrs_[g]};
    double start_step = 0.0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (step <= phase.end_step || i + 1 == phases_.size()) {
        const double pct = (step - start_step) / (phase.end_step - start_step);
        lrs[g] = anneal(group_lrs[phase.start_lr], group_lrs[phase.end_lr], pct);
        if (!momentum_option_.empty()) {
          const double start = phase.start_momentum_is_max ? options_.max_momentum : options_.base_momentum;
          const double end = phase.end_momentum_is_max ? options_.max_momentum : options_.base_momentum;
          groups[g].options[momentum_option_] = anneal(start, end, pct);
        }
        break;
      }
      start_step = phase.end_step;
    }
  }
  return lrs;
}

}  // namespace ember::optim

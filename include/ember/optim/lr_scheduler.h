// Learning-rate schedulers, as torch.optim.lr_scheduler: each step() advances last_epoch and sets
// every param group's "lr". The values follow PyTorch's step() formulas (the recursive, chainable
// forms where PyTorch uses them), so sequences match torch to the last bits. A scheduler sets the
// optimizer's learning rates when it is constructed (step 0), as PyTorch's does.
//
// Resuming from a checkpoint: construct the optimizer and the scheduler as before, then load the
// optimizer's state_dict (it restores the learning rates) and then the scheduler's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"

namespace ember::optim {

// The base of every scheduler. It holds a reference to its optimizer, which must outlive it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one step (call after optimizer.step()) and sets the groups' learning rates.
  void step();
  // The learning rate of each group after the last step().
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_epoch" (0-dim int64), "base_lrs.<g>" and "last_lr.<g>" (0-dim float64).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state_dict);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // Runs step 0; derived constructors call it last, once get_lr() can run.
  void initial_step();
  // The learning rate of each group at last_epoch_ (already advanced).
  virtual std::vector<double> get_lr() = 0;
  // The groups' current learning rates.
  std::vector<double> current_lrs() const;

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  bool is_initial_ = false;  // inside the constructor's step 0

 private:
  std::vector<double> last_lr_;
};

// Multiplies the learning rate by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Cosine annealing from the base learning rate to eta_min over T_max steps (and back up after, as
// PyTorch's formula does when stepped past T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  // t_max is PyTorch's T_max.
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up (or decay) of the learning rate's factor from start_factor to end_factor over
// total_iters steps, then constant.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

struct OneCycleLROptions {
  int64_t total_steps = 0;  // required, > 0
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  // Cycles the optimizer's "momentum" (SGD, RMSprop) or "beta1" (Adam, AdamW) inversely to the
  // learning rate, between base_momentum and max_momentum; optimizers with neither are an error.
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

// The 1cycle policy: warm up from initial_lr to max_lr over pct_start of total_steps, then anneal
// to min_lr (three_phase: back to initial_lr first, then to min_lr). Stepping past total_steps is
// an error, as in PyTorch.
class OneCycleLR : public LRScheduler {
 public:
  // max_lr: one value for every group, or one per group.
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lr, OneCycleLROptions options);
  OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleLROptions options);

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    int start_lr;  // index into a group's {initial, max, min} learning rates
    int end_lr;
    bool start_momentum_is_max;
    bool end_momentum_is_max;
  };
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::vector<double> initial_lrs_;
  std::vector<double> max_lrs_;
  std::vector<double> min_lrs_;
  std::string momentum_option_;  // "momentum", "beta1" or empty (no cycling)

  double anneal(double start, double end, double pct) const;
};

}  // namespace ember::optim

// The training step builder (ember/train/step.h).
#include "ember/train/step.h"

#include "ember/amp.h"
#include "ember/nn/module.h"
#include "ember/optim.h"

namespace ember::train {

OptimizerFactory optimizer_factory(const std::string& name, double lr) {
  using Groups = std::vector<optim::ParamGroup>;
  if (name == "sgd")
    return [lr](Groups g) { return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = lr}); };
  if (name == "momentum") {
    return [lr](Groups g) {
      return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = lr, .momentum = 0.9});
    };
  }
  if (name == "adam")
    return [lr](Groups g) { return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions{.lr = lr}); };
  if (name == "adamw") {
    return [lr](Groups g) { return std::make_unique<optim::AdamW>(std::move(g), optim::AdamWOptions{.lr = lr}); };
  }
  if (name == "adagrad") {
    return [lr](Groups g) { return std::make_unique<optim::Adagrad>(std::move(g), optim::AdagradOptions{.lr = lr}); };
  }
  if (name == "rmsprop") {
    return [lr](Groups g) { return std::make_unique<optim::RMSprop>(std::move(g), optim::RMSpropOptions{.lr = lr}); };
  }
  EMBER_FAIL("[train] unknown optimizer \"", name, "\"; choose sgd, momentum, adam, adamw, adagrad or rmsprop");
}

OptimizerFactory adamw_factory(optim::AdamWOptions options) {
  return [options](std::vector<optim::ParamGroup> groups) {
    return std::make_unique<optim::AdamW>(std::move(groups), options);
  };
}

TrainingStep::TrainingStep(std::shared_ptr<nn::Module> model, std::vector<optim::ParamGroup> groups,
                           const OptimizerFactory& make_optimizer, LossFn loss, StepOptions options)
    : model_(std::move(model)), loss_(std::move(loss)), options_(std::move(options)) {
  const std::string& op = options_.op;
  EMBER_CHECK(model_ != nullptr, "[", op, "] the training step needs a model");
  EMBER_CHECK(options_.group || !options_.zero, "[", op, "] --zero needs --ddp");
  EMBER_CHECK(!options_.autocast || *options_.autocast == kBFloat16 || *options_.autocast == kFloat16, "[", op,
              "] autocast runs in bfloat16 or float16, not ", *options_.autocast);
  const bool scaled = options_.autocast == kFloat16;
  EMBER_CHECK(!(scaled && options_.zero), "[", op,
              "] --amp f16 cannot run with --zero: the loss scaler steps one optimizer, not a sharded one (--amp "
              "bf16 can)");
  if (options_.zero) {
    sharded_ = std::make_unique<dist::ZeroRedundancyOptimizer>(std::move(groups), options_.group, make_optimizer);
  } else {
    whole_ = make_optimizer(std::move(groups));
  }
  if (scaled) scaler_ = std::make_unique<amp::GradScaler>();
  if (options_.group) {
    ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, options_.group,
                                                           dist::DdpOptions{.bucket_cap_mb = options_.bucket_cap_mb});
  }
  if (options_.compile) compiled_ = std::make_unique<detail::CompiledCore>(CompileOptions{});
}

TrainingStep::~TrainingStep() = default;

optim::Optimizer& TrainingStep::optimizer() { return sharded_ ? sharded_->local_optimizer() : *whole_; }

void TrainingStep::set_schedule(std::unique_ptr<optim::LRScheduler> schedule) { schedule_ = std::move(schedule); }

void TrainingStep::set_lr(double lr) {
  for (optim::ParamGroup& group : optimizer().param_groups()) group.set_lr(lr);
}

const CompileStats* TrainingStep::compile_stats() const { return compiled_ ? &compiled_->stats() : nullptr; }

std::vector<Tensor> TrainingStep::eager(const std::vector<Tensor>& batch) {
  optim::Optimizer& inner = optimizer();
  sharded_ ? sharded_->zero_grad() : inner.zero_grad();
  std::vector<Tensor> outputs;
  {
    const amp::Autocast autocast(options_.autocast.value_or(kBFloat16), options_.autocast.has_value());
    outputs = loss_(batch);
  }
  EMBER_CHECK(!outputs.empty() && outputs[0].defined() && outputs[0].numel() == 1, "[", options_.op,
              "] the loss function must return the loss first, one value");
  const Tensor& loss = outputs[0];
  if (scaler_) {
    scaler_->scale(loss).backward();
    if (options_.clip_grad_norm > 0) {
      scaler_->unscale_(inner);  // clip the true gradients
      optim::clip_grad_norm_(model_->parameters(), options_.clip_grad_norm);
    }
    scaler_->step(inner);
    scaler_->update();
  } else {
    loss.backward();
    if (options_.clip_grad_norm > 0) optim::clip_grad_norm_(model_->parameters(), options_.clip_grad_norm);
    if (sharded_) {
      sharded_->step();
    } else {
      inner.step();
    }
  }
  if (schedule_) schedule_->step();
  return outputs;
}

std::vector<Tensor> TrainingStep::operator()(const std::vector<Tensor>& batch) {
  if (!compiled_) return eager(batch);
  const std::vector<detail::CompileArg> args(batch.begin(), batch.end());
  auto body = [&] { return eager(batch); };
  return compiled_->call(args, detail::BodyRef(body));
}

TrainingState TrainingStep::state() {
  TrainingState state;
  state.model = model_.get();
  state.optimizer = sharded_ ? sharded_->consolidated_state_dict() : whole_->state_dict();
  state.schedule = schedule_.get();
  state.scaler = scaler_.get();
  return state;
}

void TrainingStep::load_state(const Checkpoint& checkpoint) {
  model_->load_state_dict(checkpoint.part(kModelPrefix));
  const StateDict optimizer_state = checkpoint.part(kOptimizerPrefix);
  sharded_ ? sharded_->load_state_dict(optimizer_state) : whole_->load_state_dict(optimizer_state);
  if (schedule_) schedule_->load_state_dict(checkpoint.part(kSchedulePrefix));
  if (scaler_) scaler_->load_state_dict(checkpoint.part(kScalerPrefix));
}

}  // namespace ember::train

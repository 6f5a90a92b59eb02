// The optimizer update ops' registry entries: sgd_step, adam_step (Adam and AdamW), adagrad_step and
// rmsprop_step. Their reference is PyTorch's optimizers: each forward check runs every step of the
// optimizer cases of tests/golden/optim.json (cases_optim.py) whose optimizer runs the op, once per
// parameter and step, and compares the parameters after each step, with contiguous parameters and
// again with non-contiguous ones (updated through a contiguous copy). Not differentiable.
#include <stdexcept>
#include <string>

#include "op_registry.h"
#include "optim_golden.h"

namespace op_registry {
namespace {

using golden::json;

// The update op an optimizer of optim.json runs. A case of an optimizer no entry knows fails every
// update op's check, so none is skipped silently.
OpKind update_op(const std::string& optimizer) {
  if (optimizer == "SGD") return OpKind::kSgdStep;
  if (optimizer == "Adam" || optimizer == "AdamW") return OpKind::kAdamStep;
  if (optimizer == "Adagrad") return OpKind::kAdagradStep;
  if (optimizer == "RMSprop") return OpKind::kRmspropStep;
  throw std::runtime_error("optim.json has cases of " + optimizer + ", whose update op no registry entry names");
}

// Every step of the optimizer cases that run `kind`, against PyTorch's parameters after the step.
void matches_torch_every_step(OpKind kind, bool contiguous) {
  int checked = 0;
  for (const json* c : optim_golden::cases_of_kind("optimizer")) {
    if (update_op(c->at("optimizer").get<std::string>()) != kind) continue;
    ++checked;
    SCOPED_TRACE(c->at("name").get<std::string>());
    optim_golden::OptimizerRun run(*c, contiguous);
    const size_t steps = c->at("grads").size();
    for (size_t s = 0; s < steps; ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      run.set_grads(run.params, s, contiguous);
      run.optimizer->step();
      for (size_t i = 0; i < run.params.size(); ++i) {
        const Tensor expected = golden::decode_tensor(c->at("expected").at(s).at(i));
        ASSERT_TRUE(
            golden::all_close(run.params[i].detach(), expected, optim_golden::optimizer_tolerance(expected.dtype())))
            << "parameter " << i;
      }
    }
  }
  EXPECT_GE(checked, 5) << "optimizer cases of " << ember::op_name(kind) << " in optim.json";
}

Entry update_entry(OpKind kind) {
  const std::string name = ember::op_name(kind);
  return {.name = name,
          .ops = {kind},
          .checks = {{name, [kind] { matches_torch_every_step(kind, /*contiguous=*/true); }},
                     {name + "_non_contiguous", [kind] { matches_torch_every_step(kind, /*contiguous=*/false); }}}};
}

[[maybe_unused]] const bool kOptimRegistered =
    add({update_entry(OpKind::kSgdStep), update_entry(OpKind::kAdamStep), update_entry(OpKind::kAdagradStep),
         update_entry(OpKind::kRmspropStep)});

}  // namespace
}  // namespace op_registry

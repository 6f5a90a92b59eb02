// Losses: cross_entropy (fused with its log-softmax), nll_loss, mse_loss, l1_loss
// and binary_cross_entropy_with_logits.
//
// Shape rules:
//   cross_entropy, nll_loss   input (N, C), (N, C, d...) or unbatched (C); target int64 class
//                             indices (N), (N, d...) or (). Reduction None gives the target's shape.
//                             Every target is in [0, C) or equals ignore_index, else ember::Error
//                             naming the target and where it is. Mean divides by the number of
//                             targets that are not ignore_index (nan when there are none, as PyTorch).
//   mse_loss, l1_loss         input and target broadcast; None gives the broadcast shape.
//   bce_with_logits           target has the input's shape; weight and pos_weight broadcast to it.
// Dtype rule: floating inputs; the loss keeps the input's dtype (float16/bfloat16 computed in float32
// by the class-index kernels; the elementwise losses follow ember's promotion).
// Cost (E = input elements, C classes):
//   cross_entropy   forward: one pass over the scores, ~4 E FLOPs + E exp; bytes E read + 2 per
//                   position (loss and the saved log-sum-exp). Backward: one pass, ~3 E FLOPs + E exp;
//                   bytes E read + E written.
//   nll_loss        forward E / C reads (a gather); backward E written.
//   mse / l1        forward 3 E FLOPs (difference, square or abs, sum); backward 2 E.
//   bce_with_logits forward ~10 E FLOPs with an exp and a log1p per element; backward ~8 E.
// Backward: cross_entropy's gradient is softmax minus the (smoothed) one-hot target, times the
// upstream gradient, from the saved log-sum-exp (the CrossEntropyGrad primitive): no log_softmax
// graph is built. Every loss is a composite with one node of its own: the class-index losses around
// their per-position primitives (CrossEntropyForward, NllLossForward) and the reduction, the
// elementwise losses around ember ops.
#include <cstdint>
#include <utility>

#include "autograd/function.h"
#include "ember/ops.h"
#include "ops/autocast.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/reference.h"
#include "ops/tensor_util.h"

namespace ember {
namespace {

using detail::compute_dtype;

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone:
      return loss;
    case Reduction::kSum:
      return sum(loss);
    case Reduction::kMean:
      return mean(loss);
  }
  return loss;
}

// The upstream gradient of a reduced loss, per element of its unreduced form (broadcastable).
Tensor per_element_grad(const Tensor& grad, Reduction reduction, int64_t count) {
  return reduction == Reduction::kMean ? grad / static_cast<double>(count) : grad;
}

// --- class-index losses -------------------------------------------------------------------------------

// The scores in their compute dtype and the targets, checked against each other's shapes (the
// targets' values are checked by the forward kernel).
struct ClassProblem {
  Tensor scores;  // contiguous, compute dtype
  Tensor target;  // contiguous int64
};

ClassProblem class_problem(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(is_floating(input.dtype()), "[", op, "] expects floating-point scores, got ", input.dtype(), " (shape ",
              input.shape(), ")");
  EMBER_CHECK(target.dtype() == kInt64, "[", op, "] expects int64 class indices as target, got ", target.dtype(),
              " (shape ", target.shape(), "); class probabilities are not supported");
  EMBER_CHECK(input.dim() >= 1, "[", op, "] expected an input of shape (C), (N, C) or (N, C, d...), got shape ",
              input.shape());
  Shape expected;  // the input's shape without the class dim
  if (input.dim() >= 2) {
    expected = input.shape();
    expected.erase(1);
  }
  EMBER_CHECK(target.shape() == expected, "[", op, "] input of shape ", input.shape(), " needs a target of shape ",
              expected, ", got ", target.shape());
  const int64_t classes = input.dim() >= 2 ? input.size(1) : input.size(0);
  EMBER_CHECK(classes > 0, "[", op, "] expected at least one class, got input of shape ", input.shape());
  return {detail::kernel_operand(input, compute_dtype(input.dtype())), target.contiguous()};
}

// The number of targets that are not ignore_index (an int64 0-dim tensor), which Mean divides by.
Tensor counted_targets(const Tensor& target, int64_t ignore_index) { return sum(ne(target, ignore_index)); }

// The loss of a class-index op from its per-position losses (target-shaped, compute dtype).
Tensor reduce_class_loss(const Tensor& per_position, Reduction reduction, const Tensor& counted, DType dtype) {
  Tensor result;
  switch (reduction) {
    case Reduction::kNone:
      result = per_position;
      break;
    case Reduction::kSum:
      result = sum(per_position);
      break;
    case Reduction::kMean:
      result = sum(per_position) / counted;
      break;  // 0 / 0 is nan
  }
  return result.dtype() == dtype ? result : result.to(dtype);
}

// The per-position scale of a class-index loss's gradient: the upstream gradient, divided by the
// counted targets for Mean; one element (applied to every position) unless the loss is unreduced.
Tensor class_grad_scale(const Tensor& grad, Reduction reduction, const Tensor& counted, DType compute) {
  if (reduction == Reduction::kNone) return grad.to(compute).contiguous();
  Tensor scale = grad.to(compute).reshape({1});
  if (reduction == Reduction::kMean) scale = scale / counted;
  return scale.contiguous();
}

}  // namespace

Tensor cross_entropy(const Tensor& input_arg, const Tensor& target_arg, int64_t ignore_index, Reduction reduction,
                     double label_smoothing) {
  const Tensor input = amp::cast(OpKind::kCrossEntropy, input_arg);
  const Tensor target = amp::cast(OpKind::kCrossEntropy, target_arg);
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "[cross_entropy] label_smoothing must be in [0, 1], got ", label_smoothing);
  const ClassLossAttrs attrs{ignore_index, label_smoothing, reduction};
  const dispatch::Scope scope(OpKind::kCrossEntropy, {&input, &target}, attrs);
  const ClassProblem p = class_problem("cross_entropy", input, target);
  if (!dispatch::has_kernel(OpKind::kCrossEntropyForward, input.device())) {
    return reference::cross_entropy(input, target, attrs);  // records its own graph
  }
  // The per-position primitives do not reduce.
  const ClassLossAttrs per_position_attrs{ignore_index, label_smoothing, Reduction::kNone};
  const DType compute = p.scores.dtype();
  Tensor per_position = detail::make_empty(target.shape(), compute, input.device());
  Tensor lse = detail::make_empty(target.shape(), compute, input.device());
  dispatch::run(OpKind::kCrossEntropyForward, per_position_attrs, {&p.scores, &p.target}, {&per_position, &lse});
  Tensor out, counted;
  {
    autograd::NoGradGuard no_grad;
    if (reduction == Reduction::kMean) counted = counted_targets(p.target, ignore_index);
    out = reduce_class_loss(per_position, reduction, counted, input.dtype());
  }
  if (autograd::needs_grad(input)) {
    // Saved: the scores and targets (checked against in-place changes) and the log-sum-exp.
    autograd::record(OpKind::kCrossEntropy, attrs, out, {&input},
                     [per_position_attrs, reduction, counted, scores = autograd::SavedTensor(p.scores),
                      targets = autograd::SavedTensor(p.target), lse,
                      in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       const Tensor x = scores.get(), t = targets.get();
                       const Tensor scale = class_grad_scale(grad, reduction, counted, x.dtype());
                       Tensor gi = detail::make_empty(in_shape, x.dtype(), grad.device());
                       dispatch::run(OpKind::kCrossEntropyGrad, per_position_attrs, {&x, &t, &lse, &scale}, {&gi});
                       return {gi};
                     });
  }
  return out;
}

Tensor nll_loss(const Tensor& input_arg, const Tensor& target_arg, int64_t ignore_index, Reduction reduction) {
  const Tensor input = amp::cast(OpKind::kNllLoss, input_arg);
  const Tensor target = amp::cast(OpKind::kNllLoss, target_arg);
  const ClassLossAttrs attrs{ignore_index, 0.0, reduction};
  const dispatch::Scope scope(OpKind::kNllLoss, {&input, &target}, attrs);
  const ClassProblem p = class_problem("nll_loss", input, target);
  const ClassLossAttrs per_position_attrs{ignore_index, 0.0, Reduction::kNone};
  const DType compute = p.scores.dtype();
  Tensor per_position = detail::make_empty(target.shape(), compute, input.device());
  dispatch::run(OpKind::kNllLossForward, per_position_attrs, {&p.scores, &p.target}, {&per_position});
  Tensor out, counted;
  {
    autograd::NoGradGuard no_grad;
    if (reduction == Reduction::kMean) counted = counted_targets(p.target, ignore_index);
    out = reduce_class_loss(per_position, reduction, counted, input.dtype());
  }
  if (autograd::needs_grad(input)) {
    // The backward needs only the targets, not the scores.
    autograd::record(OpKind::kNllLoss, attrs, out, {&input},
                     [per_position_attrs, reduction, counted, compute, targets = autograd::SavedTensor(p.target),
                      in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       const Tensor t = targets.get();
                       const Tensor scale = class_grad_scale(grad, reduction, counted, compute);
                       Tensor gi = detail::make_empty(in_shape, compute, grad.device());
                       dispatch::run(OpKind::kNllLossGrad, per_position_attrs, {&t, &scale}, {&gi});
                       return {gi};
                     });
  }
  return out;
}

// --- elementwise losses -----------------------------------------------------------------------------

namespace {

void check_regression(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "[", op,
              "] expects floating-point input and target, got ", input.dtype(), " and ", target.dtype());
  broadcast_shapes(input.shape(), target.shape(), op);
}

// mse_loss and l1_loss: loss = reduce(f(input - target)); d loss / d input = f'(diff) * upstream.
template <class Value, class Slope>
Tensor regression_loss(OpKind kind, const Tensor& input, const Tensor& target, Reduction reduction, const Value& value,
                       const Slope& slope) {
  const char* op = op_name(kind);
  const dispatch::Scope scope(kind, {&input, &target}, LossAttrs{reduction});
  check_regression(op, input, target);
  Tensor diff, out;
  {
    autograd::NoGradGuard no_grad;
    diff = input - target;
    out = reduce(value(diff), reduction);
  }
  if (autograd::needs_grad(input, target)) {
    autograd::record(kind, LossAttrs{reduction}, out, {&input, &target},
                     [diff, reduction, slope](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
                       const Tensor d = slope(diff) * per_element_grad(grad, reduction, diff.numel());
                       return {needs[0] ? d : Tensor(), needs[1] ? -d : Tensor()};
                     });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input_arg, const Tensor& target_arg, Reduction reduction) {
  const Tensor input = amp::cast(OpKind::kMseLoss, input_arg);
  const Tensor target = amp::cast(OpKind::kMseLoss, target_arg);
  return regression_loss(
      OpKind::kMseLoss, input, target, reduction, [](const Tensor& d) { return d * d; },
      [](const Tensor& d) { return d * 2.0; });
}

Tensor l1_loss(const Tensor& input_arg, const Tensor& target_arg, Reduction reduction) {
  const Tensor input = amp::cast(OpKind::kL1Loss, input_arg);
  const Tensor target = amp::cast(OpKind::kL1Loss, target_arg);
  return regression_loss(
      OpKind::kL1Loss, input, target, reduction, [](const Tensor& d) { return abs(d); },
      [](const Tensor& d) { return sign(d); });
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_arg, const Tensor& target_arg,
                                        const std::optional<Tensor>& weight_arg,
                                        const std::optional<Tensor>& pos_weight_arg, Reduction reduction) {
  const Tensor input = amp::cast(OpKind::kBceWithLogits, input_arg);
  const Tensor target = amp::cast(OpKind::kBceWithLogits, target_arg);
  const std::optional<Tensor> weight = amp::cast(OpKind::kBceWithLogits, weight_arg);
  const std::optional<Tensor> pos_weight = amp::cast(OpKind::kBceWithLogits, pos_weight_arg);
  const dispatch::Scope scope(OpKind::kBceWithLogits, {&input, &target}, LossAttrs{reduction});
  EMBER_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()),
              "[binary_cross_entropy_with_logits] expects floating-point input and target, got ", input.dtype(),
              " and ", target.dtype());
  EMBER_CHECK(input.shape() == target.shape(), "[binary_cross_entropy_with_logits] target of shape ", target.shape(),
              " must have the input's shape ", input.shape());
  const Tensor w = weight.value_or(Tensor()), pw = pos_weight.value_or(Tensor());
  if (w.defined()) broadcast_shapes(w.shape(), input.shape(), "binary_cross_entropy_with_logits");
  if (pw.defined()) broadcast_shapes(pw.shape(), input.shape(), "binary_cross_entropy_with_logits");

  // softplus(-x) = log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|)): never overflows.
  // loss = (1 - y) x + (1 + (pos_weight - 1) y) softplus(-x), times weight.
  Tensor softplus_neg, log_weight, unweighted, out;
  {
    autograd::NoGradGuard no_grad;
    softplus_neg = clamp(-input, 0.0, std::nullopt) + log1p(exp(-abs(input)));
    log_weight = pw.defined() ? (pw - 1.0) * target + 1.0 : Tensor();
    unweighted = (1.0 - target) * input + (log_weight.defined() ? log_weight * softplus_neg : softplus_neg);
    out = reduce(w.defined() ? unweighted * w : unweighted, reduction);
  }
  if (autograd::needs_grad(input, target, w, pw)) {
    autograd::record(
        OpKind::kBceWithLogits, LossAttrs{reduction}, out, {&input, &target, &w, &pw},
        [input_saved = autograd::SavedTensor(input), target_saved = autograd::SavedTensor(target),
         w_saved = autograd::SavedTensor(w), pw_saved = autograd::SavedTensor(pw), softplus_neg, log_weight, unweighted,
         reduction](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
          const Tensor x = input_saved.get(), y = target_saved.get(), wt = w_saved.get(), pwt = pw_saved.get();
          Tensor scale = per_element_grad(grad, reduction, x.numel());
          autograd::Grads grads(4);
          if (needs[2]) grads[2] = unweighted * scale;
          if (wt.defined()) scale = scale * wt;
          // d/dx: (1 - y) - lw * sigmoid(-x)  (= sigmoid(x) - y without pos_weight)
          if (needs[0]) {
            grads[0] =
                ((1.0 - y) - (log_weight.defined() ? log_weight * ember::sigmoid(-x) : ember::sigmoid(-x))) * scale;
          }
          // d/dy: -x + (pos_weight - 1) softplus(-x)
          if (needs[1]) grads[1] = (pwt.defined() ? (pwt - 1.0) * softplus_neg - x : -x) * scale;
          if (needs[3]) grads[3] = y * softplus_neg * scale;
          return grads;
        });
  }
  return out;
}

// --- reference decomposition (ops/reference.h) -------------------------------------------------------

namespace reference {

Tensor cross_entropy(const Tensor& x, const Tensor& target, const ClassLossAttrs& attrs) {
  const int64_t class_dim = x.dim() >= 2 ? 1 : 0;
  const Tensor log_probabilities = ember::log_softmax(x, class_dim);
  const Tensor counted = ne(target, attrs.ignore_index);
  const Tensor classes = where(counted, target, 0);  // any class where the target is ignored
  const Tensor picked = gather(log_probabilities, class_dim, classes.unsqueeze(class_dim)).squeeze(class_dim);
  Tensor loss = -picked * (1.0 - attrs.label_smoothing);
  if (attrs.label_smoothing != 0.0) loss = loss - mean(log_probabilities, {class_dim}) * attrs.label_smoothing;
  loss = where(counted, loss, 0.0);
  switch (attrs.reduction) {
    case Reduction::kNone:
      return loss;
    case Reduction::kSum:
      return sum(loss);
    case Reduction::kMean:
      break;
  }
  return sum(loss) / sum(counted);
}

}  // namespace reference

// --- cost rules ----------------------------------------------------------------------------------
//
// E = scores, C classes, n = positions (E / C).
//   cross_entropy_forward   log_softmax's FLOPs per score plus one per position; bytes: the scores,
//                           the targets, the per-position loss and log-sum-exp.
//   cross_entropy_grad      log_softmax's FLOPs plus 2 per score; bytes: scores, targets, log-sum-exps,
//                           scales and the gradient written.
//   nll_loss_forward        one FLOP per position (a picked score); bytes: the picked scores, the
//                           targets, the losses.
//   nll_loss_grad           one per position into a zeroed (n, C) gradient; bytes: the gradient
//                           written, the targets and scales read.

namespace {

OpCost cross_entropy_forward_cost(const KernelCall& c) {
  const double scores = cost::as_double(c.inputs[0].numel()), n = cost::as_double(c.inputs[1].numel());
  return {op_info(OpKind::kLogSoftmax).flops_per_element * scores + n, cost::operand_bytes(c)};
}
OpCost cross_entropy_grad_cost(const KernelCall& c) {
  const double scores = cost::as_double(c.inputs[0].numel());
  return {(op_info(OpKind::kLogSoftmax).flops_per_element + 2.0) * scores, cost::operand_bytes(c)};
}
OpCost nll_loss_forward_cost(const KernelCall& c) {
  const double n = cost::as_double(c.inputs[1].numel());
  return {n, cost::size_of(c.inputs[0].dtype) * 2.0 * n + cost::kIndexBytes * n};
}
OpCost nll_loss_grad_cost(const KernelCall& c) {
  const double n = cost::as_double(c.inputs[0].numel());
  return {n, cost::operand_bytes(c)};
}

}  // namespace

void define_loss_ops(OpRuleTable& table) {
  table.set_cost(OpKind::kCrossEntropyForward, cross_entropy_forward_cost);
  table.set_cost(OpKind::kCrossEntropyGrad, cross_entropy_grad_cost);
  table.set_cost(OpKind::kNllLossForward, nll_loss_forward_cost);
  table.set_cost(OpKind::kNllLossGrad, nll_loss_grad_cost);
}

}  // namespace ember

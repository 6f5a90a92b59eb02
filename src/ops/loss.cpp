// nn::functional losses: cross_entropy (fused with its log-softmax), nll_loss, mse_loss, l1_loss
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
// upstream gradient, from the saved log-sum-exp: no log_softmax graph is built. The elementwise
// losses record one node each whose backward is written with ember ops.
#include "kernels/cpu/loss.h"

#include <cstdint>
#include <utility>

#include "autograd/function.h"
#include "core/tensor_internal.h"
#include "ember/nn/functional.h"
#include "ops/cost.h"
#include "profiler/op_scope.h"

namespace ember::nn::functional {
namespace {

DType compute_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

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

// The (outer, classes, inner) view of the scores and the checked targets.
struct ClassProblem {
  cpu::ClassLossArgs args;
  Tensor scores;        // contiguous, compute dtype
  Tensor target;        // contiguous int64
  int64_t counted = 0;  // targets that are not ignore_index
};

ClassProblem class_problem(const char* op, const Tensor& input, const Tensor& target, int64_t ignore_index) {
  EMBER_CHECK(input.device().is_cpu() && target.device().is_cpu(), "[", op, "] not implemented on ",
              input.device().is_cpu() ? target.device() : input.device());
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
  ClassProblem p;
  p.args.dtype = compute_dtype(input.dtype());
  p.args.classes = classes;
  p.args.outer = input.dim() >= 2 ? input.size(0) : 1;
  p.args.inner = input.dim() >= 2 && p.args.outer > 0 ? input.numel() / (p.args.outer * classes) : 1;
  p.args.ignore_index = ignore_index;
  p.scores = input.detach().to(p.args.dtype).contiguous();  // no graph for the conversion
  p.target = target.contiguous();
  // Check every target before any kernel runs (kernels never throw inside a parallel region).
  const int64_t* t = p.target.data_ptr<int64_t>();
  const int64_t positions = p.target.numel();
  for (int64_t i = 0; i < positions; ++i) {
    if (t[i] == ignore_index) continue;
    EMBER_CHECK(t[i] >= 0 && t[i] < p.args.classes, "[", op, "] target ", t[i], " at position ", i,
                " (flattened target of shape ", target.shape(), ") is out of bounds for ", p.args.classes,
                " classes: expected a class in [0, ", p.args.classes, ") or ignore_index (", ignore_index, ")");
    ++p.counted;
  }
  p.args.target = p.target.data_ptr<int64_t>();
  return p;
}

// The loss of a class-index op from its per-position losses (target-shaped, compute dtype).
Tensor reduce_class_loss(const Tensor& per_position, Reduction reduction, int64_t counted, DType dtype) {
  Tensor result;
  switch (reduction) {
    case Reduction::kNone:
      result = per_position;
      break;
    case Reduction::kSum:
      result = sum(per_position);
      break;
    case Reduction::kMean:
      result = sum(per_position) / static_cast<double>(counted);
      break;  // 0 / 0 is nan
  }
  return result.dtype() == dtype ? result : result.to(dtype);
}

// The per-position scale of a class-index loss's gradient: the upstream gradient, divided by the
// counted targets for Mean. Returns the tensor and its stride (0: one value for every position).
std::pair<Tensor, int64_t> class_grad_scale(const Tensor& grad, Reduction reduction, int64_t counted, DType compute) {
  if (reduction == Reduction::kNone) return {grad.to(compute).contiguous(), 1};
  Tensor scale = grad.to(compute).reshape({1});
  if (reduction == Reduction::kMean) scale = scale / static_cast<double>(counted);
  return {scale.contiguous(), 0};
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, int64_t ignore_index, Reduction reduction,
                     double label_smoothing) {
  profiler::detail::OpScope scope("cross_entropy", {&input, &target});
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "[cross_entropy] label_smoothing must be in [0, 1], got ", label_smoothing);
  ClassProblem p = class_problem("cross_entropy", input, target, ignore_index);
  scope.cost([&] { return cross_entropy_cost(p.args.outer * p.args.inner, p.args.classes, input.dtype()); });
  p.args.label_smoothing = label_smoothing;
  const DType compute = p.args.dtype;
  Tensor per_position = detail::make_empty(target.shape(), compute, input.device());
  Tensor lse = detail::make_empty(target.shape(), compute, input.device());
  if (per_position.numel() > 0 && p.args.classes > 0) {
    cpu::cross_entropy_forward(p.args, p.scores.data_ptr(), per_position.data_ptr(), lse.data_ptr());
  }
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = reduce_class_loss(per_position, reduction, p.counted, input.dtype());
  }
  if (autograd::needs_grad(input)) {
    // Saved: the scores and targets (checked against in-place changes) and the log-sum-exp.
    autograd::record("cross_entropy", out, {&input},
                     [args = p.args, counted = p.counted, scores = autograd::SavedTensor(p.scores),
                      targets = autograd::SavedTensor(p.target), lse, reduction,
                      in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       const auto [scale, stride] = class_grad_scale(grad, reduction, counted, args.dtype);
                       cpu::ClassLossArgs a = args;
                       const Tensor t = targets.get(), x = scores.get();
                       a.target = t.data_ptr<int64_t>();
                       Tensor gi = detail::make_empty(in_shape, a.dtype, grad.device());
                       if (gi.numel() > 0) {
                         cpu::cross_entropy_backward(a, x.data_ptr(), lse.data_ptr(), scale.data_ptr(), stride,
                                                     gi.data_ptr());
                       }
                       return {gi};
                     });
  }
  return out;
}

Tensor nll_loss(const Tensor& input, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  profiler::detail::OpScope scope("nll_loss", {&input, &target});
  ClassProblem p = class_problem("nll_loss", input, target, ignore_index);
  scope.cost([&] { return nll_loss_cost(p.args.outer * p.args.inner, input.dtype()); });
  const DType compute = p.args.dtype;
  Tensor per_position = detail::make_empty(target.shape(), compute, input.device());
  if (per_position.numel() > 0 && p.args.classes > 0) {
    cpu::nll_loss_forward(p.args, p.scores.data_ptr(), per_position.data_ptr());
  }
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = reduce_class_loss(per_position, reduction, p.counted, input.dtype());
  }
  if (autograd::needs_grad(input)) {
    // The backward needs only the targets, not the scores.
    autograd::record("nll_loss", out, {&input},
                     [args = p.args, counted = p.counted, targets = autograd::SavedTensor(p.target), reduction,
                      in_shape = input.shape()](const Tensor& grad, autograd::GradMask) -> autograd::Grads {
                       const auto [scale, stride] = class_grad_scale(grad, reduction, counted, args.dtype);
                       cpu::ClassLossArgs a = args;
                       const Tensor t = targets.get();
                       a.target = t.data_ptr<int64_t>();
                       Tensor gi = detail::make_empty(in_shape, a.dtype, grad.device());
                       if (gi.numel() > 0) cpu::nll_loss_backward(a, scale.data_ptr(), stride, gi.data_ptr());
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
Tensor regression_loss(const char* op, const Tensor& input, const Tensor& target, Reduction reduction,
                       const Value& value, const Slope& slope) {
  profiler::detail::OpScope scope(op, {&input, &target});  // composite: its ops record their costs
  check_regression(op, input, target);
  Tensor diff, out;
  {
    autograd::NoGradGuard no_grad;
    diff = input - target;
    out = reduce(value(diff), reduction);
  }
  if (autograd::needs_grad(input, target)) {
    autograd::record(op, out, {&input, &target},
                     [diff, reduction, slope](const Tensor& grad, autograd::GradMask needs) -> autograd::Grads {
                       const Tensor d = slope(diff) * per_element_grad(grad, reduction, diff.numel());
                       return {needs[0] ? d : Tensor(), needs[1] ? -d : Tensor()};
                     });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return regression_loss(
      "mse_loss", input, target, reduction, [](const Tensor& d) { return d * d; },
      [](const Tensor& d) { return d * 2.0; });
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return regression_loss(
      "l1_loss", input, target, reduction, [](const Tensor& d) { return abs(d); },
      [](const Tensor& d) { return sign(d); });
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& pos_weight, Reduction reduction) {
  profiler::detail::OpScope scope("binary_cross_entropy_with_logits", {&input, &target});  // composite
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
        "binary_cross_entropy_with_logits", out, {&input, &target, &w, &pw},
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

}  // namespace ember::nn::functional

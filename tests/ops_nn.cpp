// The nn::functional ops' registry entries: convolution, pooling, interpolation, normalization, losses
// and dropout.
// Their golden cases (tests/golden/nn.json, cases_nn.py) hold PyTorch's output and the gradient of
// every input that requires grad, for float32 and float64, so they check the backward primitives
// (conv2d_input_grad, max_pool2d_grad, cross_entropy_grad, ...) against PyTorch too; the float64
// gradchecks run each op with its first input contiguous and transposed. dropout's reference is its
// statistics.
#include <optional>
#include <string>
#include <vector>

#include "ember/nn/functional.h"
#include "op_registry.h"

namespace op_registry {
namespace {

namespace F = ember::nn::functional;
using ember::Shape;
using ember::nn::Pair;
using ember::nn::Reduction;
using golden::Case;

// --- reading cases ------------------------------------------------------------------------------

Pair pair_of(const golden::json& j) { return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>()}; }

std::optional<Pair> optional_pair(const golden::json& j) {
  if (j.is_null()) return std::nullopt;
  return pair_of(j);
}

std::optional<Tensor> optional_tensor(const std::vector<Tensor>& inputs, size_t i) {
  if (!inputs[i].defined()) return std::nullopt;
  return inputs[i];
}

Reduction reduction_of(const Case& c) {
  const std::string r = c.attrs.at("reduction").get<std::string>();
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  return Reduction::kMean;
}

Shape shape_of(const golden::json& j) { return Shape(j.get<std::vector<int64_t>>()); }

// The case's inputs (undefined for null), the last one (the output gradient) left out, and the ones
// listed in attrs["grad"] made leaves that require grad, keeping their layout.
std::vector<Tensor> leaf_inputs(const Case& c) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) inputs.push_back(c.inputs[i].tensor.value_or(Tensor()));
  for (const int i : c.attrs.at("grad").get<std::vector<int>>()) {
    inputs[static_cast<size_t>(i)] = inputs[static_cast<size_t>(i)].detach().requires_grad_();
  }
  return inputs;
}

// Backpropagates the case's output gradient from `out`; returns {out, gradient of each listed input}.
std::vector<Tensor> output_and_grads(const Case& c, const std::vector<Tensor>& inputs, const Tensor& out) {
  out.backward(c.inputs.back().tensor.value());
  std::vector<Tensor> result{out.detach()};
  for (const int i : c.attrs.at("grad").get<std::vector<int>>()) {
    const Tensor& x = inputs[static_cast<size_t>(i)];
    result.push_back(x.grad().defined() ? x.grad() : ember::zeros_like(x));
  }
  return result;
}

// Gradients sum a few dozen products: a little looser than one rounding.
golden::Tolerance tolerance(const Case& /*c*/, ember::DType dtype) {
  if (dtype == ember::kFloat32) return {1e-4, 2e-5};
  if (dtype == ember::kFloat64) return {1e-9, 1e-11};
  return golden::tolerance_for(dtype);
}

// The cases of `op` in nn.json: `forward` runs on the case's leaves, the harness adds the backward.
GoldenForward nn_golden(const std::string& op, std::function<Tensor(const Case&, const std::vector<Tensor>&)> forward) {
  return {"", "nn", op,
          [forward](const Case& c) {
            const std::vector<Tensor> inputs = leaf_inputs(c);
            return output_and_grads(c, inputs, forward(c, inputs));
          },
          tolerance};
}

// batch_norm also returns the running statistics after their in-place update.
std::vector<Tensor> batch_norm_case(const Case& c) {
  std::vector<Tensor> x = leaf_inputs(c);
  const bool stats = x[1].defined();
  if (stats) {  // the case's tensors must not change
    x[1] = x[1].clone();
    x[2] = x[2].clone();
  }
  const Tensor out =
      F::batch_norm(x[0], x[1], x[2], optional_tensor(x, 3), optional_tensor(x, 4), c.attrs.at("training").get<bool>(),
                    c.attrs.at("momentum").get<double>(), c.attrs.at("eps").get<double>());
  std::vector<Tensor> result = output_and_grads(c, x, out);
  if (stats) {
    result.push_back(x[1]);
    result.push_back(x[2]);
  }
  return result;
}

// --- gradchecks ---------------------------------------------------------------------------------

Gradcheck batch_norm_gradcheck(std::string name, bool training) {
  return both_layouts_gradcheck(
      std::move(name), {2, 3, 2, 3}, {in({3}, kUnit), in({3}, kUnit)}, [training](const std::vector<Tensor>& x) {
        // Fresh running statistics: gradcheck runs the forward many times.
        const Tensor running_mean = ember::tensor<double>({0.2, 0.5, 0.9});
        const Tensor running_var = ember::tensor<double>({0.7, 1.1, 1.4});
        return F::batch_norm(x[0], running_mean, running_var, x[1], x[2], training, 0.1, 1e-5);
      });
}

// x (2, 3, 2, 6): 3 positions of 2 heads of 6 values, the first 4 rotated (two angles per position),
// the last 2 passed through.
Gradcheck rope_gradcheck(std::string name, ember::RopeStyle style) {
  return both_layouts_gradcheck(std::move(name), {2, 3, 2, 6}, {}, [style](const std::vector<Tensor>& x) {
    const Tensor angles = ember::arange(3, ember::kFloat64).unsqueeze(1) * ember::tensor<double>({1.0, 0.3});
    return ember::rope(x[0], ember::cos(angles), ember::sin(angles), style);
  });
}

const char* reduction_name(Reduction reduction) {
  if (reduction == Reduction::kNone) return "none";
  if (reduction == Reduction::kSum) return "sum";
  return "mean";
}

// Class targets with an ignored position (-100).
Tensor class_targets() { return ember::tensor<int64_t>({2, 0, -100, 1}); }

std::vector<Gradcheck> class_loss_gradchecks(const std::string& op) {
  std::vector<Gradcheck> gradchecks;
  for (const Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    gradchecks.push_back(both_layouts_gradcheck(
        op + "_" + reduction_name(reduction), {4, 3}, {}, [op, reduction](const std::vector<Tensor>& x) {
          if (op == "cross_entropy") return F::cross_entropy(x[0], class_targets(), -100, reduction, 0.15);
          return F::nll_loss(x[0], class_targets(), -100, reduction);
        }));
  }
  return gradchecks;
}

std::vector<Gradcheck> regression_loss_gradchecks(const std::string& op) {
  std::vector<Gradcheck> gradchecks;
  for (const Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    const std::string name = op + "_" + reduction_name(reduction);
    if (op == "mse_loss") {
      gradchecks.push_back(both_layouts_gradcheck(
          name, {3, 4}, {in({3, 4}, kUnit)},
          [reduction](const std::vector<Tensor>& x) { return F::mse_loss(x[0], x[1], reduction); }));
    } else if (op == "l1_loss") {
      gradchecks.push_back(both_layouts_gradcheck(
          name, {3, 4}, {in({3, 4}, kUnit)},
          [reduction](const std::vector<Tensor>& x) { return F::l1_loss(x[0], x[1], reduction); }));
    } else {
      // Logits in (-4, 4); targets in (0, 1); positive weight and pos_weight.
      gradchecks.push_back(both_layouts_gradcheck(
          name, {3, 4}, {in({3, 4}, uniform(0.0, 1.0)), in({4}, kPositive), in({4}, kPositive)},
          [reduction](const std::vector<Tensor>& x) {
            return F::binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], reduction);
          },
          uniform(-4.0, 4.0)));
    }
  }
  return gradchecks;
}

// --- dropout ------------------------------------------------------------------------------------

// Keeps each element with probability 1 - p and scales it by 1 / (1 - p); the seed decides the mask,
// and the gradient is the same scaled mask. Identity in evaluation and for p = 0; zeros for p = 1.
void dropout_keeps_the_expected_fraction_and_scales() {
  const Tensor x = ember::ones({200, 500});
  EXPECT_TRUE(F::dropout(x, 0.3, /*training=*/false).is_same(x));
  EXPECT_TRUE(F::dropout(x, 0.0, true).is_same(x));
  EXPECT_EQ(F::dropout(x, 1.0, true).sum().item<double>(), 0.0);

  ember::manual_seed(9);
  const Tensor y = F::dropout(x, 0.3, true);
  const double kept = ember::gt(y, 0.0).to(ember::kFloat64).mean().item<double>();
  EXPECT_NEAR(kept, 0.7, 0.005);  // 100000 draws: the standard deviation is 0.0015
  EXPECT_NEAR(ember::amax(y).item<double>(), 1.0 / 0.7, 1e-6);
  EXPECT_NEAR(y.mean().item<double>(), 1.0, 0.01);

  ember::manual_seed(9);
  EXPECT_TRUE(golden::all_close(F::dropout(x, 0.3, true), y, {0, 0}));

  const Tensor leaf = ember::ones({50, 40}).requires_grad_();
  ember::manual_seed(10);
  const Tensor z = F::dropout(leaf, 0.5, true);
  z.sum().backward();
  EXPECT_TRUE(golden::all_close(leaf.grad(), z.detach(), {0, 0}));
}

// --- the entries --------------------------------------------------------------------------------

std::vector<Entry> conv_and_pool_entries() {
  return {
      Entry{.name = "conv2d",
            .ops = {OpKind::kConv2d, OpKind::kConv2dInputGrad, OpKind::kConv2dWeightGrad},
            .golden = {nn_golden("conv2d",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::conv2d(x[0], x[1], optional_tensor(x, 2), pair_of(c.attrs.at("stride")),
                                                    pair_of(c.attrs.at("padding")), pair_of(c.attrs.at("dilation")),
                                                    c.attrs.at("groups").get<int64_t>());
                                 })},
            .gradchecks = {both_layouts_gradcheck("conv2d_grouped", {2, 4, 5, 6},
                                                  {in({4, 2, 3, 2}, kUnit), in({4}, kUnit)},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}, {1, 2}, 2);
                                                  }),
                           both_layouts_gradcheck("conv2d_unbatched_pointwise", {3, 4, 4}, {in({2, 3, 1, 1}, kUnit)},
                                                  [](const std::vector<Tensor>& x) { return F::conv2d(x[0], x[1]); })}},
      // A composite of exp, log1p and where; the threshold switches to x where exp would overflow.
      Entry{.name = "softplus",
            .ops = {OpKind::kSoftplus},
            .golden = {nn_golden("softplus",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::softplus(x[0], c.attrs.at("beta").get<double>(),
                                                      c.attrs.at("threshold").get<double>());
                                 })},
            .gradchecks = {both_layouts_gradcheck(
                               "softplus", {3, 4}, {}, [](const std::vector<Tensor>& x) { return F::softplus(x[0]); },
                               uniform(-4.0, 4.0)),
                           both_layouts_gradcheck(
                               "softplus_across_threshold", {3, 4}, {},
                               [](const std::vector<Tensor>& x) { return F::softplus(x[0], 2.0, 1.0); },
                               uniform(-1.2, 1.2))}},
      // A composite over conv2d's primitives (lines as images of height 1); its golden cases hold
      // PyTorch's errors too, tests/test_nn_functional.cpp checks their messages.
      Entry{.name = "conv1d",
            .ops = {OpKind::kConv1d, OpKind::kConv2d, OpKind::kConv2dInputGrad, OpKind::kConv2dWeightGrad},
            .golden = {nn_golden("conv1d",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::conv1d(
                                       x[0], x[1], optional_tensor(x, 2), c.attrs.at("stride").get<int64_t>(),
                                       c.attrs.at("padding").get<int64_t>(), c.attrs.at("dilation").get<int64_t>(),
                                       c.attrs.at("groups").get<int64_t>());
                                 })},
            .gradchecks = {both_layouts_gradcheck(
                               "conv1d_grouped_strided", {2, 4, 7}, {in({6, 2, 3}, kUnit), in({6}, kUnit)},
                               [](const std::vector<Tensor>& x) { return F::conv1d(x[0], x[1], x[2], 2, 1, 2, 2); }),
                           both_layouts_gradcheck("conv1d_causal_depthwise", {2, 3, 6},
                                                  {in({3, 1, 4}, kUnit), in({3}, kUnit)},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::conv1d(x[0], x[1], x[2], 1, 3, 1, 3).narrow(2, 0, 6);
                                                  }),
                           both_layouts_gradcheck("conv1d_unbatched_no_bias", {3, 5}, {in({2, 3, 2}, kUnit)},
                                                  [](const std::vector<Tensor>& x) { return F::conv1d(x[0], x[1]); })}},
      // A composite: conv2d_input_grad forward, conv2d and conv2d_weight_grad backward. The golden cases
      // hold PyTorch's errors too (output_padding not below stride or dilation, channels, groups, an
      // empty output, bias shape); tests/test_nn_functional.cpp checks their messages.
      Entry{.name = "conv_transpose2d",
            .ops = {OpKind::kConvTranspose2d, OpKind::kConv2dInputGrad, OpKind::kConv2d, OpKind::kConv2dWeightGrad},
            .golden = {nn_golden("conv_transpose2d",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::conv_transpose2d(
                                       x[0], x[1], optional_tensor(x, 2), pair_of(c.attrs.at("stride")),
                                       pair_of(c.attrs.at("padding")), pair_of(c.attrs.at("output_padding")),
                                       c.attrs.at("groups").get<int64_t>(), pair_of(c.attrs.at("dilation")));
                                 })},
            .gradchecks =
                {both_layouts_gradcheck(
                     "conv_transpose2d_grouped_output_padding", {2, 4, 3, 4}, {in({4, 2, 3, 2}, kUnit), in({4}, kUnit)},
                     [](const std::vector<Tensor>& x) {
                       return F::conv_transpose2d(x[0], x[1], x[2], {2, 1}, {1, 0}, {1, 0}, 2, {1, 2});
                     }),
                 both_layouts_gradcheck(
                     "conv_transpose2d_dilated_output_padding", {1, 2, 3, 4}, {in({2, 3, 2, 2}, kUnit), in({3}, kUnit)},
                     [](const std::vector<Tensor>& x) { return F::conv_transpose2d(x[0], x[1], x[2], 1, 1, 1, 1, 2); }),
                 both_layouts_gradcheck("conv_transpose2d_unbatched_no_bias", {3, 4, 3}, {in({3, 2, 3, 3}, kUnit)},
                                        [](const std::vector<Tensor>& x) {
                                          return F::conv_transpose2d(x[0], x[1], std::nullopt, 2, 1, 1);
                                        })}},
      Entry{.name = "max_pool2d",
            .ops = {OpKind::kMaxPool2d, OpKind::kMaxPool2dGrad},
            .golden = {nn_golden("max_pool2d",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::max_pool2d(x[0], pair_of(c.attrs.at("kernel")),
                                                        optional_pair(c.attrs.at("stride")),
                                                        pair_of(c.attrs.at("padding")), pair_of(c.attrs.at("dilation")),
                                                        c.attrs.at("ceil_mode").get<bool>());
                                 })},
            .gradchecks = {both_layouts_gradcheck("max_pool2d_ceil_mode", {2, 2, 5, 6}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::max_pool2d(x[0], 3, Pair(2), 1, 1, /*ceil_mode=*/true);
                                                  }),
                           both_layouts_gradcheck(
                               "max_pool2d_dilated", {1, 2, 6, 6}, {},
                               [](const std::vector<Tensor>& x) { return F::max_pool2d(x[0], 2, 1, 0, 2); })}},
      Entry{
          .name = "avg_pool2d",
          .ops = {OpKind::kAvgPool2d, OpKind::kAvgPool2dGrad},
          .golden = {nn_golden("avg_pool2d",
                               [](const Case& c, const std::vector<Tensor>& x) {
                                 return F::avg_pool2d(
                                     x[0], pair_of(c.attrs.at("kernel")), optional_pair(c.attrs.at("stride")),
                                     pair_of(c.attrs.at("padding")), c.attrs.at("ceil_mode").get<bool>(),
                                     c.attrs.at("count_include_pad").get<bool>());
                               })},
          .gradchecks = {both_layouts_gradcheck("avg_pool2d_ceil_mode_excluding_padding", {2, 2, 5, 6}, {},
                                                [](const std::vector<Tensor>& x) {
                                                  return F::avg_pool2d(x[0], 3, Pair(2), 1, /*ceil_mode=*/true,
                                                                       /*count_include_pad=*/false);
                                                }),
                         both_layouts_gradcheck("avg_pool2d_unbatched", {2, 5, 7}, {},
                                                [](const std::vector<Tensor>& x) {
                                                  return F::avg_pool2d(x[0], {2, 3}, std::nullopt, {1, 1}, false, true);
                                                })}},
      Entry{.name = "adaptive_avg_pool2d",
            .ops = {OpKind::kAdaptiveAvgPool2d, OpKind::kAdaptiveAvgPool2dGrad},
            .golden = {nn_golden("adaptive_avg_pool2d",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::adaptive_avg_pool2d(x[0], pair_of(c.attrs.at("output_size")));
                                 })},
            .gradchecks = {both_layouts_gradcheck("adaptive_avg_pool2d", {1, 2, 5, 7}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::adaptive_avg_pool2d(x[0], {3, 4});
                                                  })}},
      // A composite of index_select, and of scatter_add in its backward (Note [interpolate]).
      Entry{
          .name = "interpolate",
          .ops = {OpKind::kInterpolate, OpKind::kIndexSelect, OpKind::kScatterAdd},
          .golden =
              {nn_golden("interpolate",
                         [](const Case& c, const std::vector<Tensor>& x) {
                           const golden::json &size = c.attrs.at("size"), &scale = c.attrs.at("scale_factor"),
                                              &align = c.attrs.at("align_corners");
                           return F::interpolate(
                               x[0], size.is_null() ? std::nullopt : std::optional(size.get<std::vector<int64_t>>()),
                               scale.is_null() ? std::nullopt : std::optional(scale.get<std::vector<double>>()),
                               c.attrs.at("mode").get<std::string>(),
                               align.is_null() ? std::nullopt : std::optional(align.get<bool>()));
                         })},
          .gradchecks =
              {both_layouts_gradcheck(
                   "interpolate_bilinear",
                   {1, 2, 4, 5}, {},
                   [](const std::vector<Tensor>& x) {
                     return F::interpolate(x[0], std::vector<int64_t>{7, 3}, std::nullopt, "bilinear", false);
                   }),
               both_layouts_gradcheck("interpolate_bilinear_align_corners", {2, 1, 3, 4}, {},
                                      [](const std::vector<Tensor>& x) {
                                        return F::interpolate(x[0], std::nullopt, std::vector<double>{2.0, 1.5},
                                                              "bilinear", true);
                                      }),
               both_layouts_gradcheck("interpolate_nearest", {1, 3, 4, 3}, {},
                                      [](const std::vector<Tensor>& x) {
                                        return F::interpolate(x[0], std::vector<int64_t>{5, 7});
                                      })}},
  };
}

std::vector<Entry> norm_entries() {
  return {
      // Training normalizes with batch_norm_stats' statistics; both modes apply them with
      // batch_norm_apply; the backward is batch_norm_grad.
      Entry{.name = "batch_norm",
            .ops = {OpKind::kBatchNorm, OpKind::kBatchNormStats, OpKind::kBatchNormApply, OpKind::kBatchNormGrad},
            .golden = {{"", "nn", "batch_norm", batch_norm_case, tolerance}},
            .gradchecks = {batch_norm_gradcheck("batch_norm_training", true),
                           batch_norm_gradcheck("batch_norm_eval", false),
                           both_layouts_gradcheck("batch_norm_without_running_stats", {4, 3}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::batch_norm(x[0], Tensor(), Tensor(), std::nullopt,
                                                                         std::nullopt, true);
                                                  })}},
      Entry{
          .name = "layer_norm",
          .ops = {OpKind::kLayerNorm, OpKind::kLayerNormGrad},
          .golden = {nn_golden("layer_norm",
                               [](const Case& c, const std::vector<Tensor>& x) {
                                 return F::layer_norm(x[0], shape_of(c.attrs.at("normalized_shape")),
                                                      optional_tensor(x, 1), optional_tensor(x, 2),
                                                      c.attrs.at("eps").get<double>());
                               })},
          .gradchecks = {both_layouts_gradcheck("layer_norm_affine", {3, 2, 4}, {in({2, 4}, kUnit), in({2, 4}, kUnit)},
                                                [](const std::vector<Tensor>& x) {
                                                  return F::layer_norm(x[0], {2, 4}, x[1], x[2]);
                                                }),
                         both_layouts_gradcheck(
                             "layer_norm", {3, 5}, {},
                             [](const std::vector<Tensor>& x) { return F::layer_norm(x[0], {5}); })}},
      Entry{.name = "rms_norm",
            .ops = {OpKind::kRmsNorm, OpKind::kRmsNormGrad},
            .golden = {nn_golden("rms_norm",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   const golden::json& eps = c.attrs.at("eps");
                                   return F::rms_norm(
                                       x[0], shape_of(c.attrs.at("normalized_shape")), optional_tensor(x, 1),
                                       eps.is_null() ? std::nullopt : std::optional<double>(eps.get<double>()));
                                 })},
            .gradchecks = {both_layouts_gradcheck(
                               "rms_norm_weight", {3, 2, 4}, {in({4}, kUnit)},
                               [](const std::vector<Tensor>& x) { return F::rms_norm(x[0], {4}, x[1]); }),
                           both_layouts_gradcheck("rms_norm_eps", {4, 3}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::rms_norm(x[0], {3}, std::nullopt, 1e-3);
                                                  })}},
      Entry{.name = "rope",
            .ops = {OpKind::kRope},
            .golden = {nn_golden("rope",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return ember::rope(x[0], x[1], x[2],
                                                      c.attrs.at("style").get<std::string>() == "adjacent"
                                                          ? ember::RopeStyle::kAdjacent
                                                          : ember::RopeStyle::kHalves);
                                 })},
            .gradchecks = {rope_gradcheck("rope_adjacent", ember::RopeStyle::kAdjacent),
                           rope_gradcheck("rope_halves", ember::RopeStyle::kHalves)}},
      // A composite over layer_norm's kernel, with its own backward made of ops (Note [group_norm]).
      Entry{.name = "group_norm",
            .ops = {OpKind::kGroupNorm, OpKind::kLayerNorm},
            .golden = {nn_golden("group_norm",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::group_norm(x[0], c.attrs.at("num_groups").get<int64_t>(),
                                                        optional_tensor(x, 1), optional_tensor(x, 2),
                                                        c.attrs.at("eps").get<double>());
                                 })},
            .gradchecks = {both_layouts_gradcheck(
                               "group_norm_affine", {2, 4, 3, 2}, {in({4}, kUnit), in({4}, kUnit)},
                               [](const std::vector<Tensor>& x) { return F::group_norm(x[0], 2, x[1], x[2]); }),
                           both_layouts_gradcheck("group_norm_one_group", {3, 4}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    return F::group_norm(x[0], 1, std::nullopt, std::nullopt, 1e-3);
                                                  })}},
  };
}

std::vector<Entry> loss_and_dropout_entries() {
  std::vector<Gradcheck> cross_entropy_gradchecks = class_loss_gradchecks("cross_entropy");
  cross_entropy_gradchecks.push_back(
      both_layouts_gradcheck("cross_entropy_spatial", {2, 3, 3}, {}, [](const std::vector<Tensor>& x) {
        const Tensor target = ember::tensor<int64_t>({0, 2, 1, 1, 0, 2}, Shape{2, 3});
        return F::cross_entropy(x[0], target, -100, Reduction::kMean, 0.0);
      }));
  return {
      // One fused pass forward (cross_entropy_forward) and softmax minus one-hot backward
      // (cross_entropy_grad).
      Entry{.name = "cross_entropy",
            .ops = {OpKind::kCrossEntropy, OpKind::kCrossEntropyForward, OpKind::kCrossEntropyGrad},
            .golden = {nn_golden("cross_entropy",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::cross_entropy(x[0], x[1], c.attrs.at("ignore_index").get<int64_t>(),
                                                           reduction_of(c),
                                                           c.attrs.at("label_smoothing").get<double>());
                                 })},
            .gradchecks = cross_entropy_gradchecks},
      Entry{.name = "nll_loss",
            .ops = {OpKind::kNllLoss, OpKind::kNllLossForward, OpKind::kNllLossGrad},
            .golden = {nn_golden("nll_loss",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::nll_loss(x[0], x[1], c.attrs.at("ignore_index").get<int64_t>(),
                                                      reduction_of(c));
                                 })},
            .gradchecks = class_loss_gradchecks("nll_loss")},
      Entry{.name = "mse_loss",
            .ops = {OpKind::kMseLoss},
            .golden = {nn_golden(
                "mse_loss",
                [](const Case& c, const std::vector<Tensor>& x) { return F::mse_loss(x[0], x[1], reduction_of(c)); })},
            .gradchecks = regression_loss_gradchecks("mse_loss")},
      Entry{.name = "l1_loss",
            .ops = {OpKind::kL1Loss},
            .golden = {nn_golden(
                "l1_loss",
                [](const Case& c, const std::vector<Tensor>& x) { return F::l1_loss(x[0], x[1], reduction_of(c)); })},
            .gradchecks = regression_loss_gradchecks("l1_loss")},
      Entry{.name = "binary_cross_entropy_with_logits",
            .ops = {OpKind::kBceWithLogits},
            .golden = {nn_golden("binary_cross_entropy_with_logits",
                                 [](const Case& c, const std::vector<Tensor>& x) {
                                   return F::binary_cross_entropy_with_logits(x[0], x[1], optional_tensor(x, 2),
                                                                              optional_tensor(x, 3), reduction_of(c));
                                 })},
            .gradchecks = regression_loss_gradchecks("binary_cross_entropy_with_logits")},
      Entry{.name = "dropout",
            .ops = {OpKind::kDropout},
            .checks = {{"dropout", dropout_keeps_the_expected_fraction_and_scales}},
            .gradchecks = {both_layouts_gradcheck("dropout", {4, 5}, {},
                                                  [](const std::vector<Tensor>& x) {
                                                    ember::manual_seed(42);  // the same mask on every call
                                                    return F::dropout(x[0], 0.4, true);
                                                  })}},
  };
}

// scaled_dot_product_attention: the flash kernel forward and backward against PyTorch (masks,
// causal, grouped-query, odd lengths across tiles, one query, a row with no key, 3-D and 5-D
// inputs) and float64 gradchecks; tests/test_attention.cpp compares it with the composite.
std::vector<Entry> attention_entries() {
  auto sdpa = [](const Case& c, const std::vector<Tensor>& x) {
    const golden::json& scale = c.attrs.at("scale");
    return F::scaled_dot_product_attention(x[0], x[1], x[2], optional_tensor(x, 3), 0.0,
                                           c.attrs.at("is_causal").get<bool>(),
                                           scale.is_null() ? std::nullopt : std::optional<double>(scale.get<double>()),
                                           c.attrs.at("enable_gqa").get<bool>());
  };
  // (q, k, v) -> attention, with the options of each gradcheck. The masks are made when the check
  // runs: a float one (2, 1, 5, 6) of values in [-1, 1], a bool one over the 6 keys.
  enum MaskKind { kNoMask, kFloatMask, kBoolMask };
  auto attention = [](bool causal, bool gqa, MaskKind mask_kind = kNoMask, double dropout = 0.0) {
    return [=](const std::vector<Tensor>& x) {
      std::optional<Tensor> mask;
      if (mask_kind == kFloatMask) mask = ember::sin(ember::arange(60, ember::kFloat64)).reshape({2, 1, 5, 6});
      if (mask_kind == kBoolMask) mask = ember::tensor<bool>({true, false, true, true, false, true}, Shape{6});
      if (dropout > 0) ember::manual_seed(7);  // every evaluation draws the same keep mask
      return F::scaled_dot_product_attention(x[0], x[1], x[2], mask, dropout, causal, std::nullopt, gqa);
    };
  };
  return {Entry{
      .name = "scaled_dot_product_attention",
      .ops = {OpKind::kScaledDotProductAttention, OpKind::kAttentionGrad},
      .golden = {nn_golden("scaled_dot_product_attention", sdpa)},
      .gradchecks = {
          both_layouts_gradcheck("sdpa", {2, 2, 5, 3}, {in({2, 2, 6, 3}, kUnit), in({2, 2, 6, 4}, kUnit)},
                                 attention(false, false)),
          both_layouts_gradcheck("sdpa_causal", {1, 2, 6, 3}, {in({1, 2, 6, 3}, kUnit), in({1, 2, 6, 2}, kUnit)},
                                 attention(true, false)),
          both_layouts_gradcheck("sdpa_gqa", {1, 4, 3, 3}, {in({1, 2, 5, 3}, kUnit), in({1, 2, 5, 3}, kUnit)},
                                 attention(false, true)),
          both_layouts_gradcheck("sdpa_float_mask", {2, 2, 5, 3}, {in({2, 2, 6, 3}, kUnit), in({2, 2, 6, 3}, kUnit)},
                                 attention(false, false, kFloatMask)),
          both_layouts_gradcheck("sdpa_bool_mask", {1, 2, 5, 3}, {in({1, 2, 6, 3}, kUnit), in({1, 2, 6, 3}, kUnit)},
                                 attention(false, false, kBoolMask)),
          both_layouts_gradcheck("sdpa_dropout", {1, 2, 5, 3}, {in({1, 2, 6, 3}, kUnit), in({1, 2, 6, 3}, kUnit)},
                                 attention(false, false, kNoMask, 0.3))}}};
}

// selective_scan against PyTorch's sequential loop (tests/golden/cases_scan.py: states that are one
// vector, two, or part of one; more channels than the backward's block; chunks of 1 to 64 steps),
// the forward and all five gradients; float64 gradchecks with delta positive and A negative, as
// Mamba feeds it; and the gradients do not depend on the chunk the forward saves states at.
std::vector<Entry> scan_entries() {
  const auto scan_case = [](const Case& c) {
    std::vector<Tensor> x;
    for (size_t i = 0; i < 5; ++i) x.push_back(c.inputs[i].tensor.value().detach().requires_grad_());
    const Tensor y = ember::selective_scan(x[0], x[1], x[2], x[3], x[4], c.attrs.at("chunk").get<int64_t>());
    y.backward(c.inputs[5].tensor.value());
    std::vector<Tensor> out{y.detach()};
    for (const Tensor& t : x) out.push_back(t.grad());
    return out;
  };
  const auto scan = [](int64_t chunk) {
    return [chunk](const std::vector<Tensor>& x) {
      return ember::selective_scan(x[0], x[1] * 0.2 + 0.3, -x[2] - 0.2, x[3], x[4], chunk);
    };
  };
  const auto chunks_agree = [] {
    ember::manual_seed(3);
    const Tensor u = ember::randn({2, 18, 37}), delta = ember::rand({2, 18, 37}) * 0.3;
    const Tensor a = -ember::rand({18, 5}) - 0.1, b = ember::randn({2, 5, 37}), c = ember::randn({2, 5, 37});
    const Tensor g = ember::randn({2, 18, 37});
    std::vector<Tensor> first;
    for (const int64_t chunk : {1, 7, 64}) {
      std::vector<Tensor> x{u.clone().requires_grad_(), delta.clone().requires_grad_(), a.clone().requires_grad_(),
                            b.clone().requires_grad_(), c.clone().requires_grad_()};
      const Tensor y = ember::selective_scan(x[0], x[1], x[2], x[3], x[4], chunk);
      y.backward(g);
      std::vector<Tensor> values{y};
      for (const Tensor& t : x) values.push_back(t.grad());
      if (first.empty()) first = values;
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_TRUE(golden::all_close(values[i], first[i], {0, 0})) << "chunk " << chunk << ", value " << i;
      }
    }
  };
  // Generation's recurrent step, token by token, gives the scan's outputs.
  const auto steps_agree = [] {
    ember::manual_seed(4);
    const Tensor u = ember::randn({2, 3, 9}), delta = ember::rand({2, 3, 9}) * 0.3;
    const Tensor a = -ember::rand({3, 20}) - 0.1, b = ember::randn({2, 20, 9}), c = ember::randn({2, 20, 9});
    const Tensor scanned = ember::selective_scan(u, delta, a, b, c);
    Tensor state = ember::zeros({2, 3, 20});
    for (int64_t t = 0; t < 9; ++t) {
      const Tensor y =
          ember::selective_scan_step(state, u.select(2, t), delta.select(2, t), a, b.select(2, t), c.select(2, t));
      EXPECT_TRUE(golden::all_close(y, scanned.select(2, t), {1e-5, 1e-6})) << "step " << t;
    }
  };
  // Growing states (delta A > 0, which Mamba never feeds) take e^x for x > 0 lane by lane: float32
  // gives float64's values, lanes of e^30 and e^50 included, and the infinities of a lane of e^100,
  // beside lanes of decay in the same vectors.
  const auto growing_states = [] {
    ember::manual_seed(5);
    const Tensor u = ember::randn({1, 2, 3}), delta = ember::ones({1, 2, 3});
    delta.select(2, 0).fill_(0.5);  // e^50 at the first step, whose state before is 0 (e^100 * 0 is NaN)
    Tensor a = -ember::rand({2, 20}) - 0.1;
    a.select(0, 0).select(0, 5).fill_(100.0);
    a.select(0, 1).select(0, 9).fill_(30.0);
    const Tensor b = ember::randn({1, 20, 3}), c = ember::randn({1, 20, 3});
    const Tensor y = ember::selective_scan(u, delta, a, b, c);
    const auto f64 = [](const Tensor& x) { return x.to(ember::kFloat64); };
    const Tensor expected = ember::selective_scan(f64(u), f64(delta), f64(a), f64(b), f64(c)).to(ember::kFloat32);
    EXPECT_TRUE(std::isinf(expected.select(1, 0).select(1, 2).item<float>()));  // e^100 times a state overflows
    EXPECT_TRUE(golden::all_close(y, expected, {1e-5, 1e-6}));
  };
  return {Entry{
      .name = "selective_scan",
      .ops = {OpKind::kSelectiveScan, OpKind::kSelectiveScanGrad},
      .golden = {{"", "scan", "selective_scan", scan_case, tolerance}},
      .checks = {{"selective_scan_chunks_agree", chunks_agree},
                 {"selective_scan_step_by_step", steps_agree},
                 {"selective_scan_growing_states", growing_states}},
      .gradchecks = {
          both_layouts_gradcheck("selective_scan", {2, 3, 5},
                                 {in({2, 3, 5}, kUnit), in({3, 4}, kUnit), in({2, 4, 5}, kUnit), in({2, 4, 5}, kUnit)},
                                 scan(2)),
          both_layouts_gradcheck(
              "selective_scan_one_chunk", {1, 2, 4},
              {in({1, 2, 4}, kUnit), in({2, 17}, kUnit), in({1, 17, 4}, kUnit), in({1, 17, 4}, kUnit)}, scan(64))}}};
}

[[maybe_unused]] const bool kNnRegistered = add(conv_and_pool_entries()) && add(norm_entries()) &&
                                            add(loss_and_dropout_entries()) && add(attention_entries()) &&
                                            add(scan_entries());

}  // namespace
}  // namespace op_registry

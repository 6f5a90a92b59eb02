// The view ops' registry entries: view, permute, slice, select, expand, as_strided and
// backward_hook. A view runs no kernel; its forward check compares the elements it reaches with index
// arithmetic over the base (and, for slice and as_strided, with PyTorch through split, chunk and
// eye), and its gradchecks run on contiguous and transposed bases. Storage sharing and the errors
// of views are behaviour tests in test_core.cpp.
#include <cmath>
#include <memory>
#include <vector>

#include "ember/nn.h"
#include "op_registry.h"

namespace op_registry {
namespace {

using ember::Shape;
using golden::Case;

// (2, 3, 4) holding 0 .. 23: element (i, j, k) is 12 i + 4 j + k.
Tensor ramp() { return ember::arange(24).reshape({2, 3, 4}); }

// --- forward checks -----------------------------------------------------------------------------

void view_reshapes_in_place() {
  const Tensor x = ramp();
  const Tensor v = x.view({6, 4});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage(x));
  EXPECT_EQ(v.at<int64_t>({5, 3}), 23);
  EXPECT_EQ(v.at<int64_t>({4, 1}), 17);
  EXPECT_EQ(x.view({-1, 8}).shape(), (Shape{3, 8}));
  EXPECT_EQ(x.view({-1, 8}).at<int64_t>({2, 5}), 21);
  EXPECT_EQ(x.flatten().shape(), (Shape{24}));
  EXPECT_EQ(x.flatten().at<int64_t>({13}), 13);
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(-1).at<int64_t>({1, 2, 3, 0}), 23);
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), x.shape());
  EXPECT_EQ(ember::zeros({1, 3, 1}).squeeze().shape(), (Shape{3}));
  // reshape of a non-viewable tensor copies; view throws.
  const Tensor tx = x.transpose(1, 2);
  EXPECT_THROW(tx.view({24}), ember::Error);
  const Tensor r = tx.reshape({24});
  EXPECT_FALSE(r.shares_storage(x));
  EXPECT_EQ(r.at<int64_t>({1}), 4);
  // reshape of a viewable tensor does not copy.
  EXPECT_TRUE(x.reshape({4, 6}).shares_storage(x));
}

void permute_reorders_dims() {
  const Tensor x = ramp();
  const Tensor p = x.permute({2, 0, 1});
  ASSERT_EQ(p.shape(), (Shape{4, 2, 3}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(p.at<int64_t>({k, i, j}), 12 * i + 4 * j + k);
    }
  }
  const Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.at<int64_t>({3, 1, 0}), 7);
  const Tensor m = ember::arange(6).reshape({2, 3}).t();
  EXPECT_EQ(m.shape(), (Shape{3, 2}));
  EXPECT_EQ(m.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ember::ones({2, 3}).t().shape(), (Shape{3, 2}));
}

void slice_takes_every_step_th_element() {
  const Tensor x = ramp();
  EXPECT_EQ(x.narrow(2, 1, 2).at<int64_t>({1, 2, 1}), 22);
  const Tensor s = x.slice(2, 0, std::nullopt, 3);  // columns 0 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.at<int64_t>({1, 1, 1}), 19);
  EXPECT_EQ(s.contiguous().select(0, 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 4, 7, 8, 11}));
  EXPECT_EQ(x.slice(0, -1, std::nullopt).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.slice(0, -1, std::nullopt).at<int64_t>({0, 0, 0}), 12);
  EXPECT_EQ(x.slice(1, 1, 3).at<int64_t>({0, 0, 2}), 6);
}

void select_drops_a_dim() {
  const Tensor x = ramp();
  const Tensor s = x.select(1, 0);
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(x.select(-1, 3).at<int64_t>({1, 2}), 23);
  EXPECT_EQ(x.select(0, 1).select(0, 2).select(0, 1).item<int64_t>(), 21);
}

void expand_repeats_with_stride_zero() {
  const Tensor e = ember::tensor<float>({1, 2, 3}).unsqueeze(0).expand({4, 3});
  EXPECT_EQ(e.strides(), (ember::Strides{0, 1}));
  EXPECT_EQ(e.at<float>({3, 2}), 3.0f);
  EXPECT_EQ(e.contiguous().to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  const Tensor column = ember::tensor<float>({5, 6}).reshape({2, 1}).expand({2, 3});
  EXPECT_EQ(column.contiguous().to_vector<float>(), (std::vector<float>{5, 5, 5, 6, 6, 6}));
}

void as_strided_reaches_what_its_strides_say() {
  const Tensor x = ramp();
  const Tensor w = x.as_strided({3, 3}, {1, 1}, 2);  // sliding windows over the flat storage
  EXPECT_EQ(w.at<int64_t>({2, 2}), 6);
  EXPECT_EQ(w.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 3, 4, 5, 4, 5, 6}));
  const Tensor diagonal = ember::arange(16).reshape({4, 4}).as_strided({4}, {5});
  EXPECT_EQ(diagonal.to_vector<int64_t>(), (std::vector<int64_t>{0, 5, 10, 15}));
}

// A Tanh module with a full backward hook: the identity node (kBackwardHook) on its input views the
// input; the hook sees the gradients with respect to the module's input and output.
void backward_hook_sees_the_modules_gradients() {
  auto tanh = std::make_shared<ember::nn::Tanh>();
  std::vector<double> grad_input, grad_output;
  int calls = 0;
  tanh->register_full_backward_hook([&](ember::nn::Module&, const Tensor& gin, const Tensor& gout) {
    ++calls;
    grad_input = gin.to_vector<double>();
    grad_output = gout.to_vector<double>();
  });
  const Tensor x = ember::tensor<double>({-1.0, 0.0, 0.5}).requires_grad_();
  const Tensor y = (*tanh)(x);
  const std::vector<double> values = y.to_vector<double>();
  ASSERT_EQ(values.size(), 3u);
  EXPECT_DOUBLE_EQ(values[0], std::tanh(-1.0));
  EXPECT_DOUBLE_EQ(values[1], 0.0);
  EXPECT_DOUBLE_EQ(values[2], std::tanh(0.5));
  const Tensor c = ember::tensor<double>({1.0, 10.0, 100.0});
  (y * c).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(grad_output, (std::vector<double>{1.0, 10.0, 100.0}));
  ASSERT_EQ(grad_input.size(), 3u);
  const double inputs[] = {-1.0, 0.0, 0.5};
  for (size_t i = 0; i < 3; ++i) {
    const double t = std::tanh(inputs[i]);
    EXPECT_NEAR(grad_input[i], grad_output[i] * (1 - t * t), 1e-12) << i;
  }
  EXPECT_EQ(x.grad().to_vector<double>(), grad_input);
}

// tanh through a module with a backward hook that passes the gradient on (void), or returns it.
Tensor hooked_tanh(const Tensor& x, bool hook_returns_the_gradient) {
  auto tanh = std::make_shared<ember::nn::Tanh>();
  if (hook_returns_the_gradient) {
    tanh->register_full_backward_hook([](ember::nn::Module&, const Tensor& gin, const Tensor&) { return gin * 1.0; });
  } else {
    tanh->register_full_backward_hook([](ember::nn::Module&, const Tensor&, const Tensor&) {});
  }
  return (*tanh)(x);
}

// --- the entries --------------------------------------------------------------------------------

std::vector<Entry> view_entries() {
  return {
      Entry{.name = "view",
            .ops = {OpKind::kView},
            .checks = {{"view", view_reshapes_in_place}},
            .gradchecks = {reduction_gradcheck("view", [](const Tensor& x) { return x.contiguous().view({-1}) * 1.0; }),
                           // a copy when transposed
                           reduction_gradcheck("reshape",
                                               [](const Tensor& x) {
                                                 return x.reshape({x.size(-1), -1});
                                               }),
                           // A reshape that copies is no view: in-place ops on it differentiate.
                           {"reshape_copy_then_inplace",
                            [](const std::vector<Tensor>& x) {
                              Tensor y = x[0].reshape({-1});
                              EXPECT_FALSE(y.impl().is_view);
                              y.mul_(x[1]);
                              return y;
                            },
                            {{"transposed", {in_t({3, 4}), in({12})}}}},
                           reduction_gradcheck("flatten", [](const Tensor& x) { return x.flatten(); }),
                           {"squeeze",
                            [](const std::vector<Tensor>& x) { return x[0].squeeze() + x[0].squeeze(0).sum(); },
                            {{"contiguous", {in({1, 3, 1})}}}},
                           reduction_gradcheck("unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); })}},
      Entry{.name = "permute",
            .ops = {OpKind::kPermute},
            .checks = {{"permute", permute_reorders_dims}},
            .gradchecks = {{"permute",
                            [](const std::vector<Tensor>& x) {
                              return x[0].permute({2, 0, 1});
                            },
                            {{"contiguous", {in({2, 3, 4})}}, {"transposed", {in_t({2, 3, 4})}}}},
                           reduction_gradcheck("transpose", [](const Tensor& x) { return x.transpose(0, -1); }),
                           {"t",
                            [](const std::vector<Tensor>& x) { return x[0].t(); },
                            {{"contiguous", {in({3, 4})}}, {"transposed", {in_t({3, 4})}}, {"1d", {in({4})}}}}}},
      Entry{
          .name = "slice",
          .ops = {OpKind::kSlice},
          .golden = {{"split", "shape", "split",
                      [](const Case& c) -> std::vector<Tensor> {
                        if (c.attrs.at("split").is_array()) {
                          return ember::split(c.tensor(0), c.attrs.at("split").get<std::vector<int64_t>>(),
                                              attr_int(c, "dim"));
                        }
                        return ember::split(c.tensor(0), attr_int(c, "split"), attr_int(c, "dim"));
                      }},
                     {"chunk", "shape", "chunk",
                      [](const Case& c) -> std::vector<Tensor> {
                        return ember::chunk(c.tensor(0), attr_int(c, "chunks"), attr_int(c, "dim"));
                      }}},
          .checks = {{"slice", slice_takes_every_step_th_element}},
          .gradchecks = {reduction_gradcheck("slice", [](const Tensor& x) { return x.slice(-1, 1, std::nullopt, 2); }),
                         reduction_gradcheck("narrow", [](const Tensor& x) { return x.narrow(-1, 1, 2); }),
                         reduction_gradcheck("split",
                                             [](const Tensor& x) {
                                               const std::vector<Tensor> parts = ember::split(x, 1, -1);
                                               return parts[0] * 2.0 + parts[3] * parts[1];
                                             }),
                         reduction_gradcheck("chunk",
                                             [](const Tensor& x) {
                                               const std::vector<Tensor> parts = ember::chunk(x, 2, -1);
                                               return parts[0] - parts[1] * 3.0;
                                             })}},
      Entry{.name = "select",
            .ops = {OpKind::kSelect},
            .checks = {{"select", select_drops_a_dim}},
            .gradchecks = {reduction_gradcheck("select", [](const Tensor& x) { return x.select(-1, 2); })}},
      Entry{.name = "expand",
            .ops = {OpKind::kExpand},
            .checks = {{"expand", expand_repeats_with_stride_zero}},
            .gradchecks = {{"expand",
                            [](const std::vector<Tensor>& x) {
                              return x[0].expand({2, 3, 4});
                            },
                            {{"row", {in({4})}}, {"column", {in({3, 1})}}, {"transposed", {in_t({1, 3, 4})}}}}}},
      // eye writes its diagonal through an as_strided view.
      Entry{.name = "as_strided",
            .ops = {OpKind::kAsStrided},
            .golden = {{"eye", "core", "eye",
                        [](const Case& c) -> std::vector<Tensor> {
                          return {ember::eye(c.scalar(0).to_int(), c.scalar(1).to_int())};
                        }}},
            .checks = {{"as_strided", as_strided_reaches_what_its_strides_say}},
            .gradchecks = {{"as_strided",
                            [](const std::vector<Tensor>& x) {
                              return x[0].as_strided({2, 3}, {4, 1}, 1);
                            },
                            {{"contiguous", {in({3, 4})}}}},
                           {"as_strided_overlapping",
                            [](const std::vector<Tensor>& x) {
                              return x[0].as_strided({3, 3}, {1, 1});
                            },
                            {{"contiguous", {in({6})}}}}}},
      Entry{.name = "backward_hook",
            .ops = {OpKind::kBackwardHook},
            .checks = {{"backward_hook", backward_hook_sees_the_modules_gradients}},
            .gradchecks = {unary_gradcheck("backward_hook", [](const Tensor& x) { return hooked_tanh(x, false); }),
                           unary_gradcheck("backward_hook_returning_the_gradient",
                                           [](const Tensor& x) { return hooked_tanh(x, true); })}},
  };
}

[[maybe_unused]] const bool kViewsRegistered = add(view_entries());

}  // namespace
}  // namespace op_registry

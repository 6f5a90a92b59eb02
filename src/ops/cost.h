// Cost rules: FLOPs and bytes moved for one call of an op, for the profiler and the roofline.
//
// Conventions (what the numbers mean, so they can be checked by hand):
// - FLOPs count arithmetic on the op's elements: an add, a multiply, a compare each count one; a
//   fused multiply-add counts two; transcendental functions count the primitive table's
//   flops_per_element (src/ops/primitives.h), e.g. 8 for exp.
// - Bytes are the minimum traffic of the algorithm the kernel runs: every operand read once and
//   every result written once, plus intermediate buffers the kernel materializes (conv2d's column
//   buffer), at the operands' element sizes. Caches may make the real traffic lower.
// - A rule describes the whole call, nested ops included (Note [profiler cost counting] in
//   src/profiler/op_scope.h says how totals avoid counting nested ops twice).
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ember/tensor.h"
#include "ops/primitives.h"

namespace ember {

namespace autograd {
class Node;
}

// Elementwise: the table's FLOPs per output element; bytes = every input read + output written.
OpCost elementwise_cost(OpKind op, const Tensor& out, std::initializer_list<const Tensor*> inputs);
// Reduction: one FLOP per input element; bytes = input + output.
OpCost reduction_cost(const Tensor& in, const Tensor& out);
// (batch x m x k) @ (batch x k x n): 2 m n k FLOPs per batch; bytes = A + B + C once each.
OpCost matmul_cost(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype);
// The same for the operands of a call: bytes = a + b as given (a broadcast operand is read once) +
// the (batch, m, n) result.
OpCost matmul_cost(const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t n, int64_t k);
// linear: x (rows, in) @ weight^T (in, out) [+ bias (out)]: the matmul plus rows x out bias adds;
// bytes = x + weight + output (+ bias).
OpCost linear_cost(int64_t rows, int64_t in_features, int64_t out_features, bool has_bias, DType dtype);

// threshold_backward (relu's fused backward): one compare-select per element; bytes = the gradient
// and the output read, the input gradient written.
OpCost threshold_backward_cost(const Tensor& out);

// softmax / log_softmax over `in`: the table's FLOPs per element (max, subtract, exp, sum,
// normalize); bytes = input + output.
OpCost softmax_cost(OpKind op, const Tensor& in);

// 2-D convolution, N images (C_in, H, W) -> (C_out, OH, OW) with groups; K = C_in / groups x kH x kW.
struct ConvShape {
  int64_t batch = 1, in_channels = 0, out_channels = 0, groups = 1;
  int64_t in_height = 0, in_width = 0, kernel_h = 0, kernel_w = 0, out_height = 0, out_width = 0;
};
// Forward: 2 N C_out OH OW K FLOPs (+ N C_out OH OW bias adds); bytes = input + weight + output
// (+ bias) + the column buffer (N groups K OH OW elements) written and read once.
OpCost conv2d_cost(const ConvShape& s, bool has_bias, DType dtype);
// Backward: each of grad_input and grad_weight is one GEMM of 2 N C_out OH OW K FLOPs through a
// column buffer written and read once; grad_bias sums N C_out OH OW values.
OpCost conv2d_backward_cost(const ConvShape& s, bool grad_input, bool grad_weight, bool grad_bias, DType dtype);

// Pooling over (planes, H, W) -> (planes, OH, OW) with a kH x kW window.
enum class PoolKind { kMax, kAvg, kAdaptiveAvg };
// max: one compare per window element, bytes = input + output + int64 argmax; avg: one add per
// window element and one divide per output; adaptive avg: windows cover the input (about one add
// per input element) and one divide per output.
OpCost pool2d_cost(PoolKind kind, int64_t in_numel, int64_t out_numel, int64_t window, DType dtype);
// backward: max scatters each gradient to its argmax (one add per output, plus zeroing the input
// gradient); avg spreads each gradient over its window (one add per input element).
OpCost pool2d_backward_cost(PoolKind kind, int64_t in_numel, int64_t out_numel, DType dtype);

// layer_norm (center) / rms_norm over rows x cols: mean (1), variance (3), normalize (2) and the
// optional affine (2) per element for layer_norm; sum of squares (2), scale (1), weight (1) for
// rms_norm; bytes = input + output + parameters + the saved mean and rstd per row.
OpCost row_norm_cost(bool center, int64_t rows, int64_t cols, bool has_weight, bool has_bias, DType dtype);
// backward: 9 FLOPs per element for grad_input (x_hat, two row sums, the combination), 2 for
// grad_weight, 1 for grad_bias; bytes = grad_out + input + the gradients written.
OpCost row_norm_backward_cost(bool center, int64_t rows, int64_t cols, bool grad_input, bool grad_weight,
                              bool grad_bias, DType dtype);
// batch_norm over (N, C, ...): statistics in training (4 per element), normalize and affine (4).
OpCost batch_norm_cost(int64_t numel, int64_t channels, bool training, DType dtype);

// cross_entropy over (N, C) scores with int64 targets, fused: log_softmax's FLOPs per score plus one
// per row; bytes = scores + targets + per-row losses. Backward: softmax minus one-hot, scaled: the
// log_softmax FLOPs plus 2 per score; bytes = scores + targets + grad_input.
OpCost cross_entropy_cost(int64_t rows, int64_t classes, DType dtype);
OpCost cross_entropy_backward_cost(int64_t rows, int64_t classes, DType dtype);
// nll_loss: picks one score per row (one FLOP each); bytes = the picked scores + targets + output.
OpCost nll_loss_cost(int64_t rows, DType dtype);

// index_select / embedding / gather: no arithmetic; bytes = the selected elements read and written +
// the indices. scatter_add: one add per source element; bytes = the input copied to the output,
// the source and the indices read, the touched output elements updated.
OpCost gather_cost(const Tensor& out, const Tensor& index);
OpCost scatter_add_cost(const Tensor& x, const Tensor& index, const Tensor& src);

// Optimizer updates of one parameter of `numel` elements, as the fused kernels in
// kernels/cpu/optim.cpp compute them (per element):
//   SGD: 2 (p - lr g), +2 weight decay, +3 momentum buffer, +2 nesterov
//   Adam/AdamW: 13 (m lerp 3, v 4, denominator 3, update 3), +2 L2 weight decay (+1 decoupled),
//               +1 amsgrad
//   Adagrad: 7 (sum 2, denominator 2, update 3), +2 weight decay
//   RMSprop: 9 (square average 4, denominator 2, update 3), +5 centered, +2 momentum, +2 weight decay
// Bytes: parameter read and written, gradient read, each state buffer read and written.
// `options` are the param group's (missing ones count as 0); `state_buffers` the parameter's state
// tensors after the update.
OpCost optimizer_cost(std::string_view optimizer, const std::map<std::string, double>& options, int64_t numel,
                      int state_buffers, DType dtype);

// What a backward node's own kernels cost, for nodes whose vjp calls kernels directly: conv2d,
// max/avg/adaptive_avg_pool2d, layer_norm, rms_norm, batch_norm, cross_entropy, nll_loss. Other nodes' vjps
// are made of ops, which record their own costs: nullopt. `inputs` are the node's inputs as
// recorded (shape, dtype, and whether a gradient flows to it).
struct NodeOperand {
  const Shape* shape = nullptr;
  DType dtype = kFloat32;
  bool needs_grad = false;
};
std::optional<OpCost> backward_cost(std::string_view node, const Tensor& grad_output,
                                    std::span<const NodeOperand> inputs);
// The same for a node of the graph, as the autograd engine runs it.
std::optional<OpCost> backward_cost(const autograd::Node& node, const Tensor& grad_output);

}  // namespace ember

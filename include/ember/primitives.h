// The closed set of ops, listed once with their traits and attribute types: the op's identity.
// OpKind, the name table, the trait table and the attribute type of each op all come from the
// lists below, so adding an op is one line here (plus its front-end, kernel and test entry).
//
// Note [ops and primitives]: three sorts of entries:
//   primitives  do work through a kernel registered per device (at the bottom of each kernel
//               family's file, collected by kernels/cpu/registry.cpp); every
//               kernel runs through the dispatch seam (src/ops/dispatch.h), which hands it
//               raw operands and the typed attributes;
//   views       (kView) give a new geometry over the input's storage: no kernel, but they pass the
//               seam so observers (a tracer) see them;
//   composites  (kComposite) run as a decomposition into primitives and record one autograd node
//               of their own (mean, linear, cross_entropy, ...): their identity in the tape and in
//               the profiler, never a kernel.
#pragma once

#include <cstdint>
#include <string_view>

#include "ember/attrs.h"

namespace ember {

// What an op is, as data for whoever reads the table: the front-ends' dtype checks, the coverage
// tests, `ember info --ops`, and the passes to come (fusion, CSE, autocast) read the rest.
enum OpTrait : uint32_t {
  kElementwise = 1u << 0,
  kReduction = 1u << 1,
  kCommutative = 1u << 2,
  kInPlace = 1u << 3,          // may write its output over its first input
  kFloatResult = 1u << 4,      // integer/bool inputs give float32 (exp, div, ...)
  kBoolResult = 1u << 5,       // comparisons and logical ops
  kNoBool = 1u << 6,           // rejects bool inputs, as PyTorch does
  kFloatOnly = 1u << 7,        // rejects integer and bool inputs, as PyTorch does
  kView = 1u << 8,             // the output aliases the input's storage; no kernel
  kComposite = 1u << 9,        // made of other ops; no kernel of its own
  kDifferentiable = 1u << 10,  // its front-end records a backward (gradchecked in the tests)
  kRandom = 1u << 11,          // draws from the Philox generator; the key is an attribute
  kCreation = 1u << 12,        // no tensor inputs: fills its output
  kUpdate = 1u << 13,          // reads and writes its outputs (optimizer updates, scatter_add)
};

inline constexpr uint32_t kUnaryMath = kElementwise | kInPlace | kDifferentiable;
inline constexpr uint32_t kBinaryMath = kElementwise | kInPlace | kDifferentiable;
inline constexpr uint32_t kComparison = kElementwise | kBoolResult;

// X(Kind, "name", traits, attribute type, FLOPs per output element). The FLOPs column is the cost
// model's per-element count for elementwise ops (transcendental functions count several); the
// other ops' cost rules live with the op (src/ops/<family>.cpp).
#define EMBER_UNARY_PRIMITIVES(X)                                               \
  X(Neg, "neg", kUnaryMath | kNoBool, NoAttrs, 1)                               \
  X(Abs, "abs", kUnaryMath | kNoBool, NoAttrs, 1)                               \
  X(Sign, "sign", kUnaryMath, NoAttrs, 1)                                       \
  X(Exp, "exp", kUnaryMath | kFloatResult, NoAttrs, 8)                          \
  X(Log, "log", kUnaryMath | kFloatResult, NoAttrs, 8)                          \
  X(Log1p, "log1p", kUnaryMath | kFloatResult, NoAttrs, 8)                      \
  X(Expm1, "expm1", kUnaryMath | kFloatResult, NoAttrs, 8)                      \
  X(Erf, "erf", kUnaryMath | kFloatResult, NoAttrs, 16)                         \
  X(Sqrt, "sqrt", kUnaryMath | kFloatResult, NoAttrs, 1)                        \
  X(Rsqrt, "rsqrt", kUnaryMath | kFloatResult, NoAttrs, 2)                      \
  X(Square, "square", kUnaryMath, NoAttrs, 1)                                   \
  X(Sin, "sin", kUnaryMath | kFloatResult, NoAttrs, 8)                          \
  X(Cos, "cos", kUnaryMath | kFloatResult, NoAttrs, 8)                          \
  X(Tanh, "tanh", kUnaryMath | kFloatResult, NoAttrs, 8)                        \
  X(Sigmoid, "sigmoid", kUnaryMath | kFloatResult, NoAttrs, 10)                 \
  X(Relu, "relu", kUnaryMath | kNoBool, NoAttrs, 1)                             \
  X(GeluErf, "gelu", kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 20)       \
  X(GeluTanh, "gelu_tanh", kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 14) \
  X(Silu, "silu", kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 11)          \
  X(LogicalNot, "logical_not", kElementwise | kBoolResult, NoAttrs, 1)          \
  X(IsNan, "isnan", kElementwise | kBoolResult, NoAttrs, 1)                     \
  X(IsInf, "isinf", kElementwise | kBoolResult, NoAttrs, 1)

#define EMBER_BINARY_PRIMITIVES(X)                                     \
  X(Add, "add", kBinaryMath | kCommutative, NoAttrs, 1)                \
  X(Sub, "sub", kBinaryMath | kNoBool, NoAttrs, 1)                     \
  X(Mul, "mul", kBinaryMath | kCommutative, NoAttrs, 1)                \
  X(Div, "div", kBinaryMath | kFloatResult, NoAttrs, 1)                \
  X(Pow, "pow", kBinaryMath, NoAttrs, 10)                              \
  X(Minimum, "minimum", kBinaryMath | kCommutative, NoAttrs, 1)        \
  X(Maximum, "maximum", kBinaryMath | kCommutative, NoAttrs, 1)        \
  X(Eq, "eq", kComparison | kCommutative, NoAttrs, 1)                  \
  X(Ne, "ne", kComparison | kCommutative, NoAttrs, 1)                  \
  X(Lt, "lt", kComparison, NoAttrs, 1)                                 \
  X(Le, "le", kComparison, NoAttrs, 1)                                 \
  X(Gt, "gt", kComparison, NoAttrs, 1)                                 \
  X(Ge, "ge", kComparison, NoAttrs, 1)                                 \
  X(LogicalAnd, "logical_and", kComparison | kCommutative, NoAttrs, 1) \
  X(LogicalOr, "logical_or", kComparison | kCommutative, NoAttrs, 1)

// Every other op, by family. Backward primitives carry the forward's attributes.
#define EMBER_OTHER_OPS(X)                                                                          \
  /* elementwise */                                                                                 \
  X(Where, "where", kElementwise | kDifferentiable, NoAttrs, 1)                                     \
  X(ThresholdBackward, "threshold_backward", kElementwise, NoAttrs, 1)                              \
  X(GeluGrad, "gelu_grad", kElementwise, ActivationAttrs, 24)                                       \
  X(Clamp, "clamp", kComposite | kDifferentiable, ClampAttrs, 0)                                    \
  X(Softplus, "softplus", kComposite | kDifferentiable, SoftplusAttrs, 0)                           \
  X(MaskedFill, "masked_fill", kComposite | kDifferentiable, FillAttrs, 0)                          \
  /* copies and creation */                                                                         \
  X(Copy, "copy", kElementwise | kDifferentiable, NoAttrs, 0)                                       \
  X(Fill, "fill", kCreation | kDifferentiable, FillAttrs, 0)                                        \
  X(Arange, "arange", kCreation, RangeAttrs, 0)                                                     \
  X(Linspace, "linspace", kCreation, RangeAttrs, 0)                                                 \
  X(RandUniform, "rand", kCreation | kRandom, RandomAttrs, 0)                                       \
  X(RandNormal, "randn", kCreation | kRandom, RandomAttrs, 0)                                       \
  X(RandInt, "randint", kCreation | kRandom, RandomAttrs, 0)                                        \
  X(Dropout, "dropout", kRandom | kDifferentiable, DropoutAttrs, 0)                                 \
  /* views */                                                                                       \
  X(View, "view", kView | kDifferentiable, ShapeAttrs, 0)                                           \
  X(Permute, "permute", kView | kDifferentiable, AxesAttrs, 0)                                      \
  X(Slice, "slice", kView | kDifferentiable, SliceAttrs, 0)                                         \
  X(Select, "select", kView | kDifferentiable, SelectAttrs, 0)                                      \
  X(Expand, "expand", kView | kDifferentiable, ShapeAttrs, 0)                                       \
  X(AsStrided, "as_strided", kView | kDifferentiable, AsStridedAttrs, 0)                            \
  X(BackwardHook, "backward_hook", kView | kDifferentiable, NoAttrs, 0)                             \
  /* reductions */                                                                                  \
  X(Sum, "sum", kReduction | kDifferentiable, ReduceAttrs, 1)                                       \
  X(Prod, "prod", kReduction | kDifferentiable, ReduceAttrs, 1)                                     \
  X(Amax, "amax", kReduction | kDifferentiable, ReduceAttrs, 1)                                     \
  X(Amin, "amin", kReduction | kDifferentiable, ReduceAttrs, 1)                                     \
  X(Argmax, "argmax", kReduction, ReduceAttrs, 1)                                                   \
  X(Argmin, "argmin", kReduction, ReduceAttrs, 1)                                                   \
  X(All, "all", kReduction, ReduceAttrs, 1)                                                         \
  X(Any, "any", kReduction, ReduceAttrs, 1)                                                         \
  X(Mean, "mean", kComposite | kDifferentiable, ReduceAttrs, 0)                                     \
  X(Var, "var", kComposite | kDifferentiable, VarAttrs, 0)                                          \
  X(Std, "std", kComposite | kDifferentiable, VarAttrs, 0)                                          \
  X(LogSumExp, "logsumexp", kComposite | kDifferentiable, ReduceAttrs, 0)                           \
  X(Norm, "norm", kComposite | kDifferentiable, NormAttrs, 0)                                       \
  X(Softmax, "softmax", kDifferentiable, DimAttrs, 5)                                               \
  X(LogSoftmax, "log_softmax", kDifferentiable, DimAttrs, 5)                                        \
  X(SoftmaxGrad, "softmax_grad", 0, DimAttrs, 4)                                                    \
  X(LogSoftmaxGrad, "log_softmax_grad", 0, DimAttrs, 4)                                             \
  /* linear algebra */                                                                              \
  X(Matmul, "matmul", kDifferentiable, MatmulAttrs, 2)                                              \
  X(Linear, "linear", kComposite | kDifferentiable, NoAttrs, 0)                                     \
  X(LinearGelu, "linear_gelu", kComposite | kDifferentiable, MatmulAttrs, 0)                        \
  /* quantization (inference only: ember/quant.h) */                                                \
  X(Quantize, "quantize", 0, NoAttrs, 0)                                                            \
  X(Dequantize, "dequantize", 0, NoAttrs, 0)                                                        \
  X(QuantizedMatmul, "quantized_matmul", 0, NoAttrs, 0)                                             \
  /* attention */                                                                                   \
  X(ScaledDotProductAttention, "scaled_dot_product_attention", kDifferentiable, AttentionAttrs, 0)  \
  X(AttentionGrad, "scaled_dot_product_attention_grad", 0, AttentionAttrs, 0)                       \
  /* convolution and pooling */                                                                     \
  X(Conv2d, "conv2d", kDifferentiable, Conv2dAttrs, 0)                                              \
  X(Conv2dInputGrad, "conv2d_input_grad", 0, Conv2dAttrs, 0)                                        \
  X(Conv2dWeightGrad, "conv2d_weight_grad", 0, Conv2dAttrs, 0)                                      \
  X(ConvTranspose2d, "conv_transpose2d", kComposite | kDifferentiable, ConvTranspose2dAttrs, 0)     \
  X(Conv1d, "conv1d", kComposite | kDifferentiable, Conv1dAttrs, 0)                                 \
  X(MaxPool2d, "max_pool2d", kDifferentiable, Pool2dAttrs, 0)                                       \
  X(MaxPool2dGrad, "max_pool2d_grad", 0, Pool2dAttrs, 0)                                            \
  X(AvgPool2d, "avg_pool2d", kDifferentiable, Pool2dAttrs, 0)                                       \
  X(AvgPool2dGrad, "avg_pool2d_grad", 0, Pool2dAttrs, 0)                                            \
  X(AdaptiveAvgPool2d, "adaptive_avg_pool2d", kDifferentiable, Pool2dAttrs, 0)                      \
  X(AdaptiveAvgPool2dGrad, "adaptive_avg_pool2d_grad", 0, Pool2dAttrs, 0)                           \
  X(Interpolate, "interpolate", kComposite | kDifferentiable, InterpolateAttrs, 0)                  \
  /* normalization */                                                                               \
  X(BatchNorm, "batch_norm", kComposite | kDifferentiable, BatchNormAttrs, 0)                       \
  X(BatchNormStats, "batch_norm_stats", 0, NoAttrs, 0)                                              \
  X(BatchNormApply, "batch_norm_apply", 0, NoAttrs, 0)                                              \
  X(BatchNormGrad, "batch_norm_grad", 0, BatchNormAttrs, 0)                                         \
  X(LayerNorm, "layer_norm", kDifferentiable, LayerNormAttrs, 0)                                    \
  X(LayerNormGrad, "layer_norm_grad", 0, LayerNormAttrs, 0)                                         \
  X(RmsNorm, "rms_norm", kDifferentiable, LayerNormAttrs, 0)                                        \
  X(RmsNormGrad, "rms_norm_grad", 0, LayerNormAttrs, 0)                                             \
  X(GroupNorm, "group_norm", kComposite | kDifferentiable, GroupNormAttrs, 0)                       \
  /* state-space models */                                                                          \
  X(SelectiveScan, "selective_scan", kDifferentiable, SelectiveScanAttrs, 0)                        \
  X(SelectiveScanGrad, "selective_scan_grad", 0, SelectiveScanAttrs, 0)                             \
  /* losses */                                                                                      \
  X(CrossEntropy, "cross_entropy", kComposite | kDifferentiable, ClassLossAttrs, 0)                 \
  X(CrossEntropyForward, "cross_entropy_forward", 0, ClassLossAttrs, 0)                             \
  X(CrossEntropyGrad, "cross_entropy_grad", 0, ClassLossAttrs, 0)                                   \
  X(NllLoss, "nll_loss", kComposite | kDifferentiable, ClassLossAttrs, 0)                           \
  X(NllLossForward, "nll_loss_forward", 0, ClassLossAttrs, 0)                                       \
  X(NllLossGrad, "nll_loss_grad", 0, ClassLossAttrs, 0)                                             \
  X(MseLoss, "mse_loss", kComposite | kDifferentiable, LossAttrs, 0)                                \
  X(L1Loss, "l1_loss", kComposite | kDifferentiable, LossAttrs, 0)                                  \
  X(BceWithLogits, "binary_cross_entropy_with_logits", kComposite | kDifferentiable, LossAttrs, 0)  \
  /* indexing */                                                                                    \
  X(IndexSelect, "index_select", kDifferentiable, DimAttrs, 0)                                      \
  X(Gather, "gather", kDifferentiable, DimAttrs, 0)                                                 \
  X(ScatterAdd, "scatter_add", kDifferentiable | kUpdate, DimAttrs, 1)                              \
  X(OneHot, "one_hot", 0, NoAttrs, 0)                                                               \
  X(Embedding, "embedding", kComposite | kDifferentiable, NoAttrs, 0)                               \
  /* triangles, scans, sorting and sampling */                                                      \
  X(Tril, "tril", kDifferentiable, TriangleAttrs, 0)                                                \
  X(Triu, "triu", kDifferentiable, TriangleAttrs, 0)                                                \
  X(Cumsum, "cumsum", kDifferentiable, DimAttrs, 1)                                                 \
  X(Sort, "sort", kDifferentiable, SortAttrs, 0)                                                    \
  X(TopK, "topk", kDifferentiable, TopKAttrs, 0)                                                    \
  X(Multinomial, "multinomial", kRandom, MultinomialAttrs, 0)                                       \
  /* shape ops (copies through views) */                                                            \
  X(Cat, "cat", kComposite | kDifferentiable, DimAttrs, 0)                                          \
  X(Stack, "stack", kComposite | kDifferentiable, DimAttrs, 0)                                      \
  X(Repeat, "repeat", kComposite | kDifferentiable, ShapeAttrs, 0)                                  \
  X(Flip, "flip", kComposite | kDifferentiable, AxesAttrs, 0)                                       \
  X(Roll, "roll", kComposite | kDifferentiable, RollAttrs, 0)                                       \
  X(Pad, "pad", kComposite | kDifferentiable, PadAttrs, 0)                                          \
  /* optimizer updates: parameter and state are outputs, updated in place */                        \
  X(SgdStep, "sgd_step", kUpdate, SgdAttrs, 0)                                                      \
  X(AdamStep, "adam_step", kUpdate, AdamAttrs, 0)                                                   \
  X(AdagradStep, "adagrad_step", kUpdate, AdagradAttrs, 0)                                          \
  X(RmspropStep, "rmsprop_step", kUpdate, RmspropAttrs, 0)                                          \
  /* collectives over a process group's ranks: each starts its transfer, collective_wait ends it */ \
  X(AllReduce, "all_reduce", kUpdate, CollectiveAttrs, 0)                                           \
  X(AllGather, "all_gather", 0, CollectiveAttrs, 0)                                                 \
  X(ReduceScatter, "reduce_scatter", 0, CollectiveAttrs, 0)                                         \
  X(Broadcast, "broadcast", kUpdate, CollectiveAttrs, 0)                                            \
  X(CollectiveWait, "collective_wait", kUpdate, CollectiveAttrs, 0)

#define EMBER_OPS(X)         \
  EMBER_UNARY_PRIMITIVES(X)  \
  EMBER_BINARY_PRIMITIVES(X) \
  EMBER_OTHER_OPS(X)

enum class OpKind : uint16_t {
#define EMBER_OP_ENUM(kind, name, traits, attrs, flops) k##kind,
  EMBER_OPS(EMBER_OP_ENUM)
#undef EMBER_OP_ENUM
      kCount
};

inline constexpr int kNumOps = static_cast<int>(OpKind::kCount);

struct OpInfo {
  std::string_view name;
  uint32_t traits;
  size_t attrs_index;     // the alternative of Attrs this op's attributes use
  int flops_per_element;  // for elementwise ops: the cost model's FLOPs per output element
};

inline constexpr OpInfo kOpInfo[] = {
#define EMBER_OP_INFO(kind, name, traits, attrs, flops) {name, traits, attrs_index_of<attrs>(), flops},
    EMBER_OPS(EMBER_OP_INFO)
#undef EMBER_OP_INFO
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == static_cast<size_t>(OpKind::kCount),
              "every op needs exactly one OpInfo");

constexpr const OpInfo& op_info(OpKind kind) { return kOpInfo[static_cast<int>(kind)]; }
constexpr const char* op_name(OpKind kind) { return op_info(kind).name.data(); }
constexpr bool has_trait(OpKind kind, OpTrait trait) { return (op_info(kind).traits & trait) != 0; }
// Does the op run a kernel of its own (neither a view nor a composite)?
constexpr bool is_primitive(OpKind kind) { return !has_trait(kind, kView) && !has_trait(kind, kComposite); }

// The attribute type of an op, e.g. AttrsOf<OpKind::kConv2d> is Conv2dAttrs.
template <OpKind K>
using AttrsOf = std::variant_alternative_t<op_info(K).attrs_index, Attrs>;

// Cost of one call, for the profiler and the roofline.
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

}  // namespace ember

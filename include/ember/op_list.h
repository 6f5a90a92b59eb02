// The op table: every op of ember, one row each, as X-macro lists with no dependencies, so that
// ember/primitives.h (the op's identity: OpKind, names, traits, attribute types), ember/tensor.h and
// ember/ops.h (the methods and functions of the uniform families), the elementwise front-ends and
// the Python bindings are all generated from one place. A row is
//
//   X(Kind, name, traits, attribute type, FLOPs per output element[, saved, gradient])
//
// Kind gives OpKind::kKind; name is the op's name and, in the families below, the name of its
// function ember::name and method Tensor::name. The traits are OpTrait bits (ember/primitives.h).
// The FLOPs column is the cost model's per-element count for elementwise ops (transcendental
// functions count several); the other ops' cost rules live with the op (src/ops/<family>.cpp).
//
// The families, each generating the same API for every row:
//   EMBER_UNARY_MATH         ember::f(x), x.f(), x.f_() and its backward from the last two
//                            columns: which value the backward keeps (x the input, y the output,
//                            or none) and the gradient of x from the incoming gradient g and that
//                            value, written with ember ops (PyTorch's derivatives.yaml, in a row).
//   EMBER_UNARY_PREDICATES   ember::f(x), x.f(): bool results, not differentiable.
//   EMBER_BINARY_MATH        ember::f(a, b), x.f(b) and x.f_(b); EMBER_BINARY_ARITHMETIC's rows
//                            also take a scalar b in each (add(x, 2.0)), EMBER_BINARY_EXTREMA's
//                            (minimum, maximum) a tensor only, as PyTorch's. Their front-ends and
//                            backwards are written by hand (src/ops/elementwise.cpp) since the
//                            scalar forms keep less.
//   EMBER_COMPARISONS        ember::f(a, b), x.f(b): bool results; EMBER_RELATIONS' rows (eq ...
//                            ge) also take a scalar b, EMBER_LOGICAL_BINARY's a tensor only.
//   EMBER_DIM_REDUCTIONS     ember::f(x), ember::f(x, dims, keepdim) and the same methods.
// A row of UNARY_MATH is all an op needs from the front of the library: with its scalar and vector
// functors (src/kernels/cpu/functors-inl.h) and its test entry, the op is complete.
#pragma once

#define EMBER_UNARY_MATH(X)                                                                                   \
  X(Neg, neg, kUnaryMath | kNoBool, NoAttrs, 1, none, neg(g))                                                 \
  X(Abs, abs, kUnaryMath | kNoBool, NoAttrs, 1, x, mul(g, sign(x))) /* no gradient at the kink, as PyTorch */ \
  X(Sign, sign, kUnaryMath, NoAttrs, 1, none, zeros_like(g))                                                  \
  X(Exp, exp, kUnaryMath | kFloatResult | kAmpFloat32, NoAttrs, 8, y, mul(g, y))                              \
  X(Log, log, kUnaryMath | kFloatResult | kAmpFloat32, NoAttrs, 8, x, div(g, x))                              \
  X(Log1p, log1p, kUnaryMath | kFloatResult, NoAttrs, 8, x, div(g, add(x, 1)))                                \
  X(Expm1, expm1, kUnaryMath | kFloatResult, NoAttrs, 8, y, mul(g, add(y, 1)))                                \
  X(Erf, erf, kUnaryMath | kFloatResult, NoAttrs, 16, x,                                                      \
    mul(g, mul(exp(neg(square(x))), 2 * std::numbers::inv_sqrtpi)))                                           \
  X(Sqrt, sqrt, kUnaryMath | kFloatResult, NoAttrs, 1, y, div(g, mul(y, 2)))                                  \
  X(Rsqrt, rsqrt, kUnaryMath | kFloatResult, NoAttrs, 2, y, mul(mul(g, mul(square(y), y)), -0.5))             \
  X(Square, square, kUnaryMath, NoAttrs, 1, x, mul(g, mul(x, 2)))                                             \
  X(Sin, sin, kUnaryMath | kFloatResult, NoAttrs, 8, x, mul(g, cos(x)))                                       \
  X(Cos, cos, kUnaryMath | kFloatResult, NoAttrs, 8, x, mul(g, neg(sin(x))))                                  \
  X(Tanh, tanh, kUnaryMath | kFloatResult, NoAttrs, 8, y, mul(g, rsub(square(y), 1)))                         \
  X(Sigmoid, sigmoid, kUnaryMath | kFloatResult, NoAttrs, 10, y, mul(g, mul(y, rsub(y, 1))))                  \
  X(Relu, relu, kUnaryMath | kNoBool, NoAttrs, 1, y, relu_backward(g, y))                                     \
  X(Silu, silu, kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 11, x, silu_backward(g, x))

// GELU's two forms are one function, gelu(x, approximate): written by hand (src/ops/elementwise.cpp).
#define EMBER_UNARY_GELU(X)                                             \
  X(GeluErf, gelu, kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 20) \
  X(GeluTanh, gelu_tanh, kUnaryMath | kFloatResult | kFloatOnly, NoAttrs, 14)

#define EMBER_UNARY_PREDICATES(X)                                    \
  X(LogicalNot, logical_not, kElementwise | kBoolResult, NoAttrs, 1) \
  X(IsNan, isnan, kElementwise | kBoolResult, NoAttrs, 1)            \
  X(IsInf, isinf, kElementwise | kBoolResult, NoAttrs, 1)

#define EMBER_BINARY_ARITHMETIC(X)                                                               \
  X(Add, add, kBinaryMath | kCommutative, NoAttrs, 1)                                            \
  X(Sub, sub, kBinaryMath | kNoBool, NoAttrs, 1)                                                 \
  X(Mul, mul, kBinaryMath | kCommutative, NoAttrs, 1)                                            \
  X(Div, div, kBinaryMath | kFloatResult, NoAttrs, 1) /* true division: integers give float32 */ \
  X(Pow, pow, kBinaryMath, NoAttrs, 10)

#define EMBER_BINARY_EXTREMA(X)                                                    \
  X(Minimum, minimum, kBinaryMath | kCommutative, NoAttrs, 1) /* propagates NaN */ \
  X(Maximum, maximum, kBinaryMath | kCommutative, NoAttrs, 1) /* propagates NaN */

#define EMBER_BINARY_MATH(X) EMBER_BINARY_ARITHMETIC(X) EMBER_BINARY_EXTREMA(X)

#define EMBER_RELATIONS(X)                          \
  X(Eq, eq, kComparison | kCommutative, NoAttrs, 1) \
  X(Ne, ne, kComparison | kCommutative, NoAttrs, 1) \
  X(Lt, lt, kComparison, NoAttrs, 1)                \
  X(Le, le, kComparison, NoAttrs, 1)                \
  X(Gt, gt, kComparison, NoAttrs, 1)                \
  X(Ge, ge, kComparison, NoAttrs, 1)

#define EMBER_LOGICAL_BINARY(X)                                      \
  X(LogicalAnd, logical_and, kComparison | kCommutative, NoAttrs, 1) \
  X(LogicalOr, logical_or, kComparison | kCommutative, NoAttrs, 1)

#define EMBER_COMPARISONS(X) EMBER_RELATIONS(X) EMBER_LOGICAL_BINARY(X)

#define EMBER_DIM_REDUCTIONS(X)                                           \
  X(Sum, sum, kReduction | kDifferentiable | kAmpFloat32, ReduceAttrs, 1) \
  X(Prod, prod, kReduction | kDifferentiable, ReduceAttrs, 1)             \
  X(Amax, amax, kReduction | kDifferentiable, ReduceAttrs, 1)             \
  X(Amin, amin, kReduction | kDifferentiable, ReduceAttrs, 1)             \
  X(All, all, kReduction, ReduceAttrs, 1)                                 \
  X(Any, any, kReduction, ReduceAttrs, 1)                                 \
  X(Mean, mean, kComposite | kDifferentiable | kAmpFloat32, ReduceAttrs, 0)

// Every other op, by family, with an API of its own. Backward primitives carry the forward's
// attributes.
#define EMBER_OTHER_OPS(X)                                                                                     \
  /* elementwise */                                                                                            \
  X(Where, where, kElementwise | kDifferentiable, NoAttrs, 1)                                                  \
  X(ThresholdBackward, threshold_backward, kElementwise, NoAttrs, 1)                                           \
  X(GeluGrad, gelu_grad, kElementwise, ActivationAttrs, 24)                                                    \
  X(Clamp, clamp, kComposite | kDifferentiable, ClampAttrs, 0)                                                 \
  X(Softplus, softplus, kComposite | kDifferentiable | kAmpFloat32, SoftplusAttrs, 0)                          \
  X(MaskedFill, masked_fill, kComposite | kDifferentiable, FillAttrs, 0)                                       \
  /* copies and creation */                                                                                    \
  X(Copy, copy, kElementwise | kDifferentiable, NoAttrs, 0)                                                    \
  X(Fill, fill, kCreation | kDifferentiable, FillAttrs, 0)                                                     \
  X(Arange, arange, kCreation, RangeAttrs, 0)                                                                  \
  X(Linspace, linspace, kCreation, RangeAttrs, 0)                                                              \
  X(RandUniform, rand, kCreation | kRandom, RandomAttrs, 0)                                                    \
  X(RandNormal, randn, kCreation | kRandom, RandomAttrs, 0)                                                    \
  X(RandInt, randint, kCreation | kRandom, RandomAttrs, 0)                                                     \
  X(Dropout, dropout, kRandom | kDifferentiable, DropoutAttrs, 0)                                              \
  /* views */                                                                                                  \
  X(View, view, kView | kDifferentiable, ShapeAttrs, 0)                                                        \
  X(Permute, permute, kView | kDifferentiable, AxesAttrs, 0)                                                   \
  X(Slice, slice, kView | kDifferentiable, SliceAttrs, 0)                                                      \
  X(Select, select, kView | kDifferentiable, SelectAttrs, 0)                                                   \
  X(Expand, expand, kView | kDifferentiable, ShapeAttrs, 0)                                                    \
  X(AsStrided, as_strided, kView | kDifferentiable, AsStridedAttrs, 0)                                         \
  X(BackwardHook, backward_hook, kView | kDifferentiable, NoAttrs, 0)                                          \
  /* reductions */                                                                                             \
  EMBER_DIM_REDUCTIONS(X)                                                                                      \
  X(Argmax, argmax, kReduction, ReduceAttrs, 1)                                                                \
  X(Argmin, argmin, kReduction, ReduceAttrs, 1)                                                                \
  X(Var, var, kComposite | kDifferentiable | kAmpFloat32, VarAttrs, 0)                                         \
  X(Std, std, kComposite | kDifferentiable | kAmpFloat32, VarAttrs, 0)                                         \
  X(LogSumExp, logsumexp, kComposite | kDifferentiable | kAmpFloat32, ReduceAttrs, 0)                          \
  X(Norm, norm, kComposite | kDifferentiable | kAmpFloat32, NormAttrs, 0)                                      \
  X(Softmax, softmax, kDifferentiable | kAmpFloat32, DimAttrs, 5)                                              \
  X(LogSoftmax, log_softmax, kDifferentiable | kAmpFloat32, DimAttrs, 5)                                       \
  X(SoftmaxGrad, softmax_grad, 0, DimAttrs, 4)                                                                 \
  X(LogSoftmaxGrad, log_softmax_grad, 0, DimAttrs, 4)                                                          \
  /* linear algebra */                                                                                         \
  X(Matmul, matmul, kDifferentiable | kAmpLower, MatmulAttrs, 2)                                               \
  X(Linear, linear, kComposite | kDifferentiable | kAmpLower, NoAttrs, 0)                                      \
  X(LinearGelu, linear_gelu, kComposite | kDifferentiable | kAmpLower, MatmulAttrs, 0)                         \
  /* quantization (inference only: ember/quant.h) */                                                           \
  X(Quantize, quantize, 0, NoAttrs, 0)                                                                         \
  X(Dequantize, dequantize, 0, NoAttrs, 0)                                                                     \
  X(QuantizedMatmul, quantized_matmul, 0, QuantizedMatmulAttrs, 0)                                             \
  X(Interleave, interleave, 0, NoAttrs, 0)                                                                     \
  /* attention */                                                                                              \
  X(ScaledDotProductAttention, scaled_dot_product_attention, kDifferentiable | kAmpLower, AttentionAttrs, 0)   \
  X(AttentionGrad, scaled_dot_product_attention_grad, 0, AttentionAttrs, 0)                                    \
  X(Rope, rope, kDifferentiable, RopeAttrs, 0)                                                                 \
  /* convolution and pooling */                                                                                \
  X(Conv2d, conv2d, kDifferentiable | kAmpLower, Conv2dAttrs, 0)                                               \
  X(Conv2dInputGrad, conv2d_input_grad, 0, Conv2dAttrs, 0)                                                     \
  X(Conv2dWeightGrad, conv2d_weight_grad, 0, Conv2dAttrs, 0)                                                   \
  X(ConvTranspose2d, conv_transpose2d, kComposite | kDifferentiable | kAmpLower, ConvTranspose2dAttrs, 0)      \
  X(Conv1d, conv1d, kComposite | kDifferentiable | kAmpLower, Conv1dAttrs, 0)                                  \
  X(MaxPool2d, max_pool2d, kDifferentiable, Pool2dAttrs, 0)                                                    \
  X(MaxPool2dGrad, max_pool2d_grad, 0, Pool2dAttrs, 0)                                                         \
  X(AvgPool2d, avg_pool2d, kDifferentiable, Pool2dAttrs, 0)                                                    \
  X(AvgPool2dGrad, avg_pool2d_grad, 0, Pool2dAttrs, 0)                                                         \
  X(AdaptiveAvgPool2d, adaptive_avg_pool2d, kDifferentiable, Pool2dAttrs, 0)                                   \
  X(AdaptiveAvgPool2dGrad, adaptive_avg_pool2d_grad, 0, Pool2dAttrs, 0)                                        \
  X(Interpolate, interpolate, kComposite | kDifferentiable, InterpolateAttrs, 0)                               \
  /* normalization */                                                                                          \
  X(BatchNorm, batch_norm, kComposite | kDifferentiable, BatchNormAttrs, 0)                                    \
  X(BatchNormStats, batch_norm_stats, 0, NoAttrs, 0)                                                           \
  X(BatchNormApply, batch_norm_apply, 0, NoAttrs, 0)                                                           \
  X(BatchNormGrad, batch_norm_grad, 0, BatchNormAttrs, 0)                                                      \
  X(LayerNorm, layer_norm, kDifferentiable | kAmpFloat32, LayerNormAttrs, 0)                                   \
  X(LayerNormGrad, layer_norm_grad, 0, LayerNormAttrs, 0)                                                      \
  X(RmsNorm, rms_norm, kDifferentiable | kAmpFloat32, LayerNormAttrs, 0)                                       \
  X(RmsNormGrad, rms_norm_grad, 0, LayerNormAttrs, 0)                                                          \
  X(GroupNorm, group_norm, kComposite | kDifferentiable | kAmpFloat32, GroupNormAttrs, 0)                      \
  /* state-space models */                                                                                     \
  X(SelectiveScan, selective_scan, kDifferentiable | kAmpFloat32, SelectiveScanAttrs, 0)                       \
  X(SelectiveScanGrad, selective_scan_grad, 0, SelectiveScanAttrs, 0)                                          \
  /* losses */                                                                                                 \
  X(CrossEntropy, cross_entropy, kComposite | kDifferentiable | kAmpFloat32, ClassLossAttrs, 0)                \
  X(CrossEntropyForward, cross_entropy_forward, 0, ClassLossAttrs, 0)                                          \
  X(CrossEntropyGrad, cross_entropy_grad, 0, ClassLossAttrs, 0)                                                \
  X(NllLoss, nll_loss, kComposite | kDifferentiable | kAmpFloat32, ClassLossAttrs, 0)                          \
  X(NllLossForward, nll_loss_forward, 0, ClassLossAttrs, 0)                                                    \
  X(NllLossGrad, nll_loss_grad, 0, ClassLossAttrs, 0)                                                          \
  X(MseLoss, mse_loss, kComposite | kDifferentiable | kAmpFloat32, LossAttrs, 0)                               \
  X(L1Loss, l1_loss, kComposite | kDifferentiable | kAmpFloat32, LossAttrs, 0)                                 \
  X(BceWithLogits, binary_cross_entropy_with_logits, kComposite | kDifferentiable | kAmpFloat32, LossAttrs, 0) \
  /* indexing */                                                                                               \
  X(IndexSelect, index_select, kDifferentiable, DimAttrs, 0)                                                   \
  X(Gather, gather, kDifferentiable, DimAttrs, 0)                                                              \
  X(ScatterAdd, scatter_add, kDifferentiable | kUpdate, DimAttrs, 1)                                           \
  X(OneHot, one_hot, 0, NoAttrs, 0)                                                                            \
  X(Embedding, embedding, kComposite | kDifferentiable, NoAttrs, 0)                                            \
  /* triangles, scans, sorting and sampling */                                                                 \
  X(Tril, tril, kDifferentiable, TriangleAttrs, 0)                                                             \
  X(Triu, triu, kDifferentiable, TriangleAttrs, 0)                                                             \
  X(Cumsum, cumsum, kDifferentiable, DimAttrs, 1)                                                              \
  X(Sort, sort, kDifferentiable, SortAttrs, 0)                                                                 \
  X(TopK, topk, kDifferentiable, TopKAttrs, 0)                                                                 \
  X(Multinomial, multinomial, kRandom, MultinomialAttrs, 0)                                                    \
  /* shape ops (copies through views) */                                                                       \
  X(Cat, cat, kComposite | kDifferentiable, DimAttrs, 0)                                                       \
  X(Stack, stack, kComposite | kDifferentiable, DimAttrs, 0)                                                   \
  X(Repeat, repeat, kComposite | kDifferentiable, ShapeAttrs, 0)                                               \
  X(Flip, flip, kComposite | kDifferentiable, AxesAttrs, 0)                                                    \
  X(Roll, roll, kComposite | kDifferentiable, RollAttrs, 0)                                                    \
  X(Pad, pad, kComposite | kDifferentiable, PadAttrs, 0)                                                       \
  /* optimizer updates: parameter and state are outputs, updated in place */                                   \
  X(SgdStep, sgd_step, kUpdate, SgdAttrs, 0)                                                                   \
  X(AdamStep, adam_step, kUpdate, AdamAttrs, 0)                                                                \
  X(AdagradStep, adagrad_step, kUpdate, AdagradAttrs, 0)                                                       \
  X(RmspropStep, rmsprop_step, kUpdate, RmspropAttrs, 0)                                                       \
  /* collectives over a process group's ranks: each starts its transfer, collective_wait ends it */            \
  X(AllReduce, all_reduce, kUpdate, CollectiveAttrs, 0)                                                        \
  X(AllGather, all_gather, 0, CollectiveAttrs, 0)                                                              \
  X(ReduceScatter, reduce_scatter, 0, CollectiveAttrs, 0)                                                      \
  X(Broadcast, broadcast, kUpdate, CollectiveAttrs, 0)                                                         \
  X(CollectiveWait, collective_wait, kUpdate, CollectiveAttrs, 0)

#define EMBER_UNARY_PRIMITIVES(X) EMBER_UNARY_MATH(X) EMBER_UNARY_GELU(X) EMBER_UNARY_PREDICATES(X)
#define EMBER_BINARY_PRIMITIVES(X) EMBER_BINARY_MATH(X) EMBER_COMPARISONS(X)
#define EMBER_OPS(X) EMBER_UNARY_PRIMITIVES(X) EMBER_BINARY_PRIMITIVES(X) EMBER_OTHER_OPS(X)

// The closed set of primitives, listed once with their traits. The OpKind enum, the name table,
// the trait table and the kernels' functor switches are all generated from these lists, so adding
// a primitive is one line here plus its functor/kernel and its front-end function.
#pragma once

#include <cstdint>
#include <string_view>

namespace ember {

enum OpTrait : uint32_t {
  kElementwise = 1u << 0,
  kReduction = 1u << 1,
  kCommutative = 1u << 2,
  kInPlace = 1u << 3,      // may write its output over its first input
  kFloatResult = 1u << 4,  // integer/bool inputs give float32 (exp, div, ...)
  kBoolResult = 1u << 5,   // comparisons and logical ops
  kNoBool = 1u << 6,       // rejects bool inputs, as PyTorch does
  kFloatOnly = 1u << 7,    // rejects integer and bool inputs, as PyTorch does
};

// X(Kind, "name", traits, flops per output element, Functor)
#define EMBER_UNARY_PRIMITIVES(X)                                                             \
  X(Neg, "neg", kElementwise | kInPlace | kNoBool, 1, Neg)                                    \
  X(Abs, "abs", kElementwise | kInPlace | kNoBool, 1, Abs)                                    \
  X(Sign, "sign", kElementwise | kInPlace, 1, Sign)                                           \
  X(Exp, "exp", kElementwise | kInPlace | kFloatResult, 8, Exp)                               \
  X(Log, "log", kElementwise | kInPlace | kFloatResult, 8, Log)                               \
  X(Log1p, "log1p", kElementwise | kInPlace | kFloatResult, 8, Log1p)                         \
  X(Expm1, "expm1", kElementwise | kInPlace | kFloatResult, 8, Expm1)                         \
  X(Sqrt, "sqrt", kElementwise | kInPlace | kFloatResult, 1, Sqrt)                            \
  X(Rsqrt, "rsqrt", kElementwise | kInPlace | kFloatResult, 2, Rsqrt)                         \
  X(Square, "square", kElementwise | kInPlace, 1, Square)                                     \
  X(Sin, "sin", kElementwise | kInPlace | kFloatResult, 8, Sin)                               \
  X(Cos, "cos", kElementwise | kInPlace | kFloatResult, 8, Cos)                               \
  X(Tanh, "tanh", kElementwise | kInPlace | kFloatResult, 8, Tanh)                            \
  X(Sigmoid, "sigmoid", kElementwise | kInPlace | kFloatResult, 10, Sigmoid)                  \
  X(Relu, "relu", kElementwise | kInPlace | kNoBool, 1, Relu)                                 \
  X(GeluErf, "gelu", kElementwise | kInPlace | kFloatResult | kFloatOnly, 20, GeluErf)        \
  X(GeluTanh, "gelu_tanh", kElementwise | kInPlace | kFloatResult | kFloatOnly, 14, GeluTanh) \
  X(Silu, "silu", kElementwise | kInPlace | kFloatResult | kFloatOnly, 11, Silu)              \
  X(LogicalNot, "logical_not", kElementwise | kBoolResult, 1, LogicalNot)                     \
  X(IsNan, "isnan", kElementwise | kBoolResult, 1, IsNan)                                     \
  X(IsInf, "isinf", kElementwise | kBoolResult, 1, IsInf)

#define EMBER_BINARY_PRIMITIVES(X)                                                       \
  X(Add, "add", kElementwise | kCommutative | kInPlace, 1, Add)                          \
  X(Sub, "sub", kElementwise | kInPlace | kNoBool, 1, Sub)                               \
  X(Mul, "mul", kElementwise | kCommutative | kInPlace, 1, Mul)                          \
  X(Div, "div", kElementwise | kInPlace | kFloatResult, 1, Div)                          \
  X(Pow, "pow", kElementwise | kInPlace, 10, Pow)                                        \
  X(Minimum, "minimum", kElementwise | kCommutative | kInPlace, 1, Minimum)              \
  X(Maximum, "maximum", kElementwise | kCommutative | kInPlace, 1, Maximum)              \
  X(Eq, "eq", kElementwise | kCommutative | kBoolResult, 1, Eq)                          \
  X(Ne, "ne", kElementwise | kCommutative | kBoolResult, 1, Ne)                          \
  X(Lt, "lt", kElementwise | kBoolResult, 1, Lt)                                         \
  X(Le, "le", kElementwise | kBoolResult, 1, Le)                                         \
  X(Gt, "gt", kElementwise | kBoolResult, 1, Gt)                                         \
  X(Ge, "ge", kElementwise | kBoolResult, 1, Ge)                                         \
  X(LogicalAnd, "logical_and", kElementwise | kCommutative | kBoolResult, 1, LogicalAnd) \
  X(LogicalOr, "logical_or", kElementwise | kCommutative | kBoolResult, 1, LogicalOr)

// Primitives with their own kernels (not generated functor loops).
#define EMBER_OTHER_PRIMITIVES(X)            \
  X(Where, "where", kElementwise, 1, None)   \
  X(Copy, "copy", kElementwise, 0, None)     \
  X(Fill, "fill", kElementwise, 0, None)     \
  X(Sum, "sum", kReduction, 1, None)         \
  X(Prod, "prod", kReduction, 1, None)       \
  X(Amax, "amax", kReduction, 1, None)       \
  X(Amin, "amin", kReduction, 1, None)       \
  X(Argmax, "argmax", kReduction, 1, None)   \
  X(Argmin, "argmin", kReduction, 1, None)   \
  X(All, "all", kReduction, 1, None)         \
  X(Any, "any", kReduction, 1, None)         \
  X(Softmax, "softmax", 0, 5, None)          \
  X(LogSoftmax, "log_softmax", 0, 5, None)   \
  X(Matmul, "matmul", 0, 2, None)            \
  X(IndexSelect, "index_select", 0, 0, None) \
  X(Gather, "gather", 0, 0, None)            \
  X(ScatterAdd, "scatter_add", 0, 1, None)

#define EMBER_PRIMITIVES(X)  \
  EMBER_UNARY_PRIMITIVES(X)  \
  EMBER_BINARY_PRIMITIVES(X) \
  EMBER_OTHER_PRIMITIVES(X)

enum class OpKind : uint16_t {
#define EMBER_OP_ENUM(kind, name, traits, flops, functor) k##kind,
  EMBER_PRIMITIVES(EMBER_OP_ENUM)
#undef EMBER_OP_ENUM
      kCount
};

struct OpInfo {
  std::string_view name;
  uint32_t traits;
  int flops_per_element;  // for elementwise ops: the cost model's FLOPs per output element
};

inline constexpr OpInfo kOpInfo[] = {
#define EMBER_OP_INFO(kind, name, traits, flops, functor) {name, traits, flops},
    EMBER_PRIMITIVES(EMBER_OP_INFO)
#undef EMBER_OP_INFO
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == static_cast<size_t>(OpKind::kCount),
              "every primitive needs exactly one OpInfo");

constexpr const OpInfo& op_info(OpKind kind) { return kOpInfo[static_cast<int>(kind)]; }
constexpr bool has_trait(OpKind kind, OpTrait trait) { return (op_info(kind).traits & trait) != 0; }

// Cost of one call, for the profiler and the roofline.
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

}  // namespace ember

// The closed set of ops, listed once with their traits and attribute types: the op's identity.
// OpKind, the name table, the trait table and the attribute type of each op all come from the
// op table (ember/op_list.h), so adding an op is one row there (plus its kernel, its test entry
// and, outside the uniform families, its front-end).
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
#include "ember/op_list.h"

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
  // Autocast's policy (ops/autocast.h, docs/amp.md), as PyTorch's CUDA lists: matrix products,
  // convolutions and attention run in the lower precision; softmax, the norms, the losses, exp,
  // log and the reductions that sum many values run in float32; every other op in the dtype of
  // its inputs.
  kAmpLower = 1u << 14,
  kAmpFloat32 = 1u << 15,
};

inline constexpr uint32_t kUnaryMath = kElementwise | kInPlace | kDifferentiable;
inline constexpr uint32_t kBinaryMath = kElementwise | kInPlace | kDifferentiable;
inline constexpr uint32_t kComparison = kElementwise | kBoolResult;

enum class OpKind : uint16_t {
#define EMBER_OP_ENUM(kind, name, traits, attrs, flops, ...) k##kind,
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
#define EMBER_OP_INFO(kind, name, traits, attrs, flops, ...) {#name, traits, attrs_index_of<attrs>(), flops},
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

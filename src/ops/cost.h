// Cost rules: the FLOPs and bytes of one op call, for the profiler and the roofline. Each op's rule
// lives with the op (src/ops/<family>.cpp) and is registered in the op rule table by its family's
// define_*_ops function; this header has the table and the helpers rules share.
//
// Conventions (what the numbers mean, so they can be checked by hand):
// - FLOPs count arithmetic on the op's elements: an add, a multiply, a compare each count one; a
//   fused multiply-add counts two; transcendental functions count the primitive table's
//   flops_per_element (ember/primitives.h), e.g. 8 for exp.
// - Bytes are the minimum traffic of the algorithm the kernel runs: every operand read once and
//   every result written once, plus intermediate buffers the kernel materializes (conv2d's column
//   buffer), at the operands' element sizes. Caches may make the real traffic lower.
// - Only primitives (kernels) have rules; a composite op costs what its primitives cost, and a
//   view costs nothing.
#pragma once

#include "base/kernel.h"
#include "ember/primitives.h"

namespace ember {

using CostRule = OpCost (*)(const KernelCall& call);

// The rules of every op, filled once by the families (ops/op_rules.cpp).
class OpRuleTable {
 public:
  void set_cost(OpKind kind, CostRule rule) { cost_[static_cast<int>(kind)] = rule; }
  CostRule cost(OpKind kind) const { return cost_[static_cast<int>(kind)]; }

 private:
  CostRule cost_[kNumOps] = {};
};

const OpRuleTable& op_rules();

// The cost of a kernel call by its op's rule (zero when the op has none).
OpCost op_cost(const KernelCall& call);

// One function per family registers its ops' rules.
void define_elementwise_ops(OpRuleTable& table);
void define_creation_ops(OpRuleTable& table);
void define_dropout_ops(OpRuleTable& table);
void define_reduce_ops(OpRuleTable& table);
void define_matmul_ops(OpRuleTable& table);
void define_conv_ops(OpRuleTable& table);
void define_pool_ops(OpRuleTable& table);
void define_norm_ops(OpRuleTable& table);
void define_scan_ops(OpRuleTable& table);
void define_attention_ops(OpRuleTable& table);
void define_loss_ops(OpRuleTable& table);
void define_indexing_ops(OpRuleTable& table);
void define_optimizer_ops(OpRuleTable& table);
void define_triangle_ops(OpRuleTable& table);
void define_cumsum_ops(OpRuleTable& table);
void define_quant_ops(OpRuleTable& table);
void define_rope_ops(OpRuleTable& table);
void define_sort_ops(OpRuleTable& table);
void define_multinomial_ops(OpRuleTable& table);
void define_collective_ops(OpRuleTable& table);

namespace cost {

// Bytes of an operand (0 when absent).
double nbytes(const Operand& t);
// Bytes of the distinct elements an operand reaches (its broadcast dims, stride 0, count once).
double stored_bytes(const Operand& t);
// Bytes of every defined input and output of the call.
double operand_bytes(const KernelCall& call);
double as_double(int64_t n);
double size_of(DType dtype);
inline constexpr double kIndexBytes = 8;  // int64 argmax indices and class targets

// Elementwise: the table's FLOPs per output element; bytes = every operand.
OpCost elementwise(const KernelCall& call);

}  // namespace cost
}  // namespace ember

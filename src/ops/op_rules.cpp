// The op rule table: each family's define_*_ops fills the rules of its ops (cost.h).
#include "ops/cost.h"

namespace ember {

const OpRuleTable& op_rules() {
  static const OpRuleTable table = [] {
    OpRuleTable t;
    define_elementwise_ops(t);
    define_creation_ops(t);
    define_dropout_ops(t);
    define_reduce_ops(t);
    define_matmul_ops(t);
    define_conv_ops(t);
    define_pool_ops(t);
    define_norm_ops(t);
    define_scan_ops(t);
    define_attention_ops(t);
    define_loss_ops(t);
    define_indexing_ops(t);
    define_optimizer_ops(t);
    define_triangle_ops(t);
    define_cumsum_ops(t);
    define_quant_ops(t);
    define_rope_ops(t);
    define_sort_ops(t);
    define_multinomial_ops(t);
    define_collective_ops(t);
    return t;
  }();
  return table;
}

OpCost op_cost(const KernelCall& call) {
  const CostRule rule = op_rules().cost(call.kind);
  return rule != nullptr ? rule(call) : OpCost{};
}

namespace cost {

double as_double(int64_t n) { return static_cast<double>(n); }
double size_of(DType dtype) {
  const BlockLayout layout = block_layout(dtype);  // bytes per element, a fraction for block dtypes
  return static_cast<double>(layout.bytes) / static_cast<double>(layout.values);
}
double nbytes(const Operand& t) { return t.defined() ? as_double(t.numel()) * size_of(t.dtype) : 0.0; }

double stored_bytes(const Operand& t) {
  if (!t.defined()) return 0.0;
  double elements = 1;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.stride(d) != 0 || t.size(d) == 0) elements *= cost::as_double(t.size(d));
  }
  return elements * size_of(t.dtype);
}

double operand_bytes(const KernelCall& call) {
  double bytes = 0;
  for (const Operand& t : call.inputs) bytes += nbytes(t);
  for (const Operand& t : call.outputs) bytes += nbytes(t);
  return bytes;
}

OpCost elementwise(const KernelCall& call) {
  return {static_cast<double>(op_info(call.kind).flops_per_element) * as_double(call.outputs[0].numel()),
          operand_bytes(call)};
}

}  // namespace cost
}  // namespace ember

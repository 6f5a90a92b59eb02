#include "ops/cost.h"

namespace ember {

namespace {
double nbytes(const Tensor& t) { return static_cast<double>(t.numel()) * static_cast<double>(t.element_size()); }
}  // namespace

OpCost elementwise_cost(OpKind op, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  OpCost cost;
  cost.flops = static_cast<double>(op_info(op).flops_per_element) * static_cast<double>(out.numel());
  cost.bytes = nbytes(out);
  for (const Tensor* t : inputs) cost.bytes += nbytes(*t);
  return cost;
}

OpCost reduction_cost(const Tensor& in, const Tensor& out) {
  return {static_cast<double>(in.numel()), nbytes(in) + nbytes(out)};
}

OpCost matmul_cost(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) {
  const double b = static_cast<double>(batch), size = static_cast<double>(dtype_size(dtype));
  return {2.0 * b * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
          b * size * static_cast<double>(m * k + k * n + m * n)};
}

}  // namespace ember

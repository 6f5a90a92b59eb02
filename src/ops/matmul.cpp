// Placeholder until the GEMM lands.
#include "ember/ops.h"
namespace ember {
Tensor matmul(const Tensor&, const Tensor&) { EMBER_FAIL("[matmul] not implemented on cpu"); }
Tensor& matmul_out(Tensor&, const Tensor&, const Tensor&) { EMBER_FAIL("[matmul_out] not implemented on cpu"); }
Tensor linear(const Tensor&, const Tensor&, const std::optional<Tensor>&) { EMBER_FAIL("[linear] not implemented on cpu"); }
}  // namespace ember

// Reference decompositions of the fused ops into ordinary ember ops. Each fused kernel (softmax,
// log_softmax, layer_norm, rms_norm, cross_entropy, linear_gelu, the optimizer updates) keeps the
// composition it stands for, written next to the op: it is the fused op's test oracle, and the
// path a device takes when its backend has no kernel for the fused primitive. They record no graph
// of their own beyond what their ops record.
#pragma once

#include <optional>
#include <string_view>

#include "ember/attrs.h"
#include "ember/tensor.h"

namespace ember::reference {

// exp(x - max) / sum(exp(x - max)) over `dim`; log_softmax as x - max - log(sum(exp(x - max))).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// (x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dims (biased
// variance); rms_norm: x / sqrt(mean(x^2) + eps) * weight.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps);

// -(1 - s) log_softmax(x)[target] - s mean_c log_softmax(x)[c] per position, 0 where the target is
// ignore_index, then reduced (mean over the counted targets).
Tensor cross_entropy(const Tensor& x, const Tensor& target, const ClassLossAttrs& attrs);

// softmax(q k^T * scale + mask) v by matmul, masked softmax, dropout (the kernel's Philox mask)
// and matmul, for query/key/value of any rank (..., H, N, F) with key/value heads repeated for
// grouped-query attention. A bool mask keeps its true pairs; any other mask is added to the scores;
// a row with every key masked gives zeros.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                                    const AttentionAttrs& attrs);

// gelu(linear(x, weight, bias), approximate).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   std::string_view approximate);

// The optimizer updates, operation by operation as their fused kernels compute them (same order,
// same dtype), written into the parameter and the state in place. The kernels may round a multiply
// and an add once where the compiler fuses them into an FMA, so the two agree to within an ulp or
// so per operation, not bit for bit. Absent optional state: undefined.
void sgd_update(Tensor param, const Tensor& grad, Tensor momentum_buffer, const SgdAttrs& attrs);
void adam_update(Tensor param, const Tensor& grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor max_exp_avg_sq,
                 const AdamAttrs& attrs);
void adagrad_update(Tensor param, const Tensor& grad, Tensor sum, const AdagradAttrs& attrs);
void rmsprop_update(Tensor param, const Tensor& grad, Tensor square_avg, Tensor grad_avg, Tensor momentum_buffer,
                    const RmspropAttrs& attrs);

}  // namespace ember::reference

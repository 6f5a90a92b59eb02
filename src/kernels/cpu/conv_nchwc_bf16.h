// The bfloat16 blocked convolution forward (Note [bfloat16 blocked convolution] in
// conv_nchwc_bf16.cpp): the float32 blocked forward's loops (conv_nchwc.h) with input channels taken
// in pairs by vdpbf16ps and float32 sums, each result rounded once. conv.cpp decides when it runs
// (maps too narrow for the bfloat16 im2col path) and keeps the packed weight. Needs AVX512_BF16.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv.h"

namespace ember::cpu {

// Whether the bfloat16 blocked forward takes g: one group, stride 1 or 2 in both dims, and
// channels that padding to blocks of 16 (input) and groups of 16 or 32 (output) grows by at most
// an eighth and a quarter.
bool nchwc_bf16_takes(const Conv2dGeometry& g);

// bfloat16 values of g's packed weight.
int64_t nchwc_bf16_packed_size(const Conv2dGeometry& g);

// weight (out_channels, in_channels, kernel_h, kernel_w) -> packed (nchwc_bf16_packed_size values).
// transposed: `weight` is (in_channels, out_channels, kernel_h, kernel_w) with its taps in reverse
// order (the convolution whose input gradient g is, as nchwc_pack_weight).
void nchwc_bf16_pack_weight(const Conv2dGeometry& g, const uint16_t* weight, bool transposed, uint16_t* packed);

// out (N, C_out, OH, OW) = conv(input (N, C_in, H, W), weight) + bias (C_out float32 values, or
// null), each element summed in float32 and rounded to bfloat16 once (as round_to_bf16), with the
// weight packed by nchwc_bf16_pack_weight. The result does not depend on the thread count.
void nchwc_bf16_forward(const Conv2dGeometry& g, const uint16_t* input, const uint16_t* packed, const float* bias,
                        uint16_t* out);

// Whether nchwc_bf16_weight_grad takes g: nchwc_bf16_takes it, and its output channels round up to
// multiples of 32 with at most a quarter added.
bool nchwc_bf16_weight_grad_takes(const Conv2dGeometry& g);

// grad_weight (C_out, C_in, kh, kw), float32, overwritten = the sum over the batch of grad_out (N,
// C_out, OH, OW) times the input's (N, C_in, H, W) patches, both bfloat16 (Note [bfloat16 blocked
// weight gradient]): products of bfloat16 pairs summed in float32, in an order the thread count
// does not change.
void nchwc_bf16_weight_grad(const Conv2dGeometry& g, const uint16_t* grad_out, const uint16_t* input,
                            float* grad_weight);

}  // namespace ember::cpu

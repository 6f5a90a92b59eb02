// The blocked float32 convolution forward (Note [blocked convolution] in conv_nchwc.cpp): input
// channels in blocks of the vector width, the weight packed once into the layout its micro-kernel
// reads, the image read in place of a column matrix. conv.cpp decides when it runs; the caller
// keeps the packed weight (ops/conv.cpp caches it on the weight's storage).
#pragma once

#include <cstdint>

#include "ember/attrs.h"
#include "ember/shape.h"
#include "kernels/cpu/conv.h"

namespace ember::cpu {

// g's packed weight's layout on this CPU: input channels in blocks of `block` (the float32 vector
// width) and output channels in groups of `out_block` (one or two vectors). {0, 0} where there is
// no blocked kernel (targets narrower than AVX2). A weight packed in one layout is only read in that
// layout.
struct NchwcLayout {
  int64_t block = 0;
  int64_t out_block = 0;
  bool operator==(const NchwcLayout&) const = default;
};
NchwcLayout nchwc_layout(const Conv2dGeometry& g);

// Whether the blocked forward takes this convolution on this CPU: one group, stride 1 or 2, and
// enough input channels that padding them to whole blocks wastes little.
bool nchwc_takes(const Conv2dGeometry& g);

// Floats of g's packed weight in `layout`.
int64_t nchwc_packed_size(const Conv2dGeometry& g, NchwcLayout layout);

// weight (out_channels, in_channels, kernel_h, kernel_w) -> packed (nchwc_packed_size floats), in
// this CPU's layout. transposed: `weight` is (in_channels, out_channels, kernel_h, kernel_w) with
// its taps in reverse order (the convolution whose input gradient g is: conv.cpp).
void nchwc_pack_weight(const Conv2dGeometry& g, const float* weight, bool transposed, float* packed);

// The planes of an activation kept in the blocked layout between convolutions (Note [blocked
// activations] in graph/passes.cpp): (N, ceil(C / block), H + 2 pad_h, W + 2 pad_w, block) floats,
// `block` the float32 vector width (NchwcLayout::block), zeros in the padding and in the channels
// past C. pad_h < 0: the operand is NCHW.
struct BlockedPlanes {
  int64_t pad_h = -1;
  int64_t pad_w = -1;
  bool blocked() const { return pad_h >= 0; }
  bool operator==(const BlockedPlanes&) const = default;
};

// The shape of an (N, C, H, W) activation in the blocked layout with `planes`' padding.
Shape blocked_shape(const Shape& nchw, int64_t block, BlockedPlanes planes);

// What the blocked forward does to each finished sum: out = activation(sum + bias + residual).
struct NchwcEpilogue {
  const float* bias = nullptr;      // (C_out) or null
  const float* residual = nullptr;  // (N, C_out, OH, OW), or blocked as `residual_planes` say, or null
  Activation activation = Activation::kNone;
  BlockedPlanes residual_planes;  // NCHW (may then be `out` itself, where `out` is NCHW too), or blocked
};

// out (N, C_out, OH, OW) = conv(input (N, C_in, H, W), weight) and the epilogue, with the weight
// packed by nchwc_pack_weight in `layout`, which must be this CPU's. The input and the output may
// be blocked instead, as `input_planes` and `out_planes` say; a blocked input's padding is at least
// g's (the convolution reads the planes from g's padding on).
void nchwc_forward(const Conv2dGeometry& g, const float* input, const float* packed, NchwcLayout layout,
                   const NchwcEpilogue& epilogue, float* out, BlockedPlanes input_planes = {},
                   BlockedPlanes out_planes = {});

// A convolution with fewer input channels than a block (an image's first layer) as a 1 x 1
// convolution over its patches (Note [patch convolution] in conv_nchwc.cpp): g's patch geometry,
// whose weight is g's weight viewed as (C_out, C_in kh kw, 1, 1); whether the blocked forward takes
// g that way (one group, few channels, and patches that fill blocks as nchwc_takes asks); and the
// forward, with the weight packed for the patch geometry in `layout` (its output NCHW or blocked;
// its input and residual NCHW).
Conv2dGeometry nchwc_patch_geometry(const Conv2dGeometry& g);
bool nchwc_patch_takes(const Conv2dGeometry& g);
void nchwc_patch_forward(const Conv2dGeometry& g, const float* input, const float* packed, NchwcLayout layout,
                         const NchwcEpilogue& epilogue, float* out, BlockedPlanes out_planes = {});

// Whether nchwc_weight_grad takes g: nchwc_takes it, and its output channels round up to pairs of
// vectors with at most a quarter added.
bool nchwc_weight_grad_takes(const Conv2dGeometry& g);

// grad_weight (C_out, C_in, kh, kw) = the sum over the batch of grad_out (N, C_out, OH, OW) times
// the input's (N, C_in, H, W) patches (Note [blocked weight gradient]), overwritten. For the
// convolutions nchwc_weight_grad_takes; the result does not depend on the thread count.
void nchwc_weight_grad(const Conv2dGeometry& g, const float* grad_out, const float* input, float* grad_weight);

}  // namespace ember::cpu

// The CPU 2-D convolution kernels: forward, gradient with respect to the input, and gradient with
// respect to the weight, by im2col + the packed GEMM (kernels/cpu/gemm.h) or direct kernels. The
// registry's entries send float32 convolutions that fill channel blocks to the blocked kernels
// (conv_nchwc.h) first; these are the reference they are tested against. Like every kernel they
// see raw pointers and sizes, never a Tensor; src/ops/conv.cpp validates, makes the operands
// contiguous and allocates.
#pragma once

#include <cstdint>

#include "ember/attrs.h"
#include "ember/dtype.h"
#include "ember/shape.h"

namespace ember::cpu {

// One convolution's geometry. Input (batch, in_channels, in_height, in_width), weight
// (out_channels, in_channels / groups, kernel_h, kernel_w), output (batch, out_channels,
// out_height, out_width), all contiguous. The sizes are already checked: every one positive
// (padding may be 0), channels divisible by groups, the output at least 1 x 1. The output may be
// smaller than the input's size gives (conv_transpose2d's output_padding asks for an input
// gradient with rows and columns no output position reads: they get zeros).
struct Conv2dGeometry {
  int64_t batch = 1;
  int64_t in_channels = 1;
  int64_t in_height = 1;
  int64_t in_width = 1;
  int64_t out_channels = 1;
  int64_t out_height = 1;
  int64_t out_width = 1;
  int64_t kernel_h = 1;
  int64_t kernel_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;
  int64_t pad_w = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t groups = 1;
};

// The geometry of a convolution of an (N, C, H, W) input with an (O, C / groups, kH, kW) weight,
// its output the size the attributes give (not pooled: Conv2dAttrs::max_pool is left out).
Conv2dGeometry conv2d_geometry(const Conv2dAttrs& attrs, const Shape& input, const Shape& weight);

// out = conv(input, weight) + bias (bias: (out_channels) or null), then out = activation(out +
// residual) (residual: laid out as out, or null), each value's activation as the elementwise op
// computes it. float32 and float64.
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* input, const void* weight, const void* bias,
                    void* out, const void* residual = nullptr, Activation activation = Activation::kNone);

// Whether the forward of g (the convolution's own output size) pools over max_pool x max_pool
// windows as it stores its outputs (Conv2dAttrs::max_pool; Note [pooled convolution] in
// conv_direct.cpp), rather than through a buffer of the whole output: the compiler fuses a max
// pooling into a convolution only then.
bool conv2d_pools_directly(DType dtype, const Conv2dGeometry& g, int64_t max_pool);

// grad_input = the transposed convolution of grad_out with weight. float32 and float64.
void conv2d_backward_input(DType dtype, const Conv2dGeometry& g, const void* grad_out, const void* weight,
                           void* grad_input);

// grad_weight = sum over the batch of grad_out (x) the input's patches. float32 and float64. The
// result does not depend on the thread count (Note [deterministic weight gradient] in conv.cpp).
void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* grad_out, const void* input,
                            void* grad_weight);

}  // namespace ember::cpu

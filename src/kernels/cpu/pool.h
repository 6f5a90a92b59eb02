// The CPU 2-D pooling kernels (max, average, adaptive average), forward and backward. They see
// contiguous (planes, height, width) buffers, a plane being one (image, channel) pair; the op layer
// (src/ops/pool.cpp) checks the arguments and computes the output size.
#pragma once

#include <cstdint>

#include "ember/attrs.h"
#include "ember/dtype.h"

namespace ember::cpu {

// Window w of output row oh covers input rows oh * stride_h - pad_h + i * dilation_h for i in
// [0, kernel_h) (columns alike); positions outside the input are padding.
struct Pool2dGeometry {
  int64_t planes = 1;
  int64_t in_height = 1;
  int64_t in_width = 1;
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
};

// out = the max of each window; indices = where it is (h * in_width + w within the plane). NaN
// wins, as in PyTorch. float32 and float64.
void max_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* in, void* out, int64_t* indices);
// max_pool2d_forward (without indices) between blocked convolutions (Pool2dAttrs::blocked_input and
// blocked_output; Note [blocked activations] in graph/passes.cpp): `in` and `out` are float32
// blocked planes of `block` lanes (this CPU's vector width) padded by in_pad and out_pad, g's sizes
// the unpadded ones and g.planes the images times the channel blocks. Every lane takes each
// window's values in max_pool2d_forward's order and by its rule; the output's padding is zeroed.
void max_pool2d_blocked(const Pool2dGeometry& g, int64_t block, const float* in, Pair in_pad, float* out, Pair out_pad);
// grad_in (overwritten) = grad_out routed to the saved indices, summed where windows share one.
void max_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, const int64_t* indices,
                         void* grad_in);

// out = the mean of each window (no dilation), dividing by the window's size clipped to the padded
// input when count_include_pad, else by its elements inside the input (PyTorch's rule).
void avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* in, void* out);
void avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, bool count_include_pad, const void* grad_out,
                         void* grad_in);

// Output (oh, ow) averages input rows [floor(oh * H / OH), ceil((oh + 1) * H / OH)) (columns
// alike). Uses planes, in_* and out_* of the geometry only.
void adaptive_avg_pool2d_forward(DType dtype, const Pool2dGeometry& g, const void* in, void* out);
void adaptive_avg_pool2d_backward(DType dtype, const Pool2dGeometry& g, const void* grad_out, void* grad_in);

}  // namespace ember::cpu

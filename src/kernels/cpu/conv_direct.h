// Direct convolution kernels for stride 1, dilation 1 and one group (conv_direct.cpp): conv.cpp
// chooses them for small kernels over few channels (Note [direct convolution] in conv.cpp) and
// does the padding and the splitting into tasks.
#pragma once

#include <cstdint>

#include "ember/attrs.h"

namespace ember::cpu {

// One image (or, for the weight gradient, the whole batch) already padded: input (in_channels,
// in_height, in_width) per image, weight (out_channels, in_channels, kernel_h, kernel_w), the
// output (out_channels, out_height, out_width) with out_height = in_height - kernel_h + 1 and the
// same for the width. kernel_w is at most 7. With pool = 2 the activated outputs are max-pooled
// over 2 x 2 windows at stride 2 (floor mode: an odd last row or column is dropped) as they are
// stored, and `out` is (out_channels, out_height / 2, out_width / 2); the residual keeps the
// convolution's layout.
template <class T>
struct DirectConv {
  const T* input = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;  // (out_channels) or null
  T* out = nullptr;
  // The epilogue after the bias: out = activation(out + residual), residual laid out as out (or null).
  const T* residual = nullptr;
  Activation activation = Activation::kNone;
  int64_t in_channels = 0, in_height = 0, in_width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t pool = 1;  // 1 or 2
};

// out rows [y_begin, y_end) of output channels [co, co + channels) (rows of `out`: pooled rows
// when c.pool is 2).
template <class T>
void direct_forward_rows(const DirectConv<T>& c, int64_t co, int64_t channels, int64_t y_begin, int64_t y_end);

// grad_weight[o, ci, ky, :] for o in [co, co + channels) and ky in [ky0, ky1), summed over images
// [0, batch) in order (c.input: the batch's padded images; grad_out: (batch, out_channels,
// out_height, out_width)); each element the same whatever range of kernel rows it was summed in.
template <class T>
void direct_weight_rows(const DirectConv<T>& c, const T* grad_out, int64_t batch, int64_t co, int64_t channels,
                        int64_t ci, int64_t ky0, int64_t ky1, T* grad_weight);

}  // namespace ember::cpu

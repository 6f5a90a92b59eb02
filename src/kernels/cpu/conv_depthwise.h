// Depthwise convolution (conv_depthwise.cpp, Note [depthwise convolution]): every input channel is
// its own group, with one or more output channels (MobileNet's and ConvNeXt's 3 x 3 and 7 x 7
// layers; Mamba's causal conv1d as a 1 x k one). conv.cpp sends such convolutions here when the
// `*_takes` test says so; the im2col path stays their reference.
#pragma once

#include <cstdint>

#include "ember/attrs.h"
#include "kernels/cpu/conv.h"

namespace ember::cpu {

// groups == in_channels > 1 (each output channel reads input channel o / (out_channels /
// in_channels)) and a stride along the width of 1 or 2: the forward and the weight gradient.
bool depthwise_takes(const Conv2dGeometry& g);

// depthwise_takes, and stride 2 along the width or stride 1 both ways with padding no wider than the
// kernel's reach (then the input gradient is a depthwise forward of the padded output gradient with
// the weight flipped).
bool depthwise_input_grad_takes(const Conv2dGeometry& g);

// out = activation(conv(input, weight) + bias + residual). float and double.
template <class T>
void depthwise_forward(const Conv2dGeometry& g, const T* input, const T* weight, const T* bias, T* out,
                       const T* residual, Activation activation);

template <class T>
void depthwise_backward_input(const Conv2dGeometry& g, const T* grad_out, const T* weight, T* grad_input);

// grad_weight (out_channels, 1, kernel_h, kernel_w) = the sum over images of grad_out * input.
template <class T>
void depthwise_backward_weight(const Conv2dGeometry& g, const T* grad_out, const T* input, T* grad_weight);

}  // namespace ember::cpu

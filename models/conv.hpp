#pragma once
// LeNet-5's 5 x 5 convolutions fused with their ReLUs, for forward passes
// without gradients (evaluation, and the ranking of aggregated points).
//
// LibTorch 1.13's CPU convolution and ReLU take 6.1 us a point for
// LeNet-5's first convolution (1 -> 6 channels, 28 x 28, padding 2: 118k
// multiply-adds, a fifth of what the core's vector units can do) and 3.1 us
// for its second (6 -> 16 channels, 14 x 14 -> 10 x 10, 240k). The direct
// kernels here take 1.3 us and 2.4 us (one thread, batch 128; at batch 1,
// 26 -> 1.9 us and 24 -> 4.2 us), and LeNet-5's whole forward pass without
// gradients drops from 12 us a point to 6.4 us (80 -> 32 us at batch 1).
// They sum in another order than torch: values differ in the last bits.
//
// The first convolution puts its vectors along the output rows (6 channels
// x 2 vectors of a row at a time); the second along the output channels (16
// channels, 10 pixels of a row at a time, then 16 x 16 transposes), its
// rows being only 10 wide. The code is chosen at run time: AVX-512, else
// AVX2 with FMA (the first convolution only: 2.5 us); else torch. Torch's
// own torch::relu(conv->forward(x)) also runs whenever a gradient is needed
// (grad mode on and the input or a parameter requiring it), and for
// anything but float32 contiguous CPU tensors and a stride-1, undilated,
// ungrouped, zero-padded 5 x 5 convolution with a bias, or a shape whose
// vectors would be mostly padding.

#include <torch/nn/modules/conv.h>
#include <torch/types.h>

#include <vector>

namespace eg::learning {

/// torch::relu(conv->forward(x)) for x [N, C, H, W].
torch::Tensor conv2d_relu(const torch::nn::Conv2d& conv, const torch::Tensor& x);

/// The vector widths (floats a vector) of the kernels this processor runs,
/// the one conv2d_relu uses first: 16 (AVX-512), 8 (AVX2 with FMA); empty
/// where torch does every convolution.
std::vector<int> conv_vector_widths();

/// conv2d_relu with the kernels of one of conv_vector_widths() (so that each
/// code path can be tested on a processor that runs several).
torch::Tensor conv2d_relu(const torch::nn::Conv2d& conv, const torch::Tensor& x,
                          int vector_width);

} // namespace eg::learning

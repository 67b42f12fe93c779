#pragma once
// 2 x 2 max pooling with stride 2, the pooling of LeNet-5.
//
// LibTorch 1.13's CPU `max_pool2d` takes about 17 us a point for LeNet-5's
// first pooling (6 x 28 x 28), more than both convolutions together, and
// half of an evaluation pass; this one takes 0.7 us (1.5 us with the
// winners a backward pass needs) and gives the same values, the same
// gradients and the same choice among equal maxima (the first in row-major
// order, NaN wins). See bench/README.md, "aggregation".

#include <torch/types.h>

namespace eg::learning {

/// Max over each 2 x 2 window of x [N, C, H, W] (stride 2, floor mode), as
/// torch::max_pool2d(x, 2). Float CPU tensors with even H and W take the
/// fast path (keeping 1-byte indices only when a gradient will be needed);
/// anything else goes to torch::max_pool2d.
torch::Tensor max_pool_2x2(const torch::Tensor& x);

} // namespace eg::learning

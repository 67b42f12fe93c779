#pragma once
// Internals of the input data aggregator, declared for its tests.

#include "algorithms/edgegossip/aggregator.hpp"

#include <cstdint>

namespace eg::learning::detail {

/// d' of the incremental SVD: max(1, round(log2(0.1 d / ratio))), at most d.
int64_t incremental_svd_dims(int64_t d, int64_t ratio);

/// The reduced points X' [N, d'] of the flattened points X [N, d] (float32).
torch::Tensor reduce(const torch::Tensor& x, const aggregator_options& opt);

} // namespace eg::learning::detail

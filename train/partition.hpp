#pragma once
// Sharding a training set across platforms: IID (shuffled, sizes by share)
// and non-IID label skew (per class, Dirichlet(alpha) proportions). No torch.

#include <cstdint>
#include <vector>

namespace eg::learning {

/// Sample indices of each platform, disjoint. `shares[i]` is platform i's
/// fraction of the `labels.size()` samples (they sum to at most 1).
using shards = std::vector<std::vector<int64_t>>;

shards partition_iid(const std::vector<int64_t>& labels, const std::vector<double>& shares,
                     uint64_t seed);

/// Label skew: for every class, its samples are split among platforms by
/// proportions drawn from Dirichlet(alpha) and weighted by the shares, so
/// shard sizes still follow `shares` approximately. Small alpha = strong skew.
shards partition_dirichlet(const std::vector<int64_t>& labels, const std::vector<double>& shares,
                           double alpha, int64_t num_classes, uint64_t seed);

} // namespace eg::learning

#pragma once
// EdgeGossip's input data aggregator (pre-training, per platform): reduce the
// shard's dimensionality, divide it per class into M = N / ratio subsets of
// similar points, and represent each subset by the mean of its ORIGINAL
// points (eq. 1), carrying the class label. EdgeGossip (Han et al., IEEE
// TPDS 2021); docs/ALGORITHMS.md, "Aggregated data points".

#include "models/dataset.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace eg::learning {

enum class reduction {
  svd,              ///< top d' = 10 right singular vectors
  incremental_svd,  ///< Gorrell's generalized Hebbian algorithm, d' = log2(0.1 d / ratio)
  hash,             ///< random-projection fingerprint of 10 values
};

enum class division {
  kmeans,  ///< faiss k-means, 20 iterations, N_c / ratio centroids per class
  lsh,     ///< locality-sensitive hashing into N_c / ratio buckets per class
};

struct aggregator_options {
  reduction reduce = reduction::svd;
  division divide = division::kmeans;
  int64_t ratio = 10;  ///< aggregation ratio: points per aggregated point
  uint64_t seed = 1;
};

/// "svd-kmeans", "isvd-lsh" or "hash-kmeans" (the paper's three
/// combinations); throws std::invalid_argument naming the choices.
aggregator_options aggregator_from_name(const std::string& name, int64_t ratio, uint64_t seed);

struct aggregated_points {
  torch::Tensor points;  ///< [M, sample dims...] float32: mean of each subset's normalised points
  torch::Tensor labels;  ///< [M] int64: the subset's class
  std::vector<std::vector<int64_t>> members;  ///< per aggregated point: its training-set indices
  double reduce_seconds = 0;  ///< generation time per step
  double divide_seconds = 0;
  double mean_seconds = 0;
  int64_t size() const { return static_cast<int64_t>(members.size()); }
};

/// Aggregates the shard's points of `train`. Every subset holds points of one
/// class only; the subsets partition the shard. Deterministic for a seed.
aggregated_points aggregate(const dataset& train, const std::vector<int64_t>& shard,
                            const aggregator_options& opt);

/// `a` with its points normalised by `to` instead of `from` (what they were
/// made with; empty: not normalised): normalisation is affine per channel
/// or feature, so the mean of normalised points moves with it. Shares
/// labels and members with `a`.
aggregated_points renormalised(const aggregated_points& a, const data::normalisation& from,
                               const data::normalisation& to);

/// Bytes for the store, and back (throws std::runtime_error when damaged).
std::string serialize(const aggregated_points& a);
aggregated_points deserialize_aggregated(const std::string& bytes);

} // namespace eg::learning

#pragma once
// EdgeGossip's accuracy-aware trainer (Algorithm 2): rank aggregated points
// by their loss under the current model and build the epoch's iterations
// from whole ranked subsets. ALGORITHMS.md section 1.

#include "learning/aggregator.hpp"
#include "learning/model.hpp"
#include "learning/trainer.hpp"

#include <cstdint>
#include <vector>

namespace eg::learning {

/// e_j: the loss of each aggregated point under `model` (no gradients; the
/// model's mode is restored).
std::vector<float> aggregated_losses(classifier& model, const aggregated_points& a);

/// Indices of the aggregated points by loss, highest first (ties: lower
/// index first).
std::vector<int64_t> rank_by_loss(const std::vector<float>& losses);

/// Walks the ranked subsets, appending whole subsets to the next batch until
/// it holds >= `batch` points, and stops once `budget` points are planned
/// (the last batch may overshoot by less than one subset). Points within a
/// batch keep their subsets' order.
epoch_plan ranked_plan(const std::vector<std::vector<int64_t>>& members,
                       const std::vector<int64_t>& ranking, int64_t batch, int64_t budget);

} // namespace eg::learning

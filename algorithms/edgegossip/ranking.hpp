#pragma once
// EdgeGossip's accuracy-aware trainer (Algorithm 2): rank aggregated points
// by their loss under the current model and build the epoch's iterations
// from whole ranked subsets. EdgeGossip (Han et al., IEEE TPDS 2021);
// docs/ALGORITHMS.md, "Accuracy-aware training (Algorithm 2)".

#include "algorithms/edgegossip/aggregator.hpp"
#include "models/model.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <random>
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

/// The accuracy-aware trainer's epoch as this project runs it. The ranking
/// chooses WHICH subsets are trained: within each class, the highest-loss
/// whole subsets until the class has its share of `budget` (budget x its
/// share of the points); the chosen points are then shuffled into batches of
/// `batch`. Two departures from a literal reading of Algorithm 2, both
/// measured: walking the subsets in ranked order makes each batch hold one
/// hard class, and taking the top of one global ranking starves the easy
/// classes; with either, SGD did not learn (averaged accuracy 0.31 and 0.64
/// after 4 epochs against 0.85 for GoSGD). `classes[j]` is subset j's label.
epoch_plan accuracy_aware_plan(const std::vector<std::vector<int64_t>>& members,
                               const std::vector<int64_t>& classes,
                               const std::vector<int64_t>& ranking, int64_t batch,
                               int64_t budget, std::mt19937_64& rng);

} // namespace eg::learning

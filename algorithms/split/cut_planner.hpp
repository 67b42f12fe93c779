#pragma once
// Where to cut a split model so that unequal machines finish their stages
// together (docs/SPLIT.md, "Cuts from the machines' speeds"). In every mode
// but backprop the stages work at once, each on its own batch, so a batch
// takes as long as the slowest stage: its layers' time on the fast machine
// times its machine's slowdown, and a stage below the last does more passes
// per batch than the last (delayed: the forward pass again before the
// backward one). No torch here: the layers' times are measured elsewhere
// (learning::measure_layer_costs, split.hpp).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace eg::learning {

/// One layer's seconds per batch on the fastest machine.
struct layer_cost {
  double forward = 0;
  double backward = 0;
};

/// Passes per batch of a stage below the last (the last does one forward
/// and one backward pass in every mode).
struct stage_passes {
  double forward = 1;
  double backward = 1;
};

/// Seconds per batch of each stage when the model of `costs` is cut after
/// the layers `cuts` and stage k runs `slowdowns[k]` times slower.
std::vector<double> stage_seconds(const std::vector<layer_cost>& costs,
                                  const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns, stage_passes below);

/// The cuts (strictly increasing layer indices, as make_pipeline takes
/// them) into slowdowns.size() contiguous stages of at least one layer
/// that make the slowest stage as fast as it can be; among equal ones, the
/// first found. Throws argument_error when there are fewer layers than
/// stages, a slowdown below 1 or a negative cost.
std::vector<int64_t> balanced_cuts(const std::vector<layer_cost>& costs,
                                   const std::vector<double>& slowdowns, stage_passes below);

/// Which machine runs each stage, and where the model is cut.
struct placement {
  /// machines[k]: the machine (an index into the slowdowns given) that
  /// runs stage k; a permutation of 0..n-1.
  std::vector<std::size_t> machines;
  /// As balanced_cuts gives them, for the stages in this order.
  std::vector<int64_t> cuts;
  /// Seconds per batch of the slowest stage.
  double slowest = 0;
};

/// The order of the machines along the pipeline, and the cuts, that make
/// the slowest stage as fast as it can be. The stages' order is fixed by
/// the model's layers, the machines' is not: a slow machine can take the
/// cheap first layers and hand the rest to a fast one, where a fast first
/// stage would leave it only a too expensive middle layer. Every distinct
/// order of the slowdowns is tried (machines of equal slowdown are
/// interchangeable); the given order wins ties, then the first found.
/// Throws argument_error as balanced_cuts does, and for more than 8
/// machines (8! orders).
placement balanced_placement(const std::vector<layer_cost>& costs,
                             const std::vector<double>& slowdowns, stage_passes below);

} // namespace eg::learning

#pragma once
// Where to cut a split model so that unequal machines finish their stages
// together (docs/SPLIT.md, "Cuts from the machines' speeds"). In every mode
// but backprop the stages work at once, each on its own batch, so a batch
// takes as long as the slowest stage: its layers' time on the fast machine
// times its machine's slowdown, and a stage below the last does more passes
// per batch than the last (delayed: the forward pass again before the
// backward one). No torch here: the layers' times are measured elsewhere
// (learning::measure_layer_costs, split.hpp), or each run of layers timed
// as a stage of its own (learning::measure_stage_costs): what a stage
// costs beyond its layers' passes (the stashed copy, the weight
// prediction, the optimizer's step, the loss) is then counted too.

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

/// Seconds per batch, on the fastest machine, of every contiguous run of
/// layers trained as one stage: at(first, last) for the stage of layers
/// first..last (both included). A run that starts at layer 0 is always a
/// first stage, one that ends at the last layer always the last, so one
/// figure per run covers what each role costs.
class stage_costs {
public:
  /// `layers` layers, every run costing 0; throws argument_error below 1.
  explicit stage_costs(int64_t layers);
  /// Each stage as the sum of its layers' passes: `below` passes a batch
  /// for a stage that does not end at the last layer, one forward and one
  /// backward for the last. Throws argument_error for no layers, a
  /// negative cost or negative passes.
  static stage_costs from_layers(const std::vector<layer_cost>& costs, stage_passes below);

  int64_t layers() const { return layers_; }
  /// Throws argument_error outside 0 <= first <= last < layers().
  double at(int64_t first, int64_t last) const;
  /// Throws argument_error outside that range, or for a negative or
  /// non-finite `seconds`.
  void set(int64_t first, int64_t last, double seconds);

private:
  size_t index(int64_t first, int64_t last) const;
  int64_t layers_;
  std::vector<double> seconds_;
};

/// Seconds per batch of each stage when the model is cut after the layers
/// `cuts` and stage k runs `slowdowns[k]` times slower. Throws
/// argument_error for cuts that are not increasing layers of the model, or
/// not one fewer than the slowdowns.
std::vector<double> stage_seconds(const stage_costs& costs, const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns);

/// The batches in flight (split.in_flight) that keep the slowest stage
/// busy under the one-forward-one-backward schedule: PipeDream's NOAM (the
/// number of optimal active minibatches), taken for stages of unequal time.
/// A batch's place at stage k is free again only when its gradient has come
/// back from the stages above, and stage k holds at most in_flight - k
/// batches, so in_flight is the least that lets every stage k below the last
/// hold its round trip (its time and the times of the stages above it) over
/// the slowest stage's, rounded up: for the first stage, the stages' summed
/// time over the slowest's. Fewer leave the slowest stage waiting; more only
/// make the gradients staler. 1 for one stage. Throws argument_error for no
/// stages, or a figure not positive and finite.
int64_t batches_to_fill(const std::vector<double>& stage_seconds);

/// The cuts (strictly increasing layer indices, as make_pipeline takes
/// them) into slowdowns.size() contiguous stages of at least one layer
/// that make the slowest stage as fast as it can be; among equal ones, the
/// first found. Throws argument_error when there are fewer layers than
/// stages or a slowdown is below 1.
std::vector<int64_t> balanced_cuts(const stage_costs& costs, const std::vector<double>& slowdowns);

/// The same two from each layer's cost alone (stage_costs::from_layers).
std::vector<double> stage_seconds(const std::vector<layer_cost>& costs,
                                  const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns, stage_passes below);
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
placement balanced_placement(const stage_costs& costs, const std::vector<double>& slowdowns);
/// The same from each layer's cost alone (stage_costs::from_layers).
placement balanced_placement(const std::vector<layer_cost>& costs,
                             const std::vector<double>& slowdowns, stage_passes below);

} // namespace eg::learning

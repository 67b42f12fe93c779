#pragma once
// A stage of a split model (docs/SPLIT.md): a thin actor over one
// learning::stage_trainer. Activations (and the labels) go up from stage to
// stage, gradients come down; the last stage holds the loss. In `backprop`
// mode a stage updates when the true gradient of its output comes down, and
// the first stage sends the next batch only then: every stage waits for the
// ones above. In `synthetic` mode every stage but the last updates at once
// from its synthetic-gradient module and regresses the module toward the
// gradient when it comes; the first stage keeps up to `in_flight` batches in
// the pipeline.
//
// The first stage drives the run: it holds the training and test sets,
// sends the batches of each epoch, counts the batches the last stage
// finished, evaluates the chained stages on the test set after every epoch
// (test batches up the pipeline, without training) and answers the run's
// epochs when the last is done.
//
// Each stage serves its messages one at a time from a queue of its own, so
// that an emulated slowdown (a stage on a slower machine) idles between two
// of them without holding a thread, and it counts its busy and idle time and
// the bytes it sent up and down.

#include "actors/interfaces.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace eg::learning {
struct dataset;
class stage_trainer;
}

namespace eg::actors {

/// One epoch of a split run, as the first stage saw it.
struct split_epoch {
  uint32_t epoch = 0;
  double train_loss = 0;      ///< mean over the epoch's batches (at the last stage)
  double train_accuracy = 0;  ///< of the batches as trained
  double test_accuracy = 0;   ///< the chained stages on the test set after the epoch
  double seconds = 0;         ///< training time since the run began (evaluations excluded)
};

/// What a stage did so far.
struct stage_stats {
  double busy_seconds = 0;     ///< computing, emulated slowdown included
  double idle_seconds = 0;     ///< nothing to do: waiting for the stages below or above
  double wall_seconds = 0;     ///< since its first message
  uint64_t bytes_up = 0;       ///< activations and labels sent to the stage above
  uint64_t bytes_down = 0;     ///< gradients sent to the stage below
  uint64_t batches = 0;        ///< training batches it forwarded
  double idle_share() const {
    return wall_seconds > 0 ? idle_seconds / wall_seconds : 0.0;
  }
};

}  // namespace eg::actors

// Local only: the driver answers its caller in the same process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(eg::actors::split_epoch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<eg::actors::split_epoch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(eg::actors::stage_stats)

namespace eg::actors {

using forward_atom = caf::atom_constant<caf::atom("forward")>;
using backward_atom = caf::atom_constant<caf::atom("backward")>;
using infer_atom = caf::atom_constant<caf::atom("infer")>;
using link_atom = caf::atom_constant<caf::atom("link")>;
using finished_atom = caf::atom_constant<caf::atom("finished")>;

using stage_actor = caf::typed_actor<
  // From the stage below: a batch's input and labels (tensors "input",
  // "labels"; iteration: the batch's id).
  caf::reacts_to<forward_atom, held_weights>,
  // From the stage above: the gradient of the loss w.r.t. this stage's
  // output for a batch (tensor "gradient"; iteration: the batch's id).
  caf::reacts_to<backward_atom, held_weights>,
  // Evaluation: a test batch up the pipeline, no training.
  caf::reacts_to<infer_atom, held_weights>,
  // From whoever builds the pipeline: the stages below and above (null:
  // none) and the first stage, to whom the last reports each batch.
  caf::reacts_to<link_atom, caf::actor, caf::actor, caf::actor>,
  // From the last stage to the first: batch id, whether it was a test
  // batch, its loss (summed over its samples), correct answers, samples.
  caf::reacts_to<finished_atom, uint64_t, bool, double, int64_t, int64_t>,
  // To the first stage: train this many epochs; answered with every epoch.
  caf::replies_to<run_atom, uint32_t>::with<std::vector<split_epoch>>,
  // What the stage did so far.
  caf::replies_to<stats_atom>::with<stage_stats>>;

struct stage_args {
  std::shared_ptr<learning::stage_trainer> trainer;
  /// Works this many times slower: idles (compute seconds x (slowdown - 1))
  /// after each message, as an emulated slower machine.
  double slowdown = 1;
  // The first stage only:
  std::shared_ptr<const learning::dataset> train_set;
  std::shared_ptr<const learning::dataset> test_set;
  int64_t batch = 64;
  /// Batches in the pipeline at once (synthetic mode; backprop: 1).
  int64_t in_flight = 4;
  uint64_t seed = 1;  ///< the epochs' shuffles
};

stage_actor spawn_stage(caf::actor_system& sys, stage_args args);

/// Links `stages` (first to last) into a pipeline.
void link_stages(const std::vector<stage_actor>& stages);

} // namespace eg::actors

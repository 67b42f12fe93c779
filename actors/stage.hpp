#pragma once
// A stage of a split model (docs/SPLIT.md): a thin actor over one
// learning::stage_trainer. Activations (and the labels) go up from stage to
// stage, gradients come down; the last stage holds the loss. In `backprop`
// mode a stage updates when the true gradient of its output comes down, and
// the first stage sends the next batch only then: every stage waits for the
// ones above. In `synthetic` mode every stage but the last updates at once
// from its synthetic-gradient module and regresses the module toward the
// gradient when it comes. In `delayed` mode stages update from the true
// gradient when it comes, a few batches late (`stashed`: taken at the
// parameters the batch's forward pass ran on, PipeDream's weight stashing);
// in `corrected` mode at once from the synthetic gradient, then by the true
// one's difference. In every
// mode but backprop the first stage keeps up to `in_flight` batches in the
// pipeline.
//
// The first stage drives the run with a learning::split_driver: it holds
// the training and test sets, sends the batches of each epoch, counts the
// batches the last stage finished, evaluates the chained stages on the test
// set after every epoch (test batches up the pipeline, without training),
// has every stage checkpoint to its node's store after each epoch, and ends
// the run.
//
// Stages find each other in two ways: link_stages() for a pipeline in one
// process, or the node, which tells each of its stages every stage of the
// cluster it knows (stages_atom): handles, and the weights lane of each
// one's node. Tensors go to a stage on another node on the weights lane
// (target "@stageK"), when there is one; control (finished, forget, save)
// goes through CAF. While a stage is missing (its node down) the first
// stage sends nothing; when all are back it sends the batches that were in
// the pipeline again, and every stage forgets what it held of them. A batch
// that never comes back (a message lost) is sent again after
// `resend_after` seconds without progress.
//
// Each stage watches its steps with a learning::runaway_guard; when one runs
// away, the first stage has every stage go back to its last checkpoint with
// a smaller learning rate and starts the epoch again (docs/SPLIT.md,
// "Runaways").
//
// Each stage serves its messages one at a time from a queue of its own, so
// that an emulated slowdown (a stage on a slower machine) idles between two
// of them without holding a thread, and it counts its busy and idle time and
// the bytes it sent up and down.

#include "actors/interfaces.hpp"
#include "algorithms/split/runaway_guard.hpp"
#include "algorithms/split/split_driver.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace eg::data {
class dataset;
}
namespace eg::learning {
using data::dataset;
class stage_trainer;
}
namespace eg::messages {
class lane;
}

namespace eg::actors {

using learning::split_epoch;

/// What a stage did so far.
struct stage_stats {
  double busy_seconds = 0;     ///< computing, emulated slowdown included
  double idle_seconds = 0;     ///< nothing to do: waiting for the stages below or above
  double wall_seconds = 0;     ///< since its first message
  /// CPU time of its training messages (forward and backward) on this
  /// machine, this thread's alone: no emulated slowdown, no wait for a core
  double train_cpu_seconds = 0;
  uint64_t bytes_up = 0;       ///< activations and labels sent to the stage above
  uint64_t bytes_down = 0;     ///< gradients sent to the stage below
  uint64_t batches = 0;        ///< training batches it forwarded
  uint64_t rollbacks = 0;      ///< times it went back to its checkpoint (runaways)
  uint64_t skipped_steps = 0;  ///< updates not applied: their gradient was not finite
  double learning_rate = 0;    ///< its SGD's, now
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

using batch_atom = caf::atom_constant<caf::atom("batch")>;
using link_atom = caf::atom_constant<caf::atom("link")>;
using finished_atom = caf::atom_constant<caf::atom("finished")>;
using forget_atom = caf::atom_constant<caf::atom("forget")>;
using stages_atom = caf::atom_constant<caf::atom("stages")>;
using diverged_atom = caf::atom_constant<caf::atom("diverged")>;
using rollback_atom = caf::atom_constant<caf::atom("rollback")>;

using stage_actor = caf::typed_actor<
  // A batch, by its direction: forward, from the stage below, its input
  // and labels (tensors "input", "labels"); backward, from the stage above,
  // the gradient of the loss w.r.t. this stage's output (tensor
  // "gradient"); infer, a test batch up the pipeline, no training.
  caf::reacts_to<batch_atom, held_stage_batch>,
  // From whoever builds a pipeline in one process: every stage, first to
  // last (its neighbours, the first stage, to whom the last reports each
  // batch, and whom the first stage tells to forget, save or roll back).
  caf::reacts_to<link_atom, std::vector<caf::actor>>,
  // From the node: every stage of the cluster, first to last (null: not
  // known now), and the weights lane of each one's node ("": this process,
  // or none: through CAF).
  caf::reacts_to<stages_atom, std::vector<caf::actor>, std::vector<std::string>>,
  // From the last stage to the first: batch id, whether it was a test
  // batch, its loss (summed over its samples), correct answers, samples.
  caf::reacts_to<finished_atom, uint64_t, bool, double, int64_t, int64_t>,
  // From the first stage: batches below this id will not come back; drop
  // what is held of them.
  caf::reacts_to<forget_atom, uint64_t>,
  // From the first stage: checkpoint to the node's store (run, epochs done).
  caf::reacts_to<checkpoint_atom, std::string, uint32_t>,
  // To the first stage: stage K is running away, and why (its runaway guard).
  caf::reacts_to<diverged_atom, uint64_t, std::string>,
  // From the first stage: go back to the last checkpoint, multiply the
  // learning rate by this factor, drop batches below this id; answered with
  // the new learning rate.
  caf::replies_to<rollback_atom, double, uint64_t, bool>::with<double>,
  // To the first stage: train this many epochs; answered with every epoch.
  caf::replies_to<run_atom, uint32_t>::with<std::vector<split_epoch>>,
  // What the stage did so far.
  caf::replies_to<stats_atom>::with<stage_stats>>;

/// A stage's saved state: what the first stage knew of the run besides its
/// layers, and the trainer's bytes (learning::stage_trainer::save).
struct stage_checkpoint {
  std::string fingerprint;  ///< of the run's settings (config::run_fingerprint)
  std::string run;
  uint32_t epochs_done = 0;
  std::vector<split_epoch> history;  ///< the first stage: every epoch so far
  std::string trainer;
};
/// Encodes `c` with a checksum; decode_stage_checkpoint throws
/// learning::stage_error naming what is wrong (not a checkpoint, corrupt,
/// truncated).
std::string encode_stage_checkpoint(const stage_checkpoint& c);
stage_checkpoint decode_stage_checkpoint(const std::string& bytes);
/// The store key of stage `index`'s checkpoint after `epochs` epochs.
std::string stage_checkpoint_key(size_t index, uint32_t epochs);
/// "@stageK": the stage's name in the directory, on the lane and in the store.
std::string stage_name(size_t index);

struct stage_args {
  std::shared_ptr<learning::stage_trainer> trainer;
  size_t index = 0;  ///< its place in the pipeline (0: the first)
  /// Works this many times slower, as an emulated slower machine: a
  /// message's results go out slowdown x its CPU seconds after its work
  /// began (the rest of that time after the work is idled).
  double slowdown = 1;
  /// In every mode but backprop, a stage below the last with a limit keeps
  /// to PipeDream's one-forward-one-backward schedule (split.schedule =
  /// "1f1b"; one_forward_one_backward_limit): while it holds fewer batches
  /// than this it serves the next forward, else the next backward, waiting
  /// for the one it needs, so every stage's steps come in the same order
  /// in every run; 0: the messages in the order they came.
  int64_t forward_limit = 0;
  // The first stage only:
  std::shared_ptr<const learning::dataset> train_set;
  std::shared_ptr<const learning::dataset> test_set;
  int64_t batch = 64;
  /// Batches in the pipeline at once (synthetic mode; backprop: 1).
  int64_t in_flight = 4;
  uint64_t seed = 1;  ///< the epochs' shuffles
  /// Test batches' size (evaluation after each epoch).
  int64_t test_batch = 1000;
  /// Batches not done after this many seconds without progress are sent again.
  double resend_after = 30;
  /// Each stage watches its gradients (the last also the loss); the first
  /// stage rolls every stage back and slows them when one runs away.
  learning::runaway_options runaway;
  // On a node (all optional for a pipeline in one process):
  std::string cluster_id;
  std::shared_ptr<messages::lane> lane;  ///< to stages on other nodes
  std::optional<store_actor> store;      ///< its node's store (checkpoints)
  std::string fingerprint;               ///< of the run's settings, saved with checkpoints
  /// The first stage on a node: run this many epochs once every stage is
  /// there, then write the metrics under output_dir/RUN and tell `node`.
  uint32_t epochs = 0;
  std::string run;          ///< the run's name (a resumed run's, or a new one)
  std::string output_dir;
  caf::actor node;          ///< its node: the run's end, each epoch's report
  std::string node_name;
  std::optional<stage_checkpoint> restore;  ///< loaded into the trainer at start
  /// The first stage on a node: why the run stopped with an error (it ran
  /// away past split.max_rollbacks), written before it tells `node`, so
  /// that the node's process exits with run_failure_exit_code
  /// (actors/node/runtime.hpp).
  std::shared_ptr<std::string> failure;
};

/// Spawns a stage detached: on a thread of its own.
stage_actor spawn_stage(caf::actor_system& sys, stage_args args);

/// The batches stage `index` holds at most under the one-forward-one-
/// backward schedule, `in_flight` being the first stage's: one fewer at
/// each stage up (those between it and the first stage), at least 1.
int64_t one_forward_one_backward_limit(int64_t in_flight, size_t index);

/// Links `stages` (first to last) into a pipeline.
void link_stages(const std::vector<stage_actor>& stages);

} // namespace eg::actors

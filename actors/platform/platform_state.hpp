#pragma once
// The platform actor's state and its parts, shared by platform.cpp (the
// actor's behaviour, how it is built) and platform_epochs.cpp (epochs,
// steps, commits: carrying out what its worker asks). Internal to
// actors/platform/.

#include "actors/platform/platform.hpp"

#include "algorithms/workers.hpp"
#include "algorithms/edgegossip/predictor.hpp"
#include "algorithms/split/runaway_guard.hpp"
#include "train/trainer.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

namespace eg::actors::platform_parts {

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

struct platform_state {
  static inline const char* name = "platform";
  platform_args args;
  std::unique_ptr<learning::platform_model> model;
  std::unique_ptr<learning::worker> worker;  ///< the training family's part
  learning::run_position at;                 ///< name, epoch, ratio, steps done
  bool waiting = false;  ///< a step waits for a peer's message (the overlap wait)
  clock::time_point waiting_since;  ///< since when (not counted as its speed)
  caf::actor balancer;
  caf::actor server;  ///< parameter-server strategies: null while none is reachable
  // Run position.
  uint32_t last_epoch = 0;
  messages::plan plan;   ///< the current epoch's plan
  /// A plan for another epoch that came while one ran (a balancer took over
  /// meanwhile, or one that lost its majority has not stopped yet), and its
  /// sender: the running epoch's report goes to it too, and the plan is
  /// taken once that report is out if it is for a later epoch.
  std::optional<std::pair<messages::plan, caf::actor>> next_plan;
  bool running = false;  ///< an epoch is in progress
  bool paused = false;
  clock::time_point paused_at;
  /// Who paused it last (the balancer, for the console or for a lost
  /// majority): a plan from another balancer resumes it (that one gave way).
  caf::actor_addr paused_by;
  bool step_queued = false;  ///< a step message is on its way (one chain of steps only)
  bool finished = false;
  uint32_t epochs_done = 0;  ///< completed epochs (what a checkpoint records)
  std::optional<epoch_report> last_report;  ///< of epoch epochs_done - 1
  std::optional<clock::time_point> training_start;
  // The current epoch.
  clock::time_point epoch_start;
  clock::time_point last_progress;
  double compute_seconds = 0;
  double loss_sum = 0;
  uint64_t samples = 0;
  uint64_t planned = 0;
  uint64_t planned_batches = 0;  ///< this epoch's iterations (for the warm-up)
  double epoch_lr = 0;           ///< the schedule's learning rate this epoch
  uint64_t iterations = 0;
  uint64_t refused = 0;
  int64_t rollbacks_before_epoch = 0;  ///< `rollbacks` when the epoch began
  /// Emulated slowdown: idle seconds the last step still owes before the
  /// next one (queue_step waits them out).
  double idle_owed = 0;
  clock::time_point created = clock::now();
  /// When it was built, on the wall clock: a checkpoint saved before then
  /// is another run's (a rollback does not take it).
  double created_unix = std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // Runaways (train.max_rollbacks): rollbacks so far, and whether one waits
  // for the store.
  int64_t rollbacks = 0;
  bool rolling_back = false;
  /// Reads every step's training loss: one that is not a finite number, or
  /// an average far above a uniform guess's, is a model that ran away.
  std::optional<learning::runaway_guard> guard;
  // Observations for the predictor: wall time (idle included) and points,
  // every second of training and at the end of each epoch.
  clock::time_point last_step_end;
  learning::observation_meter observed;

  learning::local_trainer& trainer() { return model->trainer(); }
  /// Seconds since the platform started (the worker's clock).
  double now() const { return seconds_since(created); }

  /// The emulated slowdown factor in force now (config + interference schedule).
  double slowdown() const {
    double s = args.platform.slowdown;
    if (!training_start)
      return s;
    auto t = seconds_since(*training_start);
    for (auto& step : args.platform.interference)
      if (step.at_seconds <= t)
        s = step.slowdown;
    return s;
  }

  messages::epoch_report report() {
    messages::epoch_report r;
    r.platform = args.platform.name;
    r.node = args.node_name;
    r.epoch = at.epoch;
    r.ratio = at.ratio;
    r.wall_seconds = seconds_since(epoch_start);
    r.compute_seconds = compute_seconds;
    r.samples = samples;
    r.planned_samples = planned;
    r.iterations = iterations;
    r.train_loss = iterations ? loss_sum / static_cast<double>(iterations) : 0;
    r.gossip_weight = worker->weight();
    r.messages_refused = refused;
    r.rollbacks = static_cast<uint32_t>(rollbacks - rollbacks_before_epoch);
    r.class_samples = trainer().class_samples();
    worker->fill_report(r);
    return r;
  }
};

using self_ptr = platform_actor::stateful_pointer<platform_state>;

/// Saves the platform's state to its node's store; `saved` (if given) gets
/// whether the store has it.
void checkpoint(self_ptr self, std::function<void(bool)> saved = nullptr);
/// Plans the epoch of the plan last received and steps.
void begin_epoch(self_ptr self);
/// A plan from `sender` (the balancer from now on): its epoch begins (or,
/// trained already, its report goes again).
void take_plan(self_ptr self, const messages::plan& p, caf::actor sender);
/// Queues the next step unless one is on its way.
void queue_step(self_ptr self);
/// Reports the epoch (and, on the asynchronous schedule, begins the next).
void finish_epoch(self_ptr self);
/// Carries out what the worker asked for.
void carry_out(self_ptr self, learning::worker_outcome out);
/// The cluster's normalisation from here on.
void use_normalisation(self_ptr self, const data::normalisation& norm);
void pause(self_ptr self);
void resume(self_ptr self);
/// One training iteration, unless the worker holds it back.
void step(self_ptr self);
/// The step `pending` gave a training loss that says the model ran away
/// (`why`, from the platform's runaway guard). It goes back to its newest
/// checkpoint of this run (to where it began before the first) with its
/// learning rate x train.rollback_lr_factor, and then the worker has its
/// step; after train.max_rollbacks the platform leaves the run.
/// Parameter-server workers do not roll back (the server's model replaces
/// theirs).
void roll_back(self_ptr self, learning::step_done pending, const std::string& why);
/// What the platform's runaway guard watches for: a training loss that is
/// not a finite number, or one whose average is above 10 x a uniform
/// guess's (ln of the classes; 23 for 10 classes), which no model that
/// learns comes near, however skewed its data. Not a rise from its lowest
/// loss: a merge may set a platform's loss back by that much.
learning::runaway_options platform_runaway_options();
/// Whether every parameter is a finite number (a checkpoint of a model
/// that ran away is not saved).
bool model_finite(platform_state& st);
/// What its rollbacks so far multiplied the learning rate by:
/// train.rollback_lr_factor ^ rollbacks.
double rollback_slowdown(const platform_state& st);

} // namespace eg::actors::platform_parts

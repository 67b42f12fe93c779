#pragma once
// The stage actor's state and its parts, shared by stage.cpp (messages:
// forward, backward, evaluation, the queue and the neighbours) and
// stage_run.cpp (the first stage's run: epochs, the in-flight window,
// checkpoints, the end). Internal to the stage actor.

#include "actors/stage.hpp"

#include "actors/node/node.hpp"
#include "actors/report_files.hpp"
#include "models/dataset.hpp"
#include "algorithms/split/split.hpp"
#include "train/trainer.hpp"
#include "messages/lane.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <filesystem>
#include <sstream>

namespace eg::actors::stage_parts {

using clock = std::chrono::steady_clock;
using work_atom = caf::atom_constant<caf::atom("work")>;
using stage_impl = stage_actor::extend<caf::reacts_to<work_atom>, caf::reacts_to<tick_atom>>;

inline double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

using messages::stage_direction;

/// Tensors as a message: views of contiguous CPU tensors, held by the message.
inline held_stage_batch tensor_message(stage_direction direction, uint64_t batch,
                                       std::vector<std::string> names,
                                       std::vector<torch::Tensor> tensors) {
  auto hold = std::make_shared<std::vector<torch::Tensor>>();
  held_stage_batch h;
  h.sender = "stage";
  h.value.direction = direction;
  h.value.batch = batch;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = tensors[i].contiguous();
    messages::tensor_view v;
    v.name = names[i];
    v.type = t.scalar_type() == torch::kLong ? messages::dtype::int64 : messages::dtype::float32;
    v.shape = t.sizes().vec();
    v.data = t.data_ptr();
    v.bytes = static_cast<size_t>(t.numel()) * t.element_size();
    h.wire_bytes += v.bytes;
    h.value.tensors.push_back(std::move(v));
    hold->push_back(std::move(t));
  }
  h.hold = std::move(hold);
  return h;
}

/// The tensor `name` of a message, checked for its type and size (the
/// stage trainer checks shapes against its layers).
inline torch::Tensor tensor_of(const held_stage_batch& m, const std::string& name, torch::ScalarType type) {
  for (auto& v : m.value.tensors) {
    if (v.name != name)
      continue;
    const auto want = type == torch::kLong ? messages::dtype::int64 : messages::dtype::float32;
    if (v.type != want)
      throw learning::stage_error("tensor '" + name + "' of batch "
                                  + std::to_string(m.value.batch) + " has the wrong type");
    int64_t n = 1;
    for (auto d : v.shape) {
      if (d < 0)
        throw learning::stage_error("tensor '" + name + "' has a negative dimension");
      n *= d;
    }
    if (static_cast<size_t>(n) * messages::element_size(v.type) != v.bytes)
      throw learning::stage_error("tensor '" + name + "': its shape and length disagree");
    // A copy: the message's buffer goes with the message.
    return torch::from_blob(const_cast<void*>(v.data), v.shape, type).clone();
  }
  throw learning::stage_error("batch " + std::to_string(m.value.batch) + " has no tensor '"
                              + name + "'");
}

/// Another stage: its handle and, on another node with a lane, the lane.
struct neighbour {
  caf::actor handle;
  std::optional<messages::lane_endpoint> lane;
  explicit operator bool() const { return static_cast<bool>(handle); }
};

struct stage_state {
  static inline const char* name = "stage";
  stage_args args;
  std::string me;  // "@stageK"
  neighbour below, above;
  caf::actor first;
  std::vector<caf::actor> all;  // every stage, first to last (null: missing)
  bool complete = false;        // every stage is known
  // Messages for a neighbour not known yet (its node not peered with ours
  // yet): sent when it is, at most max_waiting of each.
  std::deque<held_stage_batch> waiting_up, waiting_down;
  struct report {
    uint64_t batch;
    bool test;
    double loss_sum;
    int64_t correct, samples;
  };
  std::deque<report> waiting_reports;
  static constexpr size_t max_waiting = 64;
  std::deque<held_stage_batch> queue;
  bool working = false;  // a work message is on its way (or idling)
  // The one-forward-one-backward schedule (stage_args::forward_limit): the
  // forward of the last batch before the pipeline drains went through, so
  // no forward is waited for.
  bool drained = false;
  // An emulated slower machine (slowdown > 1) has its results ready only
  // after slowdown x the compute time: what a message's work sends waits
  // here until the stage's idle time after it has passed.
  bool holding = false;
  std::vector<std::function<void()>> outbox;
  // Statistics.
  std::optional<clock::time_point> started;
  std::optional<clock::time_point> idle_since;
  stage_stats stats;
  // The first stage: the run.
  std::optional<learning::split_driver> driver;
  std::optional<caf::typed_response_promise<std::vector<split_epoch>>> run;
  bool running = false;
  std::vector<split_epoch> epochs;
  double training_seconds = 0;
  std::optional<clock::time_point> training_since;
  clock::time_point last_progress = clock::now();
  bool watching = false;  // the resend check is armed
  // Runaways (docs/SPLIT.md): the guard over this stage's steps, what it
  // goes back to (its trainer as of its last checkpoint, or as it began),
  // and batches below `live_from` are dropped when they come.
  std::optional<learning::runaway_guard> guard;
  std::string good;
  uint32_t good_epochs = 0;
  // As it began (spawned or resumed): what a model stuck at a uniform guess
  // goes back to (its checkpoints since are of a model that never learnt).
  std::string start;
  bool diverging = false;  // told the first stage; waiting for the rollback
  uint64_t live_from = 0;
  // The first stage: rollbacks so far, and the stages yet to answer one.
  int64_t rollbacks = 0;
  size_t rolling_back = 0;

  bool is_first() const { return args.trainer->is_first(); }
  bool is_last() const { return args.trainer->is_last(); }
  bool synthetic() const { return args.trainer->mode() == learning::stage_mode::synthetic; }
  /// Stages update before the true gradient comes (every mode but backprop).
  bool pipelined() const { return learning::pipelined(args.trainer->mode()); }
};

using self_ptr = stage_impl::stateful_pointer<stage_state>;

/// Tells every other stage something (the first stage's control).
template <class... Ts>
void tell_all(self_ptr self, Ts&&... xs) {
  for (auto& s : self->state.all)
    if (s && s != caf::actor_cast<caf::actor>(self))
      self->send(caf::actor_cast<stage_actor>(s), xs...);
}

// stage_run.cpp
void save(self_ptr self, const std::string& run, uint32_t epochs);
void training_clock(stage_state& st);
/// The run is over: the metrics file and the node (a run on a node), or the
/// caller's answer (an error of code `diverged` with `failure`, if given).
void end_run(self_ptr self, const std::string& failure = {});
/// The first stage: what the driver says to send, sent; an epoch evaluated,
/// recorded and checkpointed.
void pump(self_ptr self);
/// Drops what this stage holds of batches below `below_id`: the pipeline
/// lost them and the first stage sends them again under new ids.
void forget(self_ptr self, uint64_t below_id);
/// Every stage is there again (or for the first time): the batches that
/// were in the pipeline go again, and the stages forget them.
void resume(self_ptr self);
/// The first stage's watch: batches with no progress for resend_after
/// seconds are taken as lost.
void watch(self_ptr self);
void start_run(self_ptr self, uint32_t epochs, uint32_t first, uint64_t first_id);
/// The first stage: stage `index` ran away. Every stage goes back to its
/// last checkpoint with a smaller learning rate and the epoch starts again,
/// or, after runaway.max_rollbacks, the run stops.
void runaway(self_ptr self, uint64_t index, const std::string& why);
/// This stage goes back to its last checkpoint, its learning rate x
/// `factor`, and drops batches below `live`; returns the new learning rate.
double roll_back(self_ptr self, double factor, uint64_t live, bool to_start);
/// Sets the neighbours from the cluster's stages; pauses or resumes the run.
void place(self_ptr self, const std::vector<caf::actor>& all, const std::vector<std::string>& lanes);

// stage.cpp
/// Queues a message and starts working if idle.
void enqueue(self_ptr self, held_stage_batch m);
/// Starts working if idle and a message waits (the schedule may take one
/// now: batches in flight were dropped).
void kick(self_ptr self);
/// Sends tensors to another stage: on the weights lane to a stage on
/// another node, as a typed message else. Returns the bytes sent.
size_t send_to(self_ptr self, const neighbour& to, held_stage_batch m);
void send_up(self_ptr self, stage_direction kind, uint64_t batch, const torch::Tensor& output,
             const torch::Tensor& labels, bool last = false);
void send_down(self_ptr self, uint64_t batch, const torch::Tensor& gradient);
/// The last stage tells the first what a batch gave.
void report(self_ptr self, uint64_t batch, bool test, double loss_sum, int64_t correct,
            int64_t samples);
/// Sends what waited for neighbours that are known now.
void flush_waiting(self_ptr self);
/// Serves one message of the queue.
void serve(self_ptr self, held_stage_batch m);
/// After a step: the guard hears its gradient's norm (and `loss`, at the
/// last stage); a runaway is told to the first stage.
void guard_step(self_ptr self, std::optional<double> loss);
/// Serves the next message of the queue (the results of the last one go
/// first: held for an emulated slowdown), then the next, after the idle time
/// the slowdown owes.
void do_work(self_ptr self);
/// Every stage of the run and their lanes; a first stage starts its run
/// once every stage is there.
void take_stages(self_ptr self, const std::vector<caf::actor>& all,
                 const std::vector<std::string>& lanes);

} // namespace eg::actors::stage_parts

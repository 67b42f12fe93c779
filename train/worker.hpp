#pragma once
// A platform's worker: what one training family does around the local steps
// of a platform. Before a step: may it step now (a commit in flight, a
// message awaited)? After a step: what goes out (gossip messages, a commit to
// the parameter server) and what comes next (another step, the epoch's end,
// a wait for an answer). And what it does with what arrives (a peer's
// weights, the server's model, a change of peers or server).
//
// Workers are plain classes without CAF: the platform actor
// (actors/platform/platform.cpp) owns the actor concerns (timers, the mixer,
// the store, the balancer, the node) and moves messages between them and its
// worker, which answers with a worker_outcome to carry out. One worker per
// training family (algorithms/*/): gossip (GoSGD and the push-sum family),
// EdgeGossip on top of it, and the parameter server's worker;
// algorithms/workers.hpp picks one for a strategy.

#include "config/config.hpp"
#include "train/trainer.hpp"
#include "messages/codec.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace eg::learning {

struct aggregated_points;

/// The platform's model as its worker reads and writes it: the local trainer
/// (model, optimizer, shard, loans) and the parameters in wire order.
class platform_model {
public:
  explicit platform_model(std::unique_ptr<local_trainer> trainer);

  local_trainer& trainer() { return *trainer_; }
  /// A new trainer for the same model (a checkpoint that did not fit: the
  /// optimizer starts afresh).
  void replace_trainer(std::unique_ptr<local_trainer> trainer);

  /// The parameters on the CPU, up to date (a GPU replica copied back
  /// first).
  std::vector<torch::Tensor>& params() {
    trainer_->to_host();
    return cpu_;
  }
  /// The parameters on the CPU as they are, without copying a GPU replica
  /// back (for decisions that do not read the values).
  std::vector<torch::Tensor>& host_params() { return cpu_; }
  const std::vector<std::string>& names() const { return names_; }
  /// Before the parameters are written in place: a message still viewing
  /// them gets a copy (train/loans.hpp).
  void before_write() { trainer_->loans().before_write(params()); }
  /// A loan on the parameters for a message that views them without a copy.
  std::shared_ptr<const void> lend() { return trainer_->loans().lend(params()); }

private:
  std::unique_ptr<local_trainer> trainer_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> cpu_;  ///< shared storage with the model's parameters
};

/// Where the platform is in its run, as its worker sees it.
struct run_position {
  std::string platform;          ///< its name (a message's sender)
  uint32_t epoch = 0;            ///< this epoch (from 0)
  double ratio = 1;              ///< r_i: the share of its data it trains this epoch
  uint64_t total_iterations = 0; ///< steps done over the whole run
};

/// A message for a peer platform; the mixer sends it.
struct gossip_send {
  std::string to;
  messages::held_weights message;
};

/// A commit for the parameter server.
struct server_commit {
  /// The update U = params - base, with the commit's number (on the lane it
  /// pairs the update with the typed half at the server).
  messages::held_commit update;
  double loss = 0;       ///< mean training loss of the steps since the last commit
  double overhead = 0;   ///< seconds the last commit waited for its answer
  bool epoch_end = false;
  uint64_t generation = 0;  ///< answers of another generation are stale
  /// The weights lane endpoint of the server's node: the update goes there
  /// and the typed request carries only its number; "" sends it typed.
  std::string lane;
};

/// What comes after a step or an arrival.
enum class next_move : uint8_t {
  none,          ///< nothing: a step is on its way, or the platform waits for an answer
  step,          ///< step on (when the platform runs and is not paused)
  finish_epoch,  ///< the epoch is over: report it
};

/// Something for the platform's log (workers do not log themselves).
struct worker_note {
  bool warning = false;
  std::string text;
};

/// What the platform actor carries out for its worker.
struct worker_outcome {
  std::vector<gossip_send> sends;
  std::optional<server_commit> commit;
  next_move next = next_move::none;
  /// Start waiting for the server's model on the weights lane: its answer
  /// came, its model did not yet (argument: the commit's generation).
  std::optional<uint64_t> lane_wait;
  uint64_t refused = 0;  ///< messages refused (an epoch report counts them)
  std::vector<worker_note> notes;
};

/// What a step did, for its worker.
struct step_done {
  double loss = 0;
  bool epoch_done = false;  ///< the epoch's plan is used up
  double now = 0;           ///< seconds since the platform started (the commit clock)
};

/// An epoch's plan and, when the worker ranked its aggregated points, the
/// ranking (int64 indices, highest loss first) for the store.
struct planned_epoch {
  epoch_plan plan;
  std::vector<int64_t> ranking;
};

/// A peer's message that does not fit (shape, names, weight): refused, the
/// model unchanged.
class refused_message : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What a worker is built from.
struct worker_settings {
  std::string platform;              ///< its name
  std::vector<std::string> members;  ///< every platform, cluster-file order
  int64_t platforms = 1;             ///< M, for the initial gossip weight 1 / M
  config::strategy_config strategy;
  config::edgegossip_config edgegossip;
  int64_t batch = 1;
  uint64_t seed = 1;                 ///< with the name: the worker's random stream
  /// EdgeGossip: the shard's aggregated points (null: none).
  std::shared_ptr<const aggregated_points> aggregated;
};

class worker {
public:
  /// Over `model`, which outlives the worker.
  worker(const worker_settings& settings, platform_model& model);
  virtual ~worker() = default;
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  /// The training family, for logs ("gossip", "push-sum", "edgegossip",
  /// "parameter server").
  virtual std::string family() const = 0;

  // -- the model's life ---------------------------------------------------------
  /// The initial model, before any checkpoint is restored.
  virtual void start() {}
  /// A checkpoint was loaded, with this gossip weight.
  virtual void restored(double weight) {}
  /// The cluster's averaged model was loaded (a platform joining a run).
  virtual void adopted() {}
  /// The weight a checkpoint keeps and a report shows (GoSGD's, push-sum's;
  /// 1 / M for a parameter-server worker).
  virtual double weight() const = 0;
  /// The training data's normalisation changed (the cluster's).
  virtual void renormalised(const data::normalisation& from, const data::normalisation& to) {}

  // -- epochs ---------------------------------------------------------------------
  /// A plan arrived for `epoch` with ratio r_i.
  virtual void planned(const messages::plan& plan) {}
  /// This epoch's batches: the shard (with the `adopted` points of failed
  /// platforms) shuffled and cut to ceil(|shard| * ratio) points; EdgeGossip
  /// chooses them by its ranking.
  virtual planned_epoch plan_epoch(const run_position& at, const std::vector<int64_t>& adopted);
  /// The epoch begins, with `batches` planned (its steps).
  virtual void epoch_begins(size_t batches) {}
  /// The worker's part of an epoch report (commits, staleness, the server's
  /// version), taken before epoch_over().
  virtual void fill_report(messages::epoch_report& report) const {}
  /// The epoch's report is taken: notes for the log, the counters start
  /// again.
  virtual std::vector<worker_note> epoch_over(uint32_t epoch) { return {}; }
  /// How the epoch went, for the platform's epoch line.
  virtual std::string epoch_summary(const messages::epoch_report& report) const = 0;

  // -- steps ----------------------------------------------------------------------
  /// Whether a step may go now (false while a commit waits for its answer).
  virtual bool ready() const { return true; }
  /// Whether its platform's model, run away (a training loss that is not a
  /// finite number), goes back to the platform's last checkpoint. A gossip
  /// platform's model is its own; a parameter-server worker's comes from the
  /// server, whose next model replaces it (and the server refuses an update
  /// that is not finite).
  virtual bool rolls_back() const { return true; }
  /// The peers whose messages step `k` + 1 waits for (push-sum's tau-overlap
  /// wait; empty: step now).
  virtual std::vector<std::string> awaited(uint64_t k) { return {}; }
  /// The wait before step `k` + 1 ran out: the peers still awaited are not
  /// waited for again this epoch. Answers how many they were.
  virtual size_t give_up(uint64_t k) { return 0; }
  /// After a step: what goes out, what comes next.
  virtual worker_outcome stepped(const step_done& step, const run_position& at) = 0;

  // -- what arrives -----------------------------------------------------------------
  /// A peer's weights, to merge. Throws refused_message for one that does
  /// not fit. A worker that takes no gossip refuses every message.
  virtual void merge(const messages::held_weights& message);
  /// A message of this worker's to peer `to` that was never sent (its
  /// lane skipped or lost it, or the peer was gone): the message as it
  /// went, without its dense tensors. Gossip takes back the weight it
  /// carried.
  virtual void unsent(const std::string& to, const messages::held_weights& message) {}
  /// The peer platforms reachable now.
  virtual void peers(const std::vector<std::string>& live) {}
  /// Multiply the push-sum weight by `factor`; false: this family has no
  /// such weight (the balancer's rescale is ignored).
  virtual bool rescale(double factor) { return false; }

  // -- the parameter server (a worker of another family ignores these) ----------
  /// The server to commit to: `present` (false: none reachable now),
  /// `moved` (another server than before), its node's weights lane endpoint
  /// ("": typed messages).
  virtual worker_outcome server_changed(bool present, bool moved, const std::string& lane,
                                        double now) {
    return {};
  }
  /// A typed answer to the commit of `generation`: the global model and
  /// when to commit next.
  virtual worker_outcome answered(uint64_t generation, const messages::held_global_model& global,
                                  int64_t steps, double seconds, double now) {
    return {};
  }
  /// A lane commit's typed answer: the version of the model that goes on the
  /// lane, and when to commit next.
  virtual worker_outcome answered_on_lane(uint64_t generation, uint64_t version, int64_t steps,
                                          double seconds, double now) {
    return {};
  }
  /// The server's model from node `from`'s weights lane.
  virtual worker_outcome lane_model(const std::string& from, messages::held_global_model model,
                                    double now) {
    return {};
  }
  /// The model of the commit of `generation` did not come on the lane in time.
  virtual worker_outcome lane_wait_over(uint64_t generation, double now) { return {}; }
  /// The commit of `generation` got no answer; `lost`: the server says none
  /// of it was applied (why: `why`).
  virtual worker_outcome unanswered(uint64_t generation, bool lost, const std::string& why,
                                    double now) {
    return {};
  }

protected:
  worker_settings settings_;
  platform_model& model_;
  /// Every random choice of the platform (its epochs' plans, whom it sends
  /// to, whether it sends), one stream per platform and seed.
  std::mt19937_64 rng_;
};

/// A gossip message from `at.platform` with this weight and these tensors
/// (views of its parameters); `hold` keeps what they point into.
messages::held_weights weights_message(const run_position& at, double weight,
                                       std::vector<messages::tensor_view> tensors,
                                       std::shared_ptr<const void> hold);

} // namespace eg::learning

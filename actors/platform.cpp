#include "actors/platform.hpp"

#include "learning/dataset.hpp"
#include "learning/aggregator.hpp"
#include "learning/commit_schedule.hpp"
#include "learning/gossip.hpp"
#include "learning/parameter_server.hpp"
#include "learning/topology.hpp"
#include "learning/predictor.hpp"
#include "learning/ranking.hpp"
#include "learning/serialize.hpp"
#include "learning/trainer.hpp"
#include "messages/lane.hpp"
#include "storage/store.hpp"

#include "config/defaults.hpp"

#include <caf/all.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <utility>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

struct platform_state {
  static inline const char* name = "platform";
  platform_args args;
  std::unique_ptr<learning::local_trainer> trainer;
  std::unique_ptr<learning::gossip_strategy> strategy;
  std::unique_ptr<learning::topology> topology;
  learning::overlap_gate gate{0};  // push-sum's tau-overlap wait (tau 0: off)
  bool waiting = false;            // a step waits for an in-neighbour's message
  uint64_t gossip_every = 1;       // local steps per gossip round (push-sum family)
  /// Gossip rounds done by iteration k (counted from 1): round r ends with
  /// step r * gossip_every, which sends its messages.
  uint64_t gossip_round(uint64_t k) const { return k / gossip_every; }
  uint64_t gave_up = 0;            // waits that ran out this epoch
  std::vector<std::string> live;      // peer platforms reachable now (from the mixer)
  std::vector<std::string> names;     // parameter names, wire order
  /// The model's parameters on the CPU (shared storage), up to date: a
  /// platform on a GPU copies its replica's weights back here only when
  /// something reads them (learning::local_trainer::to_host()).
  std::vector<torch::Tensor>& params() {
    trainer->to_host();
    return cpu_params;
  }
  std::vector<torch::Tensor> cpu_params;  // read through params()
  std::mt19937_64 rng;
  caf::actor balancer;
  // Run position.
  uint32_t epoch = 0;
  uint32_t last_epoch = 0;
  double ratio = 1;
  messages::plan plan;  // the current epoch's plan
  std::vector<int64_t> subset_classes;  // label of each aggregated point
  bool running = false;  // an epoch is in progress
  bool paused = false;
  clock::time_point paused_at;
  bool step_queued = false;  // a step message is on its way (one chain of steps only)
  bool finished = false;
  uint32_t epochs_done = 0;  // completed epochs (what a checkpoint records)
  std::optional<epoch_report> last_report;  // of epoch epochs_done - 1
  uint64_t total_iterations = 0;
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
  uint64_t out_of_step_said = 0;  // strategy->out_of_step() when last logged
  // Parameter-server strategies: the server (null: none reachable), the
  // model last pulled, when the next commit is due.
  caf::actor server;
  std::optional<learning::commit_clock> commits;
  learning::commit_base base;
  uint64_t commit_generation = 0;  // a server change makes answers on their way stale
  bool commit_ends_epoch = false;  // the commit in flight is the epoch's last
  bool serverless_said = false;
  /// The weights lane endpoint of the server's node ("": updates and models
  /// go in the typed messages).
  std::string server_lane;
  // Of lane commits: pairs their two halves at the server. Counted from the
  // clock, so that a restarted worker's numbers are new to the server.
  uint64_t commit_number = static_cast<uint64_t>(clock::now().time_since_epoch().count());
  bool lane_commits_said = false;
  /// The update in flight (what goes again with the next commit if the
  /// server says none of it arrived).
  std::shared_ptr<std::vector<torch::Tensor>> in_flight_update;
  /// A lane commit's answer, waiting for its model on the lane; and the
  /// newest model from the lane, waiting for its answer.
  struct pending_answer {
    uint64_t version = 0;
    learning::next_commit next;
  };
  std::optional<pending_answer> lane_answer;
  std::string server_node;  // of server_lane
  std::optional<held_weights> lane_model;
  uint64_t epoch_commits = 0;  // commits answered this epoch
  double epoch_staleness = 0;  // their staleness, summed
  std::optional<uint64_t> pulled_version;  // of the global model pulled last
  /// Emulated slowdown: idle seconds the last step still owes before the
  /// next one (queue_step waits them out).
  double idle_owed = 0;
  clock::time_point created = clock::now();
  // Observations for the predictor: wall time (idle included) and points,
  // every second of training and at the end of each epoch.
  clock::time_point last_step_end;
  learning::observation_meter observed;

  /// The commit in flight is over (answered, or given up on): the commit
  /// clock learns when the next is due; its update and what waited for its
  /// answer on the lane go.
  void commit_over(learning::next_commit next) {
    commits->answered(seconds_since(created), next);
    lane_answer.reset();
    lane_model.reset();
    in_flight_update.reset();
  }

  /// A gossip message with this weight and payload (views of the
  /// parameters, or sparse parts); `hold` keeps what they point into.
  held_weights weights_message(double weight, learning::gossip_payload payload,
                               std::shared_ptr<const void> hold) const {
    held_weights h;
    h.sender = args.platform.name;
    h.value.gossip_weight = weight;
    h.value.rate = ratio;
    h.value.epoch = epoch;
    h.value.iteration = total_iterations;
    h.value.tensors = std::move(payload.tensors);
    h.value.sparse = std::move(payload.sparse);
    h.value.edge_seq = payload.edge_seq;
    h.value.generation = payload.generation;
    h.value.keyframe = payload.keyframe;
    for (auto& t : h.value.tensors)
      h.wire_bytes += t.bytes;
    for (auto& p : h.value.sparse)
      h.wire_bytes += p.index_bytes + p.value_bytes;
    h.hold = std::move(hold);
    return h;
  }

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

  messages::epoch_report report() const {
    messages::epoch_report r;
    r.platform = args.platform.name;
    r.node = args.node_name;
    r.epoch = epoch;
    r.ratio = ratio;
    r.wall_seconds = seconds_since(epoch_start);
    r.compute_seconds = compute_seconds;
    r.samples = samples;
    r.planned_samples = planned;
    r.iterations = iterations;
    r.train_loss = iterations ? loss_sum / static_cast<double>(iterations) : 0;
    r.gossip_weight = strategy->weight();
    r.messages_refused = refused;
    r.class_samples = trainer->class_samples();
    r.commits = epoch_commits;
    r.staleness = epoch_commits ? epoch_staleness / static_cast<double>(epoch_commits) : 0.0;
    r.server_version = pulled_version.value_or(0);
    return r;
  }
};

using self_ptr = platform_actor::stateful_pointer<platform_state>;

/// Saves the platform's state to its node's store; `saved` (if given) gets
/// whether the store has it.
void checkpoint(self_ptr self, std::function<void(bool)> saved = nullptr) {
  auto& st = self->state;
  auto& m = st.trainer->model();
  auto name = st.args.platform.name;
  self->request(st.args.store, defaults::checkpoint_timeout, checkpoint_atom::value, name,
                static_cast<uint64_t>(st.epochs_done), st.total_iterations,
                st.strategy->weight(), learning::save_model(m),
                learning::save_optimizer(st.trainer->optimizer()))
    .then(
      [saved](bool ok) {
        if (saved)
          saved(ok);
      },
      [saved, name](caf::error& err) {
        spdlog::error("[{}] checkpoint not saved: {}", name, caf::to_string(err));
        if (saved)
          saved(false);
      });
}

/// Exception handling: this platform's part of every failed platform's
/// shard named in the plan.
std::vector<int64_t> adopted(const platform_state& st) {
  std::vector<int64_t> out;
  if (!st.args.all_shards)
    return out;
  for (auto& name : st.plan.adopt) {
    auto i = st.args.all_shards->find(name);
    if (i == st.args.all_shards->end())
      continue;
    for (size_t k = st.plan.adopt_part; k < i->second.size(); k += st.plan.adopt_parts)
      out.push_back(i->second[k]);
  }
  return out;
}

learning::epoch_plan make_plan(self_ptr self) {
  auto& st = self->state;
  auto extra = adopted(st);
  if (!extra.empty())
    spdlog::info("[{}] epoch {}: also training on {} points of failed platforms", st.args.platform.name,
                 st.epoch + 1, extra.size());
  // A platform that keeps all its data (r_i = 1) trains every subset:
  // ranking them would change nothing but cost a forward pass over every
  // aggregated point.
  if (!st.args.aggregated || st.args.edgegossip.selection == config::selection::random
      || st.ratio >= 1.0) {
    if (extra.empty())
      return learning::shuffled_plan(st.trainer->shard(), st.args.train.batch, st.ratio, st.rng);
    extra.insert(extra.end(), st.trainer->shard().begin(), st.trainer->shard().end());
    return learning::shuffled_plan(extra, st.args.train.batch, st.ratio, st.rng);
  }
  // Algorithm 2: losses of the aggregated points under the current model,
  // ranking (kept in the store), then the highest-ranked whole subsets until
  // |X_i| * r_i points (visited in random order: learning/ranking.hpp).
  auto& agg = *st.args.aggregated;
  auto ranking = learning::rank_by_loss(learning::aggregated_losses(st.trainer->model(), agg));
  std::string bytes(reinterpret_cast<const char*>(ranking.data()),
                    ranking.size() * sizeof(int64_t));
  self->send(st.args.store, store_atom::value,
             std::string{storage::name(storage::family::rankings)},
             storage::key(st.args.platform.name, st.epoch), std::move(bytes));
  auto budget = static_cast<int64_t>(
    std::ceil(static_cast<double>(st.trainer->shard().size()) * st.ratio - 1e-9));
  auto plan = learning::accuracy_aware_plan(agg.members, st.subset_classes, ranking,
                                            st.args.train.batch, budget, st.rng);
  if (!extra.empty()) {
    // Adopted points have no aggregated points here: shuffled, in proportion.
    auto more = learning::shuffled_plan(extra, st.args.train.batch, st.ratio, st.rng);
    plan.batches.insert(plan.batches.end(), more.batches.begin(), more.batches.end());
  }
  return plan;
}

void begin_epoch(self_ptr self) {
  auto& st = self->state;
  auto plan = make_plan(self);
  if (st.args.train.max_iterations > 0
      && plan.batches.size() > static_cast<size_t>(st.args.train.max_iterations))
    plan.batches.resize(static_cast<size_t>(st.args.train.max_iterations));
  st.planned = static_cast<uint64_t>(plan.samples());
  st.planned_batches = plan.batches.size();
  st.epoch_lr = learning::scheduled_lr(st.args.train.lr, st.args.train.lr_schedule, st.epoch,
                                       st.last_epoch + 1);
  st.trainer->set_lr(st.epoch_lr);
  st.trainer->begin_epoch(std::move(plan));
  st.epoch_start = st.last_progress = st.last_step_end = clock::now();
  if (!st.training_start)
    st.training_start = st.epoch_start;
  st.compute_seconds = st.loss_sum = 0;
  st.samples = st.iterations = st.refused = 0;
  st.running = true;
  st.waiting = false;
  st.gave_up = 0;
  st.gate.new_epoch();
  spdlog::debug("[{}] epoch {} begins: {} batches", st.args.platform.name, st.epoch + 1,
                st.trainer->remaining());
  st.step_queued = true;
  self->send(self, step_atom::value);
}

/// The in-neighbours whose message step total_iterations + 1 still waits
/// for (tau-overlap SGP, counted in gossip rounds; none when the wait is
/// off or the topology does not say who sends).
std::vector<std::string> awaited(platform_state& st) {
  auto need = st.gate.needed_iteration(st.gossip_round(st.total_iterations));
  if (!need)
    return {};
  auto sources = st.topology->sources(*need, st.args.platform.name, st.live);
  if (!sources)
    return {};
  return st.gate.missing(*need, *sources);
}

/// Queues the next step unless one is on its way; after the emulated
/// slowdown's idle time still owed by the last step (`idle_owed`), if any.
void queue_step(self_ptr self) {
  auto& st = self->state;
  if (st.step_queued)
    return;
  st.step_queued = true;
  const auto idle = std::exchange(st.idle_owed, 0.0);
  if (idle > 0)
    self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(idle * 1e6)),
                       step_atom::value);
  else
    self->send(self, step_atom::value);
}

/// The strategy's messages after a step, each to the topology's target at
/// this iteration: views of the parameters (no copy) holding a loan on
/// them until written, so the next step or merge copies them only if one is
/// still on its way (learning/loans.hpp).
void send_gossip(self_ptr self) {
  auto& st = self->state;
  // The targets first: with nobody to send to, no weight leaves. Between
  // two gossip rounds (strategy.gossip_every) nobody: the step is local.
  std::vector<std::string> targets;
  if (st.total_iterations % st.gossip_every == 0)
    targets = st.topology->targets(st.gossip_round(st.total_iterations), st.args.platform.name,
                                   st.live, st.rng);
  // GoSGD and push-sum decide without reading the weights: a platform on a
  // GPU copies them back only when a message goes.
  auto orders = st.strategy->after_step(
    st.strategy->after_step_reads_parameters() ? st.params() : st.cpu_params, targets.size(),
    st.rng);
  for (auto& order : orders) {
    const auto& to = targets.at(order.peer);
    auto payload = st.strategy->payload(order, to, st.names, st.params());
    // Sparse parts hold their own bytes; dense views borrow the parameters.
    auto hold = payload.hold ? payload.hold : st.trainer->loans().lend(st.params());
    // A sparse strategy may send less weight than ordered (0 included).
    const double weight = payload.hold ? payload.weight : order.weight;
    self->send(st.args.mixer, send_atom::value, to,
               st.weights_message(weight, std::move(payload), std::move(hold)));
  }
}

void finish_epoch(self_ptr self);

/// The cluster's normalisation from here on, for training, its own test
/// and the ranking of its aggregated points (means of points normalised
/// with the node's own, moved to the cluster's).
void use_normalisation(self_ptr self, const data::normalisation& norm) {
  auto& st = self->state;
  const auto before = st.trainer->normalisation();
  if (norm == before)
    return;
  st.trainer->set_normalisation(norm);
  if (st.args.test_set)
    st.args.test_set = data::with_normalisation(st.args.test_set, norm);
  if (st.args.aggregated)
    st.args.aggregated = std::make_shared<const learning::aggregated_points>(
      learning::renormalised(*st.args.aggregated, before, norm));
  spdlog::debug("[{}] trains with the cluster's normalisation: {}", st.args.platform.name,
                data::to_text(norm));
}

/// After a commit: the epoch ends (its last commit) or training steps on.
void after_commit(self_ptr self) {
  auto& st = self->state;
  if (st.commit_ends_epoch)
    finish_epoch(self);
  else if (st.running && !st.paused)
    queue_step(self);
}

/// The server's answer is complete: the global model (none: it did not
/// come; training goes on with the local model) and when to commit next.
void pulled(self_ptr self, const held_weights* global, learning::next_commit next) {
  auto& st = self->state;
  st.commit_over(next);
  ++st.epoch_commits;
  if (global) {
    // Staleness: other workers' commits applied since the last pull (none
    // counted across a server that started again from a checkpoint).
    const uint64_t version = global->value.iteration;
    if (st.pulled_version && version > *st.pulled_version)
      st.epoch_staleness += static_cast<double>(version - *st.pulled_version - 1);
    st.pulled_version = version;
    try {
      auto received = learning::from_views(global->value.tensors, st.names, st.params());
      st.trainer->loans().before_write(st.params());
      st.base.pulled(st.params(), received);
    } catch (const std::exception& e) {
      ++st.refused;
      spdlog::warn("[{}] refused the server's model: {}", st.args.platform.name, e.what());
    }
  }
  after_commit(self);
}

/// A commit got no answer (`err`): training goes on with the local model.
/// When the server says nothing of it was applied (ec::lost), the update
/// goes again with the next commit.
void unanswered(self_ptr self, const caf::error& err) {
  auto& st = self->state;
  std::string why;
  if (is(err, ec::lost, &why) && st.in_flight_update) {
    st.base.returned(*st.in_flight_update);
    spdlog::warn("[{}] {}: it goes with the next commit", st.args.platform.name, why);
  } else {
    spdlog::warn("[{}] commit not answered ({}): training on with the local model",
                 st.args.platform.name, self->system().render(err));
  }
  st.commit_over({});
  after_commit(self);
}

/// Parameter-server strategies: commits U = params - base to the server
/// and, once it answers, loads the global model and steps on (or, with the
/// epoch's last commit, finishes the epoch). A server on another node gets
/// the update on the weights lane and sends the model back there; one in
/// this process (or without a lane) in the typed messages. Without a
/// reachable server, training goes on locally and a later step commits.
void commit(self_ptr self, bool epoch_end) {
  auto& st = self->state;
  if (!st.server) {
    // No server reachable (its node is down, or not peered yet): training
    // goes on locally; the next step after one is found commits.
    if (!st.serverless_said)
      spdlog::warn("[{}] no parameter server reachable: training on locally until one is",
                   st.args.platform.name);
    st.serverless_said = true;
    st.commit_ends_epoch = epoch_end;
    after_commit(self);
    return;
  }
  st.serverless_said = false;
  st.commit_ends_epoch = epoch_end;
  auto update = std::make_shared<std::vector<torch::Tensor>>(st.base.commit(st.params()));
  st.in_flight_update = update;
  learning::gossip_payload payload;
  payload.tensors = learning::to_views(st.names, *update);
  auto message = st.weights_message(1.0, std::move(payload), update);
  const double loss = st.commits->loss();
  st.commits->committed(seconds_since(st.created));
  const auto generation = ++st.commit_generation;
  auto server = caf::actor_cast<server_actor>(st.server);
  if (st.server_lane.empty()) {
    self
      ->request(server, defaults::commit_timeout, commit_atom::value, std::move(message), loss,
                st.commits->overhead(), epoch_end)
      .then(
        [self, generation](held_weights& global, int64_t steps, double seconds) {
          if (generation == self->state.commit_generation)
            pulled(self, &global, {steps, seconds});
        },
        [self, generation](caf::error& err) {
          if (generation == self->state.commit_generation)
            unanswered(self, err);
        });
    return;
  }
  // The update on the lane (its number in `iteration`), the rest typed.
  const uint64_t number = ++st.commit_number;
  message.value.iteration = number;
  self->send(st.args.mixer, commit_atom::value, st.server_lane, std::move(message));
  if (!std::exchange(st.lane_commits_said, true))
    spdlog::info("[{}] commits to the parameter server on the weights lane ({})",
                 st.args.platform.name, st.server_lane);
  self
    ->request(server, defaults::commit_timeout, commit_atom::value, st.args.platform.name, number,
              loss, st.commits->overhead(), epoch_end)
    .then(
      [self, generation](uint64_t version, int64_t steps, double seconds) {
        auto& st = self->state;
        if (generation != st.commit_generation)
          return;
        if (st.lane_model && st.lane_model->value.iteration == version) {
          auto global = std::move(*st.lane_model);
          pulled(self, &global, {steps, seconds});
          return;
        }
        // The model is on its way on the lane.
        st.lane_answer = platform_state::pending_answer{version, {steps, seconds}};
        self->delayed_send(self, defaults::lane_commit_wait, pull_atom::value, generation);
      },
      [self, generation](caf::error& err) {
        if (generation == self->state.commit_generation)
          unanswered(self, err);
      });
}

void finish_epoch(self_ptr self) {
  auto& st = self->state;
  st.running = false;
  // The epoch's last observation, before the report: the balancer plans the
  // next epoch once every report is in, from predictions that include it.
  if (auto o = st.observed.flush())
    self->send(st.args.predictor, observe_atom::value, o->seconds, o->samples);
  st.epochs_done = st.epoch + 1;
  auto r = st.report();
  st.epoch_commits = 0;
  st.epoch_staleness = 0;
  // Its own model on the test set: monitoring, every `evaluate_every`
  // epochs and after the last (-1: not evaluated this epoch).
  const auto every = st.args.train.evaluate_every;
  r.test_loss = r.test_accuracy = -1;
  if (every > 0 && st.args.test_set &&
      ((st.epoch + 1) % every == 0 || st.epoch >= st.last_epoch)) {
    auto eval = learning::evaluate(st.trainer->model(), *st.args.test_set);
    r.test_loss = eval.loss;
    r.test_accuracy = eval.accuracy;
  }
  checkpoint(self);
  self->request(st.args.mixer, caf::infinite, stats_atom::value)
    .then([self, r](epoch_report& s) mutable {
      auto& st = self->state;
      r.bytes_sent = s.bytes_sent;
      r.bytes_received = s.bytes_received;
      r.sent = s.sent;
      r.received = s.received;
      r.messages_sent = s.messages_sent;
      r.messages_received = s.messages_received;
      r.messages_refused += s.messages_refused;
      r.received_from = std::move(s.received_from);
      spdlog::info("[{}] epoch {} done: {} samples in {:.2f} s ({:.0f}/s), loss {:.4f}, "
                   "test accuracy {:.4f}, {}",
                   st.args.platform.name, r.epoch + 1, r.samples, r.wall_seconds,
                   r.wall_seconds > 0 ? r.samples / r.wall_seconds : 0.0, r.train_loss,
                   r.test_accuracy,
                   st.commits ? fmt::format("{} commits to the server (staleness {:.1f})",
                                            r.commits, r.staleness)
                              : fmt::format("received {} messages", r.messages_received));
      st.last_report = r;
      if (auto n = st.strategy->out_of_step(); n > st.out_of_step_said) {
        spdlog::warn("[{}] {} sparse messages arrived out of step with their edge in epoch {} "
                     "(lost on the way or a peer restarted): merged by their weight alone until "
                     "the edge's keyframe",
                     st.args.platform.name, n - st.out_of_step_said, r.epoch + 1);
        st.out_of_step_said = n;
      }
      if (st.gave_up > 0)
        spdlog::info("[{}] epoch {}: {} overlap wait(s) ran out (a peer silent for {} ms: gone, "
                     "paused or with fewer iterations)",
                     st.args.platform.name, r.epoch + 1, st.gave_up,
                     std::chrono::duration_cast<std::chrono::milliseconds>(defaults::overlap_wait).count());
      self->send(st.args.store, metrics_atom::value, st.args.platform.name,
                 static_cast<uint64_t>(r.epoch), r);
      self->send(st.args.node, report_atom::value, r);
      if (st.balancer)
        self->send(caf::actor_cast<balancer_actor>(st.balancer), report_atom::value, r);
      // Asynchronous schedule: no barrier, go straight on.
      if (st.args.strategy.asynchronous() && st.epoch < st.last_epoch) {
        ++st.epoch;
        begin_epoch(self);
      }
    });
}

/// Stops stepping: the step in flight finds `paused` and ends the chain (a
/// plan received while paused begins its epoch without stepping). The
/// balancer hears where training stopped.
void pause(self_ptr self) {
  auto& st = self->state;
  if (st.paused || st.finished)
    return;
  st.paused = true;
  st.paused_at = clock::now();
  if (st.running && st.balancer)
    self->send(caf::actor_cast<balancer_actor>(st.balancer), progress_atom::value, st.report());
  spdlog::info("[{}] paused", st.args.platform.name);
}

/// Steps again. The pause counts neither in the epoch's wall time nor in what
/// the predictor observes.
void resume(self_ptr self) {
  auto& st = self->state;
  if (!st.paused)
    return;
  st.paused = false;
  if (st.running) {
    auto idle = clock::now() - std::max(st.paused_at, st.epoch_start);
    st.epoch_start += idle;
    st.last_step_end += idle;
    if (!st.step_queued) {
      st.step_queued = true;
      self->send(self, step_atom::value);
    }
  }
  spdlog::info("[{}] resumed", st.args.platform.name);
}

platform_actor::behavior_type platform(self_ptr self, platform_args args) {
  auto& st = self->state;
  st.rng.seed(args.seed * 7919 + std::hash<std::string>{}(args.platform.name));
  const auto shape = learning::shape_of(*args.train_set);
  auto model = learning::make_classifier(args.train.model, args.seed, shape);
  learning::sgd_options opt{args.train.lr, args.train.momentum, args.train.batch};
  opt.augment = args.augment;
  opt.augment_seed = args.seed * 7919 + std::hash<std::string>{}(args.platform.name);
  const auto device = learning::training_device(args.platform.device);
  st.trainer =
    std::make_unique<learning::local_trainer>(model, args.train_set, args.shard, opt, device);
  // EdgeGossip gossips as GoSGD does; SGP, Sparse-Push and SCSP by push-sum.
  st.names = learning::parameter_names(*model);
  st.cpu_params = learning::parameters(*model);
  {
    const auto& sc = args.strategy;
    const bool gosgd_family = !sc.push_sum();
    learning::sparse_push_options sparse;
    sparse.density = sc.density;
    sparse.consensus_step = sc.consensus_step;
    sparse.values = sc.sparse_values == "float32"  ? messages::value_type::float32
                    : sc.sparse_values == "float8" ? messages::value_type::float8
                    : sc.sparse_values == "sign"   ? messages::value_type::sign
                                                   : messages::value_type::float16;
    sparse.drift_memory = sc.drift_memory;
    sparse.drift_gain = sc.drift_gain;
    st.strategy = learning::make_strategy(
      gosgd_family ? "gosgd" : config::to_string(sc.name), args.cluster_platforms,
      sc.exchange_probability,
      gosgd_family ? learning::flat_layout{} : learning::flat_layout::of(st.names, st.params()),
      sparse);
  }
  st.topology = learning::make_topology(config::to_string(args.strategy.topology), args.members,
                                        static_cast<size_t>(args.strategy.out_peers));
  st.gate = learning::overlap_gate(
    args.strategy.push_sum() ? static_cast<uint64_t>(args.strategy.overlap) : 0);
  st.gossip_every =
    args.strategy.push_sum() ? static_cast<uint64_t>(std::max<int64_t>(args.strategy.gossip_every, 1))
                             : 1;
  if (args.aggregated) {
    auto labels = args.aggregated->labels.contiguous();
    st.subset_classes.assign(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + labels.numel());
  }
  // Before a checkpoint is restored: a sparse strategy's edge copies start at
  // the initial model, the same on every platform.
  st.strategy->start(st.params());
  if (args.restore) {
    try {
      learning::load_model(*model, args.restore->model);
      learning::load_optimizer(st.trainer->optimizer(), args.restore->optimizer);
      st.strategy->set_weight(args.restore->gossip_weight);
      st.strategy->restored(st.params());
      st.total_iterations = args.restore->iteration;
      st.epochs_done = static_cast<uint32_t>(args.restore->epoch);
      st.last_report = args.last_report;
      spdlog::debug("[{}] restored from its checkpoint after epoch {}", args.platform.name,
                   args.restore->epoch);
    } catch (const std::exception& e) {
      spdlog::error("[{}] its checkpoint does not fit this model ({}): starting afresh",
                    args.platform.name, e.what());
      auto fresh = learning::make_classifier(args.train.model, args.seed, shape);
      learning::load_model(*model, learning::save_model(*fresh));
      st.trainer =
        std::make_unique<learning::local_trainer>(model, args.train_set, args.shard, opt, device);
    }
  }
  if (args.strategy.parameter_server()) {
    st.commits.emplace(args.strategy.commit_steps);
    st.base.pulled(st.params(), st.params());  // the initial (or restored) model
  }
  st.args = std::move(args);
  return {
    [self](plan_atom, const plan& received) {
      auto& st = self->state;
      const auto* p = &received;
      if (st.finished)
        return;
      st.balancer = caf::actor_cast<caf::actor>(self->current_sender());
      if (!st.running && p->epoch + 1 == st.epochs_done && st.last_report) {
        // This epoch is done here: a balancer that took over (or restarted)
        // did not get the report.
        spdlog::info("[{}] epoch {} was already trained: report sent again",
                     st.args.platform.name, p->epoch + 1);
        self->send(caf::actor_cast<balancer_actor>(st.balancer), report_atom::value,
                   *st.last_report);
        return;
      }
      st.epoch = p->epoch;
      st.last_epoch = p->last_epoch;
      st.ratio = p->ratio;
      st.plan = *p;
      st.strategy->scale_exchange(1.0 / std::max(p->ratio, 1e-3));
      if (!st.running)
        begin_epoch(self);
    },
    [self](adopt_atom, const std::string& averaged) {
      auto& st = self->state;
      if (st.total_iterations > 0 || st.finished)
        return;  // its own model (trained here, or a checkpoint's) stays
      try {
        st.trainer->loans().before_write(st.params());
        learning::load_model(st.trainer->model(), averaged);
        st.strategy->restored(st.params());
        spdlog::info("[{}] starts from the cluster's averaged model", st.args.platform.name);
      } catch (const std::exception& e) {
        spdlog::warn("[{}] kept its initial model: the cluster's averaged model does not load "
                     "({})",
                     st.args.platform.name, e.what());
      }
    },
    [self](norm_atom, const std::string& text) {
      auto& st = self->state;
      try {
        use_normalisation(self, data::parse_normalisation(text));
      } catch (const std::exception& e) {
        ++st.refused;
        spdlog::warn("[{}] refused the cluster's normalisation: {}", st.args.platform.name,
                     e.what());
      }
    },
    [self](step_atom) {
      auto& st = self->state;
      st.step_queued = false;
      if (!st.running || st.paused || (st.commits && st.commits->in_flight()))
        return;
      if (!awaited(st).empty()) {
        // A merge that brings the last awaited message queues the step.
        if (!st.waiting) {
          st.waiting = true;
          self->delayed_send(self, defaults::overlap_wait, overlap_atom::value,
                             st.total_iterations);
        }
        return;
      }
      st.waiting = false;
      if (st.args.train.lr_warmup > 0 && st.epoch < st.args.train.lr_warmup) {
        const double progress =
          st.epoch + static_cast<double>(st.iterations + 1)
                       / static_cast<double>(std::max<uint64_t>(st.planned_batches, 1));
        st.trainer->set_lr(st.epoch_lr * learning::warmup_factor(st.args.train.lr_warmup, progress));
      }
      auto r = st.trainer->step();
      st.compute_seconds += r.compute_seconds;
      st.loss_sum += r.loss;
      st.samples += static_cast<uint64_t>(r.samples);
      ++st.iterations;
      ++st.total_iterations;
      // What the predictor learns from: wall time per point, idle included.
      auto now = clock::now();
      if (auto o = st.observed.add(std::chrono::duration<double>(now - st.last_step_end).count(),
                                   static_cast<uint64_t>(r.samples)))
        self->send(st.args.predictor, observe_atom::value, o->seconds, o->samples);
      st.last_step_end = now;
      // Messages reference the parameters (no copy) and hold a loan on
      // them until written: the next step or merge copies them only if one
      // is still on its way (learning/loans.hpp).
      if (!st.commits)
        send_gossip(self);
      else
        st.commits->stepped(r.loss);
      if (st.balancer && clock::now() - st.last_progress >= defaults::progress_report_interval) {
        st.last_progress = clock::now();
        self->send(caf::actor_cast<balancer_actor>(st.balancer), progress_atom::value,
                   st.report());
      }
      if (st.trainer->epoch_done()) {
        if (st.commits)
          commit(self, true);  // the epoch ends on the global model
        else
          finish_epoch(self);
        return;
      }
      // Emulated slowdown: idle (without holding a thread) for the extra
      // time a platform this many times slower would need, before the next
      // step (after a commit's answer too, so that a slow worker commits
      // at its slow pace).
      st.idle_owed = r.compute_seconds * std::max(st.slowdown() - 1.0, 0.0);
      if (st.commits && st.commits->due(seconds_since(st.created))) {
        commit(self, false);  // the answer steps on
        return;
      }
      queue_step(self);
    },
    [self](merge_atom, const held_weights& message) {
      auto& st = self->state;
      st.gate.heard(message.sender, st.gossip_round(message.value.iteration));
      if (st.waiting && st.running && !st.paused && awaited(st).empty())
        queue_step(self);
      try {
        const auto& w = message.value;
        if (!w.sparse.empty()) {
          st.trainer->loans().before_write(st.params());
          st.strategy->merge_sparse(st.params(), message.sender, w);
          return;
        }
        auto received = learning::from_views(w.tensors, st.names, st.params());
        st.trainer->loans().before_write(st.params());
        if (st.args.edgegossip.merge == config::merge_rule::rate)
          st.strategy->merge(st.params(), received, w.gossip_weight, std::max(st.ratio, 1e-3),
                             w.rate > 0 ? std::max(w.rate, 1e-3) : 1.0);
        else
          st.strategy->merge(st.params(), received, w.gossip_weight);
      } catch (const std::exception& e) {
        ++st.refused;
        spdlog::warn("[{}] refused weights: {}", st.args.platform.name, e.what());
      }
    },
    [self](overlap_atom, uint64_t k) {
      auto& st = self->state;
      if (!st.waiting || st.total_iterations != k)
        return;  // the message came in time
      auto late = awaited(st);
      st.gate.give_up(late);
      st.gave_up += late.size();
      spdlog::debug("[{}] step {}: no message from {} peer(s) within the overlap wait; not "
                    "waited for again this epoch",
                    st.args.platform.name, k + 1, late.size());
      if (st.running && !st.paused)
        queue_step(self);
    },
    [self](cut_atom, uint32_t epoch) {
      auto& st = self->state;
      if (!st.running || st.epoch != epoch)
        return;
      spdlog::info("[{}] epoch {} cut at its deadline after {} of {} points",
                   st.args.platform.name, epoch + 1, st.samples, st.planned);
      finish_epoch(self);
    },
    [self](peers_atom, std::vector<std::string>& live) {
      auto& st = self->state;
      st.strategy->peers_changed(live);
      st.live = std::move(live);
    },
    [self](server_atom, caf::actor server, std::string& lane) {
      auto& st = self->state;
      if (!st.commits || (server == st.server && lane == st.server_lane))
        return;
      const bool moved = server != st.server;
      st.server = std::move(server);
      st.server_lane = std::move(lane);
      st.server_node.clear();
      if (!st.server_lane.empty()) {
        try {
          st.server_node = messages::parse_endpoint(st.server_lane).node;
        } catch (const messages::lane_error& e) {
          spdlog::warn("[{}] commits go in the typed messages: {}", st.args.platform.name,
                       e.what());
          st.server_lane.clear();
        }
      }
      if (moved && st.commits->in_flight()) {
        // Its answer will not come from a server that is gone: on without it.
        ++st.commit_generation;
        st.commit_over({});
        after_commit(self);
      }
    },
    [self](pull_atom, const std::string& from, held_weights& model) {
      auto& st = self->state;
      if (!st.commits || !st.commits->in_flight())
        return;  // an answer given up on
      if (st.server_node.empty() || st.server_node != from) {
        ++st.refused;
        spdlog::warn("[{}] refused a model from node '{}', which does not host the parameter "
                     "server",
                     st.args.platform.name, from);
        return;
      }
      if (st.lane_answer && st.lane_answer->version == model.value.iteration) {
        const auto next = st.lane_answer->next;
        pulled(self, &model, next);
        return;
      }
      st.lane_model = std::move(model);  // its answer is on its way
    },
    [self](pull_atom, uint64_t generation) {
      auto& st = self->state;
      if (generation != st.commit_generation || !st.lane_answer)
        return;
      spdlog::warn("[{}] the server's model of version {} did not come on the weights lane in "
                   "time: training on with the local model",
                   st.args.platform.name, st.lane_answer->version);
      // The update was applied: the base stays where the commit left it.
      const auto next = st.lane_answer->next;
      pulled(self, nullptr, next);
    },
    [self](rescale_atom, double factor) {
      auto& st = self->state;
      if (!(factor > 0) || !std::isfinite(factor) || !st.args.strategy.push_sum()) {
        spdlog::warn("[{}] ignored a rescale by {}", st.args.platform.name, factor);
        return;
      }
      st.strategy->set_weight(st.strategy->weight() * factor);
    },
    [self](weights_atom) -> held_weights {
      auto& st = self->state;
      // A copy: the parameters change with the next step.
      learning::gossip_payload whole;
      whole.tensors = learning::to_views(st.names, st.params());
      return messages::copy_weights(st.weights_message(st.strategy->weight(), std::move(whole), nullptr));
    },
    [self](done_atom, const std::string& run) {
      auto& st = self->state;
      if (st.finished)
        return;
      st.finished = true;
      st.running = false;
      const auto& loans = st.trainer->loans();
      spdlog::debug("[{}] gossip: {} messages sent from the parameters, which were copied {} "
                    "times (a message still queued at the next step or merge)",
                    st.args.platform.name, loans.lent(), loans.copies());
      // The node flushes the store once every platform is done: the final
      // checkpoint is in the store by then.
      checkpoint(self, [self, run](bool) {
        self->send(self->state.args.node, done_atom::value, messages::role::platform,
                   self->state.args.platform.name, run);
      });
    },
    [self](control_atom, const control& c) -> caf::result<bool> {
      auto& st = self->state;
      switch (c.verb) {
        case messages::verb::pause:
          pause(self);
          return true;
        case messages::verb::resume:
          resume(self);
          return true;
        case messages::verb::stop:
          st.running = false;
          [[fallthrough]];
        case messages::verb::checkpoint: {
          auto rp = self->make_response_promise<bool>();
          checkpoint(self, [rp](bool ok) mutable { rp.deliver(ok); });
          return rp;
        }
        default:
          return make_error(ec::bad_request, std::string{"a platform does not take "}
                                               + messages::to_string(c.verb));
      }
    },
  };
}

} // namespace

platform_args platform_args::of(const config::cluster_config& cluster,
                                const config::platform_config& platform,
                                const std::string& node) {
  platform_args pa;
  pa.node_name = node;
  pa.platform = platform;
  pa.train = cluster.train;
  pa.augment = cluster.data.augment;
  pa.strategy = cluster.strategy;
  pa.edgegossip = cluster.edgegossip;
  pa.seed = cluster.seed;
  for (auto& p : cluster.platforms())
    pa.members.push_back(p.name);
  pa.cluster_platforms = static_cast<int64_t>(pa.members.size());
  return pa;
}

platform_actor spawn_platform(caf::actor_system& sys, platform_args args) {
  return sys.spawn(platform, std::move(args));
}

} // namespace eg::actors

#pragma once
// The balancer actor's state and its parts, shared by balancer.cpp (joins,
// plans, reports, the console) and balancer_epochs.cpp (the end of an epoch:
// the averaged model evaluated and tested, push-sum's mass, deadlines).
// Internal to the balancer.

#include "actors/balancer/balancer.hpp"

#include "algorithms/edgegossip/epoch_barrier.hpp"
#include "actors/balancer/evaluator.hpp"
#include "actors/balancer/inspection.hpp"
#include "actors/report_files.hpp"
#include "config/defaults.hpp"
#include "models/export.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "messages/codec.hpp"
#include "messages/rendezvous.hpp"

#include <caf/all.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace eg::actors::balancer_parts {

using clock = std::chrono::steady_clock;

/// Where the balancer sends to a platform and asks its predictor.
struct platform_handles {
  platform_actor platform;
  predictor_actor predictor;
};

/// A gather in progress (see gather): told when a platform it waits for is
/// down, so it stops waiting for that one.
struct pending_gather {
  virtual ~pending_gather() = default;
  virtual void lost(const std::string& name) = 0;
};

/// One answer (an Answer) from each of a set of platforms, then `done`
/// with those that came.
template <class Answer>
struct gather_state : pending_gather {
  std::set<std::string> waiting;
  std::vector<Answer> answers;
  std::function<void(std::vector<Answer>&)> done;
  const char* what = "";
  /// `name` answered.
  void answer(const std::string& name, Answer a) {
    if (!waiting.count(name))
      return;  // given up on already (it went down)
    answers.push_back(std::move(a));
    settle(name);
  }
  /// `name` is answered (or given up).
  void settle(const std::string& name) {
    if (waiting.erase(name) && waiting.empty() && done) {
      auto d = std::move(done);
      done = nullptr;
      d(answers);
    }
  }
  void lost(const std::string& name) override {
    if (waiting.count(name))
      spdlog::warn("balancer: no {} from {}: it is down", what, name);
    settle(name);
  }
};

/// A model for the average that comes on the weights lane, by the header
/// its platform answered with: the platform, its epoch and its iteration.
using lane_model_key = std::tuple<std::string, uint64_t, uint64_t>;
/// How long a header and its model wait for each other: a model on a slow
/// link takes its size over the link's rate (AlexNet's 3.6 MB at 2 Mbit/s,
/// about 15 s), behind the gossip queued before it.
inline constexpr double lane_model_wait_seconds = 60;

struct balancer_state {
  static inline const char* name = "balancer";
  balancer_args args;
  /// What the balancer knows of epochs: platforms, reports, the barrier,
  /// plans, deadlines and evaluated epochs.
  epoch_barrier epochs{barrier_settings{}};
  std::map<std::string, platform_handles> handles;
  /// The latest averaged model (learning::save_model), from the evaluator.
  std::shared_ptr<std::string> averaged_model = std::make_shared<std::string>();
  /// A copy of the last averaged model, taken once the evaluator answered
  /// (it writes averaged_model on its own thread): what a platform joining
  /// the run starts from.
  std::string latest_model;
  bool started = false;
  bool finished = false;
  bool tables_failed = false;
  /// Its node reaches no majority of the cluster (the node paused it through
  /// the console's command, via "majority"): it closes no epoch until its
  /// node resumes it, since the majority's side may have gone on with the
  /// run under another balancer.
  bool minority = false;  // said once: the run directory's tables cannot be written
  /// Push-sum: a platform went down or joined a run in progress (or this
  /// balancer continues a run) since the last average, so the live
  /// platforms' weights no longer sum to their number (keep_push_sum_mass).
  bool members_changed = false;
  /// Platforms that ended on their own (a normal exit: their models kept
  /// running away, train.max_rollbacks); they do not come back.
  std::set<std::string> left;
  std::string run;
  clock::time_point last_line;
  std::set<uint32_t> planning;  // epochs whose predictions are being gathered
  /// Averages and evaluates models as an actor of its own, so the balancer
  /// answers (reports, the console) meanwhile.
  caf::actor evaluator;
  double started_unix = 0;
  /// What the inspection console sees beyond the epochs.
  inspection::console_state console;
  /// Gathers still waiting for answers.
  std::vector<std::weak_ptr<pending_gather>> gathers;
  /// Models for the average from platforms on other nodes: each header
  /// answered (with the gather that waits for it, held here until its
  /// model comes or waited too long) and each model from the weights lane,
  /// paired as they come in either order.
  messages::rendezvous<lane_model_key, std::shared_ptr<gather_state<held_weights>>, held_weights>
    lane_models{lane_model_wait_seconds, 256};
  /// The nodes whose test data the averaged model is tested on: their
  /// testers and test samples (from the node, as they peer).
  std::map<std::string, std::pair<tester_actor, uint64_t>> testers;
  /// Nodes already said to have no tester reachable (said again after one
  /// came back and went).
  std::set<std::string> untested;
  /// Each node's training data sums, from its platforms' joins: combined at
  /// the start into the cluster's normalisation.
  std::map<std::string, data::moments> node_stats;
  /// The cluster's normalisation as sent (data::to_text; "": every node
  /// keeps its own), fixed when the run starts.
  std::string norm_text;

  uint32_t last_epoch() const { return epochs.last_epoch(); }
};

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;

/// Asks every target for one answer (of type Answer), all at once, and
/// calls `done` with the answers once each target has answered, failed or
/// been seen to go down (failures are logged and left out), so neither a
/// dead peer nor a frozen one holds the balancer up longer than its
/// monitor takes to notice.
/// A gather_state for these targets, registered so that it hears of a
/// platform going down; null when there is none to wait for (`done` was
/// called with no answers).
template <class Answer, class Handle>
std::shared_ptr<gather_state<Answer>>
start_gather(self_ptr self, const std::vector<std::pair<std::string, Handle>>& targets,
             const char* what, std::function<void(std::vector<Answer>&)> done) {
  auto g = std::make_shared<gather_state<Answer>>();
  g->done = std::move(done);
  g->what = what;
  for (auto& [name, handle] : targets)
    g->waiting.insert(name);
  if (g->waiting.empty()) {
    g->done(g->answers);
    return nullptr;
  }
  auto& registry = self->state.gathers;
  registry.erase(std::remove_if(registry.begin(), registry.end(),
                                [](auto& w) { return w.expired(); }),
                 registry.end());
  registry.push_back(g);
  return g;
}

template <class Answer, class Handle, class Atom>
void gather(self_ptr self, const std::vector<std::pair<std::string, Handle>>& targets,
            std::chrono::milliseconds timeout, Atom atom, const char* what,
            std::function<void(std::vector<Answer>&)> done) {
  auto g = start_gather<Answer>(self, targets, what, std::move(done));
  if (!g)
    return;
  for (auto& [name, handle] : targets)
    self->request(handle, timeout, atom)
      .then([g, name = name](Answer& answer) { g->answer(name, std::move(answer)); },
        [g, what, name = name](caf::error& err) {
          if (!g->waiting.count(name))
            return;
          spdlog::warn("balancer: no {} from {}: {}", what, name, caf::to_string(err));
          g->settle(name);
        });
}

inline std::chrono::microseconds micros(double seconds) {
  return std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1e6));
}

// balancer_epochs.cpp
void epoch_evaluated(self_ptr self, uint32_t epoch);
/// Push-sum: the live platforms' weights (`answers`, summing to `weights`)
/// should sum to their number. A platform lost takes its weight with it; one
/// restarted from a checkpoint brings that checkpoint's. At the barrier of
/// the synchronous schedule nothing is in flight, and scaling every weight
/// by the same factor changes no de-biased model nor their weighted mean:
/// the balancer restores the sum so. (Asynchronous: weight is in flight
/// whenever it looks, so it only logs.)
void keep_push_sum_mass(self_ptr self, uint32_t epoch, const std::vector<held_weights>& answers,
                        double weights);
/// All live platforms reported `epoch`: averages their current models.
void evaluate_average(self_ptr self, uint32_t epoch);
/// A platform's model for the average, from the weights lane.
void lane_model_arrived(self_ptr self, held_weights model);
/// Gives up on the models that did not come on the weights lane in time
/// (their platforms are left out of that average) and drops those that
/// came after.
void expire_lane_models(self_ptr self);
/// The deadline of `epoch` came: cuts the platforms still training it.
void deadline_passed(self_ptr self, uint32_t epoch);
void check_epochs(self_ptr self);

// balancer.cpp
/// A control command to one platform; a checkpoint is noted once the store
/// has it.
void console_send(self_ptr self, const std::string& name, const platform_actor& handle,
                  messages::verb what);
/// Sends every live platform its plan for the epoch; logs Algorithm 1's.
void send_plans(self_ptr self, const epoch_plan& plan);
/// Plans `epoch`: GoSGD at once; EdgeGossip once the predictors answered.
void send_plan(self_ptr self, uint32_t epoch);
/// Sends the run state to the node, which keeps it in every node's store.
void save_run_state(self_ptr self);
void write_outputs(self_ptr self);
void finish(self_ptr self);
/// The cluster's normalisation, fixed for the run: the one a continued run
/// used (`saved`), else every joined node's data sums combined (no sample
/// leaves its node). The exported model carries it; every platform gets it
/// before each plan, every tester with each model.
void decide_normalisation(self_ptr self, const std::string& saved);
void start(self_ptr self);
/// Sends a control command (pause, resume, checkpoint) to every live
/// platform.
inspection::answer console_control(self_ptr self, messages::verb what);
caf::result<std::string> console_command(self_ptr self, const control& c,
                                         const std::string& via);
void joined(self_ptr self, const std::string& name, const std::string& node, caf::actor handle,
            caf::actor predictor, const std::string& data, uint64_t samples,
            const std::string& stats);

} // namespace eg::actors::balancer_parts

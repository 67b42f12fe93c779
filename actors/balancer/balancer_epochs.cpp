#include "actors/balancer/balancer_state.hpp"
#include <utility>

// The end of an epoch at the balancer: the averaged model evaluated (by the
// evaluator) and tested on every node's test data, push-sum's mass kept,
// the epoch's deadline.

namespace eg::actors::balancer_parts {

void epoch_evaluated(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  st.epochs.close(epoch, clock::now());
  spdlog::info("{}", st.epochs.epoch_line(epoch));
  st.console.epoch_done(st.epochs, epoch);
  if (st.epochs.all_evaluated()) {
    finish(self);
    return;
  }
  if (!st.args.settings.strategy.asynchronous() && epoch < st.last_epoch()
      && !st.epochs.planned(epoch + 1))
    send_plan(self, epoch + 1);
}

/// Push-sum: the live platforms' weights (`answers`, summing to `weights`)
/// should sum to their number. A platform lost takes its weight with it; one
/// restarted from a checkpoint brings that checkpoint's. Scaling every
/// weight by the same factor changes no de-biased model nor their weighted
/// mean: after such a change of the members the balancer restores the sum
/// so. Not otherwise: a message the lanes did not send comes back to its
/// sender, so the weights keep their sum but for what is in flight, which
/// on slow links is much at the barrier too (queued frames, TCP's buffers);
/// scaling that away would make the weight in flight, when it lands,
/// surplus. (Asynchronous: no barrier, so it only logs.)
void keep_push_sum_mass(self_ptr self, uint32_t epoch, const std::vector<held_weights>& answers,
                        double weights) {
  auto& st = self->state;
  const double n = static_cast<double>(answers.size());
  spdlog::info("balancer: after epoch {} the push-sum weights of the {} live platforms sum to "
               "{:.6f}", epoch + 1, answers.size(), weights);
  const bool changed = std::exchange(st.members_changed, false);
  if (st.args.settings.strategy.asynchronous() || !changed || !(weights > 0)
      || std::abs(weights - n) <= 1e-6 * n)
    return;
  const double factor = n / weights;
  for (auto& w : answers)
    self->send(st.handles[w.sender].platform, rescale_atom::value, factor);
  spdlog::info("balancer: push-sum weights scaled by {:.6f} to sum to {} again", factor,
               answers.size());
}

void test_average(self_ptr self, held_weights averaged,
                  std::function<void(std::vector<storage::node_test>)> done);

namespace {

double seconds_now() {
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Every target's current model, then `done` with those that came: a
/// platform in this process answers with its model; one on another node,
/// when this node has a weights lane, sends it there and answers with its
/// header (its model pairs with it in st.lane_models).
void gather_models(self_ptr self, const std::vector<std::pair<std::string, platform_actor>>& targets,
                   std::function<void(std::vector<held_weights>&)> done) {
  auto g = start_gather<held_weights>(self, targets, "weights", std::move(done));
  if (!g)
    return;
  const auto& lane = self->state.args.lane;
  for (auto& [name, handle] : targets) {
    auto failed = [g, name = name](caf::error& err) {
      if (!g->waiting.count(name))
        return;
      spdlog::warn("balancer: no weights from {}: {}", name, caf::to_string(err));
      g->settle(name);
    };
    if (lane.empty() || handle.node() == self->node()) {
      self->request(handle, defaults::weights_timeout, weights_atom::value)
        .then([g, name = name](held_weights& model) { g->answer(name, std::move(model)); }, failed);
      continue;
    }
    self->request(handle, defaults::weights_timeout, weights_atom::value, lane)
      .then(
        [self, g, name = name](held_weights& answer) {
          if (!g->waiting.count(name))
            return;
          if (!answer.value.tensors.empty() || !answer.value.sparse.empty())
            return g->answer(name, std::move(answer));  // it came whole
          lane_model_key key{name, answer.value.epoch, answer.value.iteration};
          auto both = self->state.lane_models.first(key, g, seconds_now());
          if (both)
            g->answer(name, std::move(both->second));
        },
        failed);
  }
}

} // namespace

void lane_model_arrived(self_ptr self, held_weights model) {
  const auto name = model.sender;
  lane_model_key key{name, model.value.epoch, model.value.iteration};
  auto both = self->state.lane_models.second(key, std::move(model), seconds_now());
  if (!both)
    return;
  both->first->answer(name, std::move(both->second));
}

void expire_lane_models(self_ptr self) {
  auto gone = self->state.lane_models.expire(seconds_now());
  for (auto& [key, g] : gone.firsts) {
    if (!g->waiting.count(std::get<0>(key)))
      continue;
    spdlog::warn("balancer: the model of {} did not come on the weights lane within {:.0f} s; "
                 "the average leaves it out",
                 std::get<0>(key), lane_model_wait_seconds);
    g->settle(std::get<0>(key));
  }
  if (gone.seconds > 0)
    spdlog::info("balancer: {} model(s) came on the weights lane after their request was given "
                 "up; dropped",
                 gone.seconds);
}

/// All live platforms reported `epoch`: averages their current models.
void evaluate_average(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  if (!st.epochs.begin_evaluation(epoch, clock::now()))
    return;
  if (!st.epochs.averages(epoch)) {
    // train.average_every: the reports end this epoch; no model moves.
    st.epochs.evaluation_done(epoch, std::vector<storage::node_test>{}, 0.0);
    save_run_state(self);
    epoch_evaluated(self, epoch);
    return;
  }
  std::vector<std::pair<std::string, platform_actor>> targets;
  for (auto& name : st.epochs.live())
    targets.emplace_back(name, st.handles[name].platform);
  gather_models(
    self, targets,
    [self, epoch](std::vector<held_weights>& answers) {
      auto& st = self->state;
      if (st.minority) {  // paused meanwhile: this side may not close it
        st.epochs.cancel_evaluation(epoch);
        spdlog::info("balancer: epoch {} is not closed here: this node reaches no majority of "
                     "the cluster",
                     epoch + 1);
        return;
      }
      std::vector<double> samples;               // each model's weight in the average
      std::vector<std::vector<double>> classes;  // and of its rows of the output layer
      // Push-sum: the consensus is sum_i w_i z_i / sum_i w_i, and the weights
      // sum to the number of platforms but for what is in flight. EdgeGossip
      // over push-sum with merge = "rate" counts each model by w_i times the
      // points it trained this epoch, as its merges do under GoSGD: a
      // platform on a small share, whose model lags the others under sparse
      // messages, weighs in as much as it trained (the platforms' own
      // states, and push-sum's weights, are untouched).
      const bool push_sum = st.args.settings.strategy.push_sum();
      double weights = 0;
      for (auto& w : answers) {
        weights += w.value.gossip_weight;
        samples.push_back(model_weight(st.args.settings, w.value.gossip_weight,
                                       st.epochs.averaging_weight(epoch, w.sender)));
        classes.push_back(push_sum ? std::vector<double>{}
                                   : st.epochs.class_weights(epoch, w.sender));
      }
      if (push_sum && !answers.empty())
        keep_push_sum_mass(self, epoch, answers, weights);
      const auto start = clock::now();
      auto done = [self, epoch, start](std::vector<storage::node_test> tests) {
        auto& st = self->state;
        if (st.minority) {
          st.epochs.cancel_evaluation(epoch);
          spdlog::info("balancer: epoch {} is not closed here: this node reaches no majority "
                       "of the cluster",
                       epoch + 1);
          return;
        }
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        st.epochs.evaluation_done(epoch, std::move(tests), seconds);
        if (epoch < st.last_epoch())
          save_run_state(self);  // the last one is saved by finish, marked finished
        epoch_evaluated(self, epoch);
      };
      self
        ->request(caf::actor_cast<evaluator_actor>(st.evaluator), caf::infinite,
                  evaluate_atom::value, std::move(answers), std::move(samples),
                  std::move(classes))
        .then(
          [self, done](held_weights& averaged) {
            if (averaged.value.tensors.empty())
              return done({});
            self->state.latest_model = *self->state.averaged_model;
            test_average(self, std::move(averaged), done);
          },
          [self, done](caf::error& err) {
            spdlog::error("balancer: the averaged model was not made: {}",
                          self->system().render(err));
            done({});
          });
    });
}

/// Every node with test data tests the averaged model on it; `done` gets
/// the answers (a node that does not answer within the weights timeout, or
/// refuses, is left out of this epoch's accuracy and named).
void test_average(self_ptr self, held_weights averaged,
                  std::function<void(std::vector<storage::node_test>)> done) {
  auto& st = self->state;
  for (auto& n : st.args.settings.layout.nodes)
    if (!st.testers.count(n.name) && st.untested.insert(n.name).second)
      spdlog::info("balancer: node {} has no tester reachable (no test data, or the node is "
                   "down): the cluster's accuracy leaves it out until it has",
                   n.name);
  struct pending {
    size_t waiting = 0;
    std::vector<storage::node_test> tests;
    std::function<void(std::vector<storage::node_test>)> done;
    void settle() {
      if (--waiting == 0 && done) {
        std::sort(tests.begin(), tests.end(),
                  [](auto& a, auto& b) { return a.node < b.node; });
        auto d = std::move(done);
        done = nullptr;
        d(std::move(tests));
      }
    }
  };
  auto p = std::make_shared<pending>();
  p->done = std::move(done);
  p->waiting = st.testers.size();
  if (p->waiting == 0)
    return p->done({});
  for (auto& [node, tester] : st.testers)
    self->request(tester.first, defaults::weights_timeout, test_atom::value, averaged,
                  st.norm_text)
      .then(
        [p, node = node](double loss_sum, uint64_t correct, uint64_t samples) {
          p->tests.push_back({node, correct, samples,
                              samples ? loss_sum / static_cast<double>(samples) : 0.0});
          p->settle();
        },
        [self, p, node = node](caf::error& err) {
          spdlog::warn("balancer: node {} did not test the averaged model: {}", node,
                       self->system().render(err));
          p->settle();
        });
}


/// The deadline of `epoch` came: cuts the platforms still training it.
void deadline_passed(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  auto due = st.epochs.deadline_passed(epoch, clock::now(), st.console.paused);
  if (st.finished || (!due.wait && due.cut.empty()))
    return;
  if (due.wait)
    return self->delayed_send(self, micros(*due.wait), deadline_atom::value, epoch);
  std::string names;
  for (auto& name : due.cut) {
    self->send(st.handles[name].platform, cut_atom::value, epoch);
    names += " " + name;
  }
  spdlog::info("balancer: epoch {} deadline ({:.2f} s) passed: cut{}", epoch + 1, due.limit,
               names);
  st.console.cut(epoch, due.limit, names);
}

void check_epochs(self_ptr self) {
  // Paused on a minority side: the epoch in flight is not closed there
  // (one platform's report would close it), as the majority may have gone
  // on with the run.
  if (self->state.minority)
    return;
  for (auto epoch : self->state.epochs.complete_epochs())
    evaluate_average(self, epoch);
}

} // namespace eg::actors::balancer_parts

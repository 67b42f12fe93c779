#include "algorithms/gossip/gossip_worker.hpp"

#include "config/defaults.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <chrono>

namespace eg::learning {

std::unique_ptr<gossip_strategy> make_gossip_strategy(const worker_settings& settings,
                                                      platform_model& model) {
  // The strategy's rule, from its registration (gossip_rules()).
  const auto& sc = settings.strategy;
  sparse_push_options sparse;
  sparse.density = sc.density;
  sparse.consensus_step = sc.consensus_step;
  sparse.values = sc.sparse_values == "float32"  ? messages::value_type::float32
                  : sc.sparse_values == "float8" ? messages::value_type::float8
                  : sc.sparse_values == "sign"   ? messages::value_type::sign
                                                 : messages::value_type::float16;
  sparse.drift_memory = sc.drift_memory;
  sparse.drift_gain = sc.drift_gain;
  return make_strategy(sc.rule(), settings.platforms, sc.exchange_probability,
                       flat_layout::of(model.names(), model.params()), sparse);
}

gossip_worker::gossip_worker(const worker_settings& settings, platform_model& model,
                             std::unique_ptr<gossip_strategy> strategy,
                             std::unique_ptr<topology> topology)
    : worker(settings, model),
      strategy_(std::move(strategy)),
      topology_(std::move(topology)),
      gate_(settings.strategy.push_sum() ? static_cast<uint64_t>(settings.strategy.overlap_tau())
                                         : 0),
      gossip_every_(settings.strategy.push_sum()
                      ? static_cast<uint64_t>(std::max<int64_t>(settings.strategy.gossip_every, 1))
                      : 1) {}

std::string gossip_worker::family() const {
  return settings_.strategy.push_sum() ? "push-sum" : "gossip";
}

// A sparse strategy's edge copies start at the initial model, the same on
// every platform.
void gossip_worker::start() { strategy_->start(model_.params()); }

void gossip_worker::restored(double weight) {
  strategy_->set_weight(weight);
  strategy_->restored(model_.params());
}

void gossip_worker::adopted() { strategy_->restored(model_.params()); }

void gossip_worker::planned(const messages::plan& plan) {
  ratio_ = plan.ratio;
  strategy_->scale_exchange(1.0 / std::max(plan.ratio, 1e-3));
  epoch_ = plan.epoch;
  rounds_ = settings_.strategy.push_sum() ? plan.rounds : 0;
}

void gossip_worker::epoch_begins(size_t batches) {
  gave_up_ = 0;
  gate_.new_epoch();
  batches_ = batches;
  steps_ = done_ = 0;
}

std::vector<worker_note> gossip_worker::epoch_over(uint32_t epoch) {
  std::vector<worker_note> notes;
  if (auto n = strategy_->out_of_step(); n > out_of_step_said_) {
    notes.push_back({true, fmt::format("{} sparse messages arrived out of step with their edge in "
                                       "epoch {} (lost on the way or a peer restarted): merged by "
                                       "their weight alone until the edge's keyframe",
                                       n - out_of_step_said_, epoch + 1)});
    out_of_step_said_ = n;
  }
  if (returned_ > 0) {
    notes.push_back({false, fmt::format("epoch {}: {} message(s) not sent (skipped or lost on the "
                                        "weights lane, or the peer gone) came back with gossip "
                                        "weight {:.6g}",
                                        epoch + 1, returned_, returned_weight_)});
    returned_ = 0;
    returned_weight_ = 0;
  }
  if (gave_up_ > 0)
    notes.push_back(
      {false, fmt::format("epoch {}: {} overlap wait(s) ran out (a peer silent for {} ms: gone, "
                          "paused or with fewer iterations)",
                          epoch + 1, gave_up_,
                          std::chrono::duration_cast<std::chrono::milliseconds>(defaults::overlap_wait)
                            .count())});
  gave_up_ = 0;
  return notes;
}

std::string gossip_worker::epoch_summary(const messages::epoch_report& report) const {
  return fmt::format("received {} messages", report.messages_received);
}

std::vector<std::string> gossip_worker::awaited(uint64_t k) {
  if (rounds_ > 0) {
    // Before this epoch's round done_ + 1, the messages of round
    // done_ + 1 - tau (none in the epoch's first tau rounds: the epoch
    // barrier lines the epochs up).
    const uint64_t tau = gate_.tau();
    if (tau == 0 || done_ + 1 <= tau || done_ >= rounds_)
      return {};
    const uint64_t need = planned_round(done_ + 1 - tau);
    auto sources = topology_->sources(need, settings_.platform, live_);
    if (!sources)
      return {};
    return gate_.missing(need, *sources);
  }
  auto need = gate_.needed_iteration(round(k));
  if (!need)
    return {};
  auto sources = topology_->sources(*need, settings_.platform, live_);
  if (!sources)
    return {};
  return gate_.missing(*need, *sources);
}

size_t gossip_worker::give_up(uint64_t k) {
  auto late = awaited(k);
  gate_.give_up(late);
  gave_up_ += late.size();
  return late.size();
}

worker_outcome gossip_worker::stepped(const step_done& step, const run_position& at) {
  worker_outcome out;
  out.next = step.epoch_done ? next_move::finish_epoch : next_move::step;
  // The targets first: with nobody to send to, no weight leaves. Between two
  // gossip rounds (strategy.gossip_every) nobody: the step is local.
  std::vector<std::string> targets;
  std::vector<double> split;
  const uint64_t k = at.total_iterations;
  // The round's number on the wire, as an iteration of round() (the
  // receivers' overlap wait reads it so).
  uint64_t iteration = k;
  if (rounds_ > 0) {
    // R rounds spread over this epoch's batches: round j at the step where
    // j * batches / R is reached. A platform with fewer batches than rounds
    // (a small share) makes several in one step: one after the other, in
    // one column-stochastic split (split_rounds), so its weight stays exact
    // and it gives out as much a round as the others.
    ++steps_;
    const uint64_t due =
      batches_ == 0 ? rounds_ : std::min<uint64_t>(rounds_, steps_ * rounds_ / batches_);
    std::vector<std::vector<std::string>> rounds;
    for (uint64_t j = done_ + 1; j <= due; ++j)
      rounds.push_back(topology_->targets(planned_round(j), settings_.platform, live_, rng_));
    auto made = split_rounds(rounds);
    targets = std::move(made.peers);
    split = std::move(made.fractions);
    if (due > done_) {
      done_ = due;
      iteration = planned_round(done_) * gossip_every_;
    }
  } else if (k % gossip_every_ == 0) {
    targets = topology_->targets(round(k), settings_.platform, live_, rng_);
    split = equal_split(targets.size());
  }
  // GoSGD and push-sum decide without reading the weights: a platform on a
  // GPU copies them back only when a message goes.
  auto orders = strategy_->after_step(
    strategy_->after_step_reads_parameters() ? model_.params() : model_.host_params(), split,
    rng_);
  for (auto& order : orders) {
    const auto& to = targets.at(order.peer);
    auto payload = strategy_->payload(order, to, model_.names(), model_.params());
    // Sparse parts hold their own bytes; dense views borrow the parameters
    // (a loan: the next step or merge copies them only if the message is
    // still on its way, train/loans.hpp).
    auto hold = payload.hold ? payload.hold : model_.lend();
    // A sparse strategy may send less weight than ordered (0 included).
    const double weight = payload.hold ? payload.weight : order.weight;
    auto message = weights_message(at, weight, std::move(payload.tensors), std::move(hold));
    message.value.iteration = iteration;
    message.value.sparse = std::move(payload.sparse);
    message.value.edge_seq = payload.edge_seq;
    message.value.generation = payload.generation;
    message.value.keyframe = payload.keyframe;
    message.value.withdrawn = payload.withdrawn;
    for (auto& p : message.value.sparse)
      message.wire_bytes += p.index_bytes + p.value_bytes;
    out.sends.push_back({to, std::move(message)});
  }
  // Peers whose edge to this platform went out of step: asked for a
  // keyframe, with a message that carries no model and no weight.
  for (auto& peer : strategy_->keyframe_requests()) {
    if (std::find(live_.begin(), live_.end(), peer) == live_.end())
      continue;  // gone: it sends a keyframe when it sees this platform again
    auto message = weights_message(at, 0, {}, nullptr);
    message.value.keyframe_request = true;
    out.sends.push_back({peer, std::move(message)});
  }
  return out;
}

void gossip_worker::unsent(const std::string& to, const messages::held_weights& message) {
  if (message.value.keyframe_request)
    return;  // the receiver asks again if its edge stays out of step
  if (!message.value.sparse.empty())
    model_.before_write();
  strategy_->withdraw(model_.params(), to, message.value);
  ++returned_;
  returned_weight_ += message.value.gossip_weight;
}

void gossip_worker::merge(const messages::held_weights& message) {
  if (message.value.keyframe_request) {
    strategy_->keyframe_requested(message.sender);
    return;
  }
  gate_.heard(message.sender, round(message.value.iteration));
  try {
    const auto& w = message.value;
    // EdgeGossip's merging by rate (GoSGD's and the push-sum family's
    // alike): the shares r_i and r_s this epoch; 1 and 1 otherwise.
    double own_rate = 1, received_rate = 1;
    if (settings_.edgegossip.merge == config::merge_rule::rate) {
      own_rate = std::max(ratio_, 1e-3);
      received_rate = w.rate > 0 ? std::max(w.rate, 1e-3) : 1.0;
    }
    if (!w.sparse.empty()) {
      model_.before_write();
      strategy_->merge_sparse(model_.params(), message.sender, w, own_rate, received_rate);
      return;
    }
    auto received = from_views(w.tensors, model_.names(), model_.params());
    model_.before_write();
    strategy_->merge(model_.params(), received, w.gossip_weight, own_rate, received_rate);
  } catch (const std::exception& e) {
    throw refused_message(e.what());
  }
}

void gossip_worker::peers(const std::vector<std::string>& live) {
  strategy_->peers_changed(live);
  live_ = live;
}

bool gossip_worker::rescale(double factor) {
  if (!settings_.strategy.push_sum())
    return false;
  strategy_->set_weight(strategy_->weight() * factor);
  return true;
}

} // namespace eg::learning

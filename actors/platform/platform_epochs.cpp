#include "actors/platform/platform_state.hpp"

#include "config/defaults.hpp"
#include "models/serialize.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <utility>

namespace eg::actors::platform_parts {

namespace {
void commit(self_ptr self, learning::server_commit c);
}

/// Saves the platform's state to its node's store; `saved` (if given) gets
/// whether the store has it.
void checkpoint(self_ptr self, std::function<void(bool)> saved) {
  auto& st = self->state;
  auto name = st.args.platform.name;
  if (st.rolling_back || !model_finite(st)) {
    // The newest checkpoint stays the last good one: what a rollback (or a
    // restart) goes back to.
    spdlog::warn("[{}] checkpoint not saved: {}", name,
                 st.rolling_back ? "its model ran away and is going back to its last checkpoint"
                                 : "its model holds a value that is not a finite number");
    if (saved)
      saved(false);
    return;
  }
  self->request(st.args.store, defaults::checkpoint_timeout, checkpoint_atom::value, name,
                static_cast<uint64_t>(st.epochs_done), st.at.total_iterations,
                st.worker->weight(), learning::save_model(st.trainer().model()),
                learning::save_optimizer(st.trainer().optimizer()))
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
static std::vector<int64_t> adopted(const platform_state& st) {
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

void begin_epoch(self_ptr self) {
  auto& st = self->state;
  auto extra = adopted(st);
  if (!extra.empty())
    spdlog::info("[{}] epoch {}: also training on {} points of failed platforms", st.args.platform.name,
                 st.at.epoch + 1, extra.size());
  auto planned = st.worker->plan_epoch(st.at, extra);
  if (!planned.ranking.empty()) {
    // EdgeGossip's ranking of its aggregated points, kept in the store.
    const auto& ranking = planned.ranking;
    std::string bytes(reinterpret_cast<const char*>(ranking.data()),
                      ranking.size() * sizeof(int64_t));
    self->send(st.args.store, store_atom::value,
               std::string{storage::name(storage::family::rankings)},
               storage::key(st.args.platform.name, st.at.epoch), std::move(bytes));
  }
  auto& plan = planned.plan;
  if (st.args.train.max_iterations > 0
      && plan.batches.size() > static_cast<size_t>(st.args.train.max_iterations))
    plan.batches.resize(static_cast<size_t>(st.args.train.max_iterations));
  st.planned = static_cast<uint64_t>(plan.samples());
  st.planned_batches = plan.batches.size();
  st.epoch_lr = learning::scheduled_lr(st.args.train.lr, st.args.train.lr_schedule, st.at.epoch,
                                       st.last_epoch + 1) *
                rollback_slowdown(st);
  st.trainer().set_lr(st.epoch_lr);
  st.trainer().begin_epoch(std::move(plan));
  st.epoch_start = st.last_progress = st.last_step_end = clock::now();
  if (!st.training_start)
    st.training_start = st.epoch_start;
  st.compute_seconds = st.loss_sum = 0;
  st.samples = st.iterations = st.refused = 0;
  st.rollbacks_before_epoch = st.rollbacks;
  st.running = true;
  st.waiting = false;
  st.worker->epoch_begins(st.planned_batches);
  spdlog::debug("[{}] epoch {} begins: {} batches", st.args.platform.name, st.at.epoch + 1,
                st.trainer().remaining());
  if (!st.step_queued) {  // (one is still on its way when an epoch was left unfinished)
    st.step_queued = true;
    self->send(self, step_atom::value);
  }
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


/// Carries out what the worker asked for: its messages to the mixer, its
/// commit to the server, its notes to the log, then the next move.
void carry_out(self_ptr self, learning::worker_outcome out) {
  auto& st = self->state;
  st.refused += out.refused;
  for (auto& note : out.notes) {
    if (note.warning)
      spdlog::warn("[{}] {}", st.args.platform.name, note.text);
    else
      spdlog::info("[{}] {}", st.args.platform.name, note.text);
  }
  for (auto& s : out.sends)
    self->send(st.args.mixer, send_atom::value, std::move(s.to), std::move(s.message));
  if (out.commit)
    commit(self, std::move(*out.commit));
  if (out.lane_wait)
    self->delayed_send(self, defaults::lane_commit_wait, pull_atom::value, *out.lane_wait);
  switch (out.next) {
    case learning::next_move::finish_epoch:
      finish_epoch(self);
      break;
    case learning::next_move::step:
      if (st.running && !st.paused)
        queue_step(self);
      break;
    case learning::next_move::none:
      break;
  }
}


/// The cluster's normalisation from here on, for training, its own test
/// and the ranking of its aggregated points (means of points normalised
/// with the node's own, moved to the cluster's).
void use_normalisation(self_ptr self, const data::normalisation& norm) {
  auto& st = self->state;
  const auto before = st.trainer().normalisation();
  if (norm == before)
    return;
  st.trainer().set_normalisation(norm);
  if (st.args.test_set)
    st.args.test_set = data::with_normalisation(st.args.test_set, norm);
  st.worker->renormalised(before, norm);
  spdlog::debug("[{}] trains with the cluster's normalisation: {}", st.args.platform.name,
                data::to_text(norm));
}

void take_plan(self_ptr self, const messages::plan& p, caf::actor sender) {
  auto& st = self->state;
  st.balancer = std::move(sender);
  if (!st.running && p.epoch + 1 == st.epochs_done && st.last_report) {
    // This epoch is done here: a balancer that took over (or restarted)
    // did not get the report.
    spdlog::info("[{}] epoch {} was already trained: report sent again",
                 st.args.platform.name, p.epoch + 1);
    self->send(caf::actor_cast<balancer_actor>(st.balancer), report_atom::value,
               *st.last_report);
    return;
  }
  st.at.epoch = p.epoch;
  st.at.ratio = p.ratio;
  st.last_epoch = p.last_epoch;
  st.plan = p;
  st.worker->planned(p);
  if (!st.running)
    begin_epoch(self);
}

void finish_epoch(self_ptr self) {
  auto& st = self->state;
  st.running = false;
  // The epoch's last observation, before the report: the balancer plans the
  // next epoch once every report is in, from predictions that include it.
  if (auto o = st.observed.flush())
    self->send(st.args.predictor, observe_atom::value, o->seconds, o->samples);
  st.epochs_done = st.at.epoch + 1;
  auto r = st.report();
  auto notes = st.worker->epoch_over(st.at.epoch);
  // Its own model on the test set: monitoring, every `evaluate_every`
  // epochs and after the last (-1: not evaluated this epoch).
  const auto every = st.args.train.evaluate_every;
  r.test_loss = r.test_accuracy = -1;
  if (every > 0 && st.args.test_set &&
      ((st.at.epoch + 1) % every == 0 || st.at.epoch >= st.last_epoch)) {
    auto eval = learning::evaluate(st.trainer().model(), *st.args.test_set);
    r.test_loss = eval.loss;
    r.test_accuracy = eval.accuracy;
  }
  checkpoint(self);
  self->request(st.args.mixer, caf::infinite, stats_atom::value)
    .then([self, r, notes](epoch_report& s) mutable {
      auto& st = self->state;
      r.bytes_sent = s.bytes_sent;
      r.bytes_received = s.bytes_received;
      r.sent = s.sent;
      r.received = s.received;
      r.messages_sent = s.messages_sent;
      r.messages_received = s.messages_received;
      r.messages_refused += s.messages_refused;
      r.received_from = std::move(s.received_from);
      r.link = s.link;
      // The link's epoch, for the predictor, before the report: the
      // balancer asks for predictions once every report is in.
      self->send(st.args.predictor, observe_atom::value, r.link.send_seconds,
                 r.link.bytes_sent, r.link.receive_seconds, r.link.bytes_received);
      spdlog::info("[{}] epoch {} done: {} samples in {:.2f} s ({:.0f}/s), loss {:.4f}, "
                   "test accuracy {:.4f}, {}",
                   st.args.platform.name, r.epoch + 1, r.samples, r.wall_seconds,
                   r.wall_seconds > 0 ? r.samples / r.wall_seconds : 0.0, r.train_loss,
                   r.test_accuracy, st.worker->epoch_summary(r));
      st.last_report = r;
      carry_out(self, learning::worker_outcome{{}, {}, learning::next_move::none, {}, 0, notes});
      self->send(st.args.store, metrics_atom::value, st.args.platform.name,
                 static_cast<uint64_t>(r.epoch), r);
      self->send(st.args.node, report_atom::value, r);
      if (st.balancer)
        self->send(caf::actor_cast<balancer_actor>(st.balancer), report_atom::value, r);
      if (auto next = std::exchange(st.next_plan, std::nullopt)) {
        // A plan that came during the epoch: its balancer hears the report
        // too, and a later epoch's plan begins now.
        auto& [p, sender] = *next;
        if (sender && sender != st.balancer)
          self->send(caf::actor_cast<balancer_actor>(sender), report_atom::value, r);
        if (p.epoch > r.epoch) {
          take_plan(self, p, sender);
          return;
        }
      }
      // Asynchronous schedule: no barrier, go straight on.
      if (st.args.strategy.asynchronous() && st.at.epoch < st.last_epoch) {
        ++st.at.epoch;
        begin_epoch(self);
      }
    });
}

/// Stops stepping: the step in flight finds `paused` and ends the chain (a
/// plan received while paused begins its epoch without stepping). The
/// balancer hears where training stopped.
void pause(self_ptr self) {
  auto& st = self->state;
  if (self->current_sender())
    st.paused_by = caf::actor_cast<caf::actor_addr>(self->current_sender());
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

/// One training iteration, unless the worker holds it back (a commit in
/// flight, an awaited message); then the worker's part.
void step(self_ptr self) {
  auto& st = self->state;
  st.step_queued = false;
  if (!st.running || st.paused || st.rolling_back || !st.worker->ready())
    return;
  if (!st.worker->awaited(st.at.total_iterations).empty()) {
    // A merge that brings the last awaited message queues the step.
    if (!st.waiting) {
      st.waiting = true;
      st.waiting_since = clock::now();
      self->delayed_send(self, defaults::overlap_wait, overlap_atom::value,
                         st.at.total_iterations);
    }
    return;
  }
  if (st.waiting) {
    // The wait for a peer is not this platform's speed: the predictor (and
    // so Algorithm 1's share) would take a platform whose in-neighbour is
    // slow for a slow one, and shrink its share, epoch after epoch.
    st.last_step_end += clock::now() - st.waiting_since;
  }
  st.waiting = false;
  if (st.args.train.lr_warmup > 0 && st.at.epoch < st.args.train.lr_warmup) {
    const double progress =
      st.at.epoch + static_cast<double>(st.iterations + 1)
                      / static_cast<double>(std::max<uint64_t>(st.planned_batches, 1));
    st.trainer().set_lr(st.epoch_lr * learning::warmup_factor(st.args.train.lr_warmup, progress));
  }
  auto r = st.trainer().step();
  st.compute_seconds += r.compute_seconds;
  if (std::isfinite(r.loss))
    st.loss_sum += r.loss;
  const auto ran_away = st.guard ? st.guard->loss(r.loss) : std::nullopt;
  st.samples += static_cast<uint64_t>(r.samples);
  ++st.iterations;
  ++st.at.total_iterations;
  // What the predictor learns from: wall time per point, idle included.
  auto now = clock::now();
  if (auto o = st.observed.add(std::chrono::duration<double>(now - st.last_step_end).count(),
                               static_cast<uint64_t>(r.samples)))
    self->send(st.args.predictor, observe_atom::value, o->seconds, o->samples);
  st.last_step_end = now;
  if (st.balancer && clock::now() - st.last_progress >= defaults::progress_report_interval) {
    st.last_progress = clock::now();
    self->send(caf::actor_cast<balancer_actor>(st.balancer), progress_atom::value, st.report());
  }
  const bool epoch_done = st.trainer().epoch_done();
  // Emulated slowdown: idle (without holding a thread) for the extra time a
  // platform this many times slower would need, before the next step (after
  // a commit's answer too, so that a slow worker commits at its slow pace).
  if (!epoch_done)
    st.idle_owed = r.compute_seconds * std::max(st.slowdown() - 1.0, 0.0);
  // Messages reference the parameters (no copy) and hold a loan on them
  // until written: the next step or merge copies them only if one is still
  // on its way (train/loans.hpp).
  if (ran_away && st.worker->rolls_back()) {
    roll_back(self, {r.loss, epoch_done, st.now()}, *ran_away);
    return;
  }
  carry_out(self, st.worker->stepped({r.loss, epoch_done, st.now()}, st.at));
}

namespace {

/// A commit to the parameter server: typed to a server in this process (or
/// without a lane), else the update on the weights lane and the rest typed.
/// The answer goes to the worker.
void commit(self_ptr self, learning::server_commit c) {
  auto& st = self->state;
  auto server = caf::actor_cast<server_actor>(st.server);
  const auto generation = c.generation;
  auto failed = [self, generation](caf::error& err) {
    std::string why;
    const bool lost = is(err, ec::lost, &why);
    if (!lost)
      why = self->system().render(err);
    carry_out(self, self->state.worker->unanswered(generation, lost, why, self->state.now()));
  };
  if (c.lane.empty()) {
    self
      ->request(server, defaults::commit_timeout, commit_atom::value, std::move(c.update), c.loss,
                c.overhead, c.epoch_end)
      .then(
        [self, generation](held_global_model& global, int64_t steps, double seconds) {
          auto& st = self->state;
          carry_out(self, st.worker->answered(generation, global, steps, seconds, st.now()));
        },
        failed);
    return;
  }
  const auto number = c.update.value.number;
  self->send(st.args.mixer, commit_atom::value, c.lane, std::move(c.update));
  self
    ->request(server, defaults::commit_timeout, commit_atom::value, st.args.platform.name,
              number, c.loss, c.overhead, c.epoch_end)
    .then(
      [self, generation](uint64_t version, int64_t steps, double seconds) {
        auto& st = self->state;
        carry_out(self,
                  st.worker->answered_on_lane(generation, version, steps, seconds, st.now()));
      },
      failed);
}

} // namespace

} // namespace eg::actors::platform_parts

#include "actors/node/node_state.hpp"
#include "common/error.hpp"

#include "actors/node/metrics.hpp"
#include "actors/report_files.hpp"
#include "config/defaults.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

// The node's run from its end: who is done, the run state kept on every
// node, a stop, a store that fails, and the node's own end.

namespace eg::actors::node_detail {

void heard_run_over(self_ptr self, const std::string& peer, const std::string& run) {
  auto& st = self->state;
  if (run.empty() || st.finished || st.over_armed || !st.ended.empty())
    return;
  if (!st.run.empty() && st.run != run)
    return;  // another run than this node's
  spdlog::warn("[{}] node {} saw run {} end while this node was down or cut off: ending the "
               "node once its own work is saved (at most {} s)",
               st.args.name, peer, run,
               std::chrono::duration_cast<std::chrono::seconds>(defaults::over_grace).count());
  st.run = run;
  st.ended = run;
  st.over_armed = true;
  self->delayed_send(self, defaults::over_grace, over_atom::value);
}

void finish(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.args.settings.nodes.size() > 1 && !st.run.empty() && !st.reports.empty()) {
    namespace fs = std::filesystem;
    auto dir = fs::path(st.args.settings.output_dir) / st.run;
    try {
      fs::create_directories(dir);
      write_platform_csv((dir / (st.args.name + "-metrics.csv")).string(), st.reports);
    } catch (const std::exception& e) {
      spdlog::error("[{}] cannot write its metrics: {}", st.args.name, eg::describe(e));
    }
  }
  if (st.lane) {
    auto l = st.lane->stats();
    spdlog::info("[{}] weights lane: {} messages sent, {} received; {} skipped (waited more "
                 "than cluster.gossip_max_wait or pushed out of a full queue), {} lost (peer "
                 "unreachable or gone), {} refused; {} connections refused",
                 st.args.name, l.frames_sent, l.frames_received, l.frames_skipped, l.frames_lost,
                 l.frames_refused, l.connections_refused);
  }
  // Flush the store, then answer the launcher; the short grace period lets
  // the last messages to peers leave before the process goes.
  self->request(st.args.store, defaults::flush_timeout, flush_atom::value)
    .then([self](bool) {
      self->delayed_send(self, defaults::release_delay, release_atom::value);
    },
    [self](caf::error&) { self->send(self, release_atom::value); });
}

/// A local platform, the balancer, the first stage (or a peer node that saw
/// the run end) is done with run `run`.
void someone_done(self_ptr self, messages::role who, const std::string& name, const std::string& run) {
  auto& st = self->state;
  if (!from_cluster(self))
    return;
  if (who == messages::role::node) {
    // A peer that saw the run end while this node was away.
    heard_run_over(self, name, run);
    return;
  }
  st.run = run;
  st.ended = run;  // a platform is done, or the balancer or first stage ended the run
  if (who == messages::role::stage) {
    // The first stage ended the split run: every node is told (by the
    // first stage's node), then ends.
    if (st.split_over)
      return;
    st.split_over = true;
    if (self->current_sender()->node() == self->node())
      for (auto& [peer, handle] : st.peers)
        self->send(handle, done_atom::value, who, name, run);
  }
  if (who == messages::role::balancer)
    st.balancer_done = true;
  else if (who == messages::role::platform)
    st.done.insert(name);
  if (st.all_done())
    finish(self);
  else if (who == messages::role::balancer && !st.over_armed) {
    // The run is over: local platforms that do not say so within 30 s
    // (a done message lost on the way) do not keep the node up.
    st.over_armed = true;
    self->delayed_send(self, defaults::over_grace, over_atom::value);
  }
}

/// A local platform's epoch report (or a split run's epoch, from its first
/// stage), for the node's metrics.
void keep_report(self_ptr self, const epoch_report& r) {
  auto& st = self->state;
  if (!from_cluster(self))
    return;
  st.reports.push_back(r);
  if (st.args.metrics && self->current_sender()->node() == self->node())
    st.args.metrics->report(r);
  // A split run's epochs, from the first stage here: every node keeps
  // them (the console's view on any node).
  if (st.split() && self->current_sender()->node() == self->node())
    for (auto& [peer, handle] : st.peers)
      self->send(handle, report_atom::value, r);
}

/// Control for the whole node: stop (final checkpoints, then the end).
void stop_node(self_ptr self, const control& c) {
  auto& st = self->state;
  if (!from_cluster(self)) {
    spdlog::warn("[{}] refused control '{}' from outside the cluster", st.args.name,
                 messages::to_string(c.verb));
    return;
  }
  if (c.verb == messages::verb::refuse) {
    // One of this node's platforms was refused by the balancer (its data
    // or settings are not the cluster's). The node's platforms share its
    // data and its settings, so the whole node stops: its process exits
    // with code 2, the reason its last line, and the run goes on without it.
    if (self->current_sender()->node() != self->node() || st.finished || st.stopping)
      return;
    if (st.args.refusal && st.args.refusal->empty())
      *st.args.refusal = c.argument;
    spdlog::error("[{}] {}: stopping this node", st.args.name, c.argument);
    st.stopping = true;
    finish(self);
    return;
  }
  if (c.verb != messages::verb::stop) {
    spdlog::warn("[{}] a node does not take '{}'", st.args.name, messages::to_string(c.verb));
    return;
  }
  if (!st.finished && !st.stopping) {
    spdlog::info("[{}] stopping: final checkpoints", st.args.name);
    st.stopping = true;
    // The store is flushed once every platform's final checkpoint is in
    // it (or after 30 s, when a platform does not answer).
    auto pending = std::make_shared<size_t>(st.platforms.size());
    if (*pending == 0)
      finish(self);
    for (auto& p : st.platforms)
      self->request(p.platform, defaults::control_timeout, control_atom::value,
                    control{messages::verb::stop, {}})
        .then(
          [self, pending](bool) {
            if (--*pending == 0)
              finish(self);
          },
          [self, pending](caf::error& err) {
            spdlog::error("[{}] a platform did not save its final checkpoint: {}",
                          self->state.args.name, caf::to_string(err));
            if (--*pending == 0)
              finish(self);
          });
  }
}

/// The grace after the run's end passed: the node ends, done or not.
void run_over(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  std::string missing;
  for (auto& p : st.platforms)
    if (!st.done.count(p.name))
      missing += " " + p.name;
  if (!missing.empty())
    spdlog::warn("[{}] the run is over but{} did not finish; ending the node", st.args.name,
                 missing);
  else
    spdlog::warn("[{}] the run is over; ending the node", st.args.name);
  finish(self);
}

/// The balancer's run state: kept in every node's store.
void keep_run_state(self_ptr self, const std::string& state) {
  auto& st = self->state;
  if (!from_cluster(self))
    return;
  // Every node keeps the balancer's latest run state.
  for (auto& e : st.directory.of_role(messages::role::store))
      self->send(caf::actor_cast<store_actor>(e.handle), store_atom::value,
                 std::string{storage::name(storage::family::runs)},
                 std::string{storage::run_state_key}, state);
  // The run is over: local platforms that do not say they are done
  // within the grace period (their done message lost, their node cut
  // off when the balancer finished) do not keep the node up.
  std::string problem;
  auto r = storage::parse_run_state(state, problem);
  // Our own balancer's progress goes into our hello: two balancers that
  // meet after a cut keep the one that went further.
  if (r && st.balancer && self->current_sender() &&
      self->current_sender()->address() == st.balancer->address())
    st.directory.set_samples(messages::role::balancer, st.args.name, r->epochs.size());
  if (r && r->finished && !st.finished && !st.over_armed) {
    st.over_armed = true;
    st.run = r->run;
    self->delayed_send(self, defaults::over_grace, over_atom::value);
  }
}

/// This process's store cannot write: reported once; the node goes on or
/// stops as cluster.on_store_failure says.
void store_failed(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (self->current_sender() && self->current_sender()->node() != self->node())
    return;  // only this process's store says so
  if (!st.store_failure.empty())
    return;
  st.store_failure = why;
  for (auto& e : st.directory.of_role(messages::role::balancer))  // for the console
      self->send(caf::actor_cast<balancer_actor>(e.handle), failed_atom::value, st.args.name,
                 why);
  if (st.args.settings.on_store_failure == config::store_failure_action::stop
      && !st.finished) {
    spdlog::error("[{}] the store cannot write ({}); cluster.on_store_failure = \"stop\": "
                  "stopping the node",
                  st.args.name, why);
    self->send(self, control_atom::value, control{messages::verb::stop, {}});
  } else {
    spdlog::error("[{}] the store cannot write ({}); training goes on without checkpoints "
                  "(cluster.on_store_failure = \"continue\")",
                  st.args.name, why);
  }
}

bool platform_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto p = std::find_if(st.platforms.begin(), st.platforms.end(), [&](const local_platform& lp) {
    return lp.platform.address() == dm.source;
  });
  if (p == st.platforms.end())
    return false;
  // An error ends it with the node (they are linked); done, it said so
  // before it ended.
  if (dm.reason || st.finished || st.done.count(p->name) > 0)
    return true;
  st.left.insert(p->name);
  st.done.insert(p->name);
  if (st.left.size() == st.platforms.size() && st.args.failure && st.args.failure->empty())
    *st.args.failure = "every platform of this node left the run (each one's model kept running "
                       "away after train.max_rollbacks rollbacks; its log says why): a smaller "
                       "train.lr may train";
  if (st.all_done())
    finish(self);
  return true;
}

/// A monitored peer node is down: its components leave the directory; a
/// balancer or server it hosted is succeeded; it is dialled again.
void peer_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto i = st.peers.begin(); i != st.peers.end(); ++i) {
    if (i->second.address() != dm.source)
      continue;
    auto name = i->first;
    st.peer_ids.erase(i->second.node());
    st.peers.erase(i);
    st.lanes.erase(name);
    st.lost.insert(name);
    bool had_balancer = st.directory.balancer_home() == name;
    st.directory.remove_node(name);
    if (st.finished)
      return;
    spdlog::warn("[{}] node {} is down ({})", st.args.name, name, caf::to_string(dm.reason));
    // A peer that dialled us again just now (after a freeze, a cut): this
    // is its old connection ending, and it takes itself to be peered over
    // the new one, so it will not dial again; CAF dropped our route to it
    // with the old one. Dialled back from here.
    auto last = st.rehandshake_at.find(name);
    if (last != st.rehandshake_at.end() &&
        std::chrono::steady_clock::now() - last->second <
          std::chrono::duration<double>(st.args.settings.peer_timeout) &&
        !dials(st.args.settings.node_names(), st.args.name, name) &&
        st.dial_back
          .emplace(name, std::chrono::steady_clock::now() + defaults::dial_back_window)
          .second)
      spdlog::info("[{}] node {} dialled this node again {:.1f} s ago: its old connection "
                   "ended, dialling it back",
                   st.args.name, name,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - last->second)
                     .count());
    publish_peers(self);
    check_balancer_majority(self);
    if (had_balancer && !st.split())
      self->delayed_send(self, defaults::succession_delay, elect_atom::value);
    // The server's node, or one before this node in the server's
    // succession: perhaps this node's turn now.
    if (st.args.server && !st.server)
      self->delayed_send(self, defaults::succession_delay, serve_atom::value);
    // It may come back: keep dialling.
    self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
    return;
  }
}

} // namespace eg::actors::node_detail

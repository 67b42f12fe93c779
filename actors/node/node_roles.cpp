#include "actors/node/node_state.hpp"

#include "actors/balancer/balancer.hpp"
#include "actors/server.hpp"
#include "config/defaults.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

// Who hosts the roles a cluster has once: the balancer and the parameter
// server, by succession, on the majority's side of a cut; two of them after
// a cut give way to one.

namespace eg::actors::node_detail {

namespace {

/// Two of a role hosted once per cluster (a successor, and the node that
/// came back): the one on the node first in `order` stays; ours (`mine`)
/// stops if it is the other one.
template <class Handle>
void give_way(self_ptr self, messages::role role, const succession& order,
              std::optional<Handle>& mine, const char* what, bool by_progress) {
  auto& st = self->state;
  if (!mine)
    return;
  uint64_t my_progress = 0;
  for (auto& e : st.directory.of_role(role))
    if (e.what.node == st.args.name)
      my_progress = e.what.samples;
  for (auto& e : st.directory.of_role(role))
    if (e.what.node != st.args.name &&
        (by_progress ? order.gives_way(st.args.name, my_progress, e.what.node, e.what.samples)
                     : order.gives_way(st.args.name, e.what.node))) {
      spdlog::warn("[{}] node {} hosts the {} too{}: stopping ours", st.args.name, e.what.node,
                   what,
                   by_progress && e.what.samples != my_progress
                     ? fmt::format(" ({} epochs evaluated against our {})", e.what.samples,
                                   my_progress)
                     : std::string{});
      if (role == messages::role::balancer && st.balancer_paused) {
        // Ours paused the platforms here while this node was on a minority
        // side: they stay paused until the balancer that stays plans them
        // (a plan from another balancer than the one that paused a platform
        // resumes it, and leaves an epoch the run has passed unfinished), so
        // none trains on in an epoch of the run that gave way.
        st.balancer_paused = false;
        st.majority_asking = false;
        st.kept_elsewhere.clear();
      }
      self->unlink_from(*mine);
      self->send_exit(*mine, caf::exit_reason::user_shutdown);
      mine.reset();
      st.directory.remove(role, st.args.name);
      rehello(self);
      return;
    }
}

} // namespace

void resolve_balancers(self_ptr self) {
  auto& st = self->state;
  give_way(self, messages::role::balancer, st.succession, st.balancer, "balancer", true);
}

namespace {

/// The nodes this node reaches now: its live peers.
std::set<std::string> reachable_peers(const node_state& st) {
  std::set<std::string> out;
  for (auto& [name, _] : st.peers)
    out.insert(name);
  return out;
}

} // namespace

namespace {

/// Asks every peer whether it follows a balancer on a node other than
/// this one; `done` gets "node PEER follows the balancer on node HOME" for
/// the first that does, "" when none does (or none answers).
void ask_who_follows(self_ptr self, std::function<void(const std::string&)> done) {
  auto& st = self->state;
  struct poll {
    size_t pending = 0;
    std::string follows;
    std::function<void(const std::string&)> done;
  };
  auto p = std::make_shared<poll>();
  p->pending = st.peers.size();
  p->done = std::move(done);
  auto settle = [p] {
    if (p->pending > 0 && --p->pending > 0)
      return;
    p->done(p->follows);
  };
  if (st.peers.empty())
    return settle();
  for (auto& [name, peer] : st.peers)
    self->request(peer, defaults::handshake_timeout, where_atom::value, st.args.name)
      .then(
        [self, p, settle, name = name](const std::string& home) {
          if (!home.empty() && home != self->state.args.name && p->follows.empty())
            p->follows = "node " + name + " follows the balancer on node " + home;
          settle();
        },
        [settle](caf::error&) { settle(); });
}

} // namespace

namespace {

/// Tells the balancer hosted here to pause or resume its platforms (its
/// node lost or regained a majority): it closes no epoch while paused so.
void tell_balancer(self_ptr self, messages::verb what) {
  auto& st = self->state;
  messages::control c;
  c.verb = what;
  self->request(*st.balancer, defaults::handshake_timeout, inspect_atom::value, c,
                std::string{majority_via})
    .then([](const std::string&) {}, [](caf::error&) {});
}

/// This node reaches a majority again and its balancer is paused: before
/// it resumes, every peer is asked whether it follows a balancer on
/// another node (the majority's side elected one while this node was cut
/// off). Only if none does does ours resume; otherwise it stays paused and
/// asks again later, until it meets that balancer and one of the two gives
/// way (resolve_balancers), or that balancer is gone.
void ask_before_resuming(self_ptr self) {
  self->state.majority_asking = true;
  ask_who_follows(self, [self](const std::string& follows) {
    auto& st = self->state;
    st.majority_asking = false;
    if (!st.balancer || !st.balancer_paused || st.finished)
      return;
    const auto reachable = reachable_peers(st);
    if (!st.succession.majority(st.args.name, reachable, st.args.settings.majority))
      return;  // lost it again meanwhile: stays paused
    if (!follows.empty()) {
      if (st.kept_elsewhere != follows)
        spdlog::info("[{}] reaches {} of the cluster's {} nodes again, but {}: the balancer "
                     "here stays paused until it meets that one",
                     st.args.name, reachable.size() + 1, st.args.settings.nodes.size(), follows);
      st.kept_elsewhere = follows;
      self->delayed_send(self, defaults::election_retry, recheck_atom::value);
      return;
    }
    st.kept_elsewhere.clear();
    st.balancer_paused = false;
    spdlog::info("[{}] reaches {} of the cluster's {} nodes again and no other balancer kept "
                 "the run: the balancer here resumes its platforms",
                 st.args.name, reachable.size() + 1, st.args.settings.nodes.size());
    tell_balancer(self, messages::verb::resume);
    // The platforms of the nodes it reaches, held back while it was paused.
    for (auto& n : st.args.settings.nodes)
      announce_platforms(self, n.name);
  });
}

} // namespace

void check_balancer_majority(self_ptr self) {
  auto& st = self->state;
  if (!st.balancer || st.finished || st.split())
    return;
  const auto reachable = reachable_peers(st);
  const bool majority =
    st.succession.majority(st.args.name, reachable, st.args.settings.majority);
  if (!majority) {
    if (st.balancer_paused)
      return;
    st.balancer_paused = true;
    spdlog::warn("[{}] reaches {} of the cluster's {} nodes, not a majority: the balancer here "
                 "pauses its platforms until it does (the other side may go on with the run)",
                 st.args.name, reachable.size() + 1, st.args.settings.nodes.size());
    tell_balancer(self, messages::verb::pause);
    return;
  }
  if (st.balancer_paused && !st.majority_asking)
    ask_before_resuming(self);
}

void resolve_servers(self_ptr self) {
  auto& st = self->state;
  give_way(self, messages::role::parameter_server, st.server_succession, st.server,
           "parameter server", false);
}

void start_server(self_ptr self, bool continuing) {
  auto& st = self->state;
  auto args = *st.args.server;
  if (continuing) {
    if (st.args.load_server_checkpoint)
      args.restore = st.args.load_server_checkpoint();
    if (!args.restore)
      spdlog::warn("[{}] no checkpoint of the parameter server in this node's store: the "
                   "server starts from the initial model",
                   st.args.name);
  }
  const auto workers = args.workers.size();
  args.lane = st.lane;
  args.cluster_id = st.args.settings.cluster_id;
  st.server = spawn_server(self->system(), std::move(args));
  st.routes->set_server(caf::actor_cast<caf::actor_addr>(*st.server));
  self->link_to(*st.server);
  st.directory.add({messages::role::parameter_server, st.args.name, st.args.name, {}, 0, {}, {}},
                   caf::actor_cast<caf::actor>(*st.server));
  spdlog::info("[{}] parameter server started for {} workers", st.args.name, workers);
}

/// Starts the balancer here: a new run, or (with a saved run state) the run
/// its state describes.
void start_balancer(self_ptr self, bool continuing) {
  auto& st = self->state;
  auto args = st.args.balancer;
  args.node = caf::actor_cast<node_actor>(self);
  if (st.lane)
    args.lane = messages::to_string(messages::lane_endpoint{
      st.args.name, st.args.settings.node(st.args.name).host, st.lane->port()});
  if (continuing) {
    std::optional<storage::run_state> saved;
    if (st.args.load_run_state)
      saved = st.args.load_run_state();
    if (saved && saved->finished && saved->fingerprint == args.fingerprint) {
      // The balancer that was lost had finished the run: no new one here,
      // and nothing left for this node to do.
      spdlog::warn("[{}] run {} is over (its balancer finished it); ending the node",
                   st.args.name, saved->run);
      st.run = saved->run;
      st.ended = saved->run;
      self->send(self, over_atom::value);
      return;
    }
    if (saved && saved->fingerprint == args.fingerprint)
      args.resume = std::move(saved);
    else
      args.resume = storage::run_state{args.fingerprint, "", false, {}, {}, 0, {}};
  }
  // What it announces: the epochs of the run evaluated so far.
  const uint64_t evaluated = args.resume ? args.resume->epochs.size() : 0;
  st.balancer = spawn_balancer(self->system(), std::move(args));
  st.routes->set_balancer(caf::actor_cast<caf::actor_addr>(*st.balancer));
  self->link_to(*st.balancer);
  st.balancer_paused = false;
  st.directory.add({messages::role::balancer, st.args.name, st.args.name, {}, evaluated, {}, {}},
                   caf::actor_cast<caf::actor>(*st.balancer));
  for (auto& n : st.args.settings.nodes)
    announce_platforms(self, n.name);
  publish_testers(self);
  // Continuing, it goes on with the platforms of the live nodes, announced
  // just now, instead of waiting for every configured platform.
  if (continuing)
    self->send(*st.balancer, start_atom::value);
}

/// Whether this node, with the peers it reaches now, is on the side of a
/// cut network that may start `what` (succession::majority); says once why
/// not, and again once it is.
bool on_majority_side(self_ptr self, const char* what) {
  auto& st = self->state;
  const auto reachable = reachable_peers(st);
  const bool yes = st.succession.majority(st.args.name, reachable, st.args.settings.majority);
  const auto n = st.args.settings.nodes.size();
  if (!yes && !st.minority) {
    spdlog::warn("[{}] reaches {} of the cluster's {} nodes, not a majority{}: not starting {} "
                 "here; its platforms wait for the run the other side keeps",
                 st.args.name, reachable.size() + 1, n,
                 st.args.settings.majority > 0
                   ? " (cluster.majority = " + std::to_string(st.args.settings.majority) + ")"
                   : std::string{},
                 what);
  } else if (yes && st.minority) {
    spdlog::info("[{}] reaches {} of the cluster's {} nodes again", st.args.name,
                 reachable.size() + 1, n);
  }
  st.minority = !yes;
  return yes;
}

/// The succession says this node hosts the balancer now; first every peer
/// is asked which balancer it follows. A node that was itself stopped (a
/// SIGSTOP, a machine suspended, a long swap) wakes up having timed out
/// every peer while they carried on without it: it may see none of the
/// others yet, but a peer that still follows the balancer says so, and this
/// node waits for that balancer's node to reach it again instead of
/// starting a second one that would pull the peers' platforms back to an
/// older epoch.
void confirm_election(self_ptr self) {
  ask_who_follows(self, [self](const std::string& follows) {
    auto& st = self->state;
    if (st.finished || st.stopping || st.balancer || !st.directory.balancer_home().empty())
      return;
    if (!follows.empty()) {
      if (st.deferred_election != follows)
        spdlog::info("[{}] {}, which this node cannot reach yet: waiting for it rather than "
                     "starting a balancer here",
                     st.args.name, follows);
      st.deferred_election = follows;
      self->delayed_send(self, defaults::election_retry, elect_atom::value);
      return;
    }
    st.deferred_election.clear();
    if (!on_majority_side(self, "a balancer")) {
      self->delayed_send(self, defaults::election_retry, elect_atom::value);
      return;
    }
    spdlog::warn("[{}] no balancer in the cluster: starting one here", st.args.name);
    start_balancer(self, true);
    rehello(self);
  });
}

/// Hosts the balancer here if no live node before this one in the
/// succession does.
void elect(self_ptr self) {
  auto& st = self->state;
  if (st.finished || st.stopping || !st.ended.empty() || st.balancer
      || !st.directory.balancer_home().empty() || st.split())
    return;
  switch (st.succession.when_none(st.args.name, !st.dialling.empty(), st.lost)) {
    case succession::verdict::retry:  // still finding out who is there
      self->delayed_send(self, defaults::election_retry, elect_atom::value);
      return;
    case succession::verdict::elect:
      confirm_election(self);
      return;
    case succession::verdict::wait:
      return;
  }
}

/// Hosts the parameter server here if no live node before this one in the
/// server's succession does.
void serve(self_ptr self) {
  auto& st = self->state;
  if (st.finished || st.stopping || !st.ended.empty() || st.server || !st.args.server
      || !st.directory.of_role(messages::role::parameter_server).empty())
    return;
  switch (st.server_succession.when_none(st.args.name, !st.dialling.empty(), st.lost)) {
    case succession::verdict::retry:
      self->delayed_send(self, defaults::election_retry, serve_atom::value);
      return;
    case succession::verdict::elect:
      if (!on_majority_side(self, "a parameter server")) {
        self->delayed_send(self, defaults::election_retry, serve_atom::value);
        return;
      }
      spdlog::warn("[{}] no parameter server in the cluster: starting one here", st.args.name);
      start_server(self, true);
      rehello(self);
      publish_peers(self);
      return;
    case succession::verdict::wait:
      return;
  }
}

} // namespace eg::actors::node_detail

#include "actors/node.hpp"

#include "actors/inspection.hpp"
#include "actors/metrics.hpp"
#include "actors/mixer.hpp"
#include "actors/node_state.hpp"
#include "actors/predictor.hpp"
#include "actors/report_files.hpp"
#include "config/defaults.hpp"
#include "data/dataset.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>

namespace eg::actors {
namespace node_detail {

/// Whether the message being handled comes from this process or a peered
/// node (not from a stranger who connected to our port without a handshake).
bool from_cluster(self_ptr self) {
  auto& sender = self->current_sender();
  if (!sender)
    return false;
  return sender->node() == self->node() || self->state.peer_ids.count(sender->node()) > 0;
}

/// The weights lane endpoint of another node's lane, as text ("": this
/// node, or one without a lane, or this node has none: reached through CAF).
std::string lane_of(const node_state& st, const std::string& node) {
  if (!st.lane || node == st.args.name)
    return {};
  auto l = st.lanes.find(node);
  return l != st.lanes.end() && l->second.port != 0 ? messages::to_string(l->second) : std::string{};
}

/// Tells a balancer hosted here which nodes test the averaged model on
/// their own test data.
void publish_testers(self_ptr self) {
  auto& st = self->state;
  if (!st.balancer)
    return;
  std::vector<std::string> nodes;
  std::vector<caf::actor> testers;
  std::vector<uint64_t> samples;
  for (auto& e : st.directory.of_role(messages::role::tester)) {
    nodes.push_back(e.what.node);
    testers.push_back(e.handle);
    samples.push_back(e.what.samples);
  }
  self->send(*st.balancer, testers_atom::value, std::move(nodes), std::move(testers),
             std::move(samples));
}

/// The cluster's class list, for a node that proves the cluster secret
/// over a challenge of this one (it is not a peer yet: it asks before it
/// reads its data).
caf::result<std::vector<std::string>> cluster_classes(self_ptr self,
                                                      const std::string& credentials) {
  auto& st = self->state;
  if (!inspection::credentials_valid(credentials, st.args.settings.secret,
                                     [&](const std::string& c) { return st.challenges.redeem(c); }))
    return make_error(ec::refused, "wrong cluster secret, or a replayed or stale challenge");
  return st.args.cluster_classes;
}

/// Sends every local mixer the current list of peer mixers.
void publish_peers(self_ptr self) {
  auto& st = self->state;
  std::vector<std::string> names, lanes;
  std::vector<caf::actor> handles;
  for (auto& e : st.directory.of_role(messages::role::mixer)) {
    names.push_back(e.what.name);
    handles.push_back(e.handle);
    lanes.push_back(lane_of(st, e.what.node));
  }
  for (auto& p : st.platforms)
    self->send(p.mixer, peers_atom::value, names, handles, lanes);
  if (st.args.metrics) {
    const auto others = st.args.settings.nodes.size() - 1;
    st.args.metrics->peers(st.peers.size(), others - std::min(others, st.peers.size()));
  }
  publish_testers(self);
  // A split run: every local stage learns where all the stages are.
  if (!st.stages.empty()) {
    const auto n = st.args.settings.stage_nodes.size();
    std::vector<caf::actor> all(n);
    std::vector<std::string> all_lanes(n);
    for (size_t k = 0; k < n; ++k) {
      auto e = st.directory.find(messages::role::stage, stage_name(k));
      if (!e)
        continue;
      all[k] = e;
      all_lanes[k] = lane_of(st, st.args.settings.stage_nodes[k]);
    }
    for (auto& [k, stage] : st.stages)
      self->send(stage, stages_atom::value, all, all_lanes);
  }
  // Parameter-server strategies: the platforms learn where the server is
  // (null: nowhere reachable), and a server here which platforms are live.
  auto servers = st.directory.of_role(messages::role::parameter_server);
  caf::actor server = servers.empty() ? caf::actor{} : servers.front().handle;
  const auto server_lane = servers.empty() ? std::string{} : lane_of(st, servers.front().what.node);
  for (auto& p : st.platforms)
    self->send(p.platform, server_atom::value, server, server_lane);
  if (st.balancer && st.args.server)
    self->send(*st.balancer, server_atom::value,
               servers.empty() ? std::string{} : servers.front().what.node);
  if (st.server) {
    std::vector<std::string> live, worker_lanes;
    for (auto& e : st.directory.of_role(messages::role::platform)) {
      live.push_back(e.what.name);
      worker_lanes.push_back(lane_of(st, e.what.node));
    }
    std::vector<store_actor> stores;
    for (auto& e : st.directory.of_role(messages::role::store))
      stores.push_back(caf::actor_cast<store_actor>(e.handle));
    self->send(*st.server, peers_atom::value, live, worker_lanes, stores);
  }
}

/// Tells the local balancer about platforms it has not seen yet.
void announce_platforms(self_ptr self, const std::string& node) {
  auto& st = self->state;
  if (!st.balancer)
    return;
  for (auto& e : st.directory.of_role(messages::role::platform)) {
    if (e.what.node != node)
      continue;
    auto predictor = st.directory.find(messages::role::predictor, e.what.name);
    self->send(*st.balancer, join_atom::value, e.what.name, e.what.node, e.handle, predictor,
               e.what.data, e.what.samples, e.what.stats);
  }
}

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
        // side: the balancer that stays plans them from now on, so they go
        // on (paused, they would never report its epochs).
        st.balancer_paused = false;
        messages::control resume;
        resume.verb = messages::verb::resume;
        for (auto& p : st.platforms)
          self->request(p.platform, defaults::control_timeout, control_atom::value, resume)
            .then([](bool) {}, [](caf::error&) {});
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

void check_balancer_majority(self_ptr self) {
  auto& st = self->state;
  if (!st.balancer || st.finished || st.split())
    return;
  const auto reachable = reachable_peers(st);
  const bool majority =
    st.succession.majority(st.args.name, reachable, st.args.settings.majority);
  if (majority == !st.balancer_paused)
    return;
  st.balancer_paused = !majority;
  messages::control c;
  c.verb = majority ? messages::verb::resume : messages::verb::pause;
  if (majority)
    spdlog::info("[{}] reaches {} of the cluster's {} nodes again: the balancer here resumes "
                 "its platforms",
                 st.args.name, reachable.size() + 1, st.args.settings.nodes.size());
  else
    spdlog::warn("[{}] reaches {} of the cluster's {} nodes, not a majority: the balancer here "
                 "pauses its platforms until it does (the other side may go on with the run)",
                 st.args.name, reachable.size() + 1, st.args.settings.nodes.size());
  self->request(*st.balancer, defaults::handshake_timeout, inspect_atom::value, c,
                std::string{"majority"})
    .then([](const std::string&) {}, [](caf::error&) {});
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
  st.directory.add({messages::role::parameter_server, st.args.name, st.args.name, {}, 0, {}},
                   caf::actor_cast<caf::actor>(*st.server));
  spdlog::info("[{}] parameter server started for {} workers", st.args.name, workers);
}

/// Starts the balancer here: a new run, or (with a saved run state) the run
/// its state describes.
void start_balancer(self_ptr self, bool continuing) {
  auto& st = self->state;
  auto args = st.args.balancer;
  args.node = caf::actor_cast<node_actor>(self);
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
  self->link_to(*st.balancer);
  st.balancer_paused = false;
  st.directory.add({messages::role::balancer, st.args.name, st.args.name, {}, evaluated, {}},
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
  auto& st = self->state;
  struct poll {
    size_t pending = 0;
    std::string follows;  ///< "PEER follows the balancer on NODE" ("" if none does)
  };
  auto p = std::make_shared<poll>();
  p->pending = st.peers.size();
  auto conclude = [self, p] {
    if (p->pending > 0 && --p->pending > 0)
      return;
    auto& st = self->state;
    if (st.finished || st.stopping || st.balancer || !st.directory.balancer_home().empty())
      return;
    if (!p->follows.empty()) {
      if (st.deferred_election != p->follows)
        spdlog::info("[{}] {}, which this node cannot reach yet: waiting for it rather than "
                     "starting a balancer here",
                     st.args.name, p->follows);
      st.deferred_election = p->follows;
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
  };
  if (st.peers.empty())
    return conclude();
  for (auto& [name, peer] : st.peers)
    self->request(peer, defaults::handshake_timeout, where_atom::value)
      .then(
        [self, p, conclude, name = name](const std::string& home) {
          if (!home.empty() && home != self->state.args.name && p->follows.empty())
            p->follows = "node " + name + " follows the balancer on node " + home;
          conclude();
        },
        [conclude](caf::error&) { conclude(); });
}

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
      spdlog::error("[{}] cannot write its metrics: {}", st.args.name, e.what());
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

namespace {

node_impl::behavior_type node(self_ptr self, node_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.succession = succession(st.args.settings.node_names(), st.args.settings.balancer);
  auto me = caf::actor_cast<node_actor>(self);
  auto& sys = self->system();
  st.lane = open_lane(st);
  if (st.lane && st.args.metrics)
    st.args.metrics->watch_lane(st.lane);
  for (auto& pa : st.args.platforms) {
    auto name = pa.platform.name;
    pa.mixer = spawn_mixer(sys, mixer_args{name, st.args.settings.cluster_id, st.lane});
    pa.node = me;
    pa.predictor = spawn_predictor(sys, {name, st.args.store,
                                         std::move(pa.predictor_samples)});
    self->link_to(pa.predictor);
    auto platform = spawn_platform(sys, pa);
    bind_mixer(pa.mixer, platform);
    self->link_to(platform);
    self->link_to(pa.mixer);
    st.platforms.push_back(local_platform{
      name, pa.train_set ? data::signature(pa.train_set->describe()) : std::string{},
      pa.shard.size(), st.args.data_stats, platform, pa.mixer, pa.predictor});
  }
  st.args.platforms.clear();  // their data now lives in the platforms
  for (auto& sa : st.args.stages) {
    sa.lane = st.lane;
    sa.cluster_id = st.args.settings.cluster_id;
    sa.store = st.args.store;
    sa.output_dir = st.args.settings.output_dir;
    if (sa.index == 0) {
      sa.node = caf::actor_cast<caf::actor>(self);
      sa.node_name = st.args.name;
      st.run = sa.run;
    }
    const auto index = sa.index;
    auto stage = spawn_stage(sys, std::move(sa));
    self->link_to(stage);
    st.stages.emplace(index, stage);
  }
  st.args.stages.clear();
  if (st.lane)
    start_lane(st);
  st.reports = std::move(st.args.reports);
  using messages::role;
  auto local = [&](role r, std::string name, caf::actor h) {
    st.directory.add({r, std::move(name), st.args.name, {}, 0, {}}, std::move(h));
  };
  local(role::node, st.args.name, caf::actor_cast<caf::actor>(self));
  local(role::store, st.args.name, caf::actor_cast<caf::actor>(st.args.store));
  if (st.args.tester) {
    const auto samples = st.args.tester->samples;
    auto tester = spawn_tester(self->system(), std::move(*st.args.tester));
    st.args.tester.reset();
    self->link_to(tester);
    st.directory.add({role::tester, st.args.name, st.args.name, {}, samples, {}},
                     caf::actor_cast<caf::actor>(tester));
  }
  for (auto& [k, stage] : st.stages)
    local(role::stage, stage_name(k), caf::actor_cast<caf::actor>(stage));
  for (auto& p : st.platforms) {
    st.directory.add({role::platform, p.name, st.args.name, p.data, p.samples, p.stats},
                     caf::actor_cast<caf::actor>(p.platform));
    local(role::mixer, p.name, caf::actor_cast<caf::actor>(p.mixer));
    local(role::predictor, p.name, caf::actor_cast<caf::actor>(p.predictor));
  }
  st.server_succession = succession(st.args.settings.node_names(), st.args.settings.server);
  if (st.args.server) {
    if (st.args.start_server)
      start_server(self, false);
    else
      self->delayed_send(self, defaults::first_election, serve_atom::value);
  }
  // A split run has no balancer: its first stage drives it.
  if (st.split())
    ;
  else if (st.args.start_balancer)
    start_balancer(self, false);
  else
    self->delayed_send(self, defaults::first_election, elect_atom::value);
  publish_peers(self);
  for (auto& n : st.args.settings.nodes)
    if (n.name != st.args.name)
      self->send(self, dial_atom::value, n.name);
  self->set_down_handler([self](const caf::down_msg& dm) {
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
  });
  return {
    [self](hello_atom, const hello& their, const std::vector<caf::actor>& handles) {
      return answer_hello(self, their, handles);
    },
    [self](dial_atom, const std::string& name) { dial(self, name); },
    [self](done_atom, messages::role who, const std::string& name, const std::string& run) {
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
    },
    [self](done_atom) -> std::string {
      if (!from_cluster(self))
        return {};
      return self->state.ended;
    },
    [self](report_atom, const epoch_report& r) {
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
    },
    [self](wait_atom) -> caf::result<std::string> {
      if (self->state.released)
        return self->state.run;
      auto rp = self->make_response_promise<std::string>();
      self->state.waiting.push_back(rp);
      return rp;
    },
    [self](control_atom, const control& c) {
      auto& st = self->state;
      if (!from_cluster(self)) {
        spdlog::warn("[{}] refused control '{}' from outside the cluster", st.args.name,
                     messages::to_string(c.verb));
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
    },
    [self](over_atom) {
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
    },
    [self](release_atom) {
      auto& st = self->state;
      st.released = true;
      for (auto& rp : st.waiting)
        rp.deliver(st.run);
      st.waiting.clear();
    },
    [self](run_atom, const std::string& state) {
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
    },
    [self](elect_atom) {
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
    },
    [self](serve_atom) {
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
    },
    [self](where_atom) -> std::string {
      if (!from_cluster(self))
        return {};
      return self->state.directory.balancer_home();
    },
    [self](classes_atom, const std::string& credentials) {
      return cluster_classes(self, credentials);
    },
    [self](member_atom, const std::string& credentials, const std::string& description) {
      return admit_member(self, credentials, description);
    },
    [self](member_atom, const std::string& members) {
      if (from_cluster(self))
        learn_members(self, members);
    },
    [self](failed_atom, const std::string& why) {
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
    },
    [self](challenge_atom) { return self->state.challenges.issue(); },
    [self](inspect_atom, const std::string& secret, const std::string& command) {
      return inspect(self, secret, command);
    },
  };
}

} // namespace
} // namespace node_detail

node_settings node_settings::of(const config::cluster_config& cluster) {
  node_settings s;
  s.cluster_id = cluster.id;
  s.secret = cluster.secret;
  s.tls = cluster.tls;
  s.transport = cluster.transport;
  s.peer_timeout = cluster.peer_timeout;
  s.gossip_queue = cluster.gossip_queue;
  s.gossip_max_wait = cluster.gossip_max_wait;
  s.on_store_failure = cluster.on_store_failure;
  s.output_dir = cluster.output_dir;
  s.nodes = cluster.nodes;
  s.balancer = cluster.balancer().name;
  s.majority = cluster.majority;
  if (cluster.strategy.parameter_server() && !cluster.split.enabled())
    s.server = cluster.server().name;
  if (cluster.split.enabled())
    for (auto& stage : cluster.stages)
      s.stage_nodes.push_back(stage.node);
  if (cluster.split.enabled())
    s.not_joinable = "a split run's stages are fixed by the cluster file";
  else if (cluster.strategy.parameter_server())
    s.not_joinable = std::string{"strategy "} + config::to_string(cluster.strategy.name) +
                     " has its workers fixed by the cluster file (the parameter server's)";
  else if (cluster.strategy.push_sum())
    s.not_joinable = std::string{"strategy "} + config::to_string(cluster.strategy.name) +
                     " gossips over a topology fixed by the cluster file (push-sum); nodes "
                     "join runs of gosgd and edgegossip";
  s.layout = inspection::cluster_layout::of(cluster);
  return s;
}

const config::node_config& node_settings::node(const std::string& name) const {
  return config::find_node(nodes, name, cluster_id);
}

std::vector<std::string> node_settings::node_names() const {
  return config::node_names(nodes);
}

node_actor spawn_node(caf::actor_system& sys, node_args args) {
  return caf::actor_cast<node_actor>(sys.spawn(node_detail::node, std::move(args)));
}

} // namespace eg::actors

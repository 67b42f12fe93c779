#include "actors/node/node.hpp"
#include "actors/census.hpp"

#include "actors/balancer/inspection.hpp"
#include "actors/node/metrics.hpp"
#include "actors/platform/mixer.hpp"
#include "actors/node/node_state.hpp"
#include "actors/platform/predictor.hpp"
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
caf::result<std::vector<std::string>, std::string> cluster_classes(self_ptr self,
                                                                   const std::string& credentials) {
  auto& st = self->state;
  if (!inspection::credentials_valid(credentials, st.args.settings.secret,
                                     [&](const std::string& c) { return st.challenges.redeem(c); }))
    return make_error(ec::refused, "wrong cluster secret, or a replayed or stale challenge");
  return {st.args.cluster_classes, st.args.cluster_shape};
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
  // A balancer paused on a minority side takes no platform in: the nodes it
  // reaches again may follow the balancer the majority kept (announced
  // once it resumes).
  if (!st.balancer || st.balancer_paused)
    return;
  for (auto& e : st.directory.of_role(messages::role::platform)) {
    if (e.what.node != node)
      continue;
    auto predictor = st.directory.find(messages::role::predictor, e.what.name);
    self->send(*st.balancer, join_atom::value, e.what.name, e.what.node, e.handle, predictor,
               e.what.data, e.what.samples, e.what.stats, e.what.run);
  }
}

namespace {

/// The node's own actors: its platforms with their mixers and predictors,
/// the stages of a split run, its tester; each in the directory.
void spawn_local(self_ptr self) {
  auto& st = self->state;
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
    self->monitor(platform);  // one that leaves the run ends normally (platform_down)
    self->link_to(pa.mixer);
    st.platforms.push_back(local_platform{
      name, pa.train_set ? data::signature(pa.train_set->describe()) : std::string{},
      pa.shard.size(), st.args.data_stats, st.args.settings.join_settings, platform, pa.mixer,
      pa.predictor});
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
    st.directory.add({r, std::move(name), st.args.name, {}, 0, {}, {}}, std::move(h));
  };
  local(role::node, st.args.name, caf::actor_cast<caf::actor>(self));
  local(role::store, st.args.name, caf::actor_cast<caf::actor>(st.args.store));
  if (st.args.tester) {
    const auto samples = st.args.tester->samples;
    auto tester = spawn_tester(self->system(), std::move(*st.args.tester));
    st.args.tester.reset();
    self->link_to(tester);
    st.directory.add({role::tester, st.args.name, st.args.name, {}, samples, {}, {}},
                     caf::actor_cast<caf::actor>(tester));
  }
  for (auto& [k, stage] : st.stages)
    local(role::stage, stage_name(k), caf::actor_cast<caf::actor>(stage));
  for (auto& p : st.platforms) {
    st.directory.add({role::platform, p.name, st.args.name, p.data, p.samples, p.stats, p.run},
                     caf::actor_cast<caf::actor>(p.platform));
    local(role::mixer, p.name, caf::actor_cast<caf::actor>(p.mixer));
    local(role::predictor, p.name, caf::actor_cast<caf::actor>(p.predictor));
  }
}

node_impl::behavior_type node(self_ptr self, node_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.succession = succession(st.args.settings.node_names(), st.args.settings.balancer);
  spawn_local(self);
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
    if (!platform_down(self, dm))
      peer_down(self, dm);
  });
  return {
    [self](hello_atom, const hello& their, const std::vector<caf::actor>& handles) {
      return answer_hello(self, their, handles);
    },
    [self](dial_atom, const std::string& name) { dial(self, name); },
    [self](done_atom, messages::role who, const std::string& name, const std::string& run) {
      someone_done(self, who, name, run);
    },
    [self](done_atom) -> std::string {
      if (!from_cluster(self))
        return {};
      return self->state.ended;
    },
    [self](report_atom, const epoch_report& r) { keep_report(self, r); },
    [self](wait_atom) -> caf::result<std::string> {
      if (self->state.released)
        return self->state.run;
      auto rp = self->make_response_promise<std::string>();
      self->state.waiting.push_back(rp);
      return rp;
    },
    [self](control_atom, const control& c) { stop_node(self, c); },
    [self](over_atom) { run_over(self); },
    [self](release_atom) {
      auto& st = self->state;
      st.released = true;
      for (auto& rp : st.waiting)
        rp.deliver(st.run);
      st.waiting.clear();
    },
    [self](run_atom, const std::string& state) { keep_run_state(self, state); },
    [self](elect_atom) { elect(self); },
    [self](recheck_atom) { check_balancer_majority(self); },
    [self](serve_atom) { serve(self); },
    // (A node of the previous version asks without its name; this version
    // asks with it, below, before an election and before a paused balancer
    // resumes.)
    [self](where_atom) -> std::string {
      if (!from_cluster(self))
        return {};
      return self->state.directory.balancer_home();
    },
    [self](where_atom, const std::string& asker) -> std::string {
      if (!from_cluster(self))
        return {};
      for (auto& e : self->state.directory.of_role(messages::role::balancer))
        if (e.what.node != asker)
          return e.what.node;
      return {};
    },
    [self](classes_atom, const std::string& credentials) {
      return cluster_classes(self, credentials);
    },
    [self](member_atom, const std::string& credentials, const std::string& description) {
      return admit_member(self, credentials, description);
    },
    [self](withdraw_atom, const std::string& credentials, const std::string& node,
           const std::vector<std::string>& platforms,
           const std::string& why) -> caf::result<bool> {
      auto& st = self->state;
      if (!inspection::credentials_valid(credentials, st.args.settings.secret,
                                         [&](const std::string& c) {
                                           return st.challenges.redeem(c);
                                         }))
        return make_error(ec::refused, "wrong cluster secret, or a replayed or stale challenge");
      spdlog::error("[{}] node {} could not start ({}): its platforms are out of the run",
                    st.args.name, node, why);
      auto balancers = st.directory.of_role(messages::role::balancer);
      if (balancers.empty())
        return false;
      for (auto& e : balancers)
        self->send(caf::actor_cast<balancer_actor>(e.handle), withdraw_atom::value, node,
                   platforms, why);
      return true;
    },
    [self](member_atom, const std::string& members) {
      if (from_cluster(self))
        learn_members(self, members);
    },
    [self](failed_atom, const std::string& why) { store_failed(self, why); },
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
    s.not_joinable = std::string{"strategy "} + cluster.strategy.name +
                     " has its workers fixed by the cluster file (the parameter server's)";
  else if (cluster.strategy.push_sum())
    s.not_joinable = std::string{"strategy "} + cluster.strategy.name +
                     " gossips over a topology fixed by the cluster file (push-sum); nodes "
                     "join runs of gosgd and edgegossip";
  s.layout = inspection::cluster_layout::of(cluster);
  s.join_settings = config::join_settings(cluster);
  return s;
}

const config::node_config& node_settings::node(const std::string& name) const {
  return config::find_node(nodes, name, cluster_id);
}

std::vector<std::string> node_settings::node_names() const {
  return config::node_names(nodes);
}

node_actor spawn_node(caf::actor_system& sys, node_args args) {
  auto what = "node " + args.name;
  return census::counted(
    caf::actor_cast<node_actor>(sys.spawn(node_detail::node, std::move(args))), what);
}

} // namespace eg::actors

// Nodes that join a running cluster (edgegossip node --join): the node
// they dial admits them (their credentials, their description checked
// against the cluster as this node runs it) and answers with the cluster
// file they are to run with; every node learns them, from that node or from
// any peer that knows them when the two peer, and keeps them in its store.

#include "actors/node/network.hpp"
#include "actors/node/node_state.hpp"
#include "actors/wire.hpp"
#include "storage/store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace eg::actors::node_detail {

namespace {

/// The nodes that joined, as this node knows them (member_toml of each).
std::string joined_text(const node_state& st) {
  std::string out;
  for (auto& n : st.args.settings.nodes)
    if (n.joined)
      out += (out.empty() ? "" : "\n") + config::member_toml(n);
  return out;
}

/// Keeps the nodes that joined in this node's store: a restart knows them.
void keep_members(self_ptr self) {
  self->send(self->state.args.store, store_atom::value,
             std::string{storage::name(storage::family::runs)}, std::string{members_key},
             joined_text(self->state));
}

std::string platform_names(const config::node_config& n) {
  std::string out;
  for (auto& p : n.platforms)
    out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

} // namespace

bool add_member(self_ptr self, config::node_config member) {
  auto& st = self->state;
  member.joined = true;
  if (member.name == st.args.name)
    return false;
  auto& nodes = st.args.settings.nodes;
  auto known = std::find_if(nodes.begin(), nodes.end(),
                            [&](auto& n) { return n.name == member.name; });
  if (known != nodes.end()) {
    if (!known->joined)
      return false;  // a node of the cluster file: never replaced
    if (known->host == member.host && known->port == member.port &&
        known->lane_port == member.lane_port && platform_names(*known) == platform_names(member))
      return false;
    *known = member;  // joined again from another address
  } else {
    nodes.push_back(member);
  }
  if (st.args.settings.admitted)
    st.args.settings.admitted->add(member.name);
  st.succession = succession(st.args.settings.node_names(), st.args.settings.balancer);
  std::vector<std::string> platforms;
  for (auto& p : member.platforms)
    platforms.push_back(p.name);
  inspection::cluster_layout::node row{member.name, member.host, member.port, platforms};
  st.args.settings.layout.joined(row);
  // A balancer started here later (a successor) expects them too.
  auto& barrier = st.args.balancer.settings.barrier;
  for (auto& p : platforms)
    if (std::find(barrier.expected.begin(), barrier.expected.end(), p) == barrier.expected.end())
      barrier.expected.push_back(p);
  st.args.balancer.settings.layout.joined(row);
  if (st.balancer)
    self->send(*st.balancer, member_atom::value, member.name, member.host, member.port, platforms);
  spdlog::info("[{}] node {} joined the cluster ({}:{}, platforms {})", st.args.name, member.name,
               member.host, member.port, platform_names(member));
  keep_members(self);
  self->send(self, dial_atom::value, member.name);
  return true;
}

caf::result<std::string> admit_member(self_ptr self, const std::string& credentials,
                                      const std::string& description) {
  auto& st = self->state;
  auto refuse = [&](const std::string& why) -> caf::result<std::string> {
    spdlog::warn("[{}] refused a node asking to join: {}", st.args.name, why);
    return make_error(ec::refused, why);
  };
  if (!inspection::credentials_valid(credentials, st.args.settings.secret,
                                     [&](const std::string& c) { return st.challenges.redeem(c); }))
    return refuse("wrong cluster secret, or a replayed or stale challenge");
  if (!st.args.settings.not_joinable.empty())
    return refuse(st.args.settings.not_joinable);
  if (st.finished || !st.ended.empty())
    return refuse("the run is over");
  std::vector<config::node_config> asked;
  try {
    asked = config::parse_members(description, "the joining node's description");
  } catch (const config::config_error& e) {
    return refuse(e.what());
  }
  if (asked.size() != 1)
    return refuse("a joining node describes itself as one [[nodes]] table, got " +
                  std::to_string(asked.size()));
  auto member = asked.front();
  member.joined = true;
  if (member.name == "console" || member.name == joiner_name)
    return refuse("'" + member.name + "' names the console or a joining node's request, not a "
                  "node");
  // The cluster as this node runs it, with the new node in it: checked as a
  // cluster file is (names and platform names unique, ports, ranges).
  config::cluster_config cluster;
  try {
    cluster = config::parse(st.args.cluster_toml, "the cluster's settings");
  } catch (const config::config_error& e) {
    return refuse(std::string{"this node cannot describe its cluster: "} + e.what());
  }
  cluster.nodes = st.args.settings.nodes;
  bool again = false;
  for (auto& n : cluster.nodes)
    if (n.name == member.name) {
      if (!n.joined)
        return refuse("node '" + member.name + "' is a node of the cluster file; a joining "
                      "node takes a name of its own");
      if (st.peers.count(member.name))
        return refuse("a node named '" + member.name + "' is up (" + n.host + ":" +
                      std::to_string(n.port) + "); a joining node takes a name of its own");
      n = member;  // the same node back (restarted, perhaps elsewhere)
      again = true;
    }
  if (member.name == st.args.name)
    return refuse("node '" + member.name + "' is this node");
  if (!again)
    cluster.nodes.push_back(member);
  try {
    config::validate(cluster);
  } catch (const config::config_error& e) {
    return refuse(e.what());
  }
  add_member(self, member);
  for (auto& [name, peer] : st.peers)
    self->send(peer, member_atom::value, config::member_toml(member));
  return config::to_toml(cluster);
}

void learn_members(self_ptr self, const std::string& text) {
  auto& st = self->state;
  if (text.empty())
    return;
  std::vector<config::node_config> members;
  try {
    members = config::parse_members(text, "the members a peer announced");
  } catch (const config::config_error& e) {
    spdlog::warn("[{}] ignored a peer's list of members: {}", st.args.name, e.what());
    return;
  }
  bool news = false;
  for (auto& m : members)
    news = add_member(self, m) || news;
  if (news)  // whoever peers with us later hears of them in tell_members()
    for (auto& [name, peer] : st.peers)
      if (self->current_sender() && peer.address() != self->current_sender()->address())
        self->send(peer, member_atom::value, text);
}

void tell_members(self_ptr self, const node_actor& peer) {
  auto text = joined_text(self->state);
  if (!text.empty())
    self->send(peer, member_atom::value, std::move(text));
}

} // namespace eg::actors::node_detail

#include "actors/node/node_state.hpp"
#include "common/error.hpp"

#include "actors/node/network.hpp"
#include "actors/server.hpp"

#include <spdlog/spdlog.h>

namespace eg::actors::node_detail {

namespace {

/// A frame decoded once, checked against the cluster id, holding weights;
/// with `owners` (name -> node), its sender must be one of them placed on
/// node `from` (`what` and `owner` name both in the refusal). Throws
/// codec_error.
held_weights decode_frame(const std::string& from, const std::string& cluster,
                          const messages::shared_buffer& message,
                          const std::map<std::string, std::string>* owners,
                          const std::string& what, const char* owner) {
  if (!message)
    throw messages::codec_error("empty message");
  messages::message_size size;
  auto env = messages::decode(message->data(), message->size(), cluster, &size);
  auto* weights = std::get_if<messages::weights>(&env.payload);
  if (!weights)
    throw messages::codec_error("a frame that does not hold weights");
  if (owners) {
    auto n = owners->find(env.hdr.sender);
    if (n == owners->end() || n->second != from)
      throw messages::codec_error(what + " from '" + env.hdr.sender + "', which is no " + owner
                                  + " of that node");
  }
  // The views point into the frame, or for a packed frame into its storage.
  std::shared_ptr<const void> hold = env.storage;
  if (!hold)
    hold = message;
  return held_weights{env.hdr.sender, std::move(*weights), std::move(hold), size.wire,
                      size.unpacked};
}

/// A frame for a stage hosted here: its activations or gradient, from the
/// stage below or above it, on the node the cluster file places that stage.
void deliver_to_stage(const std::string& me, const std::string& from, const std::string& target,
                      const caf::actor_addr& stage, const std::map<std::string, std::string>& stage_node,
                      const std::string& cluster, messages::shared_buffer message) {
  held_weights w;
  stage_message kind = stage_message::unknown;
  try {
    w = decode_frame(from, cluster, message, &stage_node, "a message for stage " + target,
                     "stage");
    kind = stage_message_kind(w.value);
    if (kind == stage_message::unknown)
      throw messages::codec_error("a message for stage " + target
                                  + " that is neither activations nor a gradient");
  } catch (const messages::codec_error& e) {
    spdlog::warn("[{}] weights lane: refused a message from node '{}': {}", me, from, e.what());
    return;
  }
  auto to = caf::actor_cast<stage_actor>(stage);
  if (!to)
    return;
  switch (kind) {
    case stage_message::forward:
      caf::anon_send(to, forward_atom::value, std::move(w));
      break;
    case stage_message::backward:
      caf::anon_send(to, backward_atom::value, std::move(w));
      break;
    default:
      caf::anon_send(to, infer_atom::value, std::move(w));
      break;
  }
}

} // namespace

/// The weights lane of a node in a cluster of several, listening on the
/// node's host, on its lane port (config::lane_port_of: the node's port + 1
/// unless set; announced in the hello); none when it cannot
/// listen (gossip then goes through the middleman) or is configured off.
std::shared_ptr<messages::lane> open_lane(const node_state& st) {
  const auto& cfg = st.args.settings;
  if (cfg.nodes.size() < 2 || cfg.transport != config::transport::lane)
    return nullptr;
  messages::lane_options o;
  o.cluster_id = cfg.cluster_id;
  o.node = st.args.name;
  o.secret = cfg.secret;
  o.host = cfg.node(st.args.name).host;
  o.port = config::lane_port_of(cfg.node(st.args.name));
  std::set<std::string> peers;
  for (auto& n : cfg.nodes)
    if (n.name != st.args.name)
      peers.insert(n.name);
  // The cluster's nodes, and those that join it (the doors' list, without
  // the console and a joiner's request, which never use the lane).
  o.peer_allowed = [peers, admitted = cfg.admitted](const std::string& node) {
    if (admitted)
      return (*admitted)(node) && node != "console" && node != joiner_name;
    return peers.count(node) > 0;
  };
  o.max_queued_messages = static_cast<size_t>(cfg.gossip_queue);
  o.max_wait_ms = static_cast<int>(cfg.gossip_max_wait * 1000);
  // A peer that takes nothing for as long as it takes to declare it down.
  o.send_timeout_ms = static_cast<int>(cfg.peer_timeout * 1000);
  if (cfg.tls.enabled()) {
    auto tls = tls_of(cfg.tls, st.args.name);
    o.tls = {tls.certificate, tls.key, tls.ca};
  }
  try {
    auto lane = std::make_shared<messages::lane>(std::move(o));
    spdlog::info("[{}] weights lane listening on {}:{}", st.args.name, lane->options().host,
                 lane->port());
    return lane;
  } catch (const std::exception& e) {
    if (cfg.tls.enabled())  // never plain text when TLS was asked for
      throw;
    spdlog::error("[{}] no weights lane ({}); gossip goes through the middleman", st.args.name,
                  eg::describe(e));
    return nullptr;
  }
}

/// The door of the weights lane: decodes each frame once (on the lane's
/// thread), checked against the cluster id, and hands its weights on:
/// gossip and the parameter server's models (sender server_name) to the
/// local mixer of the platform they are for; workers' updates (target
/// server_name), when they come from the worker's own node, to the
/// parameter server hosted here.
void start_lane(node_state& st) {
  std::map<std::string, caf::actor_addr> mixers;
  for (auto& p : st.platforms)
    mixers[p.name] = caf::actor_cast<caf::actor_addr>(p.mixer);
  std::map<std::string, std::string> node_of;  // every platform's node
  for (auto& n : st.args.settings.nodes)
    for (auto& p : n.platforms)
      node_of[p.name] = n.name;
  // A split run: the local stages, and every stage's node.
  std::map<std::string, caf::actor_addr> stages;
  for (auto& [k, stage] : st.stages)
    stages[stage_name(k)] = caf::actor_cast<caf::actor_addr>(stage);
  std::map<std::string, std::string> stage_node;
  for (size_t k = 0; k < st.args.settings.stage_nodes.size(); ++k)
    stage_node[stage_name(k)] = st.args.settings.stage_nodes[k];
  st.lane->start([mixers = std::move(mixers), node_of = std::move(node_of), routes = st.routes,
                  stages = std::move(stages), stage_node = std::move(stage_node),
                  me = st.args.name, cluster = st.args.settings.cluster_id](
                   const std::string& from, const std::string& target,
                   messages::shared_buffer message) {
    if (auto s = stages.find(target); s != stages.end()) {
      deliver_to_stage(me, from, target, s->second, stage_node, cluster, std::move(message));
      return;
    }
    const bool for_server = target == server_name;
    caf::actor to;
    if (for_server) {
      to = caf::actor_cast<caf::actor>(routes->server());
    } else if (auto i = mixers.find(target); i != mixers.end()) {
      to = caf::actor_cast<caf::actor>(i->second);
    }
    if (!to) {
      spdlog::warn("[{}] weights lane: a message from node '{}' for {}, which this node does not "
                   "host (any more), dropped",
                   me, from, for_server ? "the parameter server" : "platform '" + target + "'");
      return;
    }
    held_weights w;
    try {
      w = decode_frame(from, cluster, message, for_server ? &node_of : nullptr,
                       "an update for the parameter server", "platform");
    } catch (const messages::codec_error& e) {
      spdlog::warn("[{}] weights lane: refused a message from node '{}': {}", me, from, e.what());
      return;
    }
    if (for_server)
      caf::anon_send(caf::actor_cast<server_actor>(to), commit_atom::value, std::move(w));
    else if (w.sender == server_name)
      caf::anon_send(caf::actor_cast<mixer_actor>(to), pull_atom::value, from, std::move(w));
    else
      caf::anon_send(caf::actor_cast<mixer_actor>(to), gossip_atom::value, std::move(w));
  });
}

} // namespace eg::actors::node_detail

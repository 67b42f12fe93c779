#include "actors/node/node_state.hpp"
#include "common/error.hpp"

#include "actors/node/network.hpp"
#include "actors/server.hpp"

#include <spdlog/spdlog.h>

#include <type_traits>

namespace eg::actors::node_detail {

namespace {

/// A frame decoded once and checked against the cluster id.
struct frame {
  messages::envelope envelope;
  std::shared_ptr<const void> hold;  ///< what its views point into
  messages::message_size size;
};

/// Decodes `message` (throws codec_error).
frame decode_frame(const std::string& cluster, const messages::shared_buffer& message) {
  if (!message)
    throw messages::codec_error("empty message");
  frame f;
  f.envelope = messages::decode(message->data(), message->size(), cluster, &f.size);
  // The views point into the frame, or for a packed frame into its storage.
  f.hold = f.envelope.storage ? f.envelope.storage : message;
  return f;
}

/// The kind of message each body is, for refusals.
template <class Body>
const char* kind_of() {
  if constexpr (std::is_same_v<Body, messages::weights>)
    return "gossip weights";
  else if constexpr (std::is_same_v<Body, messages::commit>)
    return "a commit";
  else if constexpr (std::is_same_v<Body, messages::global_model>)
    return "a global model";
  else
    return "a stage batch";
}

/// The frame's body, which must be a Body (`what` names the message in the
/// refusal), as a held message; with `owners` (name -> node), its sender
/// must be one of them placed on node `from` (`owner` names them in the
/// refusal). Throws codec_error.
template <class Body>
messages::held<Body> take(frame& f, const std::string& from, const std::string& what,
                          const std::map<std::string, std::string>* owners = nullptr,
                          const char* owner = "") {
  auto* body = std::get_if<Body>(&f.envelope.payload);
  if (!body)
    throw messages::codec_error(what + " that is not " + kind_of<Body>());
  const auto& sender = f.envelope.hdr.sender;
  if (owners) {
    auto n = owners->find(sender);
    if (n == owners->end() || n->second != from)
      throw messages::codec_error(what + " from '" + sender + "', which is no " + owner
                                  + " of that node");
  }
  return messages::held<Body>{sender, std::move(*body), std::move(f.hold), f.size.wire,
                              f.size.unpacked};
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
/// thread), checked against the cluster id, and hands it on by its body:
/// gossip weights and the parameter server's global models to the local
/// mixer of the platform they are for; workers' commits (target
/// server_name), when they come from the worker's own node, to the
/// parameter server hosted here; platforms' models for the average (target
/// balancer_name), from the platform's own node, to the balancer hosted
/// here; stage batches to the stage they are for,
/// from the node of the stage next to it. A body that is not what its
/// target takes is refused.
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
    const auto stage = stages.find(target);
    const bool for_server = target == server_name;
    const bool for_balancer = target == balancer_name;
    caf::actor to;
    if (stage != stages.end())
      to = caf::actor_cast<caf::actor>(stage->second);
    else if (for_server)
      to = caf::actor_cast<caf::actor>(routes->server());
    else if (for_balancer)
      to = caf::actor_cast<caf::actor>(routes->balancer());
    else if (auto i = mixers.find(target); i != mixers.end())
      to = caf::actor_cast<caf::actor>(i->second);
    if (!to) {
      spdlog::warn("[{}] weights lane: a message from node '{}' for {}, which this node does not "
                   "host (any more), dropped",
                   me, from,
                   for_server     ? std::string{"the parameter server"}
                   : for_balancer ? std::string{"the balancer"}
                                  : "'" + target + "'");
      return;
    }
    try {
      auto f = decode_frame(cluster, message);
      if (stage != stages.end()) {
        // Activations or a gradient, from the stage below or above it, on
        // the node the cluster file places that stage.
        auto batch = take<messages::stage_batch>(f, from, "a message for stage " + target,
                                                 &stage_node, "stage");
        caf::anon_send(caf::actor_cast<stage_actor>(to), batch_atom::value, std::move(batch));
      } else if (for_server) {
        // A worker's update, from the worker's own node.
        auto update = take<messages::commit>(f, from, "a message for the parameter server",
                                             &node_of, "platform");
        caf::anon_send(caf::actor_cast<server_actor>(to), commit_atom::value, std::move(update));
      } else if (for_balancer) {
        // A platform's model for the average, from the platform's own node
        // (a platform of a node that joined the cluster, which the cluster
        // file does not place, from the node that sent it: the lane's
        // handshake admitted that node).
        auto model = take<messages::weights>(f, from, "a message for the balancer");
        if (auto n = node_of.find(model.sender); n != node_of.end() && n->second != from)
          throw messages::codec_error("a message for the balancer from '" + model.sender
                                      + "', which is no platform of that node");
        caf::anon_send(caf::actor_cast<balancer_actor>(to), weights_atom::value, std::move(model));
      } else if (std::holds_alternative<messages::global_model>(f.envelope.payload)) {
        // The server's answer to a commit (the worker checks the node).
        auto model = take<messages::global_model>(f, from, "a message for platform '" + target + "'");
        caf::anon_send(caf::actor_cast<mixer_actor>(to), pull_atom::value, from, std::move(model));
      } else {
        auto w = take<messages::weights>(f, from, "a message for platform '" + target + "'");
        caf::anon_send(caf::actor_cast<mixer_actor>(to), gossip_atom::value, std::move(w));
      }
    } catch (const messages::codec_error& e) {
      spdlog::warn("[{}] weights lane: refused a message from node '{}': {}", me, from, e.what());
    }
  });
}

} // namespace eg::actors::node_detail

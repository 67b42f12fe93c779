#pragma once
// The node: one per process. It peers with the other nodes of the cluster
// file (dialling each until it answers, then a handshake that exchanges the
// directory of components), monitors every remote node it learns, tells the
// local mixers who their peers are and the balancer which platforms joined,
// and ends the process's run once every local platform is done.

#include "actors/balancer.hpp"
#include "actors/interfaces.hpp"
#include "actors/platform.hpp"
#include "launcher/config.hpp"

#include <caf/fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace eg::actors {

struct local_platform {
  std::string name;
  platform_actor platform;
  mixer_actor mixer;
  predictor_actor predictor;
};

struct node_args {
  config::cluster_config cluster;
  std::string name;  ///< this node
  store_actor store;
  /// The local platforms to spawn (each with its mixer); `mixer` and `node`
  /// are filled in by the node.
  std::vector<platform_args> platforms;
  /// Set when this node hosts the balancer; `node` is filled in.
  std::optional<balancer_args> balancer;
};

/// Spawns the node, which spawns its platforms, their mixers and the
/// balancer, linked to it: when the node goes, they go.
node_actor spawn_node(caf::actor_system& sys, node_args args);

} // namespace eg::actors

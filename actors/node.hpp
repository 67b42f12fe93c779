#pragma once
// The node: one per process. It peers with the other nodes of the cluster
// file (dialling each until it answers, then a handshake that exchanges the
// directory of components, checked against the cluster secret), monitors
// every remote node it learns, tells the local mixers who their peers are and
// the balancer which platforms joined, starts a successor balancer when the
// balancer's node is lost, keeps the balancer's run state in every node's
// store, and ends the process's run once every local platform is done.

#include "actors/balancer.hpp"
#include "actors/interfaces.hpp"
#include "actors/platform.hpp"
#include "config/config.hpp"
#include "messages/codec.hpp"

#include <caf/fwd.hpp>

#include <functional>

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
  /// What a balancer hosted here is started with (`node` is filled in).
  balancer_args balancer;
  /// Start the balancer at once (this node hosts it and the run is new).
  /// Otherwise a balancer is started here only by the succession: when no
  /// live node before this one (cluster.balancer first, then file order)
  /// hosts one, a few seconds after this node started or a peer went down.
  bool start_balancer = false;
  /// The run state in this node's store, read when a balancer starts here.
  std::function<std::optional<storage::run_state>()> load_run_state;
  /// Epoch reports of the local platforms saved before a restart (resumed
  /// runs), so that the node's metrics file continues.
  std::vector<messages::epoch_report> reports;
};

/// Spawns the node, which spawns its platforms, their mixers and the
/// balancer, linked to it: when the node goes, they go.
node_actor spawn_node(caf::actor_system& sys, node_args args);

} // namespace eg::actors

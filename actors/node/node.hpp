#pragma once
// The node: one per process. It peers with the other nodes of the cluster
// file (dialling each until it answers, then a handshake that exchanges the
// directory of components, checked against the cluster secret), monitors
// every remote node it learns, tells the local mixers who their peers are and
// the balancer which platforms joined, starts a successor balancer when the
// balancer's node is lost (and a successor parameter server when the
// server's is), keeps the balancer's run state in every node's store, and
// ends the process's run once every local platform is done.

#include "actors/balancer/balancer.hpp"
#include "actors/balancer/evaluator.hpp"
#include "actors/interfaces.hpp"
#include "actors/platform/platform.hpp"
#include "actors/server.hpp"
#include "actors/stage.hpp"
#include "config/config.hpp"
#include "messages/codec.hpp"

#include <caf/fwd.hpp>

#include <functional>
#include <memory>

#include <optional>
#include <string>
#include <vector>

namespace eg::messages {
class door_routes;
}
namespace eg::actors {
class admitted_names;  // actors/node/network.hpp
}

namespace eg::actors {

struct local_platform {
  std::string name;
  std::string data;      ///< data::signature of its training data
  uint64_t samples = 0;  ///< its shard's size
  std::string stats;     ///< its node's data statistics (data::to_text of data::moments)
  std::string run;       ///< its node's run settings (config::join_settings)
  platform_actor platform;
  mixer_actor mixer;
  predictor_actor predictor;
};

/// What a node takes from the cluster file: its membership (every node's
/// address, the node named to host the balancer), the cluster id and
/// secret, TLS, the weights lane's settings, where metrics files go, what a
/// store failure does, and what the console shows when the balancer cannot
/// be asked. The training settings go to the platforms and the balancer.
struct node_settings {
  std::string cluster_id;
  std::string secret;
  config::tls_config tls;
  config::transport transport = config::transport::lane;
  double peer_timeout = 6.0;
  int64_t gossip_queue = 4;
  double gossip_max_wait = 2.0;
  config::store_failure_action on_store_failure = config::store_failure_action::continue_training;
  std::string output_dir;
  std::vector<config::node_config> nodes;
  std::string balancer;  ///< the node named to host the balancer
  /// cluster.majority: nodes a side must reach to host the balancer or the
  /// parameter server (0: more than half).
  int64_t majority = 0;
  /// Probe a peer's port with a plain TCP connection before CAF dials it
  /// (false only on a simulated network, CAF's test multiplexer, where no
  /// real port answers).
  bool probe_before_dial = true;
  /// Where CAF dials a peer: a loopback route through the peer's front door
  /// (messages/door.hpp), made by the node's process; null: the peer's port
  /// itself (in-process nodes of the tests, which publish without a door).
  std::shared_ptr<messages::door_routes> routes;
  /// The names the node's doors let in (null: the doors are not this
  /// node's); nodes that join are added.
  std::shared_ptr<admitted_names> admitted;
  /// Why a node may not join this cluster while it runs ("" where it may:
  /// GoSGD and EdgeGossip; push-sum's topologies, the parameter server and a
  /// split model's stages have members fixed by the cluster file).
  std::string not_joinable;
  /// The node named to host the parameter server (strategy.server; "" for
  /// strategies without one).
  std::string server;
  /// A split run: the node of each stage, first to last (empty otherwise).
  std::vector<std::string> stage_nodes;
  inspection::cluster_layout layout;
  /// The run settings this node's platforms carry to the balancer
  /// (config::join_settings), which refuses them where they are not its own.
  std::string join_settings;

  static node_settings of(const config::cluster_config& cluster);
  /// The node of that name; throws config_error naming it when absent.
  const config::node_config& node(const std::string& name) const;
  /// The nodes' names, in file order.
  std::vector<std::string> node_names() const;
};

class node_metrics;  // actors/node/metrics.hpp

struct node_args {
  node_settings settings;
  std::string name;  ///< this node
  store_actor store;
  /// The local platforms to spawn (each with its mixer); `mixer` and `node`
  /// are filled in by the node.
  std::vector<platform_args> platforms;
  /// This node's training data statistics (data::to_text of data::moments),
  /// announced with its platforms for the cluster's normalisation.
  std::string data_stats;
  /// The cluster file as this node runs it (config::to_toml), for the
  /// nodes that join: they run with it.
  std::string cluster_toml;
  /// The cluster's class list, for nodes that ask before reading data of
  /// their own (the balancer node's data's classes); empty where this node
  /// knows none.
  std::vector<std::string> cluster_classes;
  /// The shape of the cluster's samples as this node answers it with the
  /// classes (data::sample_shape::to_string: the balancer node's data's, or
  /// what this node was told; "" when it knows none).
  std::string cluster_shape;
  /// Where the node's figures go for Prometheus' /metrics (epoch reports,
  /// peers, the weights lane); null where none are served.
  std::shared_ptr<node_metrics> metrics;
  /// What a balancer hosted here is started with (`node` is filled in).
  balancer_args balancer;
  /// This node's test data, for its tester (the averaged model tested on
  /// it each epoch); none where the node has no test data.
  std::optional<tester_args> tester;
  /// Start the balancer at once (this node hosts it and the run is new).
  /// Otherwise a balancer is started here only by the succession: when no
  /// live node before this one (cluster.balancer first, then file order)
  /// hosts one, a few seconds after this node started or a peer went down.
  bool start_balancer = false;
  /// The run state in this node's store, read when a balancer starts here.
  std::function<std::optional<storage::run_state>()> load_run_state;
  /// What a parameter server hosted here is started with (every node of a
  /// parameter-server strategy: any may come to host it); none for other
  /// strategies.
  std::optional<server_args> server;
  /// Start the server at once (this node is strategy.server and the run is
  /// new). Otherwise a server is started here only by its succession
  /// (strategy.server first, then file order), from the newest server
  /// checkpoint in this node's store.
  bool start_server = false;
  /// The newest server checkpoint in this node's store.
  std::function<std::optional<storage::checkpoint>()> load_server_checkpoint;
  /// Epoch reports of the local platforms saved before a restart (resumed
  /// runs), so that the node's metrics file continues.
  std::vector<messages::epoch_report> reports;
  /// A split run: the stages this node hosts (settings.stage_nodes says
  /// where the others are). No balancer then: the first stage drives the
  /// run and tells every node when it is over.
  std::vector<stage_args> stages;
  /// Written when the node's work ended in an error: every local platform
  /// left the run (its model kept running away), so that the process exits
  /// with run_failure_exit_code; the first stage of a split run writes it
  /// too (stage_args::failure).
  std::shared_ptr<std::string> failure;
  /// Written when the balancer refused a platform of this node at join
  /// (its data's shape or classes, or its run settings, are not the
  /// cluster's): the node stops and the process exits with
  /// refused_exit_code, saying why last.
  std::shared_ptr<std::string> refusal;
};

/// The key, in the store's runs family, of the nodes that joined the
/// cluster as this node knows them (config::member_toml of each).
inline constexpr const char* members_key = "members";

/// Spawns the node, which spawns its platforms, their mixers and the
/// balancer, linked to it: when the node goes, they go.
node_actor spawn_node(caf::actor_system& sys, node_args args);

} // namespace eg::actors

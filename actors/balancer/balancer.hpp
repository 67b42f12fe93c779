#pragma once
// The balancer: one per cluster. It waits for the configured platforms to
// join, plans every epoch (epoch-synchronous schedule: epoch e+1 starts once
// every live platform reported epoch e; asynchronous: one plan, no barrier),
// gathers the epoch reports, evaluates the average of all platforms' models,
// shows progress, and writes the run directory at the end. Platforms are
// monitored: one that goes down no longer holds back an epoch; one that
// comes back (a restarted node) joins again from the next epoch. After every
// epoch its run state goes to every node's store, so that a balancer started
// elsewhere (its node died) or later (the cluster restarted) goes on with the
// same run. What it knows of epochs (the barrier, plans, deadlines) is a
// plain class, algorithms/edgegossip/epoch_barrier.hpp, and the console's snapshot is built
// in actors/balancer/inspection.hpp: the actor itself sends, gathers and writes.

#include "algorithms/edgegossip/epoch_barrier.hpp"
#include "actors/balancer/inspection.hpp"
#include "actors/interfaces.hpp"
#include "data/shape.hpp"
#include "config/config.hpp"
#include "storage/store.hpp"

#include <caf/fwd.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace eg::data {
class dataset;
}
namespace eg::learning {
using data::dataset;
}

namespace eg::actors {

/// What the balancer takes from the cluster file.
struct balancer_settings {
  std::string cluster_id;
  std::string output_dir;       ///< run directories go here
  std::string model;            ///< train.model, for the averaged model
  uint64_t seed = 1;            ///< cluster.seed: the models' initialisation
  config::strategy_config strategy;
  barrier_settings barrier;     ///< the epoch barrier's, shard sizes included
  /// EdgeGossip over push-sum with edgegossip.merge = "rate": the averaged
  /// model counts each platform's by its push-sum weight times the points
  /// it trained in the epoch (else push-sum's average, by weight alone).
  bool average_by_rate = false;
  inspection::cluster_layout layout;  ///< what the console shows of the cluster
  /// The cluster file as TOML, its secret left out: the run directory's
  /// config.toml.
  std::string cluster_file;
  /// config::join_settings of the cluster: a platform whose node's differ
  /// is refused at join.
  std::string join_settings;

  /// The settings of `cluster`, with |X_i| of every platform.
  static balancer_settings of(const config::cluster_config& cluster,
                              std::map<std::string, uint64_t> shard_sizes);
};

/// A platform's model's weight in the averaged model: the points it trained
/// in the epoch (GoSGD and EdgeGossip over it); its push-sum weight w_i
/// (push-sum's consensus, sum_i w_i z_i / sum_i w_i); or w_i times the
/// points (EdgeGossip over push-sum, merge by rate).
double model_weight(const balancer_settings& s, double gossip_weight, double points);

struct balancer_args {
  balancer_settings settings;
  /// The data the model is built for: its shape, classes and normalisation
  /// (the exported model carries them).
  data::description data;
  node_actor node;        ///< told when the run is over
  bool interactive = false;  ///< redraw one progress line (a terminal) instead of log lines
  std::string fingerprint;  ///< config::run_fingerprint of the cluster
  /// Set to continue a run (a restarted cluster, or a successor to a lost
  /// balancer): its name, evaluated epochs and reports. The balancer then
  /// starts with the platforms that joined within a few seconds instead of
  /// waiting for all of them, and plans the epoch after the last evaluated one.
  std::optional<storage::run_state> resume;
  /// Its node's weights lane (messages::to_string(lane_endpoint); "": none):
  /// where platforms on other nodes send their models for the average.
  std::string lane;
};

balancer_actor spawn_balancer(caf::actor_system& sys, balancer_args args);

} // namespace eg::actors

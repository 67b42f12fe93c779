#pragma once
// The balancer: one per cluster. It waits for the configured platforms to
// join, plans every epoch (epoch-synchronous schedule: epoch e+1 starts once
// every live platform reported epoch e; asynchronous: one plan, no barrier),
// gathers the epoch reports, evaluates the average of all platforms' models,
// shows progress, and writes the run directory at the end. Platforms are
// monitored: one that goes down no longer holds back an epoch.

#include "actors/interfaces.hpp"
#include "launcher/config.hpp"

#include <caf/fwd.hpp>

#include <map>
#include <memory>
#include <string>

namespace eg::learning {
struct dataset;
}

namespace eg::actors {

struct balancer_args {
  config::cluster_config cluster;
  std::shared_ptr<const learning::dataset> test_set;
  node_actor node;        ///< told when the run is over
  bool interactive = false;  ///< redraw one progress line (a terminal) instead of log lines
  std::map<std::string, uint64_t> shard_sizes;  ///< |X_i| of every platform
};

balancer_actor spawn_balancer(caf::actor_system& sys, balancer_args args);

} // namespace eg::actors

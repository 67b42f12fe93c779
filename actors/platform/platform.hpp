#pragma once
// The platform: one model, its optimizer and its local data shard. It trains
// one iteration per message (so pause, merges and queries are served between
// iterations), runs the gossip strategy's arithmetic on its own parameters,
// reports every epoch to the balancer and checkpoints to the store.

#include "actors/interfaces.hpp"
#include "config/config.hpp"

#include <caf/fwd.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace eg::data {
class dataset;
}
namespace eg::learning {
using data::dataset;
struct aggregated_points;
}
namespace eg::storage {
struct checkpoint;
}

namespace eg::actors {

struct platform_args {
  std::string node_name;                  ///< hosting node
  config::platform_config platform;       ///< name, threads, share, slowdown, interference
  config::train_config train;
  bool augment = false;  ///< data.augment: random crop and flip of image batches
  config::strategy_config strategy;
  int64_t cluster_platforms = 1;          ///< M, for the initial gossip weight 1/M
  /// Every platform of the cluster in cluster-file order (the topology's
  /// indices).
  std::vector<std::string> members;
  uint64_t seed = 1;                      ///< model initialisation (same on every platform)
  std::shared_ptr<const learning::dataset> train_set;
  std::shared_ptr<const learning::dataset> test_set;
  std::vector<int64_t> shard;             ///< indices into train_set
  /// Every platform's shard by name: exception handling adopts failed ones.
  std::shared_ptr<const std::map<std::string, std::vector<int64_t>>> all_shards;
  config::edgegossip_config edgegossip;
  /// EdgeGossip: the shard's aggregated points (null for GoSGD).
  std::shared_ptr<const learning::aggregated_points> aggregated;
  std::string predictor_samples;          ///< saved predictor samples, for its predictor
  mixer_actor mixer;
  predictor_actor predictor;
  store_actor store;
  node_actor node;
  std::shared_ptr<const storage::checkpoint> restore;  ///< resume from it when set
  /// With `restore`: the report of the last epoch it completed, sent again
  /// when a balancer plans that epoch (its first report may have been lost
  /// with the balancer that asked for it).
  std::optional<epoch_report> last_report;

  /// The settings of `platform` on node `node` from `cluster` (its sections
  /// train, strategy, edgegossip, the seed, every platform's name); data,
  /// handles and restore are the caller's to fill.
  static platform_args of(const config::cluster_config& cluster,
                          const config::platform_config& platform, const std::string& node);
};

platform_actor spawn_platform(caf::actor_system& sys, platform_args args);

} // namespace eg::actors

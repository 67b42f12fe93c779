#pragma once
// A node's data: what its platforms train on and what it tests the averaged
// model with. A node with data of its own reads its directory (nodes.data
// or `edgegossip node --data`) and its platforms' own directories
// (nodes.platforms.data); else every node reads the cluster's data set and
// derives the same partition of it from the seed (emulated clusters, the
// benchmarks). Every node maps class names to the same outputs: the
// cluster's class list is data.classes, or else the balancer node's data's,
// which a node with data of its own asks for before it reads its data.

#include "config/config.hpp"
#include "models/dataset.hpp"
#include "train/partition.hpp"

#include <memory>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace eg::storage {
class store;
}

namespace eg::learning {
struct aggregated_points;
}

namespace eg::actors {

/// Shares of `ps`: explicit ones, the rest split equally among those
/// without one.
std::vector<double> resolve_shares(const std::vector<config::platform_config>& ps);

/// A node's data, read and normalised.
struct loaded_data {
  learning::dataset train;
  std::optional<learning::dataset> test;
  /// Where the test data came from, or why there is none.
  std::string test_from;
  bool own = false;  ///< the node's own directories, not the cluster's data set
  /// The training data's sums (data::to_text of data::moments): the balancer
  /// combines every node's into the cluster's normalisation.
  std::string stats;
  /// Platforms with a directory of their own: the samples of `train` read
  /// from it, [first, second).
  std::map<std::string, std::pair<int64_t, int64_t>> platform_parts;
  /// The samples of `train` from the node's directory (or the cluster's
  /// data set), which its platforms without a directory split.
  std::pair<int64_t, int64_t> node_part{0, 0};
  /// The directories read, for the keys of what is derived from them.
  std::string sources;
};

/// Reads node `me`'s data: its own directory (`override_dir`, from --data,
/// or its nodes.data) and its platforms' own, or the cluster's data.dir, in
/// the configured formats, mapping class names to `classes` where given
/// (data.classes, or the cluster's list from the balancer node); several
/// directories of a node without a given list are mapped to the first
/// one's classes followed by the others' new ones. The normalisation is the
/// node's training data's own until the balancer sends the cluster's.
/// Throws data_error naming the directory and the problem.
loaded_data load_node_data(const config::cluster_config& cfg, const config::node_config& me,
                           const std::string& override_dir,
                           const std::vector<std::string>& classes);

/// Whether node `me` reads data of its own (a directory of its own, from
/// the cluster file or `override_dir`, or a platform's).
bool reads_own_data(const config::node_config& me, const std::string& override_dir);

/// Every platform's shard of `data.train` (by cfg.platforms() order,
/// `all`): a node with data of its own gives each platform with a directory
/// of its own exactly that, and splits its own directory's data among its
/// other platforms by their shares (the other nodes' platforms have no
/// shard here); else every node derives the same partition of the cluster's
/// data from the seed (the cluster file's platforms' partition; each
/// platform of a node that joined gets a seeded sample of the average
/// shard's size).
learning::shards partition_shards(const config::cluster_config& cfg,
                                  const config::node_config& me,
                                  const std::vector<config::platform_config>& all,
                                  const loaded_data& data);

/// The cluster's class list for node `node` when it reads data of its own,
/// data.classes is unset and another node hosts the balancer: kept in its
/// store from an earlier start (unless `fresh`), else asked of the balancer
/// node, then of every other node (one that was told it answers too),
/// through their front doors with the cluster's secret, again every second
/// until one answers. nullopt when SIGINT or SIGTERM came while waiting
/// (`watch_signals`: they are blocked in this process and taken here).
/// Throws std::runtime_error when a node refuses the secret.
/// The cluster's class list as a node answered it, with the shape of the
/// cluster's samples ("" where it knows none) and the node that answered.
struct cluster_classes_answer {
  std::vector<std::string> classes;
  std::string shape;
  std::string from;
};
std::optional<cluster_classes_answer> ask_cluster_classes(const config::cluster_config& cfg,
                                                          const std::string& node,
                                                          storage::store& db, bool fresh,
                                                          bool watch_signals);

/// Node `me`'s data (load_node_data) mapped to the cluster's class list:
/// data.classes, else, for a node with data of its own in a cluster of
/// several that does not host the balancer, the list ask_cluster_classes
/// gets (a class outside it is named with the list and where it came
/// from). `answers` is set to the list this node gives a node that asks,
/// `shape_answer` to the samples' shape it gives with it. A node told the
/// cluster's shape with the list whose own data has another stops here,
/// before it joins: data::data_error naming both.
/// nullopt when SIGINT or SIGTERM came while it waited for the list.
std::optional<loaded_data> load_with_cluster_classes(const config::cluster_config& cfg,
                                                     const config::node_config& me,
                                                     const std::string& override_dir,
                                                     storage::store& db, bool fresh,
                                                     bool watch_signals,
                                                     std::vector<std::string>& answers,
                                                     std::string& shape_answer);

/// EdgeGossip's pre-training stage for the local platforms (`local`):
/// aggregated points from the store when the data (`data`: the directories
/// read and the training data's sums) and settings are unchanged, else
/// generated (platforms in parallel) and stored.
std::map<std::string, std::shared_ptr<const learning::aggregated_points>>
aggregate_local(const config::cluster_config& cfg, const std::vector<config::platform_config>& all,
                const learning::shards& shards, const learning::dataset& train,
                const std::string& data, const std::vector<std::string>& local,
                storage::store& db);

/// Node `node` of `cfg` cannot start (its own data is unusable: `why`):
/// tells the cluster, so that the balancer refuses its platforms and the run
/// does not wait for them. Asks the balancer's node, then the others, for
/// at most `patience`; says in the log whether one took it. Nothing for a
/// cluster of one node, or for the balancer's own node.
void tell_cluster_node_cannot_start(const config::cluster_config& cfg, const std::string& node,
                                    const std::string& why,
                                    std::chrono::milliseconds patience);

/// Waits up to `d` for SIGINT or SIGTERM (blocked in this process while
/// `watch`, taken here; without `watch` it only waits); true when one came.
bool signalled_within(std::chrono::milliseconds d, bool watch);

} // namespace eg::actors

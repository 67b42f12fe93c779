#pragma once
// A node that is not in the cluster file joins a running cluster from one
// address (edgegossip node --join HOST:PORT --name NAME): it proves the
// cluster secret to that node, describes itself (address, ports, platforms,
// its own data directory) and receives the cluster file it then runs with,
// itself in it as a node that joined (config::node_config::joined). The
// answer is kept in its store: restarted, it asks again, the node it
// dialled first and then any node of the cluster it knew.

#include "config/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace eg::storage {
class store;
}

namespace eg::actors {

struct join_request {
  std::string address;  ///< HOST:PORT of a node of the running cluster
  std::string name;     ///< this node's name, its identity across restarts
  /// The cluster's id; "": learnt from the node at `address` (its node
  /// port greets with it), else the cluster kept in this node's store.
  std::string cluster_id;
  std::string secret;
  /// Where this node listens and the others dial it; "": the address this
  /// machine reaches `address` from.
  std::string host;
  /// Its port; 0: the port it had before (restarted), else the dialled
  /// node's port where the hosts differ, else a free one.
  uint16_t port = 0;
  int lane_port = -1;         ///< its weights lane's (-1: port + 1)
  uint16_t metrics_port = 0;  ///< its /metrics (0: none)
  int platforms = 1;          ///< platforms NAME0, NAME1, ...
  int threads = 1;            ///< torch threads of each
  std::string data_dir;       ///< its own data ("": the cluster's data set)
  /// `--set` overrides, applied on top of what the cluster answers (and,
  /// before asking, to find the store and the TLS files).
  std::vector<std::string> overrides;
  bool fresh = false;          ///< forget the cluster kept in the store
  bool watch_signals = true;   ///< SIGINT / SIGTERM end the wait
};

/// "HOST:PORT" split; throws config_error naming the text.
std::pair<std::string, uint16_t> parse_address(const std::string& text);

/// Joins: the cluster file to run this node with (run_node(cfg, name)), or
/// nullopt when a signal ended the wait for an answer. Throws
/// config::config_error when the cluster refuses (a wrong secret, a name in
/// use, a strategy whose members are fixed) or its answer does not parse.
std::optional<config::cluster_config> join_cluster(const join_request& request);

/// `cfg` with the nodes that joined it as this node's store keeps them
/// (node_members.cpp), after the cluster file's; none with `fresh`, or
/// where the store's list does not parse or fit (said in the log).
config::cluster_config with_stored_members(const config::cluster_config& cfg,
                                           const std::string& node, storage::store& db,
                                           bool fresh);

} // namespace eg::actors

#pragma once
// A node's figures for Prometheus: `/metrics` on the node's host and its
// nodes.metrics_port, served by prometheus-cpp's exposer (civetweb), in
// Prometheus' conventions: base units in the name (_seconds, _bytes,
// _cores, _ratio), counters ending in _total, an edgegossip_node_info
// metric naming the cluster, the node and the version. Its platforms'
// figures come from their epoch reports, the peers from the node actor, and
// the rest (weights lane, store, checkpoints, CPU limit) is read at each
// scrape. README ("On several machines") lists every metric.
//
// Plain C++ (no CAF, no torch): safe to call from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace eg::messages {
struct epoch_report;
class lane;
} // namespace eg::messages

namespace eg::actors {

/// Checkpoints written by the node's store so far.
struct checkpoint_figures {
  uint64_t saved = 0;
  uint64_t failed = 0;
  double seconds = 0;       ///< the time spent writing them, in all
  double last_seconds = 0;  ///< the newest one's
};

/// What is read at each scrape; any may be left empty.
struct metrics_sources {
  std::function<double()> cpu_limit_cores;  ///< 0: no limit
  std::function<uint64_t()> store_bytes;
  std::function<checkpoint_figures()> checkpoints;
};

struct metrics_identity {
  std::string cluster;
  std::string node;
  std::string version;
  std::string strategy;
  std::string model;
};

class node_metrics {
public:
  /// Serves /metrics on host:port (port > 0). Throws std::runtime_error
  /// naming the address when it cannot listen.
  node_metrics(const std::string& host, uint16_t port, const metrics_identity& who,
               metrics_sources sources);
  ~node_metrics();
  node_metrics(const node_metrics&) = delete;
  node_metrics& operator=(const node_metrics&) = delete;

  /// The port it listens on.
  uint16_t port() const;

  /// A local platform's epoch report: its epoch, samples and steps trained,
  /// loss, test accuracy (when it was tested), the plan's ratio and the
  /// predicted throughput, its gossip messages and bytes.
  void report(const messages::epoch_report& r);
  /// Peer nodes reachable now and not.
  void peers(size_t up, size_t down);
  /// The node's weights lane, read at each scrape (queue, skipped and lost
  /// messages, refused frames).
  void watch_lane(std::weak_ptr<messages::lane> lane);

  /// The exposition text as a scrape gets it (tests).
  std::string text() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace eg::actors

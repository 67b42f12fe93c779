#pragma once
// Running one node of a cluster in this process: loads data, opens the
// store, spawns the actors, peers, and waits until the run is over.

#include "actors/store.hpp"
#include "config/config.hpp"

#include <optional>
#include <string>

namespace caf {
class actor_system_config;
}

namespace eg::actors {

struct runtime_options {
  bool interactive = false;     ///< redraw one progress line (stderr is a terminal)
  bool handle_signals = false;  ///< SIGINT / SIGTERM stop the node cleanly
  /// Start a new run even if the store holds an unfinished one with the
  /// same settings (which is otherwise resumed from its checkpoints).
  bool fresh = false;
  /// `edgegossip node --data DIR`: this node's own data directory, in place
  /// of the cluster file's.
  std::string data_dir;
};

using config::as_one_process;

/// Fractions of the training set per platform (explicit shares, the rest
/// split equally among platforms without one), in cfg.platforms() order.
std::vector<double> resolved_shares(const config::cluster_config& cfg);

/// Keeps freed tensor memory in the process instead of returning it to the
/// kernel after every iteration: glibc's default serves blocks over 128 KiB
/// (a batch, an activation) with mmap/munmap, which page-faults every byte
/// again on the next iteration and doubled the time of an epoch. Called by
/// run_node; idempotent.
void tune_allocator();

/// How the actor system's idle threads wait for work. CAF's work-stealing
/// default has an idle thread poll its queue every 50 us for 25 ms before
/// it sleeps: on a node whose actors idle for a few milliseconds between
/// messages (a split stage between batches, a platform waiting at a
/// barrier) its threads never sleep, and the wake-ups alone took about 40 %
/// of a node held to a quarter of a core. Here an idle thread spins
/// briefly, then polls and steals every millisecond for 10 ms, then sleeps
/// until work is enqueued to it (or steals every 10 ms). Called wherever
/// an actor system that trains is made.
void tune_scheduler(caf::actor_system_config& cfg);

struct run_outcome {
  std::string run;      ///< the run's name; empty when it did not end normally
  bool stopped = false; ///< SIGINT / SIGTERM stopped it (after final checkpoints)
  /// Set when the node's store could not write (disk full, read-only,
  /// removed) during the run, finished or stopped: the process exits with
  /// store_failure_exit_code and says why last.
  std::optional<store_failure> store;
  /// Set when this node's run stopped with an error (a split run's first
  /// stage is here and a stage ran away for good; every platform of this
  /// node left the run): the process exits with run_failure_exit_code.
  std::string failure;
  /// Set when the balancer refused a platform of this node at join (its
  /// data or settings are not the cluster's; node_args::refusal): the
  /// process exits with refused_exit_code and says why last.
  std::string refusal;
};

/// The exit code of a node the cluster refused: a configuration or data
/// set to fix, as a malformed cluster file's (the systemd units do not
/// restart on it).
inline constexpr int refused_exit_code = 2;

/// The exit code of a node whose store could not write.
inline constexpr int store_failure_exit_code = 3;
/// The exit code of a node whose run stopped with an error (a model ran
/// away and could not be brought back; run_outcome::failure says how).
inline constexpr int run_failure_exit_code = 4;

/// The last line of such a node: "node NAME: the store in DIR could not
/// write since epoch N (CAUSE): K checkpoints not saved; exit code 3".
std::string last_words(const std::string& node, const store_failure& f);

/// Runs node `node` of `cfg` until its platforms are done (or it is stopped).
/// Throws
/// config::config_error, learning::data_error or storage::storage_error for
/// unusable input, std::runtime_error for other failures.
run_outcome run_node(const config::cluster_config& cfg, const std::string& node,
                     const runtime_options& opts);

} // namespace eg::actors

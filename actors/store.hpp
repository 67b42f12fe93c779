#pragma once
// The store: the node's RocksDB as an actor, so platforms hand it their
// checkpoints and metrics without blocking on disk.

#include "actors/interfaces.hpp"

#include <caf/fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace eg::storage {
class store;
}

namespace eg::actors {

/// A store that could not write, and what that cost.
struct store_failure {
  std::string dir;            ///< the store's directory
  std::string reason;         ///< storage::store::failure(): what failed, RocksDB's status
  std::string cause;          ///< its last part, e.g. "No space left on device"
  uint64_t since_epoch = 0;   ///< the first epoch (from 1) whose checkpoint or report was not saved
  uint64_t checkpoints_lost = 0;
  uint64_t records_lost = 0;  ///< reports, run states, rankings, predictor samples

  /// "the store in DIR could not write since epoch N (CAUSE): K checkpoints
  /// not saved" (and the other records, when there are some).
  std::string summary() const;
};

/// The store actor's account of its store's failure, shared with the code
/// that spawned it; safe from any thread.
class store_health {
public:
  /// The failure and its cost so far; nullopt while the store writes.
  std::optional<store_failure> failure() const;
  /// Used by the store actor.
  void set(const store_failure& f);

  /// Checkpoints written so far (the store actor counts them).
  struct checkpoint_counts {
    uint64_t saved = 0;
    uint64_t failed = 0;
    double seconds = 0;       ///< writing them, in all
    double last_seconds = 0;  ///< the newest one
  };
  checkpoint_counts checkpoints() const;
  void checkpoint_saved(double seconds);
  void checkpoint_failed();

private:
  mutable std::mutex mutex_;
  std::optional<store_failure> failure_;
  checkpoint_counts checkpoints_;
};

struct store_options {
  /// The cluster whose reports it keeps (stored records carry it).
  std::string cluster_id;
  /// The node's platforms, named in the report of a failure.
  std::vector<std::string> platforms;
  /// Called once, from the store actor, when the store first cannot write
  /// (disk full, read-only, removed); the text names the directory and the
  /// cause. Later failures are only counted.
  std::function<void(const std::string&)> on_failure;
  /// Kept up to date by the store actor (may be null).
  std::shared_ptr<store_health> health;
};

/// Spawns the store actor owning `db`; it runs detached (disk I/O must not
/// hold a scheduler thread). Once the store cannot write it logs one error
/// line (the directory, the cause, the checkpoints at risk and the last
/// saved ones), calls opts.on_failure, and from then on answers every write
/// with a failure without trying it again.
store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<storage::store> db,
                        store_options opts = {});

} // namespace eg::actors

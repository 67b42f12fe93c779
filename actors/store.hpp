#pragma once
// The store: the node's RocksDB as an actor, so platforms hand it their
// checkpoints and metrics without blocking on disk.

#include "actors/interfaces.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace eg::storage {
class store;
}

namespace eg::actors {

/// Spawns the store actor owning `db`; it runs detached (disk I/O must not
/// hold a scheduler thread).
store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<storage::store> db);

} // namespace eg::actors

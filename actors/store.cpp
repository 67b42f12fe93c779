#include "actors/store.hpp"

#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace eg::actors {
namespace {

struct store_state {
  static inline const char* name = "store";
  std::shared_ptr<storage::store> db;
};

store_actor::behavior_type store(store_actor::stateful_pointer<store_state> self,
                                 std::shared_ptr<storage::store> db) {
  self->state.db = std::move(db);
  return {
    [self](checkpoint_atom, std::string& platform, uint64_t epoch, uint64_t iteration,
           double weight, std::string& model, std::string& optimizer) {
      storage::checkpoint c{std::move(platform), epoch, iteration, weight, std::move(model),
                            std::move(optimizer)};
      try {
        storage::save_checkpoint(*self->state.db, c);
        return true;
      } catch (const storage::storage_error& e) {
        spdlog::error("checkpoint of {} (epoch {}) not saved: {}", c.platform, epoch, e.what());
        return false;
      }
    },
    [self](metrics_atom, const std::string& platform, uint64_t epoch, const bytes& report) {
      try {
        self->state.db->put(storage::family::metrics, storage::key(platform, epoch),
                            std::string_view(report.data(), report.size()));
      } catch (const storage::storage_error& e) {
        spdlog::error("metrics of {} (epoch {}) not saved: {}", platform, epoch, e.what());
      }
    },
    [self](store_atom, const std::string& family, const std::string& key,
           const std::string& value) {
      auto f = storage::family_named(family);
      if (!f) {
        spdlog::error("store: no column family '{}'", family);
        return;
      }
      try {
        self->state.db->put(*f, key, value);
      } catch (const storage::storage_error& e) {
        spdlog::error("record {} of {} not saved: {}", key, family, e.what());
      }
    },
    [self](flush_atom) {
      try {
        self->state.db->flush();
        return true;
      } catch (const storage::storage_error& e) {
        spdlog::error("store flush failed: {}", e.what());
        return false;
      }
    },
  };
}

} // namespace

store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<storage::store> db) {
  return sys.spawn<caf::detached>(store, std::move(db));
}

} // namespace eg::actors

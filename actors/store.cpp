#include "actors/store.hpp"
#include "actors/census.hpp"

#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <utility>

namespace eg::actors {

std::string store_failure::summary() const {
  std::string s = "the store in " + dir + " could not write since epoch "
                  + std::to_string(since_epoch) + " (" + cause + "): "
                  + std::to_string(checkpoints_lost) + " checkpoint"
                  + (checkpoints_lost == 1 ? "" : "s") + " not saved";
  if (records_lost > 0)
    s += ", " + std::to_string(records_lost) + " other record" + (records_lost == 1 ? "" : "s")
         + " not saved";
  return s;
}

std::optional<store_failure> store_health::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

store_health::checkpoint_counts store_health::checkpoints() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return checkpoints_;
}

void store_health::checkpoint_saved(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++checkpoints_.saved;
  checkpoints_.seconds += seconds;
  checkpoints_.last_seconds = seconds;
}

void store_health::checkpoint_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++checkpoints_.failed;
}

void store_health::set(const store_failure& f) {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = f;
}

namespace {

struct store_state {
  static inline const char* name = "store";
  std::shared_ptr<storage::store> db;
  store_options opts;
  /// The newest checkpoint saved by this actor, per platform.
  std::map<std::string, uint64_t> saved;
  /// The newest epoch whose end a checkpoint or report was sent for
  /// (counted from 1, as checkpoints count the epochs they follow).
  uint64_t newest_epoch = 0;
  /// Checkpoints not saved, by platform and epoch (a final checkpoint of
  /// the same epoch counts once; none counts where the store holds one as
  /// new).
  std::set<std::pair<std::string, uint64_t>> lost;
  /// Set once the store failed (reported once; then only counted).
  std::optional<store_failure> failure;

  bool failed() const { return failure.has_value(); }

  /// The newest checkpoint of `platform` in the store (saved by this actor,
  /// or by an earlier run of the node), for the report.
  std::optional<uint64_t> last_saved(const std::string& platform) const {
    if (auto i = saved.find(platform); i != saved.end())
      return i->second;
    try {
      if (auto c = storage::load_latest_checkpoint(*db, platform))
        return c->epoch;
    } catch (const storage::storage_error&) {
      // Not readable either: nothing saved, as far as a restart can tell.
    }
    return std::nullopt;
  }

  /// A write that failed: a checkpoint of `platform` (else another record),
  /// of the end of `epoch` (counted from 1) if it has one. The first one
  /// that finds the store unable to write is reported (once); later ones
  /// are counted. Failures that leave the store writable are logged each as
  /// `what`.
  void write_failed(const std::string& what, const std::string& error,
                    const std::string* platform, std::optional<uint64_t> epoch) {
    if (!failed()) {
      auto why = db->failure();
      if (!why) {
        spdlog::error("{} not saved: {}", what, error);
        return;
      }
      report(*why, epoch);
    }
    if (!platform) {
      failure->records_lost += 1;
    } else {
      auto s = saved.find(*platform);
      if (s == saved.end() || s->second < epoch.value_or(0))
        lost.emplace(*platform, epoch.value_or(0));
    }
    failure->checkpoints_lost = lost.size();
    spdlog::debug("{} not saved: the store cannot write", what);
    if (opts.health)
      opts.health->set(*failure);
  }

  /// Once, when the store is first found unable to write: one error line
  /// saying what is at risk, and the node told.
  void report(const std::string& why, std::optional<uint64_t> epoch) {
    failure = store_failure{};
    failure->dir = db->dir();
    failure->reason = why;
    failure->cause = storage::failure_cause(why);
    failure->since_epoch = epoch ? *epoch : newest_epoch + 1;
    std::string names, last;
    for (auto& p : opts.platforms) {
      names += (names.empty() ? "" : ", ") + p;
      auto m = last_saved(p);
      last += (last.empty() ? "" : ", ") + p + " "
              + (m ? "after epoch " + std::to_string(*m) : std::string("none"));
    }
    spdlog::error("store: the store in {} cannot write ({}); from epoch {} on, no checkpoint "
                  "of platforms {} is saved, nor their reports; the last saved checkpoints: "
                  "{} (a restart resumes from there); further failures are counted, not "
                  "logged",
                  failure->dir, why, failure->since_epoch, names.empty() ? "-" : names,
                  last.empty() ? "-" : last);
    if (opts.health)
      opts.health->set(*failure);
    if (opts.on_failure)
      opts.on_failure(failure->dir + ": " + failure->cause);
  }
};

store_actor::behavior_type store(store_actor::stateful_pointer<store_state> self,
                                 std::shared_ptr<storage::store> db, store_options opts) {
  auto& st = self->state;
  st.db = std::move(db);
  st.opts = std::move(opts);
  // A store that failed before the actor started (a write of the node's
  // start-up) is reported at once.
  if (auto why = st.db->failure())
    st.report(*why, std::nullopt);
  return {
    [self](restore_atom, const std::string& platform)
      -> caf::result<bool, uint64_t, uint64_t, double, double, std::string, std::string> {
      auto& st = self->state;
      std::vector<std::string> problems;
      std::optional<storage::checkpoint> c;
      try {
        c = storage::load_latest_checkpoint(*st.db, platform, &problems);
      } catch (const std::exception& e) {
        problems.push_back(std::string("its checkpoints cannot be read: ") + e.what());
      }
      for (auto& p : problems)
        spdlog::warn("[{}] {}", platform, p);
      if (!c)
        return {false, uint64_t{0}, uint64_t{0}, 0.0, 0.0, std::string{}, std::string{}};
      return {true, c->epoch, c->iteration, c->gossip_weight, c->saved_unix,
              std::move(c->model), std::move(c->optimizer)};
    },
    [self](checkpoint_atom, std::string& platform, uint64_t epoch, uint64_t iteration,
           double weight, std::string& model, std::string& optimizer) {
      auto& st = self->state;
      // The parameter server's checkpoints are keyed by time, not epoch.
      const bool server = platform == storage::server_checkpoint;
      if (!server)
        st.newest_epoch = std::max(st.newest_epoch, epoch);
      auto what = server ? "checkpoint of the parameter server (version "
                             + std::to_string(iteration) + ")"
                         : "checkpoint of " + platform + " (epoch " + std::to_string(epoch) + ")";
      // A lost server checkpoint counts as a record, not a platform's epoch.
      auto lost = [&](const std::string& error, const std::string& name) {
        if (st.opts.health)
          st.opts.health->checkpoint_failed();
        if (server)
          st.write_failed(what, error, nullptr, std::nullopt);
        else
          st.write_failed(what, error, &name, epoch);
      };
      if (st.failed()) {  // not even framed: it would not be written
        lost("", platform);
        return false;
      }
      storage::checkpoint c{std::move(platform), epoch, iteration, weight, std::move(model),
                            std::move(optimizer)};
      try {
        const auto began = std::chrono::steady_clock::now();
        storage::save_checkpoint(*st.db, c);
        if (st.opts.health)
          st.opts.health->checkpoint_saved(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
        if (server)
          storage::prune_checkpoints(*st.db, c.platform, 2);  // one every few seconds
        else
          st.saved[c.platform] = epoch;
        return true;
      } catch (const storage::storage_error& e) {
        lost(e.what(), c.platform);
        return false;
      }
    },
    [self](metrics_atom, const std::string& platform, uint64_t epoch, const epoch_report& r) {
      auto& st = self->state;
      st.newest_epoch = std::max(st.newest_epoch, epoch + 1);  // reports count from 0
      try {
        st.db->put(storage::family::metrics, storage::key(platform, epoch),
                   storage::encode_report(r, st.opts.cluster_id));
      } catch (const storage::storage_error& e) {
        st.write_failed("metrics of " + platform + " (epoch " + std::to_string(epoch + 1) + ")",
                        e.what(), nullptr, epoch + 1);
      }
    },
    [self](store_atom, const std::string& family, const std::string& key,
           const std::string& value) {
      auto f = storage::family_named(family);
      if (!f) {
        spdlog::error("store: no column family '{}'", family);
        return;
      }
      auto& st = self->state;
      try {
        st.db->put(*f, key, value);
      } catch (const storage::storage_error& e) {
        st.write_failed("record " + key + " of " + family, e.what(), nullptr, std::nullopt);
      }
    },
    [self](flush_atom) {
      auto& st = self->state;
      if (st.failed())
        return false;  // nothing of a failed store is written, flushes neither
      try {
        st.db->flush();
        return true;
      } catch (const storage::storage_error& e) {
        if (auto why = st.db->failure())
          st.report(*why, std::nullopt);
        else
          spdlog::error("store flush failed: {}", e.what());
        return false;
      }
    },
  };
}

} // namespace

store_actor spawn_store(caf::actor_system& sys, std::shared_ptr<storage::store> db,
                        store_options opts) {
  return census::counted(sys.spawn<caf::detached>(store, std::move(db), std::move(opts)), "store");
}

} // namespace eg::actors

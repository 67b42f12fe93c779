#pragma once
// One RocksDB per node behind a small interface: no RocksDB type leaks out.
// Column families per kind of record; keys sort by platform, then epoch.

#include "common/error.hpp"
#include "messages/codec.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eg::storage {

/// The database cannot be opened, read or written; what() names the
/// directory and RocksDB's status (or, for a store that failed before, says
/// it is not writable since then, and why).
class storage_error : public failure<errc::storage_failed> {
public:
  using failure::failure;
};

enum class family { checkpoints, metrics, aggregates, rankings, predictor, runs };

/// Name of the column family of `f`.
const char* name(family f);

/// The family called `name`, if there is one.
std::optional<family> family_named(std::string_view name);

/// "<platform>/<epoch as 10 zero-padded digits>": sorts by platform then epoch.
std::string key(std::string_view platform, uint64_t epoch);

/// A store that cannot write (disk full, read-only, its directory removed)
/// stays failed: the first write, flush or background job of RocksDB that
/// fails puts it in the failed state with the reason, and from then on put,
/// erase and flush throw at once without calling RocksDB. Reads go on where
/// RocksDB still answers. RocksDB's own info log (file LOG) is written by the
/// store, which stops writing it when a write fails; RocksDB's automatic
/// recovery from background errors is off, so a failed store does no more
/// writes of its own either. All members are safe to call from any thread.
class store {
public:
  /// Opens (creating if missing) the database in `dir`.
  static std::unique_ptr<store> open(const std::string& dir);
  /// Closes the database (close() without its error).
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// Throws storage_error on failure; "store is not writable since ..." when
  /// it failed before.
  void put(family f, std::string_view key, std::string_view value);
  std::optional<std::string> get(family f, std::string_view key) const;
  void erase(family f, std::string_view key);
  /// All records whose key starts with `prefix`, in key order.
  std::vector<std::pair<std::string, std::string>> scan(family f, std::string_view prefix) const;
  /// Flushes memtables to disk (clean shutdown).
  void flush();
  const std::string& dir() const;

  /// Why the store cannot write (RocksDB's status, e.g. "IO error: No space
  /// left on device: While appending to file: .../000004.log: No space left
  /// on device"), once it could not; nullopt while it can.
  std::optional<std::string> failure() const;

  /// Closes the database: stops RocksDB's background work and closes its
  /// files. Throws storage_error naming RocksDB's status when that reports a
  /// problem (a failed store closes without writing more). Any later call
  /// other than failure(), dir() and close() throws storage_error.
  void close();

private:
  struct impl;
  explicit store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The cause in a store::failure() text, as the system words it (its last
/// part): "No space left on device", "Read-only file system", "No such file
/// or directory".
std::string failure_cause(std::string_view failure);

/// A platform's state at the end of an epoch (or at shutdown).
struct checkpoint {
  std::string platform;
  uint64_t epoch = 0;       ///< epochs completed
  uint64_t iteration = 0;   ///< iterations completed in total
  double gossip_weight = 0;
  std::string model;        ///< serialized model (torch archive bytes)
  std::string optimizer;    ///< serialized optimizer state (torch archive bytes)
  double saved_unix = 0;    ///< wall-clock time of saving (0 on save: now)
};

/// Saves under key(platform, epoch) in `checkpoints`, framed with a magic,
/// a format version and a CRC-32 of the body.
void save_checkpoint(store& s, const checkpoint& c);

/// The newest checkpoint of `platform` that passes its checksum and parses.
/// Damaged newer records are skipped; each is described in `problems`.
std::optional<checkpoint> load_latest_checkpoint(const store& s, const std::string& platform,
                                                 std::vector<std::string>* problems = nullptr);

/// Erases every checkpoint of `platform` but the newest `keep`.
void prune_checkpoints(store& s, const std::string& platform, size_t keep);

/// The parameter server's checkpoints (strategy.server): its global model
/// (`model`) and version (`iteration`), keyed by the time of saving in
/// milliseconds (`epoch`), the newest two kept. Every node's store holds
/// them, so that a successor server continues from the newest.
inline constexpr std::string_view server_checkpoint = "@server";

/// One epoch of the whole cluster, as the balancer saw it.
/// One node's test of the averaged model on its own test data: the
/// cluster's accuracy is the sum of `correct` over the sum of `samples`.
struct node_test {
  std::string node;
  uint64_t correct = 0;
  uint64_t samples = 0;
  double loss = 0;  ///< mean cross-entropy over its samples
  double accuracy() const { return samples ? static_cast<double>(correct) / samples : 0.0; }
};

struct cluster_epoch {
  uint32_t epoch = 0;
  double elapsed_seconds = 0;  ///< since training started, at the epoch's last report
  double epoch_seconds = 0;    ///< from the epoch's start to its last report
  uint64_t samples = 0;        ///< all platforms together
  double averaged_loss = 0;    ///< the average of all platforms' models, on the test set
  double averaged_accuracy = 0;
  uint32_t platforms_up = 0;
  /// The training clock at the epoch's last report: time platforms spent
  /// training, without the pauses between epochs (evaluation of the averaged
  /// model, planning) of the epoch-synchronous schedule.
  double training_seconds = 0;
  /// EdgeGossip: mean absolute percentage error of the predicted epoch times
  /// (-1 when there was no prediction).
  double prediction_error = -1;
  /// The wall time a user waited for this epoch: from the end of the one
  /// before (its averaged model evaluated), or the start of training, to the
  /// end of this one. Of it: the slowest platform's training time, the
  /// averaged model's evaluation, and the rest, `network_seconds`: waiting
  /// for messages (the barrier's last reports, the models gathered for the
  /// average, plans) on the network.
  double wall_seconds = 0;
  double network_seconds = 0;
  double evaluation_seconds = 0;
  /// Each node's test of the averaged model (nodes with test data that
  /// answered); averaged_loss and averaged_accuracy are their totals.
  std::vector<node_test> tests;
};

/// The balancer's record of a run. Every node's store keeps the latest one
/// (family runs, key run_state_key), so that a restarted node knows whether
/// its checkpoints belong to a run still to finish, and a successor balancer
/// continues the run where the lost one left it.
struct run_state {
  std::string fingerprint;            ///< the settings the run depends on
  std::string run;                    ///< run name (its directory)
  bool finished = false;
  std::vector<cluster_epoch> epochs;  ///< evaluated epochs, in order
  std::vector<std::string> reports;   ///< every epoch report so far (encoded envelopes)
  double started_unix = 0;            ///< wall-clock start of the run
  /// The cluster's normalisation of the data (data::to_text; "": every node
  /// its own), which a continued run keeps.
  std::string norm;
};

/// An epoch report as the store keeps it (family metrics, run states): a
/// Cap'n Proto envelope of cluster `cluster_id`.
std::string encode_report(const messages::epoch_report& r, const std::string& cluster_id);
/// A stored report read back; nullopt with the reason in `problem` when it is
/// damaged or of another cluster.
std::optional<messages::epoch_report> decode_report(std::string_view record,
                                                    const std::string& cluster_id,
                                                    std::string& problem);

/// Seconds since 1970 now (the clock of saved_unix and started_unix).
double unix_now();

inline constexpr std::string_view run_state_key = "run";

/// The stored form of `r` (framed "EGRS", checksummed).
std::string frame_run_state(const run_state& r);

/// `record` read back, or nullopt with the reason in `problem`.
std::optional<run_state> parse_run_state(const std::string& record, std::string& problem);

/// The run state in `s`, if any; a damaged one is described in `problem`
/// and treated as absent.
std::optional<run_state> load_run_state(const store& s, std::string* problem = nullptr);

} // namespace eg::storage

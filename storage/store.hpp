#pragma once
// One RocksDB per node behind a small interface: no RocksDB type leaks out.
// Column families per kind of record; keys sort by platform, then epoch.

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
/// directory and RocksDB's status.
class storage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

enum class family { checkpoints, metrics, aggregates, rankings, predictor };

/// Name of the column family of `f`.
const char* name(family f);

/// "<platform>/<epoch as 10 zero-padded digits>": sorts by platform then epoch.
std::string key(std::string_view platform, uint64_t epoch);

class store {
public:
  /// Opens (creating if missing) the database in `dir`.
  static std::unique_ptr<store> open(const std::string& dir);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  void put(family f, std::string_view key, std::string_view value);
  std::optional<std::string> get(family f, std::string_view key) const;
  void erase(family f, std::string_view key);
  /// All records whose key starts with `prefix`, in key order.
  std::vector<std::pair<std::string, std::string>> scan(family f, std::string_view prefix) const;
  /// Flushes memtables to disk (clean shutdown).
  void flush();
  const std::string& dir() const;

private:
  struct impl;
  explicit store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// A platform's state at the end of an epoch (or at shutdown).
struct checkpoint {
  std::string platform;
  uint64_t epoch = 0;       ///< epochs completed
  uint64_t iteration = 0;   ///< iterations completed in total
  double gossip_weight = 0;
  std::string model;        ///< serialized model (torch archive bytes)
  std::string optimizer;    ///< serialized optimizer state (torch archive bytes)
};

/// Saves under key(platform, epoch) in `checkpoints`, framed with a magic,
/// a format version and a CRC-32 of the body.
void save_checkpoint(store& s, const checkpoint& c);

/// The newest checkpoint of `platform` that passes its checksum and parses.
/// Damaged newer records are skipped; each is described in `problems`.
std::optional<checkpoint> load_latest_checkpoint(const store& s, const std::string& platform,
                                                 std::vector<std::string>* problems = nullptr);

} // namespace eg::storage

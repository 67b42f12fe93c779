#include "storage/store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <shared_mutex>

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

namespace eg::storage {

namespace {

constexpr family all_families[] = {family::checkpoints, family::metrics, family::aggregates,
                                   family::rankings, family::predictor, family::runs};

rocksdb::Slice slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

/// Whether a failed write or flush means that the store cannot write (the
/// disk is full or read-only, the directory is gone, RocksDB stopped after a
/// background error) rather than a bad call or a moment's contention.
bool cannot_write(const rocksdb::Status& s) {
  return !s.ok() && !s.IsInvalidArgument() && !s.IsBusy() && !s.IsTryAgain() && !s.IsTimedOut()
         && !s.IsIncomplete();
}

/// The first reason the store could not write; shared with the listener,
/// which RocksDB calls from its own threads.
class failure_state {
public:
  /// Records `why` unless a failure was recorded before.
  void set(std::string why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!why_)
      why_ = std::move(why);
  }
  std::optional<std::string> get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return why_;
  }

private:
  mutable std::mutex mutex_;
  std::optional<std::string> why_;
};

/// RocksDB's info log, file LOG in the store's directory. RocksDB 7.8's own
/// (EnvLogger) goes through a WritableFileWriter, which in a build with
/// assertions (Debian's librocksdb) aborts the process on the first line
/// logged after a write of that file failed: on a full disk, the next
/// message (of the error handler, a flush, closing) ended the process.
/// This one writes each line with one write(2) and stops at the first
/// failure.
class info_log : public rocksdb::Logger {
public:
  explicit info_log(const std::string& dir) : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir, ec);
    auto path = fs::path(dir) / "LOG";
    // Appended to across opens; the previous one is kept once it grows large.
    if (fs::file_size(path, ec) > (4u << 20) && !ec)
      fs::rename(path, fs::path(dir) / "LOG.old", ec);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  ~info_log() override {
    if (fd_ >= 0)
      ::close(fd_);
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fd_ < 0)
      return;
    timeval now{};
    gettimeofday(&now, nullptr);
    tm t{};
    localtime_r(&now.tv_sec, &t);
    char stamp[64];
    std::snprintf(stamp, sizeof stamp, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld ", t.tm_year + 1900,
                  t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                  static_cast<long>(now.tv_usec));
    std::string line = stamp;
    char buf[512];
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(buf, sizeof buf, format, copy);
    va_end(copy);
    if (n < 0)
      return;
    if (static_cast<size_t>(n) < sizeof buf) {
      line.append(buf, static_cast<size_t>(n));
    } else {
      std::string big(static_cast<size_t>(n) + 1, '\0');
      va_copy(copy, ap);
      std::vsnprintf(big.data(), big.size(), format, copy);
      va_end(copy);
      line.append(big.data(), static_cast<size_t>(n));
    }
    if (line.back() != '\n')
      line += '\n';
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      ssize_t w = ::write(fd_, p, left);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {  // full, read-only, gone: no more info log
        ::close(fd_);
        fd_ = -1;
        return;
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
  }

private:
  std::mutex mutex_;
  int fd_ = -1;
};

const char* what_failed(rocksdb::BackgroundErrorReason reason) {
  switch (reason) {
    case rocksdb::BackgroundErrorReason::kFlush:
    case rocksdb::BackgroundErrorReason::kFlushNoWAL: return "a flush failed";
    case rocksdb::BackgroundErrorReason::kCompaction: return "a compaction failed";
    case rocksdb::BackgroundErrorReason::kWriteCallback:
    case rocksdb::BackgroundErrorReason::kMemTable: return "a write failed";
    case rocksdb::BackgroundErrorReason::kManifestWrite:
    case rocksdb::BackgroundErrorReason::kManifestWriteNoWAL: return "a manifest write failed";
  }
  return "RocksDB's background work failed";
}

/// Learns of RocksDB's background errors (a flush or compaction that could
/// not write, a failed write to the log) and turns its automatic recovery
/// off: a store that failed stays failed, and writes nothing more.
class failure_listener : public rocksdb::EventListener {
public:
  explicit failure_listener(std::shared_ptr<failure_state> failure)
      : failure_(std::move(failure)) {}
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* error) override {
    if (error && !error->ok())
      failure_->set(std::string(what_failed(reason)) + ": " + error->ToString());
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status error,
                            bool* auto_recovery) override {
    error.PermitUncheckedError();
    if (auto_recovery)
      *auto_recovery = false;
  }

private:
  std::shared_ptr<failure_state> failure_;
};

} // namespace

const char* name(family f) {
  switch (f) {
    case family::checkpoints: return "checkpoints";
    case family::metrics: return "metrics";
    case family::aggregates: return "aggregates";
    case family::rankings: return "rankings";
    case family::predictor: return "predictor";
    case family::runs: return "runs";
  }
  return "unknown";
}

std::optional<family> family_named(std::string_view n) {
  for (family f : all_families)
    if (n == name(f)) return f;
  return std::nullopt;
}

std::string key(std::string_view platform, uint64_t epoch) {
  // Ten digits hold every uint32 epoch (the configured range), so keys sort
  // numerically within a platform.
  char digits[24];
  std::snprintf(digits, sizeof digits, "%010" PRIu64, epoch);
  std::string k(platform);
  k += '/';
  k += digits;
  return k;
}

struct store::impl {
  std::string dir;
  // Shared by every operation, exclusive for closing.
  mutable std::shared_mutex use;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // "default", then all_families in order
  std::shared_ptr<failure_state> failure = std::make_shared<failure_state>();

  ~impl() {
    try {
      close();
    } catch (const storage_error&) {
      // Nothing more to do about it while going away.
    }
  }

  void close() {
    std::unique_lock<std::shared_mutex> lock(use);
    if (!db)
      return;
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    handles.clear();
    // A store that cannot write has its background work stopped by RocksDB
    // (automatic recovery is off), and Close() writes nothing for it: with
    // the log on, memtables are not flushed at shutdown.
    rocksdb::Status s = db->Close();
    db.reset();
    if (!s.ok()) fail("close", s);
  }

  /// Throws unless the database is open.
  void check_open() const {
    if (!db) throw storage_error("the store in '" + dir + "' is closed");
  }

  /// Throws, without calling RocksDB, when the store failed before.
  void check_writable() const {
    check_open();
    if (auto why = failure->get())
      throw storage_error("the store in '" + dir + "' is not writable since " + *why);
  }

  rocksdb::ColumnFamilyHandle* handle(family f) const {
    return handles.at(1 + static_cast<size_t>(f));
  }

  [[noreturn]] void fail(const char* action, const rocksdb::Status& s) const {
    throw storage_error(std::string("cannot ") + action + " the store in '" + dir +
                        "': " + s.ToString());
  }

  /// A write or flush that failed: the store is failed from now on when the
  /// failure means it cannot write.
  [[noreturn]] void write_failed(const char* action, const char* what, const rocksdb::Status& s) {
    if (cannot_write(s)) failure->set(std::string(what) + ": " + s.ToString());
    fail(action, s);
  }
};

std::unique_ptr<store> store::open(const std::string& dir) {
  auto p = std::make_unique<impl>();
  p->dir = dir;
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.info_log = std::make_shared<info_log>(dir);
  options.listeners.push_back(std::make_shared<failure_listener>(p->failure));
  // No automatic resume after a retryable background error either (see
  // failure_listener for the others).
  options.max_bgerror_resume_count = 0;

  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (family f : all_families) families.emplace_back(name(f), rocksdb::ColumnFamilyOptions());

  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, families, &p->handles, &db);
  if (!s.ok()) p->fail("open", s);
  p->db.reset(db);
  return std::unique_ptr<store>(new store(std::move(p)));
}

store::store(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

store::~store() = default;

void store::put(family f, std::string_view key, std::string_view value) {
  std::shared_lock<std::shared_mutex> lock(impl_->use);
  impl_->check_writable();
  rocksdb::Status s = impl_->db->Put(rocksdb::WriteOptions(), impl_->handle(f), slice(key),
                                     slice(value));
  if (!s.ok()) impl_->write_failed("write to", "a write failed", s);
}

std::optional<std::string> store::get(family f, std::string_view key) const {
  std::shared_lock<std::shared_mutex> lock(impl_->use);
  impl_->check_open();
  std::string value;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), impl_->handle(f), slice(key), &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) impl_->fail("read from", s);
  return value;
}

void store::erase(family f, std::string_view key) {
  std::shared_lock<std::shared_mutex> lock(impl_->use);
  impl_->check_writable();
  rocksdb::Status s = impl_->db->Delete(rocksdb::WriteOptions(), impl_->handle(f), slice(key));
  if (!s.ok()) impl_->write_failed("delete from", "a write failed", s);
}

std::vector<std::pair<std::string, std::string>> store::scan(family f,
                                                             std::string_view prefix) const {
  std::shared_lock<std::shared_mutex> lock(impl_->use);
  impl_->check_open();
  std::vector<std::pair<std::string, std::string>> records;
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(f)));
  for (it->Seek(slice(prefix)); it->Valid() && it->key().starts_with(slice(prefix)); it->Next())
    records.emplace_back(it->key().ToString(), it->value().ToString());
  if (!it->status().ok()) impl_->fail("read from", it->status());
  return records;
}

void store::flush() {
  std::shared_lock<std::shared_mutex> lock(impl_->use);
  impl_->check_writable();
  rocksdb::Status s = impl_->db->Flush(rocksdb::FlushOptions(), impl_->handles);
  if (!s.ok()) impl_->write_failed("flush", "a flush failed", s);
  // A background error that no listener call reported (there should be none).
  uint64_t errors = 0;
  if (impl_->db->GetIntProperty("rocksdb.background-errors", &errors) && errors > 0
      && !impl_->failure->get()) {
    impl_->failure->set("RocksDB reports " + std::to_string(errors) + " background errors");
    impl_->check_writable();
  }
}

std::string failure_cause(std::string_view failure) {
  auto end = failure.find_last_not_of(" \n");
  if (end == std::string_view::npos) return std::string(failure);
  failure = failure.substr(0, end + 1);
  auto colon = failure.rfind(": ");
  return std::string(colon == std::string_view::npos ? failure : failure.substr(colon + 2));
}

std::optional<std::string> store::failure() const { return impl_->failure->get(); }

void store::close() { impl_->close(); }

const std::string& store::dir() const { return impl_->dir; }

} // namespace eg::storage

#include "storage/store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <cinttypes>
#include <cstdio>

namespace eg::storage {

namespace {

constexpr family all_families[] = {family::checkpoints, family::metrics, family::aggregates,
                                   family::rankings, family::predictor, family::runs};

rocksdb::Slice slice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

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
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // "default", then all_families in order

  ~impl() {
    if (!db) return;
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    db->Close();
  }

  rocksdb::ColumnFamilyHandle* handle(family f) const {
    return handles.at(1 + static_cast<size_t>(f));
  }

  [[noreturn]] void fail(const char* action, const rocksdb::Status& s) const {
    throw storage_error(std::string("cannot ") + action + " the store in '" + dir +
                        "': " + s.ToString());
  }
};

std::unique_ptr<store> store::open(const std::string& dir) {
  auto p = std::make_unique<impl>();
  p->dir = dir;
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.keep_log_file_num = 4;  // every open starts an info LOG; old ones are of no use

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
  rocksdb::Status s = impl_->db->Put(rocksdb::WriteOptions(), impl_->handle(f), slice(key),
                                     slice(value));
  if (!s.ok()) impl_->fail("write to", s);
}

std::optional<std::string> store::get(family f, std::string_view key) const {
  std::string value;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), impl_->handle(f), slice(key), &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) impl_->fail("read from", s);
  return value;
}

void store::erase(family f, std::string_view key) {
  rocksdb::Status s = impl_->db->Delete(rocksdb::WriteOptions(), impl_->handle(f), slice(key));
  if (!s.ok()) impl_->fail("delete from", s);
}

std::vector<std::pair<std::string, std::string>> store::scan(family f,
                                                             std::string_view prefix) const {
  std::vector<std::pair<std::string, std::string>> records;
  std::unique_ptr<rocksdb::Iterator> it(
      impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->handle(f)));
  for (it->Seek(slice(prefix)); it->Valid() && it->key().starts_with(slice(prefix)); it->Next())
    records.emplace_back(it->key().ToString(), it->value().ToString());
  if (!it->status().ok()) impl_->fail("read from", it->status());
  return records;
}

void store::flush() {
  rocksdb::Status s = impl_->db->Flush(rocksdb::FlushOptions(), impl_->handles);
  if (!s.ok()) impl_->fail("flush", s);
}

const std::string& store::dir() const { return impl_->dir; }

} // namespace eg::storage

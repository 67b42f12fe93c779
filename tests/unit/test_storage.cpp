// links: eg_storage eg_messages
#include "storage/store.hpp"
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace eg::storage;
namespace fs = std::filesystem;
using eg::test::small_tmpfs;

namespace {

// A fresh directory, removed with everything below it at the end of a test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "eg-storage-XXXXXX").string();
    BOOST_REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string db() const { return (path / "db").string(); }
};

checkpoint make_checkpoint(const std::string& platform, uint64_t epoch) {
  checkpoint c;
  c.platform = platform;
  c.epoch = epoch;
  c.iteration = epoch * 100 + 7;
  c.gossip_weight = 1.0 / static_cast<double>(epoch + 2);
  std::mt19937 rng(static_cast<unsigned>(epoch));
  c.model.resize(1000 + epoch);  // binary, with NULs, and not a whole number of words
  for (char& b : c.model) b = static_cast<char>(rng());
  c.optimizer = std::string("momentum\0buffers", 16) + std::to_string(epoch);
  return c;
}

void check_equal(const checkpoint& a, const checkpoint& b) {
  BOOST_TEST(a.platform == b.platform);
  BOOST_TEST(a.epoch == b.epoch);
  BOOST_TEST(a.iteration == b.iteration);
  BOOST_TEST(a.gossip_weight == b.gossip_weight);
  BOOST_TEST((a.model == b.model));
  BOOST_TEST((a.optimizer == b.optimizer));
}

// Flips one bit of a stored value, as damage on disk would.
void damage(store& s, const std::string& k, size_t byte) {
  std::string v = s.get(family::checkpoints, k).value();
  v.at(byte) = static_cast<char>(v.at(byte) ^ 0x10);
  s.put(family::checkpoints, k, v);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}


// What a store that failed answers: a failure with `cause`, writes and
// flushes refused at once with it, reads served, closing without abort.
void check_failed_for_good(store& s, const std::string& cause,
                           const std::vector<std::string>& readable) {
  auto why = s.failure();
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(contains(*why, cause), *why);
  BOOST_TEST(failure_cause(*why) == cause);
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (auto write : {0, 1, 2}) {
      try {
        if (write == 0)
          s.put(family::checkpoints, "later", std::string(1000, 'x'));
        else if (write == 1)
          s.erase(family::metrics, "any");
        else
          s.flush();
        BOOST_FAIL("a failed store wrote");
      } catch (const storage_error& e) {
        // Refused by the store itself (RocksDB would say something else),
        // with the first failure's reason.
        BOOST_TEST(contains(e.what(), "is not writable since"), e.what());
        BOOST_TEST(contains(e.what(), *why), e.what());
      }
    }
  }
  BOOST_TEST((s.failure() == why));  // the first reason stays
  for (auto& k : readable)
    BOOST_TEST(s.get(family::checkpoints, k).has_value(), k);
  BOOST_TEST(!s.get(family::checkpoints, "later").has_value());
  BOOST_TEST(s.scan(family::checkpoints, "").size() >= readable.size());
  try {
    s.close();
  } catch (const storage_error& e) {
    BOOST_TEST_MESSAGE("closing the failed store: " << e.what());
  }
  BOOST_TEST((s.failure() == why));
  BOOST_CHECK_THROW(s.get(family::checkpoints, readable.front()), storage_error);
}

} // namespace

BOOST_AUTO_TEST_SUITE(storage)

BOOST_AUTO_TEST_CASE(keys_and_family_names) {
  BOOST_TEST(key("p0", 3) == "p0/0000000003");
  BOOST_TEST(key("edge-7", 4294967295u) == "edge-7/4294967295");
  BOOST_TEST(key("p0", 2) < key("p0", 10));
  BOOST_TEST(key("p0", 99) < key("p1", 0));
  BOOST_TEST(std::string(name(family::checkpoints)) == "checkpoints");
  BOOST_TEST(std::string(name(family::metrics)) == "metrics");
  BOOST_TEST(std::string(name(family::aggregates)) == "aggregates");
  BOOST_TEST(std::string(name(family::rankings)) == "rankings");
  BOOST_TEST(std::string(name(family::predictor)) == "predictor");
}

BOOST_AUTO_TEST_CASE(put_get_scan_erase_per_family) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  BOOST_TEST(s->dir() == tmp.db());
  for (family f : {family::checkpoints, family::metrics, family::aggregates, family::rankings,
                   family::predictor})
    s->put(f, "p0/0000000001", std::string("value of ") + name(f));
  for (family f : {family::checkpoints, family::metrics, family::aggregates, family::rankings,
                   family::predictor}) {
    BOOST_TEST(s->get(f, "p0/0000000001").value() == std::string("value of ") + name(f));
    BOOST_TEST(s->scan(f, "").size() == 1u);
  }
  BOOST_TEST(!s->get(family::metrics, "p0/0000000002").has_value());

  s->erase(family::metrics, "p0/0000000001");
  BOOST_TEST(!s->get(family::metrics, "p0/0000000001").has_value());
  BOOST_TEST(s->get(family::rankings, "p0/0000000001").has_value());
  s->erase(family::metrics, "never-written");  // erasing a missing key is no error

  std::string binary("a\0b\xff", 4);
  s->put(family::predictor, binary, binary);
  BOOST_TEST(s->get(family::predictor, binary).value() == binary);
}

BOOST_AUTO_TEST_CASE(scan_sorts_by_platform_then_epoch) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  for (auto [platform, epoch] : std::vector<std::pair<std::string, uint64_t>>{
           {"p1", 1}, {"p0", 10}, {"p10", 0}, {"p0", 2}, {"p0", 0}})
    s->put(family::metrics, key(platform, epoch), platform + "@" + std::to_string(epoch));

  auto p0 = s->scan(family::metrics, "p0/");
  BOOST_REQUIRE(p0.size() == 3u);
  BOOST_TEST(p0[0].second == "p0@0");
  BOOST_TEST(p0[1].second == "p0@2");
  BOOST_TEST(p0[2].second == "p0@10");

  auto p1 = s->scan(family::metrics, "p1/");  // not p10's records
  BOOST_REQUIRE(p1.size() == 1u);
  BOOST_TEST(p1[0].first == "p1/0000000001");

  auto all = s->scan(family::metrics, "");
  std::vector<std::string> keys;
  for (auto& [k, v] : all) keys.push_back(k);
  std::vector<std::string> expected = {"p0/0000000000", "p0/0000000002", "p0/0000000010",
                                       "p1/0000000001", "p10/0000000000"};
  BOOST_TEST(keys == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(reopening_keeps_the_data) {
  temp_dir tmp;
  {
    auto s = store::open(tmp.db());
    s->put(family::aggregates, "run", "kept");
    s->put(family::checkpoints, "unflushed", "kept by the log");
    s->flush();
    s->put(family::metrics, "after-flush", "also kept");
  }
  auto s = store::open(tmp.db());
  BOOST_TEST(s->get(family::aggregates, "run").value() == "kept");
  BOOST_TEST(s->get(family::checkpoints, "unflushed").value() == "kept by the log");
  BOOST_TEST(s->get(family::metrics, "after-flush").value() == "also kept");
}

BOOST_AUTO_TEST_CASE(a_regular_file_is_refused) {
  temp_dir tmp;
  std::string file = (tmp.path / "not-a-directory").string();
  std::ofstream(file) << "hello";
  try {
    store::open(file);
    BOOST_FAIL("a regular file was opened as a store");
  } catch (const storage_error& e) {
    BOOST_TEST(contains(e.what(), "cannot open the store in '" + file + "'"), e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_locked_store_is_refused) {
  temp_dir tmp;
  auto first = store::open(tmp.db());
  try {
    store::open(tmp.db());
    BOOST_FAIL("a store was opened twice");
  } catch (const storage_error& e) {
    BOOST_TEST(contains(e.what(), "'" + tmp.db() + "'"), e.what());
  }
}

BOOST_AUTO_TEST_CASE(checkpoints_round_trip) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  std::vector<std::string> problems;
  BOOST_TEST(!load_latest_checkpoint(*s, "p0", &problems).has_value());
  BOOST_TEST(problems.empty());

  for (uint64_t e : {1, 2, 10, 3}) save_checkpoint(*s, make_checkpoint("p0", e));
  save_checkpoint(*s, make_checkpoint("p00", 50));  // another platform, sharing a prefix

  auto latest = load_latest_checkpoint(*s, "p0", &problems);
  BOOST_REQUIRE(latest.has_value());
  check_equal(*latest, make_checkpoint("p0", 10));
  BOOST_TEST(problems.empty());

  checkpoint big = make_checkpoint("p1", 4);
  big.model.assign(24u << 20, 'w');  // beyond capnp's default traversal limit
  save_checkpoint(*s, big);
  check_equal(load_latest_checkpoint(*s, "p1").value(), big);
}

BOOST_AUTO_TEST_CASE(damaged_checkpoints_are_skipped) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  for (uint64_t e = 1; e <= 4; ++e) save_checkpoint(*s, make_checkpoint("p0", e));

  damage(*s, key("p0", 4), 300);  // inside the body
  std::vector<std::string> problems;
  auto c = load_latest_checkpoint(*s, "p0", &problems);
  BOOST_REQUIRE(c.has_value());
  check_equal(*c, make_checkpoint("p0", 3));
  BOOST_REQUIRE(problems.size() == 1u);
  BOOST_TEST(problems[0] == "checkpoint p0/0000000004: checksum mismatch");

  damage(*s, key("p0", 3), 1);  // the magic
  s->put(family::checkpoints, key("p0", 2), "EGCK");  // truncated
  damage(*s, key("p0", 1), 4);  // the format version
  problems.clear();
  BOOST_TEST(!load_latest_checkpoint(*s, "p0", &problems).has_value());
  BOOST_REQUIRE(problems.size() == 4u);
  BOOST_TEST(contains(problems[0], "p0/0000000004: checksum mismatch"), problems[0]);
  BOOST_TEST(contains(problems[1], "p0/0000000003: not a checkpoint record"), problems[1]);
  BOOST_TEST(contains(problems[2], "p0/0000000002: record of 4 bytes is too short"), problems[2]);
  BOOST_TEST(contains(problems[3], "p0/0000000001: format version"), problems[3]);
}

BOOST_AUTO_TEST_CASE(checkpoints_record_when_they_were_saved) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  double before = unix_now();
  save_checkpoint(*s, make_checkpoint("p0", 1));
  auto c = load_latest_checkpoint(*s, "p0").value();
  BOOST_TEST(c.saved_unix >= before);
  BOOST_TEST(c.saved_unix <= unix_now());
}

BOOST_AUTO_TEST_CASE(run_state_round_trips_and_damage_is_reported) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  BOOST_TEST(!load_run_state(*s).has_value());

  run_state r;
  r.fingerprint = "0123456789abcdef";
  r.run = "c-20261122-101010";
  r.started_unix = 1.5e9;
  r.epochs.push_back({0, 5.5, 5.5, 60000, 0.6, 0.77, 4, 5.25, -1});
  r.epochs.push_back({1, 11.0, 5.0, 60000, 0.5, 0.82, 3, 10.5, 0.12});
  r.reports = {std::string("report\0zero", 11), "one"};
  s->put(family::runs, run_state_key, frame_run_state(r));

  auto back = load_run_state(*s).value();
  BOOST_TEST(back.fingerprint == r.fingerprint);
  BOOST_TEST(back.run == r.run);
  BOOST_TEST(!back.finished);
  BOOST_TEST(back.started_unix == r.started_unix);
  BOOST_REQUIRE(back.epochs.size() == 2u);
  BOOST_TEST(back.epochs[1].epoch == 1u);
  BOOST_TEST(back.epochs[1].averaged_accuracy == 0.82);
  BOOST_TEST(back.epochs[1].platforms_up == 3u);
  BOOST_TEST(back.epochs[1].training_seconds == 10.5);
  BOOST_TEST(back.epochs[1].prediction_error == 0.12);
  BOOST_TEST(back.epochs[0].prediction_error == -1);
  BOOST_TEST((back.reports == r.reports));

  auto v = s->get(family::runs, run_state_key).value();
  v[v.size() - 3] ^= 0x01;
  s->put(family::runs, run_state_key, v);
  std::string problem;
  BOOST_TEST(!load_run_state(*s, &problem).has_value());
  BOOST_TEST(contains(problem, "checksum mismatch"), problem);
  s->put(family::runs, run_state_key, frame_run_state(r).substr(0, 3));
  BOOST_TEST(!load_run_state(*s, &problem).has_value());
  BOOST_TEST(contains(problem, "too short"), problem);
  save_checkpoint(*s, make_checkpoint("p0", 1));
  s->put(family::runs, run_state_key, s->get(family::checkpoints, key("p0", 1)).value());
  BOOST_TEST(!load_run_state(*s, &problem).has_value());
  BOOST_TEST(contains(problem, "not a run state record"), problem);
}

BOOST_AUTO_TEST_CASE(families_are_found_by_name) {
  BOOST_TEST((family_named("runs") == family::runs));
  BOOST_TEST((family_named("rankings") == family::rankings));
  BOOST_TEST(!family_named("nonsense").has_value());
}

BOOST_AUTO_TEST_CASE(failure_cause_is_the_systems_word) {
  BOOST_TEST(failure_cause("a write failed: IO error: No space left on device: While appending "
                           "to file: /x/000004.log: No space left on device")
             == "No space left on device");
  BOOST_TEST(failure_cause("no colon") == "no colon");
}

BOOST_AUTO_TEST_CASE(a_store_that_writes_has_no_failure) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  s->put(family::checkpoints, "k", "v");
  s->flush();
  BOOST_TEST(!s->failure().has_value());
  s->close();
  s->close();  // once is enough; again does nothing
  BOOST_CHECK_THROW(s->put(family::checkpoints, "k", "v"), storage_error);
  BOOST_TEST(!s->failure().has_value());
  auto again = store::open(tmp.db());
  BOOST_TEST(again->get(family::checkpoints, "k").value() == "v");
}

// The log file stays open while its directory goes, so writes go on; the
// flush needs new files and cannot make them.
BOOST_AUTO_TEST_CASE(a_store_whose_directory_is_removed_fails_for_good) {
  temp_dir tmp;
  auto s = store::open(tmp.db());
  s->put(family::checkpoints, "before", "saved");
  s->flush();
  s->put(family::checkpoints, "in the log", "saved in memory");
  fs::remove_all(tmp.db());
  BOOST_CHECK_THROW(s->flush(), storage_error);
  check_failed_for_good(*s, "No such file or directory", {"before", "in the log"});
}

BOOST_AUTO_TEST_CASE(a_store_on_a_full_disk_fails_for_good) {
  temp_dir tmp;
  small_tmpfs disk(tmp.path / "disk", "1m");
  if (!disk.mounted) {
    BOOST_TEST_MESSAGE("skipped: cannot mount a tmpfs here (" << disk.why_not << ")");
    return;
  }
  // Room freed after the failure: the store stays failed all the same.
  std::ofstream(disk.dir + "/filler") << std::string(100 << 10, 'f');
  auto s = store::open(disk.dir + "/db");
  std::vector<std::string> saved;
  const std::string record(200 << 10, 'c');
  for (int i = 0; i < 20; ++i) {
    auto k = key("p0", static_cast<uint64_t>(i));
    try {
      s->put(family::checkpoints, k, record);
      saved.push_back(k);
    } catch (const storage_error& e) {
      BOOST_TEST(contains(e.what(), "No space left on device"), e.what());
      break;
    }
  }
  BOOST_REQUIRE(!saved.empty());
  BOOST_REQUIRE_MESSAGE(s->failure().has_value(), "1 MB took 20 records of 200 KB");
  fs::remove(disk.dir + "/filler");
  check_failed_for_good(*s, "No space left on device", saved);
}

// Root writes whatever the permissions say, so this one needs another user.
BOOST_AUTO_TEST_CASE(a_store_whose_directory_becomes_read_only_fails_for_good) {
  if (geteuid() == 0) {
    BOOST_TEST_MESSAGE("skipped: permissions do not stop root");
    return;
  }
  temp_dir tmp;
  auto s = store::open(tmp.db());
  s->put(family::checkpoints, "before", "saved");
  s->flush();
  fs::permissions(tmp.db(), fs::perms::owner_read | fs::perms::owner_exec);
  s->put(family::checkpoints, "in the log", "saved in memory");
  BOOST_CHECK_THROW(s->flush(), storage_error);
  check_failed_for_good(*s, "Permission denied", {"before", "in the log"});
  fs::permissions(tmp.db(), fs::perms::owner_all);
}

BOOST_AUTO_TEST_SUITE_END()

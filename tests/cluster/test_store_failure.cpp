// A real `edgegossip run` whose store fills its disk during the run (a 3 MB
// tmpfs: the checkpoints of the first epoch fit, later ones do not): the
// failure is reported once, training goes on (or stops, as
// cluster.on_store_failure says), the run directory is written, and the
// process exits with code 3 and a last line naming the store, never aborts.
// Skipped where this process may not mount a tmpfs.
#include "process.hpp"
#include "storage/store.hpp"

#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <cstring>

#include <sys/mount.h>

using namespace eg::test;
namespace fs = std::filesystem;

namespace {


size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto i = text.find(part); i != std::string::npos; i = text.find(part, i + 1))
    ++n;
  return n;
}

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of("\n");
  if (end == std::string::npos)
    return "";
  auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start + 1) + 1);
}

/// `edgegossip run` of the default cluster (4 platforms, LeNet-5) on few
/// samples, its store on `disk`; {exit code, output}.
std::pair<int, std::string> run_on(const temp_dir& dir, const small_tmpfs& disk,
                                   uint32_t epochs, const std::string& on_failure,
                                   const std::string& name) {
  return run_binary({"run", "--set", "storage.dir=\"" + disk.dir + "/data\"", "--set",
                     "output.dir=\"" + dir / (name + "-runs") + "\"", "--set",
                     "train.epochs=" + std::to_string(epochs), "--set",
                     "data.train_samples=2000", "--set", "data.test_samples=500", "--set",
                     "cluster.on_store_failure=\"" + on_failure + "\""},
                    dir / (name + ".log"), std::chrono::seconds(120));
}

} // namespace

BOOST_AUTO_TEST_SUITE(store_failure)

BOOST_AUTO_TEST_CASE(a_full_disk_is_reported_once_the_run_finishes_and_exits_3) {
  temp_dir dir;
  small_tmpfs disk(dir / "disk", "3m");
  if (!disk.mounted) {
    BOOST_TEST_MESSAGE("skipped: cannot mount a tmpfs here (" << disk.why_not << ")");
    return;
  }
  const uint32_t epochs = 4;
  auto [code, out] = run_on(dir, disk, epochs, "continue", "continue");
  BOOST_TEST_INFO("output:\n" << out);
  BOOST_REQUIRE_EQUAL(code, 3);
  const std::string store_dir = disk.dir + "/data/local";
  // Reported once, naming the directory, the cause and what is at risk.
  BOOST_TEST(count(out, "store: the store in " + store_dir + " cannot write") == 1u);
  BOOST_TEST(count(out, "No space left on device") >= 2u);
  BOOST_TEST(out.find("the last saved checkpoints: ") != std::string::npos);
  BOOST_TEST(out.find("after epoch 1") != std::string::npos);  // the first epoch fitted
  BOOST_TEST(count(out, "the store cannot write (") == 1u);    // the node's decision
  BOOST_TEST(out.find("training goes on without checkpoints") != std::string::npos);
  // Training went on to the end and the run directory was written.
  BOOST_TEST(out.find("epoch 4/4") != std::string::npos);
  auto run = only_run_dir(dir / "continue-runs");
  BOOST_TEST(read_csv((run / "cluster.csv").string()).size() == epochs);
  BOOST_TEST(fs::exists(run / "metrics.csv"));
  BOOST_TEST(fs::exists(run / "model.pt"));
  // The last line names the store and the exit code.
  auto last = last_line(out);
  BOOST_TEST(last.find("node local: the store in " + store_dir + " could not write since epoch ")
               != std::string::npos,
             last);
  BOOST_TEST(last.find("(No space left on device)") != std::string::npos, last);
  BOOST_TEST(last.find("checkpoints not saved") != std::string::npos, last);
  BOOST_TEST(last.find("; exit code 3") != std::string::npos, last);
  // What was saved before is intact: a restart resumes from it (read from a
  // copy, as opening the store on the full disk could not write its files).
  fs::copy(store_dir, dir / "copy", fs::copy_options::recursive);
  auto db = eg::storage::store::open(dir / "copy");
  size_t resumable = 0;
  for (auto p : {"p0", "p1", "p2", "p3"})
    if (auto c = eg::storage::load_latest_checkpoint(*db, p))
      resumable += c->epoch >= 1 ? 1 : 0;
  BOOST_TEST(resumable >= 1u);
}

BOOST_AUTO_TEST_CASE(on_store_failure_stop_ends_the_node_early_with_exit_code_3) {
  temp_dir dir;
  small_tmpfs disk(dir / "disk", "3m");
  if (!disk.mounted) {
    BOOST_TEST_MESSAGE("skipped: cannot mount a tmpfs here (" << disk.why_not << ")");
    return;
  }
  const uint32_t epochs = 30;
  auto [code, out] = run_on(dir, disk, epochs, "stop", "stop");
  BOOST_TEST_INFO("output:\n" << out);
  BOOST_REQUIRE_EQUAL(code, 3);
  BOOST_TEST(count(out, "store: the store in " + disk.dir + "/data/local cannot write") == 1u);
  BOOST_TEST(out.find("cluster.on_store_failure = \"stop\": stopping the node")
             != std::string::npos);
  BOOST_TEST(out.find("epoch 30/30") == std::string::npos);  // stopped early
  auto last = last_line(out);
  BOOST_TEST(last.find("node local: the store in ") != std::string::npos, last);
  BOOST_TEST(last.find("; exit code 3") != std::string::npos, last);
}

BOOST_AUTO_TEST_SUITE_END()

// A split run as a user runs it: `edgegossip launch` on a cluster file with
// the stages on three nodes, the middle stage's node killed with SIGKILL and
// started again by hand. The pipeline waits for it (the console says so),
// the stage comes back from its checkpoint, and the run ends with every
// epoch. A run in the one-forward-one-backward order repeats at other
// speeds.
#include "actors/balancer/inspection.hpp"
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <fstream>
#include <sstream>

#include <cstdio>
#include <functional>

using namespace eg::test;
namespace in = eg::inspection;
using namespace std::chrono_literals;

namespace {

std::string capture(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p))
      out += buf;
    pclose(p);
  }
  return out;
}

/// The console's last answer (for a failure's message).
std::string last_answer;

/// A snapshot through node a's console port, or nothing.
std::optional<in::snapshot> snapshot(const temp_dir& dir, uint16_t port) {
  static int n = 0;
  auto [code, out] = run_binary({"console", "127.0.0.1:" + std::to_string(port), "--secret",
                                 "s3cret", "--cluster", "it-split", "--once", "--json"},
                                dir / ("console-" + std::to_string(++n) + ".log"), 60s);
  last_answer = out;
  if (code != 0)
    return std::nullopt;
  return in::snapshot_from_json(out);
}

in::snapshot wait_for(const temp_dir& dir, uint16_t port,
                      const std::function<bool(const in::snapshot&)>& done,
                      const std::string& what) {
  auto until = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < until) {
    if (auto s = snapshot(dir, port); s && done(*s))
      return *s;
    std::this_thread::sleep_for(300ms);
  }
  BOOST_FAIL("timed out waiting for the console to show " << what << "; its last answer: "
                                                          << last_answer);
  return {};
}

bool has_event(const in::snapshot& s, const std::string& text) {
  for (auto& e : s.events)
    if (e.text.find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

BOOST_AUTO_TEST_SUITE(split_nodes)

BOOST_AUTO_TEST_CASE(a_stages_node_killed_and_restarted_pauses_and_resumes_the_pipeline) {
  temp_dir dir;
  const uint32_t epochs = 12;  // enough left after the restart for the console to see it go on
  const uint16_t ports[3] = {free_port(), free_port(), free_port()};
  // LeNet-5 in three stages, pipelined (delayed), the middle one on a 4x
  // slower machine: a few seconds an epoch.
  std::ostringstream toml;
  toml << "[cluster]\nid = \"it-split\"\nseed = 3\nsecret = \"s3cret\"\n"
       << "[data]\ntrain_samples = 6000\ntest_samples = 1000\n"
       << "[train]\nepochs = " << epochs << "\nlr = 0.01\nmomentum = 0.9\nbatch = 64\n"
       << "[split]\nmode = \"delayed\"\nmodel = \"lenet5\"\nin_flight = 4\nresend_after = 10.0\n"
       << "[storage]\ndir = \"" << dir / "data" << "\"\n"
       << "[output]\ndir = \"" << dir / "runs" << "\"\n";
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i)
    toml << "[[nodes]]\nname = \"" << names[i] << "\"\nhost = \"127.0.0.1\"\nport = " << ports[i]
         << "\n";
  toml << "[[stages]]\nnode = \"a\"\nlayers = 2\n"
       << "[[stages]]\nnode = \"b\"\nlayers = 1\nslowdown = 4.0\n"
       << "[[stages]]\nnode = \"c\"\nlayers = 2\n";
  const auto config = dir / "split.toml";
  write_file(config, toml.str());

  process launch({EG_BINARY, "launch", "--config", config}, dir / "launch.log");
  BOOST_REQUIRE_MESSAGE(launch.wait_for_output("epoch 2 done", 240s), launch.output());
  auto before = wait_for(dir, ports[0], [](const in::snapshot& s) {
    return s.cluster.state == "training" && s.cluster.evaluated_epoch >= 1;
  }, "the split run training");
  BOOST_TEST(in::is_split(before.cluster));
  BOOST_TEST(before.platforms.size() == 3u);  // the stages' rows
  // The checkpoints after epoch 2 are written asynchronously; then b goes.
  std::this_thread::sleep_for(1500ms);
  // pgrep also lists the shell that runs it (its command line holds the
  // pattern); the node is the edgegossip process among them.
  std::string pid;
  {
    std::istringstream pids(capture("pgrep -f -- '--config " + config + " --node b'"));
    for (std::string p; pid.empty() && std::getline(pids, p);) {
      std::ifstream comm("/proc/" + p + "/comm");
      std::string name;
      if (std::getline(comm, name) && name.rfind("edgegossip", 0) == 0)
        pid = p;
    }
  }
  BOOST_REQUIRE_MESSAGE(!pid.empty(), "no process of node b: " << launch.output());
  BOOST_REQUIRE_EQUAL(std::system(("kill -9 " + pid).c_str()), 0);

  // The first stage stops sending; the console on node a says why.
  BOOST_REQUIRE_MESSAGE(launch.wait_for_output("a stage is gone; the pipeline waits for it", 30s),
                        launch.output());
  auto paused = wait_for(dir, ports[0], [](const in::snapshot& s) {
    return s.cluster.state == "paused";
  }, "the pipeline paused");
  BOOST_TEST(has_event(paused, "a stage's node is down"));
  for (auto& n : paused.nodes)
    BOOST_TEST((n.name == "b" ? n.state == "down" : n.state == "up"), n.name << " " << n.state);
  const auto epoch_when_paused = paused.cluster.evaluated_epoch;
  std::this_thread::sleep_for(3s);
  auto still = snapshot(dir, ports[0]);
  BOOST_REQUIRE(still);
  BOOST_TEST(still->cluster.evaluated_epoch == epoch_when_paused);  // nothing trains meanwhile

  // Started again by hand: the stage comes back from its checkpoint, the
  // first stage sends the lost batches again, the run goes on.
  process b({EG_BINARY, "node", "--config", config, "--node", "b"}, dir / "b-again.log");
  BOOST_REQUIRE_MESSAGE(b.wait_for_output("resumed from its checkpoint after epoch", 90s),
                        b.output());
  BOOST_REQUIRE_MESSAGE(launch.wait_for_output("every stage is there; the pipeline goes on", 60s),
                        launch.output());
  auto resumed = wait_for(dir, ports[0], [&](const in::snapshot& s) {
    return s.cluster.state != "paused" && s.cluster.evaluated_epoch > epoch_when_paused;
  }, "the pipeline going on");
  BOOST_TEST(!has_event(resumed, "a stage's node is down"));

  // launch ends when a and c do (b, killed, makes it fail: 128 + 9); the
  // restarted b ends with them.
  BOOST_TEST(launch.wait(300s) == 128 + SIGKILL, launch.output());
  BOOST_TEST(b.wait(60s) == 0, b.output());
  auto run = only_run_dir(dir / "runs");
  auto rows = read_csv((run / "split-metrics.csv").string());
  BOOST_REQUIRE_EQUAL(rows.size(), epochs);
  for (size_t e = 0; e < rows.size(); ++e)
    BOOST_TEST(std::stoi(rows[e]["epoch"]) == static_cast<int>(e + 1));
  const double last = std::stod(rows.back()["test_accuracy"]);
  BOOST_TEST_MESSAGE("split run through a kill and a restart: test accuracy " << last);
  BOOST_TEST(last > 0.7, "test accuracy " << last);
}

BOOST_AUTO_TEST_CASE(a_one_forward_one_backward_run_on_node_processes_repeats_at_other_speeds) {
  // split.schedule = "1f1b" on three node processes started by launch:
  // the same run with the middle stage's machine 1x and 5x slower (so its
  // messages come in another order) trains the same, epoch by epoch, to
  // the digit the metrics file keeps.
  auto run_once = [](double slowdown) {
    temp_dir dir;
    const uint16_t ports[3] = {free_port(), free_port(), free_port()};
    std::ostringstream toml;
    toml << "[cluster]\nid = \"it-split-1f1b\"\nseed = 5\n"
         << "[data]\ntrain_samples = 3000\ntest_samples = 500\n"
         << "[train]\nepochs = 2\nlr = 0.01\nmomentum = 0.9\nbatch = 64\n"
         << "[split]\nmode = \"predicted\"\nmodel = \"lenet5\"\nin_flight = 3\n"
         << "schedule = \"1f1b\"\n"
         << "[storage]\ndir = \"" << dir / "data" << "\"\n"
         << "[output]\ndir = \"" << dir / "runs" << "\"\n";
    const char* names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; ++i)
      toml << "[[nodes]]\nname = \"" << names[i] << "\"\nhost = \"127.0.0.1\"\nport = "
           << ports[i] << "\n";
    toml << "[[stages]]\nnode = \"a\"\nlayers = 2\n"
         << "[[stages]]\nnode = \"b\"\nlayers = 1\nslowdown = " << slowdown << "\n"
         << "[[stages]]\nnode = \"c\"\nlayers = 2\n";
    const auto config = dir / "split.toml";
    write_file(config, toml.str());
    auto [code, out] = run_binary({"launch", "--config", config}, dir / "launch.log", 180s);
    BOOST_REQUIRE_MESSAGE(code == 0, out);
    auto rows = read_csv((only_run_dir(dir / "runs") / "split-metrics.csv").string());
    BOOST_REQUIRE_EQUAL(rows.size(), 2u);
    std::vector<std::string> figures;
    for (auto& r : rows)
      figures.push_back(r["train_loss"] + " " + r["test_accuracy"]);
    return figures;
  };
  const auto even = run_once(1.0);
  const auto slow = run_once(5.0);
  BOOST_TEST(even == slow, boost::test_tools::per_element());
  BOOST_TEST_MESSAGE("1f1b on node processes: epochs " << even[0] << " | " << even[1]);
}

BOOST_AUTO_TEST_CASE(a_split_run_that_keeps_running_away_ends_its_node_with_exit_code_4) {
  // One node holding all three stages of LeNet-5 at a learning rate it
  // cannot train at: it runs away, is rolled back once (split.max_rollbacks
  // = 1), runs away again, and the run stops. The node's process says why
  // last and exits with 4, not 0.
  temp_dir dir;
  std::ostringstream toml;
  toml << "[cluster]\nid = \"it-split-away\"\nseed = 3\n"
       << "[data]\ntrain_samples = 3000\ntest_samples = 500\n"
       << "[train]\nepochs = 3\nlr = 5.0\nmomentum = 0.9\nbatch = 64\n"
       << "[split]\nmode = \"backprop\"\nmodel = \"lenet5\"\nmax_rollbacks = 1\n"
       << "[storage]\ndir = \"" << dir / "data" << "\"\n"
       << "[output]\ndir = \"" << dir / "runs" << "\"\n"
       << "[[nodes]]\nname = \"a\"\nhost = \"127.0.0.1\"\n"
       << "[[stages]]\nnode = \"a\"\nlayers = 2\n"
       << "[[stages]]\nnode = \"a\"\nlayers = 1\n"
       << "[[stages]]\nnode = \"a\"\nlayers = 2\n";
  const auto config = dir / "away.toml";
  write_file(config, toml.str());
  auto [code, out] = run_binary({"node", "--config", config, "--node", "a"}, dir / "a.log", 180s);
  BOOST_TEST(code == 4, out);
  BOOST_TEST(out.find("ran away") != std::string::npos, out);
  BOOST_TEST(out.find("split.max_rollbacks") != std::string::npos, out);
  BOOST_TEST(out.find("exit code 4") != std::string::npos, out);
}

BOOST_AUTO_TEST_SUITE_END()

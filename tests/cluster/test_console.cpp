// The inspection console against real `edgegossip node` processes: snapshots
// checked against the run's own metrics files, pause / resume seen in the
// iteration counts, refusals, and the interactive console driven in a
// terminal (tmux) as a person would.
#include "actors/balancer/inspection.hpp"
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

using namespace eg::test;
namespace in = eg::inspection;

namespace {

using namespace std::chrono_literals;

struct cluster_files {
  std::string config;
  uint16_t port_a = 0;
  uint16_t port_b = 0;
  std::string a() const { return "127.0.0.1:" + std::to_string(port_a); }
  std::string b() const { return "127.0.0.1:" + std::to_string(port_b); }
};

/// Two nodes: a (balancer, platform pa) and b (platform pb), a secret, short
/// epochs of LeNet-5 on a subset, slowed down so that the run lasts (about
/// a second an epoch with OpenBLAS on 2 cores).
cluster_files two_nodes(const temp_dir& dir, uint32_t epochs) {
  cluster_files f;
  f.port_a = free_port();
  do
    f.port_b = free_port();
  while (f.port_b == f.port_a);
  std::ostringstream toml;
  toml << "[cluster]\nid = \"it-console\"\nseed = 5\nsecret = \"s3cret\"\n"
       << "[data]\ntrain_samples = 6000\ntest_samples = 1000\n"
       << "[train]\nepochs = " << epochs << "\nmax_iterations = 25\n"
       << "[strategy]\nname = \"gosgd\"\nschedule = \"sync\"\nexchange_probability = 0.3\n"
       << "[storage]\ndir = \"" << dir / "data" << "\"\n"
       << "[output]\ndir = \"" << dir / "runs" << "\"\n"
       << "[[nodes]]\nname = \"a\"\nhost = \"127.0.0.1\"\nport = " << f.port_a
       << "\n[[nodes.platforms]]\nname = \"pa\"\nslowdown = 6.0\n"
       << "[[nodes]]\nname = \"b\"\nhost = \"127.0.0.1\"\nport = " << f.port_b
       << "\n[[nodes.platforms]]\nname = \"pb\"\nslowdown = 9.0\n";
  f.config = dir / "cluster.toml";
  write_file(f.config, toml.str());
  return f;
}

std::unique_ptr<process> start_node(const temp_dir& dir, const cluster_files& f,
                                    const std::string& name) {
  return std::make_unique<process>(
    std::vector<std::string>{EG_BINARY, "node", "--config", f.config, "--node", name},
    dir / (name + ".log"));
}

/// `edgegossip console ARGS...`: exit code and stdout + stderr.
std::pair<int, std::string> console_run(const temp_dir& dir, std::vector<std::string> args) {
  // The cluster's id, which the node's front door checks, with its secret.
  if (std::find(args.begin(), args.end(), "--secret") != args.end())
    args.insert(args.end(), {"--cluster", "it-console"});
  args.insert(args.begin(), "console");
  static int n = 0;
  return run_binary(args, dir / ("console-" + std::to_string(++n) + ".log"), 60s);
}

in::snapshot snapshot_via(const temp_dir& dir, const std::string& address) {
  auto [code, out] = console_run(dir, {address, "--secret", "s3cret", "--once", "--json"});
  BOOST_REQUIRE_MESSAGE(code == 0, "console --once failed (" << code << "): " << out);
  return in::snapshot_from_json(out);
}

/// Polls snapshots until `done` holds (or fails the test after `limit`).
in::snapshot wait_for(const temp_dir& dir, const std::string& address,
                      const std::function<bool(const in::snapshot&)>& done,
                      const std::string& what, std::chrono::seconds limit = 240s) {
  auto until = std::chrono::steady_clock::now() + limit;
  std::string last;
  while (std::chrono::steady_clock::now() < until) {
    auto [code, out] = console_run(dir, {address, "--secret", "s3cret", "--once", "--json"});
    last = out;
    if (code == 0) {
      auto s = in::snapshot_from_json(out);
      if (done(s))
        return s;
    }
    std::this_thread::sleep_for(500ms);
  }
  BOOST_FAIL("timed out waiting for " << what << "; last answer: " << last);
  return {};
}

/// Where a platform is: epochs and iterations, comparable.
uint64_t position(const in::platform_row& p) {
  return uint64_t{p.epoch} * 1000000 + p.iterations;
}

const in::platform_row& row(const in::snapshot& s, const std::string& name) {
  for (auto& p : s.platforms)
    if (p.name == name)
      return p;
  throw std::runtime_error("no platform " + name + " in the snapshot");
}

double num(const std::string& s) {
  return std::stod(s);
}

} // namespace

BOOST_AUTO_TEST_SUITE(console)

BOOST_AUTO_TEST_CASE(snapshots_pause_resume_and_refusals_on_a_real_cluster) {
  temp_dir dir;
  // Epochs enough that the run is still going when the steps below are done
  // on a busy machine (each console call then takes seconds).
  const uint32_t run_epochs = 24;
  auto f = two_nodes(dir, run_epochs);

  // Nothing listens there yet: a clear message and exit code 2.
  {
    auto [code, out] = console_run(dir, {f.a(), "--secret", "s3cret", "--once"});
    BOOST_TEST(code == 2);
    BOOST_TEST(out.find("no edgegossip node answers at " + f.a()) != std::string::npos, out);
  }
  {
    auto [code, out] = console_run(dir, {"localhost-without-port", "--once"});
    BOOST_TEST(code == 2);
    BOOST_TEST(out.find("is not HOST:PORT") != std::string::npos, out);
  }

  auto a = start_node(dir, f, "a");
  auto b = start_node(dir, f, "b");
  auto first = wait_for(
    dir, f.a(), [](auto& s) { return s.cluster.evaluated_epoch >= 0; }, "the first epoch");
  BOOST_TEST(first.cluster.id == "it-console");
  BOOST_TEST(first.cluster.state == "training");
  BOOST_TEST(first.cluster.epochs == run_epochs);
  BOOST_TEST(first.cluster.via == "a");
  BOOST_TEST(first.cluster.platforms_up == 2u);
  BOOST_REQUIRE_EQUAL(first.platforms.size(), 2u);
  BOOST_REQUIRE_EQUAL(first.nodes.size(), 2u);
  BOOST_TEST(first.nodes[1].port == f.port_b);
  BOOST_TEST(row(first, "pa").node == "a");
  BOOST_TEST(row(first, "pb").node == "b");
  std::vector<std::string> kinds;
  for (auto& e : first.events)
    kinds.push_back(e.kind);
  BOOST_TEST(std::count(kinds.begin(), kinds.end(), "join") == 2);
  BOOST_TEST(std::count(kinds.begin(), kinds.end(), "epoch") >= 1);

  // A wrong or missing secret is refused; the node goes on.
  for (auto args : {std::vector<std::string>{f.a(), "--secret", "wrong", "--once"},
                    std::vector<std::string>{f.b(), "--once", "--json"}}) {
    auto [code, out] = console_run(dir, args);
    BOOST_TEST(code == 2);
    BOOST_TEST(out.find("refused the cluster secret") != std::string::npos, out);
  }
  {
    // The secret from the cluster file, and the text form through node b.
    auto [code, out] = console_run(dir, {f.b(), "--config", f.config, "--once"});
    BOOST_TEST_REQUIRE(code == 0, out);
    BOOST_TEST(out.find("via node b") != std::string::npos, out);
    BOOST_TEST(out.find("PLATFORM") != std::string::npos, out);
    BOOST_TEST(out.find("pa ") != std::string::npos, out);
    BOOST_TEST(out.find("pb ") != std::string::npos, out);
  }

  // Pause: the iteration counts stop, at an epoch barrier too.
  auto paused_at = std::chrono::steady_clock::now();
  {
    auto [code, out] = console_run(dir, {f.b(), "--secret", "s3cret", "--command", "pause"});
    BOOST_TEST_REQUIRE(code == 0, out);
    BOOST_TEST(out.find("pause sent to 2 platforms") != std::string::npos, out);
  }
  std::this_thread::sleep_for(2s);
  auto p1 = snapshot_via(dir, f.a());
  std::this_thread::sleep_for(4s);
  auto p2 = snapshot_via(dir, f.b());
  BOOST_TEST(p2.cluster.state == "paused");
  BOOST_TEST(p2.cluster.via == "b");
  BOOST_TEST(p2.cluster.run == p1.cluster.run);
  for (auto name : {"pa", "pb"}) {
    BOOST_TEST_INFO("platform " << name);
    BOOST_TEST(row(p2, name).paused);
    BOOST_TEST(position(row(p2, name)) == position(row(p1, name)));
  }
  BOOST_TEST(p2.cluster.evaluated_epoch == p1.cluster.evaluated_epoch);
  BOOST_TEST(p2.cluster.elapsed_seconds > p1.cluster.elapsed_seconds + 3.0);
  // A long pause (several times the median epoch even on a loaded
  // machine), so that an epoch counting it would stand out.
  std::this_thread::sleep_for(5s);

  // Resume: they grow again.
  auto resumed_at = std::chrono::steady_clock::now();
  {
    auto [code, out] = console_run(dir, {f.a(), "--secret", "s3cret", "--command", "resume"});
    BOOST_TEST_REQUIRE(code == 0, out);
  }
  auto p3 = wait_for(
    dir, f.a(),
    [&](auto& s) {
      return position(row(s, "pa")) > position(row(p2, "pa"))
             && position(row(s, "pb")) > position(row(p2, "pb"));
    },
    "training to go on after resume", 60s);
  BOOST_TEST(p3.cluster.state == "training");
  BOOST_TEST(!row(p3, "pa").paused);

  // A checkpoint now, then a snapshot and a history taken mid-run, to be
  // checked against the files the run writes at its end.
  {
    auto [code, out] = console_run(dir, {f.a(), "--secret", "s3cret", "--command", "checkpoint"});
    BOOST_TEST_REQUIRE(code == 0, out);
    BOOST_TEST(out.find("checkpoint sent to 2 platforms") != std::string::npos, out);
  }
  const int64_t after = std::max<int64_t>(3, p3.cluster.evaluated_epoch + 1);
  auto mid = wait_for(
    dir, f.a(), [after](auto& s) { return s.cluster.evaluated_epoch >= after; },
    "an epoch evaluated after the checkpoint");
  auto [hcode, hjson] = console_run(dir, {f.b(), "--secret", "s3cret", "--command", "history pa",
                                      "--json"});
  BOOST_TEST_REQUIRE(hcode == 0, hjson);
  auto history = in::history_from_json(hjson);
  BOOST_TEST(history.epochs.size() >= 4u);

  for (auto& n : {&a, &b}) {
    auto code = (*n)->wait(400s);
    BOOST_TEST_INFO("node output:\n" << (*n)->output());
    BOOST_REQUIRE_EQUAL(code, 0);
  }
  auto run = only_run_dir(dir / "runs");
  BOOST_TEST(run.filename().string() == mid.cluster.run);
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE_EQUAL(cluster.size(), run_epochs);
  auto e = static_cast<size_t>(mid.cluster.evaluated_epoch);
  BOOST_TEST(std::abs(num(cluster[e]["averaged_accuracy"]) - mid.cluster.averaged_accuracy)
             < 1e-6);
  auto metrics = read_csv((run / "metrics.csv").string());
  for (auto name : {"pa", "pb"}) {
    BOOST_TEST_INFO("platform " << name);
    std::vector<std::map<std::string, std::string>> rows;
    for (auto& r : metrics)
      if (r["platform"] == name)
        rows.push_back(r);
    BOOST_REQUIRE_EQUAL(rows.size(), run_epochs);
    auto& p = row(mid, name);
    BOOST_REQUIRE(p.checkpoint_epochs >= 3);
    auto done = static_cast<size_t>(p.checkpoint_epochs);
    uint64_t sent = 0, received = 0, messages = 0, iterations = 0;
    for (size_t i = 0; i < done; ++i) {
      sent += std::stoull(rows[i]["bytes_sent"]);
      received += std::stoull(rows[i]["bytes_received"]);
      messages += std::stoull(rows[i]["messages_sent"]);
      iterations += std::stoull(rows[i]["iterations"]);
    }
    BOOST_TEST(p.bytes_out == sent);
    BOOST_TEST(p.bytes_in == received);
    BOOST_TEST(sent > 0u);
    BOOST_TEST(std::abs(p.exchange_rate - double(messages) / double(iterations)) < 1e-9);
    BOOST_TEST(std::abs(p.test_accuracy - num(rows[done - 1]["test_accuracy"])) < 1e-6);
  }
  // The history of pa is its rows of metrics.csv.
  std::vector<std::map<std::string, std::string>> pa;
  for (auto& r : metrics)
    if (r["platform"] == "pa")
      pa.push_back(r);
  for (auto& h : history.epochs) {
    auto& r = pa.at(h.epoch);
    BOOST_TEST_INFO("epoch " << h.epoch);
    BOOST_TEST(h.samples == std::stoull(r["samples"]));
    BOOST_TEST(h.iterations == std::stoull(r["iterations"]));
    BOOST_TEST(std::abs(h.train_loss - num(r["train_loss"])) < 1e-6);
    BOOST_TEST(std::abs(h.test_accuracy - num(r["test_accuracy"])) < 1e-6);
    BOOST_TEST(h.bytes_received == std::stoull(r["bytes_received"]));
  }
  // The topology adds up to what the receivers' files say they received.
  uint64_t into_pa = 0;
  for (auto& l : mid.topology)
    if (l.to == "pa") {
      BOOST_TEST(l.from == "pb");
      into_pa += l.bytes;
    }
  BOOST_TEST(into_pa == row(mid, "pa").bytes_in);
  // The pause shows in the nodes' logs, and counts in no epoch's wall time:
  // an epoch that counted it would last at least the pause more than the
  // shortest epoch (in a sanitized build an epoch itself lasts about as long
  // as the pause).
  BOOST_TEST(a->output().find("[pa] paused") != std::string::npos);
  BOOST_TEST(a->output().find("[pa] resumed") != std::string::npos);
  BOOST_TEST(b->output().find("[pb] paused") != std::string::npos);
  auto paused_for = std::chrono::duration<double>(resumed_at - paused_at).count();
  BOOST_TEST(paused_for > 11.0);
  for (auto name : {"pa", "pb"}) {
    std::vector<double> walls;
    for (auto& r : metrics)
      if (r["platform"] == name)
        walls.push_back(num(r["wall_seconds"]));
    auto sorted = walls;
    std::sort(sorted.begin(), sorted.end());
    BOOST_TEST_INFO("platform " << name << ", epochs " << sorted.front() << " to "
                                << sorted.back() << " s, paused " << paused_for << " s");
    BOOST_TEST(sorted.back() < sorted.front() + paused_for);
  }
  std::vector<double> epochs;
  for (auto& r : cluster)
    epochs.push_back(num(r["epoch_seconds"]));
  std::sort(epochs.begin(), epochs.end());
  BOOST_TEST(epochs.back() < epochs.front() + paused_for,
             "cluster epoch times: longest " << epochs.back() << " s, shortest "
                                             << epochs.front() << " s");
}

namespace {

/// A tmux server of its own, with one window running a command.
struct tmux_session {
  std::string server;
  explicit tmux_session(const std::string& command, const temp_dir& dir) {
    server = "eg-console-" + std::to_string(getpid());
    sh("tmux -L " + server + " -f /dev/null new-session -d -s console -x 160 -y 48 "
       + quote(command));
  }
  ~tmux_session() { sh("tmux -L " + server + " kill-server 2>/dev/null"); }

  static std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s)
      out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
    return out + "'";
  }
  static std::string sh(const std::string& cmd) {
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
      pclose(p);
    }
    return out;
  }
  /// Types a line, as a person would, and presses Enter.
  void type(const std::string& text) {
    sh("tmux -L " + server + " send-keys -t console -l " + quote(text));
    sh("tmux -L " + server + " send-keys -t console Enter");
  }
  std::string screen() { return sh("tmux -L " + server + " capture-pane -p -t console"); }
  /// Waits until the screen shows every one of `texts`; returns the screen.
  std::string wait_for(const std::vector<std::string>& texts, std::chrono::seconds limit = 60s) {
    auto until = std::chrono::steady_clock::now() + limit;
    std::string s;
    while (std::chrono::steady_clock::now() < until) {
      s = screen();
      bool all = true;
      for (auto& t : texts)
        all = all && s.find(t) != std::string::npos;
      if (all)
        return s;
      std::this_thread::sleep_for(250ms);
    }
    std::string wanted;
    for (auto& t : texts)
      wanted += "'" + t + "' ";
    BOOST_FAIL("the console never showed " << wanted << "; screen:\n" << s);
    return s;
  }
};

/// The line of the screen that starts with `name ` (a table row).
std::string line_of(const std::string& screen, const std::string& start) {
  std::istringstream in(screen);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(start, 0) == 0)
      return l;
  return {};
}

} // namespace

BOOST_AUTO_TEST_CASE(interactive_console_in_a_terminal) {
  BOOST_REQUIRE_MESSAGE(std::system("tmux -V > /dev/null 2>&1") == 0,
                        "tmux is needed (setup.sh installs it)");
  temp_dir dir;
  auto f = two_nodes(dir, 200);
  auto a = start_node(dir, f, "a");
  auto b = start_node(dir, f, "b");
  wait_for(dir, f.a(), [](auto& s) { return s.cluster.evaluated_epoch >= 0; }, "the first epoch");

  // Attached to node b (not the balancer's node).
  auto exit_file = dir / "console.exit";
  tmux_session t(std::string{EG_BINARY} + " console " + f.b()
                   + " --cluster it-console --secret s3cret; echo exit=$? > "
                   + exit_file + "; sleep 60",
                 dir);
  auto s = t.wait_for({"cluster it-console", "via node b", "PLATFORM", "state training"});
  BOOST_TEST(line_of(s, "pa ").find(" up ") != std::string::npos, s);
  BOOST_TEST(line_of(s, "pb ").find(" up ") != std::string::npos, s);
  BOOST_TEST(s.find("recent events") != std::string::npos);
  BOOST_TEST(s.find("console>") != std::string::npos);  // the prompt

  t.type("help");
  t.wait_for({"history NAME", "pause / resume"});
  t.type("nodes");
  s = t.wait_for({"ADDRESS", "127.0.0.1:" + std::to_string(f.port_a)});
  BOOST_TEST(line_of(s, "b ").find("(attached)") != std::string::npos, s);
  BOOST_TEST(line_of(s, "a ").find("yes") != std::string::npos, s);  // the balancer
  t.type("topology");
  t.wait_for({"FROM", "pb         -> pa"});
  t.type("history pb");
  s = t.wait_for({"history of platform pb", "TEST ACC"});
  BOOST_TEST(!line_of(s, "    1 ").empty(), s);  // epoch 1's row
  t.type("history nobody");
  t.wait_for({"no platform named 'nobody'"});
  t.type("frobnicate");
  t.wait_for({"unknown command 'frobnicate'"});

  t.type("pause");
  s = t.wait_for({"pause sent to 2 platforms", "state paused"});
  t.type("platforms");
  s = t.wait_for({"up,paused", "PLATFORM"});
  t.type("resume");
  t.wait_for({"resume sent to 2 platforms", "state training"});
  t.type("checkpoint");
  t.wait_for({"checkpoint sent to 2 platforms"});

  // The attached node dies: shown, and the console goes on through node a;
  // the balancer sees pb down.
  b->signal(SIGKILL);
  b->wait(10s);
  s = t.wait_for({"lost node b", "reconnected through node a", "via node a"});
  s = t.wait_for({"platforms 1 up, 1 down"});
  BOOST_TEST(line_of(s, "pb ").find("down") != std::string::npos, s);

  t.type("quit");
  // The shell creates the file before it writes the line: wait for the line.
  auto quit_at = std::chrono::steady_clock::now();
  std::string code;
  while (code.empty() && std::chrono::steady_clock::now() < quit_at + 20s) {
    std::this_thread::sleep_for(100ms);
    std::ifstream ef(exit_file);
    std::getline(ef, code);
  }
  BOOST_TEST(code == "exit=0", "the console did not leave within 20 s of quit; screen:\n"
                                 << t.screen());
  BOOST_TEST_MESSAGE("console left "
                     << std::chrono::duration<double>(std::chrono::steady_clock::now() - quit_at)
                          .count()
                     << " s after quit");
  // Training went on through all of it.
  BOOST_TEST(a->wait(1s) == -1);
  auto after = snapshot_via(dir, f.a());
  BOOST_TEST(after.cluster.state == "training");
  BOOST_TEST(row(after, "pa").state == "up");
}

BOOST_AUTO_TEST_SUITE_END()

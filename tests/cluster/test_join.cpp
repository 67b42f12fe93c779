// A node that is not in the cluster file joins a running cluster with
// `edgegossip node --join HOST:PORT --name NAME`, real node processes on
// 127.0.0.1: refused with the reason for a wrong secret, a name in use and
// a strategy whose members are fixed; let in with the cluster's secret, its
// platform trains from the next epoch, every node learns it; stopped with
// SIGTERM it leaves at once, and started again with the same command it
// comes back as itself and trains to the end of the run.
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <csignal>
#include <sstream>

using namespace eg::test;

namespace {

/// A cluster file of `nodes` (one platform each, balancer on the first) on
/// free local ports.
std::string cluster_file(const temp_dir& dir, const std::string& name,
                         const std::vector<std::string>& nodes, const std::string& strategy,
                         uint32_t epochs) {
  std::ostringstream toml;
  toml << "[cluster]\nid = \"joining\"\nseed = 5\nsecret = \"s3cret\"\n"
       << "[data]\ntrain_samples = 30000\ntest_samples = 2000\n"
       << "[train]\nmodel = \"logreg\"\nepochs = " << epochs << "\n"
       << "[strategy]\nname = \"" << strategy << "\"\n"
       << "[storage]\ndir = \"" << dir / (name + "-data") << "\"\n"
       << "[output]\ndir = \"" << dir / (name + "-runs") << "\"\n";
  for (auto& node : nodes)
    toml << "[[nodes]]\nname = \"" << node << "\"\nport = " << free_port()
         << "\n[[nodes.platforms]]\nname = \"" << node << "0\"\nslowdown = 40\n";
  auto path = dir / (name + ".toml");
  write_file(path, toml.str());
  return path;
}

std::unique_ptr<process> start_node(const temp_dir& dir, const std::string& config,
                                    const std::string& node, const std::string& log) {
  return std::make_unique<process>(
    std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", node}, dir / log);
}

/// `edgegossip node --join 127.0.0.1:PORT --name NAME --secret SECRET`,
/// as README gives it (no --cluster: the id, "joining", not the default, is
/// learnt from the node it dials), its store under dir/NAME-store.
std::vector<std::string> join_command(const temp_dir& dir, uint16_t port, const std::string& name,
                                      const std::string& secret) {
  return {EG_BINARY, "node",     "--join",  "127.0.0.1:" + std::to_string(port),
          "--name",  name,       "--secret", secret,
          "--set",  "storage.dir=\"" + dir / (name + "-store") + "\""};
}

bool has(const process& p, const std::string& text) {
  return p.output().find(text) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(join)

BOOST_AUTO_TEST_CASE(a_node_joins_a_running_cluster_leaves_on_sigterm_and_comes_back) {
  temp_dir dir;
  auto cfg = cluster_file(dir, "run", {"a", "b", "c"}, "gosgd", 10);
  std::map<std::string, std::unique_ptr<process>> nodes;
  for (auto n : {"a", "b", "c"})
    nodes[n] = start_node(dir, cfg, n, std::string("run-") + n + ".log");
  auto& a = *nodes["a"];
  const auto a_port = port_of(cfg, "a");
  const auto c_port = port_of(cfg, "c");
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("epoch 1/10:", std::chrono::seconds(120)), a.output());

  // Refused, with the reason, and nothing joins.
  auto [wrong, wrong_out] =
    run_binary({"node", "--join", "127.0.0.1:" + std::to_string(a_port), "--name", "x",
                "--secret", "guess", "--cluster", "joining", "--set", "storage.dir=\"" + dir / "x-store" + "\""},
               dir / "wrong.log", std::chrono::seconds(60));
  BOOST_TEST(wrong == 2, wrong_out);
  BOOST_TEST(wrong_out.find("secret") != std::string::npos, wrong_out);
  auto [taken, taken_out] =
    run_binary({"node", "--join", "127.0.0.1:" + std::to_string(c_port), "--name", "b",
                "--secret", "s3cret", "--cluster", "joining", "--set", "storage.dir=\"" + dir / "b2-store" + "\""},
               dir / "taken.log", std::chrono::seconds(60));
  BOOST_TEST(taken == 2, taken_out);
  BOOST_TEST(taken_out.find("node 'b' is a node of the cluster file") != std::string::npos,
             taken_out);

  // Let in through node c (not the balancer's): its platform trains.
  auto d = std::make_unique<process>(join_command(dir, c_port, "d", "s3cret"), dir / "d.log");
  BOOST_REQUIRE_MESSAGE(d->wait_for_output("[d0] epoch", std::chrono::seconds(120)),
                        d->output() << "\n--- a:\n" << a.output());
  BOOST_TEST(has(*d, "joined the cluster 'joining' through 127.0.0.1:"), d->output());
  BOOST_TEST(has(*d, "belongs to cluster 'joining'"), d->output());  // learnt, not given
  BOOST_TEST(has(a, "platform d0 joined from node d; training from epoch"), a.output());
  for (auto n : {"a", "b"})
    BOOST_TEST(has(*nodes[n], "node d joined the cluster"), nodes[n]->output());

  // SIGTERM: it leaves at once (its checkpoint saved), the balancer knows.
  d->signal(SIGTERM);
  BOOST_TEST(d->wait(std::chrono::seconds(30)) == 0, d->output());
  BOOST_TEST(has(*d, "stopping cleanly"), d->output());
  BOOST_TEST(!has(*d, "not a peer"), d->output());  // the others' lanes let it in
  BOOST_TEST_MESSAGE("--- d (first):\n" << d->output());
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("platform d0 on node d is down", std::chrono::seconds(10)),
                        a.output());

  // The same command again: back as itself, from its own store.
  d = std::make_unique<process>(join_command(dir, c_port, "d", "s3cret"), dir / "d2.log");
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("platform d0 is back from node d", std::chrono::seconds(90)),
                        a.output() << "\n--- d:\n" << d->output());
  BOOST_TEST(d->wait(std::chrono::seconds(240)) == 0, d->output());
  BOOST_TEST(has(*d, "resuming run"), d->output());  // from its own checkpoint
  for (auto& [name, p] : nodes) {
    auto code = p->wait(std::chrono::seconds(120));
    BOOST_TEST(code == 0, "node " << name << ":\n" << p->output());
  }
  auto run = only_run_dir(dir / "run-runs");
  auto rows = read_csv((run / "metrics.csv").string());
  int d_epochs = 0;
  for (auto& row : rows)
    d_epochs += row["platform"] == "d0";
  BOOST_TEST(d_epochs >= 2, "d0 reported " << d_epochs << " epochs");
  BOOST_TEST(read_csv((run / "cluster.csv").string()).size() == 10u);
}

BOOST_AUTO_TEST_CASE(a_run_whose_members_are_fixed_refuses_a_joining_node) {
  temp_dir dir;
  auto cfg = cluster_file(dir, "sgp", {"a", "b"}, "sgp", 30);
  auto a = start_node(dir, cfg, "a", "sgp-a.log");
  auto b = start_node(dir, cfg, "b", "sgp-b.log");
  BOOST_REQUIRE_MESSAGE(a->wait_for_output("epoch 1/30", std::chrono::seconds(120)), a->output());
  process d(join_command(dir, port_of(cfg, "a"), "d", "s3cret"), dir / "d.log");
  auto code = d.wait(std::chrono::seconds(60));
  auto out = d.output();
  BOOST_TEST(code == 2, out);
  BOOST_TEST(out.find("push-sum") != std::string::npos, out);
  BOOST_TEST(!has(*a, "node d joined"), a->output());
}

BOOST_AUTO_TEST_CASE(join_options_are_checked_before_anything_is_asked) {
  temp_dir dir;
  auto [no_name, no_name_out] =
    run_binary({"node", "--join", "127.0.0.1:1"}, dir / "a.log", std::chrono::seconds(30));
  BOOST_TEST(no_name == 2, no_name_out);
  BOOST_TEST(no_name_out.find("--name") != std::string::npos, no_name_out);
  auto [bad, bad_out] = run_binary({"node", "--join", "nowhere", "--name", "d"}, dir / "b.log",
                                   std::chrono::seconds(30));
  BOOST_TEST(bad == 2, bad_out);
  BOOST_TEST(bad_out.find("HOST:PORT") != std::string::npos, bad_out);
  auto [missing, missing_out] =
    run_binary({"node", "--join", "127.0.0.1:4000", "--name", "d", "--data", dir / "none"},
               dir / "c.log", std::chrono::seconds(30));
  BOOST_TEST(missing == 2, missing_out);
  BOOST_TEST(missing_out.find("no such directory") != std::string::npos, missing_out);
  auto [neither, neither_out] = run_binary({"node"}, dir / "d.log", std::chrono::seconds(30));
  BOOST_TEST(neither == 2, neither_out);
  BOOST_TEST(neither_out.find("--join") != std::string::npos, neither_out);
}

BOOST_AUTO_TEST_SUITE_END()

// Multi-process integration: real `edgegossip node` processes on 127.0.0.1.
#include "process.hpp"

#include <boost/test/unit_test.hpp>

#include <map>
#include <regex>
#include <set>

using namespace eg::test;

namespace {

/// A 3-node cluster file on free local ports, training LeNet-5 on a subset.
std::string three_node_config(const temp_dir& dir, uint32_t epochs, int max_iterations,
                              const std::string& transport = "lane",
                              const std::string& strategy =
                                "name = \"gosgd\"\nexchange_probability = 0.3") {
  std::ostringstream toml;
  toml << "[cluster]\nid = \"it-three\"\nseed = 3\nsecret = \"s3\"\ntransport = \""
       << transport << "\"\n"
       << "[data]\ntrain_samples = 12000\ntest_samples = 2000\n"
       << "[train]\nepochs = " << epochs << "\nmax_iterations = " << max_iterations << "\n"
       << "[strategy]\nschedule = \"sync\"\n" << strategy << "\n"
       << "[storage]\ndir = \"" << dir / "data" << "\"\n"
       << "[output]\ndir = \"" << dir / "runs" << "\"\n";
  for (auto name : {"a", "b", "c"})
    toml << "[[nodes]]\nname = \"" << name << "\"\nhost = \"127.0.0.1\"\nport = " << free_port()
         << "\n[[nodes.platforms]]\nname = \"p" << name << "\"\n";
  auto path = dir / "cluster.toml";
  write_file(path, toml.str());
  return path;
}

} // namespace

BOOST_AUTO_TEST_SUITE(cluster)

/// Runs nodes a, b and c of `config` to the end; checks that every node's
/// platform heard from both others over the run; returns their logs.
std::vector<std::string> run_three_nodes(const temp_dir& dir, const std::string& config) {
  std::vector<std::unique_ptr<process>> nodes;
  for (auto name : {"a", "b", "c"})
    nodes.push_back(std::make_unique<process>(
      std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", name},
      dir / (std::string(name) + ".log")));
  std::vector<std::string> logs;
  for (auto& n : nodes) {
    auto code = n->wait(std::chrono::seconds(400));
    BOOST_TEST_INFO("node output:\n" << n->output());
    BOOST_REQUIRE_EQUAL(code, 0);
    logs.push_back(n->output());
  }
  return logs;
}

/// Each node's platform heard from both other platforms over the run (its
/// metrics file); returns the messages they received in all.
uint64_t check_everyone_heard_everyone(const std::filesystem::path& run) {
  uint64_t all = 0;
  for (auto name : {"a", "b", "c"}) {
    auto rows = read_csv((run / (std::string(name) + "-metrics.csv")).string());
    BOOST_TEST_INFO("node " << name);
    BOOST_REQUIRE(!rows.empty());
    uint64_t received = 0;
    std::set<std::string> heard;
    for (auto& r : rows) {
      received += std::stoull(r["messages_received"]);
      std::stringstream ss(r["heard_from"]);
      for (std::string peer; std::getline(ss, peer, ';');)
        heard.insert(peer);
    }
    BOOST_TEST_INFO("node " << name);
    BOOST_TEST(received > 0u);
    std::set<std::string> others;
    for (auto o : {"a", "b", "c"})
      if (std::string(o) != name)
        others.insert(std::string("p") + o);
    BOOST_TEST((heard == others));
    all += received;
  }
  return all;
}

BOOST_AUTO_TEST_CASE(three_node_processes_train_and_gossip) {
  temp_dir dir;
  auto config = three_node_config(dir, 2, 0);
  auto logs = run_three_nodes(dir, config);
  auto run = only_run_dir(dir / "runs");
  // The balancer's node wrote the cluster files; every node its own metrics.
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE_EQUAL(cluster.size(), 2u);
  auto averaged = std::stod(cluster.back()["averaged_accuracy"]);
  BOOST_TEST(averaged > 0.6, "averaged model accuracy " << averaged << " is not well above chance");
  BOOST_TEST(std::filesystem::file_size(run / "model.pt") > 200000u);
  for (auto name : {"a", "b", "c"}) {
    auto rows = read_csv((run / (std::string(name) + "-metrics.csv")).string());
    BOOST_REQUIRE_EQUAL(rows.size(), 2u);
    BOOST_TEST(std::stod(rows.back()["test_accuracy"]) > 0.5);
    // The lane timed what it carried (what the predictor learns the link
    // from): its bytes each way, and busy seconds no longer than the epoch
    // and what came before it.
    uint64_t lane_sent = 0, lane_received = 0;
    for (auto& r : rows) {
      lane_sent += std::stoull(r["link_bytes_sent"]);
      lane_received += std::stoull(r["link_bytes_received"]);
      BOOST_TEST(std::stod(r["link_send_seconds"]) >= 0.0);
      BOOST_TEST(std::stod(r["link_receive_seconds"]) >= 0.0);
    }
    BOOST_TEST(lane_sent > 0u);
    BOOST_TEST(lane_received > 0u);
  }
  // Over the run each node's platform hears from both other platforms, on
  // the weights lanes (the default), whose handshakes took the secret.
  check_everyone_heard_everyone(run);
  for (auto& log : logs) {
    BOOST_TEST_INFO(log);
    BOOST_TEST(log.find("weights lane listening") != std::string::npos);
    BOOST_TEST(log.find("refused a connection") == std::string::npos);
    BOOST_TEST(log.find("through the middleman") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(gossip_goes_through_the_middleman_when_configured) {
  temp_dir dir;
  // Two epochs: training starts once every platform has joined the
  // balancer, which can be before the last pair of nodes has peered (b and c
  // once peered 0.75 s into a 0.9 s epoch); the second epoch is all peered,
  // and each platform sends about 9 messages to each other one in it.
  auto config = three_node_config(dir, 2, 0, "middleman");
  auto logs = run_three_nodes(dir, config);
  BOOST_TEST_CONTEXT("node a:\n" << logs[0] << "\nnode b:\n" << logs[1] << "\nnode c:\n" << logs[2]) {
    check_everyone_heard_everyone(only_run_dir(dir / "runs"));
  }
  for (auto& log : logs) {
    BOOST_TEST_INFO(log);
    BOOST_TEST(log.find("weights lane") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(push_sum_over_the_exponential_graph_keeps_the_weights_sum) {
  // SGP on three node processes: every platform sends after every step on
  // the weights lanes; at each barrier the balancer finds the push-sum
  // weights summing to 3 (what is still in flight aside) and averages by them.
  temp_dir dir;
  auto config = three_node_config(dir, 2, 60, "lane",
                                  "name = \"sgp\"\ntopology = \"exponential\"");
  auto logs = run_three_nodes(dir, config);
  auto run = only_run_dir(dir / "runs");
  check_everyone_heard_everyone(run);
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE_EQUAL(cluster.size(), 2u);
  BOOST_TEST(std::stod(cluster.back()["averaged_accuracy"]) > 0.5);
  const std::string said = "push-sum weights of the 3 live platforms sum to ";
  std::vector<double> sums;
  for (auto i = logs[0].find(said); i != std::string::npos; i = logs[0].find(said, i + 1))
    sums.push_back(std::stod(logs[0].substr(i + said.size(), 12)));
  BOOST_TEST_INFO(logs[0]);
  BOOST_REQUIRE_EQUAL(sums.size(), 2u);
  for (double w : sums) {
    BOOST_TEST(w <= 3.0 + 1e-6);
    BOOST_TEST(w > 2.0, "more than a third of the weight lost: " << w);
  }
  // Each platform sent after each of its 60 steps of an epoch.
  for (auto name : {"a", "b", "c"}) {
    auto rows = read_csv((run / (std::string(name) + "-metrics.csv")).string());
    BOOST_REQUIRE_EQUAL(rows.size(), 2u);
    for (auto& r : rows)
      BOOST_TEST(std::stoull(r["messages_sent"]) == 60u);
  }
}

BOOST_AUTO_TEST_CASE(a_parameter_server_on_another_node_trains_three_node_processes) {
  // BSP and ADSP with the server on node b: every platform commits to it
  // (a and c from other processes) in every epoch, and the averaged model
  // learns.
  for (std::string strategy : {"bsp", "adsp"}) {
    BOOST_TEST_CONTEXT("strategy " << strategy) {
      temp_dir dir;
      auto config = three_node_config(dir, 2, 100, "lane",
                                      "name = \"" + strategy
                                        + "\"\nserver = \"b\"\ncommit_steps = 20\n"
                                          "check_period = 2\nmin_interval = 0.5");
      auto logs = run_three_nodes(dir, config);
      BOOST_TEST(logs[1].find("[b] parameter server started for 3 workers") != std::string::npos,
                 logs[1]);
      BOOST_TEST(logs[0].find("parameter server started") == std::string::npos);
      // Every platform commits in both epochs: one whose node was still
      // peering with b at the start waits for the server before its first
      // step.
      const std::regex commits(
        "\\[p([abc])\\] epoch ([12]) done: .*, ([0-9]+) commits to the server");
      std::set<std::string> committed;
      for (auto& log : logs)
        for (std::sregex_iterator m(log.begin(), log.end(), commits), end; m != end; ++m)
          if (std::stoi((*m)[3]) >= 1)
            committed.insert((*m)[1].str() + (*m)[2].str());
      BOOST_TEST(committed.size() == 6u,
                 "logs:\n" << logs[0] << "\n" << logs[1] << "\n" << logs[2]);
      auto run = only_run_dir(dir / "runs");
      auto cluster = read_csv((run / "cluster.csv").string());
      BOOST_REQUIRE(!cluster.empty());
      BOOST_TEST(std::stod(cluster.back()["averaged_accuracy"]) > 0.5);
    }
  }
}

BOOST_AUTO_TEST_CASE(sparse_push_on_node_processes_sends_a_fraction_of_the_bytes) {
  // Sparse-Push at density 0.01 on three node processes over the weights
  // lanes: every platform sends after each step, a message weighs a small
  // fraction of the dense model (LeNet-5: 61,706 parameters, 246,824 bytes),
  // every byte sent is received (values, indices, weights and headers alike),
  // and the weights sum to 3 at the barriers (less what is in flight at one:
  // a message of the epoch's last steps still on its way).
  temp_dir dir;
  auto config = three_node_config(dir, 2, 60, "lane",
                                  "name = \"sparse-push\"\ntopology = \"exponential\"\n"
                                  "density = 0.01");
  auto logs = run_three_nodes(dir, config);
  auto run = only_run_dir(dir / "runs");
  check_everyone_heard_everyone(run);
  auto cluster = read_csv((run / "cluster.csv").string());
  BOOST_REQUIRE_EQUAL(cluster.size(), 2u);
  BOOST_TEST(std::stod(cluster.back()["averaged_accuracy"]) > 0.5);
  const std::string said = "push-sum weights of the 3 live platforms sum to ";
  size_t barriers = 0, exact = 0;
  for (auto i = logs[0].find(said); i != std::string::npos; i = logs[0].find(said, i + 1), ++barriers) {
    const double w = std::stod(logs[0].substr(i + said.size(), 12));
    BOOST_TEST(w <= 3.0 + 1e-6, logs[0]);
    exact += std::abs(w - 3.0) < 1e-6;
  }
  BOOST_TEST(barriers == 2u);
  BOOST_TEST(exact >= 1u, "no barrier with the weights summing to 3:\n" << logs[0]);
  std::map<std::string, uint64_t> sent, received;
  const char* parts[] = {"values", "indices", "weights", "headers"};
  for (auto name : {"a", "b", "c"}) {
    auto rows = read_csv((run / (std::string(name) + "-metrics.csv")).string());
    BOOST_REQUIRE_EQUAL(rows.size(), 2u);
    for (auto& r : rows) {
      const auto messages = std::stoull(r["messages_sent"]);
      BOOST_TEST(messages == 60u);
      const auto bytes = std::stoull(r["bytes_sent"]);
      BOOST_TEST(bytes < messages * 246824 / 50, "bytes sent " << bytes);
      // The unpacked parts less what packing saved: exactly the bytes sent.
      int64_t total = -std::stoll(r["sent_packing_saved"]);
      for (auto part : parts) {
        sent[part] += std::stoull(r[std::string("sent_") + part]);
        received[part] += std::stoull(r[std::string("received_") + part]);
        total += static_cast<int64_t>(std::stoull(r[std::string("sent_") + part]));
      }
      BOOST_TEST(total == static_cast<int64_t>(bytes));
      BOOST_TEST(std::stoull(r["sent_indices"]) > 0u);
      BOOST_TEST(std::stoull(r["sent_weights"]) == 8 * messages);
    }
  }
  // Counted alike at both ends (8 weight bytes a message): the same bytes of
  // each kind a message. A platform that finished its last epoch first
  // counts no more of what the others still send it.
  const double n_sent = sent["weights"] / 8.0, n_received = received["weights"] / 8.0;
  BOOST_TEST(n_received <= n_sent);
  BOOST_TEST(n_received >= 0.9 * n_sent);
  for (auto part : parts) {
    const double out = sent[part] / n_sent, in = received[part] / n_received;
    BOOST_TEST(std::abs(out - in) <= 0.05 * out,
               part << ": " << out << " bytes a message sent, " << in << " received");
  }
  for (auto& l : logs)
    BOOST_TEST(l.find("refused weights") == std::string::npos, l);
}

BOOST_AUTO_TEST_CASE(sigterm_stops_a_run_cleanly_and_soon) {
  temp_dir dir;
  process run({EG_BINARY, "run", "--epochs", "50", "--set", "data.train_samples=8000", "--set",
               "storage.dir=\"" + dir / "data" + "\"", "--output", dir / "runs"},
              dir / "run.log");
  // Wait until training runs, then ask it to stop.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (run.output().find("training run") == std::string::npos
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  BOOST_REQUIRE_MESSAGE(run.output().find("training run") != std::string::npos, run.output());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  run.signal(SIGTERM);
  auto code = run.wait(std::chrono::seconds(20));
  BOOST_TEST_INFO(run.output());
  BOOST_TEST(code == 0);
  BOOST_TEST(run.output().find("final checkpoints") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

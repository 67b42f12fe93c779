// A node's /metrics for Prometheus: the figures in the text format, served
// over HTTP, accepted by Debian's promtool; and a run of three node
// processes scraped by Debian's own Prometheus server, a figure read back
// through its HTTP API.
#include "process.hpp"

#include "actors/node/metrics.hpp"
#include "messages/codec.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <regex>
#include <sstream>
#include <thread>

using namespace eg::test;
using eg::actors::metrics_identity;
using eg::actors::metrics_sources;
using eg::actors::node_metrics;

namespace {

/// What `command` prints on stdout, and its exit code.
std::pair<int, std::string> capture(const std::string& command) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  if (!f)
    return {-1, out};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
    out.append(buf, n);
  const int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool have(const std::string& program) {
  return capture("command -v " + program + " > /dev/null 2>&1").first == 0;
}

/// The value of the sample `series` (its name and labels as the text
/// gives them) in the exposition `text`; NaN where it is absent.
double sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0)
      return std::stod(line.substr(series.size() + 1));
  return std::nan("");
}

eg::messages::epoch_report report(uint32_t epoch, double accuracy) {
  eg::messages::epoch_report r;
  r.platform = "p0";
  r.node = "a";
  r.epoch = epoch;
  r.ratio = 0.75;
  r.wall_seconds = 2.5;
  r.samples = 1000;
  r.planned_samples = 1000;
  r.predicted_seconds = 2;
  r.iterations = 16;
  r.train_loss = 0.5;
  r.test_accuracy = accuracy;
  r.messages_sent = 3;
  r.messages_received = 4;
  r.bytes_sent = 300;
  r.bytes_received = 400;
  r.rollbacks = 1;
  return r;
}

} // namespace

BOOST_AUTO_TEST_SUITE(metrics)

BOOST_AUTO_TEST_CASE(a_nodes_figures_are_served_in_prometheus_text_format) {
  metrics_sources src;
  src.cpu_limit_cores = [] { return 0.5; };
  src.store_bytes = [] { return uint64_t{12345}; };
  src.checkpoints = [] { return eg::actors::checkpoint_figures{3, 1, 0.25, 0.05}; };
  const auto port = free_port();
  node_metrics m("127.0.0.1", port, metrics_identity{"c1", "a", "0.1.0", "gosgd", "lenet5"}, src);
  BOOST_TEST(m.port() == port);
  m.peers(1, 2);
  m.report(report(1, 0.8));
  m.report(report(2, -1));  // not tested in epoch 2: the accuracy stays 0.8
  const auto text = m.text();
  BOOST_TEST_MESSAGE(text);
  const std::string p = "{platform=\"p0\"}";
  BOOST_TEST(sample(text, "edgegossip_epoch" + p) == 2);
  BOOST_TEST(sample(text, "edgegossip_samples_trained_total" + p) == 2000);
  BOOST_TEST(sample(text, "edgegossip_steps_trained_total" + p) == 32);
  BOOST_TEST(sample(text, "edgegossip_test_accuracy_ratio" + p) == 0.8);
  BOOST_TEST(sample(text, "edgegossip_plan_ratio" + p) == 0.75);
  BOOST_TEST(sample(text, "edgegossip_predicted_throughput_samples_per_second" + p) == 500);
  BOOST_TEST(sample(text, "edgegossip_gossip_sent_bytes_total" + p) == 600);
  BOOST_TEST(sample(text, "edgegossip_gossip_received_messages_total" + p) == 8);
  BOOST_TEST(sample(text, "edgegossip_platform_rollbacks_total" + p) == 2);
  BOOST_TEST(sample(text, "edgegossip_peers{state=\"up\"}") == 1);
  BOOST_TEST(sample(text, "edgegossip_peers{state=\"down\"}") == 2);
  BOOST_TEST(sample(text, "edgegossip_cpu_limit_cores") == 0.5);
  BOOST_TEST(sample(text, "edgegossip_store_size_bytes") == 12345);
  BOOST_TEST(sample(text, "edgegossip_checkpoint_failures_total") == 1);
  BOOST_TEST(text.find("edgegossip_node_info{cluster=\"c1\",model=\"lenet5\",node=\"a\","
                       "strategy=\"gosgd\",version=\"0.1.0\"} 1") != std::string::npos);
  BOOST_TEST(text.find("# TYPE edgegossip_samples_trained_total counter") != std::string::npos);

  // Over HTTP, as Prometheus scrapes it.
  if (!have("curl")) {
    BOOST_TEST_MESSAGE("no curl: the HTTP scrape is skipped");
    return;
  }
  auto [code, page] =
    capture("curl -sf http://127.0.0.1:" + std::to_string(m.port()) + "/metrics");
  BOOST_REQUIRE_EQUAL(code, 0);
  BOOST_TEST(sample(page, "edgegossip_samples_trained_total" + p) == 2000);
  if (!have("promtool")) {
    BOOST_TEST_MESSAGE("no promtool: the lint of the metrics is skipped");
    return;
  }
  temp_dir dir;
  write_file((dir.path / "page.txt").string(), page);
  auto [lint, problems] =
    capture("promtool check metrics < " + (dir.path / "page.txt").string() + " 2>&1");
  BOOST_TEST(lint == 0, problems);
  BOOST_TEST(problems.empty(), problems);
}

BOOST_AUTO_TEST_CASE(a_metrics_port_in_use_is_named) {
  const auto port = free_port();
  node_metrics first("127.0.0.1", port, metrics_identity{"c1", "a", "0.1.0", "gosgd", "lenet5"},
                     {});
  try {
    node_metrics second("127.0.0.1", port, metrics_identity{"c1", "b", "0.1.0", "gosgd", "lenet5"},
                        {});
    BOOST_FAIL("a second exposer listened on a port in use");
  } catch (const std::runtime_error& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) !=
               std::string::npos);
    BOOST_TEST(std::string(e.what()).find("metrics_port") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(prometheus_scrapes_every_node_of_a_run) {
  if (!have("prometheus") || !have("curl")) {
    BOOST_TEST_MESSAGE("no prometheus server or no curl: skipped");
    return;
  }
  temp_dir dir;
  std::ostringstream toml;
  toml << "[cluster]\nid = \"metrics-test\"\nseed = 2\nbalancer = \"a\"\n"
       << "[data]\ntrain_samples = 6000\ntest_samples = 1000\n"
       << "[train]\nepochs = 4\n"
       << "[strategy]\nname = \"gosgd\"\nschedule = \"sync\"\n"
       << "[storage]\ndir = \"" << (dir.path / "store").string() << "\"\n"
       << "[output]\ndir = \"" << (dir.path / "runs").string() << "\"\n";
  std::vector<uint16_t> metrics_ports;
  for (auto name : {"a", "b", "c"}) {
    metrics_ports.push_back(free_port());
    toml << "[[nodes]]\nname = \"" << name << "\"\nhost = \"127.0.0.1\"\nport = " << free_port()
         << "\nmetrics_port = " << metrics_ports.back() << "\n[[nodes.platforms]]\nname = \"p"
         << name << "\"\n";
  }
  const auto config = (dir.path / "cluster.toml").string();
  write_file(config, toml.str());
  // Prometheus scrapes the three nodes every half second.
  std::ostringstream scrape;
  scrape << "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
         << "scrape_configs:\n  - job_name: edgegossip\n    static_configs:\n      - targets: [";
  for (size_t i = 0; i < metrics_ports.size(); ++i)
    scrape << (i ? ", " : "") << "'127.0.0.1:" << metrics_ports[i] << "'";
  scrape << "]\n";
  write_file((dir.path / "prometheus.yml").string(), scrape.str());
  const auto web = free_port();
  process prom({"/usr/bin/prometheus", "--config.file=" + (dir.path / "prometheus.yml").string(),
                "--storage.tsdb.path=" + (dir.path / "tsdb").string(),
                "--web.listen-address=127.0.0.1:" + std::to_string(web)},
               (dir.path / "prometheus.log").string());
  BOOST_REQUIRE_MESSAGE(prom.wait_for_output("Server is ready to receive web requests",
                                             std::chrono::seconds(60)),
                        prom.output());
  // Prometheus builds its scrape pools a few seconds after it is ready (its
  // scrape manager reloads on a ticker); a run of a few seconds could end
  // before the first scrape. Start the nodes once all three targets exist.
  const std::string targets = "curl -sf http://127.0.0.1:" + std::to_string(web) +
                              "/api/v1/targets?state=active";
  bool scraping = false;
  for (int i = 0; i < 120 && !scraping; ++i) {
    auto [targets_code, listing] = capture(targets);
    size_t found = 0;
    for (auto port : metrics_ports)
      if (listing.find("127.0.0.1:" + std::to_string(port)) != std::string::npos)
        ++found;
    scraping = targets_code == 0 && found == metrics_ports.size();
    if (!scraping)
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  BOOST_REQUIRE_MESSAGE(scraping, "Prometheus never listed the three nodes as targets");
  std::vector<std::unique_ptr<process>> nodes;
  for (auto name : {"a", "b", "c"})
    nodes.push_back(std::make_unique<process>(
      std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", name},
      (dir.path / (std::string(name) + ".log")).string()));
  for (auto& n : nodes) {
    const auto code = n->wait(std::chrono::seconds(400));
    BOOST_TEST_INFO(n->output());
    BOOST_REQUIRE_EQUAL(code, 0);
  }
  BOOST_TEST(nodes[1]->output().find("metrics for Prometheus on http://127.0.0.1:" +
                                     std::to_string(metrics_ports[1]) + "/metrics") !=
             std::string::npos);
  // Read back through Prometheus' HTTP API: every node's platform trained,
  // and the newest figure Prometheus holds is at most what the node's own
  // metrics file says it trained.
  const std::string api = "http://127.0.0.1:" + std::to_string(web) + "/api/v1/query";
  auto [code, json] = capture("curl -sf " + api +
                              " --data-urlencode 'query=max_over_time("
                              "edgegossip_samples_trained_total[10m])'");
  BOOST_REQUIRE_EQUAL(code, 0);
  BOOST_TEST_MESSAGE(json);
  auto run = only_run_dir((dir.path / "runs").string());
  std::map<std::string, double> trained;
  for (auto& row : read_csv((run / "metrics.csv").string()))
    trained[row["platform"]] += std::stod(row["samples"]);
  for (auto name : {"pa", "pb", "pc"}) {
    BOOST_TEST_CONTEXT(name) {
      std::smatch m;
      const std::regex value(std::string("\"platform\":\"") + name +
                             "\"\\}?,\"value\":\\[[0-9.]+,\"([0-9.e+]+)\"\\]");
      std::regex_search(json, m, value);
      BOOST_REQUIRE_MESSAGE(m.size() == 2, json);
      const double scraped = std::stod(m[1].str());
      BOOST_TEST(scraped > 0);
      BOOST_TEST(scraped <= trained[name], scraped << " against " << trained[name]);
    }
  }
  auto [info_code, info] = capture("curl -sf " + api + " --data-urlencode "
                                   "'query=count(max_over_time(edgegossip_node_info[10m]))'");
  BOOST_REQUIRE_EQUAL(info_code, 0);
  BOOST_TEST(info.find("\"3\"") != std::string::npos, info);
  prom.signal(SIGTERM);
  prom.wait(std::chrono::seconds(30));
}

BOOST_AUTO_TEST_SUITE_END()

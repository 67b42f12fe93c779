// The network's faults with real `edgegossip node` processes on 127.0.0.1:
// a node frozen with SIGSTOP (its connections stay open), a replayed
// handshake, TLS with certificates of the cluster's CA and of another, a
// stranger's flood at a node's port and weights lane during training, frames
// of the wrong protocol on the weights lane, and
// three nodes behind a 20 Mbit/s link (a network namespace with tc, where
// the machine allows it).
#include "actors/interfaces.hpp"
#include "messages/codec.hpp"
#include "messages/door.hpp"
#include "messages/lane.hpp"
#include "messages/secret.hpp"
#include "process.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <netinet/in.h>
#include <random>
#include <regex>

using namespace eg::test;
using clock_type = std::chrono::steady_clock;

namespace {

struct cluster_spec {
  std::string name;
  uint32_t epochs = 4;
  std::string secret = "s3cret";
  std::string model = "logreg";
  double slowdown = 10;
  int64_t train_samples = 0;
  std::string extra_cluster;  ///< more [cluster] lines
  std::string tls_dir;        ///< certificates from scripts/make-test-ca.sh ("" = plain TCP)
};

/// A 3-node cluster file (one platform per node, balancer on a) on free
/// local ports.
std::string cluster_file(const temp_dir& dir, const cluster_spec& s) {
  std::ostringstream toml;
  toml << "[cluster]\nid = \"netfaults\"\nseed = 3\nbalancer = \"a\"\nsecret = \"" << s.secret
       << "\"\n"
       << s.extra_cluster << "\n";
  if (!s.tls_dir.empty())
    toml << "[cluster.tls]\ncertificate = \"" << s.tls_dir << "/{node}.pem\"\nkey = \""
         << s.tls_dir << "/{node}.key\"\nca = \"" << s.tls_dir << "/ca.pem\"\n";
  toml << "[data]\ntrain_samples = " << s.train_samples << "\n"
       << "[train]\nmodel = \"" << s.model << "\"\nepochs = " << s.epochs << "\n"
       << "[storage]\ndir = \"" << dir / (s.name + "-data") << "\"\n"
       << "[output]\ndir = \"" << dir / (s.name + "-runs") << "\"\n";
  for (auto node : {"a", "b", "c"})
    toml << "[[nodes]]\nname = \"" << node << "\"\nport = " << free_port()
         << "\n[[nodes.platforms]]\nname = \"" << node << "0\"\nslowdown = " << s.slowdown
         << "\n";
  auto path = dir / (s.name + ".toml");
  write_file(path, toml.str());
  return path;
}

using cluster = std::map<std::string, std::unique_ptr<process>>;

std::unique_ptr<process> start_node(const temp_dir& dir, const std::string& config,
                                    const std::string& node, const std::string& log,
                                    std::vector<std::string> prefix = {}) {
  prefix.insert(prefix.end(), {EG_BINARY, "node", "--config", config, "--node", node});
  return std::make_unique<process>(prefix, dir / log);
}

cluster start_cluster(const temp_dir& dir, const std::string& config, const std::string& name,
                      const std::vector<std::string>& prefix = {}) {
  cluster c;
  for (auto node : {"a", "b", "c"})
    c[node] = start_node(dir, config, node, name + "-" + node + ".log", prefix);
  return c;
}

void require_clean_exit(cluster& c, std::chrono::seconds limit = std::chrono::seconds(240)) {
  for (auto& [name, p] : c) {
    auto code = p->wait(limit);
    if (code != 0)  // the others' logs too: the cause is often on another node
      for (auto& [other, q] : c)
        if (other != name)
          BOOST_TEST_MESSAGE("node " << other << " output:\n" << q->output());
    BOOST_TEST_INFO("node " << name << " output:\n" << p->output());
    BOOST_REQUIRE_EQUAL(code, 0);
  }
}


/// The port of the node's weights lane, from its log.
uint16_t lane_port(const process& p) {
  std::smatch m;
  auto out = p.output();
  static const std::regex re("weights lane listening on [0-9.]+:([0-9]+)");
  return std::regex_search(out, m, re) ? static_cast<uint16_t>(std::stoi(m[1])) : 0;
}

/// Resident memory of a process in MB (0 when it is gone).
double resident_mb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stod(line.substr(6)) / 1024;
  return 0;
}


bool has(const process& p, const std::string& text) {
  return p.output().find(text) != std::string::npos;
}

/// Makes a test CA and certificates for `names` in `dir` with the project's
/// script; false (and a message) where the openssl program is missing.
bool make_certificates(const std::string& dir, const std::vector<std::string>& names) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    BOOST_TEST_MESSAGE("skipped: no openssl program to make test certificates");
    return false;
  }
  std::string cmd = std::string(EG_SOURCE_DIR) + "/scripts/make-test-ca.sh " + dir;
  for (auto& n : names)
    cmd += " " + n;
  cmd += " >/dev/null";
  BOOST_REQUIRE_EQUAL(std::system(cmd.c_str()), 0);
  return true;
}

/// Epoch seconds of a run's cluster.csv, in order.
std::vector<double> epoch_seconds(const std::filesystem::path& run) {
  std::vector<double> out;
  for (auto& row : read_csv((run / "cluster.csv").string()))
    out.push_back(std::stod(row["epoch_seconds"]));
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(network_faults)

BOOST_AUTO_TEST_CASE(a_frozen_node_is_released_from_the_barrier_and_rejoins) {
  temp_dir dir;
  // Defaults: heartbeats every second, a peer silent for 6 s is down.
  cluster_spec spec;
  spec.name = "frozen";
  // Long enough that the others are still training when b wakes 30 s
  // after it froze (two platforms train an epoch in 2-3 s here).
  spec.epochs = 25;
  spec.slowdown = 30;
  auto cfg = cluster_file(dir, spec);
  auto c = start_cluster(dir, cfg, "frozen");
  auto& a = *c["a"];
  auto& b = *c["b"];
  BOOST_REQUIRE_MESSAGE(b.wait_for_output("[b0] epoch 2 done", std::chrono::seconds(120)),
                        b.output());
  // Mid-epoch 3: b stops without closing anything.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  b.signal(SIGSTOP);
  auto frozen_at = clock_type::now();
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("platform b0 on node b is down", std::chrono::seconds(20)),
                        a.output());
  double released = std::chrono::duration<double>(clock_type::now() - frozen_at).count();
  BOOST_TEST_MESSAGE("frozen node declared down after " << released << " s");
  BOOST_TEST(released < 10.0);
  // The others go on without it: epoch 3 ends, and the next.
  const auto of_run = "/" + std::to_string(spec.epochs);
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("epoch 4" + of_run, std::chrono::seconds(60)),
                        a.output());
  // The balancer gave up on b0's model for the averaged one when b0 was
  // declared down, not after its request's timeout.
  BOOST_TEST(!has(a, "no weights from b0: system_error(request_timeout)"), a.output());
  // Frozen long enough that node a's redial of b hangs in a handshake the
  // frozen b cannot answer: b wakes up seeing no peer and reaches c first.
  std::this_thread::sleep_until(frozen_at + std::chrono::seconds(30));
  BOOST_REQUIRE_MESSAGE(!has(a, "epoch " + std::to_string(spec.epochs) + of_run),
                        "the run ended before b woke up; nothing left to rejoin:\n" << a.output());
  b.signal(SIGCONT);
  // It finds itself dropped and rejoins; its platform trains again.
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("platform b0 is back from node b", std::chrono::seconds(60)),
                        a.output() << "\n--- b:\n" << b.output());
  require_clean_exit(c);
  // b did not take itself for the balancer's successor (c still followed
  // a's balancer), which would have pulled c back to an older epoch.
  BOOST_TEST(!has(b, "starting one here"), b.output());
  BOOST_TEST(!has(*c["c"], "hosts the balancer too"), c["c"]->output());
  auto run = only_run_dir(dir / "frozen-runs");
  auto rows = read_csv((run / "b-metrics.csv").string());
  BOOST_REQUIRE(!rows.empty());
  BOOST_TEST(std::stoi(rows.back()["epoch"]) >= 6, b.output());
}

BOOST_AUTO_TEST_CASE(a_replayed_handshake_is_refused) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "replay";
  spec.epochs = 1;
  auto cfg = cluster_file(dir, spec);
  auto a = start_node(dir, cfg, "a", "a.log");
  BOOST_REQUIRE(a->wait_for_output("listening on", std::chrono::seconds(60)));
  caf::actor_system_config sys_cfg;
  sys_cfg.load<caf::io::middleman>();
  eg::actors::announce_types(sys_cfg);
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{sys_cfg};
  eg::actors::set_wire_identity(sys, {"netfaults", "b"});
  struct forget {
    caf::actor_system& sys;
    ~forget() { eg::actors::set_wire_identity(sys, {}); }
  } forget_identity{sys};
  // Through a's front door, as b (which knows the secret) comes in.
  eg::messages::door_options door;
  door.identity = {"netfaults", "b", "s3cret", {}};
  eg::messages::door_routes routes(door);
  auto node = sys.middleman().remote_actor<eg::actors::node_actor>(
    "127.0.0.1", routes.route("a", "127.0.0.1", port_of(cfg, "a")));
  BOOST_REQUIRE_MESSAGE(node, routes.last_failure("127.0.0.1", port_of(cfg, "a")));
  caf::scoped_actor self{sys};
  // Node b's hello, made as b makes it: answering a's challenge with the
  // secret. (This process stands in for b's node actor.)
  std::string challenge;
  self->request(*node, std::chrono::seconds(10), eg::actors::challenge_atom::value)
    .receive([&](std::string& c) { challenge = c; }, [&](caf::error&) {});
  BOOST_REQUIRE(!challenge.empty());
  eg::messages::hello h;
  h.node = "b";
  h.challenge = challenge;
  h.nonce = eg::messages::make_nonce();
  h.secret_digest = eg::messages::proof("s3cret", "hello", "netfaults", "b", h.challenge, h.nonce);
  h.components.push_back({eg::messages::role::node, "b", "b"});
  const auto recorded = h;
  auto stand_in = sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  auto ask = [&](const eg::messages::hello& hello, std::string& answer_nonce_proof) {
    bool accepted = false;
    self->request(*node, std::chrono::seconds(10), eg::actors::hello_atom::value, hello,
                  std::vector<caf::actor>{stand_in})
      .receive(
        [&](const eg::messages::hello& their, const std::vector<caf::actor>&) {
          accepted = true;
          answer_nonce_proof = their.challenge == h.nonce
                                   && their.secret_digest
                                        == eg::messages::proof("s3cret", "hello-answer",
                                                               "netfaults", "a", their.challenge,
                                                               their.nonce)
                                 ? "ok"
                                 : "bad proof";
        },
        [&](caf::error& err) { answer_nonce_proof = sys.render(err); });
    return accepted;
  };
  std::string first, second;
  BOOST_TEST(ask(recorded, first), first);
  BOOST_TEST(first == "ok");  // a proves the secret over our nonce too
  // The same bytes again, as someone who saw them on the wire would send
  // them: refused, the challenge is used up.
  BOOST_TEST(!ask(recorded, second));
  BOOST_TEST(second.find("replayed or stale") != std::string::npos, second);
  BOOST_TEST(has(*a, "a replayed or stale handshake"), a->output());
  self->send_exit(stand_in, caf::exit_reason::kill);
  a->signal(SIGTERM);
  a->wait(std::chrono::seconds(30));
}

BOOST_AUTO_TEST_CASE(a_tls_cluster_trains_and_refuses_a_node_of_another_ca) {
  temp_dir dir;
  if (!make_certificates(dir / "certs", {"a", "b", "c", "console"})
      || !make_certificates(dir / "other", {"c"}))
    return;
  cluster_spec spec;
  spec.name = "tls";
  // Long enough that the console, started after epoch 1, finds the nodes up
  // on a busy machine.
  spec.epochs = 5;
  spec.tls_dir = dir / "certs";
  auto cfg = cluster_file(dir, spec);
  // c's file names a certificate of another CA: a and b must not let it in.
  auto text = std::string{};
  {
    std::ifstream in(cfg);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::string other = text;
  for (const std::string from = dir / "certs/{node}"; other.find(from) != std::string::npos;)
    other.replace(other.find(from), from.size(), dir / "other/{node}");
  auto other_cfg = dir / "tls-other.toml";
  write_file(other_cfg, other);
  cluster c;
  c["a"] = start_node(dir, cfg, "a", "tls-a.log");
  c["b"] = start_node(dir, cfg, "b", "tls-b.log");
  auto stranger = start_node(dir, other_cfg, "c", "tls-c-other.log");
  BOOST_REQUIRE(c["a"]->wait_for_output("(TLS)", std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::seconds(8));
  BOOST_TEST(!has(*c["a"], "peered with node c"), c["a"]->output());
  BOOST_TEST(!has(*c["b"], "peered with node c"), c["b"]->output());
  BOOST_TEST(!has(*stranger, "peered with node"), stranger->output());
  stranger->signal(SIGKILL);
  stranger->wait(std::chrono::seconds(10));
  // The real c joins, the run completes; the console attaches over TLS.
  c["c"] = start_node(dir, cfg, "c", "tls-c.log");
  BOOST_REQUIRE(c["a"]->wait_for_output("epoch 1/5", std::chrono::seconds(120)));
  auto [code, out] = run_binary({"console", "127.0.0.1:" + std::to_string(port_of(cfg, "a")),
                                 "--config", cfg, "--once", "--json"},
                                dir / "console.log", std::chrono::seconds(60));
  BOOST_TEST(code == 0, out);
  BOOST_TEST(out.find("\"platforms\"") != std::string::npos, out);
  require_clean_exit(c);
  BOOST_TEST(read_csv((only_run_dir(dir / "tls-runs") / "cluster.csv").string()).size() == 5u);
}

/// A peer that holds the cluster's secret sends frames of the wrong protocol
/// on the weights lane: a parameter server's commit and a stage batch, both
/// for a gossip platform. The lane's door tells messages apart by their
/// body, refuses each with the reason, and the run goes on.
BOOST_AUTO_TEST_CASE(frames_of_the_wrong_protocol_are_refused_at_the_lane_door) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "astray";
  spec.epochs = 4;
  auto cfg = cluster_file(dir, spec);
  auto c = start_cluster(dir, cfg, "astray");
  auto& a = *c["a"];
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("epoch 2/4", std::chrono::seconds(120)), a.output());
  const uint16_t port = lane_port(a);
  BOOST_REQUIRE(port != 0);
  eg::messages::lane_options o;
  o.cluster_id = "netfaults";
  o.node = "b";  // a name of the cluster, with its secret
  o.secret = spec.secret;
  eg::messages::lane peer(o);
  peer.start([](const std::string&, const std::string&, eg::messages::shared_buffer) {});
  std::vector<float> values(16, 0.5f);
  const eg::messages::tensor_view t{"t", eg::messages::dtype::float32, {16}, values.data(),
                                    values.size() * sizeof(float)};
  auto frame = [&](eg::messages::body b, const std::string& sender) {
    eg::messages::envelope e{{"netfaults", eg::messages::protocol_version, sender}, std::move(b),
                             nullptr};
    return std::make_shared<const eg::messages::gathered>(
      eg::messages::encode_gathered(e, nullptr));
  };
  const eg::messages::lane_endpoint to{"a", "127.0.0.1", port};
  BOOST_TEST(peer.send(to, "a0", frame(eg::messages::commit{1, {t}}, "b0")));
  BOOST_TEST(peer.send(
    to, "a0",
    frame(eg::messages::stage_batch{eg::messages::stage_direction::forward, 3, {t}}, "b0")));
  BOOST_TEST(a.wait_for_output("a message for platform 'a0' that is not gossip weights",
                               std::chrono::seconds(20)),
             a.output());
  require_clean_exit(c);
  // Both were refused, each with its own line; none reached the platform.
  const auto out = a.output();
  size_t refused = 0;
  for (auto at = out.find("that is not gossip weights"); at != std::string::npos;
       at = out.find("that is not gossip weights", at + 1))
    ++refused;
  BOOST_TEST(refused == 2u, out);
  BOOST_TEST(!has(a, "[a0] refused weights"), out);
  BOOST_TEST(read_csv((only_run_dir(dir / "astray-runs") / "cluster.csv").string()).size() == 4u);
}

/// A stranger's flood at node a's port and weights lane, over TLS or with
/// the default settings (plain TCP, no secret).
void flood(bool tls) {
  temp_dir dir;
  cluster_spec spec;
  spec.name = "flood";
  spec.epochs = 12;
  spec.slowdown = 20;
  if (tls) {
    if (!make_certificates(dir / "certs", {"a", "b", "c"}))
      return;
    spec.tls_dir = dir / "certs";
  } else {
    spec.secret.clear();
  }
  auto cfg = cluster_file(dir, spec);
  auto c = start_cluster(dir, cfg, "flood");
  auto& a = *c["a"];
  BOOST_REQUIRE_MESSAGE(a.wait_for_output("epoch 3/12", std::chrono::seconds(120)), a.output());
  const double before = resident_mb(a.pid);
  const uint16_t ports[] = {port_of(cfg, "a"), lane_port(a)};
  BOOST_REQUIRE(ports[1] != 0);
  // About 1,000 connections over ~12 s: random bytes, headers announcing
  // huge payloads (CAF's BASP header at the node port, the lane's hello at
  // the lane), truncated frames.
  std::mt19937 rng(11);
  double peak = before;
  auto flood_start = clock_type::now();
  int connections = 0;
  for (; connections < 1000; ++connections) {
    int fd = connect_to(ports[connections % 2]);
    if (fd < 0)
      continue;
    for (int f = 0; f < 4; ++f) {
      std::vector<unsigned char> frame(rng() % 2048 + 32);
      for (auto& x : frame)
        x = static_cast<unsigned char>(rng());
      if (f % 2 == 0 && connections % 2 == 1)
        for (size_t i = 0; i < 16; ++i)
          frame[i] = i < 4 ? "EGLH"[i] : 0xff;  // a lane magic, then huge lengths
      else if (f % 2 == 0)
        for (size_t i = 0; i < 32; ++i)  // a BASP header announcing 4 GB
          frame[i] = i == 0 ? 1 : i >= 4 && i < 8 ? 0xff : 0;
      if (send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) < 0)
        break;
    }
    if (connections % 3 != 0)  // some stay open a while, silent
      close(fd);
    else
      std::thread([fd] {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        close(fd);
      }).detach();
    if (connections % 50 == 0)
      peak = std::max(peak, resident_mb(a.pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(12));
  }
  double flood_seconds = std::chrono::duration<double>(clock_type::now() - flood_start).count();
  peak = std::max(peak, resident_mb(a.pid));
  BOOST_REQUIRE_MESSAGE(a.running(), a.output());
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const double after = resident_mb(a.pid);
  BOOST_TEST_MESSAGE("flood of " << connections << " connections in " << flood_seconds
                                 << " s: node a resident " << before << " MB before, peak "
                                 << peak << " MB, " << after << " MB after");
  // Bounded by design: far from the gigabytes an unchecked length makes.
  BOOST_TEST(peak - before < 128.0);
  BOOST_TEST(after - before < 64.0);
  require_clean_exit(c);
  auto secs = epoch_seconds(only_run_dir(dir / "flood-runs"));
  BOOST_REQUIRE_EQUAL(secs.size(), 12u);
  double early = (secs[1] + secs[2]) / 2, late = (secs[10] + secs[11]) / 2;
  BOOST_TEST_MESSAGE("epoch seconds before the flood " << early << ", at the end " << late);
  BOOST_TEST(late < 2 * early);
  BOOST_TEST(has(a, "connections refused"), a.output());
  BOOST_TEST(has(a, "node port: refused a connection"), a.output());
  // No peer was declared down (platforms' "peer ... is down" at the run's
  // end, as nodes exit, is not that).
  for (auto& [name, p] : c)
    for (auto peer : {"a", "b", "c"})
      BOOST_TEST(!has(*p, std::string("node ") + peer + " is down"), name << ": " << p->output());
}

BOOST_AUTO_TEST_CASE(a_strangers_flood_leaves_memory_and_epochs_as_they_were) {
  flood(true);
}

BOOST_AUTO_TEST_CASE(a_strangers_flood_on_default_settings_leaves_memory_and_epochs_as_they_were) {
  flood(false);
}

BOOST_AUTO_TEST_CASE(a_slow_link_is_not_a_dead_node) {
  temp_dir dir;
  const std::string ns = "egslow" + std::to_string(getpid());
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  if (sh("ip netns add " + ns) != 0) {
    BOOST_TEST_MESSAGE("skipped: cannot make a network namespace here (needs root and "
                       "iproute2)");
    return;
  }
  struct cleanup {
    std::string ns;
    ~cleanup() { std::system(("ip netns del " + ns + " >/dev/null 2>&1").c_str()); }
  } remove_ns{ns};
  // An edge uplink: 1500-byte packets (loopback's are 64 KB, more than the
  // bucket holds) through a 20 Mbit/s token bucket.
  if (sh("ip -n " + ns + " link set lo mtu 1500 up") != 0
      || sh("tc -n " + ns + " qdisc add dev lo root tbf rate 20mbit burst 32kbit latency 400ms")
           != 0) {
    BOOST_TEST_MESSAGE("skipped: cannot shape the namespace's loopback with tc here");
    return;
  }
  cluster_spec spec;
  spec.name = "slow";
  spec.epochs = 4;
  spec.model = "lenet5";
  spec.slowdown = 1;
  spec.train_samples = 12000;
  spec.extra_cluster = "";
  auto cfg = cluster_file(dir, spec);
  auto c = start_cluster(dir, cfg, "slow", {"/usr/bin/env", "ip", "netns", "exec", ns});
  require_clean_exit(c, std::chrono::seconds(400));
  for (auto& [name, p] : c) {
    // During the run (a node that ends before its peers is gone, not down).
    static const std::regex declared_down("\\] node [abc] is down|platform [abc]0 on node [abc] is down");
    BOOST_TEST(!std::regex_search(p->output(), declared_down),
               "node " << name << ":\n" << p->output());
    BOOST_TEST(has(*p, "weights lane:"), p->output());
  }
  BOOST_TEST(read_csv((only_run_dir(dir / "slow-runs") / "cluster.csv").string()).size() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()

// links: eg_actors
// Nodes peering, refusing a stranger, losing a peer and passing the balancer
// on, with two or three real node actors (actors/node/node.hpp) in this process:
// each in an actor system of its own, on CAF's deterministic scheduler, its
// middleman on CAF's test multiplexer instead of sockets (node_testing.hpp).
// What a node knows is read as a console reads it: a snapshot asked with
// inspect_atom (answered by the balancer, wherever the node's directory says
// it is, or by the node alone when it knows of none), and the nodes' log.
#include "actors/balancer/balancer.hpp"
#include "actors/balancer/inspection.hpp"
#include "actors/interfaces.hpp"
#include "actors/node/node.hpp"
#include "actors/platform/platform.hpp"
#include "actors/store.hpp"
#include "config/config.hpp"
#include "models/dataset.hpp"
#include "storage/store.hpp"
#include "node_testing.hpp"
#include "process.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace eg;
using namespace eg::actors;
namespace in = eg::inspection;
using namespace std::chrono_literals;

namespace {

/// One node's process: its actor system, its store, the node actor.
struct running_node {
  std::unique_ptr<test::simulated_process> process;
  store_actor store;
  node_actor node;
};

/// A node of the cluster file: its name and its platforms.
struct node_spec {
  std::string name;
  std::vector<std::string> platforms;
};

/// Ports of the cluster file: node i listens on 4101 + i.
constexpr uint16_t first_port = 4101;

/// 20 random images: a platform's data and the balancer's test set.
std::shared_ptr<learning::dataset> tiny_set() {
  return std::make_shared<learning::dataset>(test::random_images(20));
}

struct fixture {
  test::temp_dir dir;
  test::simulated_network net;
  std::map<std::string, running_node> nodes;
  std::shared_ptr<learning::dataset> data = tiny_set();
  test::captured_log log;
  int starts = 0;

  ~fixture() {
    while (!nodes.empty())
      end(nodes.begin()->first);
  }

  /// Ends node `name`'s process: every actor of it ends before its actor
  /// system does (the platforms, mixers, predictors and balancer are linked
  /// to the node), the process running alone. The store runs on a thread of
  /// its own, which the system's shutdown waits for, and which ends once the
  /// store is destroyed: the store's last words (a down message to the BASP
  /// broker, which monitors it for the peers that hold its handle, and holds
  /// the store as its sender) are delivered first.
  void end(const std::string& name) {
    auto& n = nodes.at(name);
    auto& p = *n.process;
    net.remove(p);
    caf::actor_addr store = n.store.address();
    caf::anon_send_exit(n.node, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(n.store, caf::exit_reason::user_shutdown);
    n.node = node_actor{};
    n.store = store_actor{};
    auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      while (p.step())
        ;
      p.sched.clock().cancel_all();  // the timers of actors that are gone
      if (!caf::actor_cast<caf::strong_actor_ptr>(store))
        break;
      if (std::chrono::steady_clock::now() > deadline) {
        BOOST_ERROR("the store of node " << name << " is never released");
        n.process.release();  // its system would wait for it forever
        nodes.erase(name);
        return;
      }
      std::this_thread::sleep_for(1ms);
    }
    nodes.erase(name);
  }

  /// The cluster file: the nodes in this order on 127.0.0.1, the balancer
  /// on `balancer`, a secret, gossip through the middleman (the weights
  /// lane would open real sockets), no heartbeats unless a test turns them
  /// on; logistic regression, one epoch (nothing trains here: every cluster
  /// has a platform whose node never starts, so the run waits for it).
  config::cluster_config cluster(const std::string& id, const std::vector<node_spec>& specs,
                                 const std::string& balancer) {
    auto cfg = config::default_config();
    cfg.id = id;
    cfg.secret = "s3cret";
    cfg.balancer_node = balancer;
    cfg.transport = config::transport::middleman;
    cfg.heartbeat_interval = 0;
    cfg.storage_dir = dir / "data";
    cfg.output_dir = dir / "runs";
    cfg.train.model = "logreg";
    cfg.train.epochs = 1;
    cfg.nodes.clear();
    size_t platforms = 0;
    for (auto& s : specs)
      platforms += s.platforms.size();
    for (size_t i = 0; i < specs.size(); ++i) {
      config::node_config n;
      n.name = specs[i].name;
      n.host = "127.0.0.1";
      n.port = static_cast<uint16_t>(first_port + i);
      for (auto& p : specs[i].platforms)
        n.platforms.push_back({p, 1, 1.0 / static_cast<double>(platforms), 1, {}});
      cfg.nodes.push_back(n);
    }
    return cfg;
  }

  /// Starts node `name` of `cfg` in a process of its own, as run_node
  /// does: its store, its platforms (on the tiny data set), the node, which
  /// starts the balancer if `start_balancer`, published on its port.
  running_node& start(const config::cluster_config& cfg, const std::string& name,
                      bool start_balancer) {
    auto& n = nodes[name];
    n.process = std::make_unique<test::simulated_process>(cfg, name);
    auto& sys = n.process->sys;
    net.add(*n.process);
    const auto& me = cfg.node(name);
    auto all = cfg.platforms();
    std::shared_ptr<storage::store> db =
      storage::store::open(dir / ("data/" + name + "-" + std::to_string(++starts)));
    store_options so;
    so.cluster_id = cfg.id;
    for (auto& p : me.platforms)
      so.platforms.push_back(p.name);
    n.store = spawn_store(sys, db, std::move(so));
    node_args args;
    args.settings = node_settings::of(cfg);
    args.settings.probe_before_dial = false;  // no real port answers on the test multiplexer
    args.name = name;
    args.store = n.store;
    std::vector<int64_t> shard;
    for (int64_t i = 0; i < data->size(); ++i)
      shard.push_back(i);
    auto all_shards = std::make_shared<std::map<std::string, std::vector<int64_t>>>();
    std::map<std::string, uint64_t> sizes;
    for (auto& p : all) {
      (*all_shards)[p.name] = shard;
      sizes[p.name] = shard.size();
    }
    for (auto& p : me.platforms) {
      auto pa = platform_args::of(cfg, p, name);
      pa.train_set = data;
      pa.test_set = data;
      pa.shard = shard;
      pa.all_shards = all_shards;
      pa.store = n.store;
      args.platforms.push_back(std::move(pa));
    }
    args.balancer = balancer_args{balancer_settings::of(cfg, sizes), data->describe(), {},
                                  false, config::run_fingerprint(cfg), std::nullopt};
    args.tester = tester_args{cfg.train.model, cfg.seed, learning::shape_of(*data), data,
                              static_cast<uint64_t>(data->size())};
    args.start_balancer = start_balancer;
    args.load_run_state = [db] { return storage::load_run_state(*db); };
    n.node = spawn_node(sys, std::move(args));
    net.listen(*n.process, me.port);
    BOOST_REQUIRE_EQUAL(n.process->publish(n.node, me.host, me.port), me.port);
    return n;
  }

  /// The next dial of node `from` to node `to` (its host and port in the
  /// cluster file) gets through.
  void wire(const config::cluster_config& cfg, const std::string& from, const std::string& to) {
    const auto& target = cfg.node(to);
    net.prepare_connection(*nodes.at(to).process, *nodes.at(from).process, target.host,
                           target.port);
  }

  /// The node's process dies: its connections fail at both ends, and it
  /// does nothing more.
  void crash(const std::string& name) {
    auto& n = nodes.at(name);
    net.cut(*n.process);
    net.remove(*n.process);
  }

  /// Asks `to` from a scoped actor of `n`'s process, runs the network, and
  /// returns the answer (fails when there is none, instead of blocking).
  template <class T, class Handle, class... Ts>
  T ask(running_node& n, const Handle& to, Ts&&... xs) {
    caf::scoped_actor self{n.process->sys};
    auto rh = self->request(to, caf::infinite, std::forward<Ts>(xs)...);
    net.run();
    if (self->mailbox().size() == 0)
      throw std::runtime_error("no answer from node " + n.process->name);
    T out{};
    std::string failure;
    rh.receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { failure = n.process->sys.render(err); });
    if (!failure.empty())
      throw std::runtime_error("node " + n.process->name + " answered " + failure);
    return out;
  }

  /// The console's snapshot, asked of node `name` with `secret`.
  in::snapshot snapshot_via(const std::string& name, const std::string& secret = "s3cret") {
    auto& n = nodes.at(name);
    auto challenge = ask<std::string>(n, n.node, challenge_atom::value);
    auto json = ask<std::string>(n, n.node, inspect_atom::value,
                                 in::console_credentials(secret, challenge),
                                 std::string{"snapshot"});
    return in::snapshot_from_json(json);
  }
};

const in::platform_row& platform(const in::snapshot& s, const std::string& name) {
  for (auto& p : s.platforms)
    if (p.name == name)
      return p;
  throw std::runtime_error("no platform " + name + " in the snapshot");
}

const in::node_row& node(const in::snapshot& s, const std::string& name) {
  for (auto& n : s.nodes)
    if (n.name == name)
      return n;
  throw std::runtime_error("no node " + name + " in the snapshot");
}

} // namespace

BOOST_AUTO_TEST_SUITE(nodes)

// a hosts the balancer, b has platform pb, c (platform pc) never starts:
// the run waits for pc, so nothing trains.
BOOST_FIXTURE_TEST_CASE(two_nodes_peer_and_each_directory_gets_the_others_components, fixture) {
  auto cfg = cluster("peer", {{"a", {}}, {"b", {"pb"}}, {"c", {"pc"}}}, "a");
  start(cfg, "a", true);
  start(cfg, "b", false);
  net.run();
  // a dials b (the earlier node in the file dials the later one): nothing
  // answers at b's address yet.
  BOOST_TEST(log.has("[a] node b not reachable yet"));
  auto alone = snapshot_via("b");
  BOOST_TEST(!alone.cluster.balancer_reachable);  // b's own view: it knows no balancer
  BOOST_TEST(alone.cluster.via == "b");
  BOOST_TEST(node(alone, "a").state == "down");
  BOOST_TEST(node(alone, "b").state == "up");
  auto at_a = snapshot_via("a");
  BOOST_TEST(at_a.cluster.balancer_reachable);
  BOOST_TEST(platform(at_a, "pb").state == "waiting");  // not announced to the balancer

  // b's address answers; a dials again a second later and the handshake
  // runs over CAF's BASP between the two actor systems.
  wire(cfg, "a", "b");
  net.advance(1s);
  BOOST_TEST(log.has("[a] peered with node b"));
  BOOST_TEST(log.has("[b] peered with node a"));
  BOOST_TEST(!log.has("refused"));
  // b's directory holds a's balancer: b forwards the console to it.
  auto via_b = snapshot_via("b");
  BOOST_TEST(via_b.cluster.balancer_reachable);
  BOOST_TEST(via_b.cluster.via == "b");
  BOOST_TEST(via_b.cluster.state == "waiting");
  // a's directory holds b's platform and predictor: its balancer got pb's join.
  BOOST_TEST(platform(via_b, "pb").state == "up");
  BOOST_TEST(platform(via_b, "pb").node == "b");
  BOOST_TEST(platform(via_b, "pc").state == "waiting");
  BOOST_TEST(via_b.cluster.platforms_up == 1u);
  BOOST_TEST(node(via_b, "b").state == "up");
  auto via_a = snapshot_via("a");
  BOOST_TEST(via_a.cluster.via == "a");
  BOOST_TEST(platform(via_a, "pb").state == "up");
  // A console without the secret is refused at the door.
  std::string refusal;
  try {
    snapshot_via("b", "wrong");
  } catch (const std::runtime_error& e) {
    refusal = e.what();
  }
  BOOST_TEST(refusal.find(in::refused_text) != std::string::npos, refusal);
}

// The stranger a (a wrong secret) dials b, which hosts the balancer: b
// refuses its hello, so b's directory never gets a's platform; c, with the
// secret, is taken in by b at the same time.
BOOST_FIXTURE_TEST_CASE(a_node_with_a_wrong_secret_is_refused_by_the_node_it_dials, fixture) {
  auto cfg = cluster("stranger", {{"a", {"pa"}}, {"b", {}}, {"c", {"pc"}}}, "b");
  auto wrong = cfg;
  wrong.secret = "guessed";
  start(wrong, "a", false);
  start(cfg, "b", true);
  start(cfg, "c", false);
  wire(cfg, "a", "b");
  wire(cfg, "b", "c");
  net.run();
  BOOST_TEST(log.has("[b] refused a handshake: node 'a' presented a wrong cluster secret"));
  BOOST_TEST(log.has("[a] node b refused the handshake: "));
  BOOST_TEST(!log.has("peered with node a"));
  BOOST_TEST(!log.has("[a] peered with"));
  BOOST_TEST(log.has("[b] peered with node c"));
  auto via_b = snapshot_via("b");
  BOOST_TEST(via_b.cluster.balancer_reachable);
  BOOST_TEST(platform(via_b, "pa").state == "waiting");  // never announced
  BOOST_TEST(platform(via_b, "pc").state == "up");
  BOOST_TEST(via_b.cluster.platforms_up == 1u);
  // Nor did a take b's components: it knows no balancer.
  auto via_a = snapshot_via("a", "guessed");
  BOOST_TEST(!via_a.cluster.balancer_reachable);
  BOOST_TEST(node(via_a, "b").state == "down");
  // a tries again a second later (over the connection CAF keeps): refused again.
  net.advance(1s);
  BOOST_TEST(log.count("[b] refused a handshake") == 2u);
  BOOST_TEST(platform(snapshot_via("b"), "pa").state == "waiting");
}

// The node a dials, b, has no secret: it takes a's hello without a proof,
// but its answer proves nothing, and a refuses to take b in.
BOOST_FIXTURE_TEST_CASE(a_dialled_node_without_the_secret_is_refused_by_the_dialler, fixture) {
  auto cfg = cluster("no-secret", {{"a", {}}, {"b", {"pb"}}, {"c", {"pc"}}}, "a");
  auto open = cfg;
  open.secret.clear();
  start(cfg, "a", true);
  start(open, "b", false);
  wire(cfg, "a", "b");
  net.run();
  BOOST_TEST(log.has("[a] node b refused the handshake: node 'b' presented no cluster secret"));
  BOOST_TEST(!log.has("[a] peered with node b"));
  auto via_a = snapshot_via("a");
  BOOST_TEST(platform(via_a, "pb").state == "waiting");
  BOOST_TEST(via_a.cluster.platforms_up == 0u);
}

// b's process dies after the handshake: its connection fails, a declares it
// down, and the balancer on a counts its platform down.
BOOST_FIXTURE_TEST_CASE(a_node_going_down_is_seen_down_by_its_peer, fixture) {
  auto cfg = cluster("down", {{"a", {}}, {"b", {"pb"}}, {"c", {"pc"}}}, "a");
  start(cfg, "a", true);
  start(cfg, "b", false);
  wire(cfg, "a", "b");
  net.run();
  BOOST_REQUIRE(log.has("[a] peered with node b"));
  BOOST_REQUIRE_EQUAL(platform(snapshot_via("a"), "pb").state, "up");
  BOOST_TEST(!log.has("is down"));

  crash("b");
  net.run();
  BOOST_TEST(log.has("[a] node b is down"));
  BOOST_TEST(log.has("balancer: platform pb on node b is down"));
  auto s = snapshot_via("a");
  BOOST_TEST(s.cluster.balancer_reachable);
  BOOST_TEST(platform(s, "pb").state == "down");
  BOOST_TEST(s.cluster.platforms_down == 1u);
  BOOST_TEST(s.cluster.platforms_up == 0u);
  BOOST_TEST(node(s, "b").state == "down");
  // a keeps dialling b (every second), which does not answer.
  net.advance(3s);
  BOOST_TEST(log.count("[a] node b not reachable yet") == 1u);  // said once, not at each try
  BOOST_TEST(platform(snapshot_via("a"), "pb").state == "down");
}

// With heartbeats (cluster.heartbeat_interval, cluster.peer_timeout, set
// up by configure_network as for a real node): b freezes, its connection
// stays open but nothing comes from it; a declares it down once
// peer_timeout passed, and not before.
BOOST_FIXTURE_TEST_CASE(a_frozen_node_is_declared_down_after_the_peer_timeout, fixture) {
  auto cfg = cluster("frozen", {{"a", {}}, {"b", {"pb"}}, {"c", {"pc"}}}, "a");
  cfg.heartbeat_interval = 1;
  cfg.peer_timeout = 6;
  start(cfg, "a", true);
  start(cfg, "b", false);
  wire(cfg, "a", "b");
  net.run();
  BOOST_REQUIRE(log.has("[a] peered with node b"));
  // Both alive: their heartbeats keep the connection up however long.
  net.advance(10s);
  BOOST_TEST(!log.has("is down"));
  BOOST_TEST(platform(snapshot_via("a"), "pb").state == "up");

  net.remove(*nodes.at("b").process);  // frozen: it runs no more, its clock stands
  net.advance(5s);
  BOOST_TEST(!log.has("[a] node b is down"));
  // Down within peer_timeout and a heartbeat interval of b's last heartbeat.
  net.advance(3s);
  BOOST_TEST(log.has("[a] node b is down"));
  auto s = snapshot_via("a");
  BOOST_TEST(platform(s, "pb").state == "down");
  BOOST_TEST(node(s, "b").state == "down");
}

// b's process dies and b is started again: a, which kept dialling it, peers
// with the new b, and its balancer takes pb back (restoring: it rejoined).
BOOST_FIXTURE_TEST_CASE(a_node_that_comes_back_is_peered_with_again, fixture) {
  auto cfg = cluster("back", {{"a", {}}, {"b", {"pb"}}, {"c", {"pc"}}}, "a");
  start(cfg, "a", true);
  start(cfg, "b", false);
  wire(cfg, "a", "b");
  net.run();
  BOOST_REQUIRE_EQUAL(platform(snapshot_via("a"), "pb").state, "up");
  crash("b");
  net.advance(2s);
  BOOST_REQUIRE_EQUAL(platform(snapshot_via("a"), "pb").state, "down");
  end("b");

  start(cfg, "b", false);
  wire(cfg, "a", "b");
  net.advance(1s);
  BOOST_TEST(log.count("[a] peered with node b") == 2u);
  BOOST_TEST(log.has("[b] peered with node a"));
  auto s = snapshot_via("a");
  BOOST_TEST(platform(s, "pb").state == "restoring");
  BOOST_TEST(s.cluster.platforms_up == 1u);
  BOOST_TEST(s.cluster.platforms_down == 0u);
  BOOST_TEST(node(s, "b").state == "up");
  // The new b knows a's balancer.
  BOOST_TEST(snapshot_via("b").cluster.balancer_reachable);
}

// a's process dies; while it is down, the balancer on b ends the run. a,
// started again, dials b: b took a in first and could not yet tell it, so a
// asks, hears the run is over, starts no balancer of its own, and ends once
// the grace period passed instead of waiting for a run that is gone.
BOOST_FIXTURE_TEST_CASE(a_node_back_after_the_run_ended_hears_it_and_ends, fixture) {
  auto cfg = cluster("over", {{"a", {"pa"}}, {"b", {}}, {"c", {"pc"}}}, "b");
  start(cfg, "a", false);
  start(cfg, "b", true);
  wire(cfg, "a", "b");
  net.run();
  BOOST_REQUIRE(log.has("[a] peered with node b"));
  crash("a");
  net.advance(2s);
  end("a");
  {
    caf::scoped_actor balancer{nodes.at("b").process->sys};  // as b's balancer says it
    balancer->send(nodes.at("b").node, done_atom::value, messages::role::balancer,
                   std::string{}, std::string{"over-run"});
  }
  net.run();
  BOOST_REQUIRE(!log.has("saw run"));

  start(cfg, "a", false);
  wire(cfg, "a", "b");
  net.advance(1s);
  BOOST_REQUIRE_EQUAL(log.count("[a] peered with node b"), 2u);
  BOOST_TEST(log.has("[a] node b saw run over-run end while this node was down or cut off"));
  BOOST_TEST(!log.has("[b] node a saw run"));  // b was not down: nothing to hear
  net.advance(10s);  // past the first election
  BOOST_TEST(!log.has("[a] no balancer in the cluster"));
  BOOST_TEST(!log.has("[a] the run is over"));
  net.advance(25s);  // past the grace period
  BOOST_TEST(log.has("[a] the run is over but pa did not finish; ending the node"));
}

// Three nodes, the balancer on a. a's process dies: b, next in the
// succession, starts a balancer once the succession delay passed; c waits
// for b's, which it learns from b's new hello and forwards the console to.
BOOST_FIXTURE_TEST_CASE(the_next_node_in_the_succession_starts_a_balancer, fixture) {
  auto cfg = cluster("succession", {{"a", {}}, {"b", {}}, {"c", {}}}, "a");
  start(cfg, "a", true);
  start(cfg, "b", false);
  start(cfg, "c", false);
  wire(cfg, "a", "b");
  wire(cfg, "a", "c");
  wire(cfg, "b", "c");
  net.run();
  BOOST_REQUIRE(log.has("[a] peered with node b"));
  BOOST_REQUIRE(log.has("[a] peered with node c"));
  BOOST_REQUIRE(log.has("[b] peered with node c"));
  BOOST_REQUIRE(snapshot_via("c").cluster.balancer_reachable);  // a's balancer
  // The first election (3 s after start) finds a's balancer: nobody starts one.
  net.advance(4s);
  BOOST_TEST(!log.has("no balancer in the cluster"));

  crash("a");
  net.run();
  BOOST_TEST(log.has("[b] node a is down"));
  BOOST_TEST(log.has("[c] node a is down"));
  // Without a balancer, c answers alone until b's comes.
  BOOST_TEST(!snapshot_via("c").cluster.balancer_reachable);
  // The succession waits 2 s before electing.
  net.advance(1500ms);
  BOOST_TEST(!log.has("no balancer in the cluster"));
  net.advance(1s);
  BOOST_TEST(log.has("[b] no balancer in the cluster: starting one here"));
  BOOST_TEST(!log.has("[c] no balancer in the cluster"));
  auto via_c = snapshot_via("c");
  BOOST_TEST(via_c.cluster.balancer_reachable);  // b's, in c's directory now
  BOOST_TEST(via_c.cluster.via == "c");
  BOOST_TEST(snapshot_via("b").cluster.balancer_reachable);
  // Later elections change nothing: one balancer, on b.
  net.advance(5s);
  BOOST_TEST(log.count("no balancer in the cluster") == 1u);
  BOOST_TEST(!log.has("hosts the balancer too"));
}

// A node that wakes from a freeze has timed out every peer while they went
// on without it. b comes back to c before a's redial gets through: c still
// follows a's balancer, so b waits for a instead of starting a second
// balancer (which would pull c's platform back to an older epoch).
BOOST_FIXTURE_TEST_CASE(a_node_back_from_a_freeze_does_not_elect_while_a_peer_follows_the_balancer,
                        fixture) {
  auto cfg = cluster("thaw", {{"a", {}}, {"b", {}}, {"c", {}}}, "a");
  start(cfg, "a", true);
  start(cfg, "b", false);
  start(cfg, "c", false);
  wire(cfg, "a", "b");
  wire(cfg, "a", "c");
  wire(cfg, "b", "c");
  net.run();
  BOOST_REQUIRE(log.has("[b] peered with node c"));
  BOOST_REQUIRE(log.has("[b] peered with node a"));
  net.advance(4s);  // past the first election

  // b's connections fail at both ends; b sees a (the balancer's node) and c
  // down, a and c see b down.
  net.cut(*nodes.at("b").process);
  net.run();
  BOOST_REQUIRE(log.has("[b] node a is down"));
  BOOST_REQUIRE(log.has("[c] node b is down"));
  // b's redial of c gets through; a's of b does not yet.
  wire(cfg, "b", "c");
  net.advance(5s);
  BOOST_TEST(log.count("[b] peered with node c") == 2u);
  BOOST_TEST(log.has("[b] node c follows the balancer on node a"));
  BOOST_TEST(!log.has("no balancer in the cluster"));
  BOOST_TEST(!snapshot_via("b").cluster.balancer_reachable);

  // a reaches b again: b follows a's balancer; still one balancer.
  wire(cfg, "a", "b");
  net.advance(2s);
  BOOST_TEST(log.count("[a] peered with node b") == 2u);
  BOOST_TEST(snapshot_via("b").cluster.balancer_reachable);
  net.advance(5s);
  BOOST_TEST(!log.has("no balancer in the cluster"));
  BOOST_TEST(!log.has("hosts the balancer too"));
}

BOOST_AUTO_TEST_SUITE_END()

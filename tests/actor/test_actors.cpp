// Actor tests, made deterministic with CAF's testing scheduler: every message
// is delivered by an explicit sched.run() / run_once(), time only moves with
// advance_time().
#include "actors/balancer/balancer.hpp"
#include "actors/balancer/evaluator.hpp"
#include "actors/interfaces.hpp"
#include "actors/platform/mixer.hpp"
#include "actors/server.hpp"
#include "config/defaults.hpp"
#include "actors/store.hpp"
#include "models/dataset.hpp"
#include "algorithms/gossip/gossip.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "messages/codec.hpp"
#include "messages/lane.hpp"
#include "storage/store.hpp"
#include "actor_testing.hpp"
#include "process.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

using namespace eg;
using namespace eg::actors;

namespace {

using fixture = test::actor_fixture;

/// Fashion-MNIST's model shape.
const learning::model_shape fashion = learning::fashion_mnist_shape();

/// The weights of a fresh LeNet-5 (gossip weight w) as a platform sends
/// them: views of its parameters, held with `hold` (the platform's loan).
held_weights lenet_weights(const std::string& sender, double w,
                           std::shared_ptr<const void> hold = nullptr, uint64_t seed = 1) {
  auto m = learning::make_classifier("lenet5", seed, fashion);
  held_weights h;
  h.sender = sender;
  h.value.gossip_weight = w;
  h.value.tensors = learning::to_views(learning::parameter_names(*m), learning::parameters(*m));
  for (auto& t : h.value.tensors)
    h.wire_bytes += t.bytes;
  h.hold = std::make_shared<std::pair<std::shared_ptr<const void>,
                                      std::shared_ptr<learning::classifier>>>(std::move(hold), m);
  return h;
}

/// `h` as the lane delivers it: with the sizes of its message on the wire
/// and unpacked (which the mixer's traffic counters split by category).
held_weights as_received(held_weights h, const std::string& cluster = "c") {
  messages::envelope e;
  e.hdr = {cluster, messages::protocol_version, h.sender};
  e.payload = h.value;
  const auto size = messages::measure(e);
  h.wire_bytes = size.wire;
  h.unpacked_bytes = size.unpacked;
  return h;
}

/// Whether two weights messages hold the same tensors, byte for byte.
bool same_tensors(const held_weights& a, const held_weights& b) {
  if (a.value.tensors.size() != b.value.tensors.size())
    return false;
  for (size_t i = 0; i < a.value.tensors.size(); ++i) {
    auto& x = a.value.tensors[i];
    auto& y = b.value.tensors[i];
    if (x.name != y.name || x.bytes != y.bytes || std::memcmp(x.data, y.data, x.bytes) != 0)
      return false;
  }
  return true;
}

messages::epoch_report stats_of(caf::scoped_actor& self, caf::scheduler::test_coordinator& sched,
                                const mixer_actor& m) {
  messages::epoch_report out;
  auto rh = self->request(m, caf::infinite, stats_atom::value);
  sched.run();
  rh.receive([&](epoch_report& r) { out = std::move(r); },
             [&](caf::error& e) { BOOST_FAIL("stats request failed: " << caf::to_string(e)); });
  return out;
}

/// A balancer's arguments for `cfg`, telling `node` when the run is over;
/// the data is the test set's (Fashion-MNIST's without one).
balancer_args balancer_args_of(const config::cluster_config& cfg,
                               std::shared_ptr<const learning::dataset> test_set,
                               caf::scoped_actor& node,
                               std::map<std::string, uint64_t> shard_sizes = {}) {
  auto data = test_set ? test_set->describe() : test::fashion_description();
  return {balancer_settings::of(cfg, std::move(shard_sizes)), std::move(data),
          caf::actor_cast<node_actor>(node), false, {}, std::nullopt};
}

/// Spawns the balancer of `args` and, as a node with test data would, tells
/// it of a tester of `test_set` on node "local" (none: no node has test data).
balancer_actor spawn_tested_balancer(caf::actor_system& sys, const config::cluster_config& cfg,
                                     balancer_args args,
                                     std::shared_ptr<const learning::dataset> test_set) {
  auto b = spawn_balancer(sys, std::move(args));
  if (test_set) {
    const auto n = static_cast<uint64_t>(test_set->size());
    auto t = spawn_tester(sys, {cfg.train.model, cfg.seed, learning::shape_of(*test_set),
                                test_set, n});
    caf::anon_send(b, testers_atom::value, std::vector<std::string>{"local"},
                   std::vector<caf::actor>{caf::actor_cast<caf::actor>(t)},
                   std::vector<uint64_t>{n});
  }
  return b;
}

} // namespace

BOOST_AUTO_TEST_SUITE(actors)

BOOST_FIXTURE_TEST_CASE(mixer_sends_a_copy_to_a_peer_in_this_process_and_counts_bytes, fixture) {
  auto m = spawn_mixer(sys, {"p0", "c", nullptr});
  sched.run();
  // The scoped actor plays the only peer mixer.
  self->send(m, peers_atom::value, std::vector<std::string>{"p0", "p1"},
             std::vector<caf::actor>{caf::actor_cast<caf::actor>(m),
                                     caf::actor_cast<caf::actor>(self)},
             std::vector<std::string>{"", ""});
  // The platform's loan on its parameters: held by the message until the
  // mixer has made the one copy a peer in this process gets.
  auto loan = std::make_shared<int>(0);
  std::weak_ptr<int> lent = loan;
  auto sent = lenet_weights("p0", 0.25, std::move(loan));
  auto original = lenet_weights("p0", 0.25);  // the same model (same seed), for comparing
  self->send(m, send_atom::value, std::string{"p1"}, std::move(sent));
  sched.run();
  BOOST_TEST(lent.expired());
  bool got = false;
  self->receive([&](gossip_atom, const held_weights& w) {
    got = w.sender == "p0" && w.value.gossip_weight == 0.25 && same_tensors(w, original);
  });
  BOOST_TEST(got);
  auto s = stats_of(self, sched, m);
  BOOST_TEST(s.messages_sent == 1u);
  // Counted as on the wire: the tensors' bytes, the weight, and the envelope.
  BOOST_TEST(s.sent.values == original.wire_bytes);
  BOOST_TEST(s.sent.weights == 8u);
  BOOST_TEST(s.sent.indices == 0u);
  BOOST_TEST(s.sent.headers > 0u);
  BOOST_TEST(s.bytes_sent == s.sent.total());
  // Counters restart after each stats request.
  BOOST_TEST(stats_of(self, sched, m).messages_sent == 0u);
}

BOOST_FIXTURE_TEST_CASE(mixer_counts_received_weights_by_sender_and_passes_them_on, fixture) {
  auto m = spawn_mixer(sys, {"p0", "mine", nullptr});
  // The scoped actor plays the platform.
  bind_mixer(m, caf::actor_cast<platform_actor>(self));
  sched.run();
  self->receive([](peers_atom, const std::vector<std::string>& live) {
    BOOST_TEST(live.empty());  // no peers known yet
  });
  auto w = as_received(lenet_weights("p1", 0.5));
  BOOST_TEST(w.wire_bytes > w.value.tensors.front().bytes);
  self->send(m, gossip_atom::value, w);
  self->send(m, gossip_atom::value, as_received(lenet_weights("p2", 0.5)));
  sched.run();
  int merges = 0;
  self->receive_while([&] { return self->mailbox().size() > 0; })(
    [&](merge_atom, const held_weights&) { ++merges; });
  BOOST_TEST(merges == 2);
  auto s = stats_of(self, sched, m);
  BOOST_TEST(s.messages_received == 2u);
  BOOST_REQUIRE_EQUAL(s.received_from.size(), 2u);
  BOOST_TEST(s.received_from[0].peer == "p1");
  BOOST_TEST(s.received_from[1].peer == "p2");
  BOOST_TEST(s.bytes_received == 2 * w.wire_bytes);
  // By category, exactly the bytes received.
  BOOST_TEST(s.received.total() == s.bytes_received);
  BOOST_TEST(s.received.values >= 2 * w.value.tensors.front().bytes);
  BOOST_TEST(s.received.weights == 16u);
}

BOOST_FIXTURE_TEST_CASE(mixer_drops_a_peer_that_goes_down_and_tells_its_platform, fixture) {
  auto m = spawn_mixer(sys, {"p0", "c", nullptr});
  auto live = std::make_shared<std::vector<std::vector<std::string>>>();
  auto back = std::make_shared<std::vector<std::pair<std::string, held_weights>>>();
  auto platform = sys.spawn([live, back]() -> caf::behavior {
    return {[live](peers_atom, const std::vector<std::string>& names) { live->push_back(names); },
            [](merge_atom, const held_weights&) {},
            [back](unsent_atom, const std::string& to, const held_weights& w) {
              back->emplace_back(to, w);
            }};
  });
  bind_mixer(m, caf::actor_cast<platform_actor>(platform));
  auto peer =
    sys.spawn([]() -> caf::behavior { return {[](gossip_atom, const held_weights&) {}}; });
  self->send(m, peers_atom::value, std::vector<std::string>{"p1"},
             std::vector<caf::actor>{peer}, std::vector<std::string>{""});
  sched.run();
  BOOST_REQUIRE(!live->empty());
  BOOST_TEST(live->back() == std::vector<std::string>{"p1"});
  self->send(m, send_atom::value, std::string{"p1"}, lenet_weights("p0", 0.5));
  sched.run();
  BOOST_TEST(stats_of(self, sched, m).messages_sent == 1u);
  self->send_exit(peer, caf::exit_reason::kill);
  sched.run();
  BOOST_TEST(live->back().empty());  // the platform's topology no longer picks p1
  BOOST_TEST(back->empty());
  self->send(m, send_atom::value, std::string{"p1"}, lenet_weights("p0", 0.5));
  sched.run();
  BOOST_TEST(stats_of(self, sched, m).messages_sent == 0u);
  // The message that found no peer comes back to the platform, its weight
  // with it, without the tensors (the loan on its parameters ends).
  BOOST_REQUIRE_EQUAL(back->size(), 1u);
  BOOST_TEST(back->front().first == "p1");
  BOOST_TEST(back->front().second.value.gossip_weight == 0.5);
  BOOST_TEST(back->front().second.value.tensors.empty());
  BOOST_TEST(!back->front().second.hold);
}

BOOST_FIXTURE_TEST_CASE(the_door_refuses_messages_of_another_cluster_or_malformed, fixture) {
  // What the middleman does to a typed message between nodes: inspect
  // writes a Cap'n Proto envelope and reads it back, checked against the
  // receiving system's cluster id.
  set_wire_identity(sys, {"mine", "node-a"});
  messages::plan p;
  p.epoch = 3;
  p.ratio = 0.25;
  std::vector<char> buf;
  {
    caf::binary_serializer sink{sys, buf};
    BOOST_REQUIRE(!sink(p));
  }
  messages::plan back;
  {
    caf::binary_deserializer source{sys, buf};
    BOOST_REQUIRE(!source(back));
  }
  BOOST_TEST(back.epoch == 3u);
  BOOST_TEST(back.ratio == 0.25);
  // The same bytes at a node of another cluster: refused, with the reason.
  set_wire_identity(sys, {"other", "node-b"});
  {
    caf::binary_deserializer source{sys, buf};
    auto err = source(back);
    std::string why;
    BOOST_TEST(is(err, ec::bad_request, &why));
    BOOST_TEST(why.find("cluster") != std::string::npos, why);
  }
  // A truncated message: refused.
  set_wire_identity(sys, {"mine", "node-a"});
  buf.resize(buf.size() / 2);
  {
    caf::binary_deserializer source{sys, buf};
    BOOST_TEST(static_cast<bool>(source(back)));
  }
  // Weights keep the received bytes their views point into.
  held_weights w = lenet_weights("p0", 0.5), read;
  std::vector<char> wbuf;
  {
    caf::binary_serializer sink{sys, wbuf};
    BOOST_REQUIRE(!sink(w));
  }
  {
    caf::binary_deserializer source{sys, wbuf};
    BOOST_REQUIRE(!source(read));
  }
  BOOST_TEST(read.sender == "p0");
  BOOST_TEST(same_tensors(read, w));
  set_wire_identity(sys, {});
}

namespace {

/// A stand-in platform: records the plans it gets (and the epochs it is
/// told to cut, when `cuts` is given) and answers weights.
struct fake_platform_state {
  std::vector<messages::plan> plans;
  std::string run;
};

/// The normalisations each stand-in platform was sent, by platform name
/// (the test coordinator runs every actor on the test's thread).
std::map<std::string, std::vector<std::string>> norms_sent;
/// How often each stand-in platform was asked for its model.
std::map<std::string, int> models_asked;
/// The control requests each stand-in platform was sent, by platform name.
std::map<std::string, std::vector<messages::control>> controls_sent;

platform_actor::behavior_type
fake_platform(platform_actor::stateful_pointer<fake_platform_state> self, std::string name,
              std::string cluster, std::shared_ptr<std::vector<messages::plan>> seen,
              uint64_t seed, std::shared_ptr<std::vector<uint32_t>> cuts) {
  return {
    [=](plan_atom, const plan& p) { seen->push_back(p); },
    [=](norm_atom, const std::string& norm) { norms_sent[name].push_back(norm); },
    [](adopt_atom, const std::string&) {},
    // A test ends a stand-in normally this way, as a platform that left
    // the run does (an exit message with the normal reason is ignored).
    [=](step_atom) { self->quit(); },
    [](overlap_atom, uint64_t) {},
    [](merge_atom, const held_weights&) {},
    [](unsent_atom, const std::string&, const held_weights&) {},
    [](peers_atom, const std::vector<std::string>&) {},
    [](rescale_atom, double) {},
    [](server_atom, caf::actor, const std::string&) {},
    [](pull_atom, const std::string&, const held_global_model&) {},
    [](pull_atom, uint64_t) {},
    [=](weights_atom) {
      ++models_asked[name];
      return messages::copy_held(lenet_weights(name, 0.5, nullptr, seed));
    },
    [=](weights_atom, const std::string&) {
      ++models_asked[name];
      return messages::copy_held(lenet_weights(name, 0.5, nullptr, seed));
    },
    [=](done_atom, const std::string& run) { self->state.run = run; },
    [=](cut_atom, uint32_t epoch) {
      if (cuts)
        cuts->push_back(epoch);
    },
    [=](control_atom, const control& c) {
      controls_sent[name].push_back(c);
      return true;
    },
  };
}

/// A stand-in platform and the plans it receives; its weights are a LeNet-5
/// initialised with `seed`.
std::pair<platform_actor, std::shared_ptr<std::vector<messages::plan>>>
spawn_stand_in(caf::actor_system& sys, const std::string& name, const std::string& cluster,
               uint64_t seed = 1) {
  auto seen = std::make_shared<std::vector<messages::plan>>();
  return {sys.spawn(fake_platform, name, cluster, seen, seed,
                    std::shared_ptr<std::vector<uint32_t>>{}),
          seen};
}

/// The same, also recording the epochs it is told to cut in `cuts`.
std::pair<platform_actor, std::shared_ptr<std::vector<messages::plan>>>
spawn_stand_in(caf::actor_system& sys, const std::string& name, const std::string& cluster,
               std::shared_ptr<std::vector<uint32_t>> cuts) {
  auto seen = std::make_shared<std::vector<messages::plan>>();
  return {sys.spawn(fake_platform, name, cluster, seen, uint64_t{1}, std::move(cuts)), seen};
}

/// Platform `name` of node `node` joins balancer `b` (with no predictor),
/// its training data of data::signature `data` ("": not said) and
/// `samples` training samples (0: the shard size in the settings).
void join(caf::scoped_actor& self, const balancer_actor& b, const std::string& name,
          const std::string& node, const platform_actor& p, const std::string& data = {},
          uint64_t samples = 0, const std::string& stats = {}) {
  self->send(b, join_atom::value, name, node, caf::actor_cast<caf::actor>(p), caf::actor{}, data,
             samples, stats, std::string{});
}

epoch_report report(const std::string&, const std::string& platform, uint32_t epoch,
                    uint64_t samples = 100) {
  messages::epoch_report r;
  r.platform = platform;
  r.node = "local";
  r.epoch = epoch;
  r.samples = samples;
  return r;
}

/// The default cluster with platforms p0 and p1 (half the data each).
config::cluster_config two_platforms(const test::temp_dir& dir, const std::string& id,
                                     uint32_t epochs) {
  auto cfg = config::default_config();
  cfg.id = id;
  cfg.train.epochs = epochs;
  cfg.output_dir = dir / "runs";
  cfg.nodes[0].platforms.resize(2);
  cfg.nodes[0].platforms[0] = {"p0", 1, 0.5, 1, {}};
  cfg.nodes[0].platforms[1] = {"p1", 1, 0.5, 1, {}};
  return cfg;
}

/// 20 random images of 10 named classes: the balancer evaluates averaged
/// models on them.
std::shared_ptr<learning::dataset> tiny_test_set() {
  auto test_set = std::make_shared<learning::dataset>(test::random_images(20));
  for (auto& c : test_set->classes)
    c = "class " + c;
  test_set->numbered_classes = false;
  return test_set;
}

/// A balancer over two_platforms(dir, id, epochs) (changed by `adjust`
/// first, if given) that tests on tiny_test_set(), and stand-ins for p0
/// and p1, not joined yet.
struct two_platform_run {
  config::cluster_config cfg;
  std::shared_ptr<learning::dataset> test_set;
  balancer_actor b;
  platform_actor p0;
  std::shared_ptr<std::vector<messages::plan>> seen0;
  platform_actor p1;
  std::shared_ptr<std::vector<messages::plan>> seen1;
};

two_platform_run start_two_platform_run(
  caf::actor_system& sys, caf::scoped_actor& self, const test::temp_dir& dir,
  const std::string& id, uint32_t epochs,
  const std::function<void(config::cluster_config&)>& adjust = {}) {
  two_platform_run r;
  r.cfg = two_platforms(dir, id, epochs);
  if (adjust)
    adjust(r.cfg);
  r.test_set = tiny_test_set();
  r.b = spawn_tested_balancer(sys, r.cfg, balancer_args_of(r.cfg, r.test_set, self), r.test_set);
  std::tie(r.p0, r.seen0) = spawn_stand_in(sys, "p0", r.cfg.id);
  std::tie(r.p1, r.seen1) = spawn_stand_in(sys, "p1", r.cfg.id);
  return r;
}

} // namespace

BOOST_FIXTURE_TEST_CASE(balancer_refuses_platforms_whose_data_is_not_the_clusters, fixture) {
  // One model for the cluster: a platform whose data has other classes (or
  // another shape) cannot join. It is told why (its node then stops), and
  // the run does not wait for it: it starts with the others.
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "sig", 2);
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  controls_sent.clear();
  const auto ours = data::signature(test_set->describe());
  auto other_classes = test_set->classes;
  other_classes.pop_back();
  join(self, b, "p0", "local", p0, ours);
  sched.run();
  BOOST_TEST(seen0->empty());  // waits for p1 (cluster.quorum 0: all of them)
  join(self, b, "p1", "local", p1, data::signature(test_set->shape, other_classes));
  sched.run();
  BOOST_REQUIRE_EQUAL(controls_sent["p1"].size(), 1u);
  const auto& told = controls_sent["p1"].front();
  BOOST_TEST(static_cast<int>(told.verb) == static_cast<int>(messages::verb::refuse));
  BOOST_TEST(told.argument.find(ours) != std::string::npos, told.argument);
  BOOST_TEST(told.argument.find(std::to_string(other_classes.size()) + " classes")
               != std::string::npos,
             told.argument);
  // The run started without it.
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
  BOOST_TEST(seen0->back().epoch == 0u);
  BOOST_TEST(seen1->empty());
  // Another shape is refused too, and said again.
  join(self, b, "p1", "local", p1,
       data::signature(data::sample_shape::image(3, 28, 28), test_set->classes));
  sched.run();
  BOOST_REQUIRE_EQUAL(controls_sent["p1"].size(), 2u);
  BOOST_TEST(controls_sent["p1"].back().argument.find("3x28x28") != std::string::npos,
             controls_sent["p1"].back().argument);
  BOOST_TEST(seen1->empty());
  // Set right and started again, it joins the run in progress.
  join(self, b, "p1", "local", p1, ours);
  sched.run();
  BOOST_TEST(controls_sent["p1"].size() == 2u);
  BOOST_TEST(seen1->empty());  // the synchronous schedule: from the next epoch on
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(balancer_refuses_platforms_whose_run_settings_are_not_the_clusters,
                        fixture) {
  // A node whose cluster file names another model (or whose run settings
  // differ otherwise) is refused with what differs.
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "settings", 1);
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  controls_sent.clear();
  auto other = cfg;
  other.train.model = "mlp";
  self->send(b, join_atom::value, std::string{"p0"}, std::string{"a"},
             caf::actor_cast<caf::actor>(p0), caf::actor{}, std::string{}, uint64_t{0},
             std::string{}, config::join_settings(cfg));
  self->send(b, join_atom::value, std::string{"p1"}, std::string{"b"},
             caf::actor_cast<caf::actor>(p1), caf::actor{}, std::string{}, uint64_t{0},
             std::string{}, config::join_settings(other));
  sched.run();
  BOOST_REQUIRE_EQUAL(controls_sent["p1"].size(), 1u);
  const auto& why = controls_sent["p1"].front().argument;
  BOOST_TEST(why.find("train.model is mlp there, " + cfg.train.model + " in the cluster")
               != std::string::npos,
             why);
  BOOST_TEST(controls_sent["p0"].empty());
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);  // the run started with p0 alone
  BOOST_TEST(seen1->empty());
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(balancer_combines_the_nodes_data_statistics_into_one_normalisation,
                        fixture) {
  // Nodes a and b announce their training data's sums with their platforms;
  // the run's normalisation is the combined one, sent to every platform
  // before its plan, kept in the run state and tested with.
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "norm", 1);
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  norms_sent.clear();
  data::moments a, c;
  a.count = 100, a.sum = {10}, a.sum_squares = {5};
  c.count = 300, c.sum = {90}, c.sum_squares = {60};
  join(self, b, "p0", "a", p0, {}, 0, "count 1; sum nan; squares 1");  // left out
  join(self, b, "p0", "a", p0, {}, 0, data::to_text(a));  // the same platform, sums that parse
  join(self, b, "p1", "b", p1, {}, 0, data::to_text(c));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
  BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
  // 400 values summing to 100, squares to 65: mean 0.25, variance 0.1.
  const auto expected = data::parse_normalisation(norms_sent["p0"].at(0));
  BOOST_TEST(expected.mean.at(0) == 0.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(expected.std.at(0) == std::sqrt(0.1), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(norms_sent["p0"].size() == 1u);
  BOOST_TEST(norms_sent["p1"] == norms_sent["p0"]);
  // The run state keeps it, so that a continued run uses the same.
  bool found = false;
  self->receive_while([&] { return !found; })(
    [&](run_atom, const std::string& bytes) {
      std::string problem;
      auto state = storage::parse_run_state(bytes, problem);
      BOOST_REQUIRE(state);
      BOOST_TEST(state->norm == norms_sent["p0"].at(0));
      found = true;
    },
    caf::after(std::chrono::seconds(0)) >> [&] { found = true; });
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(balancer_barrier_is_released_when_a_platform_goes_down, fixture) {
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "bal", 3);
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  join(self, b, "p0", "local", p0);
  sched.run();
  BOOST_TEST(seen0->empty());  // waits for every configured platform
  join(self, b, "p1", "local", p1);
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
  BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
  BOOST_TEST(seen0->back().epoch == 0u);
  BOOST_TEST(seen0->back().last_epoch == 2u);
  BOOST_TEST(seen0->back().ratio == 1.0);

  // Epoch barrier: one report is not enough to start epoch 1.
  self->send(b, report_atom::value, report(cfg.id, "p0", 0));
  sched.run();
  BOOST_TEST(seen0->size() == 1u);
  self->send(b, report_atom::value, report(cfg.id, "p1", 0));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 2u);
  BOOST_TEST(seen0->back().epoch == 1u);
  BOOST_TEST(seen1->back().epoch == 1u);

  // p1 goes down mid-epoch: its monitor releases the barrier for p0.
  self->send(b, report_atom::value, report(cfg.id, "p0", 1));
  sched.run();
  BOOST_TEST(seen0->size() == 2u);
  self->send_exit(p1, caf::exit_reason::kill);
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 3u);
  BOOST_TEST(seen0->back().epoch == 2u);
  BOOST_TEST(seen1->size() == 2u);

  // The last epoch ends the run: the node is told, the run directory written.
  self->send(b, report_atom::value, report(cfg.id, "p0", 2));
  sched.run();
  std::string run;
  self->receive([&](done_atom, messages::role who, const std::string&, const std::string& r) {
    BOOST_TEST((who == messages::role::balancer));
    run = r;
  });
  BOOST_TEST(!run.empty());
  auto rows = test::read_csv(dir / ("runs/" + run + "/cluster.csv"));
  BOOST_REQUIRE_EQUAL(rows.size(), 3u);
  BOOST_TEST(rows[2]["platforms_up"] == "1");
  BOOST_TEST(std::filesystem::exists(dir / ("runs/" + run + "/model.pt")));
  // The balancer's timers hold it alive: end it explicitly.
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  sched.run();
}

// A platform that left on its own (a normal exit: its model kept running
// away) does not come back; one whose node died may. When every platform
// left, the run ends instead of waiting for an epoch nobody can train.
BOOST_FIXTURE_TEST_CASE(the_run_ends_when_every_platform_left_it, fixture) {
  for (bool one_died : {true, false}) {
    test::temp_dir dir;
    auto setup = start_two_platform_run(sys, self, dir, "bal", 3);
    auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
    join(self, b, "p0", "local", p0);
    join(self, b, "p1", "local", p1);
    sched.run();
    BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
    self->send(p0, step_atom::value);
    if (one_died)
      self->send_exit(p1, caf::exit_reason::kill);
    else
      self->send(p1, step_atom::value);
    sched.run();
    bool ended = false;
    self->receive(
      [&](done_atom, messages::role who, const std::string&, const std::string&) {
        ended = who == messages::role::balancer;
      },
      caf::after(std::chrono::seconds(0)) >> [] {});
    // A node that died may be started again: the run waits for it.
    BOOST_TEST(ended == !one_died, (one_died ? "one died" : "both left"));
    self->send_exit(b, caf::exit_reason::user_shutdown);
    sched.run();
  }
}

BOOST_FIXTURE_TEST_CASE(models_are_averaged_every_train_average_every_epochs, fixture) {
  // average_every = 2 over 3 epochs: epoch 1 ends with its reports (no model
  // asked for, no accuracy); epoch 2 is averaged, and so is the last.
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "every2", 3, [](config::cluster_config& c) {
    c.train.average_every = 2;
  });
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  models_asked.clear();
  join(self, b, "p0", "local", p0);
  join(self, b, "p1", "local", p1);
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
  self->send(b, report_atom::value, report(cfg.id, "p0", 0));
  self->send(b, report_atom::value, report(cfg.id, "p1", 0));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 2u);  // the next plan went out
  BOOST_TEST(models_asked["p0"] == 0);
  BOOST_TEST(models_asked["p1"] == 0);
  self->send(b, report_atom::value, report(cfg.id, "p0", 1));
  self->send(b, report_atom::value, report(cfg.id, "p1", 1));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 3u);
  BOOST_TEST(models_asked["p0"] == 1);
  BOOST_TEST(models_asked["p1"] == 1);
  self->send(b, report_atom::value, report(cfg.id, "p0", 2));
  self->send(b, report_atom::value, report(cfg.id, "p1", 2));
  sched.run();
  std::string run;
  self->receive([&](done_atom, messages::role, const std::string&, const std::string& r) { run = r; });
  BOOST_TEST(models_asked["p0"] == 2);
  auto rows = test::read_csv(dir / ("runs/" + run + "/cluster.csv"));
  BOOST_REQUIRE_EQUAL(rows.size(), 3u);
  BOOST_TEST(std::isnan(std::stod(rows[0]["averaged_accuracy"])));
  BOOST_TEST(std::isfinite(std::stod(rows[1]["averaged_accuracy"])));
  BOOST_TEST(std::isfinite(std::stod(rows[2]["averaged_accuracy"])));
  BOOST_TEST(std::filesystem::exists(dir / ("runs/" + run + "/model.pt")));
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(edgegossip_cuts_a_platform_past_the_epoch_deadline, fixture) {
  // p0 finishes epoch 1 at once; p1 is still training 1.5 x that time
  // + 0.25 s later (its load rose after the plan): the balancer cuts its
  // epoch, and plans the next once p1 reports what it trained. GoSGD, the
  // baseline, waits for the slowest platform instead.
  for (std::string strategy : {"edgegossip", "gosgd"}) {
    test::temp_dir dir;
    auto cfg = two_platforms(dir, "cut-" + strategy, 2);
    config::apply_override(cfg, "strategy.name=" + strategy);
    auto test_set = tiny_test_set();
    auto b = spawn_tested_balancer(sys, cfg, balancer_args_of(cfg, test_set, self), test_set);
    auto cuts0 = std::make_shared<std::vector<uint32_t>>();
    auto cuts1 = std::make_shared<std::vector<uint32_t>>();
    auto [p0, seen0] = spawn_stand_in(sys, "p0", cfg.id, cuts0);
    auto [p1, seen1] = spawn_stand_in(sys, "p1", cfg.id, cuts1);
    join(self, b, "p0", "local", p0);
    join(self, b, "p1", "local", p1);
    sched.run();
    BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
    self->send(b, report_atom::value, report(cfg.id, "p0", 0, 300));
    sched.run();
    // Well before the deadline: nothing is cut.
    sched.advance_time(std::chrono::milliseconds(100));
    sched.run();
    BOOST_TEST(cuts1->empty());
    // The deadline is measured on the steady clock: wait for it for real.
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    sched.advance_time(std::chrono::seconds(1));
    sched.run();
    BOOST_TEST(cuts0->empty(), strategy);
    if (strategy == "edgegossip") {
      BOOST_REQUIRE_EQUAL(cuts1->size(), 1u);
      BOOST_TEST(cuts1->front() == 0u);
    } else {
      BOOST_TEST(cuts1->empty());
    }
    BOOST_TEST(seen1->size() == 1u);  // the barrier still waits for p1's report
    self->send(b, report_atom::value, report(cfg.id, "p1", 0, 40));
    sched.run();
    BOOST_REQUIRE_EQUAL(seen1->size(), 2u);
    BOOST_TEST(seen1->back().epoch == 1u);
    self->send_exit(b, caf::exit_reason::user_shutdown);
    self->send_exit(p0, caf::exit_reason::user_shutdown);
    self->send_exit(p1, caf::exit_reason::user_shutdown);
    sched.run();
  }
}

BOOST_FIXTURE_TEST_CASE(averaged_model_weighs_platforms_by_points_trained, fixture) {
  // p0 trained 300 points in the epoch, p1 (on a smaller share) 100: the
  // averaged model is 3/4 of p0's model and 1/4 of p1's.
  test::temp_dir dir;
  auto cfg = two_platforms(dir, "avg", 1);
  auto test_set = tiny_test_set();
  auto b = spawn_tested_balancer(sys, cfg, balancer_args_of(cfg, test_set, self), test_set);
  auto [p0, seen0] = spawn_stand_in(sys, "p0", cfg.id, 1);
  auto [p1, seen1] = spawn_stand_in(sys, "p1", cfg.id, 2);
  join(self, b, "p0", "local", p0);
  join(self, b, "p1", "local", p1);
  sched.run();
  BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
  self->send(b, report_atom::value, report(cfg.id, "p0", 0, 300));
  self->send(b, report_atom::value, report(cfg.id, "p1", 0, 100));
  sched.run();
  std::string run;
  self->receive([&](done_atom, messages::role, const std::string&, const std::string& r) { run = r; });
  auto path = dir / ("runs/" + run + "/model.pt");
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto dict = torch::pickle_load(bytes).toGenericDict();
  auto a = learning::make_classifier("lenet5", 1, fashion)->named_parameters()["fc3.bias"];
  auto c = learning::make_classifier("lenet5", 2, fashion)->named_parameters()["fc3.bias"];
  BOOST_TEST(!torch::allclose(a, c));
  BOOST_TEST(torch::allclose(dict.at("fc3.bias").toTensor(), 0.75 * a + 0.25 * c, 1e-5, 1e-6));
  // The same model for Python carries the data's class names, its shape and
  // its normalisation: its scores on the test set's bytes are the averaged
  // model's on the normalised test set.
  auto scripted = torch::jit::load(dir / ("runs/" + run + "/model_scripted.pt"));
  std::vector<std::string> classes;
  for (const auto& name : scripted.attr("classes").toListRef())
    classes.push_back(name.toStringRef());
  BOOST_TEST(classes == test_set->classes);
  BOOST_TEST(classes.front() == "class 0");
  BOOST_TEST(scripted.attr("input_shape").toIntVector() == (std::vector<int64_t>{1, 28, 28}));
  auto averaged = learning::make_classifier("lenet5", 1, fashion);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : averaged->named_parameters())
      p.value().copy_(dict.at(p.key()).toTensor());
  }
  torch::Tensor want;
  {
    learning::evaluation_scope scope(*averaged);
    want = averaged->forward(test_set->all());
  }
  BOOST_TEST(torch::allclose(scripted.forward({test_set->samples}).toTensor(), want, 1e-4, 1e-4));
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

namespace {

/// A stand-in predictor answering a fixed throughput.
predictor_actor::behavior_type fake_predictor(predictor_actor::pointer, std::string name,
                                              std::string cluster, double throughput) {
  return {
    [](observe_atom, double, uint64_t) {},
    [](observe_atom, double, uint64_t, double, uint64_t) {},
    [](tick_atom) {},
    [=](predict_atom) {
      messages::prediction p;
      p.platform = name;
      p.throughput = throughput;
      p.observations = 10;
      return p;
    },
  };
}

} // namespace

BOOST_AUTO_TEST_CASE(each_models_weight_in_the_average) {
  auto cfg = config::default_config();
  cfg.strategy.name = "gosgd";
  auto gosgd = eg::actors::balancer_settings::of(cfg, {});
  BOOST_TEST(!gosgd.average_by_rate);
  BOOST_TEST(eg::actors::model_weight(gosgd, 0.5, 300) == 300.0);  // the points it trained
  cfg.strategy.name = "sparse-push";
  auto push_sum = eg::actors::balancer_settings::of(cfg, {});
  BOOST_TEST(!push_sum.average_by_rate);
  BOOST_TEST(eg::actors::model_weight(push_sum, 0.5, 300) == 0.5);  // push-sum's consensus
  cfg.strategy.name = "edgegossip";
  cfg.strategy.gossip = "sparse-push";
  auto combined = eg::actors::balancer_settings::of(cfg, {});
  BOOST_TEST(combined.average_by_rate);  // merge = "rate", the default
  BOOST_TEST(eg::actors::model_weight(combined, 0.5, 300) == 150.0);
  cfg.edgegossip.merge = config::merge_rule::gossip;
  auto by_weight = eg::actors::balancer_settings::of(cfg, {});
  BOOST_TEST(!by_weight.average_by_rate);
  BOOST_TEST(eg::actors::model_weight(by_weight, 0.5, 300) == 0.5);
  cfg.strategy.gossip = "gosgd";  // EdgeGossip over GoSGD: by points, whatever the merge
  cfg.edgegossip.merge = config::merge_rule::rate;
  BOOST_TEST(eg::actors::model_weight(eg::actors::balancer_settings::of(cfg, {}), 0.5, 300)
             == 300.0);
}

BOOST_FIXTURE_TEST_CASE(edgegossip_balancer_plans_algorithm_1_ratios, fixture) {
  test::temp_dir dir;
  auto cfg = config::default_config();
  cfg.id = "eg";
  cfg.strategy.name = "edgegossip";
  cfg.train.epochs = 2;
  cfg.output_dir = dir / "runs";
  auto test_set = tiny_test_set();
  std::map<std::string, uint64_t> sizes{{"p0", 1500}, {"p1", 1500}, {"p2", 1500}, {"p3", 1500}};
  auto b = spawn_tested_balancer(sys, cfg, balancer_args_of(cfg, test_set, self, sizes), test_set);
  // Throughputs 300, 300, 100, 60 points/s: the paper's 3x and 5x unbalance.
  double speed[] = {300, 300, 100, 60};
  std::vector<std::shared_ptr<std::vector<messages::plan>>> seen;
  std::vector<platform_actor> platforms;
  for (int i = 0; i < 4; ++i) {
    auto name = "p" + std::to_string(i);
    seen.push_back(std::make_shared<std::vector<messages::plan>>());
    platforms.push_back(sys.spawn(fake_platform, name, cfg.id, seen.back(), uint64_t{1},
                                  std::shared_ptr<std::vector<uint32_t>>{}));
    auto pred = sys.spawn(fake_predictor, name, cfg.id, speed[i]);
    self->send(b, join_atom::value, name, std::string{"local"},
               caf::actor_cast<caf::actor>(platforms.back()), caf::actor_cast<caf::actor>(pred),
               std::string{}, uint64_t{0}, std::string{}, std::string{});
  }
  sched.run();
  double expected[] = {1.0, 1.0, 1.0 / 3.0, 0.2};
  for (int i = 0; i < 4; ++i) {
    BOOST_REQUIRE_EQUAL(seen[i]->size(), 1u);
    BOOST_TEST(std::abs(seen[i]->back().ratio - expected[i]) < 1e-9);
    BOOST_TEST(seen[i]->back().adopt.empty());
  }
  // p3 goes down: 1 of 4 failed is past f_threshold (10 %), so the
  // survivors adopt its shard for the next epoch, in three parts.
  for (int i = 0; i < 3; ++i)
    self->send(b, report_atom::value, report(cfg.id, "p" + std::to_string(i), 0));
  self->send_exit(platforms[3], caf::exit_reason::kill);
  sched.run();
  std::set<uint32_t> parts;
  for (int i = 0; i < 3; ++i) {
    BOOST_REQUIRE_EQUAL(seen[i]->size(), 2u);
    auto& p = seen[i]->back();
    BOOST_TEST(p.epoch == 1u);
    BOOST_TEST((p.adopt == std::vector<std::string>{"p3"}));
    BOOST_TEST(p.adopt_parts == 3u);
    parts.insert(p.adopt_part);
  }
  BOOST_TEST(parts.size() == 3u);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  for (auto& p : platforms)
    self->send_exit(p, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(balancer_continues_a_saved_run_and_takes_platforms_back, fixture) {
  test::temp_dir dir;
  auto cfg = two_platforms(dir, "res", 4);
  auto test_set = tiny_test_set();
  // The saved run: epochs 0 and 1 evaluated.
  storage::run_state saved;
  saved.fingerprint = config::run_fingerprint(cfg);
  saved.run = "res-saved";
  saved.started_unix = 1e9;
  saved.epochs.push_back({0, 5, 5, 200, 1.0, 0.5, 2, 5, -1});
  saved.epochs.push_back({1, 10, 5, 200, 0.9, 0.6, 2, 10, -1});
  for (uint32_t e = 0; e < 2; ++e)
    for (auto name : {"p0", "p1"}) {
      saved.reports.push_back(storage::encode_report(report(cfg.id, name, e), cfg.id));
    }
  auto args = balancer_args_of(cfg, test_set, self);
  args.fingerprint = saved.fingerprint;
  args.resume = saved;
  auto b = spawn_tested_balancer(sys, cfg, args, test_set);
  auto [p0, seen0] = spawn_stand_in(sys, "p0", cfg.id);
  auto [p1, seen1] = spawn_stand_in(sys, "p1", cfg.id);
  join(self, b, "p0", "local", p0);
  sched.run();
  BOOST_TEST(seen0->empty());  // waits a few seconds for the others
  sched.advance_time(std::chrono::seconds(3));
  sched.run();
  // p1 did not join in time (its node is down): the run goes on without it,
  // at the epoch after the last evaluated one.
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);
  BOOST_TEST(seen0->back().epoch == 2u);
  BOOST_TEST(seen0->back().last_epoch == 3u);

  // p1 comes back mid-epoch: it is not waited for in epoch 2, planned in 3.
  join(self, b, "p1", "local", p1);
  sched.run();
  BOOST_TEST(seen1->empty());
  self->send(b, report_atom::value, report(cfg.id, "p0", 2));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 2u);
  BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
  BOOST_TEST(seen1->back().epoch == 3u);
  // Epoch 3 waits for both; a report sent twice counts once.
  self->send(b, report_atom::value, report(cfg.id, "p0", 3));
  self->send(b, report_atom::value, report(cfg.id, "p0", 3));
  sched.run();
  std::string run;
  bool done = false;
  self->receive_while([&] { return !done; })(
    [&](run_atom, const std::string&) {},
    [&](done_atom, messages::role, const std::string&, const std::string& r) {
      done = true;
      run = r;
    },
    caf::after(std::chrono::seconds(0)) >> [&] { done = true; });
  BOOST_TEST(run.empty());  // p1 has not reported epoch 3 yet
  self->send(b, report_atom::value, report(cfg.id, "p1", 3));
  sched.run();
  storage::run_state last;
  done = false;
  self->receive_while([&] { return !done; })(
    [&](run_atom, const std::string& bytes) {
      std::string problem;
      last = storage::parse_run_state(bytes, problem).value();
    },
    [&](done_atom, messages::role, const std::string&, const std::string& r) {
      done = true;
      run = r;
    });
  // The same run goes on: same name, its epochs and reports kept, finished.
  BOOST_TEST(run == "res-saved");
  BOOST_TEST(last.finished);
  BOOST_TEST(last.run == "res-saved");
  BOOST_REQUIRE_EQUAL(last.epochs.size(), 4u);
  BOOST_TEST(last.epochs[1].averaged_accuracy == 0.6);
  BOOST_TEST(last.epochs[2].platforms_up == 2u);
  BOOST_TEST(last.reports.size() == 7u);  // 4 saved + p0's epoch 2 + both of epoch 3
  auto rows = test::read_csv(dir / "runs/res-saved/cluster.csv");
  BOOST_TEST(rows.size() == 4u);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_FIXTURE_TEST_CASE(with_a_quorum_a_late_platform_joins_the_running_run, fixture) {
  test::temp_dir dir;
  auto setup = start_two_platform_run(sys, self, dir, "late", 3,
                                      [](config::cluster_config& c) { c.quorum = 1; });
  auto& [cfg, test_set, b, p0, seen0, p1, seen1] = setup;
  join(self, b, "p0", "local", p0);
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 1u);  // the quorum is there: the run starts
  join(self, b, "p1", "late", p1);
  sched.run();
  BOOST_TEST(seen1->empty());  // joins from the next epoch
  self->send(b, report_atom::value, report(cfg.id, "p0", 0));
  sched.run();
  BOOST_REQUIRE_EQUAL(seen0->size(), 2u);
  BOOST_REQUIRE_EQUAL(seen1->size(), 1u);
  BOOST_TEST(seen1->back().epoch == 1u);
  // From then on it is waited for like any other.
  self->send(b, report_atom::value, report(cfg.id, "p0", 1));
  sched.run();
  BOOST_TEST(seen0->size() == 2u);
  self->send(b, report_atom::value, report(cfg.id, "p1", 1));
  sched.run();
  BOOST_TEST(seen0->size() == 3u);
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_AUTO_TEST_CASE(store_keeps_typed_reports_and_checkpoints) {
  // The store actor runs detached (its own thread): a plain actor system.
  test::temp_dir dir;
  caf::actor_system_config sys_cfg;
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{sys_cfg};
  std::shared_ptr<storage::store> db = storage::store::open(dir / "db");
  store_options opts;
  opts.cluster_id = "kept";
  auto st = spawn_store(system, db, opts);
  caf::scoped_actor me{system};
  epoch_report r;
  r.platform = "p1";
  r.epoch = 2;
  r.samples = 1234;
  r.test_accuracy = 0.75;
  me->send(st, metrics_atom::value, std::string{"p1"}, uint64_t{2}, r);
  bool saved = false;
  me->request(st, std::chrono::seconds(30), checkpoint_atom::value, std::string{"p1"},
              uint64_t{3}, uint64_t{40}, 0.25, std::string{"model"}, std::string{"optimizer"})
    .receive([&](bool ok) { saved = ok; }, [&](caf::error&) {});
  BOOST_TEST(saved);
  // The report is kept as a Cap'n Proto record of this cluster.
  auto record = db->get(storage::family::metrics, storage::key("p1", 2));
  BOOST_REQUIRE(record);
  std::string problem;
  auto back = storage::decode_report(*record, "kept", problem);
  BOOST_REQUIRE_MESSAGE(back, problem);
  BOOST_TEST(back->samples == 1234u);
  BOOST_TEST(back->test_accuracy == 0.75);
  BOOST_TEST(!storage::decode_report(*record, "another", problem));
  BOOST_TEST(problem.find("cluster") != std::string::npos, problem);
  auto c = storage::load_latest_checkpoint(*db, "p1");
  BOOST_REQUIRE(c);
  BOOST_TEST(c->epoch == 3u);
  BOOST_TEST(c->gossip_weight == 0.25);
  me->send_exit(st, caf::exit_reason::user_shutdown);
}


namespace {

/// What a worker's commit on the lane got back: the model's version, or an
/// error.
struct lane_commit_result {
  std::optional<uint64_t> version;
  std::optional<caf::error> error;
};

/// A stand-in worker: sends the typed half of commit `number` of `worker`.
caf::behavior lane_committer(caf::event_based_actor* self, server_actor server,
                             std::string worker, uint64_t number,
                             std::shared_ptr<lane_commit_result> out) {
  self->request(server, caf::infinite, commit_atom::value, worker, number, 0.5, 0.0, false)
    .then([out](uint64_t version, int64_t, double) { out->version = version; },
          [out](caf::error& err) { out->error = err; });
  return {};
}

/// A zero update of LeNet-5 from `worker`, numbered `number`.
held_commit zero_update(const std::string& worker, uint64_t number) {
  auto m = learning::make_classifier("lenet5", 1, fashion);
  auto zeros = std::make_shared<std::vector<torch::Tensor>>();
  for (auto& p : learning::parameters(*m))
    zeros->push_back(torch::zeros_like(p));
  held_commit h;
  h.sender = worker;
  h.value.number = number;
  h.value.tensors = learning::to_views(learning::parameter_names(*m), *zeros);
  h.hold = zeros;
  return h;
}

} // namespace

BOOST_FIXTURE_TEST_CASE(server_pairs_a_lane_commits_halves_and_answers_the_model_on_the_lane,
                        fixture) {
  // The server's node's lane, and the lane of the worker's node (which
  // records the frames it gets).
  messages::lane_options so;
  so.cluster_id = "ps";
  so.node = "s";
  auto server_lane = std::make_shared<messages::lane>(so);
  server_lane->start([](const std::string&, const std::string&, messages::shared_buffer) {});
  struct frame {
    std::string from, target;
    messages::envelope env;
  };
  auto frames = std::make_shared<std::vector<frame>>();
  auto mutex = std::make_shared<std::mutex>();
  messages::lane_options wo = so;
  wo.node = "w";
  messages::lane worker_lane(wo);
  worker_lane.start([frames, mutex](const std::string& from, const std::string& target,
                                    messages::shared_buffer m) {
    std::lock_guard<std::mutex> lock(*mutex);
    frames->push_back({from, target, messages::decode(m->data(), m->size(), "ps")});
  });
  server_args args;
  args.model = "lenet5";
  args.shape = fashion;
  args.seed = 1;
  args.workers = {"p0"};
  args.schedule.model = learning::sync_model::async;
  args.schedule.commit_steps = 5;
  args.lane = server_lane;
  args.cluster_id = "ps";
  auto server = spawn_server(sys, args);
  const messages::lane_endpoint worker_at{"w", "127.0.0.1", worker_lane.port()};
  self->send(server, peers_atom::value, std::vector<std::string>{"p0"},
             std::vector<std::string>{messages::to_string(worker_at)}, std::vector<store_actor>{});
  sched.run();

  // The update first, then the typed half: paired, applied, answered.
  self->send(server, commit_atom::value, zero_update("p0", 1));
  sched.run();
  auto first = std::make_shared<lane_commit_result>();
  sys.spawn(lane_committer, server, std::string{"p0"}, uint64_t{1}, first);
  sched.run();
  BOOST_REQUIRE(first->version.has_value());
  BOOST_TEST(*first->version == 1u);
  // The typed half first, then the update.
  auto second = std::make_shared<lane_commit_result>();
  sys.spawn(lane_committer, server, std::string{"p0"}, uint64_t{2}, second);
  sched.run();
  BOOST_TEST(!second->version.has_value());  // waits for its update
  self->send(server, commit_atom::value, zero_update("p0", 2));
  sched.run();
  BOOST_REQUIRE(second->version.has_value());
  BOOST_TEST(*second->version == 2u);
  // Both models came on the lane, from the server, for p0, with their versions.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(*mutex);
      if (frames->size() >= 2)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(*mutex);
    BOOST_REQUIRE_EQUAL(frames->size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      auto& f = (*frames)[i];
      BOOST_TEST(f.from == "s");
      BOOST_TEST(f.target == "p0");
      BOOST_TEST(f.env.hdr.sender == std::string{server_name});
      auto& m = std::get<messages::global_model>(f.env.payload);
      BOOST_TEST(m.version == i + 1);
      BOOST_TEST(m.tensors.size() == 10u);
    }
  }

  // A typed half whose update never comes is answered `lost` once it
  // waited defaults::lane_commit_wait (at the next checkpoint tick).
  auto third = std::make_shared<lane_commit_result>();
  sys.spawn(lane_committer, server, std::string{"p0"}, uint64_t{3}, third);
  sched.run();
  BOOST_TEST(!third->version.has_value());
  BOOST_TEST(!third->error.has_value());
  for (int i = 0; i < 5 && !third->error; ++i) {
    std::this_thread::sleep_for(defaults::server_checkpoint_interval);  // the server's clock is real
    sched.advance_time(defaults::server_checkpoint_interval);
    sched.run();
  }
  BOOST_REQUIRE(third->error.has_value());
  BOOST_TEST(is(*third->error, ec::lost));
  BOOST_TEST(!third->version.has_value());
  // An update of a platform the server does not know is refused.
  auto stranger = std::make_shared<lane_commit_result>();
  self->send(server, commit_atom::value, zero_update("nobody", 1));
  sys.spawn(lane_committer, server, std::string{"nobody"}, uint64_t{1}, stranger);
  sched.run();
  BOOST_REQUIRE(stranger->error.has_value());
  BOOST_TEST(is(*stranger->error, ec::bad_request));
  self->send_exit(server, caf::exit_reason::user_shutdown);
  sched.run();
  server_lane->stop();
  worker_lane.stop();
}

BOOST_AUTO_TEST_SUITE_END()

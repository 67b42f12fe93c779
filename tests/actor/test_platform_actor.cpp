// Actor tests of a platform and its predictor (actors/platform/platform.cpp,
// actors/platform/predictor.cpp) on CAF's deterministic testing scheduler, with
// recording stand-ins for the store, mixer, predictor, node and balancer
// around them: the predictor's answers, its stored samples and restore; a
// platform's epoch (points trained, its report to the balancer and node, the
// checkpoint, the observations), gossip sends, merges, pause and resume, the
// deadline's cut and control requests. Every message is delivered by an
// explicit sched.run(); time moves only with sched.advance_time().
#include "actors/interfaces.hpp"
#include "actors/platform/platform.hpp"
#include "actors/platform/predictor.hpp"
#include "config/defaults.hpp"
#include "models/dataset.hpp"
#include "algorithms/gossip/gossip.hpp"
#include "models/model.hpp"
#include "algorithms/edgegossip/predictor.hpp"
#include "models/serialize.hpp"
#include "messages/codec.hpp"
#include "storage/store.hpp"
#include "actor_testing.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace eg;
using namespace eg::actors;

namespace {

using fixture = test::actor_fixture;
using namespace std::chrono_literals;

// -- what the stand-ins receive -------------------------------------------------

struct checkpoint_call {
  std::string platform;
  uint64_t epochs = 0;
  uint64_t iterations = 0;
  double weight = 0;
  std::string model;
  std::string optimizer;
};

struct metrics_call {
  std::string platform;
  uint64_t epoch = 0;
  epoch_report report;
};

struct store_call {
  std::string family;
  std::string key;
  std::string value;
};

struct send_call {
  std::string to;
  held_weights weights;  // a copy, made when the mixer got it
};

struct recorder {
  // store
  std::vector<checkpoint_call> checkpoints;
  std::vector<metrics_call> metrics;
  std::vector<store_call> stored;
  std::vector<std::string> restores;  // platforms whose checkpoint was asked back
  // mixer
  std::vector<send_call> sends;
  std::vector<send_call> to_balancer;  // models for the average, on the lane (to: its endpoint)
  int stats_requests = 0;
  epoch_report traffic;  // what the mixer answers a stats request with
  // predictor
  std::vector<std::pair<double, uint64_t>> observed;
  std::vector<messages::link_timing> links;  // the lane's epochs it was handed
  // node
  std::vector<epoch_report> node_reports;
  std::vector<std::pair<std::string, std::string>> node_done;
  // balancer
  std::vector<epoch_report> reports;
  std::vector<epoch_report> progress;

  uint64_t observed_samples() const {
    uint64_t n = 0;
    for (auto& o : observed)
      n += o.second;
    return n;
  }
};

using rec_ptr = std::shared_ptr<recorder>;

store_actor::behavior_type fake_store(store_actor::pointer, rec_ptr rec) {
  return {
    [rec](checkpoint_atom, const std::string& platform, uint64_t epochs, uint64_t iterations,
          double weight, const std::string& model, const std::string& optimizer) {
      rec->checkpoints.push_back({platform, epochs, iterations, weight, model, optimizer});
      return true;
    },
    [rec](metrics_atom, const std::string& platform, uint64_t epoch, const epoch_report& r) {
      rec->metrics.push_back({platform, epoch, r});
    },
    [rec](store_atom, const std::string& family, const std::string& key,
          const std::string& value) { rec->stored.push_back({family, key, value}); },
    [](flush_atom) { return true; },
    [rec](restore_atom, const std::string& platform)
      -> caf::result<bool, uint64_t, uint64_t, double, double, std::string, std::string> {
      rec->restores.push_back(platform);
      const double now = std::chrono::duration<double>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
      for (auto i = rec->checkpoints.rbegin(); i != rec->checkpoints.rend(); ++i)
        if (i->platform == platform)
          return {true, i->epochs, i->iterations, i->weight, now, i->model, i->optimizer};
      return {false, uint64_t{0}, uint64_t{0}, 0.0, 0.0, std::string{}, std::string{}};
    },
  };
}

mixer_actor::behavior_type fake_mixer(mixer_actor::pointer, rec_ptr rec) {
  return {
    [rec](send_atom, const std::string& to, const held_weights& w) {
      rec->sends.push_back({to, messages::copy_held(w)});
    },
    [](gossip_atom, const held_weights&) {},
    [](peers_atom, const std::vector<std::string>&, const std::vector<caf::actor>&,
       const std::vector<std::string>&) {},
    [rec](weights_atom, const std::string& lane, const held_weights& w) {
      // As the mixer does once the lane took the model: the header alone.
      rec->to_balancer.push_back({lane, messages::copy_held(w)});
      held_weights header{w.sender, w.value, nullptr, 0, 0};
      header.value.tensors.clear();
      return header;
    },
    [](commit_atom, const std::string&, const held_commit&) {},
    [](pull_atom, const std::string&, const held_global_model&) {},
    [rec](stats_atom) {
      ++rec->stats_requests;
      return rec->traffic;
    },
  };
}

predictor_actor::behavior_type fake_predictor(predictor_actor::pointer, rec_ptr rec) {
  return {
    [rec](observe_atom, double seconds, uint64_t samples) {
      rec->observed.emplace_back(seconds, samples);
    },
    [rec](observe_atom, double send_seconds, uint64_t bytes_sent, double receive_seconds,
          uint64_t bytes_received) {
      rec->links.push_back({bytes_sent, send_seconds, bytes_received, receive_seconds});
    },
    [](tick_atom) {},
    [](predict_atom) { return prediction{}; },
  };
}

node_actor::behavior_type fake_node(node_actor::pointer, rec_ptr rec) {
  return {
    [](hello_atom, const hello&,
       const std::vector<caf::actor>&) -> caf::result<hello, std::vector<caf::actor>> {
      return make_error(ec::refused, "a stand-in node");
    },
    [](dial_atom, const std::string&) {},
    [rec](done_atom, messages::role who, const std::string& name, const std::string& run) {
      if (who == messages::role::platform)
        rec->node_done.emplace_back(name, run);
    },
    [](done_atom) { return std::string{}; },
    [rec](report_atom, const epoch_report& r) { rec->node_reports.push_back(r); },
    [](wait_atom) { return std::string{"run"}; },
    [](control_atom, const control&) {},
    [](run_atom, const std::string&) {},
    [](elect_atom) {},
    [](where_atom) { return std::string{}; },
    [](classes_atom, const std::string&) -> caf::result<std::vector<std::string>, std::string> {
      return {std::vector<std::string>{}, std::string{}};
    },
    [](where_atom, const std::string&) { return std::string{}; },
    [](member_atom, const std::string&, const std::string&) { return std::string{}; },
    [](member_atom, const std::string&) {},
    [](withdraw_atom, const std::string&, const std::string&, const std::vector<std::string>&,
       const std::string&) { return false; },
    [](failed_atom, const std::string&) {},
    [](challenge_atom) { return std::string{"nonce"}; },
    [](inspect_atom, const std::string&, const std::string&) { return std::string{"{}"}; },
  };
}

/// The balancer's interface and one message more: the test asks it to send
/// a plan, so that the platform takes it for its balancer (the sender of
/// its plans) and reports to it.
using kick_atom = caf::atom_constant<caf::atom("kick")>;
using fake_balancer_actor = balancer_actor::extend<caf::reacts_to<kick_atom, caf::actor, plan>>;

fake_balancer_actor::behavior_type fake_balancer(fake_balancer_actor::pointer self, rec_ptr rec) {
  return {
    [self](kick_atom, const caf::actor& platform, const plan& p) {
      self->send(caf::actor_cast<platform_actor>(platform), plan_atom::value, p);
    },
    [](join_atom, const std::string&, const std::string&, const caf::actor&, const caf::actor&,
       const std::string&, uint64_t, const std::string&, const std::string&) {},
    [](failed_atom, const std::string&, const std::string&) {},
    [](withdraw_atom, const std::string&, const std::vector<std::string>&, const std::string&) {},
    [](server_atom, const std::string&) {},
    [](member_atom, const std::string&, const std::string&, uint16_t,
       const std::vector<std::string>&) {},
    [](testers_atom, const std::vector<std::string>&, const std::vector<caf::actor>&,
       const std::vector<uint64_t>&) {},
    [rec](report_atom, const epoch_report& r) { rec->reports.push_back(r); },
    [](weights_atom, const held_weights&) {},
    [rec](progress_atom, const epoch_report& r) { rec->progress.push_back(r); },
    [](tick_atom) {},
    [](start_atom) {},
    [](deadline_atom, uint32_t) {},
    [](inspect_atom, const control&, const std::string&) { return std::string{"{}"}; },
  };
}

// -- a platform among stand-ins --------------------------------------------------

/// 200 random 28x28 images: points 0..99 of classes 0..4, points 100..199
/// of classes 5..9 (the platforms below hold shards of the second half).
std::shared_ptr<const learning::dataset> train_set() {
  static auto data = [] {
    torch::manual_seed(42);
    auto labels = torch::arange(200, torch::kLong) % 5;
    labels.slice(0, 100, 200).add_(5);
    return std::make_shared<const learning::dataset>(test::random_images(200, labels));
  }();
  return data;
}

std::shared_ptr<const learning::dataset> test_set() {
  static auto data = [] {
    torch::manual_seed(43);
    auto d = std::make_shared<learning::dataset>(test::random_images(20));
    d->norm = train_set()->norm;  // as training normalises
    return d;
  }();
  return data;
}

/// Fashion-MNIST's model shape (the random images' too).
const learning::model_shape fashion = learning::fashion_mnist_shape();

struct rig_options {
  int64_t shard = 100;      // points 100 .. 100 + shard - 1
  int64_t batch = 16;
  int64_t platforms = 2;    // M: the initial gossip weight is 1 / M
  double exchange = 0;      // GoSGD's p
  double slowdown = 1;      // > 1: each step after the first waits in the timer queue
  config::merge_rule merge = config::merge_rule::gossip;
  std::string strategy = "gosgd";
  std::string topology = "uniform";
  int64_t overlap = 0;      // push-sum's tau (0: no waiting)
  int64_t gossip_every = 1; // push-sum's local steps per gossip round
  bool with_test_set = true; // false: a node without test data
  bool augment = false;      // data.augment: random crops and flips
  double lr = 0.05;
  int64_t max_rollbacks = 4;
  double rollback_lr_factor = 0.5;
  std::shared_ptr<const learning::dataset> data;  // null: train_set()
};

/// Ends the actors it is given when it goes (a failed BOOST_REQUIRE
/// included): delayed messages and request timeouts in the test clock keep
/// them alive, and the actor system's destructor would wait for them forever.
class actor_ender {
public:
  actor_ender(caf::scoped_actor& self, caf::scheduler::test_coordinator& sched)
      : self_(self), sched_(sched) {}
  actor_ender(const actor_ender&) = delete;
  actor_ender& operator=(const actor_ender&) = delete;
  ~actor_ender() {
    for (auto& a : actors_)
      self_->send_exit(a, caf::exit_reason::user_shutdown);
    sched_.run();
  }
  template <class Handle>
  Handle add(Handle h) {
    actors_.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

private:
  caf::scoped_actor& self_;
  caf::scheduler::test_coordinator& sched_;
  std::vector<caf::actor> actors_;
};

/// A platform "p0" of node "n0" among recording stand-ins; all of them end
/// with it.
struct rig {
  rec_ptr rec = std::make_shared<recorder>();
  actor_ender ender;
  fake_balancer_actor balancer;
  platform_actor platform;

  rig(caf::actor_system& sys, caf::scoped_actor& self, caf::scheduler::test_coordinator& sched,
      const rig_options& o = {})
      : ender(self, sched) {
    rec->traffic.bytes_sent = 1111;
    rec->traffic.bytes_received = 2222;
    rec->traffic.messages_sent = 3;
    rec->traffic.messages_received = 4;
    rec->traffic.messages_refused = 5;
    rec->traffic.received_from = {{"p1", 4, 2222}};
    rec->traffic.link = {3333, 0.25, 4444, 0.125};
    platform_args a;
    a.node_name = "n0";
    a.platform = {"p0", 1, 0.5, o.slowdown, {}};
    a.train.model = "logreg";
    a.train.lr = o.lr;
    a.train.max_rollbacks = o.max_rollbacks;
    a.train.rollback_lr_factor = o.rollback_lr_factor;
    a.train.batch = o.batch;
    a.train.evaluate_every = 1;
    a.strategy.exchange_probability = o.exchange;
    a.strategy.name = o.strategy;
    a.strategy.topology = o.topology;
    a.strategy.overlap = o.overlap;
    a.strategy.gossip_every = o.gossip_every;
    a.edgegossip.merge = o.merge;
    a.cluster_platforms = o.platforms;
    a.members = {"p0", "p1", "p2", "p3"};
    a.seed = 1;
    a.train_set = o.data ? o.data : train_set();
    a.test_set = o.with_test_set ? test_set() : nullptr;
    a.augment = o.augment;
    a.shard.resize(static_cast<size_t>(o.shard));
    std::iota(a.shard.begin(), a.shard.end(), int64_t{100});
    a.mixer = ender.add(sys.spawn(fake_mixer, rec));
    a.predictor = ender.add(sys.spawn(fake_predictor, rec));
    a.store = ender.add(sys.spawn(fake_store, rec));
    a.node = ender.add(sys.spawn(fake_node, rec));
    balancer = ender.add(sys.spawn(fake_balancer, rec));
    platform = ender.add(spawn_platform(sys, std::move(a)));
    sched.run();
  }
};

messages::plan plan_of(uint32_t epoch, double ratio, uint32_t last_epoch) {
  messages::plan p;
  p.epoch = epoch;
  p.ratio = ratio;
  p.last_epoch = last_epoch;
  return p;
}

/// The balancer stand-in sends the platform this plan (delivered by the
/// caller's sched.run()).
void send_plan(caf::scoped_actor& self, const rig& r, const messages::plan& p) {
  self->send(r.balancer, kick_atom::value, caf::actor_cast<caf::actor>(r.platform), p);
}

/// The tensors of a weights message, copied out.
std::vector<torch::Tensor> tensors_of(const held_weights& w) {
  std::vector<torch::Tensor> out;
  for (auto& v : w.value.tensors) {
    BOOST_REQUIRE(v.type == messages::dtype::float32);
    out.push_back(
      torch::from_blob(const_cast<void*>(v.data), v.shape, torch::kFloat32).clone());
  }
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].sizes().equals(b[i].sizes()) || !torch::equal(a[i], b[i]))
      return false;
  return true;
}

bool all_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].sizes().equals(b[i].sizes()) || !torch::allclose(a[i], b[i], 1e-5, 1e-6))
      return false;
  return true;
}

/// The platform's weights message now (request, run, receive: a blocking
/// receive before sched.run() would wait forever).
held_weights weights_of(caf::scoped_actor& self, caf::scheduler::test_coordinator& sched,
                        const platform_actor& p) {
  held_weights out;
  auto rh = self->request(p, caf::infinite, weights_atom::value);
  sched.run();
  rh.receive([&](held_weights& w) { out = std::move(w); },
             [&](caf::error& e) { BOOST_FAIL("weights request failed: " << caf::to_string(e)); });
  return out;
}

/// A control request's answer: true / false, or the error.
std::pair<std::optional<bool>, caf::error>
control_of(caf::scoped_actor& self, caf::scheduler::test_coordinator& sched,
           const platform_actor& p, messages::verb v) {
  std::pair<std::optional<bool>, caf::error> out;
  messages::control c;
  c.verb = v;
  auto rh = self->request(p, caf::infinite, control_atom::value, c);
  sched.run();
  rh.receive([&](bool ok) { out.first = ok; }, [&](caf::error& e) { out.second = std::move(e); });
  return out;
}

/// A model's parameters as a weights message, with gossip weight w and the
/// sender's rate r (0: not given).
held_weights model_weights(const std::string& model, uint64_t seed, double w, double r = 0) {
  auto m = learning::make_classifier(model, seed, fashion);
  held_weights h;
  h.sender = "p1";
  h.value.gossip_weight = w;
  h.value.rate = r;
  h.value.tensors = learning::to_views(learning::parameter_names(*m), learning::parameters(*m));
  for (auto& t : h.value.tensors)
    h.wire_bytes += t.bytes;
  h.hold = m;
  return h;
}

/// A push-sum share (weight 0.5) `sender` sent after its step `iteration`.
held_weights sent_at(const std::string& sender, uint64_t iteration) {
  auto m = model_weights("logreg", 2, 0.5);
  m.sender = sender;
  m.value.iteration = iteration;
  return m;
}

/// Advances the test clock a second at a time (delayed steps of a slowed
/// platform) until the balancer has `reports` reports, at most `rounds` times.
void run_until_reports(caf::scheduler::test_coordinator& sched, const rig& r, size_t reports,
                       int rounds = 50) {
  for (int i = 0; i < rounds && r.rec->reports.size() < reports; ++i) {
    sched.advance_time(1s);
    sched.run();
  }
}

// -- the predictor ------------------------------------------------------------

store_actor spawn_recording_store(caf::actor_system& sys, rec_ptr rec) {
  return sys.spawn(fake_store, rec);
}

prediction predict(caf::scoped_actor& self, caf::scheduler::test_coordinator& sched,
                   const predictor_actor& p) {
  prediction out;
  auto rh = self->request(p, caf::infinite, predict_atom::value);
  sched.run();
  rh.receive([&](prediction& x) { out = std::move(x); },
             [&](caf::error& e) { BOOST_FAIL("predict request failed: " << caf::to_string(e)); });
  return out;
}

/// The samples of a stored predictor record: (core, net, disk, wait, seconds
/// per point) per line after the header.
std::vector<std::vector<double>> samples_of(const std::string& record) {
  std::istringstream in(record);
  std::string line;
  std::getline(in, line);  // the header
  std::vector<std::vector<double>> out;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<double> v;
    double x;
    while (fields >> x)
      v.push_back(x);
    out.push_back(v);
  }
  return out;
}

/// The contention a prediction was made for (what it reports).
learning::contention contention_of(const prediction& p) {
  return {p.core, p.net, p.disk, p.wait};
}

} // namespace

BOOST_AUTO_TEST_SUITE(platform_actor_suite)

// -- predictor -------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_fresh_predictor_predicts_nothing_and_its_tick_stays_in_the_timer,
                        fixture) {
  auto rec = std::make_shared<recorder>();
  actor_ender ender{self, sched};
  auto p = ender.add(spawn_predictor(sys, {"p0", ender.add(spawn_recording_store(sys, rec)), ""}));
  sched.run();  // starts it: it arms its first tick
  auto x = predict(self, sched, p);
  BOOST_TEST(x.platform == "p0");
  BOOST_TEST(x.observations == 0u);
  BOOST_TEST(x.throughput == 0.0);
  BOOST_TEST(x.seconds_per_point == 0.0);
  BOOST_TEST(x.t0 == 0.0);
  // One tick in the timer queue, due every 500 ms (defaults::contention_sampling),
  // re-armed by each: sched.run() never loops on it.
  BOOST_TEST(sched.advance_time(400ms) == 0u);
  BOOST_TEST(sched.advance_time(100ms) == 1u);
  sched.run();
  BOOST_TEST(sched.advance_time(499ms) == 0u);
  BOOST_TEST(sched.advance_time(1ms) == 1u);
  sched.run();
  BOOST_TEST(predict(self, sched, p).observations == 0u);
  BOOST_TEST(rec->stored.empty());
}

BOOST_FIXTURE_TEST_CASE(a_predictor_stores_its_samples_every_ten_observations_and_predicts_from_them,
                        fixture) {
  auto rec = std::make_shared<recorder>();
  actor_ender ender{self, sched};
  auto p = ender.add(spawn_predictor(sys, {"p0", ender.add(spawn_recording_store(sys, rec)), ""}));
  sched.run();
  // 20 observations of 2 to 2.5 ms per point, and five that say nothing
  // (no points, no time, a time that is not a number): ignored.
  std::vector<double> expected_t;
  for (int i = 0; i < 20; ++i) {
    double seconds = 0.1 + 0.005 * (i % 5);
    uint64_t samples = 50;
    expected_t.push_back(seconds / static_cast<double>(samples));
    self->send(p, observe_atom::value, seconds, samples);
    if (i == 3)
      self->send(p, observe_atom::value, 0.5, uint64_t{0});
    if (i == 7)
      self->send(p, observe_atom::value, 0.0, uint64_t{10});
    if (i == 11)
      self->send(p, observe_atom::value, -1.0, uint64_t{10});
    if (i == 13) {  // not a time: ignored, and the predictor lives on
      self->send(p, observe_atom::value, std::numeric_limits<double>::infinity(), uint64_t{10});
      self->send(p, observe_atom::value, std::nan(""), uint64_t{10});
    }
  }
  sched.run();
  BOOST_REQUIRE_EQUAL(rec->stored.size(), 2u);
  for (auto& s : rec->stored) {
    BOOST_TEST(s.family == storage::name(storage::family::predictor));
    BOOST_TEST(s.family == "predictor");
    BOOST_TEST(s.key == storage::key("p0", 0));
  }
  auto first = samples_of(rec->stored[0].value);
  auto second = samples_of(rec->stored[1].value);
  BOOST_REQUIRE_EQUAL(first.size(), 10u);
  BOOST_REQUIRE_EQUAL(second.size(), 20u);
  for (size_t k = 0; k < second.size(); ++k) {
    BOOST_REQUIRE_EQUAL(second[k].size(), 5u);
    BOOST_TEST(second[k][4] == expected_t[k]);  // seconds per point, exactly
    if (k < first.size())
      BOOST_TEST(first[k] == second[k]);
  }
  // The prediction is the stored model's, for the contention it reports.
  learning::slowdown_model replica;
  replica.restore(rec->stored[1].value);
  auto x = predict(self, sched, p);
  BOOST_TEST(x.observations == 20u);
  BOOST_TEST(x.t0 > 0.0);
  BOOST_TEST(x.t0 <= *std::max_element(expected_t.begin(), expected_t.end()));
  BOOST_TEST(x.t0 == replica.t0(), boost::test_tools::tolerance(1e-12));
  auto now = contention_of(x);
  BOOST_TEST(x.seconds_per_point == replica.seconds_per_point(now),
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(x.throughput == replica.throughput(now), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(x.throughput * x.seconds_per_point == 1.0, boost::test_tools::tolerance(1e-9));
  // Five more: counted, not stored before the tenth.
  for (int i = 0; i < 5; ++i)
    self->send(p, observe_atom::value, 0.1, uint64_t{50});
  sched.run();
  BOOST_TEST(predict(self, sched, p).observations == 25u);
  BOOST_TEST(rec->stored.size() == 2u);
}

BOOST_FIXTURE_TEST_CASE(a_predictor_restores_saved_samples_and_survives_corrupt_ones, fixture) {
  learning::slowdown_model saved;
  for (int i = 0; i < 7; ++i)
    saved.observe({0.1 * i, 1.0 + i, 0.5, 0.05 * i}, 0.004 + 0.0002 * i);
  auto rec = std::make_shared<recorder>();
  actor_ender ender{self, sched};
  auto store = ender.add(spawn_recording_store(sys, rec));
  auto warm = ender.add(spawn_predictor(sys, {"p0", store, saved.serialize()}));
  // A store record that is not one, and one with a malformed line.
  auto garbage = ender.add(spawn_predictor(sys, {"p1", store, "not a predictor record"}));
  auto text = saved.serialize();
  auto broken =
    ender.add(spawn_predictor(sys, {"p2", store, text.substr(0, text.size() - 3) + "x y\n"}));
  sched.run();
  auto x = predict(self, sched, warm);
  BOOST_TEST(x.observations == 7u);
  BOOST_TEST(x.t0 == saved.t0(), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(x.seconds_per_point == saved.seconds_per_point(contention_of(x)),
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(x.throughput > 0.0);
  // Between epochs the wait is the newest sample's (the platform's training).
  BOOST_TEST(x.wait == 0.3, boost::test_tools::tolerance(1e-12));
  for (auto& empty : {garbage, broken}) {
    auto y = predict(self, sched, empty);
    BOOST_TEST(y.observations == 0u);
    BOOST_TEST(y.throughput == 0.0);
    // Alive, and learning from scratch.
    self->send(empty, observe_atom::value, 0.2, uint64_t{100});
    sched.run();
    auto z = predict(self, sched, empty);
    BOOST_TEST(z.observations == 1u);
    BOOST_TEST(z.seconds_per_point > 0.0);
  }
}

// -- platform --------------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(a_platform_without_test_data_trains_and_is_not_evaluated, fixture) {
  // A node without test data, with augmented batches: an epoch trains, its
  // report says it was not evaluated.
  auto trained = [&](bool augment) {
    rig_options o;
    o.with_test_set = false;
    o.augment = augment;
    rig r{sys, self, sched, o};
    send_plan(self, r, plan_of(0, 1.0, 1));
    sched.run();
    BOOST_REQUIRE_EQUAL(r.rec->reports.size(), 1u);
    auto& rep = r.rec->reports[0];
    BOOST_TEST(rep.samples == 100u);
    BOOST_TEST(std::isfinite(rep.train_loss));
    BOOST_TEST(rep.test_loss == -1.0);
    BOOST_TEST(rep.test_accuracy == -1.0);
    return tensors_of(weights_of(self, sched, r.platform));
  };
  const auto plain = trained(false);
  const auto augmented = trained(true);
  // The same plan (the same seed), other batches: other weights.
  BOOST_TEST(!same(plain, augmented));
  BOOST_TEST(same(augmented, trained(true)));  // augmentation is seeded
}

/// train_set() with its samples as float32 and point `bad` not a number:
/// the batch that holds it has a training loss that is not a finite number,
/// and a step on it leaves the model a NaN (a scripted runaway).
std::shared_ptr<const learning::dataset> poisoned_set(int64_t bad) {
  auto d = std::make_shared<learning::dataset>(*train_set());
  d->samples = train_set()->samples.to(torch::kFloat32).div(255);
  d->samples[bad].fill_(std::numeric_limits<float>::quiet_NaN());
  return d;
}

bool finite(const std::vector<torch::Tensor>& ts) {
  for (auto& t : ts)
    if (!torch::isfinite(t).all().item<bool>())
      return false;
  return true;
}

std::vector<torch::Tensor> checkpoint_params(const checkpoint_call& c) {
  auto m = learning::make_classifier("logreg", 7, fashion);
  learning::load_model(*m, c.model);
  std::vector<torch::Tensor> out;
  for (auto& p : learning::parameters(*m))
    out.push_back(p.detach().clone());
  return out;
}

// A scripted runaway: one batch of every epoch holds a point that is not a
// number. The step on it leaves the model NaN; the platform goes back to
// its checkpoint (where it began, in the first epoch), slower, and the
// epoch goes on. Nothing it saves or sends holds a NaN, and it learns.
BOOST_FIXTURE_TEST_CASE(a_platform_whose_model_runs_away_goes_back_to_its_checkpoint,
                        fixture) {
  rig_options o;
  o.data = poisoned_set(150);
  o.exchange = 1;  // a message after every step
  o.max_rollbacks = 4;
  rig r{sys, self, sched, o};
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p1"});
  const auto initial = tensors_of(weights_of(self, sched, r.platform));
  for (uint32_t e = 0; e < 3; ++e) {
    send_plan(self, r, plan_of(e, 1.0, 2));
    sched.run();
  }
  auto& rec = *r.rec;
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 3u);
  // One rollback an epoch, each asking the store for the newest checkpoint.
  BOOST_TEST(rec.restores == (std::vector<std::string>{"p0", "p0", "p0"}));
  for (auto& rep : rec.reports) {
    BOOST_TEST(std::isfinite(rep.train_loss), "epoch " << rep.epoch);
    BOOST_TEST(rep.samples == 100u);  // the epoch went on after it
    BOOST_TEST(rep.rollbacks == 1u, "epoch " << rep.epoch);  // each epoch's own, not the sum
  }
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 3u);
  for (auto& c : rec.checkpoints)
    BOOST_TEST(finite(checkpoint_params(c)), "checkpoint after epoch " << c.epochs);
  // A message after every step (7 batches of 16 an epoch); after the ones
  // that ran away it carries the model rolled back to.
  BOOST_TEST(rec.sends.size() == 3u * 7u);
  for (auto& send : rec.sends)
    BOOST_TEST(finite(tensors_of(send.weights)));
  // It learnt: the model moved from where it began and is no NaN.
  const auto now = tensors_of(weights_of(self, sched, r.platform));
  BOOST_TEST(finite(now));
  BOOST_TEST(!same(now, initial));
  BOOST_TEST(rec.reports.back().train_loss < rec.reports.front().train_loss);
}

// With no rollback left, a platform whose model runs away leaves the run
// (the balancer sees it down and hands its data to the others); its last
// good checkpoint stays the newest, never overwritten by a NaN model.
BOOST_FIXTURE_TEST_CASE(a_platform_that_keeps_running_away_leaves_the_run, fixture) {
  rig_options o;
  o.data = poisoned_set(150);
  o.max_rollbacks = 1;
  rig r{sys, self, sched, o};
  self->monitor(r.platform);
  send_plan(self, r, plan_of(0, 1.0, 2));
  sched.run();
  BOOST_REQUIRE_EQUAL(r.rec->reports.size(), 1u);  // one rollback, the epoch done
  BOOST_TEST(r.rec->reports[0].rollbacks == 1u);
  send_plan(self, r, plan_of(1, 1.0, 2));
  sched.run();
  BOOST_TEST(r.rec->reports.size() == 1u);  // the second ran away again: gone
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds(0)) >> [] {});
  BOOST_TEST(down);
  BOOST_REQUIRE_EQUAL(r.rec->checkpoints.size(), 1u);
  BOOST_TEST(finite(checkpoint_params(r.rec->checkpoints[0])));
}

BOOST_FIXTURE_TEST_CASE(an_epoch_trains_its_share_and_reports_it_everywhere, fixture) {
  rig r{sys, self, sched};
  auto initial = tensors_of(weights_of(self, sched, r.platform));
  // 37.5 % of 100 points: ceil -> 38 points, batches of 16, 16 and 6.
  send_plan(self, r, plan_of(0, 0.375, 1));
  sched.run();
  auto& rec = *r.rec;
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  auto& rep = rec.reports[0];
  BOOST_TEST(rep.platform == "p0");
  BOOST_TEST(rep.node == "n0");
  BOOST_TEST(rep.epoch == 0u);
  BOOST_TEST(rep.ratio == 0.375);
  BOOST_TEST(rep.samples == 38u);
  BOOST_TEST(rep.planned_samples == 38u);
  BOOST_TEST(rep.iterations == 3u);
  BOOST_TEST(std::isfinite(rep.train_loss));
  BOOST_TEST(rep.train_loss > 0.0);
  BOOST_TEST(rep.gossip_weight == 0.5);  // 1 / M, no exchange
  BOOST_TEST(rep.test_loss > 0.0);       // evaluated every epoch
  BOOST_TEST(rep.test_accuracy >= 0.0);
  BOOST_TEST(rep.test_accuracy <= 1.0);
  // Only points of its shard (classes 5 to 9) were trained.
  BOOST_REQUIRE_EQUAL(rep.class_samples.size(), 10u);
  BOOST_TEST(std::accumulate(rep.class_samples.begin(), rep.class_samples.begin() + 5,
                             uint64_t{0}) == 0u);
  BOOST_TEST(std::accumulate(rep.class_samples.begin(), rep.class_samples.end(), uint64_t{0})
             == 38u);
  // The mixer's traffic counters, asked once, are in the report.
  BOOST_TEST(rec.stats_requests == 1);
  BOOST_TEST(rep.bytes_sent == 1111u);
  BOOST_TEST(rep.bytes_received == 2222u);
  BOOST_TEST(rep.messages_sent == 3u);
  BOOST_TEST(rep.messages_received == 4u);
  BOOST_TEST(rep.messages_refused == 5u);  // none refused here + the mixer's
  BOOST_TEST(rep.rollbacks == 0u);
  BOOST_REQUIRE_EQUAL(rep.received_from.size(), 1u);
  BOOST_TEST(rep.received_from[0].peer == "p1");
  // The lane's timings of the epoch are in the report, and went to the
  // predictor, which learns the link from them.
  BOOST_TEST(rep.link.bytes_sent == 3333u);
  BOOST_TEST(rep.link.receive_seconds == 0.125);
  BOOST_REQUIRE_EQUAL(rec.links.size(), 1u);
  BOOST_TEST(rec.links[0].bytes_sent == 3333u);
  BOOST_TEST(rec.links[0].send_seconds == 0.25);
  BOOST_TEST(rec.links[0].bytes_received == 4444u);
  BOOST_TEST(rec.links[0].receive_seconds == 0.125);
  // The same report to the node and, as metrics, to the store.
  BOOST_REQUIRE_EQUAL(rec.node_reports.size(), 1u);
  BOOST_TEST(rec.node_reports[0].samples == 38u);
  BOOST_TEST(rec.node_reports[0].train_loss == rep.train_loss);
  BOOST_REQUIRE_EQUAL(rec.metrics.size(), 1u);
  BOOST_TEST(rec.metrics[0].platform == "p0");
  BOOST_TEST(rec.metrics[0].epoch == 0u);
  BOOST_TEST(rec.metrics[0].report.iterations == 3u);
  // Its predictor observed every point trained.
  BOOST_REQUIRE(!rec.observed.empty());
  BOOST_TEST(rec.observed_samples() == 38u);
  for (auto& o : rec.observed)
    BOOST_TEST(o.first > 0.0);
  // The checkpoint: one epoch done, 3 iterations, the weight, the trained model.
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 1u);
  auto& cp = rec.checkpoints[0];
  BOOST_TEST(cp.platform == "p0");
  BOOST_TEST(cp.epochs == 1u);
  BOOST_TEST(cp.iterations == 3u);
  BOOST_TEST(cp.weight == 0.5);
  BOOST_TEST(!cp.optimizer.empty());
  auto now = weights_of(self, sched, r.platform);
  auto trained = tensors_of(now);
  BOOST_TEST(!same(trained, initial));
  auto restored = learning::make_classifier("logreg", 7, fashion);
  learning::load_model(*restored, cp.model);
  BOOST_TEST(same(learning::parameters(*restored), trained));
  BOOST_TEST(now.value.iteration == 3u);
  BOOST_TEST(rec.sends.empty());  // no exchange configured

  // Epoch 1, the whole shard: 100 points in 7 iterations.
  send_plan(self, r, plan_of(1, 1.0, 1));
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 2u);
  BOOST_TEST(rec.reports[1].epoch == 1u);
  BOOST_TEST(rec.reports[1].samples == 100u);
  BOOST_TEST(rec.reports[1].iterations == 7u);
  BOOST_TEST(rec.observed_samples() == 138u);
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 2u);
  BOOST_TEST(rec.checkpoints[1].epochs == 2u);
  BOOST_TEST(rec.checkpoints[1].iterations == 10u);

  // A balancer that plans epoch 1 again (it took over and lost the report)
  // gets the report again; nothing is trained.
  send_plan(self, r, plan_of(1, 1.0, 1));
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 3u);
  BOOST_TEST(rec.reports[2].epoch == 1u);
  BOOST_TEST(rec.reports[2].samples == 100u);
  BOOST_TEST(rec.checkpoints.size() == 2u);
  BOOST_TEST(rec.node_reports.size() == 2u);

  // The run is over: a final checkpoint, then the node hears it.
  self->send(r.platform, done_atom::value, std::string{"run-7"});
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 3u);
  BOOST_TEST(rec.checkpoints[2].iterations == 10u);
  BOOST_REQUIRE_EQUAL(rec.node_done.size(), 1u);
  BOOST_TEST(rec.node_done[0].first == "p0");
  BOOST_TEST(rec.node_done[0].second == "run-7");
  // Finished: a plan is ignored.
  send_plan(self, r, plan_of(2, 1.0, 2));
  sched.run();
  BOOST_TEST(rec.reports.size() == 3u);
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 10u);
}

BOOST_FIXTURE_TEST_CASE(with_gossip_it_sends_half_its_weight_to_a_peer_it_was_told, fixture) {
  rig_options o;
  o.shard = 48;  // 3 iterations
  o.platforms = 4;
  o.exchange = 1;  // GoSGD's p = 1: a message after every step
  rig r{sys, self, sched, o};
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p1", "p2"});
  send_plan(self, r, plan_of(0, 1.0, 0));
  sched.run();
  auto& rec = *r.rec;
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  BOOST_TEST(rec.reports[0].iterations == 3u);
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 3u);
  double weight = 0.25;
  for (size_t k = 0; k < rec.sends.size(); ++k) {
    auto& s = rec.sends[k];
    weight /= 2;
    BOOST_TEST((s.to == "p1" || s.to == "p2"), s.to);
    BOOST_TEST(s.weights.sender == "p0");
    BOOST_TEST(s.weights.value.gossip_weight == weight);
    BOOST_TEST(s.weights.value.iteration == k + 1);
    BOOST_TEST(s.weights.value.epoch == 0u);
    BOOST_TEST(s.weights.value.rate == 1.0);
    BOOST_REQUIRE_EQUAL(s.weights.value.tensors.size(), 2u);  // fc.weight, fc.bias
    BOOST_TEST(s.weights.wire_bytes == (784u * 10u + 10u) * 4u);
  }
  // It keeps the other half: the report and its weights say 1/4 / 2^3.
  BOOST_TEST(rec.reports[0].gossip_weight == 0.25 / 8);
  auto now = weights_of(self, sched, r.platform);
  BOOST_TEST(now.value.gossip_weight == 0.25 / 8);
  // The last message carried the parameters as they are after the last step.
  BOOST_TEST(same(tensors_of(rec.sends.back().weights), tensors_of(now)));
  BOOST_TEST(!same(tensors_of(rec.sends.front().weights), tensors_of(now)));
  // Peers change: from now on only p3 is picked.
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p3"});
  send_plan(self, r, plan_of(1, 1.0, 1));
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 6u);
  for (size_t k = 3; k < 6; ++k)
    BOOST_TEST(rec.sends[k].to == "p3");
}

BOOST_FIXTURE_TEST_CASE(with_no_peer_to_send_to_no_weight_leaves, fixture) {
  rig_options o;
  o.shard = 48;  // 3 iterations
  o.platforms = 4;
  o.exchange = 1;
  rig r{sys, self, sched, o};
  send_plan(self, r, plan_of(0, 1.0, 0));  // no peers told
  sched.run();
  BOOST_REQUIRE_EQUAL(r.rec->reports.size(), 1u);
  BOOST_TEST(r.rec->sends.empty());
  BOOST_TEST(r.rec->reports[0].gossip_weight == 0.25);
  BOOST_TEST(weights_of(self, sched, r.platform).value.gossip_weight == 0.25);
}

BOOST_FIXTURE_TEST_CASE(push_sum_with_overlap_1_waits_for_its_in_neighbours_message, fixture) {
  // tau = 1 on the exponential graph over p0..p3: before step k + 1, p0
  // waits for the message its in-neighbour sent at iteration k (k = 1: p2,
  // k = 2: p3, k = 3: p2). A silent one is waited for for
  // defaults::overlap_wait, then not again this epoch.
  rig_options o;
  o.shard = 64;  // 4 iterations
  o.platforms = 4;
  o.strategy = "sgp";
  o.topology = "exponential";
  o.overlap = 1;
  rig r{sys, self, sched, o};
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p1", "p2", "p3"});
  send_plan(self, r, plan_of(0, 1.0, 0));
  sched.run();
  auto& rec = *r.rec;
  BOOST_TEST(rec.sends.size() == 1u);  // step 1 needs no one; step 2 waits for p2
  self->send(r.platform, merge_atom::value, sent_at("p3", 1));  // not the one it waits for
  sched.run();
  BOOST_TEST(rec.sends.size() == 1u);
  self->send(r.platform, merge_atom::value, sent_at("p2", 1));
  sched.run();
  BOOST_TEST(rec.sends.size() == 2u);  // step 2 ran; step 3 waits for p3's iteration 2
  BOOST_TEST(rec.reports.empty());
  sched.advance_time(defaults::overlap_wait);
  sched.run();
  // p3 given up: step 3 ran; step 4 waits for p2's iteration 3, then gives up.
  BOOST_TEST(rec.sends.size() == 3u);
  sched.advance_time(defaults::overlap_wait);
  sched.run();
  BOOST_TEST(rec.sends.size() == 4u);
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  BOOST_TEST(rec.reports[0].iterations == 4u);
}

BOOST_FIXTURE_TEST_CASE(push_sum_gossiping_every_2_steps_counts_rounds_for_graph_and_wait, fixture) {
  // gossip_every = 2, tau = 1, exponential graph over p0..p3: p0 sends after
  // steps 2, 4 and 6 only (gossip rounds 1, 2, 3), to p0 + 2^(round mod 2):
  // p2, p1, p2. Steps 3 and 4 wait for the round-1 message of round 1's
  // in-neighbour (p2, sent after its step 2); steps 5 and 6 for p3's round 2.
  rig_options o;
  o.shard = 96;  // 6 iterations
  o.platforms = 4;
  o.strategy = "sgp";
  o.topology = "exponential";
  o.overlap = 1;
  o.gossip_every = 2;
  rig r{sys, self, sched, o};
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p1", "p2", "p3"});
  send_plan(self, r, plan_of(0, 1.0, 0));
  sched.run();
  auto& rec = *r.rec;
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 1u);  // after step 2; step 3 waits
  BOOST_TEST(rec.sends[0].to == "p2");
  BOOST_TEST(rec.sends[0].weights.value.iteration == 2u);
  BOOST_TEST(rec.sends[0].weights.value.gossip_weight == 0.5);  // one send, one halving
  self->send(r.platform, merge_atom::value, sent_at("p3", 2));  // round 1, but not its in-neighbour
  sched.run();
  BOOST_TEST(rec.sends.size() == 1u);
  self->send(r.platform, merge_atom::value, sent_at("p2", 2));
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 2u);  // steps 3 and 4 ran; step 5 waits for p3's round 2
  BOOST_TEST(rec.sends[1].to == "p1");
  BOOST_TEST(rec.sends[1].weights.value.iteration == 4u);
  self->send(r.platform, merge_atom::value, sent_at("p3", 4));
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 3u);
  BOOST_TEST(rec.sends[2].to == "p2");
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  BOOST_TEST(rec.reports[0].iterations == 6u);
}

BOOST_FIXTURE_TEST_CASE(push_sum_on_the_exponential_graph_sends_half_to_each_hop, fixture) {
  // SGP, members p0..p3 all live: after its k-th step (k = 1, 2, ...) p0
  // sends to p0 + 2^(k mod 2): p2, p1, p2, p1, keeping half of its push-sum
  // weight (1 at the start) at every step.
  rig_options o;
  o.shard = 64;  // 4 iterations
  o.platforms = 4;
  o.strategy = "sgp";
  o.topology = "exponential";
  rig r{sys, self, sched, o};
  self->send(r.platform, peers_atom::value, std::vector<std::string>{"p1", "p2", "p3"});
  send_plan(self, r, plan_of(0, 1.0, 0));
  sched.run();
  auto& rec = *r.rec;
  BOOST_REQUIRE_EQUAL(rec.sends.size(), 4u);
  const std::vector<std::string> hops{"p2", "p1", "p2", "p1"};
  double w = 1;
  for (size_t k = 0; k < 4; ++k) {
    w /= 2;
    BOOST_TEST(rec.sends[k].to == hops[k]);
    BOOST_TEST(rec.sends[k].weights.value.gossip_weight == w);
  }
  BOOST_TEST(rec.reports.at(0).gossip_weight == 1.0 / 16);
  // A share received: z <- (w z + s z_s) / (w + s), w <- w + s, rates unused.
  auto before = weights_of(self, sched, r.platform);
  auto x = tensors_of(before);
  auto received = model_weights("logreg", 2, 3.0 / 16, 0.5);
  auto y = tensors_of(received);
  self->send(r.platform, merge_atom::value, received);
  sched.run();
  auto after = weights_of(self, sched, r.platform);
  BOOST_TEST(after.value.gossip_weight == 0.25);
  std::vector<torch::Tensor> expected;
  for (size_t i = 0; i < x.size(); ++i)
    expected.push_back(0.25 * x[i] + 0.75 * y[i]);
  BOOST_TEST(all_close(tensors_of(after), expected));
  // The balancer's rescale: the weight times the factor, the model as it was;
  // a factor that is not a positive number is ignored.
  self->send(r.platform, rescale_atom::value, 4.0);
  self->send(r.platform, rescale_atom::value, -1.0);
  self->send(r.platform, rescale_atom::value, std::nan(""));
  sched.run();
  auto scaled = weights_of(self, sched, r.platform);
  BOOST_TEST(scaled.value.gossip_weight == 1.0);
  BOOST_TEST(same(tensors_of(scaled), tensors_of(after)));
}

BOOST_FIXTURE_TEST_CASE(a_balancer_on_another_node_gets_the_model_on_the_weights_lane, fixture) {
  rig_options o;
  o.platforms = 4;
  rig r{sys, self, sched, o};
  const auto whole = weights_of(self, sched, r.platform);
  BOOST_REQUIRE(!whole.value.tensors.empty());
  // Asked with the balancer's lane: the model goes to the mixer for the
  // lane, and the answer is its header alone (same epoch and iteration).
  std::optional<held_weights> answer;
  auto rh = self->request(r.platform, caf::infinite, weights_atom::value,
                          std::string{"a@10.0.0.1:47502"});
  sched.run();
  rh.receive([&](held_weights& w) { answer = std::move(w); },
             [&](caf::error& e) { BOOST_FAIL("weights request failed: " << caf::to_string(e)); });
  BOOST_REQUIRE(answer.has_value());
  BOOST_TEST(answer->value.tensors.empty());
  BOOST_TEST(answer->value.gossip_weight == whole.value.gossip_weight);
  BOOST_TEST(answer->value.iteration == whole.value.iteration);
  BOOST_REQUIRE_EQUAL(r.rec->to_balancer.size(), 1u);
  BOOST_TEST(r.rec->to_balancer[0].to == "a@10.0.0.1:47502");
  BOOST_TEST(same(tensors_of(r.rec->to_balancer[0].weights), tensors_of(whole)));
  BOOST_TEST(r.rec->sends.empty());  // no gossip message
  // Without a lane (a balancer in this process): the whole model, no mixer.
  auto again = weights_of(self, sched, r.platform);
  BOOST_TEST(!again.value.tensors.empty());
  BOOST_TEST(r.rec->to_balancer.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(gosgd_ignores_a_rescale, fixture) {
  rig_options o;
  o.platforms = 4;
  rig r{sys, self, sched, o};
  self->send(r.platform, rescale_atom::value, 2.0);
  sched.run();
  BOOST_TEST(weights_of(self, sched, r.platform).value.gossip_weight == 0.25);
}

BOOST_FIXTURE_TEST_CASE(a_merge_mixes_the_received_model_by_the_strategys_rule, fixture) {
  // GoSGD's rule: x <- (a x + a_s x_s) / (a + a_s), a <- a + a_s.
  {
    rig_options o;
    o.platforms = 4;  // a = 0.25
    rig r{sys, self, sched, o};
    auto x = tensors_of(weights_of(self, sched, r.platform));
    auto received = model_weights("logreg", 2, 0.75);
    auto y = tensors_of(received);
    BOOST_REQUIRE(!same(x, y));
    self->send(r.platform, merge_atom::value, received);
    sched.run();
    auto after = weights_of(self, sched, r.platform);
    BOOST_TEST(after.value.gossip_weight == 1.0);
    std::vector<torch::Tensor> expected;
    for (size_t i = 0; i < x.size(); ++i)
      expected.push_back(0.25 * x[i] + 0.75 * y[i]);
    BOOST_TEST(all_close(tensors_of(after), expected));
    // Weights of another model (LeNet-5): refused, nothing changes.
    self->send(r.platform, merge_atom::value, model_weights("lenet5", 3, 0.5));
    sched.run();
    auto again = weights_of(self, sched, r.platform);
    BOOST_TEST(again.value.gossip_weight == 1.0);
    BOOST_TEST(same(tensors_of(again), tensors_of(after)));
  }
  // The rate rule: each model also counts by the share r it trains (own
  // r = 1 before any plan, the sender's 0.5): keep 0.25 / (0.25 + 0.375).
  {
    rig_options o;
    o.platforms = 4;
    o.merge = config::merge_rule::rate;
    rig r{sys, self, sched, o};
    auto x = tensors_of(weights_of(self, sched, r.platform));
    auto received = model_weights("logreg", 2, 0.75, 0.5);
    auto y = tensors_of(received);
    self->send(r.platform, merge_atom::value, received);
    sched.run();
    auto after = weights_of(self, sched, r.platform);
    BOOST_TEST(after.value.gossip_weight == 1.0);  // weights still add up
    std::vector<torch::Tensor> expected;
    for (size_t i = 0; i < x.size(); ++i)
      expected.push_back(0.4 * x[i] + 0.6 * y[i]);
    BOOST_TEST(all_close(tensors_of(after), expected));
  }
}

BOOST_FIXTURE_TEST_CASE(pause_stops_the_steps_until_resume, fixture) {
  rig_options o;
  o.shard = 64;      // 4 iterations
  o.slowdown = 100;  // after each step the next waits in the timer queue
  rig r{sys, self, sched, o};
  auto& rec = *r.rec;
  send_plan(self, r, plan_of(0, 1.0, 0));
  sched.run();  // the plan and the first step; the second is delayed
  BOOST_TEST(rec.reports.empty());
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 1u);
  auto paused = control_of(self, sched, r.platform, messages::verb::pause);
  BOOST_REQUIRE(paused.first);
  BOOST_TEST(*paused.first);
  // The balancer hears where it stopped (a step may have sent progress
  // before, had it taken a second).
  BOOST_REQUIRE(!rec.progress.empty());
  const auto progress = rec.progress.size();
  BOOST_TEST(rec.progress.back().iterations == 1u);
  BOOST_TEST(rec.progress.back().samples == 16u);
  BOOST_TEST(rec.progress.back().planned_samples == 64u);
  auto before = weights_of(self, sched, r.platform);
  // The delayed step comes and finds it paused; no other follows.
  for (int i = 0; i < 5; ++i) {
    sched.advance_time(1s);
    sched.run();
  }
  auto still = weights_of(self, sched, r.platform);
  BOOST_TEST(still.value.iteration == 1u);
  BOOST_TEST(same(tensors_of(still), tensors_of(before)));
  BOOST_TEST(rec.reports.empty());
  BOOST_TEST(rec.checkpoints.empty());
  // Paused twice: still one progress report.
  BOOST_TEST(*control_of(self, sched, r.platform, messages::verb::pause).first);
  BOOST_TEST(rec.progress.size() == progress);
  // Resumed: the epoch goes on where it stopped and ends as planned.
  auto resumed = control_of(self, sched, r.platform, messages::verb::resume);
  BOOST_REQUIRE(resumed.first);
  BOOST_TEST(*resumed.first);
  run_until_reports(sched, r, 1);
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  BOOST_TEST(rec.reports[0].iterations == 4u);
  BOOST_TEST(rec.reports[0].samples == 64u);
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 4u);
}

BOOST_FIXTURE_TEST_CASE(a_cut_ends_the_current_epoch_with_what_was_trained, fixture) {
  rig_options o;
  o.shard = 64;      // 4 iterations planned
  o.slowdown = 100;  // one step per advance of the clock
  rig r{sys, self, sched, o};
  auto& rec = *r.rec;
  send_plan(self, r, plan_of(0, 1.0, 1));
  sched.run();
  sched.advance_time(1s);
  sched.run();
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 2u);
  // A cut for another epoch is ignored.
  self->send(r.platform, cut_atom::value, uint32_t{1});
  sched.run();
  BOOST_TEST(rec.reports.empty());
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 2u);
  // The cut of this epoch ends it: 2 of 4 iterations, 32 of 64 points.
  self->send(r.platform, cut_atom::value, uint32_t{0});
  sched.run();
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 1u);
  BOOST_TEST(rec.reports[0].epoch == 0u);
  BOOST_TEST(rec.reports[0].iterations == 2u);
  BOOST_TEST(rec.reports[0].samples == 32u);
  BOOST_TEST(rec.reports[0].planned_samples == 64u);
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 1u);
  BOOST_TEST(rec.checkpoints[0].epochs == 1u);
  BOOST_TEST(rec.checkpoints[0].iterations == 2u);
  BOOST_TEST(rec.observed_samples() == 32u);
  // The step still in the timer queue trains nothing; a second cut is ignored.
  for (int i = 0; i < 5; ++i) {
    sched.advance_time(1s);
    sched.run();
  }
  self->send(r.platform, cut_atom::value, uint32_t{0});
  sched.run();
  BOOST_TEST(rec.reports.size() == 1u);
  BOOST_TEST(weights_of(self, sched, r.platform).value.iteration == 2u);
  // The next plan starts a fresh epoch.
  send_plan(self, r, plan_of(1, 0.25, 1));
  run_until_reports(sched, r, 2);
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 2u);
  BOOST_TEST(rec.reports[1].epoch == 1u);
  BOOST_TEST(rec.reports[1].samples == 16u);
  BOOST_TEST(rec.reports[1].iterations == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_plan_for_another_epoch_waits_for_the_running_one_to_be_reported,
                        fixture) {
  // A balancer that took over plans epoch 3 while the platform still trains
  // epoch 1 (its old balancer's plan): the running epoch keeps its number
  // and is reported as trained, then epoch 3 begins. A plan for an earlier
  // epoch (from a balancer that lost its majority and has not stopped yet)
  // changes nothing.
  rig_options o;
  o.shard = 64;      // 4 iterations planned
  o.slowdown = 100;  // one step per advance of the clock
  rig r{sys, self, sched, o};
  auto& rec = *r.rec;
  send_plan(self, r, plan_of(0, 1.0, 4));
  sched.run();
  sched.advance_time(1s);
  sched.run();
  send_plan(self, r, plan_of(2, 0.5, 4));
  sched.run();
  BOOST_TEST(rec.reports.empty());
  run_until_reports(sched, r, 2);
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 2u);
  BOOST_TEST(rec.reports[0].epoch == 0u);
  BOOST_TEST(rec.reports[0].iterations == 4u);  // epoch 1 as planned: all of it
  BOOST_TEST(rec.reports[1].epoch == 2u);
  BOOST_TEST(rec.reports[1].samples == 32u);    // epoch 3's share, 0.5
  // Epoch 4 runs; a plan for epoch 2 meanwhile is not taken after it.
  send_plan(self, r, plan_of(3, 1.0, 4));
  sched.run();
  send_plan(self, r, plan_of(1, 1.0, 4));
  run_until_reports(sched, r, 3);
  BOOST_REQUIRE_EQUAL(rec.reports.size(), 3u);
  BOOST_TEST(rec.reports[2].epoch == 3u);
  BOOST_TEST(rec.reports[2].iterations == 4u);
  for (int i = 0; i < 10; ++i) {
    sched.advance_time(1s);
    sched.run();
  }
  BOOST_TEST(rec.reports.size() == 3u);  // epoch 2 was not trained again
}

BOOST_FIXTURE_TEST_CASE(control_checkpoints_on_request_and_refuses_other_verbs, fixture) {
  rig_options o;
  o.platforms = 4;
  rig r{sys, self, sched, o};
  auto& rec = *r.rec;
  auto saved = control_of(self, sched, r.platform, messages::verb::checkpoint);
  BOOST_REQUIRE(saved.first);
  BOOST_TEST(*saved.first);
  BOOST_REQUIRE_EQUAL(rec.checkpoints.size(), 1u);
  BOOST_TEST(rec.checkpoints[0].platform == "p0");
  BOOST_TEST(rec.checkpoints[0].epochs == 0u);
  BOOST_TEST(rec.checkpoints[0].iterations == 0u);
  BOOST_TEST(rec.checkpoints[0].weight == 0.25);
  auto initial = learning::make_classifier("logreg", 7, fashion);
  learning::load_model(*initial, rec.checkpoints[0].model);
  BOOST_TEST(same(learning::parameters(*initial), tensors_of(weights_of(self, sched, r.platform))));
  for (auto v : {messages::verb::snapshot, messages::verb::history}) {
    auto answer = control_of(self, sched, r.platform, v);
    BOOST_TEST(!answer.first);
    std::string why;
    BOOST_TEST(is(answer.second, ec::bad_request, &why), caf::to_string(answer.second));
    BOOST_TEST(why.find(messages::to_string(v)) != std::string::npos, why);
  }
  BOOST_TEST(rec.checkpoints.size() == 1u);
  // Stop: a final checkpoint, answered once the store has it.
  auto stopped = control_of(self, sched, r.platform, messages::verb::stop);
  BOOST_REQUIRE(stopped.first);
  BOOST_TEST(*stopped.first);
  BOOST_TEST(rec.checkpoints.size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

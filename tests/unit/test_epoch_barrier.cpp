// links: eg_actors
// What the balancer knows of epochs, as a plain class (algorithms/edgegossip/epoch_barrier):
// the barrier, the averaging weights, the plans (GoSGD; EdgeGossip's
// Algorithm 1, profiling, exception handling), the epoch deadline, the rows
// of cluster.csv, a continued run, and the console's snapshot built from it.
// Time is a clock the tests set, so nothing here waits.
#include "algorithms/edgegossip/epoch_barrier.hpp"
#include "actors/balancer/inspection.hpp"
#include "config/config.hpp"
#include "algorithms/edgegossip/balancing.hpp"
#include "algorithms/edgegossip/predictor.hpp"
#include "messages/codec.hpp"
#include "storage/store.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace eg;
using eg::actors::barrier_settings;
/// (The suite is named after the file, so the class goes by another name.)
using barrier = eg::actors::epoch_barrier;

namespace {

using steady = barrier::clock;

/// `seconds` after an arbitrary origin of the steady clock.
steady::time_point at(double seconds) {
  return steady::time_point{} + std::chrono::duration_cast<steady::duration>(
                                  std::chrono::duration<double>(seconds));
}

barrier_settings settings(std::vector<std::string> names, uint32_t epochs = 3) {
  barrier_settings s;
  s.expected = names;
  s.quorum = names.size();
  s.last_epoch = epochs - 1;
  for (auto& n : names)
    s.shard_sizes[n] = 1500;
  return s;
}

barrier_settings edgegossip(std::vector<std::string> names, uint32_t epochs = 3) {
  auto s = settings(std::move(names), epochs);
  s.edgegossip = true;
  s.deadline = 1.5;
  return s;
}

/// A barrier whose platforms joined before the run started.
barrier joined(barrier_settings s) {
  barrier b(s);
  for (auto& name : s.expected)
    b.join(name, "local", false);
  b.start(at(0));
  return b;
}

messages::epoch_report report(const std::string& platform, uint32_t epoch,
                              uint64_t samples = 100, double wall = 0) {
  messages::epoch_report r;
  r.platform = platform;
  r.node = "local";
  r.epoch = epoch;
  r.samples = samples;
  r.wall_seconds = wall;
  return r;
}

/// Records `platform`'s report of `epoch` at `when`; true when it was new.
bool reports(barrier& b, const std::string& platform, uint32_t epoch, double when = 0,
             uint64_t samples = 100, double wall = 0) {
  auto r = report(platform, epoch, samples, wall);
  return b.record(r, at(when));
}

std::map<std::string, messages::prediction>
predictions(const std::map<std::string, double>& throughput, uint64_t observations = 10) {
  std::map<std::string, messages::prediction> out;
  for (auto& [name, p] : throughput) {
    out[name].platform = name;
    out[name].throughput = p;
    out[name].observations = observations;
  }
  return out;
}

/// The paper's 3x and 5x unbalance: 300, 300, 100 and 60 points/s.
std::map<std::string, messages::prediction> unbalanced() {
  return predictions({{"p0", 300}, {"p1", 300}, {"p2", 100}, {"p3", 60}});
}

} // namespace

BOOST_AUTO_TEST_SUITE(epoch_barrier)

// -- the barrier ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(an_epoch_is_complete_once_every_live_platform_reported_it) {
  auto b = joined(settings({"p0", "p1"}));
  BOOST_TEST(b.up() == 2u);
  b.plan(0, {}, at(0));
  BOOST_TEST(!b.complete(0));  // no report yet
  BOOST_TEST(reports(b, "p0", 0));
  BOOST_TEST(!b.complete(0));
  BOOST_TEST(b.complete_epochs().empty());
  BOOST_TEST(reports(b, "p1", 0));
  BOOST_TEST(b.complete(0));
  BOOST_TEST((b.complete_epochs() == std::vector<uint32_t>{0}));
  // Sent again (a balancer took over): counted once.
  BOOST_TEST(!reports(b, "p1", 0));
  BOOST_TEST(b.reports(0).size() == 2u);
  BOOST_TEST(b.all_reports().size() == 2u);
  // The latest report is the platform's progress.
  BOOST_TEST(b.find("p1")->progress.epoch == 0u);
  BOOST_TEST(b.find("p1")->progress.samples == 100u);
}

BOOST_AUTO_TEST_CASE(a_platform_going_down_no_longer_holds_an_epoch_back) {
  auto b = joined(settings({"p0", "p1", "p2"}));
  b.plan(0, {}, at(0));
  reports(b, "p0", 0);
  reports(b, "p1", 0);
  BOOST_TEST(!b.complete(0));
  BOOST_TEST(b.down("p2"));
  BOOST_TEST(!b.down("p2"));  // it was down already
  BOOST_TEST(!b.down("p9"));  // never joined
  BOOST_TEST(b.up() == 2u);
  BOOST_TEST((b.live() == std::vector<std::string>{"p0", "p1"}));
  BOOST_TEST(b.complete(0));
  // Down platforms get no plan.
  auto next = b.plan(1, {}, at(1));
  BOOST_TEST(next.plans.size() == 2u);
  BOOST_TEST(!next.plans.count("p2"));
}

BOOST_AUTO_TEST_CASE(a_later_report_releases_an_earlier_epoch) {
  // p1's report of epoch 0 was lost with a previous balancer; its report of
  // epoch 1 shows it went past epoch 0.
  auto b = joined(settings({"p0", "p1"}));
  reports(b, "p0", 0);
  reports(b, "p0", 1);
  BOOST_TEST(!b.complete(0));
  reports(b, "p1", 1);
  BOOST_TEST(b.complete(0));
  BOOST_TEST(b.complete(1));
  BOOST_TEST((b.complete_epochs() == std::vector<uint32_t>{0, 1}));
  BOOST_TEST(!b.complete(2));  // no report of it
}

BOOST_AUTO_TEST_CASE(a_platform_rejoining_a_synchronous_run_is_expected_from_the_next_epoch) {
  auto b = joined(settings({"p0", "p1"}));
  auto first = b.plan(0, {}, at(0));
  BOOST_TEST(first.plans.size() == 2u);
  BOOST_TEST(b.planned_epoch() == 0u);
  b.down("p1");
  auto j = b.join("p1", "b", true);
  BOOST_TEST(j.again);
  BOOST_TEST(j.first_epoch == 1u);
  BOOST_TEST(!j.plan);  // planned with the others, from the next epoch
  BOOST_TEST(b.find("p1")->node == "b");
  BOOST_TEST(b.find("p1")->up);
  // Epoch 0 does not wait for it ...
  reports(b, "p0", 0);
  BOOST_TEST(b.complete(0));
  // ... epoch 1 does.
  auto next = b.plan(1, {}, at(1));
  BOOST_TEST(next.plans.count("p1") == 1u);
  reports(b, "p0", 1);
  BOOST_TEST(!b.complete(1));
  reports(b, "p1", 1);
  BOOST_TEST(b.complete(1));
}

BOOST_AUTO_TEST_CASE(a_platform_joining_an_asynchronous_run_gets_its_plan_at_once) {
  auto s = settings({"p0", "p1", "p2"}, 5);
  s.asynchronous = true;
  barrier b(s);
  b.join("p0", "a", false);
  b.join("p1", "a", false);
  b.start(at(0));
  auto r = report("p0", 2);
  b.progress(r);
  auto j = b.join("p2", "c", true);
  BOOST_TEST(!j.again);
  BOOST_TEST(j.first_epoch == 2u);  // the epoch the others are in
  BOOST_REQUIRE(j.plan);
  BOOST_TEST(j.plan->epoch == 2u);
  BOOST_TEST(j.plan->ratio == 1.0);
  BOOST_TEST(j.plan->last_epoch == 4u);
  // Before the run, a platform joins with no plan, expected from epoch 0.
  barrier waiting(s);
  auto early = waiting.join("p0", "a", false);
  BOOST_TEST(early.first_epoch == 0u);
  BOOST_TEST(!early.plan);
}

BOOST_AUTO_TEST_CASE(the_quorum_and_the_cluster_files_platforms) {
  auto s = settings({"p0", "p1", "p2"});
  s.quorum = 2;
  barrier b(s);
  BOOST_TEST(b.expects("p2"));
  BOOST_TEST(!b.expects("intruder"));
  b.join("p0", "a", false);
  BOOST_TEST(!b.has_quorum());
  b.join("p1", "a", false);
  BOOST_TEST(b.has_quorum());
  BOOST_TEST(b.find("p0")->shard_size == 1500u);
  BOOST_TEST(!b.find("p2"));
}

BOOST_AUTO_TEST_CASE(a_refused_platform_counts_out_of_the_quorum_until_it_joins_set_right) {
  // cluster.quorum 0, "all of them": all but a refused one.
  auto s = settings({"p0", "p1", "p2"});
  barrier all(s);
  BOOST_TEST(!all.has_quorum());  // none joined
  all.join("p0", "a", false);
  all.join("p1", "b", false);
  BOOST_TEST(!all.has_quorum());
  BOOST_TEST(all.refuse("p2", "its data is 3x8x8"));
  BOOST_TEST(!all.refuse("p2", "its data is 3x8x8"));  // said once
  BOOST_TEST(all.has_quorum());
  BOOST_TEST(!all.expects("p2"));
  BOOST_TEST(all.refused().at("p2") == "its data is 3x8x8");
  // Named at the end of every epoch line until it joins set right.
  BOOST_TEST(all.epoch_line(0).find("; refused: p2 (its data is 3x8x8)") != std::string::npos,
             all.epoch_line(0));
  BOOST_TEST(all.expect("p2"));
  BOOST_TEST(all.refused().empty());
  BOOST_TEST(!all.has_quorum());
  BOOST_TEST(all.epoch_line(0).find("refused") == std::string::npos);
  // A quorum of 2 of 3 with one refused is still 2; with two refused, the
  // one left.
  s.quorum = 2;
  barrier two(s);
  two.join("p0", "a", false);
  two.refuse("p1", "x");
  BOOST_TEST(!two.has_quorum());
  two.refuse("p2", "y");
  BOOST_TEST(two.has_quorum());
  // Every platform refused: no run to start.
  barrier none(s);
  none.refuse("p0", "x");
  none.refuse("p1", "x");
  none.refuse("p2", "x");
  BOOST_TEST(!none.has_quorum());
}

BOOST_AUTO_TEST_CASE(an_evaluation_cancelled_may_begin_again) {
  auto b = joined(settings({"p0", "p1"}));
  BOOST_TEST(b.begin_evaluation(0, at(1)));
  BOOST_TEST(!b.begin_evaluation(0, at(1)));  // under way
  b.cancel_evaluation(0);
  BOOST_TEST(!b.evaluating(0));
  BOOST_TEST(b.begin_evaluation(0, at(2)));
}

BOOST_AUTO_TEST_CASE(a_platform_of_a_node_that_joined_is_expected_from_the_next_epoch) {
  auto b = joined(settings({"p0", "p1"}, 5));
  b.plan(0, {}, at(0));
  BOOST_TEST(!b.expects("d0"));
  BOOST_TEST(b.expect("d0"));
  BOOST_TEST(!b.expect("d0"));  // once
  BOOST_TEST(!b.expect("p1"));  // a platform of the file's
  BOOST_TEST(b.expects("d0"));
  auto j = b.join("d0", "d", true, 2000);
  BOOST_TEST(!j.again);
  BOOST_TEST(j.first_epoch == 1u);
  BOOST_TEST(b.find("d0")->shard_size == 2000u);  // the samples it announced
  reports(b, "p0", 0);
  reports(b, "p1", 0);
  BOOST_TEST(b.complete(0));  // it does not hold back the epoch it joined in
  auto next = b.plan(1, {}, at(1));
  BOOST_TEST(next.plans.count("d0") == 1u);
  reports(b, "p0", 1);
  reports(b, "p1", 1);
  BOOST_TEST(!b.complete(1));
  reports(b, "d0", 1);
  BOOST_TEST(b.complete(1));
}

BOOST_AUTO_TEST_CASE(settings_come_from_the_cluster_file) {
  auto cfg = config::default_config();
  cfg.train.epochs = 7;
  cfg.strategy.name = "edgegossip";
  cfg.edgegossip.p_threshold = 0.5;
  cfg.edgegossip.f_threshold = 0.25;
  cfg.quorum = 3;
  auto s = barrier_settings::of(cfg);
  BOOST_TEST(s.last_epoch == 6u);
  BOOST_TEST(s.edgegossip);
  BOOST_TEST(!s.asynchronous);
  BOOST_TEST(s.p_threshold == 0.5);
  BOOST_TEST(s.f_threshold == 0.25);
  BOOST_TEST(s.deadline == cfg.edgegossip.deadline);
  BOOST_TEST(s.count_network);  // plans count the network unless told not to
  cfg.edgegossip.count_network = false;
  BOOST_TEST(!barrier_settings::of(cfg).count_network);
  BOOST_TEST(s.first_epoch_share == 0.25);  // the cluster file's default
  cfg.edgegossip.first_epoch_share = 1;
  BOOST_TEST(barrier_settings::of(cfg).first_epoch_share == 1.0);
  BOOST_TEST(s.expected.size() == cfg.platforms().size());
  BOOST_TEST(s.quorum == 3u);
  cfg.quorum = 0;  // all of them
  BOOST_TEST(barrier_settings::of(cfg).quorum == cfg.platforms().size());
  // A node that joined an earlier run (kept in the store) is expected, but a
  // new run does not wait for it.
  auto with_joined = cfg;
  config::node_config d;
  d.name = "d";
  d.port = 47400;
  d.joined = true;
  d.platforms.push_back({});
  d.platforms.back().name = "d0";
  with_joined.nodes[0].port = 47300;
  with_joined.nodes.push_back(d);
  BOOST_TEST(barrier_settings::of(with_joined).expected.size() == cfg.platforms().size() + 1);
  BOOST_TEST(barrier_settings::of(with_joined).quorum == cfg.platforms().size());
  cfg.strategy.name = "gosgd-async";
  BOOST_TEST(barrier_settings::of(cfg).asynchronous);
  BOOST_TEST(!barrier_settings::of(cfg).edgegossip);
}

// -- averaging weights --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(platforms_weigh_in_the_average_by_the_points_they_trained) {
  auto b = joined(settings({"p0", "p1", "p2", "p3"}));
  BOOST_TEST(b.averaging_weight(0, "p0") == 1.0);  // no report of the epoch: equal weights
  auto r0 = report("p0", 0, 300);
  r0.class_samples = {100, 200};
  b.record(r0, at(1));
  reports(b, "p1", 0, 1, 100);
  reports(b, "p2", 0, 1, 0);
  BOOST_TEST(b.averaging_weight(0, "p0") == 300.0);
  BOOST_TEST(b.averaging_weight(0, "p1") == 100.0);
  // Without a report, or with no points: the mean of the reports.
  BOOST_TEST(std::abs(b.averaging_weight(0, "p2") - 400.0 / 3) < 1e-9);
  BOOST_TEST(std::abs(b.averaging_weight(0, "p3") - 400.0 / 3) < 1e-9);
  BOOST_TEST((b.class_weights(0, "p0") == std::vector<double>{100, 200}));
  BOOST_TEST(b.class_weights(0, "p1").empty());  // its report did not count classes
  BOOST_TEST(b.class_weights(0, "p3").empty());
  BOOST_TEST(b.class_weights(1, "p0").empty());
  // Reports without any points: equal weights.
  auto idle = joined(settings({"p0", "p1"}));
  reports(idle, "p0", 0, 0, 0);
  BOOST_TEST(idle.averaging_weight(0, "p1") == 1.0);
}

// -- plans --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gosgd_plans_every_platform_on_its_whole_shard) {
  auto b = joined(settings({"p0", "p1", "p2"}));
  // Predictions, should there be any, do not matter to GoSGD.
  auto p = b.plan(0, predictions({{"p0", 300}, {"p1", 30}, {"p2", 3}}), at(0));
  BOOST_TEST(p.epoch == 0u);
  BOOST_TEST(!p.balanced);
  BOOST_TEST(p.line.empty());
  BOOST_TEST(p.adopt.empty());
  BOOST_REQUIRE_EQUAL(p.plans.size(), 3u);
  std::set<uint32_t> parts;
  for (auto& [name, plan] : p.plans) {
    BOOST_TEST(plan.epoch == 0u);
    BOOST_TEST(plan.ratio == 1.0);
    BOOST_TEST(plan.last_epoch == 2u);
    BOOST_TEST(plan.adopt.empty());
    BOOST_TEST(plan.adopt_parts == 3u);
    parts.insert(plan.adopt_part);
  }
  BOOST_TEST(parts.size() == 3u);
  BOOST_TEST(b.planned(0));
  BOOST_TEST(!b.planned(1));
  BOOST_TEST(b.planned_seconds(0) == 0.0);
}

// Nodes with data of their own: the balancer's node knows no other node's
// shard, and each platform's join brings its own sample count.
BOOST_AUTO_TEST_CASE(edgegossip_plans_with_the_sample_counts_platforms_join_with) {
  auto s = edgegossip({"p0", "p1"});
  s.shard_sizes.clear();
  barrier unknown(s);
  unknown.join("p0", "a", false);
  unknown.join("p1", "b", false);
  unknown.start(at(0));
  BOOST_TEST(!unknown.plan(0, predictions({{"p0", 300}, {"p1", 30}}), at(0)).balanced);
  barrier known(s);
  known.join("p0", "a", false, 1500);
  known.join("p1", "b", false, 1500);
  known.start(at(0));
  auto p = known.plan(0, predictions({{"p0", 300}, {"p1", 30}}), at(0));
  BOOST_TEST(p.balanced);
  BOOST_REQUIRE_EQUAL(p.plans.size(), 2u);
  BOOST_TEST(p.plans.at("p1").ratio < p.plans.at("p0").ratio);
}

BOOST_AUTO_TEST_CASE(edgegossip_plans_algorithm_1_ratios) {
  auto b = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  auto p = b.plan(0, unbalanced(), at(0));
  BOOST_TEST(p.balanced);
  // T_i = 1500 / p_i: 5, 5, 15 and 25 s; r_i = T_1 / T_i.
  const std::map<std::string, double> expected{
    {"p0", 1.0}, {"p1", 1.0}, {"p2", 1.0 / 3}, {"p3", 0.2}};
  BOOST_REQUIRE_EQUAL(p.plans.size(), 4u);
  for (auto& [name, r] : expected) {
    BOOST_TEST(std::abs(p.plans.at(name).ratio - r) < 1e-9, name);
    BOOST_TEST(p.plans.at(name).adopt.empty());
  }
  BOOST_TEST(p.line == " p0 r=1.00 p1 r=1.00 p2 r=0.33 p3 r=0.20");
  BOOST_TEST(p.failed.empty());
  BOOST_TEST(p.warnings.empty());
  BOOST_TEST(!p.exception_handling);
  // Every platform is predicted to take T_1 = 5 s: the planned epoch time.
  BOOST_TEST(std::abs(p.planned_seconds - 5.0) < 1e-9);
  BOOST_TEST(std::abs(b.planned_seconds(0) - 5.0) < 1e-9);
  BOOST_TEST(std::abs(b.find("p3")->predicted_seconds.at(0) - 5.0) < 1e-9);
  // The prediction goes into the platform's report (prediction error).
  auto r = report("p3", 0, 300, 6);
  b.record(r, at(6));
  BOOST_TEST(std::abs(r.predicted_seconds - 5.0) < 1e-9);
  BOOST_TEST(std::abs(b.all_reports().back().predicted_seconds - 5.0) < 1e-9);
}

BOOST_AUTO_TEST_CASE(edgegossip_over_push_sum_plans_the_rounds_of_the_platform_with_most_batches) {
  // r = 1, 1, 1/3 and 0.2 of 1500 points, batch 64: 24, 24, 8 and 5
  // batches; gossip every 2 steps: the most, 24, make 12 rounds (the
  // platforms with fewer batches make several in a step).
  auto s = edgegossip({"p0", "p1", "p2", "p3"});
  s.push_sum = true;
  s.batch = 64;
  s.gossip_every = 2;
  auto b = joined(s);
  auto p = b.plan(0, unbalanced(), at(0));
  BOOST_REQUIRE(p.balanced);
  for (auto& [name, plan] : p.plans)
    BOOST_TEST(plan.rounds == 12u, name);
  // The profiling epoch (r = 1 for all): 24 batches, 12 rounds.
  auto first = unbalanced();
  first["p2"].observations = 0;
  for (auto& [name, plan] : b.plan(1, first, at(1)).plans)
    BOOST_TEST(plan.rounds == 12u, name);
  // A cap on the iterations caps the rounds.
  s.max_iterations = 10;
  for (auto& [name, plan] : joined(s).plan(0, unbalanced(), at(0)).plans)
    BOOST_TEST(plan.rounds == 5u, name);
  s.max_iterations = 0;
  // At least one round, however small the share; none without push-sum.
  s.gossip_every = 100;
  auto few = joined(s);
  for (auto& [name, plan] : few.plan(0, unbalanced(), at(0)).plans)
    BOOST_TEST(plan.rounds == 1u, name);
  auto gosgd = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  for (auto& [name, plan] : gosgd.plan(0, unbalanced(), at(0)).plans)
    BOOST_TEST(plan.rounds == 0u, name);
}

// -- plans that count the network -------------------------------------------------------

/// One platform's epoch in a replayed trace.
struct traced {
  double training = 0;  ///< seconds of training its share
  double whole = 0;     ///< of training its whole shard
  double sending = 0;   ///< seconds its link took for its messages
};

/// A replayed trace: four platforms at 300, 300, 100 and 60 points/s with
/// 1500 points each, each sending 6 MB of messages a epoch whatever its
/// share (EdgeGossip's exchange probability is p / r_i), behind links of
/// 100, 5, 20 and 10 Mbit/s; p0's link falls to 2 Mbit/s from epoch 4 on.
/// Each epoch a platform trains its planned share while its lane sends;
/// the lane's timings teach its link model, whose seconds per byte go with
/// its prediction to the barrier, which plans the next epoch.
std::vector<std::map<std::string, traced>> replay_link_trace(bool count_network) {
  const std::vector<std::string> names{"p0", "p1", "p2", "p3"};
  const std::map<std::string, double> speed{{"p0", 300}, {"p1", 300}, {"p2", 100}, {"p3", 60}};
  const auto mbit = [](double x) { return x * 1e6 / 8; };  // bytes per second
  const auto link_rate = [&](const std::string& name, uint32_t epoch) {
    if (name == "p0")
      return epoch < 4 ? mbit(100) : mbit(2);
    return name == "p1" ? mbit(5) : name == "p2" ? mbit(20) : mbit(10);
  };
  constexpr uint64_t bytes = 6'000'000;
  auto s = edgegossip(names, 8);
  s.count_network = count_network;
  auto b = joined(s);
  std::map<std::string, learning::link_model> links;
  std::vector<std::map<std::string, traced>> epochs;
  double now = 0;
  for (uint32_t epoch = 0; epoch < 8; ++epoch) {
    auto predicted = predictions(speed);
    for (auto& [name, p] : predicted) {
      p.send_seconds_per_byte = links[name].send_seconds_per_byte();
      p.receive_seconds_per_byte = links[name].receive_seconds_per_byte();
    }
    auto plan = b.plan(epoch, predicted, at(now));
    BOOST_REQUIRE(plan.balanced);
    std::map<std::string, traced> took;
    double longest = 0;
    for (auto& name : names) {
      const auto points =
        static_cast<uint64_t>(std::ceil(1500 * plan.plans.at(name).ratio));
      auto& t = took[name];
      t.training = static_cast<double>(points) / speed.at(name);
      t.whole = 1500 / speed.at(name);
      t.sending = static_cast<double>(bytes) / link_rate(name, epoch);
      longest = std::max(longest, t.training);
      auto r = report(name, epoch, points, t.training);
      r.bytes_sent = bytes;
      r.link = {bytes, t.sending, 0, 0};
      links[name].observe(r.link.send_seconds, r.link.bytes_sent, r.link.receive_seconds,
                          r.link.bytes_received);
      BOOST_REQUIRE(b.record(r, at(now + t.training)));
    }
    now += longest;
    epochs.push_back(took);
  }
  return epochs;
}

/// The epoch's longest training, and how much longer than it the slowest
/// link took for its messages (1: they were out by the epoch's end).
std::pair<double, double> epoch_and_lag(const std::map<std::string, traced>& took) {
  double training = 0, sending = 0;
  for (auto& [name, t] : took) {
    training = std::max(training, t.training);
    sending = std::max(sending, t.sending);
  }
  return {training, sending / training};
}

BOOST_AUTO_TEST_CASE(plans_that_count_the_network_follow_a_link_that_slows_down) {
  const auto aware = replay_link_trace(true);
  const auto compute_only = replay_link_trace(false);
  // Epoch 0 knows no link yet: the plan is compute's alone (5 s), and p1's
  // 5 Mbit/s take 9.6 s for its messages.
  BOOST_TEST(epoch_and_lag(aware[0]).second > 1.9);
  for (uint32_t e = 1; e < 8; ++e) {
    const auto [training, lag] = epoch_and_lag(aware[e]);
    const auto [plain_training, plain_lag] = epoch_and_lag(compute_only[e]);
    // Compute alone plans 5 s epochs whatever the links: the slowest one's
    // messages take 1.9x (p1) and, from epoch 4, 4.8x (p0) that.
    BOOST_TEST(plain_training == 5.0, boost::test_tools::tolerance(0.01));
    BOOST_TEST(plain_lag > 1.9, "epoch " << e);
    if (e == 4) {
      // p0's link fell during epoch 4: planned before anyone knew.
      BOOST_TEST(lag > 2.0);
      continue;
    }
    // Counting the network, every link's messages are out within the
    // epoch (2 % for rounding a share to whole points), and the platforms
    // that are not on their whole shard train for all of it.
    BOOST_TEST(lag < 1.02, "epoch " << e << ": " << lag);
    for (auto& [name, t] : aware[e])
      if (t.training < 0.99 * t.whole)
        BOOST_TEST(t.training == training, boost::test_tools::tolerance(0.02));
  }
  // Before the fall the epoch is p1's 9.6 s of sending; after it p0's 24 s.
  BOOST_TEST(epoch_and_lag(aware[2]).first == 9.6, boost::test_tools::tolerance(0.02));
  BOOST_TEST(epoch_and_lag(aware[6]).first == 24.0, boost::test_tools::tolerance(0.02));
}

BOOST_AUTO_TEST_CASE(a_platforms_communication_is_its_last_epochs_bytes_on_its_link) {
  messages::prediction p;
  p.throughput = 300;
  p.observations = 10;
  p.send_seconds_per_byte = 1e-6;
  p.receive_seconds_per_byte = 2e-6;
  auto s = edgegossip({"p0", "p1"});
  auto b = joined(s);
  auto r = report("p0", 0, 500);
  r.bytes_sent = 3'000'000;
  r.bytes_received = 1'000'000;
  BOOST_REQUIRE(b.record(r, at(1)));
  // GoSGD: 3 s of sending a epoch (as many messages whatever the share);
  // receiving holds nobody.
  auto gosgd = b.communication("p0", p, 1);
  BOOST_TEST(gosgd.communication_seconds == 3.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(gosgd.communication_per_point == 0.0);
  // Nothing known of an epoch before, or of the link: nothing counted.
  BOOST_TEST(b.communication("p0", p, 0).communication_seconds == 0.0);
  BOOST_TEST(b.communication("p1", p, 1).communication_seconds == 0.0);
  auto unknown = p;
  unknown.send_seconds_per_byte = std::nan("");
  unknown.receive_seconds_per_byte = 0;
  BOOST_TEST(b.communication("p0", unknown, 1).communication_seconds == 0.0);
  // Push-sum: its sending too; what it receives takes its senders' links,
  // which their own plans count.
  s.push_sum = true;
  auto ps = joined(s);
  BOOST_REQUIRE(ps.record(r, at(1)));
  p.receive_seconds_per_byte = 4e-6;
  BOOST_TEST(ps.communication("p0", p, 1).communication_seconds == 3.0,
             boost::test_tools::tolerance(1e-12));
  p.receive_seconds_per_byte = 2e-6;
  // The plan counts it, and its line says what the links take (p0's 3 s
  // fit in its 5 s of training).
  s.count_network = true;
  auto planned = joined(s);
  BOOST_REQUIRE(planned.record(r, at(1)));
  auto r1 = report("p1", 0, 500);
  BOOST_REQUIRE(planned.record(r1, at(1)));
  auto plan = planned.plan(1, {{"p0", p}, {"p1", p}}, at(2));
  BOOST_TEST(plan.line.find("p0 r=1.00 (link 3.0 s)") != std::string::npos, plan.line);
  // A link slower than the training: p0's 12 s of sending make a 12 s
  // epoch, which a platform at 100 points/s fills with 0.8 of its shard...
  p.send_seconds_per_byte = 4e-6;
  auto slow = p;
  slow.throughput = 100;
  auto longer = planned.plan(2, {{"p0", p}, {"p1", slow}}, at(3));
  BOOST_TEST(longer.plans.at("p0").ratio == 1.0);
  BOOST_TEST(longer.plans.at("p1").ratio == 0.8, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(longer.planned_seconds == 12.0, boost::test_tools::tolerance(1e-9));
  // ... and without counting the network a third (5 s, as p0's training).
  s.count_network = false;
  auto blind = joined(s);
  BOOST_REQUIRE(blind.record(r, at(1)));
  BOOST_REQUIRE(blind.record(r1, at(1)));
  BOOST_TEST(blind.plan(1, {{"p0", p}, {"p1", slow}}, at(2)).plans.at("p1").ratio == 1.0 / 3,
             boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_platform_without_observations_profiles_everyone_with_r_1) {
  auto b = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  auto first = unbalanced();
  first["p2"].observations = 0;  // the first epoch: nothing measured yet
  auto p = b.plan(0, first, at(0));
  BOOST_TEST(!p.balanced);
  BOOST_TEST(p.line.empty());
  for (auto& [name, plan] : p.plans)
    BOOST_TEST(plan.ratio == 1.0, name);
  BOOST_TEST(b.planned_seconds(0) == 0.0);
  BOOST_TEST(b.find("p0")->predicted_seconds.empty());
  // A predictor that did not answer: the same.
  auto missing = unbalanced();
  missing.erase("p1");
  auto q = b.plan(1, missing, at(1));
  BOOST_TEST(!q.balanced);
  for (auto& [name, plan] : q.plans)
    BOOST_TEST(plan.ratio == 1.0, name);
  // A down platform without a prediction does not hold Algorithm 1 back.
  b.down("p1");
  BOOST_TEST(b.plan(2, missing, at(2)).balanced);
}

BOOST_AUTO_TEST_CASE(the_first_epoch_trains_first_epoch_share_of_each_shard_until_all_are_known) {
  auto s = edgegossip({"p0", "p1", "p2", "p3"});
  s.first_epoch_share = 0.25;
  auto b = joined(s);
  auto first = unbalanced();
  for (auto& [name, p] : first)
    p.observations = 0;  // the run's first epoch: no platform measured yet
  auto p = b.plan(0, first, at(0));
  BOOST_TEST(!p.balanced);
  for (auto& [name, plan] : p.plans)
    BOOST_TEST(plan.ratio == 0.25, name);
  BOOST_TEST(p.line == " p0 r=0.25 (first epoch) p1 r=0.25 (first epoch) p2 r=0.25 (first epoch) "
                       "p3 r=0.25 (first epoch)");
  // One platform still unmeasured (it joined late): it profiles on its
  // share, the others train everything until Algorithm 1 can plan.
  auto late = unbalanced();
  late["p2"].observations = 0;
  auto q = b.plan(1, late, at(1));
  BOOST_TEST(!q.balanced);
  BOOST_TEST(q.plans.at("p2").ratio == 0.25);
  BOOST_TEST(q.plans.at("p0").ratio == 1.0);
  BOOST_TEST(q.plans.at("p3").ratio == 1.0);
  // A predictor that did not answer is no unmeasured platform: r = 1.
  auto missing = unbalanced();
  missing.erase("p1");
  auto m = b.plan(2, missing, at(2));
  BOOST_TEST(m.plans.at("p1").ratio == 1.0);
  // Every platform measured: Algorithm 1's plan.
  BOOST_TEST(b.plan(3, unbalanced(), at(3)).balanced);
}

BOOST_AUTO_TEST_CASE(exception_handling_lets_survivors_adopt_failed_shards) {
  // p3 goes down: 1 of 4 failed is past f_threshold (10 %), so the
  // survivors take over its shard, in three parts.
  auto b = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  b.down("p3");
  auto p = b.plan(1, unbalanced(), at(0));
  BOOST_TEST(p.balanced);
  BOOST_TEST(p.exception_handling);
  BOOST_TEST((p.adopt == std::vector<std::string>{"p3"}));
  BOOST_TEST(p.failed.empty());  // a down platform is not warned of
  BOOST_TEST(p.failed_count == 1u);
  BOOST_TEST(p.platforms == 4u);
  BOOST_REQUIRE_EQUAL(p.warnings.size(), 1u);
  BOOST_TEST(p.warnings[0] == "1 of 4 platforms failed: survivors take over their shards");
  BOOST_REQUIRE_EQUAL(p.plans.size(), 3u);
  std::set<uint32_t> parts;
  for (auto& [name, plan] : p.plans) {
    BOOST_TEST(plan.epoch == 1u);
    BOOST_TEST((plan.adopt == std::vector<std::string>{"p3"}));
    BOOST_TEST(plan.adopt_parts == 3u);
    parts.insert(plan.adopt_part);
  }
  BOOST_TEST(parts.size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_live_platform_below_p_threshold_fails_and_trains_its_whole_shard) {
  auto s = edgegossip({"p0", "p1", "p2", "p3"});
  s.f_threshold = 0.5;  // 1 of 4 failed: no exception handling
  auto b = joined(s);
  auto slow = unbalanced();
  slow["p2"].throughput = 0.0001;  // below p_threshold (0.001)
  auto p = b.plan(0, slow, at(0));
  BOOST_TEST(p.balanced);
  BOOST_TEST((p.failed == std::vector<std::string>{"p2"}));
  BOOST_REQUIRE_EQUAL(p.warnings.size(), 1u);
  BOOST_TEST(p.warnings[0] == "platform p2 predicted below p_threshold: failed");
  BOOST_TEST(!p.exception_handling);
  BOOST_TEST(p.adopt.empty());
  // It has no ratio: it trains its whole shard, and the barrier waits for it.
  BOOST_TEST(p.plans.at("p2").ratio == 1.0);
  BOOST_TEST(p.plans.at("p2").adopt.empty());
  BOOST_TEST(std::abs(p.plans.at("p3").ratio - 0.2) < 1e-9);
  BOOST_TEST(p.line == " p0 r=1.00 p1 r=1.00 p3 r=0.20");
  BOOST_TEST(!b.find("p2")->predicted_seconds.count(0));
}

// -- the epoch deadline -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_first_report_with_data_arms_the_deadline) {
  auto b = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  BOOST_TEST(!b.arm_deadline(report("p0", 0), at(1)));  // epoch 0 not planned yet
  b.plan(0, unbalanced(), at(10));
  // A report without data does not arm it.
  BOOST_TEST(!b.arm_deadline(report("p0", 0, 0), at(11)));
  // p0 is done 2 s into the epoch; planned: 5 s. The others get 1.5 x 5 s
  // + 0.25 s from the epoch's start.
  auto wait = b.arm_deadline(report("p0", 0), at(12));
  const double limit = learning::epoch_deadline(1.5, 2, 5);
  BOOST_TEST(std::abs(limit - 7.75) < 1e-9);
  BOOST_REQUIRE(wait);
  BOOST_TEST(std::abs(*wait - (limit - 2)) < 1e-6);
  BOOST_REQUIRE(b.deadline(0));
  BOOST_TEST(std::abs(*b.deadline(0) - limit) < 1e-9);
  // Once per epoch.
  BOOST_TEST(!b.arm_deadline(report("p1", 0), at(13)));
  BOOST_TEST(std::abs(*b.deadline(0) - limit) < 1e-9);
  // Longer than planned: the first platform's time counts.
  b.plan(1, unbalanced(), at(20));
  auto late = b.arm_deadline(report("p0", 1), at(28));
  BOOST_REQUIRE(late);
  BOOST_TEST(std::abs(*b.deadline(1) - learning::epoch_deadline(1.5, 8, 5)) < 1e-9);
}

BOOST_AUTO_TEST_CASE(no_deadline_for_gosgd_the_asynchronous_schedule_or_a_factor_of_0) {
  auto gosgd = joined(settings({"p0", "p1"}));
  gosgd.plan(0, {}, at(0));
  BOOST_TEST(!gosgd.arm_deadline(report("p0", 0), at(1)));
  auto async = edgegossip({"p0", "p1"});
  async.asynchronous = true;
  auto a = joined(async);
  a.plan(0, {}, at(0));
  BOOST_TEST(!a.arm_deadline(report("p0", 0), at(1)));
  auto off = edgegossip({"p0", "p1"});
  off.deadline = 0;
  auto o = joined(off);
  o.plan(0, {}, at(0));
  BOOST_TEST(!o.arm_deadline(report("p0", 0), at(1)));
}

BOOST_AUTO_TEST_CASE(the_deadline_cuts_the_live_platforms_that_did_not_report) {
  auto b = joined(edgegossip({"p0", "p1", "p2", "p3"}));
  BOOST_TEST(b.deadline_passed(0, at(100), false).cut.empty());  // nothing armed
  b.plan(0, unbalanced(), at(0));
  reports(b, "p0", 0, 2);
  b.arm_deadline(report("p0", 0), at(2));
  const double limit = *b.deadline(0);  // 7.75 s
  // Not yet: look again when it is due.
  auto early = b.deadline_passed(0, at(5), false);
  BOOST_REQUIRE(early.wait);
  BOOST_TEST(std::abs(*early.wait - (limit - 5)) < 1e-6);
  BOOST_TEST(early.cut.empty());
  // Paused by the console: look again in a second.
  auto paused = b.deadline_passed(0, at(9), true);
  BOOST_REQUIRE(paused.wait);
  BOOST_TEST(*paused.wait == 1.0);
  // Due: cut every live platform expected in the epoch that did not report.
  b.down("p3");
  reports(b, "p1", 0, 8);
  auto due = b.deadline_passed(0, at(9), false);
  BOOST_TEST(!due.wait);
  BOOST_TEST(std::abs(due.limit - limit) < 1e-9);
  BOOST_TEST((due.cut == std::vector<std::string>{"p2"}));
  // Complete: nothing to cut.
  reports(b, "p2", 0, 10);
  auto over = b.deadline_passed(0, at(11), false);
  BOOST_TEST(!over.wait);
  BOOST_TEST(over.cut.empty());
}

BOOST_AUTO_TEST_CASE(the_time_paused_is_no_epoch_time) {
  auto b = joined(edgegossip({"p0", "p1"}));
  b.plan(0, predictions({{"p0", 300}, {"p1", 300}}), at(0));
  reports(b, "p0", 0, 1);
  b.arm_deadline(report("p0", 0), at(1));
  const double limit = *b.deadline(0);
  // Paused from 2 s to 102 s: the epoch started 100 s later.
  b.resumed(at(2), at(102));
  auto check = b.deadline_passed(0, at(103), false);
  BOOST_REQUIRE(check.wait);
  BOOST_TEST(std::abs(*check.wait - (limit - 3)) < 1e-6);
}

// -- evaluated epochs ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(an_epoch_is_measured_evaluated_and_closed) {
  auto b = joined(settings({"p0", "p1"}, 2));
  b.plan(0, {}, at(0));
  reports(b, "p0", 0, 3, 300, 3.0);
  reports(b, "p1", 0, 4, 100, 4.0);
  BOOST_TEST(b.begin_evaluation(0, at(5)));
  BOOST_TEST(!b.begin_evaluation(0, at(5)));  // being evaluated
  auto* row = b.evaluating(0);
  BOOST_REQUIRE(row);
  BOOST_TEST(row->samples == 400u);
  BOOST_TEST(std::abs(row->elapsed_seconds - 5) < 1e-6);
  BOOST_TEST(std::abs(row->epoch_seconds - 5) < 1e-6);
  BOOST_TEST(std::abs(row->training_seconds - 4) < 1e-6);  // its last report
  BOOST_TEST(row->platforms_up == 2u);
  BOOST_TEST(row->prediction_error == -1.0);  // GoSGD predicts nothing
  BOOST_TEST(b.slowest_training(0) == 4.0);
  auto& e = b.evaluation_done(0, 0.5, 0.8, 0.5);
  BOOST_TEST(e.averaged_accuracy == 0.8);
  BOOST_TEST(!b.evaluating(0));
  BOOST_TEST(!b.begin_evaluation(0, at(6)));  // evaluated
  BOOST_TEST(!b.all_evaluated());
  // The user waited 6 s: 4 s training, 0.5 s evaluating, 1.5 s for messages.
  auto& closed = b.close(0, at(6));
  BOOST_TEST(std::abs(closed.wall_seconds - 6) < 1e-6);
  BOOST_TEST(std::abs(closed.network_seconds - 1.5) < 1e-6);
  BOOST_TEST(b.epoch_line(0)
             == "epoch 1/2: 6.0 s (4.0 s training, 1.5 s waiting for messages, 0.5 s "
                "evaluating), 400 samples (80/s), averaged model accuracy 0.8000, 2 platforms "
                "up");
  // The next epoch's wall time starts where this one closed.
  b.plan(1, {}, at(6));
  reports(b, "p0", 1, 9, 300, 3.0);
  reports(b, "p1", 1, 10, 100, 4.0);
  b.begin_evaluation(1, at(10));
  BOOST_TEST(std::abs(b.evaluating(1)->training_seconds - 8) < 1e-6);
  b.evaluation_done(1, 0.4, 0.85, 0);
  BOOST_TEST(std::abs(b.close(1, at(11)).wall_seconds - 5) < 1e-6);
  BOOST_TEST(b.all_evaluated());
  BOOST_TEST(b.evaluated_epochs().size() == 2u);
  BOOST_TEST(b.progress_line(at(71)) == "epoch 2/2 | p0 e2   0% p1 e2   0% | loss 0.000 | avg "
                                        "acc 0.8500 | 1:11");
}

BOOST_AUTO_TEST_CASE(train_average_every_says_which_epochs_are_averaged) {
  auto s = settings({"p0", "p1"}, 7);
  s.average_every = 3;
  barrier every3(s);
  std::vector<bool> got;
  for (uint32_t e = 0; e < 7; ++e)
    got.push_back(every3.averages(e));
  // Epochs 3 and 6 (counted from 1), and the last, 7.
  BOOST_TEST(got == (std::vector<bool>{false, false, true, false, false, true, true}));
  s.average_every = 0;  // the last only
  barrier last_only(s);
  BOOST_TEST(!last_only.averages(0));
  BOOST_TEST(!last_only.averages(5));
  BOOST_TEST(last_only.averages(6));
  BOOST_TEST(barrier(settings({"p0"}, 3)).averages(0));  // every epoch by default

  // An epoch without its average says so, and the progress line keeps the
  // newest average's accuracy.
  s.average_every = 2;
  auto b = joined(s);
  // Epoch e (from 0) runs from 5e to 5e + 4 s; epoch 1 (the second) is averaged.
  for (uint32_t e = 0; e < 3; ++e) {
    const double t0 = 5.0 * e;
    b.plan(e, {}, at(t0));
    reports(b, "p0", e, t0 + 3, 300, 3.0);
    reports(b, "p1", e, t0 + 4, 100, 4.0);
    BOOST_REQUIRE(b.begin_evaluation(e, at(t0 + 4)));
    if (e == 1)
      b.evaluation_done(e, 0.5, 0.75, 0.5);
    else
      b.evaluation_done(e, std::vector<eg::storage::node_test>{}, 0.0);
    b.close(e, at(t0 + 4.5));
  }
  BOOST_TEST(b.epoch_line(0).find("averaged model accuracy not made (train.average_every = 2)")
               != std::string::npos,
             b.epoch_line(0));
  BOOST_TEST(b.epoch_line(1).find("averaged model accuracy 0.7500") != std::string::npos,
             b.epoch_line(1));
  BOOST_TEST(b.progress_line(at(14)).find("avg acc 0.7500") != std::string::npos,
             b.progress_line(at(14)));
}

BOOST_AUTO_TEST_CASE(the_averaged_models_accuracy_is_over_every_nodes_test_data) {
  // Node a tested it on 100 samples (80 right), b on 300 (150 right): the
  // cluster's accuracy is 230 / 400, not the mean of 0.8 and 0.5.
  auto b = joined(settings({"p0", "p1"}, 2));
  b.plan(0, {}, at(0));
  reports(b, "p0", 0, 3, 300, 3.0);
  reports(b, "p1", 0, 4, 100, 4.0);
  BOOST_REQUIRE(b.begin_evaluation(0, at(5)));
  auto& e = b.evaluation_done(0, {{"a", 80, 100, 0.4}, {"b", 150, 300, 1.2}}, 0.5);
  BOOST_TEST(e.averaged_accuracy == 230.0 / 400, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(e.averaged_loss == (0.4 * 100 + 1.2 * 300) / 400, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE_EQUAL(e.tests.size(), 2u);
  b.close(0, at(6));
  BOOST_TEST(b.epoch_line(0).find("averaged model accuracy 0.5750 (a 0.8000 of 100, b 0.5000 "
                                  "of 300)") != std::string::npos,
             b.epoch_line(0));
  // No node tested epoch 2: no accuracy, and the line says so.
  b.plan(1, {}, at(6));
  reports(b, "p0", 1, 9, 300, 3.0);
  reports(b, "p1", 1, 10, 100, 4.0);
  BOOST_REQUIRE(b.begin_evaluation(1, at(10)));
  auto& none = b.evaluation_done(1, std::vector<storage::node_test>{}, 0);
  BOOST_TEST(std::isnan(none.averaged_accuracy));
  BOOST_TEST(b.epoch_line(1).find("accuracy n/a (no node tested it)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_prediction_error_of_an_edgegossip_epoch) {
  auto b = joined(edgegossip({"p0", "p1"}));
  b.plan(0, predictions({{"p0", 300}, {"p1", 150}}), at(0));  // both predicted 5 s
  reports(b, "p0", 0, 4, 1500, 4.0);
  reports(b, "p1", 0, 5, 750, 5.0);
  b.begin_evaluation(0, at(5));
  // |5 - 4| / 4 and |5 - 5| / 5: 12.5 % on average.
  BOOST_TEST(std::abs(b.evaluating(0)->prediction_error - 0.125) < 1e-9);
}

BOOST_AUTO_TEST_CASE(a_continued_run_keeps_its_epochs_reports_and_clock) {
  storage::run_state saved;
  saved.run = "saved";
  saved.epochs.push_back({0, 5, 5, 200, 1.0, 0.5, 2, 5, -1});
  saved.epochs.push_back({1, 10, 5, 200, 0.9, 0.6, 2, 10, -1});
  saved.reports.push_back(storage::encode_report(report("p0", 1), "c"));
  saved.reports.push_back(storage::encode_report(report("p1", 1), "another cluster"));
  saved.reports.push_back("not a report");
  barrier b(settings({"p0", "p1"}, 4));
  b.join("p0", "local", false);
  b.start(at(0));
  std::vector<std::string> unusable;
  BOOST_TEST(b.resume(saved, "c", unusable) == 2u);  // the epoch after the last evaluated
  BOOST_TEST(unusable.size() == 2u);
  BOOST_TEST(b.all_reports().size() == 1u);
  BOOST_TEST(b.evaluated().size() == 2u);
  BOOST_TEST(!b.all_evaluated());
  BOOST_TEST(std::abs(b.elapsed(at(3)) - 13) < 1e-6);  // 10 s before this balancer
  // Saved reports do not count for the barrier: p0 is expected in epoch 1.
  BOOST_TEST(!b.complete(1));
}

// -- the console's view -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_console_snapshot_shows_what_the_barrier_knows) {
  auto cfg = config::default_config();  // node "local" with p0 .. p3
  cfg.id = "snap";
  cfg.train.epochs = 2;
  auto s = barrier_settings::of(cfg);
  barrier b(s);
  b.join("p0", "local", false);
  b.join("p1", "local", false);
  b.join("p2", "local", false);
  b.start(at(0));
  b.plan(0, {}, at(0));
  auto r = report("p0", 0, 100);
  r.planned_samples = 400;
  b.progress(r);
  b.down("p2");
  inspection::console_state console;
  console.joined("p1", "local", true);  // restoring
  console.store_failed("local", "disk full");
  BOOST_TEST(!console.store_failed("local", "disk full"));  // once
  inspection::run_status run{"snap-1", true, false, 12};
  const auto layout = inspection::cluster_layout::of(cfg);
  auto snap = inspection::console_snapshot(layout, b, console, run,
                                           predictions({{"p0", 250}}), "local");
  BOOST_TEST(snap.cluster.id == "snap");
  BOOST_TEST(snap.cluster.run == "snap-1");
  BOOST_TEST(snap.cluster.state == "training");
  BOOST_TEST(snap.cluster.elapsed_seconds == 12.0);
  BOOST_TEST(snap.cluster.epochs == 2u);
  BOOST_TEST(snap.cluster.platforms_up == 2u);
  BOOST_TEST(snap.cluster.platforms_down == 1u);
  BOOST_TEST(snap.cluster.via == "local");
  BOOST_REQUIRE_EQUAL(snap.platforms.size(), 4u);
  BOOST_TEST(snap.platforms[0].state == "up");
  BOOST_TEST(snap.platforms[0].throughput == 250.0);
  BOOST_TEST(snap.platforms[0].progress == 0.25);
  BOOST_TEST(snap.platforms[1].state == "restoring");
  BOOST_TEST(snap.platforms[2].state == "down");
  BOOST_TEST(snap.platforms[3].state == "waiting");  // not joined
  BOOST_REQUIRE_EQUAL(snap.nodes.size(), 1u);
  BOOST_TEST(snap.nodes[0].store == "disk full");
  BOOST_TEST(snap.events.size() == 2u);
  // Paused by the console, then resumed.
  console.command(messages::verb::pause, b.live(), b, at(1));
  BOOST_TEST(console.paused);
  auto paused = inspection::console_snapshot(layout, b, console, run, {}, "local");
  BOOST_TEST(paused.cluster.state == "paused");
  BOOST_TEST(paused.platforms[0].paused);
  BOOST_TEST(console.command(messages::verb::resume, b.live(), b, at(2))
             == "resume sent to 2 platforms (p0, p1)");
  BOOST_TEST(!console.paused);
  BOOST_TEST(console.events.recent().back().text == "resume sent to 2 platforms (p0, p1) by the "
                                                     "console");
}

BOOST_AUTO_TEST_SUITE_END()

// links: eg_learning
#include "algorithms/edgegossip/balancing.hpp"
#include "algorithms/edgegossip/predictor.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace eg::learning;

namespace {

std::vector<std::string> names(const balance_plan& plan) {
  std::vector<std::string> out;
  for (const auto& d : plan.platforms)
    out.push_back(d.name);
  return out;
}

const balance_decision& find(const balance_plan& plan, const std::string& name) {
  for (const auto& d : plan.platforms)
    if (d.name == name)
      return d;
  BOOST_FAIL("no platform " << name);
  return plan.platforms.front();
}

} // namespace

BOOST_AUTO_TEST_SUITE(balancing)

BOOST_AUTO_TEST_CASE(speeds_one_one_third_fifth_with_equal_data) {
  // The paper's setting: fast platforms 3x and 5x the slow ones, 25 % each.
  auto plan = balance({{"slow3", 1500, 100.0 / 3}, {"fast1", 1500, 100}, {"slow5", 1500, 20},
                       {"fast2", 1500, 100}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"fast1", "fast2", "slow3", "slow5"}),
             boost::test_tools::per_element());
  const double ratios[] = {1, 1, 1.0 / 3, 1.0 / 5};
  const double seconds[] = {15, 15, 45, 75};
  for (size_t i = 0; i < 4; ++i) {
    BOOST_TEST(plan.platforms[i].ratio == ratios[i], boost::test_tools::tolerance(1e-12));
    BOOST_TEST(plan.platforms[i].epoch_seconds == seconds[i], boost::test_tools::tolerance(1e-12));
    BOOST_TEST(!plan.platforms[i].failed);
  }
  BOOST_TEST(plan.failed == 0u);
  BOOST_TEST(!plan.exception_handling);
}

BOOST_AUTO_TEST_CASE(unequal_data) {
  auto plan = balance({{"a", 100, 10}, {"b", 300, 10}, {"c", 50, 1}, {"d", 200, 40}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"d", "a", "b", "c"}),
             boost::test_tools::per_element());
  BOOST_TEST(find(plan, "d").epoch_seconds == 5.0);
  BOOST_TEST(find(plan, "d").ratio == 1.0);
  BOOST_TEST(find(plan, "a").ratio == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "b").ratio == 1.0 / 6, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "c").ratio == 0.1, boost::test_tools::tolerance(1e-12));
  // Every platform then finishes at the fastest one's time.
  for (const auto& d : plan.platforms)
    BOOST_TEST(d.epoch_seconds * d.ratio == 5.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_down_platform_fails_and_goes_last) {
  auto plan = balance({{"a", 100, 10, true}, {"b", 100, 10}, {"c", 100, 5}, {"d", 100, 20}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"d", "b", "c", "a"}),
             boost::test_tools::per_element());
  const auto& a = plan.platforms.back();
  BOOST_TEST(a.failed);
  BOOST_TEST(a.ratio == 0.0);
  BOOST_TEST(std::isinf(a.epoch_seconds));
  BOOST_TEST(plan.failed == 1u);
  BOOST_TEST(plan.exception_handling);  // 1 / 4 > 10 %
  BOOST_TEST(find(plan, "b").ratio == 0.5);
  BOOST_TEST(find(plan, "c").ratio == 0.25);
}

BOOST_AUTO_TEST_CASE(exception_handling_only_strictly_above_the_threshold) {
  std::vector<platform_estimate> ten;
  for (int i = 0; i < 10; ++i)
    ten.push_back({"p" + std::to_string(i), 100, 10});
  ten[3].down = true;
  auto plan = balance(ten);
  BOOST_TEST(plan.failed == 1u);
  BOOST_TEST(!plan.exception_handling);  // 1 / 10 is not above 10 %
  ten[7].down = true;
  plan = balance(ten);
  BOOST_TEST(plan.failed == 2u);
  BOOST_TEST(plan.exception_handling);
  BOOST_TEST(!balance(ten, 0.001, 0.2).exception_handling);

  auto four = balance({{"a", 100, 10, true}, {"b", 100, 10}, {"c", 100, 10}, {"d", 100, 10}},
                      0.001, 0.3);
  BOOST_TEST(four.failed == 1u);
  BOOST_TEST(!four.exception_handling);  // 25 % is below 30 %
}

BOOST_AUTO_TEST_CASE(throughput_below_the_threshold_fails) {
  auto plan = balance({{"slow", 100, 0.0005},
                       {"edge", 100, 0.001},
                       {"zero", 100, 0},
                       {"nan", 100, std::numeric_limits<double>::quiet_NaN()},
                       {"ok", 100, 1}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"ok", "edge", "nan", "slow", "zero"}),
             boost::test_tools::per_element());
  BOOST_TEST(!find(plan, "edge").failed);  // p_i < p_threshold fails, p_i == p_threshold does not
  BOOST_TEST(find(plan, "edge").ratio == 0.001, boost::test_tools::tolerance(1e-12));
  for (const char* n : {"slow", "zero", "nan"}) {
    BOOST_TEST(find(plan, n).failed);
    BOOST_TEST(find(plan, n).ratio == 0.0);
    BOOST_TEST(std::isinf(find(plan, n).epoch_seconds));
  }
  BOOST_TEST(plan.failed == 3u);
  BOOST_TEST(plan.exception_handling);
  BOOST_TEST(balance({{"a", 100, 5}}, 10).platforms[0].failed);
}

BOOST_AUTO_TEST_CASE(ties_are_ordered_by_name) {
  auto plan = balance({{"z", 100, 10}, {"a", 200, 20}, {"m", 50, 5}, {"b", 10, 0, true},
                       {"a0", 0, 0, true}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"a", "m", "z", "a0", "b"}),
             boost::test_tools::per_element());
  for (size_t i = 0; i < 3; ++i)
    BOOST_TEST(plan.platforms[i].ratio == 1.0);
}

BOOST_AUTO_TEST_CASE(platform_without_data) {
  auto plan = balance({{"empty", 0, 10}, {"a", 100, 10}, {"b", 100, 5}});
  BOOST_TEST(names(plan) == (std::vector<std::string>{"empty", "a", "b"}),
             boost::test_tools::per_element());
  BOOST_TEST(plan.platforms[0].epoch_seconds == 0.0);
  BOOST_TEST(plan.platforms[0].ratio == 1.0);
  BOOST_TEST(plan.platforms[1].ratio == 1.0);  // the fastest platform with work sets T_1
  BOOST_TEST(plan.platforms[2].ratio == 0.5);

  auto all_empty = balance({{"a", 0, 10}, {"b", 0, 1}});
  for (const auto& d : all_empty.platforms) {
    BOOST_TEST(d.ratio == 1.0);
    BOOST_TEST(d.epoch_seconds == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(empty_and_all_failed) {
  auto none = balance({});
  BOOST_TEST(none.platforms.empty());
  BOOST_TEST(none.failed == 0u);
  BOOST_TEST(!none.exception_handling);

  auto dead = balance({{"a", 100, 10, true}, {"b", 100, 0}});
  BOOST_TEST(dead.failed == 2u);
  BOOST_TEST(dead.exception_handling);
  for (const auto& d : dead.platforms)
    BOOST_TEST(d.ratio == 0.0);
}


BOOST_AUTO_TEST_CASE(epoch_deadline_is_a_factor_of_the_longer_of_first_done_and_planned) {
  // First platform done after 1 s of a 2 s plan: 1.5 x 2 + 0.25.
  BOOST_TEST(epoch_deadline(1.5, 1.0, 2.0) == 3.25);
  // Done after the plan said (all slower than predicted): from that time.
  BOOST_TEST(epoch_deadline(1.5, 4.0, 2.0) == 6.25);
  // No plan (the first epoch profiles every platform on all its data).
  BOOST_TEST(epoch_deadline(1.5, 0.8, 0.0, 0.0) == 1.2, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(ratios_follow_a_load_that_moves_between_platforms) {
  // A replay of the `shifting` profile without actors: four platforms of
  // 15,000 points whose slowdowns move twice (the fastest becomes the
  // slowest and back), each observed as a platform observes itself (an
  // observation every second of training and one at every epoch end) by a
  // predictor under constant contention, and planned by Algorithm 1 before
  // every epoch. The plan must match the platforms' true speeds from the
  // second epoch after each shift on.
  const double base = 1.0 / 20000;  // seconds per point, unslowed
  const std::vector<std::vector<double>> phases{{1, 2, 4, 8}, {8, 4, 2, 1}, {2, 8, 1, 3}};
  const int epochs_per_phase = 6;
  const int64_t shard = 15000, batch = 64;
  const std::vector<std::string> ps{"p0", "p1", "p2", "p3"};
  std::map<std::string, slowdown_model> models;
  std::map<std::string, observation_meter> meters;
  for (auto& p : ps) {
    models.emplace(p, slowdown_model{});
    meters.emplace(p, observation_meter{1.0});
  }
  const contention quiet{0.3, 0.1, 0.5, 0.2};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  for (int e = 0; e < epochs_per_phase * static_cast<int>(phases.size()); ++e) {
    const auto& slow = phases[static_cast<size_t>(e / epochs_per_phase)];
    std::vector<platform_estimate> estimates;
    bool known = true;
    for (auto& p : ps) {
      estimates.push_back({p, shard, models.at(p).throughput(quiet), false});
      known = known && models.at(p).size() > 0;
    }
    std::map<std::string, double> ratio;
    for (auto& p : ps)
      ratio[p] = 1;  // the first epoch profiles every platform on all its data
    if (known)
      for (auto& d : balance(estimates, 0.001, 0.1).platforms)
        ratio[d.name] = d.ratio;
    // The ratios the true speeds call for: r_i = T_fastest / T_i.
    const double fastest = *std::min_element(slow.begin(), slow.end());
    const int since_shift = e % epochs_per_phase;
    for (size_t i = 0; i < ps.size(); ++i) {
      const double ideal = fastest / slow[i];
      if (since_shift >= 1)
        BOOST_TEST(ratio[ps[i]] == ideal, boost::test_tools::tolerance(0.15));
      // Train r_i of the shard, observed as the platform does.
      auto points = static_cast<int64_t>(std::ceil(static_cast<double>(shard) * ratio[ps[i]]));
      auto& meter = meters.at(ps[i]);
      auto& model = models.at(ps[i]);
      for (int64_t done = 0; done < points; done += batch) {
        const auto n = std::min(batch, points - done);
        const double seconds = static_cast<double>(n) * base * slow[i] * noise(rng);
        if (auto o = meter.add(seconds, static_cast<uint64_t>(n)))
          model.observe(quiet, o->seconds / static_cast<double>(o->samples));
      }
      if (auto o = meter.flush())
        model.observe(quiet, o->seconds / static_cast<double>(o->samples));
    }
  }
}

// -- plans that count the network ------------------------------------------------------

/// An estimate with communication: c seconds a epoch whatever the share,
/// d seconds per point trained.
platform_estimate with_link(std::string name, int64_t samples, double throughput, double c,
                            double d) {
  platform_estimate e{std::move(name), samples, throughput};
  e.communication_seconds = c;
  e.communication_per_point = d;
  return e;
}

BOOST_AUTO_TEST_CASE(without_communication_the_plan_is_the_papers) {
  std::vector<platform_estimate> plain{{"a", 1500, 300}, {"b", 1500, 100}, {"c", 1500, 60}};
  std::vector<platform_estimate> zero;
  for (auto& e : plain)
    zero.push_back(with_link(e.name, e.samples, e.throughput, 0, 0));
  auto x = balance(plain), y = balance(zero);
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(x.platforms[i].ratio == y.platforms[i].ratio);
    BOOST_TEST(y.platforms[i].planned_seconds == 5.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(y.platforms[i].communication_seconds == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(a_platform_behind_a_slow_link_gets_a_share_it_can_train_and_send) {
  // Equal compute (300 points/s, 5 s for 1500 points); a's messages cost
  // nothing, b's 2/300 s per point trained on its link, so its whole shard's
  // messages take 10 s: half of them fit in a's 5 s.
  auto plan = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 300, 0, 2.0 / 300)});
  BOOST_TEST(find(plan, "a").ratio == 1.0);
  BOOST_TEST(find(plan, "b").ratio == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "b").epoch_seconds == 10.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "b").planned_seconds == 5.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "b").communication_seconds == 5.0, boost::test_tools::tolerance(1e-12));
  // On a slower platform training is what binds (it overlaps the messages):
  // 15 s of training against 10 of sending, a third fits.
  auto slower = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 100, 0, 2.0 / 300)});
  BOOST_TEST(find(slower, "b").ratio == 1.0 / 3, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(fixed_communication_sets_the_epochs_floor) {
  // Messages as many a epoch whatever the share (EdgeGossip's): c's link
  // takes 8 s, so no epoch is shorter; the others train on meanwhile
  // (b: 8 of its 15 s), and c trains its whole shard while its link works.
  auto plan = balance({with_link("a", 1500, 300, 1, 0), with_link("b", 1500, 100, 5, 0),
                       with_link("c", 1500, 300, 8, 0)});
  BOOST_TEST(find(plan, "a").ratio == 1.0);
  BOOST_TEST(find(plan, "b").ratio == 8.0 / 15, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "c").ratio == 1.0);
  BOOST_TEST(find(plan, "b").planned_seconds == 8.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "c").planned_seconds == 8.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(plan, "c").communication_seconds == 8.0, boost::test_tools::tolerance(1e-12));
  // Share-bound messages behind fixed ones: d's 8 s (within the 15 s that
  // s, the slowest, takes for its whole shard) leave b 3 s for its 1500
  // points at 1/500 s each on its link: all of them; at 2/500 s, half.
  const auto s = with_link("s", 1500, 100, 0, 0);
  auto both = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 300, 5, 1.0 / 500),
                       with_link("d", 1500, 300, 8, 0), s});
  BOOST_TEST(find(both, "b").ratio == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(both, "s").ratio == 8.0 / 15, boost::test_tools::tolerance(1e-12));
  auto tight = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 300, 5, 2.0 / 500),
                        with_link("d", 1500, 300, 8, 0), s});
  BOOST_TEST(find(tight, "b").ratio == 0.5, boost::test_tools::tolerance(1e-12));
  // Where the fixed part alone takes the whole epoch, the least it may.
  auto full = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 300, 8, 1.0 / 500),
                       with_link("d", 1500, 300, 8, 0), s});
  BOOST_TEST(find(full, "b").ratio == 0.001, boost::test_tools::tolerance(1e-12));
  // A NaN or negative estimate counts as no communication.
  auto odd = balance({with_link("a", 1500, 300, std::nan(""), -1),
                      with_link("b", 1500, 100, -5, std::nan(""))});
  BOOST_TEST(find(odd, "b").ratio == 1.0 / 3, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_link_slower_than_any_epoch_is_not_waited_for) {
  // a trains its shard in 5 s, b (the slowest) in 15 s. c's messages take
  // 12 s: the epoch is planned to last 12 s (b trains 12 of its 15 s).
  auto within = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 100, 0, 0),
                         with_link("c", 1500, 300, 12, 0)});
  BOOST_TEST(find(within, "b").ratio == 0.8, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(within, "c").communication_seconds == 12.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(within, "c").unplanned_communication == 0.0);
  // 40 s are longer than any epoch training allows (b's whole shard): no
  // plan lets them through, and waiting for them would set every share to
  // 1 (GoSGD's plan). They are left out: the plan is compute's.
  auto beyond = balance({with_link("a", 1500, 300, 0, 0), with_link("b", 1500, 100, 0, 0),
                         with_link("c", 1500, 300, 40, 0)});
  BOOST_TEST(find(beyond, "a").ratio == 1.0);
  BOOST_TEST(find(beyond, "b").ratio == 1.0 / 3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(find(beyond, "c").ratio == 1.0);
  BOOST_TEST(find(beyond, "c").unplanned_communication == 40.0);
  BOOST_TEST(find(beyond, "c").communication_seconds == 0.0);
  BOOST_TEST(find(beyond, "c").planned_seconds == 5.0, boost::test_tools::tolerance(1e-12));
  // A down platform's shard does not count as training the epoch allows.
  auto down = balance({with_link("a", 1500, 300, 0, 0), with_link("c", 1500, 300, 12, 0),
                       platform_estimate{"z", 1500, 10, true}});
  BOOST_TEST(find(down, "c").unplanned_communication == 12.0);
}

// -- the link model ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_link_model_learns_each_direction_and_follows_a_slowdown_at_once) {
  link_model m;  // at least 64 KB to learn from, tracking 0.5, change 1.5
  BOOST_TEST(m.send_seconds_per_byte() == 0.0);
  BOOST_TEST(m.observations() == 0u);
  // 1 MB sent in 0.8 s, 2 MB received in 0.4 s.
  m.observe(0.8, 1'000'000, 0.4, 2'000'000);
  BOOST_TEST(m.send_seconds_per_byte() == 8e-7, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m.receive_seconds_per_byte() == 2e-7, boost::test_tools::tolerance(1e-12));
  // Noise within the factor 1.5 is averaged (the newest weighs half).
  m.observe(1.0, 1'000'000, 0.4, 2'000'000);
  BOOST_TEST(m.send_seconds_per_byte() == 9e-7, boost::test_tools::tolerance(1e-12));
  // A few frames teach nothing: the estimate stays.
  m.observe(5.0, 1000, 0, 0);
  BOOST_TEST(m.send_seconds_per_byte() == 9e-7, boost::test_tools::tolerance(1e-12));
  // The link slows down tenfold: followed from this epoch on, not averaged in.
  m.observe(9.0, 1'000'000, 0.4, 2'000'000);
  BOOST_TEST(m.send_seconds_per_byte() == 9e-6, boost::test_tools::tolerance(1e-12));
  // And back.
  m.observe(0.9, 1'000'000, 0.4, 2'000'000);
  BOOST_TEST(m.send_seconds_per_byte() == 9e-7, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m.receive_seconds_per_byte() == 2e-7, boost::test_tools::tolerance(1e-12));
  // A clock gone wrong teaches nothing.
  m.observe(std::nan(""), 1'000'000, -1, 2'000'000);
  BOOST_TEST(m.send_seconds_per_byte() == 9e-7, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(m.receive_seconds_per_byte() == 2e-7, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()

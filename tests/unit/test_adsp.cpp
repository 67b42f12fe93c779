// links: eg_learning
#include "algorithms/ps/adsp.hpp"
#include "algorithms/ps/commit_schedule.hpp"
#include "algorithms/ps/parameter_server.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

using namespace eg::learning;

BOOST_AUTO_TEST_SUITE(adsp)

BOOST_AUTO_TEST_CASE(commit_interval_is_gamma_over_c_less_the_overhead_never_below_the_minimum) {
  // Gamma 60 s, C 3: 20 s less the overhead.
  BOOST_TEST(adsp_commit_interval(60, 3, 2.5, 10) == 17.5);
  BOOST_TEST(adsp_commit_interval(60, 1, 0, 10) == 60.0);
  // C 5: 12 s - 4 s = 8 s, held at the minimum of 10 s.
  BOOST_TEST(adsp_commit_interval(60, 5, 4, 10) == 10.0);
  // A slower worker (larger overhead) commits sooner after its last commit,
  // so both make C commits a period.
  BOOST_TEST(adsp_commit_interval(6, 2, 0.5, 0.5) < adsp_commit_interval(6, 2, 0.1, 0.5));
  BOOST_CHECK_THROW(adsp_commit_interval(0, 1, 0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(adsp_commit_interval(60, 0, 0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(adsp_commit_interval(60, 1, -1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(adsp_commit_interval(60, 1, 0, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(three_points_of_a_known_curve_give_it_back) {
  // l(t) = 1 / (0.04 t + 0.5) + 0.3, sampled as the scheduler does: at the
  // start, half the check period and the end.
  loss_curve truth{0.04, 0.5, 0.3, 0};
  std::vector<std::pair<double, double>> p;
  for (double t : {0.0, 30.0, 60.0})
    p.push_back({t, truth.at(t)});
  auto f = fit_loss_curve(p);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(std::fabs(f->a2 - 0.04) < 1e-4);
  BOOST_TEST(std::fabs(f->b - 0.5) < 1e-3);
  BOOST_TEST(std::fabs(f->c - 0.3) < 1e-4);
  BOOST_TEST(f->residual < 1e-10);
  // Time to a loss of 0.5: 1 / 0.2 = 5 = 0.04 t + 0.5, t = 112.5 s.
  BOOST_TEST(std::fabs(f->time_to(0.5) - 112.5) < 0.5);
  BOOST_TEST(std::fabs(f->reward(0.5) - 1 / 112.5) < 1e-4);
}

BOOST_AUTO_TEST_CASE(a_noisy_curve_is_fitted_close_to_the_truth) {
  loss_curve truth{0.01, 0.4, 0.2, 0};
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0, 0.005);
  std::vector<std::pair<double, double>> p;
  for (int i = 0; i <= 40; ++i) {
    double t = 5.0 * i;
    p.push_back({t, truth.at(t) + noise(rng)});
  }
  auto f = fit_loss_curve(p);
  BOOST_REQUIRE(f.has_value());
  for (double t : {0.0, 50.0, 100.0, 200.0})
    BOOST_TEST(std::fabs(f->at(t) - truth.at(t)) < 0.02, "t = " << t);
  // About as close to the points as the truth itself (the fit is exact
  // least squares in 1 / (l - c), near it in l).
  double truth_error = 0;
  for (auto& [t, l] : p)
    truth_error += (l - truth.at(t)) * (l - truth.at(t));
  BOOST_TEST(f->residual <= truth_error * 1.5);
}

BOOST_AUTO_TEST_CASE(fit_refuses_too_few_times_and_non_numbers) {
  BOOST_TEST(!fit_loss_curve({{0, 2}, {1, 1}}).has_value());
  BOOST_TEST(!fit_loss_curve({{0, 2}, {0, 1.5}, {1, 1}}).has_value());  // two distinct times
  BOOST_TEST(!fit_loss_curve({{0, 2}, {1, std::nan("")}, {2, 1}}).has_value());
}

BOOST_AUTO_TEST_CASE(reward_is_zero_out_of_reach_and_infinite_once_there) {
  loss_curve f{0.04, 0.5, 0.3, 0};
  BOOST_TEST(f.reward(0.3) == 0.0);   // the asymptote: never
  BOOST_TEST(f.reward(0.2) == 0.0);   // below it: never
  BOOST_TEST(std::isinf(f.reward(5.0)));  // above the start (2.3): already there
  loss_curve flat{0, 0.5, 0.3, 0};
  BOOST_TEST(flat.reward(1.0) == 0.0);
  // A steeper curve reaches the target sooner: a higher reward.
  loss_curve steep{0.08, 0.5, 0.3, 0};
  BOOST_TEST(steep.reward(0.5) > f.reward(0.5));
}

BOOST_AUTO_TEST_CASE(rising_losses_fit_a_flat_curve_with_no_reward) {
  auto f = fit_loss_curve({{0, 1.0}, {30, 1.2}, {60, 1.5}});
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(f->a2 == 0.0);
  BOOST_TEST(f->reward(0.5) == 0.0);
}

BOOST_AUTO_TEST_CASE(search_climbs_while_c_plus_1_scores_higher) {
  // Scripted rewards peaking at C = 4: the search tests 1, 2, 3, 4, 5 and
  // settles on 4.
  auto reward = [](int64_t c) { return 10.0 - (c - 4.0) * (c - 4.0); };
  commit_rate_search s;
  std::vector<int64_t> tried;
  while (s.searching()) {
    tried.push_back(s.trial());
    s.report(reward(s.trial()));
    BOOST_REQUIRE(tried.size() < 20);
  }
  BOOST_TEST(tried == (std::vector<int64_t>{1, 2, 3, 4, 5}));
  BOOST_TEST(s.target() == 4);
  BOOST_TEST(s.trial() == 4);  // settled: the workers run C = 4
  // A tie does not climb.
  commit_rate_search t;
  t.report(1.0);
  t.report(1.0);
  BOOST_TEST(!t.searching());
  BOOST_TEST(t.target() == 1);
}

BOOST_AUTO_TEST_CASE(search_again_starts_from_the_settled_c) {
  commit_rate_search s;
  s.report(1);
  s.report(2);  // 2 beats 1
  s.report(1);  // 3 loses to 2
  BOOST_REQUIRE(!s.searching());
  BOOST_TEST(s.target() == 2);
  // The load changed: now more commits pay.
  s.again();
  BOOST_TEST(s.trial() == 2);
  s.report(1);
  BOOST_TEST(s.trial() == 3);
  s.report(5);
  BOOST_TEST(s.trial() == 4);
  s.report(4);
  BOOST_TEST(!s.searching());
  BOOST_TEST(s.target() == 3);
  BOOST_CHECK_THROW(commit_rate_search(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(search_is_due_after_its_period_or_a_30_percent_rise) {
  search_trigger tr(100, 0.3);
  BOOST_TEST(!tr.due(0, 1.0));  // not settled yet: nothing is due
  tr.settled(10, 1.0);
  BOOST_TEST(!tr.due(20, 0.8));
  BOOST_TEST(!tr.due(30, 1.03));  // 0.8 * 1.3 = 1.04
  BOOST_TEST(tr.due(40, 1.05));
  BOOST_TEST(!tr.due(41, 2.0));  // fired once; armed again when settled
  tr.settled(50, 0.7);
  BOOST_TEST(!tr.due(149, 0.7));
  BOOST_TEST(tr.due(150, 0.7));
}

BOOST_AUTO_TEST_CASE(ssp_holds_a_worker_more_than_s_commits_ahead_of_the_slowest) {
  staleness_bound ssp(2);
  ssp.join("fast");
  ssp.join("slow");
  for (int i = 0; i < 2; ++i)
    ssp.tick("fast");
  BOOST_TEST(ssp.may_proceed("fast"));  // 2 ahead: allowed
  ssp.tick("fast");
  BOOST_TEST(!ssp.may_proceed("fast"));  // 3 ahead: waits
  BOOST_TEST(ssp.lead("fast") == 3u);
  ssp.tick("slow");
  BOOST_TEST(ssp.may_proceed("fast"));
  // The slow one goes down: it no longer holds the fast one back.
  for (int i = 0; i < 5; ++i)
    ssp.tick("fast");
  BOOST_TEST(!ssp.may_proceed("fast"));
  ssp.leave("slow");
  BOOST_TEST(ssp.may_proceed("fast"));
  // A newcomer starts at the slowest clock, neither behind nor ahead.
  ssp.join("new");
  BOOST_TEST(ssp.clock("new") == ssp.clock("fast"));
  BOOST_CHECK_THROW(ssp.tick("nobody"), std::invalid_argument);
  // s = 0 is BSP: nobody runs a commit ahead.
  staleness_bound bsp(0);
  bsp.join("a");
  bsp.join("b");
  bsp.tick("a");
  BOOST_TEST(!bsp.may_proceed("a"));
  bsp.tick("b");
  BOOST_TEST(bsp.may_proceed("a"));
  BOOST_TEST(bsp.may_proceed("b"));
}

BOOST_AUTO_TEST_CASE(adacomm_shrinks_its_period_with_the_loss) {
  // tau0 = 40: loss down to a quarter gives ceil(0.5 * 40) = 20 < 40.
  BOOST_TEST(adacomm_period(0.5, 2.0, 40, 40) == 20);
  // A candidate not below the current period halves it instead.
  BOOST_TEST(adacomm_period(2.0, 2.0, 40, 40) == 20);
  BOOST_TEST(adacomm_period(1.9, 2.0, 40, 5) == 3);
  BOOST_TEST(adacomm_period(1.0, 2.0, 40, 1) == 1);  // never below 1
  BOOST_CHECK_THROW(adacomm_period(1, 0, 40, 40), std::invalid_argument);
  BOOST_CHECK_THROW(adacomm_period(1, 1, 0, 40), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(server_adds_each_commit_over_n_and_counts_versions) {
  std::vector<torch::Tensor> x0{torch::zeros({2, 2}), torch::ones({3})};
  global_model server(x0, 2);
  // Worker a pulled x0 and trained; its commit is its model minus x0.
  commit_base a, b;
  auto pa = std::vector<torch::Tensor>{torch::empty({2, 2}), torch::empty({3})};
  auto pb = std::vector<torch::Tensor>{torch::empty({2, 2}), torch::empty({3})};
  a.pulled(pa, server.params());
  b.pulled(pb, server.params());
  BOOST_TEST(torch::equal(pa[1], torch::ones({3})));
  pa[0].add_(4.0);   // a moved +4 on the first tensor
  pb[1].add_(-2.0);  // b moved -2 on the second
  server.apply(a.commit(pa));
  server.apply(b.commit(pb));
  BOOST_TEST(server.version() == 2u);
  BOOST_TEST(torch::allclose(server.params()[0], torch::full({2, 2}, 2.0)));
  BOOST_TEST(torch::allclose(server.params()[1], torch::zeros({3})));
  // x0 was copied: the caller's tensors are untouched.
  BOOST_TEST(torch::equal(x0[0], torch::zeros({2, 2})));
  // A second commit from a carries only what a trained since the first.
  pa[0].add_(1.0);
  auto u = a.commit(pa);
  BOOST_TEST(torch::allclose(u[0], torch::ones({2, 2})));
  BOOST_TEST(torch::allclose(u[1], torch::zeros({3})));
}

BOOST_AUTO_TEST_CASE(an_update_the_server_never_got_goes_again_with_the_next_commit) {
  std::vector<torch::Tensor> x0{torch::zeros({2, 2}), torch::ones({3})};
  global_model server(x0, 1);
  commit_base a;
  auto pa = std::vector<torch::Tensor>{torch::empty({2, 2}), torch::empty({3})};
  a.pulled(pa, server.params());
  pa[0].add_(3.0);
  auto lost = a.commit(pa);  // never arrives
  a.returned(lost);
  pa[1].add_(-1.0);  // trained on meanwhile
  auto u = a.commit(pa);
  BOOST_TEST(torch::allclose(u[0], torch::full({2, 2}, 3.0)));
  BOOST_TEST(torch::allclose(u[1], torch::full({3}, -1.0)));
  server.apply(u);
  // Nothing lost, nothing counted twice: the server holds the worker's model.
  BOOST_TEST(torch::allclose(server.params()[0], pa[0]));
  BOOST_TEST(torch::allclose(server.params()[1], pa[1]));
  BOOST_CHECK_THROW(a.returned({torch::zeros({1})}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(server_refuses_a_commit_that_does_not_fit_and_changes_nothing) {
  global_model server({torch::zeros({2}), torch::zeros({3})}, 1);
  BOOST_CHECK_THROW(server.apply({torch::ones({2})}), std::invalid_argument);
  BOOST_CHECK_THROW(server.apply({torch::ones({2}), torch::ones({4})}), std::invalid_argument);
  auto bad = torch::ones({3});
  bad[1] = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_THROW(server.apply({torch::ones({2}), bad}), std::invalid_argument);
  BOOST_TEST(server.version() == 0u);
  BOOST_TEST(torch::equal(server.params()[0], torch::zeros({2})));
  BOOST_TEST(torch::equal(server.params()[1], torch::zeros({3})));
  // Restore from a checkpoint: those parameters, that version.
  server.restore({torch::ones({2}), torch::ones({3})}, 17);
  BOOST_TEST(server.version() == 17u);
  BOOST_TEST(torch::equal(server.params()[1], torch::ones({3})));
  BOOST_CHECK_THROW(global_model({torch::zeros({1})}, 0), std::invalid_argument);
  commit_base never_pulled;
  BOOST_CHECK_THROW(never_pulled.commit({torch::zeros({1})}), std::logic_error);
}

namespace {
std::vector<std::string> who(const std::vector<release>& r) {
  std::vector<std::string> out;
  for (auto& x : r)
    out.push_back(x.worker);
  std::sort(out.begin(), out.end());
  return out;
}
using names = std::vector<std::string>;
} // namespace

BOOST_AUTO_TEST_CASE(bsp_answers_a_round_once_every_active_worker_committed) {
  commit_settings s;
  s.model = sync_model::bsp;
  commit_schedule c(s, {"a", "b"});
  BOOST_TEST(who(c.commit("a", 0, 1.0, 0, false)).empty());  // a waits
  BOOST_TEST(c.workers().at("a").held);
  BOOST_TEST((who(c.commit("b", 1, 1.0, 0, false)) == names{"a", "b"}));
  BOOST_TEST(!c.workers().at("a").held);
  // b ends its epoch (resting): answered at once, and a's round is a alone.
  BOOST_TEST((who(c.commit("b", 2, 1.0, 0, true)) == names{"b"}));
  BOOST_TEST((who(c.commit("a", 3, 1.0, 0, false)) == names{"a"}));
  // b is back; a waits for it; b goes down: a goes on.
  BOOST_TEST(who(c.commit("b", 4, 1.0, 0, false)).empty());
  BOOST_TEST((who(c.commit("a", 5, 1.0, 0, false)) == names{"a", "b"}));
  BOOST_TEST(who(c.commit("a", 6, 1.0, 0, false)).empty());
  BOOST_TEST((who(c.leave("b")) == names{"a"}));
  auto r = c.commit("a", 7, 1.0, 0, false);
  BOOST_TEST(r.size() == 1u);
  BOOST_TEST(r[0].next.steps == 40);
}

BOOST_AUTO_TEST_CASE(ssp_holds_a_worker_more_than_s_commits_ahead_until_the_slowest_commits) {
  commit_settings s;
  s.model = sync_model::ssp;
  s.staleness = 1;
  commit_schedule c(s, {"a", "b"});
  BOOST_TEST((who(c.commit("a", 0, 1, 0, false)) == names{"a"}));
  BOOST_TEST((who(c.commit("b", 0, 1, 0, false)) == names{"b"}));
  BOOST_TEST((who(c.commit("a", 1, 1, 0, false)) == names{"a"}));  // 1 ahead: allowed
  BOOST_TEST(c.workers().at("a").lead == 1u);
  BOOST_TEST(who(c.commit("a", 2, 1, 0, false)).empty());  // 2 ahead: waits
  BOOST_TEST(c.workers().at("a").held);
  BOOST_TEST((who(c.commit("b", 3, 1, 0, false)) == names{"a", "b"}));
  // The slow one goes down: nobody is held back by it.
  BOOST_TEST(who(c.commit("a", 4, 1, 0, false)).empty());  // 4 against 2
  BOOST_TEST((who(c.leave("b")) == names{"a"}));
  BOOST_TEST((who(c.commit("a", 5, 1, 0, false)) == names{"a"}));
}

BOOST_AUTO_TEST_CASE(async_answers_at_once_and_adacomm_shortens_its_period_as_the_loss_falls) {
  commit_settings s;
  s.model = sync_model::async;
  s.commit_steps = 25;
  commit_schedule a(s, {"a"});
  auto r = a.commit("a", 0, 1, 0, false);
  BOOST_TEST(r.size() == 1u);
  BOOST_TEST(r[0].next.steps == 25);

  s.model = sync_model::adacomm;
  s.commit_steps = 40;
  s.check_period = 10;
  commit_schedule d(s, {"a"});
  d.commit("a", 0, 2.0, 0, false);
  BOOST_TEST(d.tau() == 40);
  d.commit("a", 5, 1.0, 0, false);
  // After a check period, the period's mean loss 0.5 / 2 ... ceil(sqrt(0.25) 40) = 20.
  r = d.commit("a", 10, 0.5, 0, false);
  // mean of 2.0, 1.0, 0.5 = 7/6: sqrt(7/12) * 40 = 30.55 -> 31 < 40.
  BOOST_TEST(d.tau() == 31);
  BOOST_TEST(r[0].next.steps == 31);
}

BOOST_AUTO_TEST_CASE(adsp_commits_by_steps_until_its_first_check_then_climbs_c_target_by_reward) {
  commit_settings s;
  s.model = sync_model::adsp;
  s.check_period = 10;
  s.min_interval = 1;
  s.target_loss = 0.5;
  commit_schedule c(s, {"a"});
  // Before the first check: every 40 steps.
  BOOST_TEST(c.commit("a", 0, 2.0, 0.2, false)[0].next.steps == 40);
  BOOST_TEST(c.commit("a", 5, 2.0, 0.2, false)[0].next.steps == 40);
  // The first check: the trial of C = 1 begins; interval Gamma / 1 - O.
  auto r = c.commit("a", 10, 2.0, 0.2, false);
  BOOST_TEST(r[0].next.steps == 0);
  BOOST_TEST(r[0].next.seconds == 9.8, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(c.c_target() == 1);
  // A loss curve per trial, l(t) = 1 / (a2 t + 1) + 0.2: C = 1 slow
  // (a2 = 0.05), C = 2 faster (0.2), C = 3 slower again (0.1).
  auto trial = [&](double start, double a2) {
    for (double t : {0.0, 3.0, 6.0, 9.0})
      c.commit("a", start + t, 1.0 / (a2 * t + 1) + 0.2, 0.2, false);
    return c.commit("a", start + 10, 1.0 / (a2 * 10 + 1) + 0.2, 0.2, false);
  };
  trial(10, 0.05);
  BOOST_TEST(c.searching());
  BOOST_TEST(c.c_target() == 2);  // C + 1 under trial
  r = trial(20, 0.2);
  BOOST_TEST(c.c_target() == 3);  // 2 beat 1: 3 is tried next
  BOOST_TEST(r[0].next.seconds == 10.0 / 3 - 0.2, boost::test_tools::tolerance(1e-9));
  trial(30, 0.1);
  BOOST_TEST(!c.searching());  // 3 did not beat 2: settled
  BOOST_TEST(c.c_target() == 2);
  r = c.commit("a", 41, 0.3, 0.2, false);
  BOOST_TEST(r[0].next.seconds == 4.8, boost::test_tools::tolerance(1e-9));
  // The loss rises 30 % over its lowest: the search starts again from 2.
  c.commit("a", 42, 0.41, 0.2, false);
  BOOST_TEST(c.searching());
  BOOST_TEST(c.c_target() == 2);
}

BOOST_AUTO_TEST_CASE(adsp_measures_its_periods_from_the_median_workers_step) {
  commit_settings s;
  s.model = sync_model::adsp;
  s.commit_steps = 40;
  // The ratios: Gamma = 1.5 * 40 steps, the least interval a sixth of it.
  auto p = measured_periods(0.01, 40);
  BOOST_TEST(p.check_period == 0.6, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(p.min_interval == 0.1, boost::test_tools::tolerance(1e-12));
  // Workers of 10, 20 and 50 ms per step (40 steps: 0.4, 0.8 and 2 s
  // between commits) and one that has not committed twice yet.
  commit_schedule c(s, {"a", "b", "c", "d"});
  BOOST_TEST(c.check_period() == 0.0);
  for (auto w : {"a", "b", "c", "d"})
    BOOST_TEST(c.commit(w, 0, 2.0, 0, false)[0].next.steps == 40);
  c.commit("a", 0.4, 2.0, 0, false);
  BOOST_TEST(c.check_period() == 0.0);  // one of four: not yet the median
  // An epoch's last commit (fewer steps) is no sample.
  c.commit("c", 1.0, 2.0, 0, true);
  BOOST_TEST(c.check_period() == 0.0);
  c.commit("b", 0.8, 2.0, 0, false);
  // a and b: the median of 10 and 20 ms is the lower, 10 ms.
  BOOST_TEST(c.step_seconds() == 0.01, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(c.check_period() == 0.6, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(c.min_interval() == 0.1, boost::test_tools::tolerance(1e-12));
  // The first check comes Gamma after the first commit: intervals in
  // seconds from then on, at least the least interval.
  auto r = c.commit("a", 0.8, 1.5, 0.05, false);
  BOOST_TEST(r[0].next.steps == 0);
  BOOST_TEST(r[0].next.seconds == 0.55, boost::test_tools::tolerance(1e-9));  // 0.6 / 1 - 0.05

  // Set in seconds, they are not measured; a period alone gives its sixth.
  s.check_period = 3;
  commit_schedule fixed(s, {"a"});
  BOOST_TEST(fixed.check_period() == 3.0);
  BOOST_TEST(fixed.min_interval() == 0.5);
  fixed.commit("a", 0, 2.0, 0, false);
  fixed.commit("a", 0.4, 2.0, 0, false);
  BOOST_TEST(fixed.step_seconds() == 0.0);
  s.min_interval = 4;
  BOOST_CHECK_THROW(commit_schedule(s, {"a"}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_workers_clock_counts_steps_or_seconds_and_measures_the_overhead) {
  commit_clock k(3);
  BOOST_TEST(!k.due(0));
  k.stepped(1.0);
  k.stepped(2.0);
  BOOST_TEST(!k.due(100));
  k.stepped(3.0);
  BOOST_TEST(k.due(0));
  BOOST_TEST(k.loss() == 2.0);
  k.committed(10.0);
  BOOST_TEST(!k.due(10.0));  // in flight
  k.stepped(1.0);
  BOOST_TEST(!k.due(50.0));
  k.answered(10.5, {0, 2.0});
  BOOST_TEST(k.overhead() == 0.5);
  BOOST_TEST(!k.due(12.0));  // 1.5 s since the answer
  BOOST_TEST(k.due(12.5));
  BOOST_CHECK_THROW(commit_clock(0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

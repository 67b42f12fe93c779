// links: eg_learning
// Cuts of a split model from the machines' speeds (algorithms/split/
// cut_planner.hpp), checked against every possible cut.
#include "algorithms/split/cut_planner.hpp"
#include "algorithms/split/split.hpp"
#include "common/error.hpp"
#include "models/layered.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>
#include <string>
#include <functional>
#include <random>

using namespace eg;
using namespace eg::learning;

namespace {

/// The slowest stage over every way of cutting `n` layers into `stages`.
double brute_force(const std::vector<layer_cost>& costs, const std::vector<double>& slowdowns,
                   stage_passes below) {
  const auto layers = static_cast<int64_t>(costs.size());
  const auto k = slowdowns.size() - 1;
  double best = 1e300;
  std::vector<int64_t> cuts(k);
  // Every increasing choice of k cuts in [0, layers - 2].
  std::function<void(size_t, int64_t)> pick = [&](size_t i, int64_t from) {
    if (i == k) {
      auto s = stage_seconds(costs, cuts, slowdowns, below);
      best = std::min(best, *std::max_element(s.begin(), s.end()));
      return;
    }
    for (int64_t c = from; c <= layers - 2; ++c) {
      cuts[i] = c;
      pick(i + 1, c + 1);
    }
  };
  pick(0, 0);
  return best;
}


/// "a b c" for a message.
std::string joined(const std::vector<double>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? " " : "") << v[i];
  return os.str();
}

/// Batches per second of a pipeline whose stage k takes t[k] seconds a
/// batch (a third forward, two thirds backward; the last stage both at
/// once), the first stage holding at most `in_flight` batches and every
/// stage keeping to the one-forward-one-backward schedule (stage k holds at
/// most max(1, in_flight - k); while it holds fewer it waits for a forward,
/// else for a backward: actors/stage.cpp, next_message). An event
/// simulation: the op that can start first, anywhere, runs next.
double simulated_rate(const std::vector<double>& t, int64_t in_flight, int batches = 400) {
  const size_t n = t.size();
  std::vector<std::deque<double>> up(n), down(n);  // arrival times of forwards, backwards
  std::vector<double> free_at(n, 0.0);
  std::vector<int64_t> holds(n, 0);
  int done = 0;
  std::vector<double> finished;  // the first stage's backward of each batch
  while (done < batches) {
    size_t best = n;
    double start = 1e300;
    bool backward = false;
    for (size_t k = 0; k < n; ++k) {
      const int64_t limit = std::max<int64_t>(1, in_flight - static_cast<int64_t>(k));
      const bool wants_forward = k + 1 == n || holds[k] < limit;
      double at;
      if (wants_forward) {
        if (k == 0)
          at = 0;  // the data is always there
        else if (up[k].empty())
          continue;
        else
          at = up[k].front();
      } else if (down[k].empty()) {
        continue;
      } else {
        at = down[k].front();
      }
      const double s = std::max(at, free_at[k]);
      if (s < start) {
        start = s;
        best = k;
        backward = !wants_forward;
      }
    }
    BOOST_REQUIRE(best < n);  // no deadlock
    const size_t k = best;
    if (k + 1 == n) {  // forward and backward at once
      if (k > 0)
        up[k].pop_front();
      free_at[k] = start + t[k];
      if (k > 0)
        down[k - 1].push_back(free_at[k]);
      else
        finished.push_back(free_at[k]), ++done;
    } else if (!backward) {
      if (k > 0)
        up[k].pop_front();
      ++holds[k];
      free_at[k] = start + t[k] / 3;
      up[k + 1].push_back(free_at[k]);
    } else {
      down[k].pop_front();
      --holds[k];
      free_at[k] = start + 2 * t[k] / 3;
      if (k > 0)
        down[k - 1].push_back(free_at[k]);
      else
        finished.push_back(free_at[k]), ++done;
    }
  }
  const auto half = finished.size() / 2;
  return static_cast<double>(finished.size() - 1 - half) / (finished.back() - finished[half]);
}
} // namespace

BOOST_AUTO_TEST_SUITE(cut_planner)

BOOST_AUTO_TEST_CASE(equal_layers_on_equal_machines_are_cut_evenly) {
  std::vector<layer_cost> costs(6, {1.0, 2.0});
  auto cuts = balanced_cuts(costs, {1, 1, 1}, {1, 1});
  BOOST_TEST(cuts == (std::vector<int64_t>{1, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_slower_machine_gets_fewer_layers) {
  std::vector<layer_cost> costs(10, {1.0, 1.0});
  // 4x slower second stage: 8 layers on the first, 2 on the second.
  auto cuts = balanced_cuts(costs, {1, 4}, {1, 1});
  BOOST_REQUIRE_EQUAL(cuts.size(), 1u);
  BOOST_TEST(cuts[0] == 7);
  auto s = stage_seconds(costs, cuts, {1, 4}, {1, 1});
  BOOST_TEST(s[0] == 16.0);
  BOOST_TEST(s[1] == 16.0);
  // A stage below the last that repeats its forward pass (delayed) holds less.
  auto delayed = balanced_cuts(costs, {1, 1}, {2, 1});
  BOOST_TEST(delayed[0] < 4);
}

BOOST_AUTO_TEST_CASE(the_plan_is_as_good_as_every_cut_tried) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> cost(0.01, 3.0), slow(1.0, 6.0);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t layers = 3 + trial % 7;
    const size_t stages = 2 + trial % std::min<size_t>(3, layers - 1);
    std::vector<layer_cost> costs(layers);
    for (auto& c : costs)
      c = {cost(rng), cost(rng)};
    std::vector<double> slowdowns(stages);
    for (auto& s : slowdowns)
      s = slow(rng);
    const stage_passes below{trial % 2 ? 2.0 : 1.0, 1.0};
    auto cuts = balanced_cuts(costs, slowdowns, below);
    BOOST_REQUIRE_EQUAL(cuts.size(), stages - 1);
    BOOST_REQUIRE(std::is_sorted(cuts.begin(), cuts.end()));
    auto s = stage_seconds(costs, cuts, slowdowns, below);
    BOOST_TEST(*std::max_element(s.begin(), s.end()) ==
                 brute_force(costs, slowdowns, below),
               boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(impossible_plans_are_refused) {
  std::vector<layer_cost> costs(2, {1.0, 1.0});
  BOOST_CHECK_THROW(balanced_cuts(costs, {1, 1, 1}, {1, 1}), argument_error);
  BOOST_CHECK_THROW(balanced_cuts(costs, {0.5, 1}, {1, 1}), argument_error);
  BOOST_CHECK_THROW(balanced_cuts(costs, {}, {1, 1}), argument_error);
  BOOST_CHECK_THROW(stage_seconds(costs, {1}, {1, 1}, {1, 1}), argument_error);  // past the end
}

BOOST_AUTO_TEST_CASE(a_slow_machine_takes_the_cheap_first_layers_when_that_is_faster) {
  // conv8's shape: cheap first and last layers, expensive middle ones.
  // With the fast machine first, the slow ones can only share the cheap
  // tail (the fast one keeps 21 of 22.3 seconds) or take an expensive layer
  // (24 seconds); placed first, they take the first two layers (8 and 16
  // seconds) and the fast one the rest (16.3).
  std::vector<layer_cost> costs{{1, 1}, {2, 2}, {3, 3}, {1.5, 1.5}, {3, 3}, {0.5, 0.5},
                                {0.1, 0.1}, {0.05, 0.05}};
  const std::vector<double> machines{1, 4, 4};
  auto in_order = stage_seconds(costs, balanced_cuts(costs, machines, {1, 1}), machines, {1, 1});
  auto p = balanced_placement(costs, machines, {1, 1});
  BOOST_REQUIRE_EQUAL(p.machines.size(), 3u);
  BOOST_TEST(p.machines == (std::vector<size_t>{1, 2, 0}), boost::test_tools::per_element());
  BOOST_TEST(p.slowest == 16.3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.slowest < *std::max_element(in_order.begin(), in_order.end()));
  std::vector<double> s;
  for (auto m : p.machines)
    s.push_back(machines[m]);
  auto secs = stage_seconds(costs, p.cuts, s, {1, 1});
  BOOST_TEST(p.slowest == *std::max_element(secs.begin(), secs.end()));
}

BOOST_AUTO_TEST_CASE(placement_is_as_fast_as_every_order_and_cut) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.01, 1.0);
  std::uniform_int_distribution<int> slow(1, 4);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<layer_cost> costs;
    for (int l = 0; l < 3 + trial % 6; ++l)
      costs.push_back({cost(rng), cost(rng)});
    std::vector<double> slowdowns;
    for (size_t k = 0; k < 2 + static_cast<size_t>(trial % 3); ++k)
      slowdowns.push_back(slow(rng));
    if (slowdowns.size() > costs.size())
      continue;
    const stage_passes below{trial % 2 ? 2.0 : 1.0, 1};
    auto p = balanced_placement(costs, slowdowns, below);
    std::vector<size_t> seen = p.machines;
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i)
      BOOST_REQUIRE_EQUAL(seen[i], i);  // a permutation
    auto order = slowdowns;
    std::sort(order.begin(), order.end());
    double best = 1e300;
    do
      best = std::min(best, brute_force(costs, order, below));
    while (std::next_permutation(order.begin(), order.end()));
    BOOST_TEST(p.slowest == best, boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(equal_machines_keep_their_given_order) {
  std::vector<layer_cost> costs(10, {1.0, 1.0});
  auto p = balanced_placement(costs, {2, 2, 2}, {1, 1});
  BOOST_TEST(p.machines == (std::vector<size_t>{0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(p.cuts == balanced_cuts(costs, {2, 2, 2}, {1, 1}), boost::test_tools::per_element());
  BOOST_CHECK_THROW(balanced_placement(costs, std::vector<double>(9, 1.0), {1, 1}),
                    argument_error);
}

BOOST_AUTO_TEST_CASE(measured_layer_costs_cover_every_layer_and_cut_conv8) {
  const model_shape fashion{eg::data::sample_shape::image(1, 28, 28), 10};
  auto costs = measure_layer_costs("conv8", fashion, 32, 3);
  BOOST_REQUIRE_EQUAL(costs.size(), static_cast<size_t>(layer_count("conv8")));
  for (auto& c : costs) {
    BOOST_TEST(c.forward > 0);
    BOOST_TEST(c.backward > 0);
  }
  auto cuts = balanced_cuts(costs, {1, 2, 4}, passes_below(stage_mode::delayed));
  BOOST_TEST_MESSAGE("conv8 on slowdowns 1 2 4, delayed: cuts after " << cuts[0] << ", "
                                                                      << cuts[1]);
  BOOST_REQUIRE_EQUAL(cuts.size(), 2u);
  BOOST_TEST(cuts[0] < cuts[1]);
  BOOST_TEST(passes_below(stage_mode::delayed).forward == 2.0);
  BOOST_TEST(passes_below(stage_mode::backprop).forward == 1.0);
}

BOOST_AUTO_TEST_CASE(stage_costs_from_layers_sum_each_stages_passes) {
  std::vector<layer_cost> costs{{1, 2}, {3, 4}, {5, 6}};
  auto t = stage_costs::from_layers(costs, {2, 1});
  BOOST_REQUIRE_EQUAL(t.layers(), 3);
  BOOST_TEST(t.at(0, 0) == 2 * 1 + 2);
  BOOST_TEST(t.at(0, 1) == (2 * 1 + 2) + (2 * 3 + 4));
  BOOST_TEST(t.at(1, 2) == 3 + 4 + 5 + 6);  // the last stage: one pass of each
  BOOST_TEST(t.at(0, 2) == 21.0);
  BOOST_CHECK_THROW(t.at(2, 1), argument_error);
  BOOST_CHECK_THROW(t.at(0, 3), argument_error);
  BOOST_CHECK_THROW(t.set(0, 0, -1), argument_error);
  BOOST_CHECK_THROW(stage_costs::from_layers({}, {1, 1}), argument_error);
  BOOST_CHECK_THROW(stage_costs(0), argument_error);
}

BOOST_AUTO_TEST_CASE(a_stages_own_cost_beyond_its_layers_moves_the_cut) {
  // conv8's case: a layer that costs 2.5 alone but 3.1 as a stage of its
  // own (its stash, prediction and step) is too slow on a 4x slower
  // machine (12.4 against 10.5 with the fast machine keeping it), where
  // the layers alone say it is the best cut (10 against 10.5).
  std::vector<layer_cost> layers{{2, 2}, {2, 2}, {1.25, 1.25}, {0.3, 0.3}, {0.2, 0.2}};
  auto t = stage_costs::from_layers(layers, {1, 1});
  const std::vector<double> slow{1, 4, 4};
  auto by_layers = balanced_cuts(t, slow);
  BOOST_TEST(by_layers == (std::vector<int64_t>{1, 2}), boost::test_tools::per_element());
  for (int64_t last = 2; last < 5; ++last)
    t.set(2, last, t.at(2, last) + 0.6);
  auto counted = balanced_cuts(t, slow);
  BOOST_TEST(counted == (std::vector<int64_t>{2, 3}), boost::test_tools::per_element());
  auto s = stage_seconds(t, counted, slow);
  BOOST_TEST(s[0] == 10.5);
  BOOST_TEST(stage_seconds(t, by_layers, slow)[1] == 12.4, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(plans_on_any_stage_costs_are_as_good_as_every_cut_tried) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.01, 3.0), slow(1.0, 6.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t layers = 3 + trial % 7;
    const size_t stages = 2 + static_cast<size_t>(trial) % std::min<size_t>(3, layers - 1);
    stage_costs t(layers);  // not sums of anything: each run its own figure
    for (int64_t f = 0; f < layers; ++f)
      for (int64_t l = f; l < layers; ++l)
        t.set(f, l, cost(rng) * static_cast<double>(l - f + 1));
    std::vector<double> slowdowns(stages);
    for (auto& x : slowdowns)
      x = slow(rng);
    auto cuts = balanced_cuts(t, slowdowns);
    auto s = stage_seconds(t, cuts, slowdowns);
    double best = 1e300;
    std::vector<int64_t> c(stages - 1);
    std::function<void(size_t, int64_t)> pick = [&](size_t i, int64_t from) {
      if (i == c.size()) {
        auto x = stage_seconds(t, c, slowdowns);
        best = std::min(best, *std::max_element(x.begin(), x.end()));
        return;
      }
      for (int64_t k = from; k <= layers - 2; ++k) {
        c[i] = k;
        pick(i + 1, k + 1);
      }
    };
    pick(0, 0);
    BOOST_TEST(*std::max_element(s.begin(), s.end()) == best, boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(measured_stage_costs_cover_every_run_of_layers) {
  const model_shape fashion{eg::data::sample_shape::image(1, 28, 28), 10};
  stage_options o;
  o.mode = stage_mode::predicted;
  o.max_in_flight = 3;
  auto t = measure_stage_costs("lenet5", fashion, 16, o, 2);
  const auto n = layer_count("lenet5");
  BOOST_REQUIRE_EQUAL(t.layers(), n);
  for (int64_t f = 0; f < n; ++f)
    for (int64_t l = f; l < n; ++l)
      BOOST_TEST(t.at(f, l) > 0);
  auto cuts = balanced_cuts(t, {1, 4});
  BOOST_REQUIRE_EQUAL(cuts.size(), 1u);
  BOOST_TEST(cuts[0] >= 0);
  BOOST_TEST(cuts[0] <= n - 2);
  BOOST_CHECK_THROW(measure_stage_costs("lenet5", fashion, 0, o), argument_error);
}

BOOST_AUTO_TEST_CASE(batches_to_fill_is_the_fewest_that_keep_the_slowest_stage_busy) {
  // conv8 on 1, 4, 4 (its first stage holds nearly all), vgg11's three
  // nearly even stages, equal stages, one stage, and random ones.
  std::vector<std::vector<double>> cases{
    {6.0, 1.1, 1.0}, {24, 20, 23}, {1, 1, 1, 1}, {5}, {1, 9}, {2, 2, 7, 1}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.5, 10);
  for (int i = 0; i < 20; ++i)
    cases.push_back(std::vector<double>(2 + i % 4));
  for (auto& c : cases)
    for (auto& x : c)
      if (x == 0)
        x = u(rng);
  for (const auto& t : cases) {
    const double slowest = *std::max_element(t.begin(), t.end());
    const auto k = batches_to_fill(t);
    BOOST_TEST_CONTEXT("stages' seconds " << joined(t) << ", " << k << " in flight") {
      BOOST_TEST(k >= 1);
      BOOST_TEST(simulated_rate(t, k) * slowest > 0.995);  // the slowest stage never waits
      if (k > 1)  // one fewer leaves it waiting
        BOOST_TEST(simulated_rate(t, k - 1) * slowest < 0.995);
    }
  }
  BOOST_TEST(batches_to_fill({6.0, 1.1, 1.0}) == 2);
  BOOST_TEST(batches_to_fill({24, 20, 23}) == 3);
  BOOST_TEST(batches_to_fill({1, 1, 1, 1}) == 4);
  // A slow stage behind the first needs its own round trip held, and it
  // holds two fewer than the first: 2 + ceil((7 + 1) / 7).
  BOOST_TEST(batches_to_fill({2, 2, 7, 1}) == 4);
  BOOST_TEST(batches_to_fill({0.1, 0.1, 0.1}) == 3);  // no float rounding up to 4
  BOOST_CHECK_THROW(batches_to_fill({}), argument_error);
  BOOST_CHECK_THROW(batches_to_fill({1, 0}), argument_error);
  BOOST_CHECK_THROW(batches_to_fill({1, std::nan("")}), argument_error);
}

BOOST_AUTO_TEST_SUITE_END()

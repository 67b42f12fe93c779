// links: eg_learning
#include "models/dataset.hpp"
#include "algorithms/edgegossip/ranking.hpp"

#include <boost/test/unit_test.hpp>

#include <map>
#include <set>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace eg::learning;
using batches = std::vector<std::vector<int64_t>>;

namespace {

// Subsets of sizes 3, 5, 2 and 7 with recognisable indices: subset j holds
// 10 j, 10 j + 1, ...
std::vector<std::vector<int64_t>> hand_made() {
  std::vector<std::vector<int64_t>> members;
  const int64_t sizes[] = {3, 5, 2, 7};
  for (int64_t j = 0; j < 4; ++j) {
    members.emplace_back(sizes[j]);
    std::iota(members.back().begin(), members.back().end(), 10 * j);
  }
  return members;
}

const std::vector<int64_t> s0{0, 1, 2}, s1{10, 11, 12, 13, 14}, s2{20, 21},
    s3{30, 31, 32, 33, 34, 35, 36};

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

aggregated_points random_points(int64_t m, uint64_t seed) {
  torch::manual_seed(seed);
  aggregated_points a;
  a.points = torch::randn({m, 1, 28, 28});
  a.labels = torch::randint(0, 10, {m}, torch::kInt64);
  a.members.resize(static_cast<size_t>(m));
  return a;
}

} // namespace

BOOST_AUTO_TEST_SUITE(ranking)

BOOST_AUTO_TEST_CASE(hand_made_plan) {
  const auto members = hand_made();
  const std::vector<int64_t> ranked{3, 1, 0, 2};

  // Subset 3 alone fills a batch of 6; subset 1 brings the plan to 12 = budget.
  auto plan = ranked_plan(members, ranked, 6, 12);
  BOOST_TEST(plan.batches == (batches{s3, s1}));
  BOOST_TEST(plan.samples() == 12);

  // One point more: subset 0 joins subset 1's batch, which overshoots by 2.
  plan = ranked_plan(members, ranked, 6, 13);
  BOOST_TEST(plan.batches == (batches{s3, concat({s1, s0})}));
  BOOST_TEST(plan.samples() == 15);

  // A budget beyond all points plans every subset once; the short tail batch is kept.
  plan = ranked_plan(members, ranked, 6, 1000);
  BOOST_TEST(plan.batches == (batches{s3, concat({s1, s0}), s2}));
  BOOST_TEST(plan.samples() == 17);

  plan = ranked_plan(members, {2, 0, 1, 3}, 4, 1000);
  BOOST_TEST(plan.batches == (batches{concat({s2, s0}), s1, s3}));
}

BOOST_AUTO_TEST_CASE(budget_stops_the_plan) {
  const auto members = hand_made();
  const std::vector<int64_t> ranked{3, 1, 0, 2};
  BOOST_TEST(ranked_plan(members, ranked, 6, 0).batches.empty());
  BOOST_TEST(ranked_plan(members, ranked, 6, -5).batches.empty());
  // The first subset already reaches a budget of 1: the partial batch closes.
  BOOST_TEST(ranked_plan(members, ranked, 64, 1).batches == (batches{s3}));
  BOOST_TEST(ranked_plan(members, ranked, 64, 8).batches == (batches{concat({s3, s1})}));
  BOOST_TEST(ranked_plan(members, {}, 6, 10).batches.empty());
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw) {
  const auto members = hand_made();
  BOOST_CHECK_THROW(ranked_plan(members, {0, 1}, 0, 10), std::invalid_argument);
  BOOST_CHECK_THROW(ranked_plan(members, {0, 4}, 6, 100), std::invalid_argument);
  BOOST_CHECK_THROW(ranked_plan(members, {-1}, 6, 100), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(whole_subsets_in_ranking_order) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    const int64_t m = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    std::vector<std::vector<int64_t>> members;
    int64_t next = 0, total = 0;
    for (int64_t j = 0; j < m; ++j) {
      members.emplace_back(std::uniform_int_distribution<int64_t>(0, 15)(rng));
      std::iota(members.back().begin(), members.back().end(), next);
      next += static_cast<int64_t>(members.back().size());
      total += static_cast<int64_t>(members.back().size());
    }
    std::vector<int64_t> ranked(static_cast<size_t>(m));
    std::iota(ranked.begin(), ranked.end(), int64_t{0});
    std::shuffle(ranked.begin(), ranked.end(), rng);
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    const int64_t budget = std::uniform_int_distribution<int64_t>(1, total + 10)(rng);

    const auto plan = ranked_plan(members, ranked, batch, budget);
    // Each batch is a run of whole subsets, taken in ranking order; every
    // batch but the last holds >= `batch` points and would hold fewer
    // without its last subset.
    size_t k = 0;
    int64_t planned = 0, last = 0;
    for (size_t i = 0; i < plan.batches.size(); ++i) {
      std::vector<int64_t> expected;
      while (expected.size() < plan.batches[i].size() && k < ranked.size()) {
        const auto& s = members[static_cast<size_t>(ranked[k++])];
        expected.insert(expected.end(), s.begin(), s.end());
        if (!s.empty())
          last = static_cast<int64_t>(s.size());
      }
      BOOST_TEST(expected == plan.batches[i]);
      const auto size = static_cast<int64_t>(plan.batches[i].size());
      if (i + 1 < plan.batches.size())
        BOOST_TEST((size >= batch && size - last < batch));
      planned += size;
    }
    // Enough points, and no subset beyond the one that reached the budget.
    BOOST_TEST(planned >= std::min(budget, total));
    if (planned > budget)
      BOOST_TEST(planned - last < budget);
  }
}

BOOST_AUTO_TEST_CASE(rank_by_loss_descending_nan_last) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(rank_by_loss({0.5f, 2.f, nan, 2.f, 1.f, nan, 3.f}) ==
                 (std::vector<int64_t>{6, 1, 3, 4, 0, 2, 5}),
             boost::test_tools::per_element());
  BOOST_TEST(rank_by_loss({}).empty());
  BOOST_TEST(rank_by_loss({1.f, 1.f, 1.f}) == (std::vector<int64_t>{0, 1, 2}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(aggregated_losses_match_per_sample_cross_entropy) {
  auto model = make_classifier("logreg", 1, fashion_mnist_shape());
  // More than one forward batch of 1000.
  const auto a = random_points(2300, 3);
  model->train();
  const auto losses = aggregated_losses(*model, a);
  BOOST_TEST(model->is_training());
  BOOST_REQUIRE_EQUAL(losses.size(), 2300u);

  torch::NoGradGuard no_grad;
  model->eval();
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{1777},
                    int64_t{2299}}) {
    auto logits = model->forward(a.points.narrow(0, i, 1))[0];
    const float manual =
        -torch::log_softmax(logits, 0)[a.labels[i].item<int64_t>()].item<float>();
    BOOST_TEST(losses[static_cast<size_t>(i)] == manual, boost::test_tools::tolerance(1e-5f));
  }
  // Eval mode stays eval mode.
  aggregated_losses(*model, a);
  BOOST_TEST(!model->is_training());
}

BOOST_AUTO_TEST_CASE(aggregated_losses_leave_no_gradients_and_restore_the_mode) {
  auto model = make_classifier("logreg", 2, fashion_mnist_shape());
  model->train();
  auto a = random_points(5, 4);
  aggregated_losses(*model, a);
  for (const auto& p : model->parameters())
    BOOST_TEST(!p.grad().defined());

  BOOST_TEST(aggregated_losses(*model, aggregated_points{}).empty());

  a.labels[2] = 99;  // not a class: forward succeeds, the loss throws
  BOOST_CHECK_THROW(aggregated_losses(*model, a), std::exception);
  BOOST_TEST(model->is_training());
  BOOST_TEST(torch::GradMode::is_enabled());
}

BOOST_AUTO_TEST_CASE(accuracy_aware_plan_trains_the_hardest_subsets_of_every_class) {
  // Ten subsets of 4 points, classes 0 (subsets 0-4) and 1 (subsets 5-9);
  // subset j holds points 10j .. 10j+3.
  std::vector<std::vector<int64_t>> members;
  std::vector<int64_t> classes;
  for (int64_t j = 0; j < 10; ++j) {
    members.push_back({10 * j, 10 * j + 1, 10 * j + 2, 10 * j + 3});
    classes.push_back(j < 5 ? 0 : 1);
  }
  // Class 1 is all harder than class 0; within a class higher j is harder.
  std::vector<int64_t> ranking{9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  std::mt19937_64 rng(3);
  auto plan = eg::learning::accuracy_aware_plan(members, classes, ranking, 8, 16, rng);
  // Budget 16 = 8 points per class: the two hardest subsets of each, whole.
  std::map<int64_t, int> count;
  for (auto& b : plan.batches) {
    BOOST_TEST(b.size() <= 8u);
    for (auto i : b)
      ++count[i / 10];
  }
  BOOST_TEST((count == std::map<int64_t, int>{{3, 4}, {4, 4}, {8, 4}, {9, 4}}));
  BOOST_TEST(plan.samples() == 16);
  // The points are shuffled into batches: some batch mixes the classes.
  bool mixed = false;
  for (auto& b : plan.batches) {
    std::set<int64_t> cs;
    for (auto i : b)
      cs.insert(i / 10 < 5 ? 0 : 1);
    mixed = mixed || cs.size() == 2;
  }
  BOOST_TEST(mixed);
  BOOST_CHECK_THROW(eg::learning::accuracy_aware_plan(members, {0, 1}, ranking, 8, 16, rng),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

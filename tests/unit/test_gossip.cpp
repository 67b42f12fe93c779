// links: eg_learning
// The gossip strategies (algorithms/gossip/gossip.hpp): GoSGD's and push-sum's
// merges, sends and conserved weight; a model as tensor views; model averages.
#include "algorithms/gossip/gossip.hpp"
#include "messages/codec.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "models/serialize.hpp"

#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace eg::learning;

namespace {

using eg::test::all_equal;

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters(m))
    out.push_back(p.detach().clone());
  return out;
}

/// Fashion-MNIST's model shape.
const model_shape fashion = fashion_mnist_shape();

} // namespace

BOOST_AUTO_TEST_SUITE(gossip)

BOOST_AUTO_TEST_CASE(gosgd_merge_formula) {
  gosgd g(0.25, 0.5);
  std::vector<torch::Tensor> x{torch::tensor({1.0f, 2.0f}), torch::tensor({3.0f})};
  std::vector<torch::Tensor> xs{torch::tensor({5.0f, 6.0f}), torch::tensor({7.0f})};
  g.merge(x, xs, 0.75);
  BOOST_TEST(g.weight() == 1.0);
  BOOST_TEST(torch::equal(x[0], torch::tensor({4.0f, 5.0f})));
  BOOST_TEST(torch::equal(x[1], torch::tensor({6.0f})));
  BOOST_CHECK_THROW(g.merge(x, {xs[0]}, 0.5), std::invalid_argument);
  BOOST_CHECK_THROW(g.merge(x, {xs[1], xs[0]}, 0.5), std::invalid_argument);
  BOOST_CHECK_THROW(g.merge(x, xs, 0.5, 0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(g.merge(x, xs, 0.5, 1, std::nan("")), std::invalid_argument);

  // Merging into a model's parameters works in place without autograd errors.
  auto model = make_classifier("logreg", 1, fashion);
  auto params = parameters(*model);
  std::vector<torch::Tensor> zeros;
  for (const auto& p : params)
    zeros.push_back(torch::zeros_like(p));
  gosgd h(0.5, 0.5);
  auto before = snapshot(*model);
  h.merge(params, zeros, 0.5);
  BOOST_TEST(torch::allclose(parameters(*model)[0], before[0] / 2));
}

// A model that ran away (NaN, infinity) is refused by GoSGD's and
// push-sum's merges alike, the model and the weight unchanged: merged, it
// would reach every platform in a few rounds.
BOOST_AUTO_TEST_CASE(a_model_that_ran_away_is_refused_not_merged) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (float v : bad) {
    std::vector<torch::Tensor> x{torch::tensor({1.0f, 2.0f}), torch::tensor({3.0f})};
    const auto before = std::vector<torch::Tensor>{x[0].clone(), x[1].clone()};
    std::vector<torch::Tensor> received{torch::tensor({5.0f, 6.0f}), torch::tensor({v})};
    gosgd g(0.25, 0.5);
    push_sum p(1.0);
    for (gossip_strategy* s : {static_cast<gossip_strategy*>(&g), static_cast<gossip_strategy*>(&p)}) {
      const double w = s->weight();
      try {
        s->merge(x, received, 0.5);
        BOOST_ERROR(s->name() << " merged a model holding " << v);
      } catch (const std::invalid_argument& e) {
        const std::string text = e.what();
        BOOST_TEST(text.find("tensor 1") != std::string::npos, text);
        BOOST_TEST(text.find("not a finite number") != std::string::npos, text);
      }
      BOOST_TEST(s->weight() == w);
      BOOST_TEST(torch::equal(x[0], before[0]));
      BOOST_TEST(torch::equal(x[1], before[1]));
    }
  }
  // The largest finite values are a model, however poor.
  std::vector<torch::Tensor> x{torch::zeros({2})};
  gosgd g(0.5, 0.5);
  g.merge(x, {torch::full({2}, std::numeric_limits<float>::max())}, 0.5);
  BOOST_TEST(torch::isfinite(x[0]).all().item<bool>());
}

BOOST_AUTO_TEST_CASE(gosgd_merge_by_rate_counts_a_slow_sender_less) {
  // Both hold weight 0.5; the sender trains r = 0.25 of its data per epoch,
  // the receiver all of it: the mix is 0.5 : 0.125, i.e. 4/5 and 1/5, and
  // the weights still add up to 1.
  gosgd g(0.5, 0.5);
  std::vector<torch::Tensor> x{torch::tensor({0.0f, 10.0f})};
  std::vector<torch::Tensor> xs{torch::tensor({5.0f, 0.0f})};
  g.merge(x, xs, 0.5, 1.0, 0.25);
  BOOST_TEST(g.weight() == 1.0);
  BOOST_TEST(torch::allclose(x[0], torch::tensor({1.0f, 8.0f})));
  // Equal rates are GoSGD's rule, whatever their value.
  gosgd a(0.25, 0.5), b(0.25, 0.5);
  std::vector<torch::Tensor> xa{torch::tensor({1.0f})}, xb{torch::tensor({1.0f})};
  std::vector<torch::Tensor> in{torch::tensor({9.0f})};
  a.merge(xa, in, 0.75);
  b.merge(xb, in, 0.75, 0.3, 0.3);
  BOOST_TEST(torch::allclose(xa[0], xb[0]));
  BOOST_TEST(a.weight() == b.weight());
}

BOOST_AUTO_TEST_CASE(gosgd_after_step_halves_weight) {
  std::mt19937_64 rng(1);
  std::vector<torch::Tensor> x{torch::ones({2})};
  gosgd always(0.5, 1.0);
  auto orders = always.after_step(x, 1, rng);
  BOOST_REQUIRE_EQUAL(orders.size(), 1u);
  BOOST_TEST(orders[0].peer == 0u);
  BOOST_TEST(orders[0].weight == 0.25);
  BOOST_TEST(always.weight() == 0.25);
  BOOST_TEST(torch::equal(x[0], torch::ones({2})));
  gosgd never(0.5, 0.0);
  BOOST_TEST(never.after_step(x, 1, rng).empty());
  BOOST_TEST(never.weight() == 0.5);
  // Nobody to send to: nothing sent, no weight lost.
  BOOST_TEST(always.after_step(x, 0, rng).empty());
  BOOST_TEST(always.weight() == 0.25);
  // Several targets: one of them, each as often.
  std::vector<int> picked(4, 0);
  for (int i = 0; i < 4000; ++i) {
    auto o = always.after_step(x, 4, rng);
    BOOST_REQUIRE_EQUAL(o.size(), 1u);
    BOOST_REQUIRE_LT(o[0].peer, 4u);
    ++picked[o[0].peer];
    always.set_weight(0.25);
  }
  for (int n : picked)
    BOOST_TEST(std::abs(n - 1000) < 150);

  auto s = make_strategy("gosgd", 4, 0.2);
  BOOST_TEST(s->name() == "gosgd");
  BOOST_TEST(s->weight() == 0.25);
  BOOST_CHECK_THROW(make_strategy("allreduce", 4, 0.2), std::invalid_argument);
  BOOST_CHECK_THROW(gosgd(0.5, 1.5), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(push_sum_on_a_tiny_exact_case) {
  // Three platforms with scalar models 0, 3, 6 and weight 1 each.
  std::mt19937_64 rng(1);
  std::vector<push_sum> p(3);
  std::vector<std::vector<torch::Tensor>> z;
  for (double v : {0.0, 3.0, 6.0})
    z.push_back({torch::full({1}, v, torch::kFloat64)});
  auto value = [&](size_t i) { return z[i][0].item<double>(); };
  // Round 1, the directed ring 0 -> 1 -> 2 -> 0: each keeps half, sends half.
  std::vector<std::pair<double, torch::Tensor>> sent;
  for (size_t i = 0; i < 3; ++i) {
    auto o = p[i].after_step(z[i], 1, rng);
    BOOST_REQUIRE_EQUAL(o.size(), 1u);
    BOOST_TEST(o[0].weight == 0.5);
    BOOST_TEST(p[i].weight() == 0.5);
    sent.emplace_back(o[0].weight, z[i][0].clone());
  }
  for (size_t i = 0; i < 3; ++i)
    p[(i + 1) % 3].merge(z[(i + 1) % 3], {sent[i].second}, sent[i].first);
  BOOST_TEST(value(0) == 3.0);
  BOOST_TEST(value(1) == 1.5);
  BOOST_TEST(value(2) == 4.5);
  for (auto& q : p)
    BOOST_TEST(q.weight() == 1.0);
  // Round 2: platform 0 pushes to both others (a third each), they to no one.
  auto o = p[0].after_step(z[0], 2, rng);
  BOOST_REQUIRE_EQUAL(o.size(), 2u);
  BOOST_TEST(o[0].peer == 0u);
  BOOST_TEST(o[1].peer == 1u);
  BOOST_TEST(std::abs(o[0].weight - 1.0 / 3) < 1e-15);
  BOOST_TEST(p[1].after_step(z[1], 0, rng).empty());
  BOOST_TEST(p[1].weight() == 1.0);
  p[1].merge(z[1], {z[0][0].clone()}, o[0].weight);
  p[2].merge(z[2], {z[0][0].clone()}, o[1].weight);
  BOOST_TEST(std::abs(value(1) - 1.875) < 1e-12);  // (1 * 1.5 + 1/3 * 3) / (4/3)
  BOOST_TEST(std::abs(value(2) - 4.125) < 1e-12);  // (1 * 4.5 + 1/3 * 3) / (4/3)
  BOOST_TEST(std::abs(p[0].weight() - 1.0 / 3) < 1e-15);
  BOOST_TEST(std::abs(p[1].weight() - 4.0 / 3) < 1e-15);
  // The weights sum to 3, the weighted models to 0 + 3 + 6.
  double w = 0, wz = 0;
  for (size_t i = 0; i < 3; ++i) {
    w += p[i].weight();
    wz += p[i].weight() * value(i);
  }
  BOOST_TEST(std::abs(w - 3.0) < 1e-12);
  BOOST_TEST(std::abs(wz - 9.0) < 1e-12);
  // By rate (EdgeGossip): z <- (w r z + s r_s z_s) / (w r + s r_s), the
  // weights added as always; rates 1 are push-sum's sum.
  push_sum a, b;
  std::vector<torch::Tensor> xa{torch::zeros({1}, torch::kFloat64)}, xb{xa[0].clone()};
  std::vector<torch::Tensor> in{torch::ones({1}, torch::kFloat64)};
  a.merge(xa, in, 0.5);
  b.merge(xb, in, 0.5, 0.2, 0.9);
  BOOST_TEST(std::abs(xa[0].item<double>() - 0.5 / 1.5) < 1e-15);
  BOOST_TEST(std::abs(xb[0].item<double>() - 0.45 / (0.2 + 0.45)) < 1e-15);
  BOOST_TEST(a.weight() == 1.5);
  BOOST_TEST(b.weight() == 1.5);
  BOOST_CHECK_THROW(b.merge(xb, in, 0.5, 0.0, 1.0), std::invalid_argument);
  // A weight so small that a share would not be a normal double is kept.
  push_sum tiny(3 * std::numeric_limits<double>::min());
  BOOST_TEST(tiny.after_step(xa, 1, rng).size() == 1u);
  BOOST_TEST(tiny.after_step(xa, 1, rng).empty());
  BOOST_TEST(tiny.weight() == 1.5 * std::numeric_limits<double>::min());
  BOOST_CHECK_THROW(push_sum(0.0), std::invalid_argument);
  BOOST_CHECK_THROW(a.set_weight(-1), std::invalid_argument);
  BOOST_CHECK_THROW(a.merge(xa, in, 0.0), std::invalid_argument);
  BOOST_CHECK_THROW(a.merge(xa, {}, 0.5), std::invalid_argument);
  auto s = make_strategy("sgp", 4, 0.2);
  BOOST_TEST(s->name() == "sgp");
  BOOST_TEST(s->weight() == 1.0);
}

BOOST_AUTO_TEST_CASE(rounds_made_in_one_step_split_one_after_the_other) {
  using rounds = std::vector<std::vector<std::string>>;
  auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    if (got.size() != want.size())
      return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::abs(got[i] - want[i]) > 1e-15)
        return false;
    return true;
  };
  // One round: push-sum's equal split.
  auto one = split_rounds(rounds{{"a", "b"}});
  BOOST_TEST((one.peers == std::vector<std::string>{"a", "b"}));
  BOOST_TEST(close(one.fractions, equal_split(2)));
  BOOST_TEST(close(equal_split(3), {0.25, 0.25, 0.25}));
  BOOST_TEST(equal_split(0).empty());
  // Two rounds to one peer each: half, then half of what was kept.
  auto two = split_rounds(rounds{{"a"}, {"b"}});
  BOOST_TEST((two.peers == std::vector<std::string>{"a", "b"}));
  BOOST_TEST(close(two.fractions, {0.5, 0.25}));
  // The same peer in both: one message with both shares.
  auto same = split_rounds(rounds{{"a"}, {"a"}});
  BOOST_TEST((same.peers == std::vector<std::string>{"a"}));
  BOOST_TEST(close(same.fractions, {0.75}));
  // Two peers, then one of them and a third; a round with no peer moves nothing.
  auto mixed = split_rounds(rounds{{"a", "b"}, {}, {"b", "c"}});
  BOOST_TEST((mixed.peers == std::vector<std::string>{"a", "b", "c"}));
  BOOST_TEST(close(mixed.fractions, {1.0 / 3, 1.0 / 3 + 1.0 / 9, 1.0 / 9}));
  BOOST_TEST(split_rounds(rounds{}).peers.empty());
  BOOST_TEST(split_rounds(rounds{{}, {}}).peers.empty());
  // Many rounds: past a millionth kept, no more is given, and some is kept.
  auto many = split_rounds(rounds(200, std::vector<std::string>{"a"}));
  BOOST_REQUIRE_EQUAL(many.fractions.size(), 1u);
  BOOST_TEST(many.fractions[0] < 1.0);
  BOOST_TEST(many.fractions[0] > 1.0 - 1e-6);
}

BOOST_AUTO_TEST_CASE(push_sum_splits_as_it_is_told_and_keeps_the_rest) {
  std::mt19937_64 rng(1);
  std::vector<torch::Tensor> z{torch::ones({2}, torch::kFloat64)};
  push_sum p(2.0);
  auto o = p.after_step(z, std::vector<double>{0.5, 0.25}, rng);
  BOOST_REQUIRE_EQUAL(o.size(), 2u);
  BOOST_TEST(o[0].peer == 0u);
  BOOST_TEST(o[0].weight == 1.0);
  BOOST_TEST(o[1].peer == 1u);
  BOOST_TEST(o[1].weight == 0.5);
  BOOST_TEST(p.weight() == 0.5);
  BOOST_TEST(torch::equal(z[0], torch::ones({2}, torch::kFloat64)));  // z unchanged
  // Shares that leave nothing, or are not shares, are refused.
  BOOST_CHECK_THROW(p.after_step(z, std::vector<double>{0.5, 0.5}, rng), std::invalid_argument);
  BOOST_CHECK_THROW(p.after_step(z, std::vector<double>{0.0}, rng), std::invalid_argument);
  BOOST_CHECK_THROW(p.after_step(z, std::vector<double>{-0.1, 0.2}, rng), std::invalid_argument);
  BOOST_TEST(p.weight() == 0.5);
}

BOOST_AUTO_TEST_CASE(a_platform_making_several_rounds_a_step_does_not_hoard_the_weight) {
  // Four platforms on the exponential graph (one peer a round, hops 1 and 2
  // in turn), messages merged before the next round; three make one round
  // a step, platform 3 (a quarter of their steps) four rounds at every
  // fourth. Split one round after the other it gives out as much a round
  // as the others, and its weight stays near theirs; one equal split for
  // the four rounds kept a third of it a step, and it held 1.68 on average
  // against 1.22.
  constexpr size_t n = 4, m = 4;
  auto mean_weight_of_the_slow = [&](bool one_after_the_other) {
    std::mt19937_64 rng(1);
    std::vector<push_sum> p(n);
    std::vector<torch::Tensor> z{torch::zeros({1}, torch::kFloat64)};
    double sum = 0;
    int counted = 0;
    for (size_t tick = 0; tick < 4000; ++tick) {
      std::vector<std::pair<size_t, double>> sent;
      for (size_t i = 0; i < n; ++i) {
        std::vector<std::vector<std::string>> rounds;
        if (i == n - 1) {
          if ((tick + 1) % m != 0)
            continue;
          for (size_t j = 0; j < m; ++j)
            rounds.push_back({std::to_string((i + (size_t{1} << ((tick + 1 - m + j) % 2))) % n)});
        } else {
          rounds.push_back({std::to_string((i + (size_t{1} << (tick % 2))) % n)});
        }
        rounds_split split;
        if (one_after_the_other) {
          split = split_rounds(rounds);
        } else {
          for (auto& r : rounds)
            if (std::find(split.peers.begin(), split.peers.end(), r[0]) == split.peers.end())
              split.peers.push_back(r[0]);
          split.fractions = equal_split(split.peers.size());
        }
        auto orders = p[i].after_step(z, split.fractions, rng);
        for (auto& o : orders)
          sent.emplace_back(std::stoul(split.peers.at(o.peer)), o.weight);
      }
      for (auto& [to, w] : sent)
        p[to].merge(z, {z[0].clone()}, w);
      double total = 0;
      for (auto& q : p)
        total += q.weight();
      BOOST_REQUIRE_CLOSE(total, 4.0, 1e-9);
      if (tick >= 2000) {
        sum += p[n - 1].weight();
        ++counted;
      }
    }
    return sum / counted;
  };
  const double split = mean_weight_of_the_slow(true), once = mean_weight_of_the_slow(false);
  BOOST_TEST(split < 1.3, split);
  BOOST_TEST(once > 1.5, once);
}

BOOST_AUTO_TEST_CASE(push_sum_reaches_the_average_over_the_exponential_graph) {
  // Eight platforms with models 0..7 gossiping on the 1-peer exponential
  // graph (hops 1, 2, 4) without local steps: every z tends to the mean 3.5
  // and every weight to 1.
  constexpr size_t n = 8;
  std::mt19937_64 rng(1);
  std::vector<push_sum> p(n);
  std::vector<std::vector<torch::Tensor>> z;
  for (size_t i = 0; i < n; ++i)
    z.push_back({torch::full({2}, static_cast<double>(i), torch::kFloat64)});
  for (uint64_t k = 0; k < 30; ++k) {
    std::vector<std::tuple<size_t, double, torch::Tensor>> sent;
    for (size_t i = 0; i < n; ++i)
      for (auto& o : p[i].after_step(z[i], 1, rng))
        sent.emplace_back((i + (size_t{1} << (k % 3))) % n, o.weight, z[i][0].clone());
    for (auto& [to, w, t] : sent)
      p[to].merge(z[to], {t}, w);
  }
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST(torch::allclose(z[i][0], torch::full({2}, 3.5, torch::kFloat64), 0, 1e-9));
    BOOST_TEST(std::abs(p[i].weight() - 1.0) < 1e-12);
  }
}

BOOST_AUTO_TEST_CASE(gosgd_exchange_scales_with_the_share_of_iterations) {
  // A platform running a fifth of its iterations exchanges five times as
  // often per iteration: as many messages per epoch as a full one.
  std::mt19937_64 rng(7);
  std::vector<torch::Tensor> x{torch::ones({2})};
  gosgd full(0.25, 0.1), fifth(0.25, 0.1);
  fifth.scale_exchange(5.0);
  int sent_full = 0, sent_fifth = 0;
  for (int i = 0; i < 20000; ++i) {
    sent_full += static_cast<int>(full.after_step(x, 1, rng).size());
    full.set_weight(0.25);
    if (i % 5 == 0) {
      sent_fifth += static_cast<int>(fifth.after_step(x, 1, rng).size());
      fifth.set_weight(0.25);
    }
  }
  BOOST_TEST(std::abs(sent_full - 2000) < 200);
  BOOST_TEST(std::abs(sent_fifth - 2000) < 200);
  fifth.scale_exchange(100.0);  // capped at probability 1
  BOOST_TEST(fifth.after_step(x, 1, rng).size() == 1u);
  BOOST_CHECK_THROW(fifth.scale_exchange(0.0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(gosgd_and_push_sum_conserve_weight) {
  // Four platforms exchange at random, with 0 to 3 targets each time and
  // messages merged in any order; held plus in-flight weight stays 1
  // (GoSGD) or 4 (push-sum) and, without local steps, so does the weighted
  // sum of the models.
  constexpr int platforms = 4;
  for (const std::string name : {"gosgd", "sgp"}) {
  BOOST_TEST_CONTEXT(name) {
  const double expected = name == "gosgd" ? 1.0 : platforms;
  std::mt19937_64 rng(9);
  std::vector<std::unique_ptr<gossip_strategy>> s;
  std::vector<std::vector<torch::Tensor>> x;
  for (int i = 0; i < platforms; ++i) {
    s.push_back(make_strategy(name, platforms, 0.5));
    x.push_back({torch::full({3}, static_cast<double>(i), torch::kFloat64)});
  }
  struct message {
    int to;
    double weight;
    torch::Tensor params;
  };
  std::vector<message> in_flight;
  auto mass = torch::zeros({3}, torch::kFloat64);
  for (int i = 0; i < platforms; ++i)
    mass += s[static_cast<size_t>(i)]->weight() * x[static_cast<size_t>(i)][0];

  std::uniform_int_distribution<int> pick(0, platforms - 1);
  for (int step = 0; step < 2000; ++step) {
    if (!in_flight.empty() && std::bernoulli_distribution(0.5)(rng)) {
      size_t k = std::uniform_int_distribution<size_t>(0, in_flight.size() - 1)(rng);
      auto m = in_flight[k];
      in_flight.erase(in_flight.begin() + static_cast<long>(k));
      s[static_cast<size_t>(m.to)]->merge(x[static_cast<size_t>(m.to)], {m.params}, m.weight);
    } else {
      int i = pick(rng);
      auto& xi = x[static_cast<size_t>(i)];
      const auto d = std::uniform_int_distribution<size_t>(0, platforms - 1)(rng);
      std::vector<int> targets;  // d distinct peers of i
      for (int j = 1; j <= static_cast<int>(d); ++j)
        targets.push_back((i + j) % platforms);
      for (const auto& order : s[static_cast<size_t>(i)]->after_step(xi, d, rng))
        in_flight.push_back({targets.at(order.peer), order.weight, xi[0].clone()});
    }
    double total = 0;
    auto now = torch::zeros({3}, torch::kFloat64);
    for (int i = 0; i < platforms; ++i) {
      total += s[static_cast<size_t>(i)]->weight();
      now += s[static_cast<size_t>(i)]->weight() * x[static_cast<size_t>(i)][0];
    }
    for (const auto& m : in_flight) {
      total += m.weight;
      now += m.weight * m.params;
    }
    BOOST_REQUIRE_CLOSE(total, expected, 1e-10);
    BOOST_REQUIRE(torch::allclose(now, mass, 1e-9, 1e-12));
  }
  }
  }
}

BOOST_AUTO_TEST_CASE(views_round_trip) {
  auto model = make_classifier("lenet5", 3, fashion);
  auto names = parameter_names(*model);
  auto params = parameters(*model);
  auto views = to_views(names, params);
  BOOST_REQUIRE_EQUAL(views.size(), params.size());
  BOOST_TEST(views[0].name == "conv1.weight");
  BOOST_TEST((views[0].type == eg::messages::dtype::float32));
  BOOST_TEST(views[0].shape == (std::vector<int64_t>{6, 1, 5, 5}));
  BOOST_TEST(views[0].bytes == 6u * 25u * 4u);

  auto back = from_views(views, names, params);
  BOOST_TEST(all_equal(back, params));
  BOOST_TEST(back[0].data_ptr() == params[0].data_ptr());  // no copy

  auto bad = views;
  bad[2].shape = {16, 6, 5, 4};
  BOOST_CHECK_EXCEPTION(from_views(bad, names, params), std::invalid_argument,
                        [&](const std::invalid_argument& e) {
                          return std::string(e.what()).find(names[2]) != std::string::npos;
                        });
  bad = views;
  bad[1].type = eg::messages::dtype::float64;
  BOOST_CHECK_THROW(from_views(bad, names, params), std::invalid_argument);
  bad = views;
  bad[3].name = "other";
  BOOST_CHECK_THROW(from_views(bad, names, params), std::invalid_argument);
  bad = views;
  bad.pop_back();
  BOOST_CHECK_THROW(from_views(bad, names, params), std::invalid_argument);
  BOOST_CHECK_THROW(to_views({"t"}, {torch::ones({3, 4}).t()}), std::invalid_argument);
  BOOST_CHECK_THROW(to_views({"t"}, {torch::ones({2}, torch::kBool)}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(average_is_elementwise_mean) {
  auto mean = average({{torch::tensor({1.0f, 2.0f}), torch::tensor({0.0f})},
                       {torch::tensor({3.0f, 6.0f}), torch::tensor({1.0f})}});
  BOOST_REQUIRE_EQUAL(mean.size(), 2u);
  BOOST_TEST(torch::equal(mean[0], torch::tensor({2.0f, 4.0f})));
  BOOST_TEST(torch::equal(mean[1], torch::tensor({0.5f})));
  BOOST_CHECK_THROW(average({}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(weighted_average_counts_each_model_by_its_weight) {
  // Points trained this epoch: 15,000 and 5,000, so 3/4 and 1/4.
  std::vector<std::vector<torch::Tensor>> models{{torch::tensor({4.0f, 0.0f})},
                                                 {torch::tensor({0.0f, 8.0f})}};
  auto mean = average(models, {15000, 5000});
  BOOST_REQUIRE_EQUAL(mean.size(), 1u);
  BOOST_TEST(torch::allclose(mean[0], torch::tensor({3.0f, 2.0f})));
  // Equal weights are the plain mean; a weight of 0 leaves a model out.
  BOOST_TEST(torch::allclose(average(models, {7, 7})[0], average(models)[0]));
  BOOST_TEST(torch::allclose(average(models, {0, 2})[0], models[1][0]));
  // The inputs are not changed.
  BOOST_TEST(torch::equal(models[0][0], torch::tensor({4.0f, 0.0f})));
  BOOST_CHECK_THROW(average(models, {1}), std::invalid_argument);
  BOOST_CHECK_THROW(average(models, {0, 0}), std::invalid_argument);
  BOOST_CHECK_THROW(average(models, {1, -1}), std::invalid_argument);
  BOOST_CHECK_THROW(average(models, {1, std::nan("")}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(average_by_class_gives_each_class_row_to_the_models_that_trained_it) {
  // Two models of a body tensor and a 3-class output layer (weight, bias).
  // Model 0 trained 300 points of class 0; model 1 100 of class 1 (a small
  // share of skewed data); nobody trained class 2.
  std::vector<std::vector<torch::Tensor>> models{
    {torch::tensor({4.0f}), torch::tensor({{1.0f, 1.0f}, {-5.0f, -5.0f}, {0.0f, 2.0f}}),
     torch::tensor({1.0f, -5.0f, 0.0f})},
    {torch::tensor({0.0f}), torch::tensor({{-3.0f, -3.0f}, {2.0f, 2.0f}, {4.0f, 6.0f}}),
     torch::tensor({-3.0f, 2.0f, 4.0f})}};
  auto mean = average_by_class(models, {300, 100}, {{300, 0, 0}, {0, 100, 0}});
  BOOST_REQUIRE_EQUAL(mean.size(), 3u);
  // The body by points trained, as average() does.
  BOOST_TEST(torch::allclose(mean[0], torch::tensor({3.0f})));
  // Row 0 from model 0, row 1 from model 1, row 2 (no class weight) by points.
  BOOST_TEST(torch::allclose(mean[1], torch::tensor({{1.0f, 1.0f}, {2.0f, 2.0f}, {1.0f, 3.0f}})));
  BOOST_TEST(torch::allclose(mean[2], torch::tensor({1.0f, 2.0f, 1.0f})));
  // Class counts in proportion to the points (IID) give average()'s result.
  auto iid = average_by_class(models, {300, 100}, {{150, 90, 60}, {50, 30, 20}});
  auto plain = average(models, {300, 100});
  for (size_t i = 0; i < plain.size(); ++i)
    BOOST_TEST(torch::allclose(iid[i], plain[i]));
  // The inputs are not changed.
  BOOST_TEST(torch::equal(models[1][2], torch::tensor({-3.0f, 2.0f, 4.0f})));
  BOOST_CHECK_THROW(average_by_class(models, {1, 1}, {{1, 1, 1}}), std::invalid_argument);
  BOOST_CHECK_THROW(average_by_class(models, {1, 1}, {{1, 1}, {1, 1}}), std::invalid_argument);
  BOOST_CHECK_THROW(average_by_class(models, {1, 1}, {{1, 1, -1}, {1, 1, 1}}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(average_by_class(models, {1, 1}, {{1, 1, 1}, {1, 1, 1}}, 4),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

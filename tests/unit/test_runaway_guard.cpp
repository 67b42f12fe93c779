// links: eg_learning
// The runaway guard of split runs (algorithms/split/runaway_guard.hpp) and
// what a stage trainer tells it: plain classes, no actors.
#include "algorithms/split/runaway_guard.hpp"
#include "algorithms/split/split.hpp"
#include "common/error.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace eg;
using namespace eg::learning;

namespace {

/// Feeds `n` losses of `value` (with a small wobble); returns the first
/// runaway seen, or nothing.
std::optional<std::string> feed_loss(runaway_guard& g, int n, double value) {
  for (int i = 0; i < n; ++i)
    if (auto why = g.loss(value * (1 + 0.05 * ((i % 3) - 1))))
      return why;
  return std::nullopt;
}

std::optional<std::string> feed_norm(runaway_guard& g, int n, double value) {
  for (int i = 0; i < n; ++i)
    if (auto why = g.gradient_norm(value * (1 + 0.3 * ((i % 5) - 2) / 2.0)))
      return why;
  return std::nullopt;
}

} // namespace

BOOST_AUTO_TEST_SUITE(runaway)

BOOST_AUTO_TEST_CASE(a_loss_that_falls_and_wobbles_is_not_a_runaway) {
  runaway_guard g({}, 10);
  for (int i = 0; i < 2000; ++i) {
    // 2.3 down to 0.3, noise of +-20 % per batch.
    const double level = 0.3 + 2.0 * std::exp(-i / 300.0);
    const double noise = 1 + 0.2 * std::sin(i * 12.9898);
    BOOST_REQUIRE_MESSAGE(!g.loss(level * noise), "step " << i);
  }
  BOOST_TEST(g.lowest_loss_average() < 0.4);
  BOOST_TEST(!feed_norm(g, 2000, 1.5));
}

BOOST_AUTO_TEST_CASE(a_non_finite_loss_or_gradient_is_a_runaway_at_once) {
  runaway_guard g({}, 10);
  auto why = g.loss(std::numeric_limits<double>::quiet_NaN());
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("nan") != std::string::npos, *why);
  auto inf = g.gradient_norm(std::numeric_limits<double>::infinity());
  BOOST_REQUIRE(inf.has_value());
  BOOST_TEST(inf->find("inf") != std::string::npos, *inf);
}

BOOST_AUTO_TEST_CASE(a_model_that_learnt_and_went_back_to_guessing_ran_away) {
  runaway_guard g({}, 10);
  BOOST_REQUIRE(!feed_loss(g, 400, 0.4));
  // Back at ln(10) = 2.3: the average climbs past 2 x 0.4 and 0.4 + 0.5.
  auto why = feed_loss(g, 400, 2.3);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("rose") != std::string::npos, *why);
}

BOOST_AUTO_TEST_CASE(a_loss_well_above_guessing_ran_away_even_if_it_never_fell) {
  runaway_guard g({}, 10);
  // ln(10) x 1.5 = 3.45: confidently wrong from the start.
  auto why = feed_loss(g, 400, 6.0);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("uniform guess") != std::string::npos, *why);
  // A model stuck at chance from the start did not run away: it never learnt.
  runaway_guard stuck({}, 10);
  BOOST_TEST(!feed_loss(stuck, 400, 2.3));
}

BOOST_AUTO_TEST_CASE(a_gradient_norm_far_above_its_average_ran_away_after_the_warmup) {
  runaway_options o;
  o.warmup = 10;
  runaway_guard g(o, 10);
  // During the warmup a large norm is only averaged.
  BOOST_TEST(!g.gradient_norm(1.0));
  BOOST_TEST(!g.gradient_norm(500.0));
  runaway_guard h(o, 10);
  BOOST_REQUIRE(!feed_norm(h, 100, 2.0));
  BOOST_TEST(!h.gradient_norm(50.0));  // 25 x: a bumpy batch, not a runaway
  auto why = h.gradient_norm(2000.0);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("x its average") != std::string::npos, *why);
}

BOOST_AUTO_TEST_CASE(a_norm_that_starts_at_zero_and_wakes_up_is_not_a_runaway) {
  // A stage below a synthetic-gradient module: zero while the module
  // predicts zero, then about zero, then growing to its level over a few
  // dozen steps. Before, the average of the zeros (0, then 5e-12) made the
  // first real norm "inf x its average" and every stage rolled back.
  runaway_guard g({}, 10);
  for (int i = 0; i < 100; ++i)
    BOOST_REQUIRE_MESSAGE(!g.gradient_norm(0.0), "step " << i);
  BOOST_REQUIRE(!g.gradient_norm(5.292e-12));  // below norm_floor: still asleep
  double norm = 1e-7;
  for (int i = 0; i < 60; ++i, norm *= 1.6)  // 1e-7 up to about 0.17
    BOOST_REQUIRE_MESSAGE(!g.gradient_norm(std::min(norm, 0.004)), "step " << i);
  BOOST_REQUIRE(!feed_norm(g, 200, 0.004));
  // Awake and settled: a real runaway is still one.
  auto why = g.gradient_norm(4.0);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("x its average") != std::string::npos, *why);
  // A jump within the warm-up starts the level again; after it the
  // warm-up's steps count from there.
  runaway_options o;
  o.warmup = 10;
  runaway_guard w(o, 10);
  BOOST_REQUIRE(!w.gradient_norm(1e-6));
  BOOST_REQUIRE(!w.gradient_norm(1.0));  // 1e6 x, within the warm-up
  BOOST_REQUIRE(!feed_norm(w, 20, 1.0));
  BOOST_TEST(w.gradient_norm(1000.0).has_value());
  // A spike past the warm-up whose step is negligible (a module waking up
  // slowly: norms of 1e-7 for many steps, then 2e-3) is not a runaway; one
  // whose step is a sizeable part of the parameters is.
  runaway_guard slow({}, 10);
  BOOST_REQUIRE(!feed_norm(slow, 100, 1.147e-7));
  BOOST_TEST(!slow.gradient_norm(0.002403, [] { return 2.4e-6; }));
  BOOST_REQUIRE(!feed_norm(slow, 100, 0.0024));
  auto big = slow.gradient_norm(10.0, [] { return 0.3; });
  BOOST_REQUIRE(big.has_value());
  BOOST_TEST(big->find("a step of 0.3 x the parameters' norm") != std::string::npos, *big);
  runaway_options bad;
  bad.norm_floor = -1;
  BOOST_CHECK_THROW(check(bad), argument_error);
  bad = {};
  bad.min_step = -1;
  BOOST_CHECK_THROW(check(bad), argument_error);
}

BOOST_AUTO_TEST_CASE(a_synthetic_gradient_stage_that_wakes_up_is_not_a_runaway) {
  // Three synthetic-gradient stages of LeNet-5: the first stage's gradient
  // comes from its module, which predicts zero until its first target
  // trains it; its norm starts at zero and then grows.
  stage_options o;
  o.sgd.lr = 0.05;
  o.sgd.momentum = 0.9;
  o.mode = stage_mode::synthetic;
  const model_shape shape{eg::data::sample_shape::image(1, 28, 28), 10};
  auto stages = make_pipeline("lenet5", {0, 2}, 1, o, shape);
  torch::manual_seed(3);
  runaway_guard first({}, 10), middle({}, 10);
  std::vector<double> norms;
  for (uint64_t b = 0; b < 150; ++b) {
    auto x = torch::randn({16, 1, 28, 28});
    auto y = torch::randint(0, 10, {16}, torch::kLong);
    auto h0 = stages[0]->forward(b, x, y);
    auto h1 = stages[1]->forward(b, h0.output, y);
    auto l = stages[2]->loss_step(b, h1.output, y);
    auto b1 = stages[1]->backward(b, l.input_gradient);
    stages[0]->backward(b, h1.input_gradient);
    norms.push_back(stages[0]->gradient_norm());
    auto why = first.gradient_norm(stages[0]->gradient_norm());
    BOOST_REQUIRE_MESSAGE(!why, "batch " << b << ": " << *why);
    auto why1 = middle.gradient_norm(stages[1]->gradient_norm());
    BOOST_REQUIRE_MESSAGE(!why1, "batch " << b << ": " << *why1);
  }
  // The case is the one above: the first norm is zero and later ones are not.
  BOOST_TEST(norms.front() == 0.0);
  BOOST_TEST(*std::max_element(norms.begin(), norms.end()) > 0.0);
}

BOOST_AUTO_TEST_CASE(after_a_restart_the_guard_learns_the_levels_again) {
  runaway_guard g({}, 10);
  BOOST_REQUIRE(!feed_loss(g, 400, 0.4));
  g.restart();
  // Back at the checkpoint's level (higher than the lowest before): not a
  // runaway; the warmup and the lowest start again.
  BOOST_TEST(!feed_loss(g, 400, 1.2));
  BOOST_TEST(std::abs(g.lowest_loss_average() - 1.2) < 0.1);
}

BOOST_AUTO_TEST_CASE(a_model_that_never_leaves_a_uniform_guess_is_stuck) {
  runaway_options o;
  o.stuck_after = 500;
  // Dead ReLUs: the loss sits at ln 10 = 2.3026 (a uniform guess).
  runaway_guard dead(o, 10);
  const double uniform = std::log(10.0);
  auto why = feed_loss(dead, 1000, uniform);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("stuck") != std::string::npos, *why);
  BOOST_TEST(why->find("after 500 steps") != std::string::npos, *why);
  BOOST_TEST(is_stuck(*why));
  BOOST_TEST(!is_stuck("the training loss is nan"));
  // A slow start that gets below 0.95 x ln 10 within the patience is not
  // stuck, nor a plateau below that level later.
  runaway_guard slow(o, 10);
  for (int i = 0; i < 2000; ++i) {
    const double level = i < 300 ? uniform : (i < 1000 ? 2.0 : 2.1);
    BOOST_REQUIRE_MESSAGE(!slow.loss(level), "step " << i);
  }
  // A model that learnt a little (1.8, too little for the rise rule) and
  // fell back to guessing is stuck as well, once the patience is over.
  runaway_guard fell(o, 10);
  BOOST_REQUIRE(!feed_loss(fell, 200, 1.8));
  auto fallen = feed_loss(fell, 1000, uniform);
  BOOST_REQUIRE(fallen.has_value());
  BOOST_TEST(is_stuck(*fallen), *fallen);
  // After a rollback the patience starts again.
  dead.restart();
  BOOST_TEST(!feed_loss(dead, 499, uniform));
  BOOST_TEST(feed_loss(dead, 2, uniform).has_value());
  // 0: never.
  o.stuck_after = 0;
  runaway_guard never(o, 10);
  BOOST_TEST(!feed_loss(never, 3000, uniform));
  runaway_options bad;
  bad.stuck_level = 1.5;
  BOOST_CHECK_THROW(check(bad), argument_error);
}

BOOST_AUTO_TEST_CASE(a_disabled_guard_sees_nothing_and_bad_options_are_refused) {
  runaway_options off;
  off.enabled = false;
  runaway_guard g(off, 10);
  BOOST_TEST(!g.loss(std::numeric_limits<double>::quiet_NaN()));
  BOOST_TEST(!feed_loss(g, 400, 50.0));
  runaway_options bad;
  bad.slow = 1.5;
  BOOST_CHECK_THROW(runaway_guard(bad, 10), argument_error);
  bad = {};
  bad.rate = 0;
  BOOST_CHECK_THROW(check(bad), argument_error);
}

BOOST_AUTO_TEST_CASE(a_stage_does_not_apply_a_non_finite_gradient_and_says_its_norm) {
  stage_options o;
  o.sgd.lr = 0.1;
  auto stages = make_pipeline("lenet5", {}, 1, o, model_shape{eg::data::sample_shape::image(1, 28, 28), 10});
  auto& t = *stages.front();
  BOOST_TEST(std::isnan(t.gradient_norm()));
  auto x = torch::randn({8, 1, 28, 28});
  auto y = torch::randint(0, 10, {8}, torch::kLong);
  t.loss_step(0, x, y);
  BOOST_TEST(t.steps() == 1u);
  BOOST_TEST(std::isfinite(t.gradient_norm()));
  BOOST_TEST(t.gradient_norm() > 0);
  std::vector<torch::Tensor> before;
  for (auto& p : t.parameters())
    before.push_back(p.detach().clone());
  auto poisoned = x.clone();
  poisoned[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  t.loss_step(1, poisoned, y);
  BOOST_TEST(t.steps() == 1u);
  BOOST_TEST(t.skipped_steps() == 1u);
  BOOST_TEST(!std::isfinite(t.gradient_norm()));
  auto after = t.parameters();
  for (size_t i = 0; i < before.size(); ++i)
    BOOST_TEST(torch::equal(before[i], after[i].detach()), "parameter " << i);
  // A checkpoint from before any step brings back no momentum: a step
  // after loading it moves the parameters as the very first step did.
  {
    auto fresh = make_pipeline("lenet5", {}, 1, o, model_shape{eg::data::sample_shape::image(1, 28, 28), 10});
    auto& f = *fresh.front();
    const auto at_start = f.save();
    f.loss_step(0, x, y);
    std::vector<torch::Tensor> once;
    for (auto& p : f.parameters())
      once.push_back(p.detach().clone());
    f.loss_step(1, x, y);  // now with momentum
    f.load(at_start);
    f.loss_step(2, x, y);
    auto again = f.parameters();
    for (size_t i = 0; i < once.size(); ++i)
      BOOST_TEST(torch::allclose(once[i], again[i].detach()), "parameter " << i);
  }
  // Slowed: the learning rate halves, and stays halved through a checkpoint.
  t.scale_learning_rate(0.5);
  BOOST_TEST(t.learning_rate() == 0.05);
  auto saved = t.save();
  t.scale_learning_rate(0.5);
  t.load(saved);
  BOOST_TEST(t.learning_rate() == 0.05);
}

BOOST_AUTO_TEST_SUITE_END()

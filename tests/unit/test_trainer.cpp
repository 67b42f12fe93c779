// links: eg_learning
// A platform's local training (train/trainer.hpp): epoch plans, steps (also with
// parameters lent), learning-rate schedules, evaluation, the cluster's
// normalisation, and models that learn flat features and Fashion-MNIST.
#include "data/shape.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "models/serialize.hpp"
#include "train/loans.hpp"
#include "train/trainer.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

using eg::test::random_set;
using eg::test::iota;

using namespace eg::learning;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

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

BOOST_AUTO_TEST_SUITE(trainer)

BOOST_AUTO_TEST_CASE(a_training_step_copies_parameters_still_lent) {
  local_trainer trainer(make_classifier("lenet5", 1, fashion), random_set(256, 2), iota(256),
                        {0.01, 0.9, 64});
  std::mt19937_64 rng(1);
  trainer.begin_epoch(shuffled_plan(trainer.shard(), 64, 1.0, rng));
  auto params = parameters(trainer.model());
  trainer.step();  // the optimizer has momentum state from here on
  auto snapshot = params[2].detach().clone();
  const void* lent_at = params[2].data_ptr();
  auto token = trainer.loans().lend(params);
  trainer.step();
  // The step wrote to a copy: what was lent is as it was, the model moved
  // on, and the optimizer still updates the same parameters.
  BOOST_TEST(trainer.loans().copies() == 1u);
  BOOST_TEST(torch::equal(torch::from_blob(const_cast<void*>(lent_at), snapshot.sizes()), snapshot));
  BOOST_TEST(!torch::equal(params[2], snapshot));
  auto after_copy = params[2].detach().clone();
  token.reset();
  trainer.step();
  BOOST_TEST(trainer.loans().copies() == 1u);
  BOOST_TEST(!torch::equal(params[2], after_copy));
}

BOOST_AUTO_TEST_CASE(shuffled_plan_sizes) {
  std::mt19937_64 rng(1);
  auto shard = iota(100);
  auto plan = shuffled_plan(shard, 32, 1.0, rng);
  BOOST_TEST(plan.batches.size() == 4u);
  BOOST_TEST(plan.batches.back().size() == 4u);
  BOOST_TEST(plan.samples() == 100);
  std::vector<int64_t> all;
  for (const auto& b : plan.batches)
    all.insert(all.end(), b.begin(), b.end());
  BOOST_TEST(all != shard);  // shuffled
  std::sort(all.begin(), all.end());
  BOOST_TEST(all == shard);

  auto ten = iota(10);
  BOOST_TEST(shuffled_plan(ten, 4, 0.3, rng).samples() == 3);
  BOOST_TEST(shuffled_plan(ten, 4, 0.25, rng).samples() == 3);
  BOOST_TEST(shuffled_plan(ten, 4, 0.01, rng).samples() == 1);
  auto part = shuffled_plan(iota(1000), 64, 0.5, rng);
  BOOST_TEST(part.samples() == 500);
  BOOST_TEST(part.batches.size() == 8u);
  std::set<int64_t> distinct;
  for (const auto& b : part.batches)
    distinct.insert(b.begin(), b.end());
  BOOST_TEST(distinct.size() == 500u);
  BOOST_TEST(shuffled_plan({}, 4, 1, rng).batches.empty());
  BOOST_CHECK_THROW(shuffled_plan(ten, 4, 0, rng), std::invalid_argument);
  BOOST_CHECK_THROW(shuffled_plan(ten, 4, 1.5, rng), std::invalid_argument);
  BOOST_CHECK_THROW(shuffled_plan(ten, 0, 1, rng), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(trainer_steps_through_a_plan) {
  auto data = random_set(100, 1);
  local_trainer t(make_classifier("logreg", 1, fashion), data, iota(100), {0.01, 0.9, 16});
  std::mt19937_64 rng(1);
  BOOST_TEST(t.epoch_done());
  t.begin_epoch(shuffled_plan(t.shard(), t.options().batch, 1, rng));
  BOOST_TEST(t.remaining() == 7u);
  auto before = snapshot(t.model());
  auto r = t.step();
  BOOST_TEST(r.samples == 16);
  BOOST_TEST(std::isfinite(r.loss));
  BOOST_TEST(r.loss > 0);
  BOOST_TEST(r.compute_seconds > 0);
  BOOST_TEST(!all_equal(before, parameters(t.model())));
  int64_t samples = r.samples;
  while (!t.epoch_done())
    samples += t.step().samples;
  BOOST_TEST(samples == 100);
  BOOST_TEST(t.remaining() == 0u);
  BOOST_CHECK_THROW(t.step(), std::logic_error);
  BOOST_CHECK_THROW(local_trainer(make_classifier("logreg", 1, fashion), data, {100}, {}),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(learning_rate_schedules) {
  for (uint32_t e = 0; e < 12; ++e)
    BOOST_TEST(scheduled_lr(0.02, "constant", e, 12) == 0.02);
  // Cosine: lr in the first epoch, half of it in the middle one, falling
  // every epoch, and small but positive in the last.
  BOOST_TEST(scheduled_lr(0.02, "cosine", 0, 12) == 0.02);
  BOOST_TEST(scheduled_lr(0.02, "cosine", 6, 12) == 0.01, boost::test_tools::tolerance(1e-12));
  for (uint32_t e = 1; e < 12; ++e)
    BOOST_TEST(scheduled_lr(0.02, "cosine", e, 12) < scheduled_lr(0.02, "cosine", e - 1, 12));
  const double last = scheduled_lr(0.02, "cosine", 11, 12);
  BOOST_TEST(last > 0);
  BOOST_TEST(last == 0.02 * 0.5 * (1 + std::cos(M_PI * 11 / 12)),
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(scheduled_lr(0.02, "cosine", 40, 12) == last);  // past the end: the last epoch's
  BOOST_TEST(scheduled_lr(0.1, "cosine", 0, 1) == 0.1);
  BOOST_CHECK_THROW(scheduled_lr(0.02, "step", 0, 12), std::invalid_argument);
  BOOST_CHECK_THROW(scheduled_lr(0.02, "cosine", 0, 0), std::invalid_argument);
  // Warm-up: linear in the progress up to the warm-up's end, then 1.
  BOOST_TEST(warmup_factor(0, 0) == 1);
  BOOST_TEST(warmup_factor(0, 3.5) == 1);
  BOOST_TEST(warmup_factor(2, 0.01) == 0.005, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(warmup_factor(2, 1) == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(warmup_factor(2, 2) == 1);
  BOOST_TEST(warmup_factor(2, 7) == 1);
  for (double p = 0.1; p < 2; p += 0.1)
    BOOST_TEST(warmup_factor(2, p) < warmup_factor(2, p + 0.1));
  BOOST_CHECK_THROW(warmup_factor(-1, 0.5), std::invalid_argument);
  BOOST_CHECK_THROW(warmup_factor(1, -0.5), std::invalid_argument);
  // The trainer's optimizer takes the new rate: a step with half the rate
  // moves a fresh model by half as much (momentum starts at zero).
  auto data = random_set(32, 3);
  auto moved = [&](double lr) {
    local_trainer t(make_classifier("logreg", 1, fashion), data, iota(32), {0.04, 0.9, 32});
    t.set_lr(lr);
    BOOST_TEST(t.options().lr == lr);
    std::mt19937_64 rng(1);
    t.begin_epoch(shuffled_plan(t.shard(), 32, 1, rng));
    auto before = snapshot(t.model());
    t.step();
    auto after = parameters(t.model());
    double sum = 0;
    for (size_t i = 0; i < after.size(); ++i)
      sum += (after[i] - before[i]).abs().sum().item<double>();
    return sum;
  };
  BOOST_TEST(moved(0.01) / moved(0.02) == 0.5, boost::test_tools::tolerance(1e-4));
  local_trainer t(make_classifier("logreg", 1, fashion), data, iota(32), {0.04, 0.9, 32});
  BOOST_CHECK_THROW(t.set_lr(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(evaluate_restores_mode) {
  auto data = random_set(50, 2);
  auto model = make_classifier("lenet5", 1, fashion);
  auto e = evaluate(*model, *data, 16);
  BOOST_TEST(model->is_training());
  BOOST_TEST(e.accuracy >= 0.0);
  BOOST_TEST(e.accuracy <= 1.0);
  BOOST_TEST(e.loss > 0);
  // Same numbers whatever the batch size.
  auto whole = evaluate(*model, *data, 1000);
  BOOST_TEST(whole.accuracy == e.accuracy);
  BOOST_TEST(whole.loss == e.loss, boost::test_tools::tolerance(1e-5));
  // The counts behind the accuracy.
  BOOST_TEST(e.samples == 50);
  BOOST_TEST(whole.samples == 50);
  BOOST_TEST(e.correct == whole.correct);
  BOOST_TEST(e.accuracy == static_cast<double>(e.correct) / 50.0);
  {
    evaluation_scope scope(*model);
    auto predicted = model->forward(data->all()).argmax(1);
    BOOST_TEST(e.correct == predicted.eq(data->labels).sum().item<int64_t>());
  }
  model->eval();
  evaluate(*model, *data);
  BOOST_TEST(!model->is_training());
}

BOOST_AUTO_TEST_CASE(a_trainer_given_the_clusters_normalisation_trains_as_with_it_from_the_start) {
  // A platform starts with its node's own normalisation and is sent the
  // cluster's before its first plan: from then on it trains exactly as one
  // whose data had the cluster's from the start, on the same samples.
  torch::manual_seed(8);
  auto own = std::make_shared<dataset>(eg::test::random_images(96));
  auto cluster = std::make_shared<dataset>(*own);
  cluster->norm = {{0.41}, {0.27}};
  local_trainer moved(make_classifier("lenet5", 3, shape_of(*own)), own, iota(96),
                      {0.05, 0.9, 16});
  local_trainer from_start(make_classifier("lenet5", 3, shape_of(*own)), cluster, iota(96),
                           {0.05, 0.9, 16});
  moved.set_normalisation(cluster->norm);
  BOOST_TEST((moved.normalisation() == cluster->norm));
  BOOST_CHECK_THROW(moved.set_normalisation({{0.1, 0.2}, {1.0, 1.0}}), std::invalid_argument);
  std::mt19937_64 a(4), b(4);
  moved.begin_epoch(shuffled_plan(moved.shard(), 16, 1, a));
  from_start.begin_epoch(shuffled_plan(from_start.shard(), 16, 1, b));
  while (!moved.epoch_done()) {
    const auto r1 = moved.step();
    const auto r2 = from_start.step();
    BOOST_TEST(r1.loss == r2.loss);
  }
  BOOST_TEST(eg::test::all_equal(parameters(moved.model()), parameters(from_start.model())));
  // The node's data set is as it was: only the trainer's view changed.
  BOOST_TEST((own->norm != cluster->norm));
}

BOOST_AUTO_TEST_CASE(models_learn_a_features_data_set) {
  // 13 features of 3 classes (the arg-max of three fixed linear maps),
  // shifted and scaled, normalised by their own statistics.
  torch::manual_seed(5);
  auto d = std::make_shared<dataset>(eg::test::random_features(300, 13, 3));
  d->labels = d->samples.matmul(torch::randn({13, 3})).argmax(1);
  d->samples = d->samples.mul(4).add(2);
  d->norm = d->local_moments().finish();
  BOOST_REQUIRE_NO_THROW(d->check("features"));
  BOOST_REQUIRE_EQUAL(d->norm.mean.size(), 13u);
  BOOST_TEST(std::abs(d->norm.mean[0] - 2) < 1.0);
  BOOST_TEST(std::abs(d->norm.std[0] - 4) < 1.0);
  const auto bytes_before = d->samples.clone();
  // Batches are float32 [B, 13], of mean 0 and standard deviation 1 by feature.
  auto all = d->all();
  BOOST_TEST(all.sizes().vec() == (std::vector<int64_t>{300, 13}));
  BOOST_TEST(all.mean(0).abs().max().item<double>() < 1e-4);
  const auto sd = (all.pow(2).mean(0) - all.mean(0).pow(2)).sqrt();
  BOOST_TEST((sd - 1).abs().max().item<double>() < 1e-4);
  BOOST_TEST(torch::allclose(d->batch(torch::tensor({4}, torch::kInt64))[0], all[4]));
  // The data is as it was: batches are copies.
  BOOST_TEST(torch::equal(d->samples, bytes_before));

  for (const std::string name : {"mlp", "logreg"}) {
    BOOST_TEST_CONTEXT(name) {
      auto model = make_classifier(name, 1, shape_of(*d));
      BOOST_TEST((model->shape() == model_shape{eg::data::sample_shape::features(13), 3}));
      BOOST_TEST(model->forward(torch::zeros({2, 13})).sizes().vec() ==
                 (std::vector<int64_t>{2, 3}));
      const auto before = evaluate(*model, *d);
      local_trainer t(model, d, iota(300), {0.05, 0.9, 32});
      std::mt19937_64 rng(1);
      for (int epoch = 0; epoch < 20; ++epoch) {
        t.begin_epoch(shuffled_plan(t.shard(), 32, 1, rng));
        while (!t.epoch_done())
          t.step();
      }
      const auto after = evaluate(*model, *d);
      BOOST_TEST_MESSAGE(name << ": accuracy " << before.accuracy << " -> " << after.accuracy);
      BOOST_TEST(after.samples == 300);
      BOOST_TEST(after.accuracy > 0.85);
      BOOST_TEST(after.loss < before.loss);
      // Training and evaluating changed nothing of the data.
      BOOST_TEST(torch::equal(d->samples, bytes_before));
    }
  }
}

BOOST_AUTO_TEST_CASE(lenet_learns_fashion_mnist) {
  torch::set_num_threads(1);
  auto train = std::make_shared<const dataset>(load_fashion_mnist(data_dir, split::train, 6000));
  auto test = load_fashion_mnist(data_dir, split::test, 1000);
  test.norm = train->norm;  // the model sees the test data as it saw the training data
  local_trainer t(make_classifier("lenet5", 1, shape_of(*train)), train, iota(train->size()),
                  {0.01, 0.9, 64});
  std::mt19937_64 rng(1);
  for (int epoch = 0; epoch < 2; ++epoch) {
    t.begin_epoch(shuffled_plan(t.shard(), 64, 1, rng));
    while (!t.epoch_done())
      t.step();
  }
  auto e = evaluate(t.model(), test);
  BOOST_TEST_MESSAGE("accuracy after 2 epochs on 6000 samples: " << e.accuracy);
  BOOST_TEST(e.accuracy > 0.70);
}

BOOST_AUTO_TEST_SUITE_END()

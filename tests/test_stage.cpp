// Stage actors (actors/stage.hpp): a split model trained by a pipeline of
// actors, against the same model whole.
#include "actors/stage.hpp"
#include "actors/wire.hpp"
#include "learning/dataset.hpp"
#include "learning/split.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <torch/torch.h>

#include <memory>
#include <vector>

using namespace eg;
using namespace eg::actors;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

struct data {
  std::shared_ptr<const learning::dataset> train, test;
};

const data& fashion() {
  static data d = [] {
    data x;
    x.train = std::make_shared<learning::dataset>(
      learning::load_fashion_mnist(data_dir, learning::split::train, 4096));
    auto test = learning::load_fashion_mnist(data_dir, learning::split::test, 2000);
    x.test = std::make_shared<learning::dataset>(std::move(test));
    return x;
  }();
  return d;
}

struct pipeline {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::shared_ptr<learning::stage_trainer>> trainers;
  std::vector<stage_actor> stages;

  pipeline(const std::string& model, const std::vector<int64_t>& cuts, learning::stage_mode mode,
           std::vector<double> slowdowns = {}) {
    announce_types(cfg);
    cfg.set("logger.verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    learning::stage_options o;
    o.mode = mode;
    trainers = learning::make_pipeline(model, cuts, 1, o);
    for (size_t k = 0; k < trainers.size(); ++k) {
      stage_args a;
      a.trainer = trainers[k];
      a.slowdown = k < slowdowns.size() ? slowdowns[k] : 1.0;
      if (k == 0) {
        a.train_set = fashion().train;
        a.test_set = fashion().test;
        a.in_flight = 3;
      }
      stages.push_back(spawn_stage(*sys, std::move(a)));
    }
    link_stages(stages);
  }
  ~pipeline() {
    for (auto& s : stages)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }

  std::vector<split_epoch> run(uint32_t epochs) {
    caf::scoped_actor self{*sys};
    std::vector<split_epoch> out;
    self->request(stages.front(), std::chrono::seconds(120), run_atom::value, epochs)
      .receive([&](std::vector<split_epoch>& e) { out = std::move(e); },
               [&](caf::error& err) { BOOST_FAIL("the run failed: " << sys->render(err)); });
    return out;
  }

  stage_stats stats(size_t k) {
    caf::scoped_actor self{*sys};
    stage_stats s;
    self->request(stages.at(k), std::chrono::seconds(10), stats_atom::value)
      .receive([&](stage_stats& x) { s = x; }, [&](caf::error&) { BOOST_FAIL("no stats"); });
    return s;
  }

  /// Every parameter of the stages, in order.
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> all;
    for (auto& t : trainers)
      for (auto& p : t->parameters())
        all.push_back(p.detach().clone());
    return all;
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(stage)

BOOST_AUTO_TEST_CASE(a_split_in_backprop_mode_trains_exactly_as_the_whole_model) {
  pipeline whole("lenet5", {}, learning::stage_mode::backprop);
  pipeline split("lenet5", {1, 3}, learning::stage_mode::backprop);
  auto w = whole.run(2);
  auto s = split.run(2);
  BOOST_REQUIRE_EQUAL(w.size(), 2u);
  BOOST_REQUIRE_EQUAL(s.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    BOOST_TEST(s[e].test_accuracy == w[e].test_accuracy);
    BOOST_TEST(std::abs(s[e].train_loss - w[e].train_loss) < 1e-5);
  }
  BOOST_TEST(w.back().test_accuracy > 0.5);  // it learnt
  auto pw = whole.parameters();
  auto ps = split.parameters();
  BOOST_REQUIRE_EQUAL(pw.size(), ps.size());
  for (size_t i = 0; i < pw.size(); ++i)
    BOOST_TEST(torch::allclose(pw[i], ps[i], 1e-5, 1e-6), "parameter " << i);
  // Activations went up and gradients came down between the three stages;
  // the stages waited for each other.
  auto first = split.stats(0), middle = split.stats(1), last = split.stats(2);
  BOOST_TEST(first.bytes_up > 0u);
  BOOST_TEST(first.bytes_down == 0u);  // nothing below the first
  BOOST_TEST(middle.bytes_down > 0u);
  BOOST_TEST(last.bytes_up == 0u);
  BOOST_TEST(first.batches == 2u * 64u);  // 4096 images, batch 64, 2 epochs
  BOOST_TEST(last.idle_share() > 0.2);
}

BOOST_AUTO_TEST_CASE(a_split_with_synthetic_gradients_trains_every_batch_and_learns) {
  pipeline split("lenet5", {1}, learning::stage_mode::synthetic);
  auto s = split.run(3);
  BOOST_REQUIRE_EQUAL(s.size(), 3u);
  BOOST_TEST(split.stats(0).batches == 3u * 64u);
  BOOST_TEST(split.stats(1).batches == 3u * 64u);
  // The lower stage sent gradients down? There is none below it; the upper
  // one sent its input gradients, the lower stage's regression targets.
  BOOST_TEST(split.stats(1).bytes_down > 0u);
  BOOST_TEST(s.back().seconds > s.front().seconds);
  BOOST_TEST_MESSAGE("synthetic gradients, 3 epochs: test accuracy " << s.back().test_accuracy);
  BOOST_TEST(s.back().test_accuracy > 0.4, "accuracy " << s.back().test_accuracy);
}

BOOST_AUTO_TEST_CASE(a_stage_refuses_messages_whose_shapes_disagree_and_goes_on) {
  pipeline split("lenet5", {1}, learning::stage_mode::backprop);
  caf::scoped_actor self{*split.sys};
  // An activation of the wrong shape for the upper stage, a gradient for a
  // batch the lower stage never sent, and a message without its tensors.
  auto hold = std::make_shared<std::vector<torch::Tensor>>();
  auto wrong = torch::zeros({4, 3, 5, 5});
  auto labels = torch::zeros({4}, torch::kLong);
  hold->push_back(wrong);
  hold->push_back(labels);
  held_weights m;
  m.value.iteration = 7;
  m.value.tensors = {{"input", messages::dtype::float32, {4, 3, 5, 5}, wrong.data_ptr(),
                      static_cast<size_t>(wrong.numel()) * 4},
                     {"labels", messages::dtype::int64, {4}, labels.data_ptr(), 4 * 8}};
  m.hold = hold;
  self->send(split.stages[1], forward_atom::value, m);
  held_weights g = m;
  g.value.tensors = {{"gradient", messages::dtype::float32, {4, 3, 5, 5}, wrong.data_ptr(),
                      static_cast<size_t>(wrong.numel()) * 4}};
  self->send(split.stages[0], backward_atom::value, g);
  held_weights lying = m;  // a length that disagrees with the shape
  lying.value.tensors[0].bytes = 12;
  self->send(split.stages[1], forward_atom::value, lying);
  held_weights empty;
  self->send(split.stages[1], forward_atom::value, empty);
  // Nothing was trained on them, and the pipeline still trains.
  BOOST_TEST(split.stats(1).bytes_down == 0u);
  auto s = split.run(1);
  BOOST_REQUIRE_EQUAL(s.size(), 1u);
  BOOST_TEST(split.stats(0).batches == 64u);
  BOOST_TEST(s.back().test_accuracy > 0.3);
}

BOOST_AUTO_TEST_SUITE_END()

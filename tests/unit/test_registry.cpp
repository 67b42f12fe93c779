// links: eg_learning
// The registries of strategies, topologies and models (config/registry.hpp):
// every built-in one is registered and nameable in a cluster file; a new
// strategy and a new model are one file each. This file adds both, with
// nothing else changed, and the cluster file, the worker and the model
// factory take them.
#include "algorithms/gossip/gossip.hpp"
#include "algorithms/gossip/topology.hpp"
#include "algorithms/ps/commit_schedule.hpp"
#include "algorithms/workers.hpp"
#include "config/config.hpp"
#include "models/model.hpp"
#include "sample_sets.hpp"

#include <torch/nn/modules/linear.h>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

using namespace eg;
using namespace eg::learning;

namespace {

// --- a new gossip strategy: its class and its registration, nothing more ------

/// GoSGD that exchanges after every step (p = 1), with its own code.
class every_step : public gossip_strategy {
public:
  explicit every_step(double w) : weight_(w) {}
  std::string name() const override { return "every-step"; }
  double weight() const override { return weight_; }
  void set_weight(double w) override { weight_ = w; }
  void merge(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& received,
             double received_weight, double, double) override {
    const double total = weight_ + received_weight;
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mul_(weight_ / total).add_(received[i], received_weight / total);
    weight_ = total;
  }
  using gossip_strategy::after_step;
  std::vector<send_order> after_step(const std::vector<torch::Tensor>&,
                                     const std::vector<double>& split,
                                     std::mt19937_64&) override {
    if (split.empty()) return {};
    weight_ /= 2;
    return {{0, weight_}};
  }
  bool after_step_reads_parameters() const override { return false; }
  void scale_exchange(double) override {}

private:
  double weight_;
};

const gossip_registration every_step_strategy{
  "every-step",
  {config::strategy_family::gossip, false, false, "GoSGD exchanging after every step (a test's)"},
  [](const gossip_setup& s) {
    return std::make_unique<every_step>(1.0 / static_cast<double>(s.platforms));
  }};

// --- a new model: its class and its registration --------------------------------

class two_layer : public classifier {
public:
  explicit two_layer(const model_shape& s) : fc1(s.input.numel(), 16), fc2(16, s.classes) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) override {
    return fc2->forward(torch::tanh(fc1->forward(x.flatten(1))));
  }

private:
  torch::nn::Linear fc1, fc2;
};

const model_registration two_layer_model{
  "two-layer", "16 tanh units (a test's)",
  {0, [](const model_shape& s, uint64_t) { return std::make_shared<two_layer>(s); }}};

const model_shape fashion{data::sample_shape::image(1, 28, 28), 10};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(every_built_in_strategy_topology_and_model_is_registered) {
  const auto strategies = config::strategies().names();
  for (auto name : {"gosgd", "gosgd-async", "edgegossip", "sgp", "sparse-push", "scsp", "bsp",
                    "ssp", "async", "adacomm", "adsp"})
    BOOST_CHECK_MESSAGE(config::strategies().contains(name), name);
  // A gossip rule for each gossip and push-sum strategy, a synchronisation
  // model for each parameter-server one, and nothing else.
  for (const auto& name : strategies) {
    const bool server = config::strategies().at(name).family
                        == config::strategy_family::parameter_server;
    BOOST_CHECK_MESSAGE(gossip_rules().contains(name) != server, name);
    BOOST_CHECK_MESSAGE(sync_models().contains(name) == server, name);
  }
  BOOST_TEST(topology_names() == (std::vector<std::string>{"exponential", "full", "ring",
                                                           "uniform"}));
  BOOST_TEST(config::topologies().names() == topology_names());
  for (auto name : {"alexnet", "conv8", "lenet5", "logreg", "mlp", "mobilenetv2", "squeezenet", "vgg11"})
    BOOST_CHECK_MESSAGE(config::models().contains(name), name);
  BOOST_TEST(config::models().names() == zoo_models());
}

BOOST_AUTO_TEST_CASE(the_traits_say_what_config_and_the_actors_ask) {
  config::strategy_config s;
  s.name = "edgegossip";
  BOOST_TEST(s.edgegossip());
  BOOST_TEST(!s.asynchronous());
  s.name = "gosgd-async";
  BOOST_TEST(s.asynchronous());
  s.name = "scsp";
  BOOST_TEST(s.push_sum());
  s.name = "bsp";
  BOOST_TEST(s.parameter_server());
  BOOST_TEST(!s.asynchronous());
  s.name = "adsp";
  BOOST_TEST(s.asynchronous());
  s.name = "gosgd";
  s.schedule = config::schedule::async;
  BOOST_TEST(s.asynchronous());
  s.name = "fastest";
  BOOST_CHECK_THROW(s.traits(), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_name_registered_twice_or_unknown_is_refused) {
  config::registry<int> r{"thing"};
  r.add("a", 1);
  r.add("b", 2);
  BOOST_CHECK_THROW(r.add("a", 3), std::logic_error);
  BOOST_CHECK_THROW(r.add("", 3), std::logic_error);
  BOOST_TEST(r.at("b") == 2);
  const auto why = error_of([&] { r.at("c"); });
  BOOST_TEST(contains(why, "unknown thing 'c' (known: a, b)"), why);
  BOOST_CHECK_THROW(
    (gossip_registration{"gosgd", {}, [](const gossip_setup&) { return nullptr; }}),
    std::logic_error);
  BOOST_CHECK_THROW(make_strategy("allreduce", 4, 0.5), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_strategy_of_one_file_is_named_in_a_cluster_file_and_trains) {
  // The cluster file takes it, from the registry, and lists it when wrong.
  auto cfg = config::parse("[strategy]\nname = \"every-step\"\n", "cluster.toml");
  config::validate(cfg);
  BOOST_TEST(cfg.strategy.name == "every-step");
  BOOST_TEST(!cfg.strategy.push_sum());
  const auto why = error_of([] { config::parse("[strategy]\nname = \"every-stp\"\n", "c.toml"); });
  BOOST_TEST(contains(why, "strategy.name must be"), why);
  BOOST_TEST(contains(why, "'every-step'"), why);
  BOOST_TEST(contains(why, "'gosgd'"), why);

  // The platform's worker gossips by its rule: half the weight after every step.
  torch::manual_seed(3);
  auto d = std::make_shared<const dataset>(test::random_images(64));
  std::vector<int64_t> shard(32);
  std::iota(shard.begin(), shard.end(), 0);
  platform_model m(std::make_unique<local_trainer>(make_classifier("logreg", 1, shape_of(*d)), d,
                                                   shard, sgd_options{0.05, 0.9, 8}));
  worker_settings ws;
  ws.platform = "p0";
  ws.members = {"p0", "p1"};
  ws.platforms = 2;
  ws.strategy = cfg.strategy;
  ws.batch = 8;
  auto w = make_worker(ws, m);
  BOOST_TEST(w->family() == "gossip");
  w->start();
  w->peers({"p1"});
  BOOST_CHECK_CLOSE(w->weight(), 0.5, 1e-9);
  for (int k = 1; k <= 3; ++k) {
    if (m.trainer().epoch_done()) m.trainer().begin_epoch({{{0, 1, 2, 3, 4, 5, 6, 7}}});
    auto r = m.trainer().step();
    run_position at;
    at.platform = "p0";
    at.epoch = 1;
    at.total_iterations = static_cast<uint64_t>(k);
    auto out = w->stepped({r.loss, m.trainer().epoch_done(), 0.0}, at);
    BOOST_REQUIRE_EQUAL(out.sends.size(), 1u);
    BOOST_CHECK_EQUAL(out.sends[0].to, "p1");
    BOOST_CHECK_CLOSE(out.sends[0].message.value.gossip_weight, 0.5 / (1 << k), 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(a_model_of_one_file_is_named_in_a_cluster_file_and_built) {
  auto cfg = config::parse("[train]\nmodel = \"two-layer\"\n", "cluster.toml");
  config::validate(cfg);
  auto m = make_classifier(cfg.train.model, 5, fashion);
  BOOST_TEST(m->model_name() == "two-layer");
  BOOST_TEST(parameter_count(*m) == 784 * 16 + 16 + 16 * 10 + 10);
  BOOST_TEST(m->forward(torch::zeros({3, 1, 28, 28})).sizes() == torch::IntArrayRef({3, 10}));
  // Seeded as every zoo model is: equal seeds, equal models.
  auto again = make_classifier("two-layer", 5, fashion);
  BOOST_TEST(torch::equal(m->parameters()[0], again->parameters()[0]));
  const auto why = error_of([] { make_classifier("two-layers", 1, fashion); });
  BOOST_TEST(contains(why, "squeezenet, two-layer, vgg11 or torchscript:PATH"), why);
  BOOST_TEST(contains(error_of([] { config::parse("[train]\nmodel = \"resnet\"\n", "c.toml"); }),
                      "'torchscript:PATH'"));
}

BOOST_AUTO_TEST_SUITE_END()

// links: eg_learning
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "algorithms/split/split.hpp"
#include "algorithms/split/split_driver.hpp"
#include "train/trainer.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace eg::learning;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST's model shape: 1 x 28 x 28, 10 classes.
const model_shape fashion = fashion_mnist_shape();
constexpr int64_t num_classes = 10;

// Checks that the exception's message holds all `parts`.
template <typename E>
auto message_with(std::vector<std::string> parts) {
  return [parts](const E& e) {
    std::string what = e.what();
    for (const auto& p : parts)
      if (what.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << what << "' lacks '" << p << "'");
        return false;
      }
    return true;
  };
}

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params)
    out.push_back(p.detach().clone());
  return out;
}

using eg::test::all_equal;

std::vector<torch::Tensor> pipeline_parameters(
    const std::vector<std::shared_ptr<stage_trainer>>& stages) {
  std::vector<torch::Tensor> out;
  for (const auto& s : stages)
    for (const auto& p : s->parameters())
      out.push_back(p);
  return out;
}

std::vector<std::string> pipeline_parameter_names(
    const std::vector<std::shared_ptr<stage_trainer>>& stages) {
  std::vector<std::string> out;
  for (const auto& s : stages)
    for (const auto& n : parameter_names(s->stage()))
      out.push_back(n);
  return out;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

std::pair<torch::Tensor, torch::Tensor> random_batch(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({n, 1, 28, 28}), torch::randint(0, num_classes, {n}, torch::kInt64)};
}

stage_options options(stage_mode mode) {
  stage_options o;
  o.mode = mode;
  return o;
}

} // namespace

BOOST_AUTO_TEST_SUITE(split)

// --- models --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(models_list_their_layers_and_shapes) {
  BOOST_TEST(split_model_names() == (std::vector<std::string>{"lenet5", "conv8", "vgg11"}));
  BOOST_TEST(layer_count("lenet5") == 5);
  BOOST_TEST(layer_count("conv8") == 8);
  BOOST_TEST(layer_names("lenet5") ==
             (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  const std::vector<std::vector<int64_t>> lenet = {{6, 14, 14}, {16, 5, 5}, {120}, {84}, {10}};
  const std::vector<std::vector<int64_t>> conv8 = {{8, 14, 14}, {8, 14, 14}, {16, 7, 7},
                                                   {16, 7, 7},  {32, 3, 3},  {128},
                                                   {64},        {10}};
  BOOST_TEST(activation_shape("lenet5", -1, fashion) == (std::vector<int64_t>{1, 28, 28}));
  for (const auto& [model, expected] : {std::pair{std::string("lenet5"), lenet},
                                        std::pair{std::string("conv8"), conv8}}) {
    const int64_t n = layer_count(model);
    auto x = torch::randn({3, 1, 28, 28});
    for (int64_t l = 0; l < n; ++l) {
      BOOST_TEST(activation_shape(model, l, fashion) == expected[static_cast<size_t>(l)]);
      // Each layer alone maps its input shape to its output shape.
      auto stage = make_stage(model, l, l, 1, fashion);
      BOOST_TEST(stage->input_shape() == activation_shape(model, l - 1, fashion));
      x = stage->forward(x);
      std::vector<int64_t> got(x.sizes().begin() + 1, x.sizes().end());
      BOOST_TEST(got == expected[static_cast<size_t>(l)], model << " layer " << l);
    }
  }
}

BOOST_AUTO_TEST_CASE(split_models_take_the_datas_shape_and_classes) {
  // Colour images of 32 x 32 and 100 classes.
  const model_shape cifar100{eg::data::sample_shape::image(3, 32, 32), 100};
  const std::vector<std::vector<int64_t>> lenet = {{6, 16, 16}, {16, 6, 6}, {120}, {84}, {100}};
  const std::vector<std::vector<int64_t>> conv8 = {{8, 16, 16}, {8, 16, 16}, {16, 8, 8},
                                                   {16, 8, 8},  {32, 4, 4},  {128},
                                                   {64},        {100}};
  BOOST_TEST(activation_shape("conv8", -1, cifar100) == (std::vector<int64_t>{3, 32, 32}));
  for (const auto& [model, expected] : {std::pair{std::string("lenet5"), lenet},
                                        std::pair{std::string("conv8"), conv8}}) {
    auto x = torch::randn({2, 3, 32, 32});
    for (int64_t l = 0; l < layer_count(model); ++l) {
      BOOST_TEST(activation_shape(model, l, cifar100) == expected[static_cast<size_t>(l)]);
      auto stage = make_stage(model, l, l, 1, cifar100);
      BOOST_TEST((stage->shape() == cifar100));
      x = stage->forward(x);
      std::vector<int64_t> got(x.sizes().begin() + 1, x.sizes().end());
      BOOST_TEST(got == expected[static_cast<size_t>(l)], model << " layer " << l);
    }
  }
  // The whole split LeNet-5 is the project's LeNet-5 for that shape too.
  auto whole = make_classifier("lenet5", 11, cifar100);
  auto stage = make_stage("lenet5", 0, 4, 11, cifar100);
  BOOST_TEST(parameter_names(*stage) == parameter_names(*whole));
  BOOST_TEST(all_equal(parameters(*stage), parameters(*whole)));
  auto x = torch::randn({4, 3, 32, 32});
  BOOST_TEST(torch::equal(stage->forward(x), whole->forward(x)));
  // A pipeline for it: labels up to 99 are taken, 100 is not.
  auto stages = make_pipeline("lenet5", {1}, 2, options(stage_mode::synthetic), cifar100);
  BOOST_TEST(stages[0]->synthetic()->options().classes == 100);
  auto y = torch::tensor({0, 42, 99, 7}, torch::kInt64);
  auto h = stages[0]->forward(1, x, y).output;
  BOOST_TEST(h.sizes().vec() == (std::vector<int64_t>{4, 16, 6, 6}));
  auto l = stages[1]->loss_step(1, h, y);
  BOOST_TEST(l.samples == 4);
  BOOST_TEST(std::isfinite(l.loss));
  BOOST_CHECK_EXCEPTION(stages[1]->loss_step(2, h, torch::full({4}, 100, torch::kInt64)),
                        stage_error, message_with<stage_error>({"not in 0..99"}));

  // Features, images too small, fewer than two classes: refused, naming the model.
  using E = std::invalid_argument;
  const model_shape wine{eg::data::sample_shape::features(13), 3};
  BOOST_CHECK_EXCEPTION(make_stage("lenet5", 0, 1, 1, wine), E,
                        message_with<E>({"lenet5", "13 features"}));
  BOOST_CHECK_EXCEPTION(activation_shape("conv8", 0, wine), E,
                        message_with<E>({"conv8", "13 features"}));
  BOOST_CHECK_EXCEPTION(make_pipeline("lenet5", {1}, 1, options(stage_mode::backprop),
                                      {eg::data::sample_shape::image(1, 8, 8), 10}),
                        E, message_with<E>({"lenet5", "1x8x8"}));
  BOOST_CHECK_EXCEPTION(
    make_stage("lenet5", 0, 1, 1, {eg::data::sample_shape::image(1, 28, 28), 1}), E,
    message_with<E>({"lenet5", "1 classes"}));
}

BOOST_AUTO_TEST_CASE(unknown_model_or_bad_range_is_refused) {
  using E = std::invalid_argument;
  BOOST_CHECK_EXCEPTION(layer_count("resnet"), E, message_with<E>({"resnet", "lenet5, conv8"}));
  BOOST_CHECK_EXCEPTION(make_stage("resnet", 0, 1, 1, fashion), E, message_with<E>({"resnet"}));
  BOOST_CHECK_EXCEPTION(make_stage("lenet5", 0, 5, 1, fashion), E,
                        message_with<E>({"0..5", "5 layers"}));
  BOOST_CHECK_EXCEPTION(make_stage("lenet5", 3, 2, 1, fashion), E, message_with<E>({"3..2"}));
  BOOST_CHECK_EXCEPTION(make_stage("conv8", -1, 2, 1, fashion), E, message_with<E>({"-1..2"}));
  BOOST_CHECK_EXCEPTION(activation_shape("lenet5", 5, fashion), E, message_with<E>({"layer 5"}));
  BOOST_CHECK_EXCEPTION(stage_ranges("lenet5", {2, 1}), E, message_with<E>({"cut after layer 1"}));
  BOOST_CHECK_EXCEPTION(stage_ranges("lenet5", {4}), E, message_with<E>({"0..3"}));
  BOOST_CHECK_THROW(parse_stage_mode("async"), E);
  BOOST_TEST((stage_ranges("conv8", {2, 5}) ==
              std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {3, 5}, {6, 7}}));
}

BOOST_AUTO_TEST_CASE(whole_lenet5_stage_is_the_project_lenet5) {
  auto whole = make_classifier("lenet5", 11, fashion);
  auto stage = make_stage("lenet5", 0, 4, 11, fashion);
  BOOST_TEST(parameter_names(*stage) == parameter_names(*whole));
  BOOST_TEST(all_equal(parameters(*stage), parameters(*whole)));
  auto [x, y] = random_batch(8, 3);
  BOOST_TEST(torch::equal(stage->forward(x), whole->forward(x)));
  // The stages of a split hold the whole model's layers.
  auto upper = make_stage("lenet5", 2, 4, 11, fashion);
  BOOST_TEST(parameter_names(*upper) ==
             (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                       "fc3.weight", "fc3.bias"}));
  BOOST_TEST(torch::equal(upper->named_parameters()["fc1.weight"],
                          whole->named_parameters()["fc1.weight"]));
}

// --- synthetic-gradient module ---------------------------------------------------

BOOST_AUTO_TEST_CASE(sg_module_starts_at_zero) {
  torch::manual_seed(5);
  auto labels = torch::randint(0, num_classes, {4}, torch::kInt64);
  for (bool conditioned : {false, true}) {
    synthetic_gradient_options o;
    o.conditioned = conditioned;
    o.classes = num_classes;
    for (int64_t layers : {0, 1, 2}) {
      o.layers = layers;
      synthetic_gradient mlp({84}, o, 1);
      auto h = torch::randn({4, 84});
      auto g = mlp.predict(h, labels);
      BOOST_TEST(g.sizes() == h.sizes());
      BOOST_TEST(torch::equal(g, torch::zeros_like(h)));
    }
    o.layers = 2;
    synthetic_gradient flat({6, 14, 14}, o, 1);  // conv_layers 0: an MLP on the flattened h
    auto h = torch::randn({4, 6, 14, 14});
    auto gf = flat.predict(h, labels);
    BOOST_TEST(gf.sizes() == h.sizes());
    BOOST_TEST(torch::equal(gf, torch::zeros_like(h)));
    o.conv_layers = 3;
    synthetic_gradient conv({6, 14, 14}, o, 1);
    auto g = conv.predict(h, labels);
    BOOST_TEST(g.sizes() == h.sizes());
    BOOST_TEST(torch::equal(g, torch::zeros_like(h)));
    o.conv_layers = 0;
    // Nothing else is zero: the module can learn.
    int64_t nonzero = 0;
    for (const auto& p : conv.module().parameters())
      nonzero += p.ne(0).sum().item<int64_t>();
    BOOST_TEST(nonzero > 0);
  }
}

BOOST_AUTO_TEST_CASE(sg_module_learns_a_linear_gradient) {
  torch::manual_seed(21);
  const int64_t d = 32;
  // A fixed linear map, at the scale of real gradients (about 1e-3).
  auto a = torch::randn({d, d}) * (1e-3 / std::sqrt(static_cast<double>(d)));
  synthetic_gradient_options o;
  o.hidden = 128;
  o.layers = 1;
  o.lr = 1e-3;
  o.conditioned = false;
  o.gate_rate = 0;  // the regression alone
  synthetic_gradient sg({d}, o, 2);
  // An MLP with ReLUs represents a linear map well on a bounded region.
  auto sample = [&] { return torch::randn({64, d}); };
  double first = 0;
  double last = 0;
  for (int i = 0; i < 2000; ++i) {
    auto h = sample();
    double loss = sg.train(h, {}, h.matmul(a.t()));
    if (i == 0)
      first = loss;
    last = loss;
  }
  BOOST_TEST_MESSAGE("SG regression loss " << first << " -> " << last);
  BOOST_TEST(last < first / 50);
  auto h = sample();
  auto target = h.matmul(a.t());
  double relative = ((sg.predict(h, {}) - target).norm() / target.norm()).item<double>();
  BOOST_TEST_MESSAGE("relative prediction error " << relative);
  BOOST_TEST(relative < 0.15);

  // The convolutional module learns a per-pixel map (here 0.5 relu(h) per
  // channel, which its three convolutions represent exactly).
  synthetic_gradient_options oc;
  oc.lr = 1e-3;
  oc.conditioned = false;
  oc.gate_rate = 0;
  oc.conv_layers = 3;
  oc.scaling = sg_scaling::none;  // targets of order 1
  synthetic_gradient conv({4, 8, 8}, oc, 3);
  double cfirst = 0;
  double clast = 0;
  for (int i = 0; i < 1000; ++i) {
    auto hc = torch::randn({16, 4, 8, 8});
    double loss = conv.train(hc, {}, 0.5 * torch::relu(hc));
    if (i == 0)
      cfirst = loss;
    clast = loss;
  }
  BOOST_TEST_MESSAGE("conv SG regression loss " << cfirst << " -> " << clast);
  BOOST_TEST(clast < cfirst / 5);
}

BOOST_AUTO_TEST_CASE(sg_module_conditioned_uses_the_label) {
  // cDNI: a target that depends on the label only is learnt; without the
  // label it cannot be.
  torch::manual_seed(8);
  auto table = torch::randn({num_classes, 16});
  auto run = [&](bool conditioned) {
    synthetic_gradient_options o;
    o.conditioned = conditioned;
    o.classes = num_classes;
    o.hidden = 64;
    o.lr = 3e-3;
    o.scaling = sg_scaling::none;  // targets of order 1
    synthetic_gradient sg({16}, o, 4);
    double loss = 0;
    for (int i = 0; i < 600; ++i) {
      auto h = torch::randn({32, 16});
      auto y = torch::randint(0, num_classes, {32}, torch::kInt64);
      loss = sg.train(h, y, table.index_select(0, y));
    }
    return loss;
  };
  const double with = run(true);
  const double without = run(false);
  BOOST_TEST_MESSAGE("label target: cDNI " << with << ", DNI " << without);
  BOOST_TEST(with < without / 10);
  synthetic_gradient_options o;
  o.conditioned = true;
  // cDNI's one-hot label needs the data's class count.
  BOOST_CHECK_EXCEPTION(synthetic_gradient({16}, o, 1), std::invalid_argument,
                        message_with<std::invalid_argument>({"class count"}));
  o.classes = num_classes;
  synthetic_gradient sg({16}, o, 1);
  BOOST_CHECK_EXCEPTION(sg.predict(torch::randn({4, 16}), {}), stage_error,
                        message_with<stage_error>({"cDNI needs labels [4]"}));
  // Of other class counts: a label map of that many columns.
  o.classes = 100;
  synthetic_gradient hundred({16}, o, 1);
  auto y = torch::tensor({0, 57, 99}, torch::kInt64);
  BOOST_TEST(hundred.predict(torch::randn({3, 16}), y).sizes().vec() ==
             (std::vector<int64_t>{3, 16}));
  BOOST_TEST(std::isfinite(hundred.train(torch::randn({3, 16}), y, torch::randn({3, 16}))));
}

// --- backprop split == whole model -------------------------------------------------

BOOST_AUTO_TEST_CASE(backprop_split_matches_the_whole_model) {
  auto [x, y] = random_batch(32, 9);
  for (const auto& [model, cuts] :
       {std::pair{std::string("lenet5"), std::vector<int64_t>{1}},
        std::pair{std::string("lenet5"), std::vector<int64_t>{2}},
        std::pair{std::string("conv8"), std::vector<int64_t>{2, 5}}}) {
    BOOST_TEST_CONTEXT(model << " cut after " << cuts.front()) {
      // The whole model: one stage of all layers, and (for lenet5) the
      // project's own LeNet-5.
      auto whole = model == "lenet5" ? std::static_pointer_cast<classifier>(
                                           make_classifier("lenet5", 17, fashion))
                                     : std::static_pointer_cast<classifier>(
                                           make_stage(model, 0, layer_count(model) - 1, 17,
                                                      fashion));
      auto stages = make_pipeline(model, cuts, 17, options(stage_mode::backprop), fashion);
      BOOST_TEST(pipeline_parameter_names(stages) == parameter_names(*whole));
      BOOST_TEST(all_equal(pipeline_parameters(stages), parameters(*whole)));

      auto logits = whole->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();

      // Same logits from the stages chained.
      {
        torch::Tensor h = x;
        for (auto& s : stages)
          h = s->stage().forward(h);
        BOOST_TEST(max_abs_diff(h, logits) < 1e-5);
      }

      // One training step through the stages: forward up, loss, gradients down.
      torch::Tensor h = x;
      for (size_t k = 0; k + 1 < stages.size(); ++k) {
        auto f = stages[k]->forward(42, h, y);
        BOOST_TEST(!f.input_gradient.defined());  // backprop: nothing down yet
        BOOST_TEST(f.output.is_contiguous());
        BOOST_TEST(!f.output.requires_grad());
        h = f.output;
      }
      auto l = stages.back()->loss_step(42, h, y);
      BOOST_TEST(std::abs(l.loss - loss.item<double>()) < 1e-5);
      BOOST_TEST(l.samples == 32);
      BOOST_TEST(l.correct == logits.argmax(1).eq(y).sum().item<int64_t>());
      auto g = l.input_gradient;
      for (size_t k = stages.size() - 1; k-- > 0;) {
        BOOST_TEST(stages[k]->in_flight() == 1u);
        auto b = stages[k]->backward(42, g);
        BOOST_TEST(!b.synthetic_loss.has_value());
        BOOST_TEST(stages[k]->in_flight() == 0u);
        g = b.input_gradient;
      }
      BOOST_TEST(!g.defined());  // the first stage has no stage below

      // The same parameter gradients as the whole model's.
      auto split_params = pipeline_parameters(stages);
      auto whole_params = parameters(*whole);
      BOOST_REQUIRE_EQUAL(split_params.size(), whole_params.size());
      for (size_t i = 0; i < split_params.size(); ++i) {
        auto scale = std::max(1e-3, whole_params[i].grad().abs().max().item<double>());
        BOOST_TEST(max_abs_diff(split_params[i].grad(), whole_params[i].grad()) / scale < 1e-4,
                   "parameter " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(whole_model_as_one_stage_steps_like_local_trainer_sgd) {
  // The baseline: one stage of all layers trains as torch's SGD would.
  auto [x, y] = random_batch(16, 4);
  auto stages = make_pipeline("lenet5", {}, 3, options(stage_mode::backprop), fashion);
  BOOST_REQUIRE_EQUAL(stages.size(), 1u);
  auto reference = make_classifier("lenet5", 3, fashion);
  torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (int i = 0; i < 3; ++i) {
    auto l = stages[0]->loss_step(static_cast<uint64_t>(i), x, y);
    BOOST_TEST(!l.input_gradient.defined());
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
    sgd.step();
  }
  auto a = stages[0]->parameters();
  auto b = parameters(*reference);
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(max_abs_diff(a[i], b[i]) < 1e-6);
}

BOOST_AUTO_TEST_CASE(a_stage_warms_its_learning_rate_up_over_its_first_steps) {
  // lr_warmup 4: steps 1..4 take a quarter, a half, three quarters and all
  // of lr, then lr; the learning rate a checkpoint keeps stays lr. (One
  // stage steps at once in every mode.) Backprop does not warm up.
  auto [x, y] = random_batch(16, 4);
  auto o = options(stage_mode::backprop);
  o.lr_warmup = 4;
  BOOST_TEST(make_pipeline("lenet5", {}, 3, o, fashion)[0]->step_learning_rate() == 0.01,
             boost::test_tools::tolerance(1e-12));
  o.mode = stage_mode::delayed;
  auto stages = make_pipeline("lenet5", {}, 3, o, fashion);
  auto reference = make_classifier("lenet5", 3, fashion);
  torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (int i = 0; i < 6; ++i) {
    BOOST_TEST(stages[0]->step_learning_rate() == 0.01 * std::min(i + 1, 4) / 4.0,
               boost::test_tools::tolerance(1e-12));
    if (i == 2) {
      // Started again from its checkpoint, a stage goes on with its warm-up.
      auto again = make_pipeline("lenet5", {}, 3, o, fashion);
      again[0]->load(stages[0]->save());
      BOOST_TEST(again[0]->step_learning_rate() == stages[0]->step_learning_rate(),
                 boost::test_tools::tolerance(1e-12));
    }
    stages[0]->loss_step(static_cast<uint64_t>(i), x, y);
    static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options())
      .lr(0.01 * std::min(i + 1, 4) / 4.0);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
    sgd.step();
    BOOST_TEST(stages[0]->learning_rate() == 0.01, boost::test_tools::tolerance(1e-12));
  }
  auto a = stages[0]->parameters();
  auto b = parameters(*reference);
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(max_abs_diff(a[i], b[i]) < 1e-6);
  o.lr_warmup = -1;
  BOOST_CHECK_THROW(make_pipeline("lenet5", {}, 3, o, fashion), std::exception);
}

BOOST_AUTO_TEST_CASE(a_stage_warms_up_by_its_gradients_delay_with_pipemares_rule) {
  // lr_warmup 4 by delay: a gradient d steps late takes lr / d^(1 - s/4) at
  // step s < 4; one on time (d <= 1) takes lr from the first step, so a
  // single stage (the last, never late) trains exactly as torch's SGD at lr.
  auto [x, y] = random_batch(16, 4);
  auto o = options(stage_mode::delayed);
  o.lr_warmup = 4;
  o.lr_warmup_by_delay = true;
  auto stages = make_pipeline("lenet5", {}, 3, o, fashion);
  auto reference = make_classifier("lenet5", 3, fashion);
  torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (int i = 0; i < 6; ++i) {
    const double s = std::min(i, 4) / 4.0;
    BOOST_TEST(stages[0]->step_learning_rate(0) == 0.01, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(stages[0]->step_learning_rate(1) == 0.01, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(stages[0]->step_learning_rate(4) == 0.01 / std::pow(4.0, 1.0 - s),
               boost::test_tools::tolerance(1e-12));
    stages[0]->loss_step(static_cast<uint64_t>(i), x, y);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
    sgd.step();
  }
  BOOST_TEST(stages[0]->step_learning_rate(8) == 0.01, boost::test_tools::tolerance(1e-12));
  auto a = stages[0]->parameters();
  auto b = parameters(*reference);
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(max_abs_diff(a[i], b[i]) < 1e-6);

  // Two stages, three batches in flight: the lower stage's first two
  // updates come 0 and 1 of its steps late (the full rate), its third 2
  // steps late: at step 2 of 4 it takes lr / 2^(1/2). The upper stage is
  // never late. So against the same run without a warm-up, everything is
  // equal up to that update, which is 2^(1/2) times smaller (SGD moves by
  // lr times its momentum buffer, and the buffers are equal).
  const torch::Tensor images = x, labels = y;  // (a lambda takes no structured binding in C++17)
  auto third_update = [&](bool warm) {
    auto w = options(stage_mode::delayed);
    w.max_in_flight = 4;
    w.lr_warmup = warm ? 4 : 0;
    w.lr_warmup_by_delay = true;
    auto two = make_pipeline("lenet5", {2}, 3, w, fashion);
    auto flat = [&] {
      std::vector<torch::Tensor> all;
      for (auto& q : two[0]->parameters())
        all.push_back(q.detach().flatten().clone());
      return torch::cat(all);
    };
    std::vector<torch::Tensor> outputs;
    for (uint64_t b = 0; b < 3; ++b)
      outputs.push_back(two[0]->forward(b, images, labels).output);
    for (uint64_t b = 0; b < 2; ++b)
      two[0]->backward(b, two[1]->loss_step(b, outputs[b], labels).input_gradient);
    auto before = flat();
    two[0]->backward(2, two[1]->loss_step(2, outputs[2], labels).input_gradient);
    BOOST_TEST(two[0]->steps() == 3u);
    return std::make_pair(before, before - flat());
  };
  auto [at_full, full] = third_update(false);
  auto [at_warm, warm] = third_update(true);
  BOOST_TEST(max_abs_diff(at_full, at_warm) < 1e-6);
  BOOST_TEST(full.abs().max().item<double>() > 1e-4);
  BOOST_TEST(max_abs_diff(warm * std::sqrt(2.0), full) < 1e-6);
}

// --- messages refused -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(stage_refuses_bad_messages) {
  for (auto mode : {stage_mode::backprop, stage_mode::synthetic}) {
    BOOST_TEST_CONTEXT(to_string(mode)) {
      stage_options o = options(mode);
      o.max_in_flight = 2;
      auto stages = make_pipeline("lenet5", {0, 2}, 1, o, fashion);  // conv1 | conv2 fc1 | fc2 fc3
      auto& middle = *stages[1];
      auto [x, y] = random_batch(4, 2);
      auto h = stages[0]->forward(1, x, y).output;  // [4, 6, 14, 14]

      // Wrong input shape: the image instead of conv1's output.
      BOOST_CHECK_EXCEPTION(middle.forward(1, x, y), stage_error,
                            message_with<stage_error>({"[4, 1, 28, 28]", "expected [B, 6, 14, 14]",
                                                       "batch 1"}));
      BOOST_CHECK_EXCEPTION(middle.forward(1, h.flatten(1), y), stage_error,
                            message_with<stage_error>({"expected [B, 6, 14, 14]"}));
      BOOST_CHECK_EXCEPTION(stages[2]->loss_step(1, h, y), stage_error,
                            message_with<stage_error>({"expected [B, 120]"}));
      BOOST_CHECK_EXCEPTION(stages[2]->infer(h), stage_error,
                            message_with<stage_error>({"expected [B, 120]"}));
      // Labels that do not fit.
      BOOST_CHECK_EXCEPTION(middle.forward(1, h, y.narrow(0, 0, 3)), stage_error,
                            message_with<stage_error>({"labels of shape [3]", "[4] int64"}));
      BOOST_CHECK_EXCEPTION(middle.forward(1, h, y.to(torch::kInt32)), stage_error,
                            message_with<stage_error>({"labels"}));
      BOOST_CHECK_EXCEPTION(middle.forward(1, h, torch::full({4}, 10, torch::kInt64)), stage_error,
                            message_with<stage_error>({"not in 0..9"}));
      BOOST_CHECK_EXCEPTION(middle.forward(1, h.to(torch::kFloat64), y), stage_error,
                            message_with<stage_error>({"Double", "expected Float"}));
      BOOST_TEST(middle.in_flight() == 0u);

      auto out = middle.forward(1, h, y).output;  // [4, 120]
      BOOST_TEST(out.sizes().vec() == (std::vector<int64_t>{4, 120}));
      // The same batch twice, too many in flight.
      BOOST_CHECK_EXCEPTION(middle.forward(1, h, y), stage_error,
                            message_with<stage_error>({"batch 1 is already in flight"}));
      middle.forward(2, h, y);
      BOOST_CHECK_EXCEPTION(middle.forward(3, h, y), stage_error,
                            message_with<stage_error>({"at most 2"}));
      // Wrong gradient shape, unknown batch.
      BOOST_CHECK_EXCEPTION(middle.backward(1, torch::zeros({4, 84})), stage_error,
                            message_with<stage_error>({"[4, 84]", "expected [4, 120]"}));
      BOOST_CHECK_EXCEPTION(middle.backward(1, torch::zeros({5, 120})), stage_error,
                            message_with<stage_error>({"[5, 120]", "expected [4, 120]"}));
      BOOST_CHECK_EXCEPTION(middle.backward(1, torch::Tensor()), stage_error,
                            message_with<stage_error>({"(none)"}));
      BOOST_CHECK_EXCEPTION(middle.backward(7, torch::zeros({4, 120})), stage_error,
                            message_with<stage_error>({"batch 7 is not in flight"}));
      BOOST_TEST(middle.in_flight() == 2u);  // refused messages change nothing
      middle.backward(1, torch::zeros({4, 120}));
      middle.backward(2, torch::zeros({4, 120}));
      BOOST_TEST(middle.in_flight() == 0u);
      BOOST_CHECK_EXCEPTION(middle.backward(1, torch::zeros({4, 120})), stage_error,
                            message_with<stage_error>({"batch 1 is not in flight"}));
      // The last stage has no forward; the others no loss.
      BOOST_CHECK_THROW(stages[2]->forward(1, out, y), std::logic_error);
      BOOST_CHECK_THROW(middle.loss_step(1, h, y), std::logic_error);
    }
  }
}

// --- synthetic mode ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(synthetic_mode_updates_at_once_and_hands_a_gradient_down) {
  synthetic_gradient_options sg;
  sg.conditioned = true;
  sg.gate_rate = 0;  // predictions as learnt, from the first target on
  stage_options o = options(stage_mode::synthetic);
  o.synthetic = sg;
  auto stages = make_pipeline("lenet5", {0, 2}, 5, o, fashion);
  BOOST_TEST(stages[0]->synthetic() != nullptr);
  // The stages' SG modules are conditioned on the data's classes.
  BOOST_TEST(stages[0]->synthetic()->options().classes == num_classes);
  BOOST_TEST(stages[1]->synthetic()->options().classes == num_classes);
  BOOST_TEST(stages[1]->synthetic() != nullptr);
  BOOST_TEST(stages[2]->synthetic() == nullptr);  // the last stage holds the loss
  auto [x, y] = random_batch(8, 6);

  // At first the synthetic gradient is 0: the step moves nothing (momentum
  // SGD of a zero gradient), the gradient handed down is 0.
  auto before = snapshot(stages[1]->parameters());
  auto h0 = stages[0]->forward(1, x, y);
  BOOST_TEST(!h0.input_gradient.defined());  // the first stage has nothing below
  auto h1 = stages[1]->forward(1, h0.output, y);
  BOOST_REQUIRE(h1.input_gradient.defined());
  BOOST_TEST(h1.input_gradient.sizes() == h0.output.sizes());
  BOOST_TEST(torch::equal(h1.input_gradient, torch::zeros_like(h0.output)));
  BOOST_TEST(all_equal(before, snapshot(stages[1]->parameters())));
  BOOST_TEST(stages[1]->steps() == 1u);

  // The true gradient from the last stage trains stage 1's SG module;
  // stage 1's synthetic-derived input gradient trains stage 0's.
  auto l = stages[2]->loss_step(1, h1.output, y);
  auto b1 = stages[1]->backward(1, l.input_gradient);
  BOOST_REQUIRE(b1.synthetic_loss.has_value());
  BOOST_TEST(*b1.synthetic_loss > 0);
  BOOST_TEST(!b1.input_gradient.defined());  // nothing more goes down
  auto b0 = stages[0]->backward(1, h1.input_gradient);
  BOOST_REQUIRE(b0.synthetic_loss.has_value());
  BOOST_TEST(*b0.synthetic_loss == 0.0);  // target 0, prediction 0
  BOOST_TEST(stages[1]->steps() == 1u);   // the backward pass does not step the stage

  // Now stage 1's SG predicts something: the next batch moves stage 1.
  auto g = stages[1]->synthetic()->predict(h1.output, y);
  BOOST_TEST(g.abs().max().item<double>() > 0);
  auto h1b = stages[1]->forward(2, stages[0]->forward(2, x, y).output, y);
  BOOST_TEST(!all_equal(before, snapshot(stages[1]->parameters())));
  BOOST_TEST(h1b.input_gradient.abs().max().item<double>() > 0);
}

BOOST_AUTO_TEST_CASE(stage_modes_have_names_and_traits) {
  for (auto m : {stage_mode::backprop, stage_mode::synthetic, stage_mode::delayed,
                 stage_mode::corrected, stage_mode::stashed, stage_mode::predicted})
    BOOST_TEST(static_cast<int>(parse_stage_mode(to_string(m))) == static_cast<int>(m));
  BOOST_TEST(to_string(stage_mode::predicted) == "predicted");
  BOOST_TEST(stashes(stage_mode::predicted));
  BOOST_TEST(stashes(stage_mode::stashed));
  BOOST_TEST(!stashes(stage_mode::delayed));
  BOOST_TEST(passes_below(stage_mode::predicted).forward == 1.0);
  BOOST_TEST(pipelined(stage_mode::stashed));
  BOOST_TEST(!has_synthetic_gradient(stage_mode::stashed));
  BOOST_TEST(passes_below(stage_mode::stashed).forward == 1.0);
  BOOST_TEST(passes_below(stage_mode::delayed).forward == 2.0);
  BOOST_CHECK_EXCEPTION(parse_stage_mode("pipedream"), eg::mismatch_error,
                        message_with<eg::mismatch_error>({"pipedream", "delayed", "corrected"}));
  BOOST_TEST(!pipelined(stage_mode::backprop));
  BOOST_TEST(pipelined(stage_mode::delayed));
  BOOST_TEST(has_synthetic_gradient(stage_mode::corrected));
  BOOST_TEST(!has_synthetic_gradient(stage_mode::delayed));
  auto delayed = make_pipeline("lenet5", {1}, 3, options(stage_mode::delayed), fashion);
  BOOST_TEST(delayed[0]->synthetic() == nullptr);
  auto corrected = make_pipeline("lenet5", {1}, 3, options(stage_mode::corrected), fashion);
  BOOST_TEST(corrected[0]->synthetic() != nullptr);
}

BOOST_AUTO_TEST_CASE(corrected_mode_adds_up_to_the_true_gradient) {
  // Momentum 0 and fresh modules (they predict 0 until their first target):
  // the synthetic step moves nothing, the correction is the whole true
  // gradient, so one batch through three corrected stages ends where
  // backpropagation does, and the gradient sent down is the true one.
  synthetic_gradient_options sg;
  sg.gate_rate = 0;
  auto opts = [&](stage_mode m) {
    stage_options o = options(m);
    o.sgd.momentum = 0;
    o.synthetic = sg;
    return o;
  };
  auto corrected = make_pipeline("lenet5", {0, 2}, 5, opts(stage_mode::corrected), fashion);
  auto backprop = make_pipeline("lenet5", {0, 2}, 5, opts(stage_mode::backprop), fashion);
  auto [x, y] = random_batch(8, 6);
  auto c0 = corrected[0]->forward(1, x, y);
  auto c1 = corrected[1]->forward(1, c0.output, y);
  BOOST_TEST(!c1.input_gradient.defined());  // nothing goes down before the true gradient
  BOOST_TEST(corrected[1]->steps() == 1u);   // the synthetic step
  auto b0 = backprop[0]->forward(1, x, y);
  auto b1 = backprop[1]->forward(1, b0.output, y);
  BOOST_TEST(max_abs_diff(c1.output, b1.output) == 0.0);
  auto cl = corrected[2]->loss_step(1, c1.output, y);
  auto bl = backprop[2]->loss_step(1, b1.output, y);
  auto cb1 = corrected[1]->backward(1, cl.input_gradient);
  auto bb1 = backprop[1]->backward(1, bl.input_gradient);
  BOOST_REQUIRE(cb1.synthetic_loss.has_value());
  BOOST_TEST(corrected[1]->steps() == 2u);  // and the correction
  BOOST_REQUIRE(cb1.input_gradient.defined());
  BOOST_TEST(max_abs_diff(cb1.input_gradient, bb1.input_gradient) < 1e-6);
  corrected[0]->backward(1, cb1.input_gradient);
  backprop[0]->backward(1, bb1.input_gradient);
  auto cp = pipeline_parameters(corrected), bp = pipeline_parameters(backprop);
  for (size_t i = 0; i < cp.size(); ++i)
    BOOST_TEST(max_abs_diff(cp[i], bp[i]) < 1e-6, "parameter " << i);

  // Once a module predicts, the synthetic step moves the stage at once and
  // the correction still adds the true gradient: the stage moved between
  // the forward and the backward of the next batch.
  auto before = snapshot(corrected[1]->parameters());
  auto n0 = corrected[0]->forward(2, x, y);
  corrected[1]->forward(2, n0.output, y);
  BOOST_TEST(!all_equal(before, snapshot(corrected[1]->parameters())));
}

BOOST_AUTO_TEST_CASE(stashed_mode_takes_each_gradient_at_the_weights_of_its_forward_pass) {
  // Three LeNet-5 stages, SGD without momentum. Batches 1 and 2 both go up
  // before either gradient comes down, then come down in order: the middle
  // stage steps with batch 1's gradient before batch 2's arrives. With
  // weight stashing, batch 2's gradient (and the input gradient sent down)
  // is the one at the parameters batch 2 was forwarded with, W0: the stage
  // ends at W0 - lr (G1(W0) + G2(W0)). Delayed mode (the batch forwarded
  // again at W1) ends elsewhere.
  auto opts = [](stage_mode m) {
    stage_options o = options(m);
    o.sgd.momentum = 0;
    o.sgd.lr = 0.5;  // large, so that W1 differs visibly from W0
    return o;
  };
  auto [x1, y1] = random_batch(8, 11);
  auto [x2, y2] = random_batch(8, 12);
  auto run = [&](stage_mode m) {
    auto s = make_pipeline("lenet5", {0, 2}, 5, opts(m), fashion);
    auto w0 = snapshot(s[1]->parameters());
    auto a1 = s[0]->forward(1, x1, y1);
    auto b1 = s[1]->forward(1, a1.output, y1);
    auto l1 = s[2]->loss_step(1, b1.output, y1);
    auto a2 = s[0]->forward(2, x2, y2);
    auto b2 = s[1]->forward(2, a2.output, y2);
    auto l2 = s[2]->loss_step(2, b2.output, y2);
    s[1]->backward(1, l1.input_gradient);
    auto down2 = s[1]->backward(2, l2.input_gradient).input_gradient;
    return std::make_tuple(w0, snapshot(s[1]->parameters()), a1.output, a2.output,
                           l1.input_gradient, l2.input_gradient, down2);
  };
  auto [w0, stashed_after, h1, h2, g1, g2, stashed_down2] = run(stage_mode::stashed);
  auto [w0d, delayed_after, dh1, dh2, dg1, dg2, delayed_down2] = run(stage_mode::delayed);
  BOOST_TEST(all_equal(w0, w0d));

  // The reference: a copy of the middle stage at W0, each batch's gradient
  // taken there.
  auto ref = make_stage("lenet5", 1, 2, 5, fashion);
  auto at_w0 = [&](const torch::Tensor& h, const torch::Tensor& g) {
    ref->zero_grad();
    auto in = h.detach().requires_grad_(true);
    ref->forward(in).backward(g);
    std::vector<torch::Tensor> grads;
    for (auto& p : ref->parameters())
      grads.push_back(p.grad().detach().clone());
    return std::make_pair(grads, in.grad().detach().clone());
  };
  auto [G1, d1] = at_w0(h1, g1);
  auto [G2, d2] = at_w0(h2, g2);
  BOOST_TEST(max_abs_diff(stashed_down2, d2) < 1e-6);
  double stashed_off = 0, delayed_off = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    auto expected = w0[i] - 0.5 * (G1[i] + G2[i]);
    stashed_off = std::max(stashed_off, max_abs_diff(stashed_after[i], expected));
    delayed_off = std::max(delayed_off, max_abs_diff(delayed_after[i], expected));
  }
  BOOST_TEST_MESSAGE("off W0 - lr (G1 + G2): stashed " << stashed_off << ", delayed "
                                                       << delayed_off);
  BOOST_TEST(stashed_off < 1e-5);
  BOOST_TEST(delayed_off > 1e-3);  // the test tells the two apart
  BOOST_TEST(max_abs_diff(delayed_down2, d2) > 1e-5);
}

BOOST_AUTO_TEST_CASE(predicted_mode_runs_a_forward_pass_at_the_weights_predicted_for_its_step) {
  // The first of two LeNet-5 stages, SGD with momentum. Batches 1 and 2 go
  // up, batch 1's gradient comes down (one step: W1 = W0 - lr v, v the
  // momentum buffer), then batch 3 goes up with batch 2 still in flight:
  // one step comes before its own, so it runs at W1 - lr v = 2 W1 - W0.
  // Stashed mode runs it at W1. Before any step there is nothing to
  // predict from: batch 2 runs at W0 in both.
  auto [x1, y1] = random_batch(8, 21);
  auto [x2, y2] = random_batch(8, 22);
  auto [x3, y3] = random_batch(8, 23);
  auto run = [&](stage_mode m) {
    stage_options o = options(m);
    o.sgd.momentum = 0.9;
    o.sgd.lr = 0.1;
    auto s = make_pipeline("lenet5", {1}, 7, o, fashion);
    auto w0 = snapshot(s[0]->parameters());
    auto h1 = s[0]->forward(1, x1, y1).output;
    auto h2 = s[0]->forward(2, x2, y2).output;
    torch::manual_seed(5);
    s[0]->backward(1, 0.01 * torch::randn_like(h1));
    auto w1 = snapshot(s[0]->parameters());
    auto h3 = s[0]->forward(3, x3, y3).output;
    return std::make_tuple(w0, w1, h2, h3);
  };
  auto [w0, w1, h2, h3] = run(stage_mode::predicted);
  auto [sw0, sw1, sh2, sh3] = run(stage_mode::stashed);
  BOOST_TEST(all_equal(w0, sw0));
  BOOST_TEST(all_equal(w1, sw1));  // the same step in both modes
  BOOST_TEST(!all_equal(w0, w1));
  BOOST_TEST(max_abs_diff(h2, sh2) < 1e-7);
  auto at = [&](const std::vector<torch::Tensor>& w, const torch::Tensor& x) {
    auto ref = make_stage("lenet5", 0, 1, 7, fashion);
    torch::NoGradGuard no_grad;
    auto p = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i)
      p[i].copy_(w[i]);
    return ref->forward(x);
  };
  std::vector<torch::Tensor> predicted;
  for (size_t i = 0; i < w0.size(); ++i)
    predicted.push_back(2 * w1[i] - w0[i]);
  BOOST_TEST(max_abs_diff(h3, at(predicted, x3)) < 1e-5);
  BOOST_TEST(max_abs_diff(sh3, at(w1, x3)) < 1e-5);
  BOOST_TEST_MESSAGE("predicted against stashed, batch 3: " << max_abs_diff(h3, sh3));
  BOOST_TEST(max_abs_diff(h3, sh3) > 1e-4);  // the test tells the two apart
}

BOOST_AUTO_TEST_CASE(pipelined_split_lenet5_trains_as_well_as_backprop) {
  // LeNet-5 cut after conv2, gradients two batches late (pipelined), against
  // backpropagation with every gradient at once; 3 epochs of 6,000 images.
  torch::set_num_threads(1);
  auto train = load_fashion_mnist(data_dir, eg::learning::split::train, 6000);
  auto test = load_fashion_mnist(data_dir, eg::learning::split::test, 2000);
  test.norm = train.norm;
  std::vector<int64_t> all(static_cast<size_t>(train.size()));
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int64_t>(i);
  auto accuracy_of = [&](stage_mode mode, int64_t delay) {
    stage_options o = options(mode);
    auto stages = make_pipeline("lenet5", {1}, 1, o, fashion);
    std::mt19937_64 rng(1);
    for (int epoch = 0; epoch < 3; ++epoch)
      train_pipeline(stages, train, shuffled_plan(all, 32, 1.0, rng), delay);
    for (auto& s : stages)
      BOOST_TEST(s->in_flight() == 0u);
    return evaluate(stages, test).accuracy;
  };
  const double backprop = accuracy_of(stage_mode::backprop, 1);
  const double delayed = accuracy_of(stage_mode::delayed, 2);
  const double corrected = accuracy_of(stage_mode::corrected, 2);
  const double stashed = accuracy_of(stage_mode::stashed, 2);
  BOOST_TEST_MESSAGE("test accuracy: backprop " << backprop << ", delayed " << delayed
                                                << ", corrected " << corrected << ", stashed "
                                                << stashed);
  BOOST_TEST(stashed > backprop - 0.03, "stashed " << stashed << ", backprop " << backprop);
  BOOST_TEST(backprop > 0.7);
  BOOST_TEST(delayed > backprop - 0.03, "delayed " << delayed << ", backprop " << backprop);
  BOOST_TEST(corrected > backprop - 0.03, "corrected " << corrected << ", backprop " << backprop);
}

BOOST_AUTO_TEST_CASE(synthetic_split_lenet5_trains) {
  // Two stages of LeNet-5 cut after conv2 (a [16, 5, 5] activation: the
  // convolutional SG module), gradients delivered two batches late; a few
  // epochs of 6,000 Fashion-MNIST images.
  torch::set_num_threads(1);
  auto train = load_fashion_mnist(data_dir, eg::learning::split::train, 6000);
  auto test = load_fashion_mnist(data_dir, eg::learning::split::test, 2000);
  test.norm = train.norm;  // the test images normalised as the training images are
  stage_options o = options(stage_mode::synthetic);
  o.sgd.lr = 0.01;
  auto stages = make_pipeline("lenet5", {1}, 1, o, fashion);
  auto lower_before = snapshot(stages[0]->parameters());
  const double chance = evaluate(stages, test).accuracy;
  std::mt19937_64 rng(1);
  std::vector<int64_t> all(static_cast<size_t>(train.size()));
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int64_t>(i);
  pipeline_result r;
  for (int epoch = 0; epoch < 3; ++epoch) {
    r = train_pipeline(stages, train, shuffled_plan(all, 32, 1.0, rng), 2);
    BOOST_TEST_MESSAGE("epoch " << epoch << ": loss " << r.loss << ", train accuracy "
                                << r.accuracy << ", SG loss " << r.synthetic_loss << ", "
                                << r.seconds << " s");
  }
  const double accuracy = evaluate(stages, test).accuracy;
  BOOST_TEST_MESSAGE("test accuracy " << chance << " -> " << accuracy);
  BOOST_TEST(r.synthetic_loss > 0);
  BOOST_TEST(accuracy > 0.5);  // chance: 0.1
  BOOST_TEST(stages[0]->in_flight() == 0u);
  // The lower stage learnt from synthetic gradients alone.
  double moved = 0;
  auto lower_after = stages[0]->parameters();
  for (size_t i = 0; i < lower_after.size(); ++i)
    moved = std::max(moved, max_abs_diff(lower_after[i], lower_before[i]));
  BOOST_TEST_MESSAGE("lower stage moved by up to " << moved);
  BOOST_TEST(moved > 1e-2);
}

BOOST_AUTO_TEST_CASE(pipeline_with_late_gradients_runs_in_both_modes) {
  // Gradients three batches late: in backprop mode a stage recomputes a
  // batch whose graph its own steps made stale.
  torch::manual_seed(3);
  const dataset d = eg::test::random_images(96);
  std::vector<int64_t> all(96);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(2);
  auto plan = shuffled_plan(all, 16, 1.0, rng);
  for (auto mode : {stage_mode::backprop, stage_mode::synthetic, stage_mode::delayed,
                    stage_mode::corrected, stage_mode::stashed, stage_mode::predicted}) {
    auto stages = make_pipeline("conv8", {1, 4}, 2, options(mode), fashion);
    auto before = snapshot(pipeline_parameters(stages));
    auto r = train_pipeline(stages, d, plan, 3);
    BOOST_TEST(r.batches == 6);
    BOOST_TEST(r.samples == 96);
    BOOST_TEST(std::isfinite(r.loss));
    for (auto& s : stages)
      BOOST_TEST(s->in_flight() == 0u);
    BOOST_TEST(!all_equal(before, snapshot(pipeline_parameters(stages))));
  }
  stage_options o = options(stage_mode::synthetic);
  o.max_in_flight = 2;
  auto stages = make_pipeline("lenet5", {1}, 2, o, fashion);
  BOOST_CHECK_THROW(train_pipeline(stages, d, plan, 3), std::invalid_argument);
}

// --- checkpoints --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_and_refusals) {
  synthetic_gradient_options sg;
  sg.conditioned = true;
  stage_options o = options(stage_mode::synthetic);
  o.synthetic = sg;
  auto a = make_pipeline("lenet5", {2}, 1, o, fashion);
  torch::manual_seed(4);
  const dataset d = eg::test::random_images(64);
  std::vector<int64_t> all(64);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(3);
  train_pipeline(a, d, shuffled_plan(all, 16, 1.0, rng), 1);

  auto b = make_pipeline("lenet5", {2}, 99, o, fashion);  // other initial values
  for (size_t k = 0; k < a.size(); ++k) {
    b[k]->load(a[k]->save());
    // The step count comes along (a warm-up goes on where it was).
    BOOST_TEST(a[k]->steps() == 4u);
    BOOST_TEST(b[k]->steps() == a[k]->steps());
  }
  BOOST_TEST(all_equal(snapshot(pipeline_parameters(a)), snapshot(pipeline_parameters(b))));
  BOOST_TEST(all_equal(snapshot(a[0]->synthetic()->module().parameters()),
                       snapshot(b[0]->synthetic()->module().parameters())));
  // Momentum and Adam's moments came along: the next epoch is the same.
  auto plan = shuffled_plan(all, 16, 1.0, rng);
  auto ra = train_pipeline(a, d, plan, 1);
  auto rb = train_pipeline(b, d, plan, 1);
  BOOST_TEST(ra.loss == rb.loss);
  BOOST_TEST(all_equal(snapshot(pipeline_parameters(a)), snapshot(pipeline_parameters(b))));
  BOOST_TEST(all_equal(snapshot(a[0]->synthetic()->module().parameters()),
                       snapshot(b[0]->synthetic()->module().parameters())));

  // Refused, changing nothing: a corrupt blob, a truncated one, another stage's.
  const std::string good = a[0]->save();
  auto kept = snapshot(b[0]->parameters());
  auto kept_sg = snapshot(b[0]->synthetic()->module().parameters());
  std::string corrupt = good;
  for (size_t i = corrupt.size() / 3; i < corrupt.size() / 3 + 64; ++i)
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  BOOST_CHECK_EXCEPTION(b[0]->load(corrupt), stage_error,
                        message_with<stage_error>({"cannot load the stage checkpoint"}));
  BOOST_CHECK_EXCEPTION(b[0]->load(good.substr(0, good.size() / 2)), stage_error,
                        message_with<stage_error>({"cannot load the stage checkpoint"}));
  BOOST_CHECK_EXCEPTION(b[0]->load("not a checkpoint"), stage_error,
                        message_with<stage_error>({"cannot load the stage checkpoint"}));
  BOOST_CHECK_EXCEPTION(b[0]->load(a[1]->save()), stage_error,
                        message_with<stage_error>({"lenet5 layers 3..4", "lenet5 layers 0..2"}));
  auto backprop = make_pipeline("lenet5", {2}, 1, options(stage_mode::backprop), fashion);
  BOOST_CHECK_EXCEPTION(b[0]->load(backprop[0]->save()), stage_error,
                        message_with<stage_error>({"backprop", "synthetic"}));
  auto other = make_pipeline("conv8", {2}, 1, o, fashion);
  BOOST_CHECK_EXCEPTION(b[0]->load(other[0]->save()), stage_error,
                        message_with<stage_error>({"conv8"}));
  BOOST_TEST(all_equal(kept, snapshot(b[0]->parameters())));
  BOOST_TEST(all_equal(kept_sg, snapshot(b[0]->synthetic()->module().parameters())));
}

// --- the first stage's driver ---------------------------------------------------

namespace {

/// Finishes every training order (as the last stage would), returns their ids.
void finish_all(split_driver& d, const std::vector<split_driver::order>& orders, bool and_return) {
  for (auto& o : orders) {
    d.finished(o.id, o.test, o.test ? 0.0 : 2.0 * static_cast<double>(o.rows.size()),
               static_cast<int64_t>(o.rows.size()) / 2, static_cast<int64_t>(o.rows.size()));
    if (and_return && !o.test)
      d.returned(o.id);
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(driver_keeps_its_window_and_waits_for_gradients_in_backprop) {
  split_driver_options o;
  o.batch = 10;
  o.window = 1;
  o.wait_for_gradient = true;
  o.test_batch = 25;
  split_driver d(35, 50, o);
  d.start(1);
  auto first = d.next();
  BOOST_REQUIRE_EQUAL(first.size(), 1u);
  BOOST_TEST(d.next().empty());  // the window is full
  d.finished(first[0].id, false, 1.0, 5, 10);
  BOOST_TEST(d.next().empty());  // finished, but its gradient is not back
  d.returned(first[0].id);
  auto second = d.next();
  BOOST_REQUIRE_EQUAL(second.size(), 1u);
  BOOST_TEST(second[0].id > first[0].id);
  // Every training row exactly once over the epoch (35 rows: 10, 10, 10, 5).
  std::vector<int64_t> rows = first[0].rows;
  for (auto batch = second; !batch.empty() && !batch[0].test; batch = d.next()) {
    rows.insert(rows.end(), batch[0].rows.begin(), batch[0].rows.end());
    finish_all(d, batch, true);
  }
  std::sort(rows.begin(), rows.end());
  std::vector<int64_t> all(35);
  std::iota(all.begin(), all.end(), 0);
  BOOST_TEST(rows == all);
  BOOST_TEST(d.evaluating());
}

BOOST_AUTO_TEST_CASE(driver_marks_the_last_training_batch_before_the_pipeline_drains) {
  split_driver_options o;
  o.batch = 10;
  o.window = 2;
  o.test_batch = 25;
  split_driver d(45, 50, o);  // 5 batches: 10, 10, 10, 10, 5
  d.start(1);
  std::vector<bool> last;
  std::deque<split_driver::order> out, tests;
  auto take = [&] {
    for (auto& b : d.next()) {
      if (b.test) {
        tests.push_back(b);
      } else {
        last.push_back(b.last);
        out.push_back(b);
      }
    }
  };
  take();
  while (!out.empty()) {
    finish_all(d, {out.front()}, true);
    out.pop_front();
    take();
  }
  BOOST_TEST(last == (std::vector<bool>{false, false, false, false, true}),
             boost::test_tools::per_element());
  BOOST_TEST(d.evaluating());
  BOOST_TEST(!tests.empty());
  for (auto& t : tests)
    BOOST_TEST(!t.last);  // test batches never
}

BOOST_AUTO_TEST_CASE(driver_evaluates_after_each_epoch_and_ends) {
  split_driver_options o;
  o.batch = 8;
  o.window = 3;
  o.wait_for_gradient = false;
  o.test_batch = 30;
  split_driver d(20, 70, o);
  d.start(2);
  for (uint32_t epoch = 0; epoch < 2; ++epoch) {
    auto train = d.next();
    BOOST_REQUIRE_EQUAL(train.size(), 3u);  // 8, 8, 4 rows: all fit the window
    BOOST_TEST(!d.take_epoch());
    finish_all(d, train, false);
    BOOST_TEST(d.evaluating());
    auto test = d.next();
    BOOST_REQUIRE_EQUAL(test.size(), 3u);  // 30, 30, 10 test rows
    BOOST_TEST(test[0].test);
    BOOST_TEST(test[2].rows.size() == 10u);
    for (auto& t : test)
      d.finished(t.id, true, 0.0, static_cast<int64_t>(t.rows.size()) - 1,
                 static_cast<int64_t>(t.rows.size()));
    auto e = d.take_epoch();
    BOOST_REQUIRE(e);
    BOOST_TEST(e->epoch == epoch);
    BOOST_TEST(e->train_loss == 2.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(e->train_accuracy == 10.0 / 20.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(e->test_accuracy == 67.0 / 70.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(!d.take_epoch());
  }
  BOOST_TEST(d.over());
  BOOST_TEST(d.next().empty());
}

BOOST_AUTO_TEST_CASE(driver_sends_lost_batches_again_under_new_ids_and_counts_them_once) {
  split_driver_options o;
  o.batch = 10;
  o.window = 2;
  o.wait_for_gradient = true;
  split_driver d(40, 10, o);
  d.start(1);
  auto sent = d.next();
  BOOST_REQUIRE_EQUAL(sent.size(), 2u);
  // Batch 0 finished at the last stage, its gradient lost; batch 1 lost.
  d.finished(sent[0].id, false, 3.0, 4, 10);
  d.pause();
  BOOST_TEST(d.next().empty());
  BOOST_TEST(!d.training());
  d.resume();
  BOOST_TEST(d.first_live_id() > sent[1].id);
  auto again = d.next();
  BOOST_REQUIRE_EQUAL(again.size(), 2u);
  BOOST_TEST(again[0].rows == sent[0].rows);
  BOOST_TEST(again[1].rows == sent[1].rows);
  BOOST_TEST(again[0].id >= d.first_live_id());
  // Reports of the lost ids change nothing.
  d.finished(sent[1].id, false, 100.0, 10, 10);
  d.returned(sent[0].id);
  BOOST_TEST(d.outstanding() == 2u);
  finish_all(d, again, true);
  auto batch = d.next();
  for (; !batch.empty() && !batch[0].test; batch = d.next())
    finish_all(d, batch, true);
  BOOST_REQUIRE(!batch.empty());  // the evaluation
  finish_all(d, batch, false);
  auto e = d.take_epoch();
  BOOST_REQUIRE(e);
  // Batch 0 counted once (3.0 over 10 samples), the others 2.0 per sample.
  BOOST_TEST(e->train_loss == (3.0 + 2.0 * 30) / 40.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(e->train_accuracy == (4.0 + 15.0) / 40.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(driver_restarts_an_epoch_from_its_first_batch_after_a_rollback) {
  split_driver_options o;
  o.batch = 10;
  o.window = 2;
  o.wait_for_gradient = true;
  split_driver d(40, 10, o);
  d.start(2);
  // Epoch 1 trained and evaluated; epoch 2 half trained when it runs away.
  std::optional<split_epoch> first;
  for (int i = 0; i < 100 && !first; ++i) {
    finish_all(d, d.next(), true);
    first = d.take_epoch();
  }
  BOOST_REQUIRE(first);
  auto trained = d.next();
  BOOST_REQUIRE_EQUAL(trained.size(), 2u);
  finish_all(d, trained, true);
  auto lost = d.next();
  d.finished(lost[0].id, false, 50.0, 0, 10);  // reported, its gradient not back
  d.pause();
  d.restart_epoch();
  BOOST_TEST(d.paused());
  BOOST_TEST(d.next().empty());
  BOOST_TEST(d.first_live_id() > lost.back().id);
  d.resume();
  auto again = d.next();
  BOOST_REQUIRE_EQUAL(again.size(), 2u);
  BOOST_TEST(again[0].rows == trained[0].rows);  // the same shuffle, from its start
  BOOST_TEST(again[1].rows == trained[1].rows);
  BOOST_TEST(again[0].id >= d.first_live_id());
  d.returned(lost[0].id);  // from before the rollback: ignored
  BOOST_TEST(d.outstanding() == 2u);
  finish_all(d, again, true);
  for (auto batch = d.next(); !batch.empty(); batch = d.next())
    finish_all(d, batch, true);
  auto e = d.take_epoch();
  BOOST_REQUIRE(e);
  BOOST_TEST(e->epoch == 1u);
  // Only the epoch as trained again counts: 2.0 per sample, half right.
  BOOST_TEST(e->train_loss == 2.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(e->train_accuracy == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(d.over());
}

BOOST_AUTO_TEST_CASE(driver_epoch_plans_depend_on_seed_and_epoch_only) {
  split_driver_options o;
  o.batch = 100;
  o.window = 1;
  o.wait_for_gradient = false;
  o.seed = 7;
  auto first_rows = [&](uint32_t epoch, uint64_t first_id) {
    split_driver d(1000, 10, o);
    d.start(epoch + 1, epoch, first_id);
    return d.next().at(0).rows;
  };
  BOOST_TEST(first_rows(0, 0) == first_rows(0, 12345));  // a restart sees the same batches
  BOOST_TEST(first_rows(0, 0) != first_rows(1, 0));
  BOOST_CHECK_THROW(split_driver(0, 10, o), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(stage_forgets_batches_the_pipeline_lost) {
  stage_options o;
  o.mode = stage_mode::backprop;
  auto stages = make_pipeline("lenet5", {1}, 3, o, fashion);
  auto x = torch::randn({4, 1, 28, 28});
  auto y = torch::tensor({1, 2, 3, 4}, torch::kLong);
  stages[0]->forward(5, x, y);
  stages[0]->forward(6, x, y);
  stages[0]->forward(9, x, y);
  BOOST_TEST(stages[0]->forget_before(7) == 2u);
  BOOST_TEST(stages[0]->in_flight() == 1u);
  auto shape = activation_shape("lenet5", 1, fashion);
  shape.insert(shape.begin(), 4);
  BOOST_CHECK_THROW(stages[0]->backward(5, torch::zeros(shape)), stage_error);
  stages[0]->backward(9, torch::zeros(shape));  // a batch still in flight
  stages[0]->forward(5, x, y);  // the id may come again: nothing of it is held
  BOOST_TEST(stages[0]->in_flight() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

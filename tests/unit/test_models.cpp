// links: eg_learning
// The model zoo, models scripted in Python, the TorchScript export (read
// back in C++, and in Python where its torch is installed), and the LeNet-5
// kernels' fall-back for other models' shapes.
#include "data/shape.hpp"
#include "models/conv.hpp"
#include "models/dataset.hpp"
#include "models/export.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "models/pooling.hpp"
#include "models/serialize.hpp"
#include "train/trainer.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

using eg::test::iota;

namespace fs = std::filesystem;
using namespace eg::learning;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

using temp_dir = eg::test::scratch_dir;
using eg::test::all_equal;

const std::vector<std::string> zoo{"lenet5", "logreg",     "mlp",         "alexnet",
                                   "conv8",  "squeezenet", "mobilenetv2", "vgg11"};

/// Fashion-MNIST's model shape.
const model_shape fashion = fashion_mnist_shape();

/// The first `n` test images and labels (bytes; batches normalised by
/// their own statistics, as training sees its data).
std::shared_ptr<const dataset> test_images(int64_t n) {
  static std::map<int64_t, std::shared_ptr<const dataset>> cache;
  auto& d = cache[n];
  if (!d)
    d = std::make_shared<const dataset>(load_fashion_mnist(data_dir, split::test, n));
  return d;
}

/// The images as bytes [N, 28, 28], as torchvision's FashionMNIST holds them.
torch::Tensor as_bytes(const dataset& d) { return d.samples.squeeze(1); }

/// Mean cross-entropy of `m` on `d` in eval mode.
double loss_on(classifier& m, const dataset& d) { return evaluate(m, d).loss; }

/// A Python with torch ("python3", else Debian's /usr/bin/python3); empty
/// where there is none.
std::string python_with_torch() {
  for (const std::string py : {"python3", "/usr/bin/python3"})
    if (std::system((py + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0)
      return py;
  return {};
}

/// Runs `script` with `python`; returns its standard output.
std::string run_python(const std::string& python, const std::string& script,
                       const temp_dir& dir) {
  const auto file = dir.file("check.py");
  std::ofstream(file) << script;
  const auto out = dir.file("check.out");
  const int rc = std::system((python + " " + file + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  BOOST_TEST_MESSAGE("python: " << text.str());
  BOOST_REQUIRE_MESSAGE(rc == 0, "python failed: " + text.str());
  return text.str();
}

/// A TorchScript classifier built in C++: fc1 (784 -> 32), ReLU, fc2
/// (32 -> `outputs`), saved to `path`.
void write_mlp(const std::string& path, int64_t outputs, bool with_buffer = false) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module root(c10::QualifiedName("__torch__.mlp"), cu, true);
  root.register_attribute("training", c10::BoolType::get(), true);
  torch::manual_seed(3);
  for (auto [name, in, out] : {std::tuple<const char*, int64_t, int64_t>{"fc1", 784, 32},
                               std::tuple<const char*, int64_t, int64_t>{"fc2", 32, outputs}}) {
    torch::jit::Module layer(c10::QualifiedName(std::string("__torch__.mlp.") + name), cu, true);
    layer.register_attribute("training", c10::BoolType::get(), true);
    layer.register_parameter("weight", torch::randn({out, in}) * 0.05, false);
    layer.register_parameter("bias", torch::zeros({out}), false);
    root.register_module(name, layer);
  }
  if (with_buffer)
    root.register_buffer("running_mean", torch::zeros({32}));
  root.define(R"(
def forward(self, x):
    h = torch.relu(torch.linear(x.flatten(1), self.fc1.weight, self.fc1.bias))
    return torch.linear(h, self.fc2.weight, self.fc2.bias)
)");
  root.save(path);
}

/// make_classifier's error message for `name` (empty: it did not throw).
std::string refusal(const std::string& name, const model_shape& shape = fashion) {
  try {
    make_classifier(name, 1, shape);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(models)

BOOST_AUTO_TEST_CASE(zoo_models_map_images_to_class_scores) {
  torch::set_num_threads(1);
  // The counts README and docs/MODELS.md give.
  const std::map<std::string, int64_t> counts{{"lenet5", 61706},
                                              {"logreg", 7850},
                                              {"mlp", 109386},
                                              {"alexnet", 896874},
                                              {"conv8", 54690},
                                              {"squeezenet", 185258},
                                              {"mobilenetv2", 590122},
                                              {"vgg11", 644042}};
  // Every model of the zoo is registered (and, through config's registry,
  // may be named in a cluster file).
  auto sorted = zoo;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(zoo_models() == sorted);
  BOOST_TEST(eg::config::models().names() == sorted);
  for (const auto& name : zoo) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 1, fashion);
      BOOST_TEST(m->model_name() == name);
      BOOST_TEST((m->shape() == fashion));
      BOOST_TEST_MESSAGE(name << ": " << parameter_count(*m) << " parameters");
      BOOST_TEST(parameter_count(*m) == counts.at(name));
      BOOST_TEST(m->forward(torch::randn({3, 1, 28, 28})).sizes().vec() ==
                 (std::vector<int64_t>{3, 10}));
      evaluation_scope scope(*m);
      BOOST_TEST(m->forward(torch::randn({1, 1, 28, 28})).sizes().vec() ==
                 (std::vector<int64_t>{1, 10}));
      // No buffers (gossip averages parameters only), and the output layer
      // last with a row per class (the evaluator's average by class).
      BOOST_TEST(m->buffers().empty());
      auto params = parameters(*m);
      BOOST_TEST(params.back().size(0) == 10);
      BOOST_TEST(params[params.size() - 2].size(0) == 10);
    }
  }
  BOOST_TEST(contains(refusal("resnet"), "unknown model 'resnet'"));
}

BOOST_AUTO_TEST_CASE(zoo_models_take_the_datas_shape_and_classes) {
  torch::set_num_threads(1);
  // Colour images of 32 x 32 and 100 classes (CIFAR-100): every zoo model.
  const model_shape cifar100{eg::data::sample_shape::image(3, 32, 32), 100};
  for (const auto& name : zoo) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 1, cifar100);
      BOOST_TEST((m->shape() == cifar100));
      BOOST_TEST(m->forward(torch::randn({2, 3, 32, 32})).sizes().vec() ==
                 (std::vector<int64_t>{2, 100}));
      {
        evaluation_scope scope(*m);
        BOOST_TEST(m->forward(torch::randn({1, 3, 32, 32})).sizes().vec() ==
                   (std::vector<int64_t>{1, 100}));
      }
      // The output layer last, a row per class; no buffers.
      auto params = parameters(*m);
      BOOST_TEST(params.back().size(0) == 100);
      BOOST_TEST(params[params.size() - 2].size(0) == 100);
      BOOST_TEST(m->buffers().empty());
      // More parameters than for Fashion-MNIST (3 channels, 100 classes).
      BOOST_TEST(parameter_count(*m) > parameter_count(*make_classifier(name, 1, fashion)));
      // Equal seeds, equal models, whatever the shape.
      BOOST_TEST(all_equal(parameters(*m), parameters(*make_classifier(name, 1, cifar100))));
      // A batch of another shape is not what it was built for.
      BOOST_CHECK_THROW(m->forward(torch::randn({2, 1, 28, 28})), std::exception);
    }
  }

  // Flat features (13 of them, 3 classes): the MLP and logistic regression.
  const model_shape wine{eg::data::sample_shape::features(13), 3};
  for (const std::string name : {"mlp", "logreg"}) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 1, wine);
      BOOST_TEST((m->shape() == wine));
      BOOST_TEST(m->forward(torch::randn({5, 13})).sizes().vec() == (std::vector<int64_t>{5, 3}));
    }
  }
  BOOST_TEST(parameter_count(*make_classifier("logreg", 1, wine)) == 13 * 3 + 3);
  BOOST_TEST(parameter_count(*make_classifier("mlp", 1, wine)) ==
             13 * 128 + 128 + 128 * 64 + 64 + 64 * 3 + 3);
  // The image models refuse features, naming the model, the data and what to use.
  for (const std::string name : {"lenet5", "alexnet", "conv8", "squeezenet", "mobilenetv2"}) {
    BOOST_TEST_CONTEXT(name) {
      const auto why = refusal(name, wine);
      BOOST_TEST_MESSAGE(why);
      BOOST_TEST(contains(why, "'" + name + "'"));
      BOOST_TEST(contains(why, "13 features"));
      BOOST_TEST(contains(why, "mlp or logreg"));
    }
  }
  // Images too small for a model's poolings are refused, naming both.
  const auto small = refusal("lenet5", {eg::data::sample_shape::image(1, 8, 8), 10});
  BOOST_TEST_MESSAGE(small);
  BOOST_TEST(contains(small, "'lenet5'"));
  BOOST_TEST(contains(small, "1x8x8"));
  BOOST_TEST(contains(refusal("alexnet", {eg::data::sample_shape::image(3, 12, 12), 10}),
                      "3x12x12"));
  BOOST_TEST(refusal("lenet5", {eg::data::sample_shape::image(1, 12, 12), 10}).empty());
  BOOST_TEST(refusal("alexnet", {eg::data::sample_shape::image(1, 16, 16), 10}).empty());
  // Small images that are taken work: 12 x 12 through LeNet-5's poolings.
  BOOST_TEST(make_classifier("lenet5", 1, {eg::data::sample_shape::image(1, 12, 12), 4})
                 ->forward(torch::randn({2, 1, 12, 12}))
                 .sizes()
                 .vec() == (std::vector<int64_t>{2, 4}));
  // Fewer than two classes.
  BOOST_TEST(contains(refusal("logreg", {eg::data::sample_shape::features(13), 1}), "at least 2"));
}

BOOST_AUTO_TEST_CASE(equal_seeds_give_equal_zoo_models_and_training) {
  torch::set_num_threads(1);
  auto data = test_images(64);
  for (const std::string name : {"alexnet", "squeezenet", "mobilenetv2"}) {
    BOOST_TEST_CONTEXT(name) {
      auto a = make_classifier(name, 42, fashion), b = make_classifier(name, 42, fashion);
      auto c = make_classifier(name, 43, fashion);
      BOOST_TEST(all_equal(parameters(*a), parameters(*b)));
      BOOST_TEST(!all_equal(parameters(*a), parameters(*c)));
      // Dropout draws from the model's own generator: the same steps give
      // the same weights even when other models draw in between.
      local_trainer ta(a, data, iota(64), {0.01, 0.9, 32});
      local_trainer tb(b, data, iota(64), {0.01, 0.9, 32});
      epoch_plan plan{{iota(32), iota(32)}};
      ta.begin_epoch(plan);
      tb.begin_epoch(plan);
      ta.step();
      torch::rand({1000});  // the global generator moves on
      make_classifier("alexnet", 7, fashion);
      tb.step();
      ta.step();
      tb.step();
      BOOST_TEST(all_equal(parameters(*a), parameters(*b)));
      BOOST_TEST(!all_equal(parameters(*a), parameters(*make_classifier(name, 42, fashion))));
    }
  }
}

BOOST_AUTO_TEST_CASE(zoo_models_lower_the_loss_on_a_small_batch) {
  torch::set_num_threads(1);
  auto data = test_images(64);
  for (const std::string name : {"alexnet", "squeezenet", "mobilenetv2"}) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 1, fashion);
      const double before = loss_on(*m, *data);
      local_trainer t(m, data, iota(64), {0.01, 0.9, 64});
      for (int k = 0; k < 15; ++k) {
        t.begin_epoch(epoch_plan{{iota(64)}});
        t.step();
      }
      const double after = loss_on(*m, *data);
      BOOST_TEST_MESSAGE(name << ": loss on the batch " << before << " -> " << after);
      BOOST_TEST(after < 0.8 * before);
    }
  }
}

BOOST_AUTO_TEST_CASE(lenet_kernels_fall_back_for_other_shapes) {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;  // where the convolution kernels would run
  // AlexNet's 3 x 3 convolutions and MobileNetV2's strided and depthwise
  // ones: torch's own results, to the bit.
  for (auto options : {torch::nn::Conv2dOptions(32, 96, 3).padding(1),
                       torch::nn::Conv2dOptions(1, 32, 3).stride(2).padding(1),
                       torch::nn::Conv2dOptions(1, 6, 5).stride(2).padding(2),
                       torch::nn::Conv2dOptions(48, 48, 3).padding(1).groups(48)}) {
    torch::nn::Conv2d conv(options);
    auto x = torch::randn({4, options.in_channels(), 14, 14});
    auto want = torch::relu(conv->forward(x));
    BOOST_TEST(torch::equal(conv2d_relu(conv, x), want));
    for (int width : conv_vector_widths())
      BOOST_TEST(torch::equal(conv2d_relu(conv, x, width), want));
  }
  // Pooling of odd planes (AlexNet's 7 x 7 and 3 x 3, SqueezeNet's 7 x 7).
  for (auto x : {torch::randn({4, 96, 7, 7}), torch::randn({4, 128, 3, 3})})
    BOOST_TEST(torch::equal(max_pool_2x2(x), torch::max_pool2d(x, 2)));
  // LeNet-5's own shapes still take the kernels where this processor has
  // them, with torch's values up to rounding.
  torch::nn::Conv2d lenet_conv(torch::nn::Conv2dOptions(6, 16, 5));
  auto x = torch::randn({8, 6, 14, 14});
  BOOST_TEST(torch::allclose(conv2d_relu(lenet_conv, x), torch::relu(lenet_conv->forward(x)),
                             1e-5, 1e-5));
}

BOOST_AUTO_TEST_CASE(exported_models_give_the_models_scores) {
  torch::set_num_threads(1);
  temp_dir dir;
  auto data = test_images(16);
  const auto bytes = as_bytes(*data);
  BOOST_REQUIRE(bytes.scalar_type() == torch::kUInt8);
  for (const auto& name : zoo) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 3, fashion);
      // A few steps first, so the export carries trained weights.
      local_trainer t(m, data, iota(16), {0.01, 0.9, 16});
      t.begin_epoch(epoch_plan{{iota(16)}});
      t.step();
      const auto file = dir.file(name + ".pt");
      write_torchscript(*m, data->norm, data->classes, file);
      BOOST_TEST(m->is_training());  // the export leaves the model's mode alone
      auto loaded = torch::jit::load(file);
      torch::Tensor want;
      {
        evaluation_scope scope(*m);
        want = m->forward(data->all());
      }
      auto from_bytes = loaded.forward({bytes}).toTensor();
      auto from_floats =
        loaded.forward({bytes.unsqueeze(1).to(torch::kFloat32).div(255)}).toTensor();
      BOOST_TEST(torch::allclose(from_bytes, want, 1e-4, 1e-4));
      BOOST_TEST(torch::equal(from_bytes, from_floats));
      // Same parameter names as the state dict.
      std::vector<std::string> names;
      for (const auto& p : loaded.named_parameters())
        names.push_back(p.name);
      BOOST_TEST(names == parameter_names(*m));
      BOOST_CHECK_THROW(loaded.forward({torch::zeros({2, 3, 28, 28})}), std::exception);
      // The class names and the input shape it carries.
      std::vector<std::string> classes;
      for (const auto& c : loaded.attr("classes").toListRef())
        classes.push_back(c.toStringRef());
      BOOST_TEST(classes == data->classes);
      BOOST_TEST(classes.at(9) == "Ankle boot");
      BOOST_TEST(loaded.attr("input_shape").toIntVector() == (std::vector<int64_t>{1, 28, 28}));
    }
  }
  const auto classes = eg::test::numbered_classes(10);
  BOOST_CHECK_EXCEPTION(write_torchscript(*make_classifier("logreg", 1, fashion),
                                          {{0.2860}, {0.3530}}, classes, "/nonexistent/dir/m.pt"),
                        std::runtime_error, [](const std::runtime_error& e) {
                          return contains(e.what(), "/nonexistent/dir/m.pt");
                        });
  // Class names that are not one per output, or a normalisation of other
  // channels, are refused.
  auto logreg = make_classifier("logreg", 1, fashion);
  BOOST_CHECK_THROW(export_module(*logreg, {}, eg::test::numbered_classes(9)),
                    std::invalid_argument);
  BOOST_CHECK_THROW(export_module(*logreg, {{0.5, 0.5, 0.5}, {0.2, 0.2, 0.2}}, classes),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(exported_models_take_the_datas_shape_and_normalisation) {
  torch::set_num_threads(1);
  temp_dir dir;
  // Colour images of 20 x 20, 4 classes, normalised per channel.
  torch::manual_seed(9);
  dataset d;
  d.shape = eg::data::sample_shape::image(3, 20, 20);
  d.classes = {"cat", "dog", "fox", "owl"};
  d.samples = torch::cat({torch::randint(0, 128, {6, 1, 20, 20}, torch::kUInt8),
                          torch::randint(0, 256, {6, 2, 20, 20}, torch::kUInt8)},
                         1);  // the first channel darker
  d.labels = torch::tensor({0, 1, 2, 3, 0, 1}, torch::kInt64);
  d.norm = d.local_moments().finish();
  BOOST_REQUIRE_EQUAL(d.norm.mean.size(), 3u);
  BOOST_TEST(d.norm.mean[0] < 0.8 * d.norm.mean[1]);
  for (const std::string name : {"lenet5", "mlp"}) {
    BOOST_TEST_CONTEXT(name) {
      auto m = make_classifier(name, 2, shape_of(d));
      const auto file = dir.file(name + "-rgb.pt");
      write_torchscript(*m, d.norm, d.classes, file);
      auto loaded = torch::jit::load(file);
      torch::Tensor want;
      {
        evaluation_scope scope(*m);
        want = m->forward(d.all());
      }
      BOOST_TEST(want.sizes().vec() == (std::vector<int64_t>{6, 4}));
      auto from_bytes = loaded.forward({d.samples}).toTensor();
      BOOST_TEST(torch::allclose(from_bytes, want, 1e-4, 1e-4));
      BOOST_TEST(torch::equal(from_bytes,
                              loaded.forward({d.samples.to(torch::kFloat32).div(255)}).toTensor()));
      std::vector<std::string> classes;
      for (const auto& c : loaded.attr("classes").toListRef())
        classes.push_back(c.toStringRef());
      BOOST_TEST(classes == d.classes);
      BOOST_TEST(loaded.attr("input_shape").toIntVector() == (std::vector<int64_t>{3, 20, 20}));
      // Grey images are not colour images.
      BOOST_CHECK_THROW(loaded.forward({torch::zeros({2, 20, 20}, torch::kUInt8)}), std::exception);
    }
  }
  // Features: floats as they are, normalised per feature; no normalisation
  // when none was given.
  auto f = eg::test::random_features(8, 5, 3);
  f.samples = f.samples.mul(3).add(1);
  f.norm = f.local_moments().finish();
  auto m = make_classifier("mlp", 4, shape_of(f));
  auto exported = export_module(*m, f.norm, f.classes);
  torch::Tensor want;
  {
    evaluation_scope scope(*m);
    want = m->forward(f.all());
  }
  BOOST_TEST(torch::allclose(exported.forward({f.samples}).toTensor(), want, 1e-4, 1e-4));
  BOOST_TEST(exported.attr("input_shape").toIntVector() == (std::vector<int64_t>{5}));
  BOOST_CHECK_THROW(exported.forward({torch::zeros({2, 6})}), std::exception);
  auto raw = export_module(*m, {}, f.classes);
  {
    evaluation_scope scope(*m);
    want = m->forward(f.samples);
  }
  BOOST_TEST(torch::allclose(raw.forward({f.samples}).toTensor(), want, 1e-5, 1e-5));
}

BOOST_AUTO_TEST_CASE(torchscript_models_train_and_export) {
  torch::set_num_threads(1);
  temp_dir dir;
  const auto file = dir.file("mlp.pt");
  write_mlp(file, 10);
  auto m = make_classifier("torchscript:" + file, 1, fashion);
  BOOST_TEST(m->model_name() == "torchscript:" + file);
  BOOST_TEST(parameter_names(*m) ==
             (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  BOOST_TEST(parameter_count(*m) == 784 * 32 + 32 + 32 * 10 + 10);
  // Every platform starts from the file's weights, whatever its seed.
  BOOST_TEST(
    all_equal(parameters(*m), parameters(*make_classifier("torchscript:" + file, 2, fashion))));

  auto data = test_images(64);
  const double before = loss_on(*m, *data);
  local_trainer t(m, data, iota(64), {0.05, 0.9, 64});
  for (int k = 0; k < 10; ++k) {
    t.begin_epoch(epoch_plan{{iota(64)}});
    t.step();
  }
  const double after = loss_on(*m, *data);
  BOOST_TEST_MESSAGE("scripted MLP: loss " << before << " -> " << after);
  BOOST_TEST(after < 0.7 * before);

  // The checkpoint, state dict and export carry the trained weights.
  auto again = make_classifier("torchscript:" + file, 1, fashion);
  load_model(*again, save_model(*m));
  BOOST_TEST(all_equal(parameters(*again), parameters(*m)));
  write_torchscript(*m, data->norm, data->classes, dir.file("export.pt"));
  auto exported = torch::jit::load(dir.file("export.pt"));
  torch::Tensor want;
  {
    evaluation_scope scope(*m);
    want = m->forward(data->all());
  }
  BOOST_TEST(torch::allclose(exported.forward({as_bytes(*data)}).toTensor(), want, 1e-5, 1e-5));
  BOOST_TEST(exported.attr("classes").toListRef().size() == 10u);
}

BOOST_AUTO_TEST_CASE(torchscript_models_that_are_no_classifiers_are_refused) {
  temp_dir dir;
  write_mlp(dir.file("five.pt"), 5);
  auto five = refusal("torchscript:" + dir.file("five.pt"));
  BOOST_TEST_MESSAGE(five);
  BOOST_TEST(contains(five, dir.file("five.pt")));
  BOOST_TEST(contains(five, "[2, 5]"));
  BOOST_TEST(contains(five, "not to class scores [2, 10]"));
  // It is a classifier of 5 classes.
  BOOST_TEST(refusal("torchscript:" + dir.file("five.pt"),
                     {eg::data::sample_shape::image(1, 28, 28), 5})
                 .empty());

  write_mlp(dir.file("buffer.pt"), 10, /*with_buffer=*/true);
  BOOST_TEST(contains(refusal("torchscript:" + dir.file("buffer.pt")), "buffers (running_mean)"));

  auto missing = refusal("torchscript:" + dir.file("missing.pt"));
  BOOST_TEST(contains(missing, dir.file("missing.pt")));
  BOOST_TEST(contains(missing, "cannot load it"));
  std::ofstream(dir.file("text.pt")) << "not a model";
  BOOST_TEST(contains(refusal("torchscript:" + dir.file("text.pt")), "cannot load it"));
  BOOST_TEST(contains(refusal("torchscript:"), "no file"));

  // A forward that needs another input (colour images), and one that
  // returns a tuple.
  for (const auto& [name, inputs, body, expect] :
       {std::tuple<std::string, int64_t, std::string, std::string>{
          "rgb", 3 * 28 * 28, "    return torch.linear(x.flatten(1), self.w, None)\n",
          "its forward fails on a batch of samples [2, 1, 28, 28]"},
        std::tuple<std::string, int64_t, std::string, std::string>{
          "tuple", 28 * 28, "    y = torch.linear(x.flatten(1), self.w, None)\n    return y, y\n",
          "its forward returns Tuple"}}) {
    torch::jit::Module m(c10::QualifiedName("__torch__." + name));
    m.register_attribute("training", c10::BoolType::get(), true);
    m.register_parameter("w", torch::zeros({10, inputs}), false);
    m.define("def forward(self, x):\n" + body);
    m.save(dir.file(name + ".pt"));
    auto why = refusal("torchscript:" + dir.file(name + ".pt"));
    BOOST_TEST_MESSAGE(why);
    BOOST_TEST(contains(why, expect));
  }
  // The colour model takes colour images.
  BOOST_TEST(refusal("torchscript:" + dir.file("rgb.pt"),
                     {eg::data::sample_shape::image(3, 28, 28), 10})
                 .empty());
}

BOOST_AUTO_TEST_CASE(python_reads_the_export_with_the_accuracy_cpp_computes) {
  const auto python = python_with_torch();
  if (python.empty()) {
    BOOST_TEST_MESSAGE("skipped: no python3 with torch (Debian's python3-torch; setup.sh "
                       "installs it)");
    return;
  }
  torch::set_num_threads(1);
  temp_dir dir;
  // LeNet-5 trained on 2,000 images, then its accuracy on 1,000 test images
  // as the run reports it (evaluate(), the test images normalised as the
  // training images were).
  auto train = std::make_shared<const dataset>(load_fashion_mnist(data_dir, split::train, 2000));
  auto test = std::make_shared<dataset>(*test_images(1000));
  test->norm = train->norm;
  auto m = make_classifier("lenet5", 1, shape_of(*train));
  local_trainer t(m, train, iota(train->size()), {0.05, 0.9, 64});
  std::mt19937_64 rng(1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    t.begin_epoch(shuffled_plan(t.shard(), 64, 1, rng));
    while (!t.epoch_done())
      t.step();
  }
  const auto e = evaluate(*m, *test);
  write_torchscript(*m, train->norm, train->classes, dir.file("model_scripted.pt"));
  // The test images as torchvision holds them (bytes), and their labels.
  c10::Dict<std::string, torch::Tensor> images;
  images.insert("images", as_bytes(*test));
  images.insert("labels", test->labels);
  const auto pickled = torch::pickle_save(images);
  std::ofstream(dir.file("test.pt"), std::ios::binary)
    .write(pickled.data(), static_cast<std::streamsize>(pickled.size()));

  // README's three lines, then the accuracy.
  const auto out = run_python(python,
                              "import torch\n"
                              "model = torch.jit.load('" + dir.file("model_scripted.pt") + "')\n"
                              "test = torch.load('" + dir.file("test.pt") + "')\n"
                              "scores = model(test['images'])\n"
                              "correct = (scores.argmax(1) == test['labels']).sum().item()\n"
                              "print('correct', correct)\n"
                              "print('first', model.classes[int(scores[0].argmax())])\n"
                              "print('classes', '|'.join(model.classes))\n"
                              "print('shape', list(model.input_shape))\n",
                              dir);
  int correct = -1;
  std::sscanf(out.substr(out.find("correct")).c_str(), "correct %d", &correct);
  BOOST_TEST_MESSAGE("C++ accuracy " << e.accuracy << ", Python " << correct / 1000.0);
  BOOST_TEST(e.accuracy > 0.5);
  BOOST_TEST(correct == static_cast<int>(std::lround(e.accuracy * 1000)));
  BOOST_TEST(e.correct == correct);
  // The class names and the input shape, as README reads them.
  BOOST_TEST(contains(out, "classes T-shirt/top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|"
                           "Bag|Ankle boot\n"));
  BOOST_TEST(contains(out, "shape [1, 28, 28]\n"));
  torch::Tensor first;
  {
    evaluation_scope scope(*m);
    first = m->forward(test->range(0, 1));
  }
  BOOST_TEST(contains(out, "first " + train->classes.at(first.argmax(1).item<int64_t>()) + "\n"));
}

BOOST_AUTO_TEST_CASE(a_model_scripted_in_python_trains) {
  const auto python = python_with_torch();
  if (python.empty()) {
    BOOST_TEST_MESSAGE("skipped: no python3 with torch");
    return;
  }
  torch::set_num_threads(1);
  temp_dir dir;
  // A small CNN with GroupNorm in nn.Sequential (names "net.0.weight", ...).
  run_python(python,
             "import torch\n"
             "from torch import nn\n"
             "torch.manual_seed(0)\n"
             "class Net(nn.Module):\n"
             "    def __init__(self):\n"
             "        super().__init__()\n"
             "        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(2, 8),\n"
             "                                 nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),\n"
             "                                 nn.Linear(8 * 14 * 14, 10))\n"
             "    def forward(self, x):\n"
             "        return self.net(x)\n"
             "torch.jit.script(Net()).save('" + dir.file("net.pt") + "')\n",
             dir);
  auto m = make_classifier("torchscript:" + dir.file("net.pt"), 1, fashion);
  BOOST_TEST(parameter_names(*m).front() == "net.0.weight");
  auto data = test_images(64);
  const double before = loss_on(*m, *data);
  local_trainer t(m, data, iota(64), {0.01, 0.9, 64});
  for (int k = 0; k < 10; ++k) {
    t.begin_epoch(epoch_plan{{iota(64)}});
    t.step();
  }
  const double after = loss_on(*m, *data);
  BOOST_TEST_MESSAGE("Python-scripted CNN: loss " << before << " -> " << after);
  BOOST_TEST(after < 0.7 * before);
}

BOOST_AUTO_TEST_CASE(devices) {
  BOOST_TEST(training_device("cpu").is_cpu());
  BOOST_CHECK_THROW(training_device("tpu"), std::invalid_argument);
  BOOST_CHECK_THROW(training_device("cpu:1"), std::invalid_argument);
  if (!torch::cuda::is_available()) {
    try {
      training_device("cuda");
      BOOST_ERROR("cuda accepted without a GPU");
    } catch (const std::invalid_argument& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_TEST((contains(e.what(), "built without CUDA") ||
                  contains(e.what(), "no CUDA device")));
    }
    BOOST_CHECK_THROW(training_device("cuda:0"), std::invalid_argument);
  }
}

namespace {

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters(m))
    out.push_back(p.detach().clone());
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(models_have_expected_sizes) {
  auto lenet = make_classifier("lenet5", 1, fashion);
  BOOST_TEST((lenet->shape() == fashion));
  BOOST_TEST(lenet->model_name() == "lenet5");
  BOOST_TEST(parameter_count(*lenet) == 61706);
  BOOST_TEST(lenet->forward(torch::zeros({3, 1, 28, 28})).sizes().vec() ==
             (std::vector<int64_t>{3, 10}));
  auto logreg = make_classifier("logreg", 1, fashion);
  BOOST_TEST(parameter_count(*logreg) == 7850);
  BOOST_TEST(logreg->forward(torch::zeros({2, 1, 28, 28})).sizes().vec() ==
             (std::vector<int64_t>{2, 10}));
  // The MLP: 784 -> 128 -> 64 -> 10.
  auto mlp = make_classifier("mlp", 1, fashion);
  BOOST_TEST(parameter_count(*mlp) == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);
  BOOST_TEST(mlp->forward(torch::zeros({2, 1, 28, 28})).sizes().vec() ==
             (std::vector<int64_t>{2, 10}));
  // Other shapes: the layers follow the data (LeNet-5 on 3 x 32 x 32 images
  // of 100 classes: 3 input channels, 16 x 6 x 6 into fc1, 100 outputs).
  const model_shape cifar100{eg::data::sample_shape::image(3, 32, 32), 100};
  auto big = make_classifier("lenet5", 1, cifar100);
  BOOST_TEST((big->shape() == cifar100));
  BOOST_TEST(big->named_parameters()["conv1.weight"].sizes().vec() ==
             (std::vector<int64_t>{6, 3, 5, 5}));
  BOOST_TEST(big->named_parameters()["fc1.weight"].sizes().vec() ==
             (std::vector<int64_t>{120, 16 * 6 * 6}));
  BOOST_TEST(big->forward(torch::zeros({2, 3, 32, 32})).sizes().vec() ==
             (std::vector<int64_t>{2, 100}));
  // Fewer than two classes, or samples of nothing, are no classifier.
  BOOST_CHECK_THROW(make_classifier("logreg", 1, {eg::data::sample_shape::features(4), 1}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(make_classifier("logreg", 1, {eg::data::sample_shape::features(0), 3}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(make_classifier("resnet", 1, fashion), std::invalid_argument);
  BOOST_TEST(parameter_names(*lenet).front() == "conv1.weight");
  BOOST_TEST(parameter_names(*lenet).size() == 10u);
}

BOOST_AUTO_TEST_CASE(equal_seeds_give_equal_models) {
  auto a = make_classifier("lenet5", 42, fashion);
  auto b = make_classifier("lenet5", 42, fashion);
  auto c = make_classifier("lenet5", 43, fashion);
  BOOST_TEST(all_equal(parameters(*a), parameters(*b)));
  BOOST_TEST(!all_equal(parameters(*a), parameters(*c)));

  // Built concurrently from several threads, models still match their seed.
  std::vector<std::vector<torch::Tensor>> reference;
  for (uint64_t seed = 0; seed < 4; ++seed)
    reference.push_back(snapshot(*make_classifier("lenet5", seed, fashion)));
  std::vector<int> ok(4, 1);
  std::vector<std::thread> threads;
  for (uint64_t seed = 0; seed < 4; ++seed)
    threads.emplace_back([&, seed] {
      for (int k = 0; k < 10; ++k)
        if (!all_equal(parameters(*make_classifier("lenet5", seed, fashion)), reference[seed]))
          ok[seed] = 0;
    });
  for (auto& t : threads)
    t.join();
  BOOST_TEST(std::count(ok.begin(), ok.end(), 1) == 4);
}

BOOST_AUTO_TEST_CASE(lenet_forward_without_gradients_matches_training_forward) {
  torch::manual_seed(11);
  auto model = make_classifier("lenet5", 3, fashion);
  for (int64_t n : {1, 128}) {
    const auto x = torch::randn({n, 1, 28, 28});
    const auto trained = model->forward(x);
    BOOST_CHECK(trained.requires_grad());
    torch::Tensor evaluated;
    {
      evaluation_scope scope(*model);
      evaluated = model->forward(x);
    }
    BOOST_CHECK(!evaluated.requires_grad());
    BOOST_CHECK(torch::allclose(evaluated, trained.detach(), 1e-5, 1e-5));
  }
}

BOOST_AUTO_TEST_SUITE_END()

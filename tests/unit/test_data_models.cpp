// links: eg_learning
// The models on data of other shapes than Fashion-MNIST's: every zoo model
// trains an epoch on RGB 32 x 32 images in CIFAR's binary format (files the
// test writes), and the small models on flat features; the models ask the
// data for their shape.
#include "data/readers.hpp"
#include "models/model.hpp"
#include "train/trainer.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

using eg::test::iota;

using namespace eg;

namespace {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("eg-data-models-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// A CIFAR-10 batch of `n` records: label k, then 3 x 32 x 32 bytes whose
/// red plane is bright for even classes and the blue plane for odd ones,
/// so that the classes can be learnt.
void write_cifar_batch(const std::filesystem::path& file, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(file, std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const auto label = static_cast<unsigned char>(rng() % 10);
    out.put(static_cast<char>(label));
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 32 * 32; ++p) {
        const bool bright = (c == 0 && label % 2 == 0) || (c == 2 && label % 2 == 1);
        const int v = (bright ? 150 : 40) + static_cast<int>(rng() % 60) + 5 * label;
        out.put(static_cast<char>(v));
      }
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(every_zoo_model_trains_an_epoch_on_rgb_32x32_cifar_data) {
  temp_dir dir;
  write_cifar_batch(dir.path / "data_batch_1.bin", 96, 1);
  write_cifar_batch(dir.path / "test_batch.bin", 32, 2);
  data::read_options o;
  o.which = data::split::train;
  auto train = std::make_shared<data::dataset>(
    data::read_split(dir.path.string(), "auto", o).data);
  BOOST_TEST(train->shape.to_string() == "3x32x32");
  BOOST_REQUIRE_EQUAL(train->size(), 96);
  train->norm = train->local_moments().finish();
  BOOST_REQUIRE_EQUAL(train->norm.mean.size(), 3u);
  const auto shape = learning::shape_of(*train);
  for (const auto& name : learning::zoo_models()) {
    BOOST_TEST_CONTEXT("model " << name) {
      auto model = learning::make_classifier(name, 1, shape);
      BOOST_TEST((model->shape() == shape));
      learning::local_trainer t(model, train, iota(train->size()), {0.01, 0.9, 32});
      std::mt19937_64 rng(1);
      t.begin_epoch(learning::shuffled_plan(t.shard(), 32, 1.0, rng));
      int steps = 0;
      while (!t.epoch_done()) {
        auto r = t.step();
        BOOST_TEST(std::isfinite(r.loss));
        ++steps;
      }
      BOOST_TEST(steps == 3);
      learning::evaluation_scope scope(*model);
      auto logits = model->forward(train->range(0, 4));
      BOOST_TEST(logits.sizes().vec() == (std::vector<int64_t>{4, train->num_classes()}));
    }
  }
}

BOOST_AUTO_TEST_CASE(models_are_built_for_the_data_s_shape_and_classes) {
  const auto cifar100 = learning::model_shape{data::sample_shape::image(3, 32, 32), 100};
  for (const auto& name : learning::zoo_models()) {
    BOOST_TEST_CONTEXT("model " << name) {
      auto m = learning::make_classifier(name, 1, cifar100);
      learning::evaluation_scope scope(*m);
      BOOST_TEST(m->forward(torch::zeros({2, 3, 32, 32})).sizes().vec() ==
                 (std::vector<int64_t>{2, 100}));
    }
  }
  // Downsampled ImageNet 8 x 8, 1,000 classes: the models whose poolings
  // leave something of 8 x 8.
  const auto tiny = learning::model_shape{data::sample_shape::image(3, 8, 8), 1000};
  for (const char* name : {"squeezenet", "mobilenetv2", "mlp", "logreg"}) {
    auto m = learning::make_classifier(name, 1, tiny);
    learning::evaluation_scope scope(*m);
    BOOST_TEST(m->forward(torch::zeros({2, 3, 8, 8})).size(1) == 1000);
  }
  // Flat features: mlp and logreg; the convolutional models refuse them,
  // naming the model and the data.
  const auto features = learning::model_shape{data::sample_shape::features(13), 3};
  for (const char* name : {"mlp", "logreg"}) {
    auto m = learning::make_classifier(name, 1, features);
    learning::evaluation_scope scope(*m);
    BOOST_TEST(m->forward(torch::zeros({5, 13})).sizes().vec() == (std::vector<int64_t>{5, 3}));
  }
  for (const char* name : {"lenet5", "alexnet", "squeezenet", "mobilenetv2"}) {
    try {
      learning::make_classifier(name, 1, features);
      BOOST_ERROR(std::string(name) + " was built for flat features");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find(name) != std::string::npos, what);
      BOOST_TEST(what.find("13 features") != std::string::npos, what);
    }
  }
  // Images too small for AlexNet's poolings, and a single class.
  BOOST_CHECK_THROW(learning::make_classifier(
                      "alexnet", 1, {data::sample_shape::image(3, 8, 8), 10}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(learning::make_classifier(
                      "lenet5", 1, {data::sample_shape::image(1, 28, 28), 1}),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(batches_are_normalised_bytes_and_augmentation_is_seeded) {
  data::dataset d;
  d.shape = data::sample_shape::image(3, 4, 4);
  d.classes = {"a", "b"};
  d.samples = torch::arange(0, 2 * 3 * 16, torch::kInt64).remainder(256).to(torch::kUInt8)
                .view({2, 3, 4, 4});
  d.labels = torch::tensor(std::vector<int64_t>{0, 1});
  d.check("test");
  const auto raw = d.all();
  BOOST_TEST(raw.scalar_type() == torch::kFloat32);
  BOOST_TEST(raw[1][2][3][3].item<float>() == 95.0f / 255.0f);
  d.norm = d.local_moments().finish();
  const auto x = d.all();
  for (int c = 0; c < 3; ++c) {
    BOOST_TEST(std::abs(x.select(1, c).mean().item<double>()) < 1e-5);
    BOOST_TEST(std::abs(x.select(1, c).std(false).item<double>() - 1) < 1e-4);
  }
  // The data set's bytes are not touched by a batch.
  BOOST_TEST(d.samples[1][2][3][3].item<uint8_t>() == 95);
  const auto a = data::augment(x, 7), b = data::augment(x, 7), c = data::augment(x, 8);
  BOOST_TEST(a.equal(b));
  BOOST_TEST(a.sizes() == x.sizes());
  BOOST_TEST(!a.equal(c));
}

// links: eg_learning
#include "learning/conv.hpp"
#include "learning/dataset.hpp"
#include "learning/gossip.hpp"
#include "learning/loans.hpp"
#include "learning/model.hpp"
#include "learning/partition.hpp"
#include "learning/pooling.hpp"
#include "learning/serialize.hpp"
#include "learning/trainer.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <thread>

namespace fs = std::filesystem;
using namespace eg::learning;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

using temp_dir = eg::test::scratch_dir;
using eg::test::all_equal;

std::string idx_header(uint32_t magic, std::vector<uint32_t> dims) {
  std::string out;
  dims.insert(dims.begin(), magic);
  for (uint32_t w : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((w >> shift) & 0xff));
  return out;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  BOOST_REQUIRE(f != nullptr);
  BOOST_REQUIRE_EQUAL(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                      static_cast<int>(bytes.size()));
  gzclose(f);
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A small valid training set: `n` images whose pixels all equal the label.
void write_tiny_set(const temp_dir& dir, uint32_t n) {
  std::string images = idx_header(2051, {n, 28, 28});
  std::string labels = idx_header(2049, {n});
  for (uint32_t i = 0; i < n; ++i) {
    images.append(28 * 28, static_cast<char>(i % 10));
    labels.push_back(static_cast<char>(i % 10));
  }
  write_gz(dir.file("train-images-idx3-ubyte.gz"), images);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), labels);
}

// Checks that a data_error was thrown whose message holds all `parts`.
auto error_with(std::vector<std::string> parts) {
  return [parts](const data_error& e) {
    std::string what = e.what();
    for (const auto& p : parts)
      if (what.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << what << "' lacks '" << p << "'");
        return false;
      }
    return true;
  };
}

std::vector<int64_t> cyclic_labels(int64_t n, int64_t classes) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = i % classes;
  return labels;
}

// Every index appears in at most one shard; returns how many are used.
size_t check_disjoint(const shards& s, size_t n) {
  std::vector<int> seen(n, 0);
  size_t used = 0;
  for (const auto& shard : s)
    for (int64_t i : shard) {
      BOOST_REQUIRE(i >= 0 && static_cast<size_t>(i) < n);
      BOOST_REQUIRE_EQUAL(seen[static_cast<size_t>(i)]++, 0);
      ++used;
    }
  return used;
}

std::vector<double> class_fractions(const std::vector<int64_t>& shard,
                                    const std::vector<int64_t>& labels, int64_t classes) {
  std::vector<double> f(static_cast<size_t>(classes), 0.0);
  for (int64_t i : shard)
    f[static_cast<size_t>(labels[static_cast<size_t>(i)])] += 1.0;
  for (auto& x : f)
    x /= static_cast<double>(shard.size());
  return f;
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters(m))
    out.push_back(p.detach().clone());
  return out;
}

/// `n` random 28 x 28 images of 10 classes (bytes, normalised by their own
/// statistics), drawn from `seed`.
std::shared_ptr<const dataset> random_set(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<const dataset>(eg::test::random_images(n));
}

/// Fashion-MNIST's model shape.
const model_shape fashion = fashion_mnist_shape();

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

} // namespace

BOOST_AUTO_TEST_SUITE(learning)

// --- dataset -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dataset_loads_fashion_mnist) {
  auto train = load_fashion_mnist(data_dir, split::train, 2000);
  // The images held as bytes, as read; batches as the models see them.
  BOOST_TEST(train.samples.sizes().vec() == (std::vector<int64_t>{2000, 1, 28, 28}));
  BOOST_TEST(train.samples.scalar_type() == torch::kUInt8);
  BOOST_TEST((train.shape == eg::data::sample_shape::image(1, 28, 28)));
  BOOST_TEST(train.images());
  BOOST_TEST(train.labels.scalar_type() == torch::kInt64);
  BOOST_TEST(train.size() == 2000);
  BOOST_TEST(train.labels.min().item<int64_t>() == 0);
  BOOST_TEST(train.labels.max().item<int64_t>() == 9);
  BOOST_TEST(train.num_classes() == 10);
  BOOST_TEST(train.classes.front() == "T-shirt/top");
  BOOST_TEST(train.classes.back() == "Ankle boot");
  BOOST_TEST((shape_of(train) == fashion_mnist_shape()));
  // Normalised by its own statistics: about Fashion-MNIST's usual 0.2860 and
  // 0.3530, and batches of mean 0 and standard deviation 1.
  BOOST_REQUIRE_EQUAL(train.norm.mean.size(), 1u);
  BOOST_REQUIRE_EQUAL(train.norm.std.size(), 1u);
  BOOST_TEST(std::abs(train.norm.mean[0] - 0.2860) < 0.01);
  BOOST_TEST(std::abs(train.norm.std[0] - 0.3530) < 0.01);
  const auto all = train.all();
  BOOST_TEST(all.scalar_type() == torch::kFloat32);
  BOOST_TEST(all.sizes().vec() == (std::vector<int64_t>{2000, 1, 28, 28}));
  BOOST_TEST(std::abs(all.mean().item<double>()) < 1e-3);
  BOOST_TEST(std::abs(all.std().item<double>() - 1) < 1e-3);
  // A batch is those samples, normalised; a range likewise.
  auto index = torch::tensor({7, 3, 1999}, torch::kInt64);
  auto b = train.batch(index);
  BOOST_TEST(b.sizes().vec() == (std::vector<int64_t>{3, 1, 28, 28}));
  BOOST_TEST(torch::allclose(b, all.index_select(0, index)));
  BOOST_TEST(torch::allclose(b[1], (train.samples[3].to(torch::kFloat32) / 255 -
                                    train.norm.mean[0]) / train.norm.std[0],
                             1e-5, 1e-5));
  BOOST_TEST(torch::equal(train.range(10, 20), all.narrow(0, 10, 10)));
  BOOST_TEST(train.range(1990, 2500).size(0) == 10);  // clamped to the data
  // Batches are copies: the bytes are as they were.
  BOOST_TEST(torch::equal(train.samples, load_fashion_mnist(data_dir, split::train, 2000).samples));

  auto test = load_fashion_mnist(data_dir, split::test);
  BOOST_TEST(test.size() == 10000);
  BOOST_TEST(test.samples.size(0) == 10000);
  BOOST_TEST(torch::bincount(test.labels).eq(1000).all().item<bool>());
  BOOST_TEST(test.class_counts() == std::vector<int64_t>(10, 1000));
}

BOOST_AUTO_TEST_CASE(dataset_reads_raw_and_gzip_files) {
  temp_dir dir;
  write_tiny_set(dir, 12);
  std::string labels = idx_header(2049, {3});
  labels += std::string{0, 9, 5};
  std::string images = idx_header(2051, {3, 28, 28});
  images.append(28 * 28, '\0');
  images.append(28 * 28, static_cast<char>(255));
  images.append(28 * 28, '\x80');
  write_raw(dir.file("t10k-images-idx3-ubyte"), images);
  write_raw(dir.file("t10k-labels-idx1-ubyte"), labels);

  auto train = load_fashion_mnist(dir.path.string(), split::train, 5);
  BOOST_TEST(train.size() == 5);
  BOOST_TEST(train.labels[4].item<int64_t>() == 4);
  auto test = load_fashion_mnist(dir.path.string(), split::test);
  BOOST_TEST(test.size() == 3);
  BOOST_TEST(test.labels[1].item<int64_t>() == 9);
  // The bytes as they are in the file.
  BOOST_TEST(test.samples.scalar_type() == torch::kUInt8);
  BOOST_TEST(test.samples[0].max().item<int64_t>() == 0);
  BOOST_TEST(test.samples[1].min().item<int64_t>() == 255);
  BOOST_TEST(test.samples[2].eq(128).all().item<bool>());
  // Normalised by the images' own statistics: pixels of 0, 1 and 128/255.
  const double values[] = {0.0, 1.0, 128.0 / 255.0};
  const double mean = (values[0] + values[1] + values[2]) / 3;
  double var = 0;
  for (double v : values)
    var += (v - mean) * (v - mean) / 3;
  BOOST_REQUIRE_EQUAL(test.norm.mean.size(), 1u);
  // (pixels / 255 in float32, summed in float64)
  BOOST_TEST(test.norm.mean[0] == mean, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(test.norm.std[0] == std::sqrt(var), boost::test_tools::tolerance(1e-6));
  const auto close = boost::test_tools::tolerance(1e-5f);
  const auto x = test.all();
  BOOST_TEST(x.scalar_type() == torch::kFloat32);
  BOOST_TEST(x[0].max().item<float>() ==
                 static_cast<float>((0 - test.norm.mean[0]) / test.norm.std[0]),
             close);
  BOOST_TEST(x[1].min().item<float>() ==
                 static_cast<float>((1 - test.norm.mean[0]) / test.norm.std[0]),
             close);
  BOOST_TEST(x[2].min().item<float>() ==
                 static_cast<float>((128.0 / 255.0 - test.norm.mean[0]) / test.norm.std[0]),
             close);
}

BOOST_AUTO_TEST_CASE(dataset_missing_directory) {
  BOOST_CHECK_EXCEPTION(load_fashion_mnist("/nonexistent/fmnist", split::train), data_error,
                        error_with({"'/nonexistent/fmnist'", "does not exist"}));
  // A directory without the files.
  temp_dir dir;
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.path.string(), "no train data", "idx"}));
  // The images without their labels.
  write_tiny_set(dir, 3);
  fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.file("train-labels-idx1-ubyte.gz"), "no such file"}));
}

BOOST_AUTO_TEST_CASE(dataset_truncated_file) {
  temp_dir dir;
  write_tiny_set(dir, 3);
  std::string images = idx_header(2051, {3, 28, 28});
  images.append(2 * 28 * 28 + 100, '\x10');
  write_gz(dir.file("train-images-idx3-ubyte.gz"), images);
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.file("train-images-idx3-ubyte.gz"), "truncated"}));
}

BOOST_AUTO_TEST_CASE(dataset_trailing_bytes) {
  temp_dir dir;
  write_tiny_set(dir, 3);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_header(2049, {3}) + std::string(4, '\1'));
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.file("train-labels-idx1-ubyte.gz"), "trailing"}));
}

BOOST_AUTO_TEST_CASE(dataset_bad_magic_number) {
  temp_dir dir;
  write_tiny_set(dir, 3);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_header(2051, {3}) + std::string(3, '\1'));
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.file("train-labels-idx1-ubyte.gz"), "magic", "2051"}));
}

BOOST_AUTO_TEST_CASE(dataset_count_mismatch_and_bad_labels) {
  temp_dir dir;
  write_tiny_set(dir, 3);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_header(2049, {2}) + std::string(2, '\1'));
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.file("train-labels-idx1-ubyte.gz"), "2 labels for 3"}));
  // A label past Fashion-MNIST's ten classes: the error names the data
  // directory and the label.
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_header(2049, {3}) + std::string{1, 2, 10});
  BOOST_CHECK_EXCEPTION(load_fashion_mnist(dir.path.string(), split::train), data_error,
                        error_with({dir.path.string(), "label 10", "10 classes"}));
}

BOOST_AUTO_TEST_CASE(dataset_wrong_image_size) {
  // Images of another size than the cluster's are refused, naming the file
  // and both sizes, when they are not to be resized.
  temp_dir dir;
  write_tiny_set(dir, 1);
  write_gz(dir.file("train-images-idx3-ubyte.gz"),
           idx_header(2051, {1, 32, 32}) + std::string(32 * 32, '\0'));
  eg::data::read_options o;
  o.shape = eg::data::sample_shape::image(1, 28, 28);
  o.resize = false;
  BOOST_CHECK_EXCEPTION(eg::data::read_split(dir.path.string(), "idx", o), data_error,
                        error_with({dir.file("train-images-idx3-ubyte.gz"), "1x32x32", "1x28x28"}));
  // Read as they are otherwise: a data set of 32 x 32 images.
  auto d = load_fashion_mnist(dir.path.string(), split::train);
  BOOST_TEST((d.shape == eg::data::sample_shape::image(1, 32, 32)));
  BOOST_TEST(d.samples.sizes().vec() == (std::vector<int64_t>{1, 1, 32, 32}));
}

// --- partition ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(iid_shards_follow_shares) {
  auto labels = cyclic_labels(10000, 10);
  auto s = partition_iid(labels, {0.5, 0.3, 0.2}, 7);
  BOOST_TEST(check_disjoint(s, labels.size()) == 10000u);
  BOOST_TEST(s[0].size() == 5000u);
  BOOST_TEST(s[1].size() == 3000u);
  BOOST_TEST(s[2].size() == 2000u);

  auto partial = partition_iid(labels, {0.25, 0.25}, 7);
  BOOST_TEST(check_disjoint(partial, labels.size()) == 5000u);
  BOOST_TEST(partial[0].size() == 2500u);

  // Ten shares of 0.1 do not add up to exactly 1 in floating point.
  auto tenths = partition_iid(labels, std::vector<double>(10, 0.1), 7);
  BOOST_TEST(check_disjoint(tenths, labels.size()) == 10000u);
  for (const auto& shard : tenths)
    BOOST_TEST(shard.size() == 1000u);

  BOOST_CHECK_THROW(partition_iid(labels, {0.6, 0.5}, 7), std::invalid_argument);
  BOOST_CHECK_THROW(partition_iid(labels, {-0.1, 0.5}, 7), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(iid_shards_are_class_balanced) {
  auto labels = cyclic_labels(20000, 10);
  auto s = partition_iid(labels, std::vector<double>(5, 0.2), 3);
  for (const auto& shard : s)
    for (double f : class_fractions(shard, labels, 10))
      BOOST_TEST(std::abs(f - 0.1) < 0.025);
}

BOOST_AUTO_TEST_CASE(dirichlet_small_alpha_is_skewed) {
  auto labels = cyclic_labels(20000, 10);
  auto s = partition_dirichlet(labels, std::vector<double>(10, 0.1), 0.1, 10, 5);
  BOOST_TEST(check_disjoint(s, labels.size()) == 20000u);
  double top = 0;
  for (const auto& shard : s) {
    auto f = class_fractions(shard, labels, 10);
    top += *std::max_element(f.begin(), f.end()) / 10;
    // Sizes stay at the shares: a platform never takes a class beyond its room.
    BOOST_TEST(std::abs(static_cast<double>(shard.size()) - 2000) <= 2);
  }
  BOOST_TEST(top > 0.5);  // IID gives about 0.1
}

BOOST_AUTO_TEST_CASE(dirichlet_sizes_follow_unequal_shares) {
  auto labels = cyclic_labels(60000, 10);
  std::vector<double> shares{0.4, 0.3, 0.2, 0.05, 0.05};
  for (double alpha : {0.01, 0.1, 1.0})
    for (uint64_t seed : {1, 2, 3}) {
      auto s = partition_dirichlet(labels, shares, alpha, 10, seed);
      BOOST_TEST(check_disjoint(s, labels.size()) == 60000u);
      for (size_t i = 0; i < s.size(); ++i)
        BOOST_TEST(std::abs(static_cast<double>(s[i].size()) - shares[i] * 60000) <= 5,
                   "alpha " << alpha << " seed " << seed << " platform " << i << ": "
                            << s[i].size() << " points");
    }
}

BOOST_AUTO_TEST_CASE(dirichlet_big_alpha_is_near_uniform) {
  auto labels = cyclic_labels(20000, 10);
  std::vector<double> shares{0.4, 0.3, 0.2, 0.1};
  auto s = partition_dirichlet(labels, shares, 1000, 10, 5);
  BOOST_TEST(check_disjoint(s, labels.size()) == 20000u);
  for (size_t i = 0; i < s.size(); ++i) {
    BOOST_TEST(std::abs(static_cast<double>(s[i].size()) / 20000 - shares[i]) < 0.01);
    for (double f : class_fractions(s[i], labels, 10))
      BOOST_TEST(std::abs(f - 0.1) < 0.03);
  }
}

BOOST_AUTO_TEST_CASE(dirichlet_partial_shares_and_arguments) {
  auto labels = cyclic_labels(10000, 10);
  auto s = partition_dirichlet(labels, {0.3, 0.2}, 0.5, 10, 1);
  auto used = check_disjoint(s, labels.size());
  BOOST_TEST(used >= 4990u);
  BOOST_TEST(used <= 5000u);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.5}, 0, 10, 1), std::invalid_argument);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.5}, 1, 5, 1), std::invalid_argument);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.7, 0.7}, 1, 10, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(partitions_are_deterministic) {
  auto labels = cyclic_labels(5000, 10);
  std::vector<double> shares{0.5, 0.5};
  BOOST_TEST(partition_iid(labels, shares, 11) == partition_iid(labels, shares, 11));
  BOOST_TEST(partition_iid(labels, shares, 11) != partition_iid(labels, shares, 12));
  BOOST_TEST(partition_dirichlet(labels, shares, 0.3, 10, 11) ==
             partition_dirichlet(labels, shares, 0.3, 10, 11));
  BOOST_TEST(partition_dirichlet(labels, shares, 0.3, 10, 11) !=
             partition_dirichlet(labels, shares, 0.3, 10, 12));
}

// --- model -------------------------------------------------------------------

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

// --- trainer -----------------------------------------------------------------

namespace {

// max_pool_2x2 against torch::max_pool2d on the same input: values, and the
// gradient each window passes back (to the same element, so ties and NaN
// must be settled the same way).
void expect_pooling_like_torch(const torch::Tensor& input) {
  auto mine_in = input.detach().clone().requires_grad_(true);
  auto torch_in = input.detach().clone().requires_grad_(true);
  auto mine = max_pool_2x2(mine_in);
  auto ref = torch::max_pool2d(torch_in, 2);
  BOOST_REQUIRE(mine.sizes() == ref.sizes());
  BOOST_CHECK(torch::equal(mine.isnan(), ref.isnan()));
  BOOST_CHECK(torch::equal(torch::nan_to_num(mine, 0.0), torch::nan_to_num(ref, 0.0)));
  auto grad = torch::randn(ref.sizes());
  mine.backward(grad);
  ref.backward(grad);
  BOOST_CHECK(torch::equal(mine_in.grad(), torch_in.grad()));
  {
    torch::NoGradGuard no_grad;
    auto plain = max_pool_2x2(input);
    BOOST_CHECK(!plain.requires_grad());
    BOOST_CHECK(torch::equal(torch::nan_to_num(plain, 0.0), torch::nan_to_num(ref.detach(), 0.0)));
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(max_pool_2x2_matches_torch) {
  torch::manual_seed(7);
  // LeNet-5's two poolings, on random values.
  expect_pooling_like_torch(torch::randn({5, 6, 28, 28}));
  expect_pooling_like_torch(torch::randn({3, 16, 10, 10}));
  // After a ReLU: windows of zeros, all four tied.
  expect_pooling_like_torch(torch::relu(torch::randn({4, 6, 28, 28})));
  // Few distinct values: ties of every kind, the diagonal ones included.
  expect_pooling_like_torch(torch::randint(0, 3, {4, 3, 12, 12}).to(torch::kFloat32));
  // NaN wins its window, wherever it sits.
  auto with_nan = torch::randn({2, 2, 8, 8});
  with_nan.index_put_({0, 0, 0, 1}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({0, 1, 3, 2}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({1, 0, 5, 5}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({1, 0, 4, 4}, std::numeric_limits<float>::quiet_NaN());
  expect_pooling_like_torch(with_nan);
}

BOOST_AUTO_TEST_CASE(max_pool_2x2_falls_back_to_torch) {
  torch::manual_seed(8);
  // Odd sizes (floor mode drops the last row and column), doubles, and a
  // non-contiguous view take torch's own pooling, with the same results.
  for (const auto& x : {torch::randn({2, 3, 7, 9}), torch::randn({2, 3, 8, 8}, torch::kFloat64),
                        torch::randn({2, 8, 8, 3}).permute({0, 3, 1, 2})}) {
    auto mine = max_pool_2x2(x);
    BOOST_CHECK(torch::equal(mine, torch::max_pool2d(x, 2)));
  }
}

namespace {

// conv2d_relu without gradients against torch's convolution and ReLU on the
// same input: equal up to the order of the sums, NaN where torch has NaN;
// with the kernels of every vector width this processor runs.
void expect_conv_like_torch(const torch::nn::Conv2d& conv, const torch::Tensor& x) {
  const auto ref = torch::relu(conv.ptr()->forward(x)).detach();
  torch::NoGradGuard no_grad;
  auto widths = conv_vector_widths();
  widths.push_back(0);  // torch's own
  for (int width : widths) {
    BOOST_TEST_CONTEXT("vector width " << width << ", input " << x.sizes()) {
      const auto mine = conv2d_relu(conv, x, width);
      BOOST_REQUIRE(mine.sizes() == ref.sizes());
      BOOST_CHECK(!mine.requires_grad());
      BOOST_CHECK(torch::equal(mine.isnan(), ref.isnan()));
      BOOST_CHECK(torch::allclose(torch::nan_to_num(mine, 0.0), torch::nan_to_num(ref, 0.0),
                                  1e-5, 1e-5));
    }
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(conv2d_relu_matches_torch) {
  torch::manual_seed(9);
  namespace nn = torch::nn;
  // LeNet-5's two convolutions (their shapes are compiled into the kernels).
  nn::Conv2d conv1(nn::Conv2dOptions(1, 6, 5).padding(2));
  nn::Conv2d conv2(nn::Conv2dOptions(6, 16, 5));
  for (int64_t n : {1, 3, 128}) {
    expect_conv_like_torch(conv1, torch::randn({n, 1, 28, 28}));
    expect_conv_like_torch(conv2, torch::relu(torch::randn({n, 6, 14, 14})));
  }
  // Other shapes: more input channels, two blocks of output channels, a
  // last block of channels only partly used, rows not a multiple of the
  // vectors, planes taken 16 pixels at a time.
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(2, 12, 5).padding(1)),
                         torch::randn({3, 2, 12, 30}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(1, 11, 5).padding(2)),
                         torch::randn({2, 1, 28, 28}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(3, 32, 5)), torch::randn({3, 3, 9, 24}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(6, 15, 5)), torch::randn({2, 6, 14, 14}));
  // A NaN spreads to every output whose window holds it.
  auto with_nan = torch::randn({2, 1, 28, 28});
  with_nan.index_put_({1, 0, 3, 26}, std::numeric_limits<float>::quiet_NaN());
  expect_conv_like_torch(conv1, with_nan);
  with_nan = torch::randn({2, 6, 14, 14});
  with_nan.index_put_({0, 4, 9, 1}, std::numeric_limits<float>::quiet_NaN());
  expect_conv_like_torch(conv2, with_nan);
  // Kernels of a width no processor has are refused, not guessed.
  BOOST_CHECK_THROW(conv2d_relu(conv1, torch::randn({1, 1, 28, 28}), 3), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(conv2d_relu_falls_back_to_torch) {
  torch::manual_seed(10);
  namespace nn = torch::nn;
  nn::Conv2d conv(nn::Conv2dOptions(1, 6, 5).padding(2));
  const auto x = torch::randn({3, 1, 28, 28});
  // Training: torch's own convolution, and a gradient through it.
  auto mine_x = x.clone().requires_grad_(true), torch_x = x.clone().requires_grad_(true);
  auto mine = conv2d_relu(conv, mine_x);
  BOOST_CHECK(mine.requires_grad());
  auto ref = torch::relu(conv->forward(torch_x));
  BOOST_CHECK(torch::equal(mine, ref));
  const auto grad = torch::randn(ref.sizes());
  mine.backward(grad);
  const auto mine_weight_grad = conv->weight.grad().clone();
  conv->zero_grad();
  ref.backward(grad);
  BOOST_CHECK(torch::equal(mine_x.grad(), torch_x.grad()));
  BOOST_CHECK(torch::equal(mine_weight_grad, conv->weight.grad()));
  // A gradient for the input only, with the parameters frozen.
  for (auto& p : conv->parameters())
    p.requires_grad_(false);
  auto y = conv2d_relu(conv, x.clone().requires_grad_(true));
  BOOST_CHECK(y.requires_grad());
  BOOST_CHECK(torch::equal(y, torch::relu(conv->forward(x))));
  // Without gradients, what the kernels do not take: doubles, a view that
  // is not contiguous, a stride, another kernel size.
  torch::NoGradGuard no_grad;
  nn::Conv2d doubles(nn::Conv2dOptions(1, 6, 5).padding(2));
  doubles->to(torch::kFloat64);
  const auto xd = x.to(torch::kFloat64);
  BOOST_CHECK(torch::equal(conv2d_relu(doubles, xd), torch::relu(doubles->forward(xd))));
  const auto view = torch::randn({3, 1, 28, 28}).transpose(2, 3);
  BOOST_REQUIRE(!view.is_contiguous());
  BOOST_CHECK(torch::equal(conv2d_relu(conv, view), torch::relu(conv->forward(view))));
  for (auto other : {nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2).stride(2)),
                     nn::Conv2d(nn::Conv2dOptions(1, 6, 3).padding(1))})
    BOOST_CHECK(torch::equal(conv2d_relu(other, x), torch::relu(other->forward(x))));
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

BOOST_AUTO_TEST_CASE(lent_parameters_are_copied_only_while_a_loan_is_held) {
  auto model = make_classifier("lenet5", 3, fashion);
  auto params = parameters(*model);
  parameter_loans loans;
  // Given back before the next write: no copy, same storage.
  const void* before = params[0].data_ptr();
  { auto token = loans.lend(params); }
  BOOST_TEST(!loans.before_write(params));
  BOOST_TEST(params[0].data_ptr() == before);
  // Still held: the parameters move to copies, the holder keeps what it was
  // lent, unchanged by what the parameters do next.
  auto token = loans.lend(params);
  auto lent = params[0].detach().clone();
  BOOST_TEST(loans.before_write(params));
  BOOST_TEST(params[0].data_ptr() != before);
  BOOST_TEST(torch::equal(params[0], lent));
  {
    torch::NoGradGuard no_grad;
    params[0].add_(1.0);
  }
  BOOST_TEST(torch::equal(torch::from_blob(const_cast<void*>(before), lent.sizes()), lent));
  // One copy per loan: the next write finds nothing lent.
  BOOST_TEST(!loans.before_write(params));
  BOOST_TEST(loans.lent() == 2u);
  BOOST_TEST(loans.copies() == 1u);
}

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

// --- gossip ------------------------------------------------------------------

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
  // Rates are not push-sum's: the same merge with or without them.
  push_sum a, b;
  std::vector<torch::Tensor> xa{torch::zeros({1}, torch::kFloat64)}, xb{xa[0].clone()};
  std::vector<torch::Tensor> in{torch::ones({1}, torch::kFloat64)};
  a.merge(xa, in, 0.5);
  b.merge(xb, in, 0.5, 0.2, 0.9);
  BOOST_TEST(torch::equal(xa[0], xb[0]));
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

// --- serialize ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(model_and_optimizer_round_trip) {
  auto data = random_set(64, 4);
  local_trainer a(make_classifier("lenet5", 1, fashion), data, iota(64), {0.05, 0.9, 32});
  local_trainer b(make_classifier("lenet5", 2, fashion), data, iota(64), {0.05, 0.9, 32});
  std::mt19937_64 rng(1);
  a.begin_epoch(shuffled_plan(a.shard(), 32, 1, rng));
  a.step();  // momentum buffers now exist
  load_model(b.model(), save_model(a.model()));
  load_optimizer(b.optimizer(), save_optimizer(a.optimizer()));
  BOOST_TEST(all_equal(parameters(a.model()), parameters(b.model())));

  // The same next step on both gives bit-identical models only if the
  // momentum buffers came across too.
  epoch_plan next{{iota(32)}};
  a.begin_epoch(next);
  b.begin_epoch(next);
  a.step();
  b.step();
  BOOST_TEST(all_equal(parameters(a.model()), parameters(b.model())));

  BOOST_CHECK_THROW(load_model(b.model(), "not an archive"), std::runtime_error);
  BOOST_CHECK_THROW(load_model(b.model(), save_model(*make_classifier("logreg", 1, fashion))),
                    std::runtime_error);
  BOOST_CHECK_THROW(load_optimizer(b.optimizer(), "garbage"), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(state_dict_is_a_torch_zip) {
  temp_dir dir;
  auto model = make_classifier("lenet5", 1, fashion);
  auto path = dir.file("model.pt");
  write_state_dict(*model, path);
  std::ifstream in(path, std::ios::binary);
  std::string magic(2, '\0');
  in.read(magic.data(), 2);
  BOOST_TEST(magic == "PK");
  BOOST_TEST(fs::file_size(path) > 61706u * 4u);

  // The bytes read back as the same name -> tensor dict.
  std::ifstream again(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(again)),
                          std::istreambuf_iterator<char>());
  auto dict = torch::pickle_load(bytes).toGenericDict();
  BOOST_TEST(dict.size() == 10u);
  BOOST_TEST(torch::equal(dict.at("fc3.bias").toTensor(), model->named_parameters()["fc3.bias"]));

  BOOST_CHECK_EXCEPTION(write_state_dict(*model, "/nonexistent/dir/model.pt"), std::runtime_error,
                        [](const std::runtime_error& e) {
                          return std::string(e.what()).find("/nonexistent/dir/model.pt") !=
                                 std::string::npos;
                        });
}

// --- training ----------------------------------------------------------------

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

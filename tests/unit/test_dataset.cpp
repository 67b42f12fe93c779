// links: eg_learning
// Fashion-MNIST as the tests and benchmarks load it (models/dataset.hpp): the
// bytes and their own normalisation, raw and gzipped IDX files, and errors
// that name the file and what is wrong with it.
#include "data/readers.hpp"
#include "data/shape.hpp"
#include "models/dataset.hpp"
#include "models/model_shape.hpp"

#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace eg::learning;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

using temp_dir = eg::test::scratch_dir;

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

} // namespace

BOOST_AUTO_TEST_SUITE(dataset)

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

BOOST_AUTO_TEST_SUITE_END()

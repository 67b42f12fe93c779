// links: eg_data
// The data layer's readers, on files the tests write themselves (PNG, JPEG,
// BMP, PPM/PGM images, CIFAR batches, CSV text, .npy arrays, torch.save
// files) and on real data sets that Debian packages ship (Fashion-MNIST in
// IDX files, scikit-learn's CSV files).

#include "data/dataset.hpp"
#include "data/image.hpp"
#include "data/readers.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>
#include <stb/stb_image_write.h>
#include <torch/torch.h>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace eg::data;
namespace fs = std::filesystem;

namespace {

/// A fresh directory, removed at scope exit.
struct scratch {
  fs::path path;
  scratch() {
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("edgegossip-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  /// path/name, its parent folders made.
  std::string operator/(const std::string& name) const {
    auto p = path / name;
    fs::create_directories(p.parent_path());
    return p.string();
  }
  std::string str() const { return path.string(); }
};

void write_bytes(const std::string& file, const std::vector<uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE(out.good());
}

void write_text(const std::string& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  BOOST_REQUIRE(out.good());
}

std::vector<uint8_t> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

/// H x W x C interleaved pixels: value (seed * 31 + y * 7 + x * 3 + c * 50) % 256.
std::vector<uint8_t> pattern(int w, int h, int c, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        px[static_cast<size_t>((y * w + x) * c + k)] =
          static_cast<uint8_t>((seed * 31 + y * 7 + x * 3 + k * 50) % 256);
  return px;
}
int pattern_at(int seed, int y, int x, int c) { return (seed * 31 + y * 7 + x * 3 + c * 50) % 256; }

/// A binary PGM: its size depends on the image's size only.
void write_pgm(const std::string& file, int w, int h, int seed) {
  auto p = pattern(w, h, 1, seed);
  write_text(file, "P5\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n" +
                     std::string(p.begin(), p.end()));
}

void write_png(const std::string& file, int w, int h, int c, int seed) {
  auto px = pattern(w, h, c, seed);
  BOOST_REQUIRE(stbi_write_png(file.c_str(), w, h, c, px.data(), w * c) != 0);
}

/// A flat grey image (JPEG keeps a flat colour nearly exactly).
void write_jpg(const std::string& file, int w, int h, int c, uint8_t value) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * c), value);
  BOOST_REQUIRE(stbi_write_jpg(file.c_str(), w, h, c, px.data(), 95) != 0);
}

/// Checks that the exception's message holds every part.
auto says(std::vector<std::string> parts) {
  return [parts](const data_error& e) {
    const std::string m = e.what();
    for (auto& p : parts)
      if (m.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << m << "' lacks '" << p << "'");
        return false;
      }
    return true;
  };
}

bool any_warning(const read_result& r, const std::vector<std::string>& parts) {
  for (auto& w : r.warnings) {
    bool all = true;
    for (auto& p : parts)
      all = all && w.find(p) != std::string::npos;
    if (all)
      return true;
  }
  return false;
}

read_options with(split which = split::train) {
  read_options o;
  o.which = which;
  return o;
}

int px(const dataset& d, int64_t i, int64_t c, int64_t y, int64_t x) {
  return d.samples[i][c][y][x].item<int>();
}

/// A .npy file of `descr` (e.g. "<f4") and `shape` holding `data`.
void write_npy(const std::string& file, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::string dims;
  for (auto d : shape)
    dims += std::to_string(d) + ",";
  std::string header =
    "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  write_text(file, out);
}

/// A Python with torch ("python3", else Debian's /usr/bin/python3); empty
/// where there is none.
std::string python_with_torch() {
  for (const std::string py : {"python3", "/usr/bin/python3"})
    if (std::system((py + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0)
      return py;
  return {};
}

bool run_python(const std::string& python, const std::string& script, const scratch& dir) {
  const auto file = dir / "make.py";
  write_text(file, script);
  const auto log = dir / "make.log";
  const int rc = std::system((python + " " + file + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  BOOST_TEST_MESSAGE("python: " << text.str());
  return rc == 0;
}

/// CIFAR records: label bytes then 3 x 32 x 32 pixels where pixel (c, y, x)
/// of record r is (r * 5 + c * 60 + y * 3 + x) % 256.
std::vector<uint8_t> cifar_records(const std::vector<std::vector<uint8_t>>& labels, int first) {
  std::vector<uint8_t> out;
  for (size_t r = 0; r < labels.size(); ++r) {
    out.insert(out.end(), labels[r].begin(), labels[r].end());
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          out.push_back(static_cast<uint8_t>(((first + static_cast<int>(r)) * 5 + c * 60 + y * 3 + x) % 256));
  }
  return out;
}
int cifar_at(int r, int c, int y, int x) { return (r * 5 + c * 60 + y * 3 + x) % 256; }

const std::string fashion = "/usr/share/datasets/fashion-mnist";
const std::string sklearn_data = "/usr/lib/python3/dist-packages/sklearn/datasets/data";

} // namespace

BOOST_AUTO_TEST_SUITE(data)

// -- CIFAR -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(cifar10_batches_in_order_with_names) {
  scratch dir;
  write_bytes(dir / "data_batch_1.bin", cifar_records({{3}, {0}, {9}}, 0));
  write_bytes(dir / "data_batch_2.bin", cifar_records({{1}, {3}}, 3));
  write_bytes(dir / "test_batch.bin", cifar_records({{2}, {4}}, 100));
  write_text(dir / "batches.meta.txt",
             "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n");
  BOOST_TEST(detect_format(dir.str(), split::train) == "cifar");
  auto r = read_split(dir.str(), "cifar", with());
  const auto& d = r.data;
  BOOST_TEST(d.size() == 5);
  BOOST_TEST(d.shape.to_string() == "3x32x32");
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{3, 0, 9, 1, 3}));
  BOOST_TEST(d.classes.size() == 10u);
  BOOST_TEST(d.classes[3] == "cat");
  BOOST_TEST(!d.numbered_classes);
  // Record 4 (the second of data_batch_2), channel 2, row 5, column 7.
  BOOST_TEST(px(d, 4, 2, 5, 7) == cifar_at(4, 2, 5, 7));
  BOOST_TEST(px(d, 0, 0, 31, 31) == cifar_at(0, 0, 31, 31));
  auto t = read_split(dir.str(), "cifar", with(split::test)).data;
  BOOST_TEST(t.size() == 2);
  BOOST_TEST((t.label_vector() == std::vector<int64_t>{2, 4}));
  BOOST_TEST(px(t, 1, 1, 0, 3) == cifar_at(101, 1, 0, 3));
}

BOOST_AUTO_TEST_CASE(cifar100_uses_the_fine_label) {
  scratch dir;
  // (coarse, fine)
  write_bytes(dir / "cifar-100-binary/train.bin", cifar_records({{4, 30}, {1, 7}, {19, 99}}, 0));
  BOOST_TEST(detect_format(dir.str(), split::train) == "cifar");
  BOOST_TEST(!reader_for("cifar").holds(dir.str(), split::test));
  auto d = read_split(dir.str(), "cifar", with()).data;
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{30, 7, 99}));
  BOOST_TEST(d.numbered_classes);
  BOOST_TEST(d.num_classes() == 100);
  BOOST_TEST(d.classes[99] == "99");
  BOOST_TEST(px(d, 2, 1, 10, 20) == cifar_at(2, 1, 10, 20));
}

BOOST_AUTO_TEST_CASE(cifar_truncated_file_is_named_with_its_size) {
  scratch dir;
  auto bytes = cifar_records({{1}, {2}}, 0);
  bytes.resize(bytes.size() - 100);
  write_bytes(dir / "data_batch_1.bin", bytes);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "cifar", with()), data_error,
                        says({"data_batch_1.bin", std::to_string(bytes.size()) + " bytes",
                              "3073-byte"}));
}

BOOST_AUTO_TEST_CASE(cifar_label_outside_the_named_classes) {
  scratch dir;
  write_bytes(dir / "data_batch_1.bin", cifar_records({{1}, {7}}, 0));
  write_text(dir / "batches.meta.txt", "a\nb\nc\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "cifar", with()), data_error,
                        says({"data_batch_1.bin", "record 1", "label 7", "3 classes"}));
}

BOOST_AUTO_TEST_CASE(cifar_fitted_to_the_cluster_shape_or_refused) {
  scratch dir;
  write_bytes(dir / "data_batch_1.bin", cifar_records({{0}, {1}}, 0));
  auto o = with();
  o.shape = sample_shape::image(1, 16, 16);
  auto r = read_split(dir.str(), "cifar", o);
  BOOST_TEST(r.data.shape.to_string() == "1x16x16");
  BOOST_TEST((r.data.samples.sizes().vec() == std::vector<int64_t>{2, 1, 16, 16}));
  BOOST_TEST(any_warning(r, {"resized", "32x32", "16x16"}));
  o.resize = false;
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "cifar", o), data_error,
                        says({"data_batch_1.bin", "3x32x32", "1x16x16", "resizing is off"}));
  o.shape = sample_shape::features(10);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "cifar", o), data_error,
                        says({"images of 3x32x32", "10 features"}));
}

// -- image folders -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(image_folder_grey_png_classes_order_and_pixels) {
  scratch dir;
  // b_cat: 3 images (seeds 10, 11, 12), a_dog: 2 (seeds 20, 21).
  for (int i = 0; i < 3; ++i)
    write_png(dir / ("b_cat/" + std::to_string(i) + ".png"), 8, 6, 1, 10 + i);
  for (int i = 0; i < 2; ++i)
    write_png(dir / ("a_dog/" + std::to_string(i) + ".png"), 8, 6, 1, 20 + i);
  write_text(dir / "a_dog/notes.txt", "not an image");
  BOOST_TEST(detect_format(dir.str(), split::train) == "image-folder");
  auto r = read_split(dir.str(), "image-folder", with());
  const auto& d = r.data;
  BOOST_TEST((d.classes == std::vector<std::string>{"a_dog", "b_cat"}));
  BOOST_TEST(!d.numbered_classes);
  BOOST_TEST(d.shape.to_string() == "1x6x8");
  // The classes in turn: dog 0, cat 0, dog 1, cat 1, cat 2.
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{0, 1, 0, 1, 1}));
  BOOST_TEST((d.class_counts() == std::vector<int64_t>{2, 3}));
  BOOST_TEST(px(d, 0, 0, 5, 7) == pattern_at(20, 5, 7, 0));
  BOOST_TEST(px(d, 4, 0, 2, 3) == pattern_at(12, 2, 3, 0));
  BOOST_TEST(d.samples.scalar_type() == torch::kUInt8);
  BOOST_TEST(any_warning(r, {"1 files", "not images"}));
  // A limit keeps both classes.
  auto o = with();
  o.limit = 2;
  BOOST_TEST((read_split(dir.str(), "image-folder", o).data.label_vector() ==
              std::vector<int64_t>{0, 1}));
}

BOOST_AUTO_TEST_CASE(image_folder_rgb_jpeg_bmp_ppm_pgm) {
  scratch dir;
  write_png(dir / "rgb/a.png", 5, 4, 3, 1);
  BOOST_REQUIRE(stbi_write_bmp((dir / "rgb/b.bmp").c_str(), 5, 4, 3, pattern(5, 4, 3, 2).data()));
  {  // binary PPM (P6) and PGM (P5)
    auto p6 = pattern(5, 4, 3, 3);
    std::string ppm = "P6\n5 4\n255\n" + std::string(p6.begin(), p6.end());
    write_text(dir / "rgb/c.ppm", ppm);
    auto p5 = pattern(5, 4, 1, 4);
    write_text(dir / "grey/d.pgm", "P5\n5 4\n255\n" + std::string(p5.begin(), p5.end()));
  }
  write_jpg(dir / "grey/e.jpg", 5, 4, 1, 200);
  auto d = read_split(dir.str(), "image-folder", with()).data;
  // Grey and RGB together: RGB, grey repeated.
  BOOST_TEST(d.shape.to_string() == "3x4x5");
  BOOST_TEST(d.size() == 5);
  // Order: grey d.pgm, rgb a.png, grey e.jpg, rgb b.bmp, rgb c.ppm.
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{0, 1, 0, 1, 1}));
  for (int c = 0; c < 3; ++c) {
    BOOST_TEST(px(d, 0, c, 3, 4) == pattern_at(4, 3, 4, 0));  // PGM, repeated
    BOOST_TEST(px(d, 1, c, 1, 2) == pattern_at(1, 1, 2, c));  // PNG
    BOOST_TEST(px(d, 3, c, 3, 0) == pattern_at(2, 3, 0, c));  // BMP
    BOOST_TEST(px(d, 4, c, 2, 2) == pattern_at(3, 2, 2, c));  // PPM
    BOOST_TEST(std::abs(px(d, 2, c, 1, 1) - 200) <= 2);       // JPEG, lossy
  }
  // The cluster's shape decides the channels: grey.
  auto o = with();
  o.shape = sample_shape::image(1, 4, 5);
  auto g = read_split(dir.str(), "image-folder", o).data;
  BOOST_TEST(g.shape.to_string() == "1x4x5");
  BOOST_TEST(px(g, 0, 0, 3, 4) == pattern_at(4, 3, 4, 0));
}

BOOST_AUTO_TEST_CASE(image_folder_mixed_sizes_resized_or_refused) {
  scratch dir;
  write_png(dir / "a/1.png", 8, 8, 1, 1);
  write_png(dir / "a/2.png", 8, 8, 1, 2);
  write_png(dir / "b/3.png", 12, 10, 1, 3);
  auto r = read_split(dir.str(), "image-folder", with());
  BOOST_TEST(r.data.shape.to_string() == "1x8x8");  // the most common size
  BOOST_TEST(r.data.size() == 3);
  BOOST_TEST(any_warning(r, {"1 images of other sizes", "1x8x8", "3.png", "1x10x12"}));
  auto o = with();
  o.resize = false;
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "image-folder", o), data_error,
                        says({"3.png", "1x10x12", "1x8x8", "resizing is off"}));
  // The cluster's shape: every image resized to it, or the first of another size refused.
  o = with();
  o.shape = sample_shape::image(1, 4, 4);
  auto s = read_split(dir.str(), "image-folder", o).data;
  BOOST_TEST(s.shape.to_string() == "1x4x4");
  BOOST_TEST(s.size() == 3);
  o.shape = sample_shape::image(1, 8, 8);
  o.resize = false;
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "image-folder", o), data_error,
                        says({"3.png", "1x10x12", "1x8x8", "resizing is off"}));
}

BOOST_AUTO_TEST_CASE(image_folder_corrupt_images_skipped_or_fatal) {
  scratch dir;
  write_png(dir / "a/good.png", 4, 4, 1, 1);
  write_png(dir / "b/good.png", 4, 4, 1, 2);
  auto png = read_bytes(dir / "a/good.png");
  png.resize(png.size() / 2);  // a valid header, truncated data
  write_bytes(dir / "a/half.png", png);
  write_text(dir / "b/junk.jpg", "this is not a JPEG");
  auto r = read_split(dir.str(), "image-folder", with());
  BOOST_TEST(r.skipped == 2);
  BOOST_TEST(r.data.size() == 2);
  BOOST_TEST((r.data.label_vector() == std::vector<int64_t>{0, 1}));
  BOOST_TEST(px(r.data, 1, 0, 3, 3) == pattern_at(2, 3, 3, 0));
  BOOST_TEST(any_warning(r, {"half.png", "skipped"}));
  BOOST_TEST(any_warning(r, {"junk.jpg", "skipped"}));
  auto o = with();
  o.on_bad_sample = "fail";
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "image-folder", o), data_error,
                        says({"cannot be decoded", ".png"}));
  o.on_bad_sample = "ignore";
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "image-folder", o), data_error,
                        says({"on_bad_sample", "ignore"}));
  // Many: the first five named, then a count.
  for (int i = 0; i < 6; ++i)
    write_text(dir / ("a/bad" + std::to_string(i) + ".png"), "x");
  auto many = read_split(dir.str(), "image-folder", with());
  BOOST_TEST(many.skipped == 8);
  BOOST_TEST(any_warning(many, {"3 more images skipped", "8 in all"}));
}

BOOST_AUTO_TEST_CASE(image_folder_empty_class_folder_and_missing_directory) {
  scratch dir;
  write_png(dir / "cat/1.png", 4, 4, 1, 1);
  fs::create_directories(dir.path / "dog");
  auto r = read_split(dir.str(), "image-folder", with());
  BOOST_TEST((r.data.classes == std::vector<std::string>{"cat", "dog"}));
  BOOST_TEST(any_warning(r, {"dog", "holds no images"}));
  fs::remove(dir.path / "cat/1.png");
  BOOST_CHECK_EXCEPTION(image_folder_reader().read(dir.str(), with()), data_error,
                        says({"holds no images", "cat", "dog", "empty"}));
  const std::string missing = dir / "nowhere";
  BOOST_CHECK_EXCEPTION(image_folder_reader().read(missing, with()), data_error,
                        says({"nowhere", "does not exist"}));
  BOOST_CHECK_EXCEPTION(read_split(missing, "auto", with()), data_error,
                        says({"nowhere", "does not exist"}));
  BOOST_CHECK_EXCEPTION(read_split(missing, "image-folder", with()), data_error,
                        says({"nowhere", "does not exist"}));
}

BOOST_AUTO_TEST_CASE(image_folder_threads_agree) {
  scratch dir;
  for (int i = 0; i < 300; ++i)
    write_png(dir / ("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".png"), 7, 7,
              i % 2 ? 3 : 1, i);
  auto one = read_image_folder(dir.str(), with(), 1).data;
  auto two = read_image_folder(dir.str(), with(), 2).data;
  BOOST_TEST(one.shape.to_string() == "3x7x7");
  BOOST_TEST(torch::equal(one.samples, two.samples));
  BOOST_TEST(torch::equal(one.labels, two.labels));
}

namespace {
void set_mtime(const std::string& file, const struct stat& st) {
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  BOOST_REQUIRE(::utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);
}
std::vector<std::string> cache_files(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    out.push_back(e.path().string());
  return out;
}
} // namespace

BOOST_AUTO_TEST_CASE(image_folder_cache_reused_and_invalidated) {
  scratch dir, cache;
  for (int i = 0; i < 4; ++i)
    write_pgm(dir / ("k" + std::to_string(i % 2) + "/" + std::to_string(i) + ".pgm"), 6, 6, i);
  auto o = with();
  o.cache_dir = cache / "images";
  auto first = read_split(dir.str(), "image-folder", o).data;
  auto files = cache_files(o.cache_dir);
  BOOST_REQUIRE(files.size() == 1u);
  const std::string cached = files.front();

  // Another image of the same size and time: the cache is read, not the file.
  const std::string file = dir / "k0/0.pgm";
  struct stat before {};
  BOOST_REQUIRE(::stat(file.c_str(), &before) == 0);
  auto other = read_bytes(file);
  write_pgm(file, 6, 6, 77);
  BOOST_REQUIRE(read_bytes(file).size() == other.size());
  set_mtime(file, before);
  auto again = read_split(dir.str(), "image-folder", o);
  BOOST_TEST(torch::equal(again.data.samples, first.samples));
  BOOST_TEST(again.warnings.empty());

  // Touched: rebuilt, and the new pixels are read.
  ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);
  auto touched = read_split(dir.str(), "image-folder", o).data;
  const int64_t at = 0;  // k0/0.png is the first sample
  BOOST_TEST(px(touched, at, 0, 2, 3) == pattern_at(77, 2, 3, 0));
  BOOST_TEST(px(first, at, 0, 2, 3) == pattern_at(0, 2, 3, 0));
  BOOST_TEST(!torch::equal(touched.samples, first.samples));
  BOOST_TEST(cache_files(o.cache_dir).size() == 1u);

  // A damaged cache: warned of, rebuilt, right values.
  auto bytes = read_bytes(cached);
  bytes[bytes.size() - 10] ^= 0xff;
  write_bytes(cached, bytes);
  auto damaged = read_split(dir.str(), "image-folder", o);
  BOOST_TEST(any_warning(damaged, {"image cache", "damaged", "checksum"}));
  BOOST_TEST(torch::equal(damaged.data.samples, touched.samples));
  auto healed = read_split(dir.str(), "image-folder", o);
  BOOST_TEST(healed.warnings.empty());
  // Cut short, or not a cache at all: the same.
  bytes = read_bytes(cached);
  bytes.resize(bytes.size() / 2);
  write_bytes(cached, bytes);
  BOOST_TEST(any_warning(read_split(dir.str(), "image-folder", o), {"damaged"}));
  write_text(cached, "garbage");
  auto rebuilt = read_split(dir.str(), "image-folder", o);
  BOOST_TEST(any_warning(rebuilt, {"damaged"}));
  BOOST_TEST(torch::equal(rebuilt.data.samples, touched.samples));
  BOOST_TEST(torch::equal(rebuilt.data.labels, touched.labels));

  // A new file: rebuilt with it.
  write_pgm(dir / "k1/9.pgm", 6, 6, 9);
  BOOST_TEST(read_split(dir.str(), "image-folder", o).data.size() == 5);

  // Skipped images and their warnings come back from the cache too.
  write_text(dir / "k1/bad.png", "x");
  auto skipped = read_split(dir.str(), "image-folder", o);
  auto from_cache = read_split(dir.str(), "image-folder", o);
  BOOST_TEST(from_cache.skipped == 1);
  BOOST_TEST(any_warning(from_cache, {"bad.png", "skipped"}));
  BOOST_TEST(torch::equal(from_cache.data.samples, skipped.data.samples));
}

// -- CSV ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(csv_header_named_labels) {
  scratch dir;
  write_text(dir / "train.csv",
             "width,height,species\n1.5,2,setosa\n# a comment\n\n3,-4e1,virginica\r\n"
             "\"5\",6.25,\"setosa\"\n");
  write_text(dir / "test.csv", "width,height,species\n7,8,virginica\n");
  BOOST_TEST(detect_format(dir.str(), split::train) == "csv");
  auto r = read_split(dir.str(), "csv", with());
  const auto& d = r.data;
  BOOST_TEST(d.shape.to_string() == "2 features");
  BOOST_TEST((d.classes == std::vector<std::string>{"setosa", "virginica"}));
  BOOST_TEST(!d.numbered_classes);
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{0, 1, 0}));
  BOOST_TEST(d.samples.scalar_type() == torch::kFloat32);
  BOOST_TEST(d.samples[1][1].item<float>() == -40.0f);
  BOOST_TEST(d.samples[2][1].item<float>() == 6.25f);
  auto t = read_split(dir.str(), "csv", with(split::test)).data;
  BOOST_TEST(t.size() == 1);
  BOOST_TEST(t.samples[0][0].item<float>() == 7.0f);
}

BOOST_AUTO_TEST_CASE(csv_no_header_numbered_labels_and_label_column) {
  scratch dir;
  write_text(dir / "readings.csv", "2,0.5,1.5\n0,2.5,3.5\n1;\n");
  // One *.csv: train; a ; row in a comma file is a row of the wrong width.
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"readings.csv", "line 3", "1 fields", "3"}));
  write_text(dir / "readings.csv", "2,0.5,1.5\n0,2.5,3.5\n1,4.5,5.5\n");
  auto o = with();
  o.label_column = "0";
  auto d = read_split(dir.str(), "csv", o).data;
  BOOST_TEST(d.numbered_classes);
  BOOST_TEST((d.classes == std::vector<std::string>{"0", "1", "2"}));
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{2, 0, 1}));
  BOOST_TEST(d.samples[2][1].item<float>() == 5.5f);
  BOOST_TEST(!reader_for("csv").holds(dir.str(), split::test));
  // Default: the last column is the label: 1.5 is not a class number.
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"readings.csv", "line 1", "1.5", "not a whole number"}));
  // Semicolons, a named label column that is not the last, pandas' index.
  write_text(dir / "readings.csv", ";class;a;b\n0;x;1;2\n1;y;3;4\n");
  auto p = read_split(dir.str(), "csv", with());
  BOOST_TEST(p.data.shape.to_string() == "2 features");
  BOOST_TEST((p.data.classes == std::vector<std::string>{"x", "y"}));
  BOOST_TEST(p.data.samples[1][0].item<float>() == 3.0f);
  BOOST_TEST(any_warning(p, {"index"}));
  // Column b as the label leaves the names of column 'class' as features.
  o.label_column = "b";
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", o), data_error,
                        says({"readings.csv", "line 2", "column 1 ('class')", "'x' is not a number"}));
  o.label_column = "colour";
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", o), data_error,
                        says({"no column named 'colour'", "'class'"}));
}

BOOST_AUTO_TEST_CASE(csv_bad_rows_name_file_and_line) {
  scratch dir;
  write_text(dir / "train.csv", "a,b,label\n1,2,0\n3,4,1\n5,6,7,0\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"train.csv", "line 4", "4 fields", "the header has 3"}));
  write_text(dir / "train.csv", "a,b,label\n1,2,0\n3,four,1\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"train.csv", "line 3", "column 1 ('b')", "'four' is not a number"}));
  write_text(dir / "train.csv", "a,b,label\n1,,0\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"train.csv", "line 2", "no value"}));
  write_text(dir / "train.csv", "a,b,label\n1,2,-1\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"train.csv", "line 2", "label -1", "negative"}));
  write_text(dir / "train.csv", "a,b,label\n1,nan,0\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"line 2", "not a finite"}));
  write_text(dir / "train.csv", "a,\"b,label\n1,2,0\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"train.csv", "line 1", "not closed"}));
  fs::remove(dir.path / "train.csv");
  write_text(dir / "one.csv", "1,0\n");
  write_text(dir / "two.csv", "1,0\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"several CSV files", "one.csv", "two.csv", "train.csv"}));
}

BOOST_AUTO_TEST_CASE(label_out_of_range_and_classes_txt) {
  scratch dir;
  write_text(dir / "train.csv", "1,0\n2,1\n3,2\n");
  write_text(dir / "classes.txt", "low\nmid\nhigh\n");
  auto d = read_split(dir.str(), "csv", with()).data;
  BOOST_TEST((d.classes == std::vector<std::string>{"low", "mid", "high"}));
  write_text(dir / "classes.txt", "low\nmid\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", with()), data_error,
                        says({"classes.txt", "names 2 classes", "up to 2"}));
  fs::remove(dir.path / "classes.txt");
  // Numbered labels beyond the cluster's class list.
  auto o = with();
  o.classes = {"a", "b"};
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", o), data_error,
                        says({"label 2", "outside the cluster's 2 classes"}));
  o.classes = {"a", "b", "c", "d"};
  auto c = read_split(dir.str(), "csv", o).data;
  BOOST_TEST(c.num_classes() == 4);
  BOOST_TEST((c.label_vector() == std::vector<int64_t>{0, 1, 2}));
}

BOOST_AUTO_TEST_CASE(cluster_class_list_relabels_names_and_refuses_unknown) {
  scratch dir;
  write_text(dir / "train.csv", "f,label\n1,cat\n2,dog\n3,cat\n");
  auto o = with();
  o.classes = {"dog", "bird", "cat"};
  auto d = read_split(dir.str(), "csv", o).data;
  BOOST_TEST((d.classes == o.classes));
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{2, 0, 2}));
  write_text(dir / "train.csv", "f,label\n1,cat\n2,fish\n");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", o), data_error,
                        says({"class 'fish'", "not in the cluster's class list"}));
  // Image folders are matched by name too.
  scratch images;
  write_png(images / "cat/1.png", 4, 4, 1, 1);
  write_png(images / "dog/1.png", 4, 4, 1, 2);
  auto i = read_split(images.str(), "image-folder", o).data;
  BOOST_TEST((i.label_vector() == std::vector<int64_t>{2, 0}));
  write_png(images / "eel/1.png", 4, 4, 1, 3);
  BOOST_CHECK_EXCEPTION(read_split(images.str(), "image-folder", o), data_error,
                        says({"class 'eel'"}));
}

BOOST_AUTO_TEST_CASE(csv_features_against_the_cluster_shape) {
  scratch dir;
  write_text(dir / "train.csv", "1,2,0\n3,4,1\n");
  auto o = with();
  o.shape = sample_shape::features(3);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "csv", o), data_error,
                        says({"train.csv", "2 features", "3 features"}));
  o.shape = sample_shape::features(2);
  BOOST_TEST(read_split(dir.str(), "csv", o).data.size() == 2);
}

// -- NumPy ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(npy_features_and_images) {
  scratch dir;
  xt::xarray<double> x = {{1.5, 2.0, -3.0}, {4.0, 5.0, 6.0}};
  xt::dump_npy(dir / "x_train.npy", x);
  xt::xarray<int64_t> y = {1, 0};
  xt::dump_npy(dir / "y_train.npy", y);
  BOOST_TEST(detect_format(dir.str(), split::train) == "npy");
  BOOST_TEST(!reader_for("npy").holds(dir.str(), split::test));
  auto d = read_split(dir.str(), "npy", with()).data;
  BOOST_TEST(d.shape.to_string() == "3 features");
  BOOST_TEST(d.samples.scalar_type() == torch::kFloat32);
  BOOST_TEST(d.samples[0][2].item<float>() == -3.0f);
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{1, 0}));
  BOOST_TEST(d.numbered_classes);

  // Images channels-last [N, H, W, C] = [2, 4, 5, 3], labels int32.
  std::vector<uint8_t> img;
  for (int n = 0; n < 2; ++n) {
    auto p = pattern(5, 4, 3, n);
    img.insert(img.end(), p.begin(), p.end());
  }
  write_npy(dir / "x_test.npy", "|u1", {2, 4, 5, 3}, img.data(), img.size());
  std::vector<int32_t> labels = {2, 0};
  write_npy(dir / "y_test.npy", "<i4", {2}, labels.data(), labels.size() * 4);
  auto t = read_split(dir.str(), "npy", with(split::test)).data;
  BOOST_TEST(t.shape.to_string() == "3x4x5");
  BOOST_TEST(px(t, 1, 2, 3, 4) == pattern_at(1, 3, 4, 2));
  BOOST_TEST((t.label_vector() == std::vector<int64_t>{2, 0}));

  // Channels-first [N, C, H, W] = [2, 1, 6, 6]; the cluster's shape: 3x6x6.
  std::vector<uint8_t> grey(72);
  for (size_t i = 0; i < grey.size(); ++i)
    grey[i] = static_cast<uint8_t>(i * 3);
  write_npy(dir / "x_test.npy", "|u1", {2, 1, 6, 6}, grey.data(), grey.size());
  auto o = with(split::test);
  o.shape = sample_shape::image(3, 6, 6);
  auto c = read_split(dir.str(), "npy", o).data;
  BOOST_TEST(c.shape.to_string() == "3x6x6");
  BOOST_TEST(px(c, 1, 2, 1, 2) == (36 + 8) * 3);
}

BOOST_AUTO_TEST_CASE(npy_refused_dtypes_and_files) {
  scratch dir;
  std::vector<uint16_t> half(6, 0x3c00);
  write_npy(dir / "x_train.npy", "<f2", {2, 3}, half.data(), 12);
  std::vector<int64_t> y = {0, 1};
  write_npy(dir / "y_train.npy", "<i8", {2}, y.data(), 16);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"x_train.npy", "dtype '<f2'"}));
  std::vector<float> f(6, 1.0f);
  write_npy(dir / "x_train.npy", ">f4", {2, 3}, f.data(), 24);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"x_train.npy", "'>f4'", "big-endian"}));
  write_npy(dir / "x_train.npy", "<f4", {2, 3}, f.data(), 20);  // 4 bytes short
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"x_train.npy", "truncated"}));
  write_npy(dir / "x_train.npy", "<f4", {2, 3}, f.data(), 24);
  BOOST_TEST(read_split(dir.str(), "npy", with()).data.size() == 2);
  std::vector<float> img(2 * 4 * 4, 0.5f);
  write_npy(dir / "x_train.npy", "<f4", {2, 4, 4}, img.data(), img.size() * 4);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"x_train.npy", "must be bytes (uint8"}));
  write_npy(dir / "x_train.npy", "<f4", {2, 3}, f.data(), 24);
  std::vector<int64_t> bad = {0, -2};
  write_npy(dir / "y_train.npy", "<i8", {2}, bad.data(), 16);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"y_train.npy", "label -2", "index 1"}));
  std::vector<int64_t> three = {0, 1, 1};
  write_npy(dir / "y_train.npy", "<i8", {3}, three.data(), 24);
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"x_train.npy", "2 samples", "3 labels"}));
  fs::remove(dir.path / "y_train.npy");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"y_train.npy", "missing"}));
  write_text(dir / "y_train.npy", "not numpy");
  BOOST_CHECK_EXCEPTION(read_split(dir.str(), "npy", with()), data_error,
                        says({"y_train.npy", "not a NumPy"}));
}

// -- torch.save ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(torch_save_files) {
  const auto python = python_with_torch();
  if (python.empty()) {
    BOOST_TEST_MESSAGE("skipped: no python3 with torch (Debian's python3-torch)");
    return;
  }
  scratch dir;
  BOOST_REQUIRE(run_python(python, R"(
import torch, sys
d = sys.argv[0].rsplit('/', 1)[0]
x = torch.arange(2 * 4 * 5 * 3, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(2, 4, 5, 3)
torch.save({'images': x, 'labels': torch.tensor([1, 0]), 'classes': ['cat', 'dog']}, d + '/train.pt')
import os
os.makedirs(d + '/feat', exist_ok=True)
torch.save((torch.tensor([[1.5, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]]).t().contiguous().t()[:, :2],
            torch.tensor([2, 0, 1])), d + '/feat/train.pt')
torch.save({'x': torch.zeros(2, 3), 'y': torch.tensor([0, 1])}, d + '/feat/test.pt',
           _use_new_zipfile_serialization=False)
os.makedirs(d + '/bad', exist_ok=True)
torch.save({'x': torch.zeros(2, 3), 'y': torch.tensor([0, 5]), 'classes': ['a', 'b']}, d + '/bad/train.pt')
torch.save({'inputs': torch.zeros(2, 3), 'outputs': torch.zeros(2)}, d + '/bad/test.pt')
os.makedirs(d + '/one', exist_ok=True)
torch.save({'x': torch.zeros(2, 3)}, d + '/one/train.pt')
)",
                           dir));
  BOOST_TEST(detect_format(dir.str(), split::train) == "torch");
  auto d = read_split(dir.str(), "torch", with()).data;
  BOOST_TEST(d.shape.to_string() == "3x4x5");  // channels-last [2, 4, 5, 3]
  BOOST_TEST((d.classes == std::vector<std::string>{"cat", "dog"}));
  BOOST_TEST(!d.numbered_classes);
  BOOST_TEST((d.label_vector() == std::vector<int64_t>{1, 0}));
  // Sample 1, row 3, column 4, channel 2: flat index 60 + 3 * 15 + 4 * 3 + 2 = 119.
  BOOST_TEST(px(d, 1, 2, 3, 4) == 119);

  auto f = read_split(dir / "feat", "torch", with()).data;
  BOOST_TEST(f.shape.to_string() == "2 features");
  BOOST_TEST(f.samples[2][0].item<float>() == 5.0f);
  BOOST_TEST((f.label_vector() == std::vector<int64_t>{2, 0, 1}));
  BOOST_TEST(f.numbered_classes);
  BOOST_CHECK_EXCEPTION(read_split(dir / "feat", "torch", with(split::test)), data_error,
                        says({"test.pt", "legacy format", "_use_new_zipfile_serialization"}));
  BOOST_CHECK_EXCEPTION(read_split(dir / "bad", "torch", with()), data_error,
                        says({"train.pt", "label 5", "'classes' names 2"}));
  BOOST_CHECK_EXCEPTION(read_split(dir / "bad", "torch", with(split::test)), data_error,
                        says({"test.pt", "'inputs'", "'outputs'", "'x'"}));
  // A dict of one entry: LibTorch's unpickler lacks the opcode Python writes for it.
  BOOST_CHECK_EXCEPTION(read_split(dir / "one", "torch", with()), data_error,
                        says({"train.pt", "SETITEM", "two entries"}));
  // A damaged archive is an error, not a crash.
  auto bytes = read_bytes(dir / "train.pt");
  bytes.resize(bytes.size() / 2);
  write_bytes(dir / "bad/train.pt", bytes);
  BOOST_CHECK_EXCEPTION(read_split(dir / "bad", "torch", with()), data_error,
                        says({"train.pt"}));
  write_text(dir / "bad/train.pt", "hello");
  BOOST_CHECK_EXCEPTION(read_split(dir / "bad", "torch", with()), data_error,
                        says({"train.pt", "not a file of torch.save"}));
}

// -- auto ------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(auto_detection_picks_each_format) {
  scratch dir;
  write_bytes(dir / "c/test_batch.bin", cifar_records({{1}}, 0));
  write_text(dir / "v/train.csv", "1,0\n");
  std::vector<float> f = {1, 2};
  std::vector<int64_t> y = {0, 1};
  write_npy(dir / "n/x_train.npy", "<f4", {2, 1}, f.data(), 8);
  write_npy(dir / "n/y_train.npy", "<i8", {2}, y.data(), 16);
  write_png(dir / "i/cat/a.png", 3, 3, 1, 0);
  write_text(dir / "i/notes.txt", "images");  // not an image: ignored
  fs::create_directories(dir.path / "split/train/cat");  // train/ and test/: not a folder of classes
  write_png(dir / "split/train/cat/a.png", 3, 3, 1, 0);
  BOOST_TEST(detect_format(dir / "c", split::test) == "cifar");
  BOOST_TEST(detect_format(dir / "v", split::train) == "csv");
  BOOST_TEST(detect_format(dir / "n", split::train) == "npy");
  BOOST_TEST(detect_format(dir / "i", split::train) == "image-folder");
  BOOST_TEST(detect_format(dir / "split/train", split::train) == "image-folder");
  BOOST_CHECK_EXCEPTION(detect_format(dir / "split", split::train), data_error,
                        says({"split", "holds no train data", "train"}));
  BOOST_CHECK_EXCEPTION(detect_format(dir / "c", split::train), data_error,
                        says({"holds no train data", "test_batch.bin"}));
  BOOST_CHECK_EXCEPTION(detect_format(dir / "v", split::test), data_error,
                        says({"holds no test data"}));
  if (fs::exists(fashion))
    BOOST_TEST(detect_format(fashion, split::test) == "idx");
  auto r = read_split(dir / "n", "auto", with());
  BOOST_TEST(r.data.shape.to_string() == "1 features");
}

// -- real data from Debian packages -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(fashion_mnist_idx) {
  if (!fs::exists(fashion + "/train-images-idx3-ubyte.gz")) {
    BOOST_TEST_MESSAGE("skipped: no Fashion-MNIST in " << fashion << " (dataset-fashion-mnist)");
    return;
  }
  auto d = read_split(fashion, "auto", with()).data;
  BOOST_TEST(d.size() == 60000);
  BOOST_TEST(d.shape.to_string() == "1x28x28");
  BOOST_TEST((d.class_counts() == std::vector<int64_t>(10, 6000)));
  auto labels = d.label_vector();
  BOOST_TEST((std::vector<int64_t>(labels.begin(), labels.begin() + 10) ==
              std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  BOOST_TEST(d.samples[0].sum().item<int64_t>() == 76247);
  BOOST_TEST(px(d, 0, 0, 14, 14) == 217);
  auto t = read_split(fashion, "idx", with(split::test)).data;
  BOOST_TEST(t.size() == 10000);
  BOOST_TEST(t.samples[0].sum().item<int64_t>() == 33456);
  BOOST_TEST(px(t, 0, 0, 14, 14) == 110);
  // Resized to an RGB 32 x 32 cluster, the first 100.
  auto o = with(split::test);
  o.shape = sample_shape::image(3, 32, 32);
  o.limit = 100;
  auto rgb = read_split(fashion, "idx", o).data;
  BOOST_TEST(rgb.size() == 100);
  BOOST_TEST(rgb.shape.to_string() == "3x32x32");
  BOOST_TEST(torch::equal(rgb.samples.select(1, 0), rgb.samples.select(1, 2)));
  o.resize = false;
  BOOST_CHECK_EXCEPTION(read_split(fashion, "idx", o), data_error,
                        says({"t10k-images-idx3-ubyte", "1x28x28", "3x32x32"}));
}

BOOST_AUTO_TEST_CASE(scikit_learn_csv_files) {
  const std::string iris = sklearn_data + "/iris.csv", wine = sklearn_data + "/wine_data.csv";
  if (!fs::exists(iris) || !fs::exists(wine)) {
    BOOST_TEST_MESSAGE("skipped: no scikit-learn CSV files in " << sklearn_data
                                                                << " (python3-sklearn)");
    return;
  }
  // A .csv file named itself is read as the training data.
  auto d = read_split(iris, "csv", with()).data;
  BOOST_TEST(d.size() == 150);
  BOOST_TEST(d.shape.to_string() == "4 features");
  BOOST_TEST((d.classes == std::vector<std::string>{"setosa", "versicolor", "virginica"}));
  BOOST_TEST((d.class_counts() == std::vector<int64_t>{50, 50, 50}));
  BOOST_TEST(d.samples[0][0].item<float>() == 5.1f);
  BOOST_TEST(d.samples[0][3].item<float>() == 0.2f);
  scratch dir;
  fs::copy_file(wine, dir / "train.csv");
  auto w = read_split(dir.str(), "auto", with()).data;
  BOOST_TEST(w.size() == 178);
  BOOST_TEST(w.shape.to_string() == "13 features");
  BOOST_TEST((w.class_counts() == std::vector<int64_t>{59, 71, 48}));
  BOOST_TEST(w.classes[2] == "class_2");
  BOOST_TEST(w.samples[0][0].item<float>() == 14.23f);
  BOOST_TEST(w.samples[0][12].item<float>() == 1065.0f);
  // The normalisation's sums see every feature.
  auto m = w.local_moments();
  BOOST_TEST(m.sum.size() == 13u);
  BOOST_TEST(m.count == 178.0);
}

BOOST_AUTO_TEST_CASE(nodes_sums_combine_into_the_whole_datas_normalisation) {
  // Three nodes' parts of one data set: their sums added give the
  // normalisation of the whole, as if one node held it all, and they travel
  // as text without losing a bit.
  auto whole = eg::test::random_images(90);
  eg::data::moments sum;
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<int64_t> rows;
    for (int64_t i = part; i < whole.size(); i += 3)
      rows.push_back(i);
    auto m = whole.subset(rows).local_moments();
    auto back = eg::data::parse_moments(eg::data::to_text(m));
    BOOST_TEST(back.sum == m.sum);
    BOOST_TEST(back.sum_squares == m.sum_squares);
    BOOST_TEST(back.count == m.count);
    sum += back;
  }
  const auto combined = sum.finish();
  const auto expected = whole.local_moments().finish();
  BOOST_REQUIRE_EQUAL(combined.mean.size(), expected.mean.size());
  for (size_t c = 0; c < combined.mean.size(); ++c) {
    BOOST_TEST(combined.mean[c] == expected.mean[c], boost::test_tools::tolerance(1e-12));
    BOOST_TEST(combined.std[c] == expected.std[c], boost::test_tools::tolerance(1e-12));
  }
  // They agree with torch's statistics of the pixels (/ 255, in float32 as
  // the model sees them: to its precision).
  auto values = whole.samples.to(torch::kFloat64).div(255.0);
  BOOST_TEST(combined.mean[0] == values.mean().item<double>(), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(combined.std[0] == values.std(/*unbiased=*/false).item<double>(),
             boost::test_tools::tolerance(1e-6));
  BOOST_TEST((eg::data::parse_normalisation(eg::data::to_text(combined)) == combined));
}

BOOST_AUTO_TEST_CASE(malformed_statistics_are_named) {
  auto refused = [](const std::string& text, const std::string& says, bool norm) {
    try {
      if (norm)
        eg::data::parse_normalisation(text);
      else
        eg::data::parse_moments(text);
    } catch (const eg::data::data_error& e) {
      BOOST_TEST_INFO(text << " -> " << e.what());
      BOOST_TEST(std::string(e.what()).find(says) != std::string::npos);
      return;
    }
    BOOST_ERROR("accepted: " << text);
  };
  refused("", "parts", false);
  refused("count 4; sum 1 2; squares 1", "sums of squares", false);
  refused("count 0; sum 1; squares 1", "count", false);
  refused("count 4; sum x; squares 1", "'x' is not a finite number", false);
  refused("count 4; sum inf; squares 1", "not a finite number", false);
  refused("mean 0.5; std 0", "standard deviation", true);
  refused("mean 0.5; std 1; extra 2", "parts", true);
  refused("average 0.5; std 1", "does not begin with 'mean'", true);
}

BOOST_AUTO_TEST_SUITE_END()

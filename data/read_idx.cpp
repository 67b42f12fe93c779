#include "data/image.hpp"
#include "data/readers.hpp"

#include <torch/torch.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <vector>

// The MNIST family in IDX files, gzip'd or raw:
// <dir>/{train,t10k}-images-idx3-ubyte[.gz] and the matching labels file.

namespace eg::data {
namespace {

constexpr uint32_t images_magic = 2051;
constexpr uint32_t labels_magic = 2049;

// An open IDX file, gzip'd or raw (gzread passes raw files through).
class idx_file {
public:
  explicit idx_file(const std::string& base) {
    namespace fs = std::filesystem;
    std::error_code ec;
    path_ = base + ".gz";
    if (!fs::exists(path_, ec)) {
      if (!fs::exists(base, ec))
        fail("no such file");
      path_ = base;
    }
    file_ = gzopen(path_.c_str(), "rb");
    if (!file_)
      fail(std::string("cannot open: ") + std::strerror(errno));
  }
  ~idx_file() {
    if (file_)
      gzclose(file_);
  }
  idx_file(const idx_file&) = delete;
  idx_file& operator=(const idx_file&) = delete;

  const std::string& path() const { return path_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw data_error("'" + path_ + "': " + what);
  }

  // Reads up to `n` bytes, returns how many were read.
  size_t read(void* dst, size_t n) {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      auto chunk = static_cast<unsigned>(std::min<size_t>(n - done, INT_MAX));
      int got = gzread(file_, out + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail(std::string("read error: ") + (code == Z_ERRNO ? std::strerror(errno) : msg));
      }
      if (got == 0)
        break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // The header: magic number, then one big-endian count per dimension.
  std::vector<int64_t> header(uint32_t magic, size_t dims) {
    std::array<unsigned char, 4 * 4> raw{};
    size_t want = 4 * (1 + dims);
    if (read(raw.data(), want) != want)
      fail("truncated header");
    auto word = [&](size_t i) {
      const unsigned char* p = raw.data() + 4 * i;
      return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
    };
    if (word(0) != magic)
      fail("bad magic number " + std::to_string(word(0)) + " (expected " + std::to_string(magic) +
           ")");
    std::vector<int64_t> sizes;
    for (size_t i = 1; i <= dims; ++i)
      sizes.push_back(word(i));
    return sizes;
  }

  // The payload: exactly `n` bytes and nothing after them.
  torch::Tensor payload(int64_t n) {
    torch::Tensor bytes;
    try {
      bytes = torch::empty({n}, torch::kUInt8);
    } catch (const c10::Error&) {  // a corrupt header may claim absurd sizes
      fail("cannot allocate " + std::to_string(n) + " bytes for the data");
    }
    size_t got = read(bytes.data_ptr<uint8_t>(), static_cast<size_t>(n));
    if (got != static_cast<size_t>(n))
      fail("truncated: expected " + std::to_string(n) + " data bytes, found " +
           std::to_string(got));
    char extra = 0;
    if (read(&extra, 1) != 0)
      fail("trailing bytes after " + std::to_string(n) + " data bytes");
    return bytes;
  }

private:
  std::string path_;
  gzFile file_ = nullptr;
};

std::string prefix(const std::string& dir, split which) {
  return dir + "/" + (which == split::train ? "train" : "t10k");
}

bool holds(const std::string& dir, split which) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto base = prefix(dir, which) + "-images-idx3-ubyte";
  return fs::exists(base, ec) || fs::exists(base + ".gz", ec);
}

read_result read(const std::string& dir, const read_options& options) {
  const std::string p = prefix(dir, options.which);
  idx_file images_file(p + "-images-idx3-ubyte");
  auto dims = images_file.header(images_magic, 3);
  const int64_t count = dims[0], height = dims[1], width = dims[2];
  if (height <= 0 || width <= 0 || height > 4096 || width > 4096)
    images_file.fail("images of " + std::to_string(height) + "x" + std::to_string(width) +
                     " pixels");
  auto pixels = images_file.payload(count * height * width);

  idx_file labels_file(p + "-labels-idx1-ubyte");
  const int64_t label_count = labels_file.header(labels_magic, 1)[0];
  if (label_count != count)
    labels_file.fail(std::to_string(label_count) + " labels for " + std::to_string(count) +
                     " images in '" + images_file.path() + "'");
  auto raw_labels = labels_file.payload(count);

  read_result r;
  auto& d = r.data;
  // Another cluster shape: resized (and made RGB) where options.resize allows.
  d.samples = fit_images(pixels.view({count, 1, height, width}), options,
                         "'" + images_file.path() + "'", r.warnings);
  d.shape = sample_shape::image(d.samples.size(1), d.samples.size(2), d.samples.size(3));
  d.labels = raw_labels.to(torch::kInt64);
  const int64_t classes = count > 0 ? raw_labels.max().item<int64_t>() + 1 : 0;
  for (int64_t k = 0; k < classes; ++k)
    d.classes.push_back(std::to_string(k));
  d.numbered_classes = true;
  return r;
}

} // namespace

reader idx_reader() { return {"idx", holds, read}; }

} // namespace eg::data

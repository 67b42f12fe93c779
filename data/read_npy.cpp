#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <torch/torch.h>
#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnpy.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

// NumPy arrays (np.save): a samples array and a labels array per split,
//
//   x_train.npy + y_train.npy   (also X_train.npy, or train_x.npy + train_y.npy,
//   x_test.npy  + y_test.npy     or features.npy + labels.npy for train)
//
// x: [N, F] of any integer or float type: features, as float32;
//    [N, H, W], [N, H, W, C] or [N, C, H, W] of uint8: images, as
//    [N, C, H, W] bytes (where the channels are: data/image.hpp,
//    images_from_array: the cluster's shape where it matches one reading,
//    else a last dimension of 1, 3 or 4 is channels-last, else a second one
//    is channels-first).
// y: [N] (or [N, 1]) of an integer type, or floats that are whole numbers:
//    class numbers (numbered classes; names from classes.txt).
//
// Arrays are read with xtensor's npy loader once the header is checked here:
// the loader neither converts types nor notices a truncated file.

namespace eg::data {
namespace {

struct npy_pair {
  std::string x, y;
};

std::optional<npy_pair> find(const std::string& dir, split which) {
  const std::vector<npy_pair> train = {{"/x_train.npy", "/y_train.npy"},
                                       {"/X_train.npy", "/y_train.npy"},
                                       {"/train_x.npy", "/train_y.npy"},
                                       {"/features.npy", "/labels.npy"}};
  const std::vector<npy_pair> test = {{"/x_test.npy", "/y_test.npy"},
                                      {"/X_test.npy", "/y_test.npy"},
                                      {"/test_x.npy", "/test_y.npy"}};
  for (auto& p : which == split::train ? train : test)
    if (is_file(dir + p.x))
      return npy_pair{dir + p.x, dir + p.y};
  return std::nullopt;
}

bool holds(const std::string& dir, split which) { return find(dir, which).has_value(); }

struct npy_header {
  std::string descr;  ///< e.g. "<f4", "|u1"
  bool fortran = false;
  std::vector<int64_t> shape;
};

/// The header of a .npy file, checked against the file's size.
npy_header read_header(const std::string& path) {
  auto fail = [&](const std::string& what) -> data_error {
    return data_error("'" + path + "': " + what);
  };
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f)
    throw fail(std::string("cannot open: ") + std::strerror(errno));
  unsigned char start[12] = {};
  const size_t got = std::fread(start, 1, sizeof start, f.get());
  if (got < 10 || std::memcmp(start, "\x93NUMPY", 6) != 0)
    throw fail("not a NumPy .npy file (no \\x93NUMPY magic)");
  const int major = start[6];
  size_t length = 0, offset = 0;
  if (major == 1) {
    length = start[8] | static_cast<size_t>(start[9]) << 8;
    offset = 10;
  } else if (major == 2) {
    length = start[8] | static_cast<size_t>(start[9]) << 8 | static_cast<size_t>(start[10]) << 16 |
             static_cast<size_t>(start[11]) << 24;
    offset = 12;
  } else {
    throw fail("NumPy format version " + std::to_string(major) + "." + std::to_string(start[7]) +
               " is not read (1.0 and 2.0 are)");
  }
  if (length > (1 << 20))
    throw fail("a header of " + std::to_string(length) + " bytes");
  std::string text(length, '\0');
  if (std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) != 0 ||
      std::fread(text.data(), 1, length, f.get()) != length)
    throw fail("truncated header");
  std::fseek(f.get(), 0, SEEK_END);
  const auto file_size = static_cast<int64_t>(std::ftell(f.get()));

  npy_header h;
  auto value_of = [&](const std::string& key) -> std::string {
    const auto k = text.find("'" + key + "'");
    if (k == std::string::npos)
      throw fail("its header has no '" + key + "'");
    auto v = text.find(':', k);
    if (v == std::string::npos)
      throw fail("malformed header");
    ++v;
    while (v < text.size() && text[v] == ' ')
      ++v;
    return text.substr(v);
  };
  const auto descr = value_of("descr");
  if (descr.empty() || descr[0] != '\'')
    throw fail("a structured array (dtype " + descr.substr(0, descr.find('}')) +
               "): save plain arrays");
  h.descr = descr.substr(1, descr.find('\'', 1) - 1);
  const auto fortran = value_of("fortran_order");
  h.fortran = fortran.compare(0, 4, "True") == 0;
  const auto shape = value_of("shape");
  if (shape.empty() || shape[0] != '(')
    throw fail("malformed shape in its header");
  std::string dims = shape.substr(1, shape.find(')') - 1);
  int64_t count = 1;
  for (size_t at = 0; at < dims.size();) {
    auto comma = dims.find(',', at);
    auto piece = dims.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    piece.erase(0, piece.find_first_not_of(' '));
    piece.erase(piece.find_last_not_of(' ') + 1);
    if (!piece.empty()) {
      if (piece.find_first_not_of("0123456789") != std::string::npos || piece.size() > 12)
        throw fail("malformed shape (" + dims + ") in its header");
      h.shape.push_back(std::stoll(piece));
      count *= h.shape.back();
      if (count > (int64_t{1} << 40))
        throw fail("a shape of (" + dims + ") is too large");
    }
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  const int64_t item = h.descr.size() >= 3 ? std::atoi(h.descr.c_str() + 2) : 0;
  const int64_t want = static_cast<int64_t>(offset + length) + count * item;
  if (file_size < want)
    throw fail("truncated: its header makes " + std::to_string(want) + " bytes, the file has " +
               std::to_string(file_size));
  return h;
}

template <class T>
torch::Tensor load_as(const std::string& path, torch::ScalarType type) {
  auto a = xt::load_npy<T>(path);
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
  auto view = torch::from_blob(a.data(), shape, strides, type);
  return torch::empty(shape, type).copy_(view);
}

/// Unsigned integers, widened to int64 (which torch has).
template <class T>
torch::Tensor load_widened(const std::string& path) {
  auto a = xt::load_npy<T>(path);
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  xt::xarray<int64_t, xt::layout_type::row_major> wide = xt::cast<int64_t>(a);
  return torch::from_blob(wide.data(), shape, torch::kInt64).clone();
}

/// The array of `path` as a tensor of its own type; refuses types it has none.
torch::Tensor load(const std::string& path) {
  const auto h = read_header(path);
  const std::string& d = h.descr;
  auto refuse = [&](const std::string& why) -> data_error {
    return data_error("'" + path + "': dtype '" + d + "' is not read (" + why + ")");
  };
  if (d.size() < 3)
    throw refuse("unknown");
  if (d[0] == '>')
    throw refuse("big-endian: save it with a little-endian dtype, e.g. astype('<f4')");
  const std::string kind = d.substr(1);
  try {
    if (kind == "u1")
      return load_as<uint8_t>(path, torch::kUInt8);
    if (kind == "i1")
      return load_as<int8_t>(path, torch::kInt8);
    if (kind == "i2")
      return load_as<int16_t>(path, torch::kInt16);
    if (kind == "i4")
      return load_as<int32_t>(path, torch::kInt32);
    if (kind == "i8")
      return load_as<int64_t>(path, torch::kInt64);
    if (kind == "u2")
      return load_widened<uint16_t>(path);
    if (kind == "u4")
      return load_widened<uint32_t>(path);
    if (kind == "u8")
      return load_widened<uint64_t>(path);
    if (kind == "f4")
      return load_as<float>(path, torch::kFloat32);
    if (kind == "f8")
      return load_as<double>(path, torch::kFloat64);
  } catch (const std::runtime_error& e) {
    throw data_error("'" + path + "': " + e.what());
  }
  throw refuse(d[1] == 'O' ? "objects are pickled Python: save numbers"
               : d[1] == 'U' || d[1] == 'S'
                 ? "strings: save class numbers, and the names in classes.txt"
                 : "int8 to int64, uint8 to uint64, float32 and float64 are");
}

read_result read(const std::string& dir, const read_options& options) {
  if (!is_directory(dir))
    throw data_error("data directory '" + dir + "' does not exist");
  auto files = find(dir, options.which);
  if (!files)
    throw data_error("'" + dir + "' holds no " + to_string(options.which) + " arrays (x_" +
                     to_string(options.which) + ".npy and y_" + to_string(options.which) + ".npy)");
  if (!is_file(files->y))
    throw data_error("'" + files->y + "' is missing: the labels of '" + files->x + "'");
  read_result r;
  auto& d = r.data;
  auto x = load(files->x);
  auto y = load(files->y);
  const std::string wx = "'" + files->x + "'", wy = "'" + files->y + "'";

  if (y.dim() == 2 && y.size(1) == 1)
    y = y.view({y.size(0)});
  if (y.dim() != 1)
    throw data_error(wy + ": labels are [N] class numbers, this array has " +
                     std::to_string(y.dim()) + " dimensions");
  if (x.dim() < 2 || x.size(0) != y.size(0))
    throw data_error(wx + " holds " + (x.dim() < 2 ? "an array of " + std::to_string(x.dim()) +
                                                      " dimension(s), not samples"
                                                    : std::to_string(x.size(0)) + " samples") +
                     ", " + wy + " " + std::to_string(y.size(0)) + " labels");
  if (y.is_floating_point()) {
    auto whole = (y == y.floor()) & y.isfinite();
    if (!whole.all().item<bool>()) {
      const auto at = (~whole).nonzero()[0][0].item<int64_t>();
      throw data_error(wy + ": label " + std::to_string(y[at].item<double>()) + " at index " +
                       std::to_string(at) + " is not a class number");
    }
  }
  y = y.to(torch::kInt64);
  int64_t top = -1;
  if (y.numel() > 0) {
    const auto lo = y.min().item<int64_t>();
    if (lo < 0)
      throw data_error(wy + ": label " + std::to_string(lo) + " at index " +
                       std::to_string((y < 0).nonzero()[0][0].item<int64_t>()) + " is negative");
    top = y.max().item<int64_t>();
  }
  for (int64_t k = 0; k <= top; ++k)
    d.classes.push_back(std::to_string(k));
  d.numbered_classes = true;
  d.labels = y.contiguous();

  if (x.dim() == 2) {
    auto f = x.to(torch::kFloat32);
    auto finite = f.isfinite();
    if (!finite.all().item<bool>()) {
      auto at = (~finite).nonzero()[0];
      throw data_error(wx + ": sample " + std::to_string(at[0].item<int64_t>()) + ", feature " +
                       std::to_string(at[1].item<int64_t>()) + " is not a finite float32 number");
    }
    check_features(f.size(1), options, wx);
    d.samples = f.contiguous();
    d.shape = sample_shape::features(f.size(1));
  } else {
    auto images = images_from_array(x, options.shape, wx);
    d.samples = fit_images(images, options, wx, r.warnings);
    d.shape = sample_shape::image(d.samples.size(1), d.samples.size(2), d.samples.size(3));
  }
  return r;
}

} // namespace

reader npy_reader() { return {"npy", holds, read}; }

} // namespace eg::data

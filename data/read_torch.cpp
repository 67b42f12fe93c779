#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstring>
#include <optional>

// Tensors saved with torch.save in Python: <dir>/train.pt and <dir>/test.pt
// (or .pth), each
//
//   a dict  {"x": samples, "y": labels, "classes": ["name", ...]}, the
//           samples also as "data", "images", "features" or "samples", the
//           labels as "targets" or "labels"; "classes" optional
//   or a tuple or list (samples, labels), as torchvision saved its
//           processed MNIST files.
//
// Samples: [N, F] of any number type (features, as float32) or [N, H, W],
// [N, H, W, C], [N, C, H, W] of uint8 (images; where the channels are:
// data/image.hpp, images_from_array). Labels: an integer tensor [N] (or a
// float one of whole numbers, or a list of ints); with "classes" they index
// it (named classes), else they are class numbers.
//
// Read with LibTorch's torch::pickle_load, which reads the zip archive that
// torch.save writes by default (PyTorch >= 1.6), tensors and lists, dicts
// and tuples of them, str, int, float. It does not read the legacy format
// (torch.save(..., _use_new_zipfile_serialization=False)), nor NumPy arrays
// inside the file, nor a dict of one entry anywhere in it (Python pickles it
// with SETITEM, an opcode LibTorch 1.13's unpickler lacks; dicts of two
// entries or more use SETITEMS): all are refused with what to do instead.

namespace eg::data {
namespace {

std::string find_file(const std::string& dir, split which) {
  const std::string base = dir + (which == split::train ? "/train" : "/test");
  for (const char* ext : {".pt", ".pth"})
    if (is_file(base + ext))
      return base + ext;
  return {};
}

bool holds(const std::string& dir, split which) { return !find_file(dir, which).empty(); }

/// c10's message without the C++ backtrace it appends.
std::string first_line(const c10::Error& e) {
  std::string s = e.what_without_backtrace();
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

c10::IValue unpickle(const std::string& path) {
  auto bytes = read_file(path);
  const bool zip = bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0;
  if (!zip) {
    if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80)
      throw data_error("'" + path + "' is in torch.save's legacy format "
                       "(_use_new_zipfile_serialization=False), which LibTorch does not read: "
                       "save it again with torch.save's default format (PyTorch >= 1.6)");
    throw data_error("'" + path + "' is not a file of torch.save (not a zip archive)");
  }
  try {
    return torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    std::string why = first_line(e);
    if (why.find("Unknown opcode") != std::string::npos && why.find("0x73") != std::string::npos)
      why += " (pickle's SETITEM, which Python writes for a dict of one entry and LibTorch "
             "1.13 does not read: save dicts of two entries or more)";
    else if (why.find("numpy") != std::string::npos)
      why += " (save tensors: torch.from_numpy(array))";
    else if (why.find("cuda") != std::string::npos || why.find("CUDA") != std::string::npos)
      why += " (save tensors on the CPU: tensor.cpu())";
    throw data_error("'" + path + "' cannot be read by LibTorch's pickle_load: " + why);
  } catch (const std::exception& e) {
    throw data_error("'" + path + "' cannot be read by LibTorch's pickle_load: " +
                     std::string(e.what()));
  }
}

struct contents {
  std::optional<c10::IValue> samples, labels, classes;
};

contents pick(const c10::IValue& v, const std::string& path) {
  contents c;
  if (v.isGenericDict()) {
    std::string keys;
    for (auto& e : v.toGenericDict()) {
      if (!e.key().isString())
        continue;
      const auto& k = e.key().toStringRef();
      keys += (keys.empty() ? "'" : ", '") + k + "'";
      if (!c.samples && (k == "x" || k == "data" || k == "images" || k == "features" ||
                         k == "samples"))
        c.samples = e.value();
      else if (!c.labels && (k == "y" || k == "targets" || k == "labels"))
        c.labels = e.value();
      else if (k == "classes")
        c.classes = e.value();
    }
    if (!c.samples || !c.labels)
      throw data_error("'" + path + "' holds a dict of " + (keys.empty() ? "no str keys" : keys) +
                       ": it needs the samples as 'x' (or 'data', 'images', 'features', "
                       "'samples') and the labels as 'y' (or 'targets', 'labels')");
    return c;
  }
  std::vector<c10::IValue> items;
  if (v.isTuple())
    items = v.toTupleRef().elements().vec();
  else if (v.isList())
    items = v.toListRef().vec();
  if (items.size() != 2)
    throw data_error("'" + path + "' holds a " + v.tagKind() +
                     ": it needs a dict {'x': samples, 'y': labels} or a pair (samples, labels)");
  c.samples = items[0];
  c.labels = items[1];
  return c;
}

read_result read(const std::string& dir, const read_options& options) {
  if (!is_directory(dir))
    throw data_error("data directory '" + dir + "' does not exist");
  const std::string path = find_file(dir, options.which);
  if (path.empty())
    throw data_error("'" + dir + "' holds no " + std::string(to_string(options.which)) +
                     ".pt (or .pth)");
  const std::string where = "'" + path + "'";
  const auto c = pick(unpickle(path), path);

  if (!c.samples->isTensor())
    throw data_error(where + ": the samples are a " + c.samples->tagKind() + ", not a tensor");
  auto x = c.samples->toTensor();
  torch::Tensor y;
  if (c.labels->isTensor()) {
    y = c.labels->toTensor();
  } else if (c.labels->isIntList()) {
    auto l = c.labels->toIntVector();
    y = torch::tensor(l, torch::kInt64);
  } else {
    throw data_error(where + ": the labels are a " + c.labels->tagKind() + ", not a tensor");
  }
  if (x.is_sparse() || y.is_sparse())
    throw data_error(where + ": sparse tensors are not read (save tensor.to_dense())");
  x = x.detach();
  y = y.detach();
  if (y.dim() == 2 && y.size(1) == 1)
    y = y.view({y.size(0)});
  if (y.dim() != 1)
    throw data_error(where + ": labels are [N] class numbers, this tensor has " +
                     std::to_string(y.dim()) + " dimensions");
  if (x.dim() < 2 || x.size(0) != y.size(0))
    throw data_error(where + ": " +
                     (x.dim() < 2 ? "samples of " + std::to_string(x.dim()) + " dimension(s)"
                                  : std::to_string(x.size(0)) + " samples") +
                     " and " + std::to_string(y.size(0)) + " labels");
  if (y.scalar_type() == torch::kBool || y.is_complex())
    throw data_error(where + ": labels of type " + std::string(c10::toString(y.scalar_type())) +
                     " are not class numbers");
  if (y.is_floating_point()) {
    auto whole = (y == y.floor()) & y.isfinite();
    if (!whole.all().item<bool>()) {
      const auto at = (~whole).nonzero()[0][0].item<int64_t>();
      throw data_error(where + ": label " + std::to_string(y[at].item<double>()) + " at index " +
                       std::to_string(at) + " is not a class number");
    }
  }
  y = y.to(torch::kInt64).contiguous();

  read_result r;
  auto& d = r.data;
  int64_t top = -1;
  if (y.numel() > 0) {
    const auto lo = y.min().item<int64_t>();
    if (lo < 0)
      throw data_error(where + ": label " + std::to_string(lo) + " at index " +
                       std::to_string((y < 0).nonzero()[0][0].item<int64_t>()) + " is negative");
    top = y.max().item<int64_t>();
  }
  if (c.classes) {
    if (!c.classes->isList())
      throw data_error(where + ": 'classes' is a " + c.classes->tagKind() + ", not a list of str");
    for (auto& name : c.classes->toListRef()) {
      if (!name.isString())
        throw data_error(where + ": 'classes' holds a " + name.tagKind() + ", not only str");
      d.classes.push_back(name.toStringRef());
    }
    if (top >= static_cast<int64_t>(d.classes.size()))
      throw data_error(where + ": label " + std::to_string(top) + " at index " +
                       std::to_string((y == top).nonzero()[0][0].item<int64_t>()) +
                       " is out of range: 'classes' names " + std::to_string(d.classes.size()));
    d.numbered_classes = false;
  } else {
    for (int64_t k = 0; k <= top; ++k)
      d.classes.push_back(std::to_string(k));
    d.numbered_classes = true;
  }
  d.labels = y;

  if (x.dim() == 2) {
    if (x.scalar_type() == torch::kBool || x.is_complex())
      throw data_error(where + ": features of type " + std::string(c10::toString(x.scalar_type())) +
                       " are not read");
    auto f = x.to(torch::kFloat32).contiguous();
    auto finite = f.isfinite();
    if (!finite.all().item<bool>()) {
      auto at = (~finite).nonzero()[0];
      throw data_error(where + ": sample " + std::to_string(at[0].item<int64_t>()) + ", feature " +
                       std::to_string(at[1].item<int64_t>()) + " is not a finite float32 number");
    }
    check_features(f.size(1), options, where);
    d.samples = f;
    d.shape = sample_shape::features(f.size(1));
  } else {
    auto images = images_from_array(x, options.shape, where);
    d.samples = fit_images(images, options, where, r.warnings);
    d.shape = sample_shape::image(d.samples.size(1), d.samples.size(2), d.samples.size(3));
  }
  return r;
}

} // namespace

reader torch_reader() { return {"torch", holds, read}; }

} // namespace eg::data

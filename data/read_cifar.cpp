#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

// CIFAR-10 and CIFAR-100 in their binary batches, as the archives
// cifar-10-binary.tar.gz and cifar-100-binary.tar.gz unpack them (the
// directory itself, or its cifar-10-batches-bin/ or cifar-100-binary/):
//
//   CIFAR-10   data_batch_1.bin .. data_batch_5.bin (train), test_batch.bin;
//              records of 1 label byte and 3072 pixel bytes (3 x 32 x 32,
//              channel by channel, rows top to bottom); class names in
//              batches.meta.txt
//   CIFAR-100  train.bin, test.bin; records of 2 label bytes (coarse, fine)
//              and the same pixels; the fine label is the class; names in
//              fine_label_names.txt
//
// Every data_batch_<k>.bin present is read, in the order of k, so that data
// of one's own written in the format may come in any number of batches.

namespace eg::data {
namespace {

constexpr int64_t channels = 3, side = 32, pixels = channels * side * side;

struct layout {
  std::string dir;
  std::vector<std::string> files;
  int64_t label_bytes = 1;  ///< the class is the last of them
  std::string names_file;
};

std::vector<std::string> cifar10_train(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string head = "data_batch_", tail = ".bin";
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string k = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (k.size() > 6 || k.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (is_file(it->path().string()))
      found.emplace_back(std::stol(k), it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found)
    out.push_back(f.second);
  return out;
}

std::optional<layout> find_in(const std::string& dir, split which) {
  if (which == split::train) {
    auto batches = cifar10_train(dir);
    if (!batches.empty())
      return layout{dir, batches, 1, dir + "/batches.meta.txt"};
  } else if (is_file(dir + "/test_batch.bin")) {
    return layout{dir, {dir + "/test_batch.bin"}, 1, dir + "/batches.meta.txt"};
  }
  const std::string f = dir + (which == split::train ? "/train.bin" : "/test.bin");
  if (is_file(f))
    return layout{dir, {f}, 2, dir + "/fine_label_names.txt"};
  return std::nullopt;
}

std::optional<layout> find(const std::string& dir, split which) {
  if (auto l = find_in(dir, which))
    return l;
  for (const char* sub : {"/cifar-10-batches-bin", "/cifar-100-binary"})
    if (auto l = find_in(dir + sub, which))
      return l;
  return std::nullopt;
}

bool holds(const std::string& dir, split which) { return find(dir, which).has_value(); }

read_result read(const std::string& dir, const read_options& options) {
  if (!is_directory(dir))
    throw data_error("data directory '" + dir + "' does not exist");
  auto l = find(dir, options.which);
  if (!l)
    throw data_error("'" + dir + "' holds no CIFAR " + to_string(options.which) +
                     " batches (data_batch_<k>.bin / test_batch.bin, or train.bin / test.bin)");
  const int64_t record = l->label_bytes + pixels;

  // Sizes first: a truncated file is refused before anything is read.
  int64_t total = 0;
  std::vector<int64_t> counts;
  for (auto& f : l->files) {
    std::error_code ec;
    const auto size = static_cast<int64_t>(std::filesystem::file_size(f, ec));
    if (ec)
      throw data_error("'" + f + "': " + ec.message());
    if (size == 0)
      throw data_error("'" + f + "' is empty");
    if (size % record != 0)
      throw data_error("'" + f + "': " + std::to_string(size) + " bytes is not a whole number of " +
                       std::to_string(record) + "-byte " +
                       (l->label_bytes == 1 ? "CIFAR-10" : "CIFAR-100") +
                       " records (truncated, or not this format)");
    counts.push_back(size / record);
    total += size / record;
  }

  const auto names = read_lines(l->names_file);
  read_result r;
  auto& d = r.data;
  torch::Tensor samples, labels;
  try {
    samples = torch::empty({total, channels, side, side}, torch::kUInt8);
    labels = torch::empty({total}, torch::kInt64);
  } catch (const c10::Error&) {
    throw data_error("'" + l->dir + "': cannot allocate " + std::to_string(total) + " images");
  }
  uint8_t* out = samples.data_ptr<uint8_t>();
  int64_t* lab = labels.data_ptr<int64_t>();
  int64_t top = -1, at = 0;
  const int64_t chunk = 1024;
  std::vector<uint8_t> buf(static_cast<size_t>(chunk * record));
  for (size_t i = 0; i < l->files.size(); ++i) {
    const auto& f = l->files[i];
    std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(f.c_str(), "rb"), std::fclose);
    if (!in)
      throw data_error("'" + f + "': cannot open: " + std::strerror(errno));
    for (int64_t done = 0; done < counts[i];) {
      const int64_t n = std::min(chunk, counts[i] - done);
      if (std::fread(buf.data(), static_cast<size_t>(record), static_cast<size_t>(n), in.get()) !=
          static_cast<size_t>(n))
        throw data_error("'" + f + "': read error after record " + std::to_string(done));
      for (int64_t k = 0; k < n; ++k, ++at) {
        const uint8_t* rec = buf.data() + k * record;
        const int64_t label = rec[l->label_bytes - 1];
        if (!names.empty() && label >= static_cast<int64_t>(names.size()))
          throw data_error("'" + f + "': record " + std::to_string(done + k) + " has label " +
                           std::to_string(label) + ", '" + l->names_file + "' names " +
                           std::to_string(names.size()) + " classes");
        lab[at] = label;
        top = std::max(top, label);
        std::memcpy(out + at * pixels, rec + l->label_bytes, static_cast<size_t>(pixels));
      }
      done += n;
    }
  }

  if (!names.empty()) {
    d.classes = names;
    d.numbered_classes = false;
  } else {
    for (int64_t k = 0; k <= top; ++k)
      d.classes.push_back(std::to_string(k));
    d.numbered_classes = true;
  }
  d.samples = fit_images(samples, options, "'" + l->files.front() + "'", r.warnings);
  d.labels = labels;
  d.shape = sample_shape::image(d.samples.size(1), d.samples.size(2), d.samples.size(3));
  return r;
}

} // namespace

reader cifar_reader() { return {"cifar", holds, read}; }

} // namespace eg::data

#include "data/readers.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

namespace eg::data {

const char* to_string(split s) { return s == split::train ? "train" : "test"; }

const std::vector<reader>& readers() {
  // The order "auto" tries them in: the formats whose files are named first.
  static const std::vector<reader> all = {idx_reader(),  cifar_reader(), npy_reader(),
                                          torch_reader(), csv_reader(),   image_folder_reader()};
  return all;
}

std::vector<std::string> formats() {
  std::vector<std::string> out;
  for (auto& r : readers())
    out.push_back(r.format);
  out.push_back("auto");
  return out;
}

const reader& reader_for(const std::string& format) {
  for (auto& r : readers())
    if (r.format == format)
      return r;
  std::string known;
  for (auto& f : formats())
    known += (known.empty() ? "" : ", ") + f;
  throw data_error("unknown data format '" + format + "' (known: " + known + ")");
}

std::string detect_format(const std::string& dir, split which) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw data_error("data directory '" + dir + "' does not exist");
  for (auto& r : readers())
    if (r.holds(dir, which))
      return r.format;
  std::string held;
  size_t shown = 0;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    if (shown++ == 8) {
      held += ", ...";
      break;
    }
    held += (held.empty() ? "" : ", ") + e.path().filename().string();
  }
  throw data_error("'" + dir + "' holds no " + to_string(which) +
                   " data of a known format (it holds: " + (held.empty() ? "nothing" : held) +
                   ")");
}

namespace {

/// Class names from `dir/classes.txt` (one a line), where the data's labels
/// are numbers; empty where there is no such file.
std::vector<std::string> classes_file(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "classes.txt");
  std::vector<std::string> out;
  std::string line;
  while (in && std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.pop_back();
    if (!line.empty())
      out.push_back(line);
  }
  return out;
}

} // namespace

read_result read_split(const std::string& dir, const std::string& format,
                       const read_options& options) {
  const std::string f = format == "auto" ? detect_format(dir, options.which) : format;
  auto& r = reader_for(f);
  if (!r.holds(dir, options.which)) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec))
      throw data_error("data directory '" + dir + "' does not exist");
    throw data_error("'" + dir + "' holds no " + to_string(options.which) + " data in the " + f +
                     " format");
  }
  auto out = r.read(dir, options);
  auto& d = out.data;
  if (d.numbered_classes) {
    auto named = classes_file(dir);
    if (!named.empty()) {
      if (named.size() < d.classes.size())
        throw data_error("'" + dir + "/classes.txt' names " + std::to_string(named.size()) +
                         " classes, the labels go up to " + std::to_string(d.classes.size() - 1));
      d.classes = named;
    }
  }
  const std::string where = "'" + dir + "' (" + to_string(options.which) + ", " + f + ")";
  if (!options.classes.empty()) {
    if (d.numbered_classes) {
      if (d.num_classes() > static_cast<int64_t>(options.classes.size()))
        throw data_error(where + ": label " + std::to_string(d.num_classes() - 1) +
                         " is outside the cluster's " + std::to_string(options.classes.size()) +
                         " classes");
      d.classes = options.classes;
    } else {
      d.relabel(options.classes, where);
    }
  }
  if (options.limit > 0)
    d = d.head(options.limit);
  d.check(where);
  return out;
}

} // namespace eg::data

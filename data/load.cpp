#include "data/load.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

namespace eg::data {
namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

/// Reads the one split a directory holds (train/ or test/ of a split
/// layout, or a test_dir): the format's `which` files where it has them,
/// else its other split's.
read_result read_part(const std::string& dir, const std::string& format, read_options o,
                      split prefer) {
  const split other = prefer == split::train ? split::test : split::train;
  auto holds = [&](split w) {
    if (format == "auto") {
      try {
        detect_format(dir, w);
        return true;
      } catch (const data_error&) {
        return false;
      }
    }
    return reader_for(format).holds(dir, w);
  };
  o.which = holds(prefer) || !holds(other) ? prefer : other;
  return read_split(dir, format, o);
}

void take(node_data& out, read_result& r) {
  out.skipped += r.skipped;
  for (auto& w : r.warnings)
    out.warnings.push_back(std::move(w));
}

} // namespace

node_data load(const source& src, const read_options& options, int64_t train_limit,
               int64_t test_limit, uint64_t seed) {
  if (src.dir.empty())
    throw data_error("no data directory given");
  if (!is_dir(src.dir))
    throw data_error("data directory '" + src.dir + "' does not exist or is not a directory");
  node_data out;
  read_options o = options;
  const fs::path root(src.dir);
  const bool layout = is_dir(root / "train");
  std::optional<read_result> test;
  if (layout) {
    o.limit = train_limit;
    auto train = read_part((root / "train").string(), src.format, o, split::train);
    take(out, train);
    out.train = std::move(train.data);
  } else {
    o.which = split::train;
    o.limit = train_limit;
    auto train = read_split(src.dir, src.format, o);
    take(out, train);
    out.train = std::move(train.data);
  }
  // The classes and shape of the test data are the training data's.
  read_options t = options;
  t.classes = out.train.classes;
  if (!out.train.images())
    t.shape.reset();
  else
    t.shape = out.train.shape;
  t.limit = test_limit;
  if (!src.test_dir.empty()) {
    test = read_part(src.test_dir, src.format, t, split::test);
    out.test_from = "test_dir '" + src.test_dir + "'";
  } else if (layout && (is_dir(root / "test") || is_dir(root / "validation"))) {
    const auto dir = is_dir(root / "test") ? root / "test" : root / "validation";
    test = read_part(dir.string(), src.format, t, split::test);
    out.test_from = "'" + dir.string() + "'";
  } else if (!layout) {
    const std::string format =
      src.format == "auto" ? detect_format(src.dir, split::train) : src.format;
    // An image folder has no test files of its own: root/<class>/ is all
    // training data (its test split is a test/ folder beside train/).
    if (format != "image-folder" && reader_for(format).holds(src.dir, split::test)) {
      t.which = split::test;
      test = read_split(src.dir, format, t);
      out.test_from = "the " + format + " test files of '" + src.dir + "'";
    }
  }
  if (test) {
    take(out, *test);
    out.test = std::move(test->data);
    return out;
  }
  if (src.validation > 0) {
    const int64_t n = out.train.size();
    const auto held = static_cast<int64_t>(std::llround(src.validation * static_cast<double>(n)));
    if (held < 1 || held >= n)
      throw data_error("'" + src.dir + "': holding out " + std::to_string(src.validation) +
                       " of " + std::to_string(n) + " samples leaves no test or no training data");
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> test_idx(order.begin(), order.begin() + held);
    std::vector<int64_t> train_idx(order.begin() + held, order.end());
    std::sort(test_idx.begin(), test_idx.end());
    std::sort(train_idx.begin(), train_idx.end());
    out.test = out.train.subset(test_idx);
    if (test_limit > 0)
      *out.test = out.test->head(test_limit);
    out.train = out.train.subset(train_idx);
    out.test_from = std::to_string(held) + " samples (" +
                    std::to_string(static_cast<int>(std::lround(src.validation * 100))) +
                    "%) held out of '" + src.dir + "'";
    return out;
  }
  out.test_from = "none: '" + src.dir + "' has no test split, and neither test_dir nor "
                  "validation is set";
  return out;
}

} // namespace eg::data

#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

// Numeric features and a label column in CSV text: <dir>/train.csv and
// <dir>/test.csv (or validation.csv), or the one *.csv of a directory (or a
// .csv file named itself) for train.
//
// - Fields are separated by commas (or semicolons or tabs, where the first
//   row has no comma), may be quoted ("a, b", "" for a quote); blank lines
//   and lines starting with # are skipped.
// - Header: the first row is one when a field of it that is not the label's
//   is not a number (or when the label column is given by name). A first
//   empty header field (pandas' index column) leaves that column out.
// - scikit-learn's layout (its bundled iris.csv, wine_data.csv, ...): a
//   first row of the row count, the feature count and the class names, then
//   rows of features and the class number.
// - Label column: options.label_column by name or number (from 0); else a
//   column named label, class, target or y (any case); else the last.
// - Labels: all integers (>= 0): numbered classes 0..max; else names
//   (classes sorted by name). Non-integer numbers are refused: these are
//   classifiers.
//
// The parser is this file's own: the CSV libraries in Debian's archive do
// not fit (fast-cpp-csv-parser fixes the column count at compile time,
// libcsv is a C callback parser that knows no lines for errors), and the
// errors must name the file and line.

namespace eg::data {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// The CSV files of `dir` other than train.csv, test.csv and validation.csv.
std::vector<std::string> other_csvs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name[0] == '.' || !ends_with(name, ".csv") || name == "train.csv" || name == "test.csv" ||
        name == "validation.csv")
      continue;
    if (is_file(it->path().string()))
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// The file of the split; empty where there is none. Throws data_error
/// where the choice is not clear.
std::string csv_file(const std::string& dir, split which, bool strict) {
  if (is_file(dir))
    return which == split::train && ends_with(dir, ".csv") ? dir : std::string();
  if (which == split::test) {
    for (const char* name : {"/test.csv", "/validation.csv"})
      if (is_file(dir + name))
        return dir + name;
    return {};
  }
  if (is_file(dir + "/train.csv"))
    return dir + "/train.csv";
  auto others = other_csvs(dir);
  if (others.size() == 1)
    return others.front();
  if (others.size() > 1) {
    if (strict)
      throw data_error("'" + dir + "' holds several CSV files (" + name_some(others, 4) +
                       "): name the training data train.csv (and the test data test.csv)");
    return others.front();
  }
  return {};
}

bool holds(const std::string& dir, split which) { return !csv_file(dir, which, false).empty(); }

/// A number (double or integer) filling the whole field (a leading + allowed).
template <class T>
bool parse_whole(std::string_view s, T& v) {
  if (!s.empty() && s[0] == '+')
    s.remove_prefix(1);
  if (s.empty())
    return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}

bool parse_number(std::string_view s, double& v) { return parse_whole(s, v); }
bool parse_integer(std::string_view s, int64_t& v) { return parse_whole(s, v); }

bool is_number(const std::string& s) {
  double v = 0;
  return parse_number(s, v);
}

std::string lower(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Rows of a CSV text, one at a time, with their line numbers.
class csv_rows {
public:
  csv_rows(const std::string& path, std::vector<char> text) : path_(path), text_(std::move(text)) {
    p_ = text_.data();
    end_ = p_ + text_.size();
    if (text_.size() >= 3 && static_cast<unsigned char>(p_[0]) == 0xEF &&
        static_cast<unsigned char>(p_[1]) == 0xBB && static_cast<unsigned char>(p_[2]) == 0xBF)
      p_ += 3;  // UTF-8 byte order mark
    // The separator: a comma, else what the first row has of ; and tab.
    const char* q = p_;
    while (q < end_ && *q != '\n')
      ++q;
    const std::string_view first(p_, static_cast<size_t>(q - p_));
    if (first.find(',') == std::string_view::npos) {
      if (first.find(';') != std::string_view::npos)
        sep_ = ';';
      else if (first.find('\t') != std::string_view::npos)
        sep_ = '\t';
    }
  }

  /// The next row's fields (trimmed, unquoted); false at the end.
  bool next(std::vector<std::string>& fields, int64_t& line) {
    for (;;) {
      if (p_ >= end_)
        return false;
      line = line_;
      // Blank lines and comments.
      const char* q = p_;
      while (q < end_ && (*q == ' ' || *q == '\t' || *q == '\r'))
        ++q;
      if (q >= end_ || *q == '\n' || *q == '#') {
        while (q < end_ && *q != '\n')
          ++q;
        p_ = q < end_ ? q + 1 : q;
        ++line_;
        continue;
      }
      fields.clear();
      for (;;) {
        fields.emplace_back();
        field(fields.back());
        if (p_ < end_ && *p_ == sep_) {
          ++p_;
          continue;
        }
        break;
      }
      if (p_ < end_ && *p_ != '\n' && *p_ != '\r')
        throw data_error("'" + path_ + "' line " + std::to_string(line) +
                         ": text after a quoted field");
      while (p_ < end_ && *p_ != '\n')
        ++p_;
      if (p_ < end_)
        ++p_;
      ++line_;
      return true;
    }
  }

private:
  void field(std::string& out) {
    auto blank = [&](char c) { return (c == ' ' || c == '\t' || c == '\r') && c != sep_; };
    while (p_ < end_ && blank(*p_))
      ++p_;
    if (p_ < end_ && *p_ == '"') {
      const int64_t opened = line_;
      ++p_;
      for (;;) {
        if (p_ >= end_)
          throw data_error("'" + path_ + "' line " + std::to_string(opened) +
                           ": a quoted field is not closed");
        if (*p_ == '"') {
          if (p_ + 1 < end_ && p_[1] == '"') {
            out.push_back('"');
            p_ += 2;
            continue;
          }
          ++p_;
          break;
        }
        if (*p_ == '\n')
          ++line_;
        out.push_back(*p_++);
      }
      while (p_ < end_ && blank(*p_))
        ++p_;
      return;
    }
    const char* b = p_;
    while (p_ < end_ && *p_ != sep_ && *p_ != '\n')
      ++p_;
    const char* e = p_;
    while (e > b && blank(e[-1]))
      --e;
    out.assign(b, e);
  }

  std::string path_;
  std::vector<char> text_;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  int64_t line_ = 1;
  char sep_ = ',';
};

/// The label column given by number, if it is one.
std::optional<int64_t> column_number(const std::string& s) {
  int64_t v = 0;
  if (!s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos &&
      parse_integer(s, v))
    return v;
  return std::nullopt;
}

/// scikit-learn's layout: "rows,features,name,name,...", then rows of
/// features + 1 fields. Its class names and row count (-1: not this layout).
std::pair<std::vector<std::string>, int64_t> sklearn_layout(const std::vector<std::string>& first,
                                                            const std::vector<std::string>& second,
                                                            bool has_second) {
  int64_t count = 0, features = 0;
  bool names = first.size() >= 3;
  for (size_t i = 2; names && i < first.size(); ++i)
    names = !first[i].empty() && !is_number(first[i]);
  if (names && parse_integer(first[0], count) && parse_integer(first[1], features) &&
      count >= 0 && features >= 1 && has_second &&
      static_cast<int64_t>(second.size()) == features + 1)
    return {std::vector<std::string>(first.begin() + 2, first.end()), count};
  return {{}, -1};
}

/// The label column: given by number or name (a name matched exactly, then
/// ignoring case), else a column named label, class, target or y, else the
/// last one.
size_t label_column_of(const std::string& path, const read_options& options,
                       const std::optional<int64_t>& by_number, bool by_name,
                       const std::vector<std::string>& names, size_t width) {
  size_t label = width - 1;
  if (by_number) {
    if (*by_number >= static_cast<int64_t>(width))
      throw data_error("'" + path + "': label column " + options.label_column + " is beyond its " +
                       std::to_string(width) + " columns (numbered from 0)");
    label = static_cast<size_t>(*by_number);
  } else if (by_name) {
    auto at = std::find(names.begin(), names.end(), options.label_column);
    if (at == names.end())
      at = std::find_if(names.begin(), names.end(),
                        [&](const std::string& n) { return lower(n) == lower(options.label_column); });
    if (at == names.end())
      throw data_error("'" + path + "' has no column named '" + options.label_column +
                       "' (its columns: " + name_some(names, 12) + ")");
    label = static_cast<size_t>(at - names.begin());
  } else if (!names.empty()) {
    for (const char* known : {"label", "class", "target", "y"}) {
      auto at = std::find_if(names.begin(), names.end(),
                             [&](const std::string& n) { return lower(n) == known; });
      if (at != names.end()) {
        label = static_cast<size_t>(at - names.begin());
        break;
      }
    }
  }
  return label;
}

/// The labels as class numbers, and `d`'s classes: whole numbers are the
/// classes themselves (named by scikit-learn's first row where it has one),
/// anything else is a class name, numbered in sorted order.
torch::Tensor label_classes(const std::string& path, const std::vector<std::string>& labels,
                            const std::vector<int64_t>& label_lines,
                            const std::vector<std::string>& sklearn_names, dataset& d) {
  const auto n = static_cast<int64_t>(labels.size());
  auto out = torch::empty({n}, torch::kInt64);
  int64_t* lab = out.data_ptr<int64_t>();
  bool integers = true, numbers = true;
  for (int64_t i = 0; i < n && integers; ++i) {
    int64_t v = 0;
    integers = parse_integer(labels[static_cast<size_t>(i)], v);
  }
  if (integers) {
    int64_t top = -1;
    for (int64_t i = 0; i < n; ++i) {
      parse_integer(labels[static_cast<size_t>(i)], lab[i]);
      if (lab[i] < 0)
        throw data_error("'" + path + "' line " + std::to_string(label_lines[static_cast<size_t>(i)]) +
                         ": label " + std::to_string(lab[i]) + " is negative");
      if (!sklearn_names.empty() && lab[i] >= static_cast<int64_t>(sklearn_names.size()))
        throw data_error("'" + path + "' line " + std::to_string(label_lines[static_cast<size_t>(i)]) +
                         ": label " + std::to_string(lab[i]) + " is out of range: the first row names " +
                         std::to_string(sklearn_names.size()) + " classes");
      top = std::max(top, lab[i]);
    }
    if (!sklearn_names.empty()) {
      d.classes = sklearn_names;
      d.numbered_classes = false;
    } else {
      for (int64_t k = 0; k <= top; ++k)
        d.classes.push_back(std::to_string(k));
      d.numbered_classes = true;
    }
  } else {
    if (!sklearn_names.empty())
      throw data_error("'" + path + "': scikit-learn's layout numbers its classes, label '" +
                       labels.front() + "' is not a number");
    for (int64_t i = 0; i < n && numbers; ++i)
      numbers = is_number(labels[static_cast<size_t>(i)]);
    if (numbers) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = 0;
        if (!parse_integer(labels[static_cast<size_t>(i)], v))
          throw data_error("'" + path + "' line " + std::to_string(label_lines[static_cast<size_t>(i)]) +
                           ": label " + labels[static_cast<size_t>(i)] +
                           " is not a whole number: labels are class numbers or names (a "
                           "classifier is trained)");
      }
    }
    std::map<std::string, int64_t> index;
    for (auto& l : labels)
      index.emplace(l, 0);
    for (auto& [name, k] : index) {
      k = static_cast<int64_t>(d.classes.size());
      d.classes.push_back(name);
    }
    for (int64_t i = 0; i < n; ++i)
      lab[i] = index[labels[static_cast<size_t>(i)]];
    d.numbered_classes = false;
  }
  return out;
}

read_result read(const std::string& dir, const read_options& options) {
  if (!is_directory(dir) && !is_file(dir))
    throw data_error("data directory '" + dir + "' does not exist");
  const std::string path = csv_file(dir, options.which, true);
  if (path.empty())
    throw data_error("'" + dir + "' holds no " + to_string(options.which) + " CSV file (" +
                     (options.which == split::train ? "train.csv, or one *.csv"
                                                    : "test.csv or validation.csv") +
                     ")");
  csv_rows rows(path, read_file(path));
  std::vector<std::string> first, second;
  int64_t first_line = 0, second_line = 0;
  if (!rows.next(first, first_line))
    throw data_error("'" + path + "' holds no rows");
  const bool has_second = rows.next(second, second_line);

  const auto by_number = column_number(options.label_column);
  const bool by_name = !options.label_column.empty() && !by_number;
  read_result r;

  const auto layout = sklearn_layout(first, second, has_second);
  const std::vector<std::string>& sklearn_names = layout.first;
  const int64_t sklearn_rows = layout.second;

  bool header = false;
  size_t width = first.size();
  bool index_column = false;
  std::vector<std::string> names;  // column names where there is a header
  if (sklearn_rows >= 0) {
    header = true;
    if (by_name)
      throw data_error("'" + path + "' (scikit-learn's layout) has no column names: give the "
                       "label column by number");
    width = second.size();
  } else {
    const size_t guess = by_number ? static_cast<size_t>(*by_number) : first.size() - 1;
    for (size_t i = 0; i < first.size(); ++i)
      if (i != guess && !is_number(first[i]))
        header = true;
    if (by_name)
      header = true;
    if (header) {
      names = first;
      index_column = names.size() > 1 && (names[0].empty() || names[0] == "Unnamed: 0");
    }
  }
  if (header && !has_second)
    throw data_error("'" + path + "' holds a header and no data rows");

  const size_t label = label_column_of(path, options, by_number, by_name, names, width);
  if (index_column && label == 0)
    index_column = false;
  const int64_t features = static_cast<int64_t>(width) - 1 - (index_column ? 1 : 0);
  if (features < 1)
    throw data_error("'" + path + "': " + std::to_string(width) +
                     " columns leave no feature besides the label");
  if (index_column)
    r.warnings.push_back("'" + path + "': its first column has no name (an index written by "
                         "pandas) and is left out");

  std::vector<float> values;
  std::vector<std::string> labels;
  std::vector<int64_t> label_lines;
  const std::string width_from =
    sklearn_rows >= 0 ? "the first data row" : header ? "the header" : "the first row";
  auto take = [&](const std::vector<std::string>& f, int64_t line) {
    if (f.size() != width)
      throw data_error("'" + path + "' line " + std::to_string(line) + ": " +
                       std::to_string(f.size()) + " fields, " + width_from + " has " +
                       std::to_string(width));
    for (size_t i = 0; i < width; ++i) {
      if (i == label) {
        if (f[i].empty())
          throw data_error("'" + path + "' line " + std::to_string(line) + ": no label (column " +
                           std::to_string(i) + ")");
        labels.push_back(f[i]);
        label_lines.push_back(line);
        continue;
      }
      if (index_column && i == 0)
        continue;
      double v = 0;
      if (!parse_number(f[i], v) || !std::isfinite(v) || std::fabs(v) > 3.4e38) {
        const std::string column =
          "column " + std::to_string(i) + (names.empty() ? "" : " ('" + names[i] + "')");
        throw data_error("'" + path + "' line " + std::to_string(line) + ", " + column + ": " +
                         (f[i].empty() ? std::string("no value")
                          : is_number(f[i])
                            ? f[i] + " is not a finite float32 number"
                            : "'" + f[i] + "' is not a number"));
      }
      values.push_back(static_cast<float>(v));
    }
  };
  if (!header)
    take(first, first_line);
  if (has_second) {
    take(second, second_line);
    std::vector<std::string> f;
    int64_t line = 0;
    while (rows.next(f, line))
      take(f, line);
  }

  const auto n = static_cast<int64_t>(labels.size());
  if (sklearn_rows >= 0 && sklearn_rows != n)
    throw data_error("'" + path + "': its first row says " + std::to_string(sklearn_rows) +
                     " rows, it holds " + std::to_string(n));

  auto& d = r.data;
  auto out = label_classes(path, labels, label_lines, sklearn_names, d);
  check_features(features, options, "'" + path + "'");
  d.samples = torch::from_blob(values.data(), {n, features}, torch::kFloat32).clone();
  d.labels = out;
  d.shape = sample_shape::features(features);
  return r;
}

} // namespace

reader csv_reader() { return {"csv", holds, read}; }

} // namespace eg::data

#include "data/dataset.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace eg::data {

std::vector<int64_t> sample_shape::dims() const {
  if (flat)
    return {channels};
  return {channels, height, width};
}

std::string sample_shape::to_string() const {
  if (flat)
    return std::to_string(channels) + " features";
  return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
}

sample_shape sample_shape::parse(const std::string& text) {
  auto fail = [&]() -> sample_shape {
    throw data_error("sample shape '" + text +
                     "' is neither CxHxW (e.g. 3x32x32) nor a number of features (e.g. \"13 "
                     "features\")");
  };
  std::vector<int64_t> parts;
  std::string rest = text;
  const std::string suffix = " features";
  bool features = false;
  if (rest.size() > suffix.size() && rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0) {
    rest.resize(rest.size() - suffix.size());
    features = true;
  }
  std::stringstream in(rest);
  std::string piece;
  while (std::getline(in, piece, 'x')) {
    if (piece.empty() || piece.find_first_not_of("0123456789") != std::string::npos ||
        piece.size() > 9)
      return fail();
    parts.push_back(std::stoll(piece));
    if (parts.back() <= 0)
      return fail();
  }
  if (parts.size() == 1)
    return sample_shape::features(parts[0]);
  if (parts.size() == 3 && !features)
    return sample_shape::image(parts[0], parts[1], parts[2]);
  return fail();
}

std::string signature(const sample_shape& shape, const std::vector<std::string>& classes) {
  std::string s = shape.to_string() + "; " + std::to_string(classes.size()) + " classes:";
  for (size_t i = 0; i < classes.size(); ++i)
    s += (i ? ", " : " ") + classes[i];
  return s;
}

bool operator==(const sample_shape& a, const sample_shape& b) {
  return a.flat == b.flat && a.channels == b.channels && a.height == b.height &&
         a.width == b.width;
}

moments& moments::operator+=(const moments& o) {
  if (sum.empty()) {
    sum.assign(o.sum.size(), 0.0);
    sum_squares.assign(o.sum_squares.size(), 0.0);
  }
  if (o.sum.size() != sum.size())
    throw data_error("statistics of " + std::to_string(o.sum.size()) +
                     " channels cannot be added to statistics of " + std::to_string(sum.size()));
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] += o.sum[i];
    sum_squares[i] += o.sum_squares[i];
  }
  count += o.count;
  return *this;
}

normalisation moments::finish() const {
  if (sum.empty() || count <= 0)
    throw data_error("no samples to compute the normalisation from");
  normalisation n;
  for (size_t i = 0; i < sum.size(); ++i) {
    const double mean = sum[i] / count;
    const double var = std::max(0.0, sum_squares[i] / count - mean * mean);
    const double sd = std::sqrt(var);
    n.mean.push_back(mean);
    n.std.push_back(sd > 1e-8 ? sd : 1.0);
  }
  return n;
}

namespace {

std::string numbers(const std::vector<double>& v) {
  std::string out;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, " %.17g", x);
    out += buf;
  }
  return out;
}

/// "name v1 v2 ..." -> the values; throws data_error naming `what`.
std::vector<double> parse_numbers(const std::string& part, const std::string& name,
                                  const std::string& what) {
  std::istringstream in(part);
  std::string word;
  if (!(in >> word) || word != name)
    throw data_error(what + ": '" + part + "' does not begin with '" + name + "'");
  std::vector<double> out;
  while (in >> word) {
    char* end = nullptr;
    const double x = std::strtod(word.c_str(), &end);
    if (end == word.c_str() || *end != '\0' || !std::isfinite(x))
      throw data_error(what + ": '" + word + "' is not a finite number");
    out.push_back(x);
  }
  return out;
}

std::vector<std::string> split_parts(const std::string& text, size_t expected,
                                     const std::string& what) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    const auto semi = text.find(';', at);
    parts.push_back(text.substr(at, semi == std::string::npos ? std::string::npos : semi - at));
    if (semi == std::string::npos)
      break;
    at = semi + 1;
  }
  if (parts.size() != expected)
    throw data_error(what + ": " + std::to_string(parts.size()) + " parts in '" + text.substr(0, 80) +
                     "', not " + std::to_string(expected));
  return parts;
}

} // namespace

std::string to_text(const moments& m) {
  return "count" + numbers({m.count}) + "; sum" + numbers(m.sum) + "; squares" +
         numbers(m.sum_squares);
}

moments parse_moments(const std::string& text) {
  const std::string what = "data statistics";
  auto parts = split_parts(text, 3, what);
  auto count = parse_numbers(parts[0], "count", what);
  moments m;
  m.sum = parse_numbers(parts[1], "sum", what);
  m.sum_squares = parse_numbers(parts[2], "squares", what);
  if (count.size() != 1 || !(count[0] > 0))
    throw data_error(what + ": the count must be one positive number");
  m.count = count[0];
  if (m.sum.empty() || m.sum.size() != m.sum_squares.size())
    throw data_error(what + ": " + std::to_string(m.sum.size()) + " sums and " +
                     std::to_string(m.sum_squares.size()) + " sums of squares");
  return m;
}

std::string to_text(const normalisation& n) {
  return "mean" + numbers(n.mean) + "; std" + numbers(n.std);
}

normalisation parse_normalisation(const std::string& text) {
  const std::string what = "normalisation";
  auto parts = split_parts(text, 2, what);
  normalisation n;
  n.mean = parse_numbers(parts[0], "mean", what);
  n.std = parse_numbers(parts[1], "std", what);
  if (n.mean.empty() || n.mean.size() != n.std.size())
    throw data_error(what + ": " + std::to_string(n.mean.size()) + " means and " +
                     std::to_string(n.std.size()) + " standard deviations");
  for (double sd : n.std)
    if (!(sd > 0))
      throw data_error(what + ": a standard deviation of " + std::to_string(sd));
  return n;
}

bool operator==(const normalisation& a, const normalisation& b) {
  return a.mean == b.mean && a.std == b.std;
}

namespace {

/// float32 values as the model sees them before normalisation, in a tensor
/// of their own (normalised in place next: never the data set's memory).
torch::Tensor as_values(const dataset&, const torch::Tensor& raw) {
  if (raw.scalar_type() == torch::kUInt8)  // pixels
    return raw.to(torch::kFloat32).div_(255.0);
  return raw.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
}

} // namespace

std::pair<torch::Tensor, torch::Tensor> dataset::norm_tensors(torch::Device device) const {
  if (norm.empty())
    return {};
  const auto channels = static_cast<int64_t>(norm.mean.size());
  auto mean = torch::tensor(std::vector<float>(norm.mean.begin(), norm.mean.end()));
  auto sd = torch::tensor(std::vector<float>(norm.std.begin(), norm.std.end()));
  const std::vector<int64_t> view =
    images() ? std::vector<int64_t>{1, channels, 1, 1} : std::vector<int64_t>{1, channels};
  return {mean.view(view).to(device), sd.view(view).to(device)};
}

torch::Tensor dataset::input(const torch::Tensor& raw,
                             const std::pair<torch::Tensor, torch::Tensor>& norm_on_device) const {
  auto x = as_values(*this, raw);
  if (norm_on_device.first.defined())
    x.sub_(norm_on_device.first).div_(norm_on_device.second);
  return x;
}

torch::Tensor dataset::batch(const torch::Tensor& indices) const {
  return input(samples.index_select(0, indices), norm_tensors(torch::kCPU));
}

torch::Tensor dataset::range(int64_t begin, int64_t end) const {
  begin = std::clamp<int64_t>(begin, 0, size());
  end = std::clamp<int64_t>(end, begin, size());
  return input(samples.narrow(0, begin, end - begin), norm_tensors(torch::kCPU));
}

std::vector<int64_t> dataset::label_vector() const {
  if (!labels.defined())
    return {};
  auto l = labels.contiguous();
  return std::vector<int64_t>(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
}

std::vector<int64_t> dataset::class_counts() const {
  std::vector<int64_t> counts(classes.size(), 0);
  for (auto l : label_vector())
    if (l >= 0 && l < static_cast<int64_t>(counts.size()))
      ++counts[static_cast<size_t>(l)];
  return counts;
}

moments dataset::local_moments() const {
  moments m;
  const int64_t c = shape.channels;
  m.sum.assign(static_cast<size_t>(c), 0.0);
  m.sum_squares.assign(static_cast<size_t>(c), 0.0);
  const int64_t n = size();
  if (n == 0)
    return m;
  // In chunks, in float64, so that 60,000 images cost no float copy of them all.
  const int64_t chunk = 4096;
  for (int64_t b = 0; b < n; b += chunk) {
    auto x = as_values(*this, samples.narrow(0, b, std::min(chunk, n - b))).to(torch::kFloat64);
    auto per = images() ? x.transpose(0, 1).reshape({c, -1}) : x.transpose(0, 1);
    auto s = per.sum(1).contiguous();
    auto q = per.pow(2).sum(1).contiguous();
    for (int64_t i = 0; i < c; ++i) {
      m.sum[static_cast<size_t>(i)] += s.data_ptr<double>()[i];
      m.sum_squares[static_cast<size_t>(i)] += q.data_ptr<double>()[i];
    }
  }
  m.count = static_cast<double>(n) * static_cast<double>(shape.height * shape.width);
  return m;
}

dataset dataset::head(int64_t n) const {
  dataset d = *this;
  if (n > 0 && n < size()) {
    d.samples = samples.narrow(0, 0, n);
    d.labels = labels.narrow(0, 0, n);
  }
  return d;
}

dataset dataset::subset(const std::vector<int64_t>& indices) const {
  dataset d = *this;
  auto idx = torch::tensor(indices, torch::kInt64);
  d.samples = samples.index_select(0, idx);
  d.labels = labels.index_select(0, idx);
  return d;
}

void dataset::relabel(const std::vector<std::string>& to, const std::string& where) {
  std::vector<int64_t> map(classes.size(), -1);
  for (size_t i = 0; i < classes.size(); ++i) {
    auto f = std::find(to.begin(), to.end(), classes[i]);
    if (f != to.end())
      map[i] = f - to.begin();
  }
  auto counts = class_counts();
  for (size_t i = 0; i < classes.size(); ++i)
    if (map[i] < 0 && counts[i] > 0)
      throw data_error(where + ": class '" + classes[i] + "' (" + std::to_string(counts[i]) +
                       " samples) is not in the cluster's class list");
  auto l = labels.contiguous().clone();
  auto* p = l.data_ptr<int64_t>();
  for (int64_t i = 0; i < l.numel(); ++i)
    p[i] = map[static_cast<size_t>(p[i])];
  labels = l;
  classes = to;
}

std::shared_ptr<const dataset> with_normalisation(std::shared_ptr<const dataset> d,
                                                  const normalisation& norm) {
  if (norm == d->norm)
    return d;
  if (!norm.empty() && static_cast<int64_t>(norm.mean.size()) != d->shape.channels)
    throw data_error(std::to_string(norm.mean.size()) + " channels for data of " +
                     d->shape.to_string());
  auto renormalised = std::make_shared<dataset>(*d);
  renormalised->norm = norm;
  return renormalised;
}

dataset concat(const std::vector<dataset>& parts, const std::vector<std::string>& where) {
  if (parts.empty())
    throw data_error("no data to join");
  const auto& first = parts.front();
  std::vector<torch::Tensor> samples, labels;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    const std::string here = i < where.size() ? where[i] : "part " + std::to_string(i);
    const std::string there = where.empty() ? "part 0" : where.front();
    if (!(p.shape == first.shape))
      throw data_error(here + " holds samples of " + p.shape.to_string() + ", " + there +
                       " of " + first.shape.to_string());
    if (p.classes != first.classes)
      throw data_error(here + " has other classes than " + there);
    if (p.size() > 0 && first.size() > 0 && p.samples.scalar_type() != first.samples.scalar_type())
      throw data_error(here + " holds " + std::string(c10::toString(p.samples.scalar_type())) +
                       " samples, " + there + " " +
                       std::string(c10::toString(first.samples.scalar_type())));
    if (p.size() > 0) {
      samples.push_back(p.samples);
      labels.push_back(p.labels);
    }
  }
  dataset d = first;
  if (!samples.empty()) {
    d.samples = torch::cat(samples);
    d.labels = torch::cat(labels);
  }
  return d;
}

void dataset::check(const std::string& where) const {
  if (!samples.defined() || !labels.defined())
    throw data_error(where + ": no samples");
  if (samples.size(0) != labels.size(0))
    throw data_error(where + ": " + std::to_string(samples.size(0)) + " samples but " +
                     std::to_string(labels.size(0)) + " labels");
  auto dims = shape.dims();
  if (samples.dim() != static_cast<int64_t>(dims.size()) + 1 ||
      samples.sizes().slice(1).vec() != dims)
    throw data_error(where + ": samples are not of the shape " + shape.to_string());
  if (samples.scalar_type() != torch::kFloat32 &&
      (!images() || samples.scalar_type() != torch::kUInt8))
    throw data_error(where + std::string(": samples are not held as ") +
                     (images() ? "bytes or float32" : "float32"));
  if (classes.empty())
    throw data_error(where + ": no classes");
  if (size() > 0) {
    const auto lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    if (lo < 0 || hi >= num_classes())
      throw data_error(where + ": label " + std::to_string(lo < 0 ? lo : hi) +
                       " is out of range 0.." + std::to_string(num_classes() - 1));
  }
}

torch::Tensor augment(const torch::Tensor& batch, uint64_t seed) {
  if (batch.dim() != 4)
    return batch;
  const int64_t n = batch.size(0), h = batch.size(2), w = batch.size(3);
  const int64_t pad = 4;
  auto padded = torch::constant_pad_nd(batch, {pad, pad, pad, pad}, 0);
  auto out = torch::empty_like(batch);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto draws = torch::randint(0, 1 << 20, {n, 3}, gen, torch::kInt64).contiguous();
  const auto* d = draws.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t dy = d[3 * i] % (2 * pad + 1), dx = d[3 * i + 1] % (2 * pad + 1);
    auto crop = padded[i].narrow(1, dy, h).narrow(2, dx, w);
    if (d[3 * i + 2] % 2)
      crop = crop.flip({2});
    out[i].copy_(crop);
  }
  return out;
}

} // namespace eg::data

#include "algorithms/edgegossip/aggregator.hpp"
#include "common/error.hpp"
#include "algorithms/edgegossip/aggregator_detail.hpp"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexLSH.h>
#include <omp.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::learning {

namespace {

using steady = std::chrono::steady_clock;

constexpr int64_t svd_dims = 10;
constexpr int64_t svd_oversampling = 10;
constexpr int svd_power_iterations = 2;

constexpr double hebbian_learning_rate = 0.001;
constexpr double hebbian_initial_weight = 0.015;  // the paper's constant l
constexpr double hebbian_batch_fraction = 0.01;
constexpr int hebbian_passes = 20;

constexpr int64_t hash_dims = 10;
constexpr int kmeans_iterations = 20;
constexpr int lsh_bits = 16;

double seconds_since(steady::time_point start) {
  return std::chrono::duration<double>(steady::now() - start).count();
}

void check_ratio(int64_t ratio) {
  if (ratio < 1)
    throw argument_error("aggregator: ratio must be >= 1, got " + std::to_string(ratio));
}

// Independent streams per class from one seed (splitmix64's finaliser).
uint64_t derived_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int faiss_seed(uint64_t seed) { return static_cast<int>(seed & 0x7fffffff); }

torch::Tensor orthonormal_basis(const torch::Tensor& y) {
  return std::get<0>(torch::linalg_qr(y, "reduced"));
}

// The top k right singular vectors [d, k] of the centred points by randomized
// subspace iteration (Halko, Martinsson & Tropp 2011): a handful of products
// with k + oversampling columns instead of the d x d Gram matrix, whose
// N d^2 product alone took 3 s for 15,000 points on a reference BLAS. Two
// power iterations bring the variance along each of the top k directions
// within 0.2 % of the exact eigenvalue on Fashion-MNIST. Products keep a
// row-major X on the left or as Q^T X: the layouts a reference BLAS handles
// fast.
torch::Tensor top_right_singular_vectors(const torch::Tensor& xc, int64_t k, uint64_t seed) {
  const int64_t n = xc.size(0);
  const int64_t d = xc.size(1);
  const int64_t width = std::min({k + svd_oversampling, n, d});
  auto gen = at::detail::createCPUGenerator(seed);
  auto q = orthonormal_basis(xc.mm(torch::randn({d, width}, gen, xc.options())));
  for (int i = 0; i < svd_power_iterations; ++i) {
    auto z = orthonormal_basis(q.t().mm(xc).t()).contiguous();
    q = orthonormal_basis(xc.mm(z));
  }
  auto vh = std::get<2>(torch::linalg_svd(q.t().mm(xc), /*full_matrices=*/false));
  return vh.narrow(0, 0, std::min(k, width)).t();
}

// Gorrell's generalized Hebbian algorithm: Sanger's rule
//   W += lr (y x^T - LT(y y^T) W),  y = W x,
// drives the rows of W [d', d] to the top d' eigenvectors of the centred
// points' covariance. The paper's "1 % of the feature values per step" is
// read as a minibatch of a random 1 % of the points (feature vectors) per
// step, the update averaged over it; one of the 20 iterations is a pass of
// such steps over a fresh permutation. "Constant l = 0.015" is read as the
// initial value of every weight (Gorrell starts from a constant vector),
// perturbed by 1 % with the seed so that the rows differ.
torch::Tensor generalized_hebbian(const torch::Tensor& xc, int64_t dims, uint64_t seed) {
  const int64_t n = xc.size(0);
  const int64_t d = xc.size(1);
  const int64_t batch =
      std::max<int64_t>(1, std::llround(hebbian_batch_fraction * static_cast<double>(n)));
  auto gen = at::detail::createCPUGenerator(seed);
  auto w = hebbian_initial_weight * (1 + 0.01 * torch::randn({dims, d}, gen, xc.options()));
  for (int pass = 0; pass < hebbian_passes; ++pass) {
    auto order = torch::randperm(n, gen, torch::kLong);
    for (int64_t begin = 0; begin < n; begin += batch) {
      const int64_t size = std::min(batch, n - begin);
      auto x = xc.index_select(0, order.narrow(0, begin, size));
      auto y = x.mm(w.t());
      auto update = y.t().mm(x) - y.t().mm(y).tril().mm(w);
      w.add_(update, hebbian_learning_rate / static_cast<double>(size));
    }
  }
  return w;
}

// A random-projection fingerprint: the projections SimHash takes the signs
// of, kept real. Real values preserve distances (Johnson-Lindenstrauss), so
// k-means can average them; 10 sign bits would collapse the points onto at
// most 1,024 Hamming corners, where centroids mean nothing.
torch::Tensor random_projection(const torch::Tensor& x, int64_t dims, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto r = torch::randn({x.size(1), dims}, gen, x.options());
  return x.mm(r) / std::sqrt(static_cast<double>(dims));
}

// faiss parallelises with OpenMP; the aggregator runs beside training
// threads, so it keeps faiss to one thread and restores the caller's setting.
class one_openmp_thread {
public:
  one_openmp_thread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~one_openmp_thread() { omp_set_num_threads(saved_); }
  one_openmp_thread(const one_openmp_thread&) = delete;
  one_openmp_thread& operator=(const one_openmp_thread&) = delete;

private:
  int saved_;
};

using subsets = std::vector<std::vector<int64_t>>;  // rows of one class's points

subsets single_subset(int64_t n) {
  subsets out(1, std::vector<int64_t>(static_cast<size_t>(n)));
  std::iota(out[0].begin(), out[0].end(), 0);
  return out;
}

// k-means into k centroids; each point joins its nearest centroid and
// clusters left empty are dropped.
subsets kmeans_subsets(const torch::Tensor& points, int64_t k, uint64_t seed) {
  const int64_t n = points.size(0);
  const int64_t d = points.size(1);
  if (k <= 1)
    return single_subset(n);
  const float* x = points.data_ptr<float>();

  faiss::ClusteringParameters params;
  params.niter = kmeans_iterations;
  params.seed = faiss_seed(seed);
  params.verbose = false;
  params.min_points_per_centroid = 1;  // ratio 10 means 10 points a centroid; faiss warns below 39
  // Train on every point: faiss subsamples above k * max_points_per_centroid.
  params.max_points_per_centroid = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
  faiss::Clustering clustering(static_cast<int>(d), static_cast<int>(k), params);
  faiss::IndexFlatL2 trainer(d);
  clustering.train(n, x, trainer);

  faiss::IndexFlatL2 centroids(d);
  centroids.add(k, clustering.centroids.data());
  std::vector<float> distance(static_cast<size_t>(n));
  std::vector<faiss::Index::idx_t> nearest(static_cast<size_t>(n));
  centroids.search(n, x, 1, distance.data(), nearest.data());

  subsets out(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i)
    out[static_cast<size_t>(nearest[static_cast<size_t>(i)])].push_back(i);
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& s) { return s.empty(); }),
            out.end());
  return out;
}

// LSH into exactly m buckets: binary codes from random hyperplanes through
// the per-bit medians, points sorted by code (bit 0 most significant, ties
// by row) and the order cut into m contiguous runs of nearly equal size, so
// that points sharing leading bits share a bucket. Medians exist for any
// number of points and the rotation spreads any d' over the bits, so small
// classes need no special case beyond m = 1.
subsets lsh_subsets(const torch::Tensor& points, int64_t m, uint64_t seed) {
  const int64_t n = points.size(0);
  const int64_t d = points.size(1);
  if (m <= 1)
    return single_subset(n);
  const float* x = points.data_ptr<float>();

  faiss::IndexLSH lsh(d, lsh_bits, /*rotate_data=*/true, /*train_thresholds=*/true);
  lsh.rrot.init(faiss_seed(seed));  // the constructor seeds the rotation with a constant
  lsh.train(n, x);
  std::vector<uint8_t> codes(static_cast<size_t>(n) * lsh.code_size);
  lsh.sa_encode(n, x, codes.data());

  std::vector<uint64_t> key(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* code = codes.data() + static_cast<size_t>(i) * lsh.code_size;
    for (int b = 0; b < lsh_bits; ++b)
      if ((code[b / 8] >> (b % 8)) & 1)
        key[static_cast<size_t>(i)] |= uint64_t{1} << (lsh_bits - 1 - b);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return key[static_cast<size_t>(a)] < key[static_cast<size_t>(b)];
  });

  subsets out(static_cast<size_t>(m));
  for (int64_t b = 0; b < m; ++b)
    out[static_cast<size_t>(b)].assign(order.begin() + b * n / m, order.begin() + (b + 1) * n / m);
  return out;
}

// Serialisation: magic, version, then the payload in host byte order
// (little-endian on every target), then zlib's CRC-32 of all before it.
constexpr char magic[4] = {'E', 'G', 'A', 'P'};
constexpr uint32_t format_version = 1;
constexpr uint32_t max_point_rank = 8;
constexpr int64_t max_point_values = int64_t{1} << 40;

class writer {
public:
  template <class T>
  void put(const T& value) {
    raw(&value, sizeof value);
  }
  void raw(const void* data, size_t size) {
    if (size > 0)
      bytes_.append(static_cast<const char*>(data), size);
  }
  std::string finish() {
    const auto crc = static_cast<uint32_t>(
        crc32_z(0, reinterpret_cast<const Bytef*>(bytes_.data()), bytes_.size()));
    put(crc);
    return std::move(bytes_);
  }

private:
  std::string bytes_;
};

[[noreturn]] void damaged(const std::string& what) {
  throw storage_failure("aggregated points: " + what);
}

class reader {
public:
  reader(const std::string& bytes, size_t begin, size_t end)
      : bytes_(bytes), pos_(begin), end_(end) {}
  template <class T>
  T get() {
    T value;
    raw(&value, sizeof value);
    return value;
  }
  void raw(void* data, size_t size) {
    if (size > left())
      damaged("truncated record");
    if (size > 0)
      std::memcpy(data, bytes_.data() + pos_, size);
    pos_ += size;
  }
  size_t left() const { return end_ - pos_; }
  // A count of items of `item_size` bytes that the rest of the record can hold.
  int64_t count(size_t item_size) {
    const auto n = get<int64_t>();
    if (n < 0 || (item_size > 0 && static_cast<uint64_t>(n) > left() / item_size))
      damaged("bad count " + std::to_string(n));
    return n;
  }

private:
  const std::string& bytes_;
  size_t pos_;
  size_t end_;
};

} // namespace

namespace detail {

int64_t incremental_svd_dims(int64_t d, int64_t ratio) {
  check_ratio(ratio);
  const double dims =
      std::round(std::log2(0.1 * static_cast<double>(d) / static_cast<double>(ratio)));
  return std::clamp<int64_t>(static_cast<int64_t>(std::max(dims, 1.0)), 1, d);
}

torch::Tensor reduce(const torch::Tensor& x, const aggregator_options& opt) {
  const int64_t d = x.size(1);
  switch (opt.reduce) {
  case reduction::svd: {
    auto xc = x - x.mean(0, /*keepdim=*/true);
    return xc.mm(top_right_singular_vectors(xc, std::min(svd_dims, d), opt.seed));
  }
  case reduction::incremental_svd: {
    auto xc = x - x.mean(0, /*keepdim=*/true);
    return xc.mm(generalized_hebbian(xc, incremental_svd_dims(d, opt.ratio), opt.seed).t());
  }
  case reduction::hash:
    return random_projection(x, hash_dims, opt.seed);
  }
  throw argument_error("aggregator: unknown reduction");
}

} // namespace detail

aggregator_options aggregator_from_name(const std::string& name, int64_t ratio, uint64_t seed) {
  check_ratio(ratio);
  aggregator_options opt;
  opt.ratio = ratio;
  opt.seed = seed;
  if (name == "svd-kmeans") {
    opt.reduce = reduction::svd;
    opt.divide = division::kmeans;
  } else if (name == "isvd-lsh") {
    opt.reduce = reduction::incremental_svd;
    opt.divide = division::lsh;
  } else if (name == "hash-kmeans") {
    opt.reduce = reduction::hash;
    opt.divide = division::kmeans;
  } else {
    throw argument_error("unknown aggregator '" + name +
                                "' (choices: svd-kmeans, isvd-lsh, hash-kmeans)");
  }
  return opt;
}

aggregated_points aggregate(const dataset& train, const std::vector<int64_t>& shard,
                            const aggregator_options& opt) {
  check_ratio(opt.ratio);
  for (int64_t i : shard)
    if (i < 0 || i >= train.size())
      throw std::out_of_range("aggregator: index " + std::to_string(i) +
                              " outside the training set of " + std::to_string(train.size()));

  aggregated_points out;
  std::vector<int64_t> point_shape{0};
  for (auto d : train.shape.dims())
    point_shape.push_back(d);
  const auto n = static_cast<int64_t>(shard.size());
  if (n == 0) {
    point_shape[0] = 0;
    out.points = torch::empty(point_shape, torch::kFloat);
    out.labels = torch::empty({0}, torch::kLong);
    return out;
  }

  auto start = steady::now();
  auto rows = torch::tensor(shard, torch::kLong);
  auto x = train.batch(rows).reshape({n, -1}).to(torch::kFloat).contiguous();
  auto reduced = detail::reduce(x, opt).contiguous();
  out.reduce_seconds = seconds_since(start);

  start = steady::now();
  auto shard_labels = train.labels.index_select(0, rows).to(torch::kLong).contiguous();
  const int64_t* label = shard_labels.data_ptr<int64_t>();
  std::map<int64_t, std::vector<int64_t>> positions;  // per class, ascending
  for (int64_t i = 0; i < n; ++i)
    positions[label[i]].push_back(i);

  std::vector<int64_t> subset_of(static_cast<size_t>(n));
  std::vector<int64_t> subset_labels;
  {
    one_openmp_thread guard;
    for (const auto& [cls, pos] : positions) {
      const auto n_c = static_cast<int64_t>(pos.size());
      const int64_t m_c = std::max<int64_t>(
          1, std::llround(static_cast<double>(n_c) / static_cast<double>(opt.ratio)));
      auto points = reduced.index_select(0, torch::tensor(pos, torch::kLong)).contiguous();
      const uint64_t seed = derived_seed(opt.seed, static_cast<uint64_t>(cls));
      const subsets groups = opt.divide == division::kmeans ? kmeans_subsets(points, m_c, seed)
                                                            : lsh_subsets(points, m_c, seed);
      for (const auto& group : groups) {
        std::vector<int64_t> members;
        for (int64_t row : group) {
          const int64_t position = pos[static_cast<size_t>(row)];
          subset_of[static_cast<size_t>(position)] = out.size();
          members.push_back(shard[static_cast<size_t>(position)]);
        }
        std::sort(members.begin(), members.end());
        out.members.push_back(std::move(members));
        subset_labels.push_back(cls);
      }
    }
  }
  out.divide_seconds = seconds_since(start);

  // Eq. 1: each aggregated point is the mean of its subset's original points.
  start = steady::now();
  const int64_t m = out.size();
  auto subset = torch::tensor(subset_of, torch::kLong);
  auto sums = torch::zeros({m, x.size(1)}, x.options()).index_add_(0, subset, x);
  auto counts = torch::bincount(subset, {}, m).to(torch::kFloat);
  point_shape[0] = m;
  out.points = (sums / counts.unsqueeze(1)).reshape(point_shape);
  out.labels = torch::tensor(subset_labels, torch::kLong);
  out.mean_seconds = seconds_since(start);
  return out;
}

aggregated_points renormalised(const aggregated_points& a, const data::normalisation& from,
                               const data::normalisation& to) {
  aggregated_points out = a;
  if (from == to || !a.points.defined() || a.points.size(0) == 0)
    return out;
  const int64_t channels = a.points.dim() >= 2 ? a.points.size(1) : 0;
  auto per_channel = [&](const std::vector<double>& v, double otherwise) {
    std::vector<float> f(static_cast<size_t>(channels), static_cast<float>(otherwise));
    if (!v.empty()) {
      if (static_cast<int64_t>(v.size()) != channels)
        throw argument_error("renormalised: a normalisation of " + std::to_string(v.size()) +
                                    " channels for points of " + std::to_string(channels));
      std::copy(v.begin(), v.end(), f.begin());
    }
    std::vector<int64_t> shape(static_cast<size_t>(a.points.dim()), 1);
    shape[1] = channels;
    return torch::tensor(f).view(shape);
  };
  torch::NoGradGuard no_grad;
  // Back to values (x * std + mean), then normalised as `to` does.
  auto x = a.points * per_channel(from.std, 1.0) + per_channel(from.mean, 0.0);
  out.points = ((x - per_channel(to.mean, 0.0)) / per_channel(to.std, 1.0)).contiguous();
  return out;
}

std::string serialize(const aggregated_points& a) {
  const int64_t m = a.size();
  if (!a.points.defined() || a.points.dim() < 1 || a.points.size(0) != m || !a.labels.defined() ||
      a.labels.numel() != m)
    throw argument_error("aggregated points: points, labels and members disagree in number");
  auto points = a.points.to(torch::kFloat).contiguous();
  auto labels = a.labels.to(torch::kLong).contiguous();

  writer w;
  w.raw(magic, sizeof magic);
  w.put(format_version);
  w.put(m);
  w.put(static_cast<uint32_t>(points.dim() - 1));
  for (int64_t i = 1; i < points.dim(); ++i)
    w.put(points.size(i));
  w.put(a.reduce_seconds);
  w.put(a.divide_seconds);
  w.put(a.mean_seconds);
  w.raw(points.data_ptr<float>(), static_cast<size_t>(points.numel()) * sizeof(float));
  w.raw(labels.data_ptr<int64_t>(), static_cast<size_t>(m) * sizeof(int64_t));
  for (const auto& members : a.members) {
    w.put(static_cast<int64_t>(members.size()));
    w.raw(members.data(), members.size() * sizeof(int64_t));
  }
  return w.finish();
}

aggregated_points deserialize_aggregated(const std::string& bytes) {
  constexpr size_t crc_size = sizeof(uint32_t);
  if (bytes.size() < sizeof magic + sizeof format_version + crc_size)
    damaged("truncated record");
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    damaged("bad magic (not an aggregated-points record)");
  const size_t end = bytes.size() - crc_size;
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + end, crc_size);
  const auto crc = crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), end);
  if (static_cast<uint32_t>(crc) != stored)
    damaged("checksum mismatch");

  reader r(bytes, sizeof magic, end);
  if (const auto version = r.get<uint32_t>(); version != format_version)
    damaged("unsupported version " + std::to_string(version));
  const int64_t m = r.count(0);
  const auto rank = r.get<uint32_t>();
  if (rank > max_point_rank)
    damaged("bad point rank " + std::to_string(rank));
  std::vector<int64_t> shape{m};
  int64_t per_point = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    const int64_t size = r.count(0);
    if (size > 0 && per_point > max_point_values / size)
      damaged("bad point shape");
    per_point *= size;
    shape.push_back(size);
  }

  aggregated_points a;
  a.reduce_seconds = r.get<double>();
  a.divide_seconds = r.get<double>();
  a.mean_seconds = r.get<double>();
  // Each aggregated point needs its values, its label and its member count.
  const size_t per_aggregate = static_cast<size_t>(per_point) * sizeof(float) + 2 * sizeof(int64_t);
  if (static_cast<uint64_t>(m) > r.left() / per_aggregate)
    damaged("truncated record");
  a.points = torch::empty(shape, torch::kFloat);
  r.raw(a.points.data_ptr<float>(), static_cast<size_t>(a.points.numel()) * sizeof(float));
  a.labels = torch::empty({m}, torch::kLong);
  r.raw(a.labels.data_ptr<int64_t>(), static_cast<size_t>(m) * sizeof(int64_t));
  a.members.resize(static_cast<size_t>(m));
  for (auto& members : a.members) {
    members.resize(static_cast<size_t>(r.count(sizeof(int64_t))));
    r.raw(members.data(), members.size() * sizeof(int64_t));
  }
  if (r.left() != 0)
    damaged("trailing bytes");
  return a;
}

} // namespace eg::learning

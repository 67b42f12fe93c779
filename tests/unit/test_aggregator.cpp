// links: eg_learning
#include "algorithms/edgegossip/aggregator.hpp"
#include "algorithms/edgegossip/aggregator_detail.hpp"
#include "models/dataset.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

using namespace eg::learning;
namespace internal = eg::learning::detail;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";
const std::vector<std::string> combinations = {"svd-kmeans", "isvd-lsh", "hash-kmeans"};

// The first 15,000 training samples, read once.
const dataset& fashion() {
  static const dataset d = load_fashion_mnist(data_dir, split::train, 15000);
  return d;
}

// A 3,000-point shard of training-set indices that are not 0..N-1, so that
// members must be training-set indices rather than positions in the shard.
std::vector<int64_t> even_shard() {
  std::vector<int64_t> shard;
  for (int64_t i = 0; i < 6000; i += 2)
    shard.push_back(i);
  return shard;
}

std::map<int64_t, int64_t> class_sizes(const dataset& d, const std::vector<int64_t>& shard) {
  std::map<int64_t, int64_t> sizes;
  for (int64_t i : shard)
    ++sizes[d.labels[i].item<int64_t>()];
  return sizes;
}

int64_t expected_subsets(int64_t n_c, int64_t ratio) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(n_c) / static_cast<double>(ratio)));
}

// The properties every aggregation must have, whatever the combination.
void check_aggregation(const dataset& d, const std::vector<int64_t>& shard,
                       const aggregated_points& a, int64_t ratio, division divide) {
  const int64_t m = a.size();
  // [M, sample dims...]: [M, 1, 28, 28] for Fashion-MNIST.
  auto dims = d.shape.dims();
  dims.insert(dims.begin(), m);
  BOOST_CHECK(a.points.sizes().vec() == dims);
  BOOST_CHECK(a.points.scalar_type() == torch::kFloat);
  BOOST_REQUIRE_EQUAL(a.labels.numel(), m);
  BOOST_CHECK(a.labels.scalar_type() == torch::kLong);

  // The subsets partition the shard, each holding one class: its label.
  std::vector<int64_t> all;
  std::map<int64_t, int64_t> subsets_per_class;
  for (int64_t j = 0; j < m; ++j) {
    const auto& members = a.members[static_cast<size_t>(j)];
    BOOST_REQUIRE(!members.empty());
    const int64_t label = a.labels[j].item<int64_t>();
    for (int64_t i : members)
      BOOST_REQUIRE_EQUAL(d.labels[i].item<int64_t>(), label);
    all.insert(all.end(), members.begin(), members.end());
    ++subsets_per_class[label];
  }
  std::sort(all.begin(), all.end());
  auto sorted_shard = shard;
  std::sort(sorted_shard.begin(), sorted_shard.end());
  BOOST_CHECK(all == sorted_shard);

  // N_c / ratio subsets per class: exactly for LSH; k-means may drop a few
  // empty clusters.
  for (const auto& [cls, n_c] : class_sizes(d, shard)) {
    const int64_t want = expected_subsets(n_c, ratio);
    const int64_t got = subsets_per_class[cls];
    if (divide == division::lsh) {
      BOOST_CHECK_EQUAL(got, want);
    } else {
      BOOST_CHECK_LE(got, want);
      BOOST_CHECK_GE(got, want - std::max<int64_t>(1, want / 10));
    }
  }

  // Eq. 1: a few aggregated points are the means of their members' samples,
  // as the models see them (normalised).
  for (int64_t j : {int64_t{0}, m / 2, m - 1}) {
    auto members = torch::tensor(a.members[static_cast<size_t>(j)], torch::kLong);
    auto mean = d.batch(members).mean(0);
    BOOST_CHECK(torch::allclose(a.points[j], mean, 1e-5, 1e-5));
  }
}

bool same(const aggregated_points& a, const aggregated_points& b) {
  return a.members == b.members && torch::equal(a.points, b.points) &&
         torch::equal(a.labels, b.labels);
}

// 2 classes of 4 images with two obvious clusters each, interleaved: class 0
// has a bright top-left block (0, 4) or a bright bottom-right block (2, 6),
// class 1 a bright left column (1, 5) or a bright bottom row (3, 7).
dataset hand_made() {
  dataset d;
  d.shape = eg::data::sample_shape::image(1, 28, 28);
  d.classes = {"0", "1"};
  // A little noise (bytes 0..3) so that members of a cluster are near, not equal.
  d.samples = torch::randint(0, 4, {8, 1, 28, 28}, at::detail::createCPUGenerator(7),
                             torch::kUInt8);
  d.labels = torch::tensor({0, 1, 0, 1, 0, 1, 0, 1}, torch::kLong);
  using torch::indexing::Slice;
  for (int64_t i : {0, 4})
    d.samples.index_put_({i, 0, Slice(0, 10), Slice(0, 10)}, 250);
  for (int64_t i : {2, 6})
    d.samples.index_put_({i, 0, Slice(18, 28), Slice(18, 28)}, 250);
  for (int64_t i : {1, 5})
    d.samples.index_put_({i, 0, Slice(), Slice(0, 3)}, 250);
  for (int64_t i : {3, 7})
    d.samples.index_put_({i, 0, Slice(25, 28), Slice()}, 250);
  d.norm = d.local_moments().finish();
  d.check("hand-made");
  return d;
}

// Features: `n` samples of 6 features in 3 classes, each class two clusters
// (at +-5 on one feature of its own), with a little noise.
dataset clustered_features(int64_t n) {
  dataset d;
  d.shape = eg::data::sample_shape::features(6);
  d.classes = {"a", "b", "c"};
  auto gen = at::detail::createCPUGenerator(3);
  d.samples = 0.1 * torch::randn({n, 6}, gen);
  d.labels = torch::arange(n, torch::kLong) % 3;
  for (int64_t i = 0; i < n; ++i)
    d.samples[i][i % 3].add_((i / 3) % 2 ? 5.0 : -5.0);
  d.check("features");
  return d;
}

std::set<std::vector<int64_t>> as_set(const aggregated_points& a) {
  return {a.members.begin(), a.members.end()};
}

} // namespace

BOOST_AUTO_TEST_SUITE(aggregator)

BOOST_AUTO_TEST_CASE(names_choose_the_paper_combinations) {
  auto a = aggregator_from_name("svd-kmeans", 10, 3);
  BOOST_CHECK(a.reduce == reduction::svd && a.divide == division::kmeans);
  BOOST_CHECK_EQUAL(a.ratio, 10);
  BOOST_CHECK_EQUAL(a.seed, 3u);
  auto b = aggregator_from_name("isvd-lsh", 5, 1);
  BOOST_CHECK(b.reduce == reduction::incremental_svd && b.divide == division::lsh);
  auto c = aggregator_from_name("hash-kmeans", 20, 1);
  BOOST_CHECK(c.reduce == reduction::hash && c.divide == division::kmeans);
  BOOST_CHECK_THROW(aggregator_from_name("pca-kmeans", 10, 1), std::invalid_argument);
  BOOST_CHECK_THROW(aggregator_from_name("svd-kmeans", 0, 1), std::invalid_argument);
  aggregator_options bad;
  bad.ratio = 0;
  BOOST_CHECK_THROW(aggregate(hand_made(), {0, 1}, bad), std::invalid_argument);
  BOOST_CHECK_THROW(aggregate(hand_made(), {0, 8}, aggregator_options{}), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(incremental_svd_dimensions_follow_the_paper) {
  BOOST_CHECK_EQUAL(internal::incremental_svd_dims(784, 10), 3);
  BOOST_CHECK_EQUAL(internal::incremental_svd_dims(784, 5), 4);
  BOOST_CHECK_EQUAL(internal::incremental_svd_dims(784, 20), 2);
  BOOST_CHECK_EQUAL(internal::incremental_svd_dims(784, 1000), 1);

  auto x = fashion().range(0, 500).reshape({500, -1});
  for (auto [name, dims] : std::vector<std::pair<std::string, int64_t>>{
           {"svd-kmeans", 10}, {"isvd-lsh", 3}, {"hash-kmeans", 10}}) {
    auto r = internal::reduce(x, aggregator_from_name(name, 10, 1));
    BOOST_CHECK_EQUAL(r.size(0), 500);
    BOOST_CHECK_EQUAL(r.size(1), dims);
  }
}

// The reduced points X' = Xc V of both SVDs have X'^T X' = diag(top
// eigenvalues of Xc^T Xc) when V holds the top eigenvectors.
BOOST_AUTO_TEST_CASE(svd_reductions_find_the_top_singular_subspace) {
  const int64_t n = 1000;
  auto x = fashion().range(0, n).reshape({n, -1});
  auto xc = (x - x.mean(0, true)).to(torch::kDouble);
  auto eigenvalues = std::get<0>(torch::linalg_eigh(xc.t().mm(xc), "L")).flip(0);

  auto r = internal::reduce(x, aggregator_from_name("svd-kmeans", 10, 1)).to(torch::kDouble);
  auto gram = r.t().mm(r);
  auto top = eigenvalues.narrow(0, 0, 10);
  BOOST_CHECK(torch::allclose(gram.diagonal(), top, 5e-3));
  BOOST_CHECK_LT((gram - torch::diag(gram.diagonal())).abs().max().item<double>(),
                 1e-3 * top[0].item<double>());

  // The Hebbian rows converge towards the top 3 eigenvectors: the variance
  // of the points projected on the span of X' comes close to the best rank 3.
  auto h = internal::reduce(x, aggregator_from_name("isvd-lsh", 10, 1)).to(torch::kDouble);
  auto basis = std::get<0>(torch::linalg_qr(h, "reduced"));
  const double captured = basis.t().mm(xc).pow(2).sum().item<double>();
  const double best = eigenvalues.narrow(0, 0, 3).sum().item<double>();
  BOOST_TEST_MESSAGE("incremental SVD captures " << captured / best
                                                 << " of the top-3 variance");
  BOOST_CHECK_GT(captured, 0.95 * best);
  BOOST_CHECK_LE(captured, (1 + 1e-9) * best);
}

BOOST_AUTO_TEST_CASE(combinations_partition_a_shard_into_class_subsets) {
  const auto& d = fashion();
  const auto shard = even_shard();
  for (const auto& name : combinations) {
    BOOST_TEST_CONTEXT(name) {
      const auto opt = aggregator_from_name(name, 10, 1);
      const auto a = aggregate(d, shard, opt);
      check_aggregation(d, shard, a, 10, opt.divide);
      BOOST_CHECK_GE(a.reduce_seconds, 0);
      BOOST_CHECK_GT(a.divide_seconds + a.reduce_seconds + a.mean_seconds, 0);
      BOOST_CHECK(same(a, aggregate(d, shard, opt)));
      BOOST_CHECK(!same(a, aggregate(d, shard, aggregator_from_name(name, 10, 2))));
    }
  }
}

BOOST_AUTO_TEST_CASE(kmeans_finds_obvious_clusters) {
  const auto d = hand_made();
  const std::vector<int64_t> shard{0, 1, 2, 3, 4, 5, 6, 7};
  const std::set<std::vector<int64_t>> want{{0, 4}, {2, 6}, {1, 5}, {3, 7}};
  for (const std::string name : {"svd-kmeans", "hash-kmeans"}) {
    BOOST_TEST_CONTEXT(name) {
      const auto a = aggregate(d, shard, aggregator_from_name(name, 2, 1));
      BOOST_CHECK(as_set(a) == want);
      check_aggregation(d, shard, a, 2, division::kmeans);
    }
  }
}

BOOST_AUTO_TEST_CASE(aggregation_of_features_gives_feature_points) {
  const auto d = clustered_features(60);
  std::vector<int64_t> shard(60);
  std::iota(shard.begin(), shard.end(), 0);
  for (const auto& name : combinations) {
    BOOST_TEST_CONTEXT(name) {
      const auto opt = aggregator_from_name(name, 5, 1);
      const auto a = aggregate(d, shard, opt);
      BOOST_TEST(a.points.sizes().vec() == (std::vector<int64_t>{a.size(), 6}));
      check_aggregation(d, shard, a, 5, opt.divide);
    }
  }
  // k-means finds the two clusters of each class when asked for two.
  const auto a = aggregate(d, shard, aggregator_from_name("svd-kmeans", 10, 1));
  BOOST_TEST(a.size() == 6);
  for (const auto& members : a.members) {
    for (int64_t i : members)
      BOOST_TEST((i / 3) % 2 == (members.front() / 3) % 2, "member " << i);
  }
}

// Classes of 1, 2 and 3 points, with ratios down to 1 (a subset per point).
BOOST_AUTO_TEST_CASE(small_classes_and_extreme_ratios) {
  const auto& d = fashion();
  std::map<int64_t, int64_t> wanted{{0, 1}, {1, 2}, {2, 3}, {3, 40}};
  std::vector<int64_t> shard;
  for (int64_t i = 0; i < d.size() && !wanted.empty(); ++i) {
    auto it = wanted.find(d.labels[i].item<int64_t>());
    if (it == wanted.end())
      continue;
    shard.push_back(i);
    if (--it->second == 0)
      wanted.erase(it);
  }
  for (const auto& name : combinations)
    for (int64_t ratio : {1, 2, 10, 100}) {
      BOOST_TEST_CONTEXT(name << ", ratio " << ratio) {
        const auto opt = aggregator_from_name(name, ratio, 1);
        check_aggregation(d, shard, aggregate(d, shard, opt), ratio, opt.divide);
      }
    }

  const auto empty = aggregate(d, {}, aggregator_options{});
  BOOST_CHECK_EQUAL(empty.size(), 0);
  BOOST_CHECK_EQUAL(empty.points.size(0), 0);
}

BOOST_AUTO_TEST_CASE(renormalised_points_are_the_means_under_the_other_normalisation) {
  // Points made with a node's own normalisation, moved to the cluster's:
  // each is the mean of its members normalised the cluster's way. Images
  // (per channel) and features (per feature).
  for (auto d : {hand_made(), clustered_features(60)}) {
    if (d.norm.empty())
      d.norm = d.local_moments().finish();
    std::vector<int64_t> shard(static_cast<size_t>(d.size()));
    std::iota(shard.begin(), shard.end(), 0);
    aggregator_options opt;
    opt.ratio = 2;
    const auto a = aggregate(d, shard, opt);
    auto cluster = d;
    for (size_t c = 0; c < cluster.norm.mean.size(); ++c) {
      cluster.norm.mean[c] = 0.3 + 0.1 * static_cast<double>(c);
      cluster.norm.std[c] = 2.5;
    }
    const auto moved = renormalised(a, d.norm, cluster.norm);
    BOOST_REQUIRE_EQUAL(moved.size(), a.size());
    BOOST_TEST((moved.members == a.members));
    for (int64_t k = 0; k < a.size(); ++k) {
      const auto& m = a.members[static_cast<size_t>(k)];
      auto expected = cluster.batch(torch::tensor(m, torch::kLong)).mean(0);
      BOOST_TEST(torch::allclose(moved.points[k], expected, 1e-4, 1e-5));
    }
    // And back: the points made with the node's own.
    BOOST_TEST(torch::allclose(renormalised(moved, cluster.norm, d.norm).points, a.points, 1e-4,
                               1e-5));
    // Nothing to do for the same normalisation.
    BOOST_TEST(renormalised(a, d.norm, d.norm).points.data_ptr() == a.points.data_ptr());
  }
}

BOOST_AUTO_TEST_CASE(serialization_round_trips_and_detects_damage) {
  const auto& d = fashion();
  std::vector<int64_t> shard(500);
  std::iota(shard.begin(), shard.end(), 100);
  const auto a = aggregate(d, shard, aggregator_from_name("isvd-lsh", 10, 1));
  const std::string bytes = serialize(a);
  const auto b = deserialize_aggregated(bytes);
  BOOST_CHECK(same(a, b));
  BOOST_CHECK_EQUAL(b.reduce_seconds, a.reduce_seconds);
  BOOST_CHECK_EQUAL(b.divide_seconds, a.divide_seconds);
  BOOST_CHECK_EQUAL(b.mean_seconds, a.mean_seconds);

  for (size_t at : {size_t{10}, bytes.size() / 2, bytes.size() - 30, bytes.size() - 1}) {
    auto damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    BOOST_CHECK_EXCEPTION(deserialize_aggregated(damaged), std::runtime_error,
                          [](const std::runtime_error& e) {
                            return std::string(e.what()) == "aggregated points: checksum mismatch";
                          });
  }
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  BOOST_CHECK_THROW(deserialize_aggregated(bad_magic), std::runtime_error);
  BOOST_CHECK_THROW(deserialize_aggregated(bytes.substr(0, bytes.size() / 2)), std::runtime_error);
  BOOST_CHECK_THROW(deserialize_aggregated(""), std::runtime_error);

  const auto empty = deserialize_aggregated(serialize(aggregate(d, {}, aggregator_options{})));
  BOOST_CHECK_EQUAL(empty.size(), 0);
  BOOST_CHECK_EQUAL(empty.points.dim(), 4);
}

// Generation cost on a 15,000-point shard (1,500 per class, 150 subsets a
// class), on one core.
BOOST_AUTO_TEST_CASE(timing_on_a_fifteen_thousand_point_shard) {
  const auto& d = fashion();
  std::vector<int64_t> shard(static_cast<size_t>(d.size()));
  std::iota(shard.begin(), shard.end(), 0);
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  for (const auto& name : combinations) {
    const auto start = std::chrono::steady_clock::now();
    const auto a = aggregate(d, shard, aggregator_from_name(name, 10, 1));
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    BOOST_TEST_MESSAGE(name << " on " << shard.size() << " points: " << a.size()
                            << " aggregated points in " << total << " s (reduce "
                            << a.reduce_seconds << " s, divide " << a.divide_seconds
                            << " s, mean " << a.mean_seconds << " s)");
    BOOST_CHECK_GE(a.size(), 1400);
    BOOST_CHECK_LE(a.size(), 1500);
  }
  torch::set_num_threads(threads);
}

BOOST_AUTO_TEST_SUITE_END()

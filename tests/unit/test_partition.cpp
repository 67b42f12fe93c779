// links: eg_learning
// A data set's indices cut into the platforms' shards (train/partition.hpp):
// IID by shares, and label skew by Dirichlet(alpha) class proportions.
#include "train/partition.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

using namespace eg::learning;

namespace {

std::vector<int64_t> cyclic_labels(int64_t n, int64_t classes) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = i % classes;
  return labels;
}

// Every index appears in at most one shard; returns how many are used.
size_t check_disjoint(const shards& s, size_t n) {
  std::vector<int> seen(n, 0);
  size_t used = 0;
  for (const auto& shard : s)
    for (int64_t i : shard) {
      BOOST_REQUIRE(i >= 0 && static_cast<size_t>(i) < n);
      BOOST_REQUIRE_EQUAL(seen[static_cast<size_t>(i)]++, 0);
      ++used;
    }
  return used;
}

std::vector<double> class_fractions(const std::vector<int64_t>& shard,
                                    const std::vector<int64_t>& labels, int64_t classes) {
  std::vector<double> f(static_cast<size_t>(classes), 0.0);
  for (int64_t i : shard)
    f[static_cast<size_t>(labels[static_cast<size_t>(i)])] += 1.0;
  for (auto& x : f)
    x /= static_cast<double>(shard.size());
  return f;
}

} // namespace

BOOST_AUTO_TEST_SUITE(partition)

BOOST_AUTO_TEST_CASE(iid_shards_follow_shares) {
  auto labels = cyclic_labels(10000, 10);
  auto s = partition_iid(labels, {0.5, 0.3, 0.2}, 7);
  BOOST_TEST(check_disjoint(s, labels.size()) == 10000u);
  BOOST_TEST(s[0].size() == 5000u);
  BOOST_TEST(s[1].size() == 3000u);
  BOOST_TEST(s[2].size() == 2000u);

  auto partial = partition_iid(labels, {0.25, 0.25}, 7);
  BOOST_TEST(check_disjoint(partial, labels.size()) == 5000u);
  BOOST_TEST(partial[0].size() == 2500u);

  // Ten shares of 0.1 do not add up to exactly 1 in floating point.
  auto tenths = partition_iid(labels, std::vector<double>(10, 0.1), 7);
  BOOST_TEST(check_disjoint(tenths, labels.size()) == 10000u);
  for (const auto& shard : tenths)
    BOOST_TEST(shard.size() == 1000u);

  BOOST_CHECK_THROW(partition_iid(labels, {0.6, 0.5}, 7), std::invalid_argument);
  BOOST_CHECK_THROW(partition_iid(labels, {-0.1, 0.5}, 7), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(iid_shards_are_class_balanced) {
  auto labels = cyclic_labels(20000, 10);
  auto s = partition_iid(labels, std::vector<double>(5, 0.2), 3);
  for (const auto& shard : s)
    for (double f : class_fractions(shard, labels, 10))
      BOOST_TEST(std::abs(f - 0.1) < 0.025);
}

BOOST_AUTO_TEST_CASE(dirichlet_small_alpha_is_skewed) {
  auto labels = cyclic_labels(20000, 10);
  auto s = partition_dirichlet(labels, std::vector<double>(10, 0.1), 0.1, 10, 5);
  BOOST_TEST(check_disjoint(s, labels.size()) == 20000u);
  double top = 0;
  for (const auto& shard : s) {
    auto f = class_fractions(shard, labels, 10);
    top += *std::max_element(f.begin(), f.end()) / 10;
    // Sizes stay at the shares: a platform never takes a class beyond its room.
    BOOST_TEST(std::abs(static_cast<double>(shard.size()) - 2000) <= 2);
  }
  BOOST_TEST(top > 0.5);  // IID gives about 0.1
}

BOOST_AUTO_TEST_CASE(dirichlet_sizes_follow_unequal_shares) {
  auto labels = cyclic_labels(60000, 10);
  std::vector<double> shares{0.4, 0.3, 0.2, 0.05, 0.05};
  for (double alpha : {0.01, 0.1, 1.0})
    for (uint64_t seed : {1, 2, 3}) {
      auto s = partition_dirichlet(labels, shares, alpha, 10, seed);
      BOOST_TEST(check_disjoint(s, labels.size()) == 60000u);
      for (size_t i = 0; i < s.size(); ++i)
        BOOST_TEST(std::abs(static_cast<double>(s[i].size()) - shares[i] * 60000) <= 5,
                   "alpha " << alpha << " seed " << seed << " platform " << i << ": "
                            << s[i].size() << " points");
    }
}

BOOST_AUTO_TEST_CASE(dirichlet_big_alpha_is_near_uniform) {
  auto labels = cyclic_labels(20000, 10);
  std::vector<double> shares{0.4, 0.3, 0.2, 0.1};
  auto s = partition_dirichlet(labels, shares, 1000, 10, 5);
  BOOST_TEST(check_disjoint(s, labels.size()) == 20000u);
  for (size_t i = 0; i < s.size(); ++i) {
    BOOST_TEST(std::abs(static_cast<double>(s[i].size()) / 20000 - shares[i]) < 0.01);
    for (double f : class_fractions(s[i], labels, 10))
      BOOST_TEST(std::abs(f - 0.1) < 0.03);
  }
}

BOOST_AUTO_TEST_CASE(dirichlet_partial_shares_and_arguments) {
  auto labels = cyclic_labels(10000, 10);
  auto s = partition_dirichlet(labels, {0.3, 0.2}, 0.5, 10, 1);
  auto used = check_disjoint(s, labels.size());
  BOOST_TEST(used >= 4990u);
  BOOST_TEST(used <= 5000u);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.5}, 0, 10, 1), std::invalid_argument);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.5}, 1, 5, 1), std::invalid_argument);
  BOOST_CHECK_THROW(partition_dirichlet(labels, {0.7, 0.7}, 1, 10, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(partitions_are_deterministic) {
  auto labels = cyclic_labels(5000, 10);
  std::vector<double> shares{0.5, 0.5};
  BOOST_TEST(partition_iid(labels, shares, 11) == partition_iid(labels, shares, 11));
  BOOST_TEST(partition_iid(labels, shares, 11) != partition_iid(labels, shares, 12));
  BOOST_TEST(partition_dirichlet(labels, shares, 0.3, 10, 11) ==
             partition_dirichlet(labels, shares, 0.3, 10, 11));
  BOOST_TEST(partition_dirichlet(labels, shares, 0.3, 10, 11) !=
             partition_dirichlet(labels, shares, 0.3, 10, 12));
}

BOOST_AUTO_TEST_SUITE_END()

#include "train/partition.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace eg::learning {

namespace {

constexpr double tolerance = 1e-9;

// Validates the shares and returns their sum.
double check_shares(const std::vector<double>& shares) {
  if (shares.empty())
    throw argument_error("partition: no platforms");
  double sum = 0;
  for (double s : shares) {
    if (!(s >= 0))
      throw argument_error("partition: share " + std::to_string(s) + " is negative");
    sum += s;
  }
  if (sum > 1 + tolerance)
    throw argument_error("partition: shares sum to " + std::to_string(sum) + ", above 1");
  return sum;
}

// End offsets of consecutive pieces of `n` items, piece i holding fraction
// `fractions[i]` of them. Cumulative rounding keeps every piece within one
// item of its exact size; fractions summing to 1 (up to rounding) use all.
std::vector<size_t> piece_ends(const std::vector<double>& fractions, size_t n) {
  std::vector<size_t> ends;
  double cumulative = 0;
  for (double f : fractions) {
    cumulative += f;
    const double exact = cumulative * static_cast<double>(n);
    auto end = cumulative >= 1 - tolerance ? n : static_cast<size_t>(std::floor(exact + tolerance));
    ends.push_back(std::min(end, n));
  }
  return ends;
}

// Appends consecutive pieces of `items` (first `n` of them) to the shards.
void deal(const std::vector<int64_t>& items, const std::vector<double>& fractions, size_t n,
          shards& out) {
  size_t begin = 0;
  auto ends = piece_ends(fractions, n);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].insert(out[i].end(), items.begin() + begin, items.begin() + ends[i]);
    begin = ends[i];
  }
}

// Shards are sets: sorted, which also keeps memory access in order.
shards sorted(shards s) {
  for (auto& shard : s)
    std::sort(shard.begin(), shard.end());
  return s;
}

// Splits `n` points among platforms in proportion to `draws`, none beyond
// its `room`: a platform that would overflow is filled and the rest goes to
// the others in proportion to their draws (water-filling). When every
// platform with a draw is full, the rest goes to those with room in
// proportion to it, so the points fill the quotas and sizes stay at the
// shares whatever the draws.
std::vector<double> fill_by_draws(const std::vector<double>& draws, const std::vector<double>& room,
                                  double n) {
  std::vector<double> out(draws.size(), 0.0);
  std::vector<bool> full(draws.size(), false);
  for (size_t i = 0; i < draws.size(); ++i)
    full[i] = !(room[i] > tolerance);
  for (int pass = 0; pass < 2 && n > tolerance; ++pass) {
    // pass 0 by the draws, pass 1 by the room left
    auto weight = [&](size_t i) { return pass == 0 ? draws[i] : room[i] - out[i]; };
    for (;;) {
      double sum = 0;
      for (size_t i = 0; i < draws.size(); ++i)
        if (!full[i])
          sum += weight(i);
      if (!(sum > 0))
        break;
      bool overflow = false;
      for (size_t i = 0; i < draws.size(); ++i)
        if (!full[i] && out[i] + n * weight(i) / sum >= room[i]) {
          n -= room[i] - out[i];
          out[i] = room[i];
          full[i] = true;
          overflow = true;
        }
      if (overflow)
        continue;  // the others share what the full ones could not take
      for (size_t i = 0; i < draws.size(); ++i)
        if (!full[i])
          out[i] += n * weight(i) / sum;
      n = 0;
      break;
    }
  }
  return out;
}

} // namespace

shards partition_iid(const std::vector<int64_t>& labels, const std::vector<double>& shares,
                     uint64_t seed) {
  check_shares(shares);
  std::vector<int64_t> order(labels.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  shards out(shares.size());
  deal(order, shares, order.size(), out);
  return sorted(std::move(out));
}

shards partition_dirichlet(const std::vector<int64_t>& labels, const std::vector<double>& shares,
                           double alpha, int64_t num_classes, uint64_t seed) {
  const double total = check_shares(shares);
  if (!(alpha > 0))
    throw argument_error("partition: Dirichlet alpha must be positive");
  if (num_classes <= 0)
    throw mismatch_error("partition: number of classes must be positive");

  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes)
      throw mismatch_error("partition: label " + std::to_string(labels[i]) + " of sample " +
                                  std::to_string(i) + " is not in 0.." +
                                  std::to_string(num_classes - 1));
    by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  }

  std::mt19937_64 rng(seed);
  for (auto& members : by_class)
    std::shuffle(members.begin(), members.end(), rng);
  // Classes in random order, so that no class is always dealt last.
  std::vector<size_t> class_order(by_class.size());
  std::iota(class_order.begin(), class_order.end(), 0);
  std::shuffle(class_order.begin(), class_order.end(), rng);

  const size_t platforms = shares.size();
  std::vector<double> quota(platforms);
  for (size_t i = 0; i < platforms; ++i)
    quota[i] = shares[i] * static_cast<double>(labels.size());
  std::gamma_distribution<double> gamma(alpha, 1.0);

  shards out(platforms);
  for (size_t c : class_order) {
    const auto& members = by_class[c];
    const size_t used = total >= 1 - tolerance
                            ? members.size()
                            : static_cast<size_t>(std::floor(
                                  static_cast<double>(members.size()) * total + tolerance));
    std::vector<double> room(platforms), draws(platforms);
    for (size_t i = 0; i < platforms; ++i) {
      room[i] = std::max(0.0, quota[i] - static_cast<double>(out[i].size()));
      draws[i] = gamma(rng) * shares[i];
    }
    auto counts = fill_by_draws(draws, room, static_cast<double>(used));
    const double sum = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (!(sum > 0))
      continue;  // all shares are zero
    for (auto& x : counts)
      x /= sum;
    deal(members, counts, used, out);
  }
  return sorted(std::move(out));
}

} // namespace eg::learning

#include "algorithms/split/cut_planner.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace eg::learning {

namespace {

void check(const std::vector<layer_cost>& costs, const std::vector<double>& slowdowns,
           stage_passes below) {
  if (slowdowns.empty())
    throw argument_error("cut planner: no stages");
  if (costs.size() < slowdowns.size())
    throw argument_error("cut planner: " + std::to_string(costs.size()) + " layers cannot make " +
                         std::to_string(slowdowns.size()) + " stages");
  for (auto s : slowdowns)
    if (!(s >= 1))
      throw argument_error("cut planner: a slowdown is below 1");
  for (auto& c : costs)
    if (!(c.forward >= 0) || !(c.backward >= 0))
      throw argument_error("cut planner: a layer's cost is negative");
  if (!(below.forward >= 0) || !(below.backward >= 0))
    throw argument_error("cut planner: negative passes");
}

/// Seconds of layers [first, last) as stage `k` of `n`.
double seconds_of(const std::vector<layer_cost>& costs, size_t first, size_t last, size_t k,
                  size_t n, const std::vector<double>& slowdowns, stage_passes below) {
  const auto p = k + 1 == n ? stage_passes{} : below;
  double s = 0;
  for (size_t l = first; l < last; ++l)
    s += p.forward * costs[l].forward + p.backward * costs[l].backward;
  return s * slowdowns[k];
}

} // namespace

std::vector<double> stage_seconds(const std::vector<layer_cost>& costs,
                                  const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns, stage_passes below) {
  check(costs, slowdowns, below);
  if (cuts.size() + 1 != slowdowns.size())
    throw argument_error("cut planner: " + std::to_string(cuts.size()) + " cuts for " +
                         std::to_string(slowdowns.size()) + " stages");
  std::vector<double> out;
  size_t first = 0;
  for (size_t k = 0; k < slowdowns.size(); ++k) {
    const size_t last = k < cuts.size() ? static_cast<size_t>(cuts[k]) + 1 : costs.size();
    if (last <= first || last > costs.size())
      throw argument_error("cut planner: the cuts are not increasing layers of the model");
    out.push_back(seconds_of(costs, first, last, k, slowdowns.size(), slowdowns, below));
    first = last;
  }
  return out;
}

std::vector<int64_t> balanced_cuts(const std::vector<layer_cost>& costs,
                                   const std::vector<double>& slowdowns, stage_passes below) {
  check(costs, slowdowns, below);
  const size_t n = slowdowns.size(), layers = costs.size();
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the slowest of stages 0..k when they hold layers [0, i);
  // from[k][i]: where stage k starts then.
  std::vector<std::vector<double>> best(n, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<size_t>> from(n, std::vector<size_t>(layers + 1, 0));
  for (size_t i = 1; i <= layers; ++i)
    best[0][i] = seconds_of(costs, 0, i, 0, n, slowdowns, below);
  for (size_t k = 1; k < n; ++k)
    for (size_t i = k + 1; i <= layers; ++i)
      for (size_t j = k; j < i; ++j) {
        const double slowest =
          std::max(best[k - 1][j], seconds_of(costs, j, i, k, n, slowdowns, below));
        if (slowest < best[k][i]) {
          best[k][i] = slowest;
          from[k][i] = j;
        }
      }
  std::vector<int64_t> cuts(n - 1);
  size_t end = layers;
  for (size_t k = n - 1; k > 0; --k) {
    end = from[k][end];
    cuts[k - 1] = static_cast<int64_t>(end) - 1;
  }
  return cuts;
}

placement balanced_placement(const std::vector<layer_cost>& costs,
                             const std::vector<double>& slowdowns, stage_passes below) {
  check(costs, slowdowns, below);
  if (slowdowns.size() > 8)
    throw argument_error("cut planner: " + std::to_string(slowdowns.size()) +
                         " machines are too many orders to try (at most 8)");
  auto plan = [&](const std::vector<size_t>& machines) {
    std::vector<double> s;
    for (auto m : machines)
      s.push_back(slowdowns[m]);
    placement p{machines, balanced_cuts(costs, s, below), 0};
    auto secs = stage_seconds(costs, p.cuts, s, below);
    p.slowest = *std::max_element(secs.begin(), secs.end());
    return p;
  };
  std::vector<size_t> given(slowdowns.size());
  for (size_t i = 0; i < given.size(); ++i)
    given[i] = i;
  auto best = plan(given);
  // Distinct orders of the slowdowns' values: the machines sorted by
  // slowdown, then every next permutation of the values, each value's
  // machines taken in their given order.
  std::vector<size_t> by_speed = given;
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [&](size_t a, size_t b) { return slowdowns[a] < slowdowns[b]; });
  std::vector<double> values;
  for (auto m : by_speed)
    values.push_back(slowdowns[m]);
  do {
    std::vector<size_t> machines;
    std::vector<bool> used(slowdowns.size(), false);
    for (auto v : values)
      for (auto m : by_speed)
        if (!used[m] && slowdowns[m] == v) {
          used[m] = true;
          machines.push_back(m);
          break;
        }
    auto p = plan(machines);
    if (p.slowest < best.slowest)
      best = std::move(p);
  } while (std::next_permutation(values.begin(), values.end()));
  return best;
}

} // namespace eg::learning

#include "algorithms/split/cut_planner.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace eg::learning {

// --- stage_costs ----------------------------------------------------------------

stage_costs::stage_costs(int64_t layers) : layers_(layers) {
  if (layers < 1)
    throw argument_error("cut planner: a model of " + std::to_string(layers) + " layers");
  seconds_.assign(static_cast<size_t>(layers * layers), 0.0);
}

size_t stage_costs::index(int64_t first, int64_t last) const {
  if (first < 0 || last < first || last >= layers_)
    throw argument_error("cut planner: no stage of layers " + std::to_string(first) + ".." +
                         std::to_string(last) + " in a model of " + std::to_string(layers_) +
                         " layers");
  return static_cast<size_t>(first * layers_ + last);
}

double stage_costs::at(int64_t first, int64_t last) const { return seconds_[index(first, last)]; }

void stage_costs::set(int64_t first, int64_t last, double seconds) {
  const auto i = index(first, last);
  if (!(seconds >= 0) || !std::isfinite(seconds))
    throw argument_error("cut planner: the stage of layers " + std::to_string(first) + ".." +
                         std::to_string(last) + " costs " + std::to_string(seconds) + " s");
  seconds_[i] = seconds;
}

stage_costs stage_costs::from_layers(const std::vector<layer_cost>& costs, stage_passes below) {
  if (costs.empty())
    throw argument_error("cut planner: no layers");
  for (auto& c : costs)
    if (!(c.forward >= 0) || !(c.backward >= 0))
      throw argument_error("cut planner: a layer's cost is negative");
  if (!(below.forward >= 0) || !(below.backward >= 0))
    throw argument_error("cut planner: negative passes");
  const auto n = static_cast<int64_t>(costs.size());
  stage_costs out(n);
  for (int64_t first = 0; first < n; ++first) {
    double below_sum = 0, once = 0;  // layers first..last at `below`'s passes, and at one each
    for (int64_t last = first; last < n; ++last) {
      const auto& c = costs[static_cast<size_t>(last)];
      below_sum += below.forward * c.forward + below.backward * c.backward;
      once += c.forward + c.backward;
      out.set(first, last, last + 1 < n ? below_sum : once);  // the last stage: one pass each
    }
  }
  return out;
}

// --- plans ------------------------------------------------------------------------

namespace {

void check(const stage_costs& costs, const std::vector<double>& slowdowns) {
  if (slowdowns.empty())
    throw argument_error("cut planner: no stages");
  if (costs.layers() < static_cast<int64_t>(slowdowns.size()))
    throw argument_error("cut planner: " + std::to_string(costs.layers()) +
                         " layers cannot make " + std::to_string(slowdowns.size()) + " stages");
  for (auto s : slowdowns)
    if (!(s >= 1))
      throw argument_error("cut planner: a slowdown is below 1");
}

} // namespace

std::vector<double> stage_seconds(const stage_costs& costs, const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns) {
  check(costs, slowdowns);
  if (cuts.size() + 1 != slowdowns.size())
    throw argument_error("cut planner: " + std::to_string(cuts.size()) + " cuts for " +
                         std::to_string(slowdowns.size()) + " stages");
  std::vector<double> out;
  int64_t first = 0;
  for (size_t k = 0; k < slowdowns.size(); ++k) {
    const int64_t last = k < cuts.size() ? cuts[k] : costs.layers() - 1;
    if (last < first || last >= costs.layers())
      throw argument_error("cut planner: the cuts are not increasing layers of the model");
    out.push_back(costs.at(first, last) * slowdowns[k]);
    first = last + 1;
  }
  return out;
}

int64_t batches_to_fill(const std::vector<double>& stage_seconds) {
  if (stage_seconds.empty())
    throw argument_error("cut planner: no stages to fill");
  double slowest = 0;
  for (double t : stage_seconds) {
    if (!(t > 0) || !std::isfinite(t))
      throw argument_error("cut planner: a stage's seconds per batch must be positive and finite");
    slowest = std::max(slowest, t);
  }
  // Stage k's round trip: its forward pass, every stage above it, its
  // backward pass. It holds at most in_flight - k batches and at least one,
  // so a trip within the slowest stage's time asks nothing; the last stage
  // holds none between two messages.
  int64_t fill = 1;
  double trip = 0;
  for (size_t k = stage_seconds.size(); k-- > 0;) {
    trip += stage_seconds[k];
    if (k + 1 == stage_seconds.size())
      continue;
    // A trip that is a whole number of the slowest stage's times, but for
    // float rounding, needs no more.
    const auto need = static_cast<int64_t>(std::ceil(trip / slowest - 1e-9));
    if (need > 1)
      fill = std::max(fill, static_cast<int64_t>(k) + need);
  }
  return fill;
}

std::vector<int64_t> balanced_cuts(const stage_costs& costs, const std::vector<double>& slowdowns) {
  check(costs, slowdowns);
  const size_t n = slowdowns.size(), layers = static_cast<size_t>(costs.layers());
  const double inf = std::numeric_limits<double>::infinity();
  auto seconds_of = [&](size_t first, size_t end, size_t k) {  // layers [first, end) as stage k
    return costs.at(static_cast<int64_t>(first), static_cast<int64_t>(end) - 1) * slowdowns[k];
  };
  // best[k][i]: the slowest of stages 0..k when they hold layers [0, i);
  // from[k][i]: where stage k starts then. Only the last stage may end at
  // the last layer.
  std::vector<std::vector<double>> best(n, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<size_t>> from(n, std::vector<size_t>(layers + 1, 0));
  for (size_t i = 1; i <= layers; ++i)
    best[0][i] = seconds_of(0, i, 0);
  for (size_t k = 1; k < n; ++k)
    for (size_t i = k + 1; i <= layers; ++i)
      for (size_t j = k; j < i; ++j) {
        const double slowest = std::max(best[k - 1][j], seconds_of(j, i, k));
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

std::vector<double> stage_seconds(const std::vector<layer_cost>& costs,
                                  const std::vector<int64_t>& cuts,
                                  const std::vector<double>& slowdowns, stage_passes below) {
  return stage_seconds(stage_costs::from_layers(costs, below), cuts, slowdowns);
}

std::vector<int64_t> balanced_cuts(const std::vector<layer_cost>& costs,
                                   const std::vector<double>& slowdowns, stage_passes below) {
  return balanced_cuts(stage_costs::from_layers(costs, below), slowdowns);
}

placement balanced_placement(const stage_costs& costs, const std::vector<double>& slowdowns) {
  check(costs, slowdowns);
  if (slowdowns.size() > 8)
    throw argument_error("cut planner: " + std::to_string(slowdowns.size()) +
                         " machines are too many orders to try (at most 8)");
  auto plan = [&](const std::vector<size_t>& machines) {
    std::vector<double> s;
    for (auto m : machines)
      s.push_back(slowdowns[m]);
    placement p{machines, balanced_cuts(costs, s), 0};
    auto secs = stage_seconds(costs, p.cuts, s);
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

placement balanced_placement(const std::vector<layer_cost>& costs,
                             const std::vector<double>& slowdowns, stage_passes below) {
  return balanced_placement(stage_costs::from_layers(costs, below), slowdowns);
}

} // namespace eg::learning

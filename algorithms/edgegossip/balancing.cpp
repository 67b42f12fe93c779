#include "algorithms/edgegossip/balancing.hpp"

#include <algorithm>
#include <limits>

namespace eg::learning {

balance_plan balance(const std::vector<platform_estimate>& platforms, double p_threshold,
                     double f_threshold, double min_ratio) {
  balance_plan plan;
  plan.platforms.reserve(platforms.size());
  std::vector<double> per_point;     // seconds per point trained, by decision
  std::vector<double> fixed;         // seconds of communication whatever the share
  std::vector<double> sending;       // of per_point, communication
  per_point.reserve(platforms.size());
  sending.reserve(platforms.size());
  fixed.reserve(platforms.size());
  for (const auto& p : platforms) {
    balance_decision d;
    d.name = p.name;
    // Written as !(p >= threshold) so that a NaN throughput counts as failed.
    d.failed = p.down || !(p.throughput >= p_threshold);
    // A NaN or negative communication estimate counts as none.
    const double c = p.communication_seconds > 0 ? p.communication_seconds : 0.0;
    const double dp = p.communication_per_point > 0 ? p.communication_per_point : 0.0;
    const double t = d.failed ? 0.0 : 1.0 / p.throughput + dp;
    d.epoch_seconds = d.failed ? std::numeric_limits<double>::infinity()
                               : static_cast<double>(p.samples) * t + c;
    plan.failed += d.failed ? 1 : 0;
    plan.platforms.push_back(std::move(d));
    per_point.push_back(t);
    fixed.push_back(c);
    sending.push_back(dp);
  }
  plan.exception_handling =
      !platforms.empty() &&
      static_cast<double>(plan.failed) / static_cast<double>(platforms.size()) > f_threshold;

  // Failed platforms have T = inf, so they sort last; names break ties so the
  // plan does not depend on the order estimates arrived in.
  std::vector<size_t> order(plan.platforms.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = plan.platforms[a];
    const auto& y = plan.platforms[b];
    if (x.epoch_seconds != y.epoch_seconds)
      return x.epoch_seconds < y.epoch_seconds;
    return x.name < y.name;
  });

  // T_1 is the fastest platform that has work to do: a platform without data
  // (T = 0) would otherwise give every other platform a ratio of 0.
  double target = 0;
  for (size_t i : order)
    if (!plan.platforms[i].failed && plan.platforms[i].epoch_seconds > 0) {
      target = plan.platforms[i].epoch_seconds;
      break;
    }
  for (size_t i : order)
    if (!plan.platforms[i].failed)
      target = std::max(target, fixed[i]);

  std::vector<balance_decision> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) {
    auto& d = plan.platforms[i];
    const double shard = d.failed ? 0.0 : d.epoch_seconds - fixed[i];  // |X_i| (1/p_i + d_i)
    if (d.failed)
      d.ratio = 0;
    else if (d.epoch_seconds <= target || shard <= 0)
      d.ratio = 1;  // the fastest, and platforms with no data, keep everything
    else
      d.ratio = std::clamp((target - fixed[i]) / shard, std::min(min_ratio, 1.0), 1.0);
    if (!d.failed) {
      const double points = per_point[i] > 0 ? d.ratio * shard / per_point[i] : 0.0;
      d.planned_seconds = d.ratio * shard + fixed[i];
      d.communication_seconds = fixed[i] + points * sending[i];
    }
    sorted.push_back(std::move(d));
  }
  plan.platforms = std::move(sorted);
  return plan;
}

double epoch_deadline(double factor, double first_done, double planned, double margin) {
  return factor * std::max(first_done, planned) + margin;
}

} // namespace eg::learning

#include "algorithms/edgegossip/balancing.hpp"

#include <algorithm>
#include <limits>

namespace eg::learning {

balance_plan balance(const std::vector<platform_estimate>& platforms, double p_threshold,
                     double f_threshold) {
  balance_plan plan;
  plan.platforms.reserve(platforms.size());
  for (const auto& p : platforms) {
    balance_decision d;
    d.name = p.name;
    // Written as !(p >= threshold) so that a NaN throughput counts as failed.
    d.failed = p.down || !(p.throughput >= p_threshold);
    d.epoch_seconds = d.failed ? std::numeric_limits<double>::infinity()
                               : static_cast<double>(p.samples) / p.throughput;
    plan.failed += d.failed ? 1 : 0;
    plan.platforms.push_back(std::move(d));
  }
  plan.exception_handling =
      !platforms.empty() &&
      static_cast<double>(plan.failed) / static_cast<double>(platforms.size()) > f_threshold;

  // Failed platforms have T = inf, so they sort last; names break ties so the
  // plan does not depend on the order estimates arrived in.
  std::sort(plan.platforms.begin(), plan.platforms.end(),
            [](const balance_decision& a, const balance_decision& b) {
              if (a.epoch_seconds != b.epoch_seconds)
                return a.epoch_seconds < b.epoch_seconds;
              return a.name < b.name;
            });

  // T_1 is the fastest platform that has work to do: a platform without data
  // (T = 0) would otherwise give every other platform a ratio of 0.
  double fastest = 0;
  for (const auto& d : plan.platforms)
    if (!d.failed && d.epoch_seconds > 0) {
      fastest = d.epoch_seconds;
      break;
    }
  for (auto& d : plan.platforms) {
    if (d.failed)
      d.ratio = 0;
    else if (d.epoch_seconds <= fastest)
      d.ratio = 1;  // the fastest, and platforms with no data, keep everything
    else
      d.ratio = fastest / d.epoch_seconds;
  }
  return plan;
}

double epoch_deadline(double factor, double first_done, double planned, double margin) {
  return factor * std::max(first_done, planned) + margin;
}

} // namespace eg::learning

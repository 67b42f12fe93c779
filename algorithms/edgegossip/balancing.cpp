#include "algorithms/edgegossip/balancing.hpp"

#include <algorithm>
#include <limits>

namespace eg::learning {

balance_plan balance(const std::vector<platform_estimate>& platforms, double p_threshold,
                     double f_threshold, double min_ratio) {
  balance_plan plan;
  plan.platforms.reserve(platforms.size());
  struct times {
    double train = 0;  // |X_i| / p_i: the whole shard's training
    double fixed = 0;  // c_i
    double link = 0;   // |X_i| d_i: the whole shard's share-bound communication
    /// T_i(r): training and communication overlap (the lane sends while
    /// the platform trains on).
    double at(double r) const { return std::max(r * train, fixed + r * link); }
  };
  // The longest epoch training allows: the slowest platform's whole shard.
  double longest = 0;
  for (const auto& p : platforms)
    if (!p.down && p.throughput >= p_threshold && p.samples > 0)
      longest = std::max(longest, static_cast<double>(p.samples) / p.throughput);
  std::vector<times> t;  // by decision
  t.reserve(platforms.size());
  for (const auto& p : platforms) {
    balance_decision d;
    d.name = p.name;
    // Written as !(p >= threshold) so that a NaN throughput counts as failed.
    d.failed = p.down || !(p.throughput >= p_threshold);
    // A NaN or negative communication estimate counts as none.
    times x;
    if (!d.failed) {
      const double n = static_cast<double>(p.samples);
      x.train = n / p.throughput;
      x.fixed = p.communication_seconds > 0 ? p.communication_seconds : 0.0;
      x.link = p.communication_per_point > 0 ? n * p.communication_per_point : 0.0;
      // Fixed messages that take longer than any epoch training allows are
      // not waited for: no plan lets them through (the lane gives up what
      // waits too long), and an epoch stretched towards them only idles
      // the platforms that train faster. Dense AlexNet over 2-5 Mbit/s
      // uplinks planned every share at 1, GoSGD's plan, for 57-375 s of
      // messages against epochs of 15 s.
      if (x.fixed > longest && longest > 0) {
        d.unplanned_communication = x.fixed;
        x.fixed = 0;
      }
    }
    d.epoch_seconds = d.failed ? std::numeric_limits<double>::infinity() : x.at(1);
    plan.failed += d.failed ? 1 : 0;
    plan.platforms.push_back(std::move(d));
    t.push_back(x);
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
  // (T = 0) would otherwise give every other platform a ratio of 0. No
  // share makes the epoch shorter than a platform's fixed communication.
  double target = 0;
  for (size_t i : order)
    if (!plan.platforms[i].failed && plan.platforms[i].epoch_seconds > 0) {
      target = plan.platforms[i].epoch_seconds;
      break;
    }
  for (size_t i : order)
    if (!plan.platforms[i].failed)
      target = std::max(target, t[i].fixed);

  std::vector<balance_decision> sorted;
  sorted.reserve(order.size());
  const double floor = std::clamp(min_ratio, 0.0, 1.0);
  for (size_t i : order) {
    auto& d = plan.platforms[i];
    const auto& x = t[i];
    if (d.failed) {
      d.ratio = 0;
    } else if (d.epoch_seconds <= target) {
      d.ratio = 1;  // the fastest, and platforms with no data, keep everything
    } else {
      // The largest share whose training, and whose share-bound messages
      // after the fixed ones, fit in the target.
      double r = x.train > 0 ? target / x.train : 1.0;
      if (x.link > 0)
        r = std::min(r, (target - x.fixed) / x.link);
      d.ratio = std::clamp(r, floor, 1.0);
    }
    if (!d.failed) {
      d.planned_seconds = x.at(d.ratio);
      d.communication_seconds = x.fixed + d.ratio * x.link;
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

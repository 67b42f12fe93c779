#pragma once
// EdgeGossip's gossip training balancer (Algorithm 1): from each platform's
// predicted throughput, the share of its local data it trains on next epoch
// so that all finish together. EdgeGossip (Han et al., IEEE TPDS 2021);
// docs/ALGORITHMS.md, "EdgeGossip: Algorithm 1 (balancing)" and "Epoch deadline". No torch.

#include <cstdint>
#include <string>
#include <vector>

namespace eg::learning {

struct platform_estimate {
  std::string name;
  int64_t samples = 0;      ///< |X_i|
  double throughput = 0;    ///< p_i, data points per second
  bool down = false;        ///< reported down by a monitor
};

struct balance_decision {
  std::string name;
  double epoch_seconds = 0;  ///< T_i = |X_i| / p_i (infinity when failed)
  double ratio = 0;          ///< r_i = T_1 / T_i (0 when failed)
  bool failed = false;
};

struct balance_plan {
  std::vector<balance_decision> platforms;  ///< sorted by T ascending, failed last
  size_t failed = 0;
  bool exception_handling = false;  ///< failed / E > f_threshold
};

/// Algorithm 1. A platform is failed when it is down or p_i < p_threshold.
/// O(E log E).
balance_plan balance(const std::vector<platform_estimate>& platforms, double p_threshold = 0.001,
                     double f_threshold = 0.1);

/// The epoch deadline (edgegossip.deadline), in seconds after the epoch's
/// start: once the first platform finished the epoch after `first_done`
/// seconds, the others get `factor` times the longer of that and the
/// planned epoch time (0: none planned), plus `margin` against the noise of
/// short epochs; a platform still training then is cut. A plan is right for
/// the load at the time it is made: a platform whose load rose during the
/// epoch would otherwise hold every other one at the barrier for as long as
/// it takes.
double epoch_deadline(double factor, double first_done, double planned, double margin = 0.25);

} // namespace eg::learning

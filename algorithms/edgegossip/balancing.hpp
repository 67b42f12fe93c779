#pragma once
// EdgeGossip's gossip training balancer (Algorithm 1): from each platform's
// predicted throughput, and the time its messages take on its link, the
// share of its local data it trains on next epoch so that all finish
// together. EdgeGossip (Han et al., IEEE TPDS 2021); docs/ALGORITHMS.md,
// "EdgeGossip: Algorithm 1 (balancing)", "Plans that count the network" and
// "Epoch deadline". No torch.

#include <cstdint>
#include <string>
#include <vector>

namespace eg::learning {

struct platform_estimate {
  std::string name;
  int64_t samples = 0;      ///< |X_i|
  double throughput = 0;    ///< p_i, data points per second
  bool down = false;        ///< reported down by a monitor
  /// The epoch's communication, predicted from the platform's link (its
  /// lane's seconds per byte) and the bytes of its last epoch: seconds that
  /// do not depend on its share (EdgeGossip's messages: as many a epoch
  /// whatever it trains), and seconds per point trained (messages that go
  /// with the steps). 0 and 0: compute alone, the paper's Algorithm 1.
  double communication_seconds = 0;
  double communication_per_point = 0;
};

struct balance_decision {
  std::string name;
  /// T_i = max(|X_i| / p_i, c_i + |X_i| d_i) on the whole shard (infinity
  /// when failed); |X_i| / p_i without communication.
  double epoch_seconds = 0;
  /// r_i: T_1 / T_i without communication (0 when failed).
  double ratio = 0;
  /// The predicted time of the planned share, T_i(r_i).
  double planned_seconds = 0;
  /// Of it, communication: c_i + r_i |X_i| d_i.
  double communication_seconds = 0;
  /// c_i of a link too slow to plan for (its fixed messages take longer
  /// than the slowest platform's whole shard trains): planned as none. 0:
  /// the link is planned for, or there is none.
  double unplanned_communication = 0;
  bool failed = false;
};

struct balance_plan {
  std::vector<balance_decision> platforms;  ///< sorted by T ascending, failed last
  size_t failed = 0;
  bool exception_handling = false;  ///< failed / E > f_threshold
};

/// Algorithm 1. A platform is failed when it is down or p_i < p_threshold.
/// O(E log E).
///
/// With communication, each platform's epoch takes T_i(r) = max(r |X_i| /
/// p_i, c_i + r |X_i| d_i): the lane sends while the platform trains on,
/// so training and messages overlap. The epoch is planned to last T* =
/// max(T_1, max_i c_i), T_1 the shortest T_i(1): no share makes an epoch
/// shorter than a platform's fixed communication, and while a slow link
/// carries its messages the others train on. Each platform gets the largest
/// share that fits, r_i = min(T* p_i / |X_i|, (T* - c_i) / (|X_i| d_i)), at
/// most 1 and at least `min_ratio`. Without communication this is
/// r_i = T_1 / T_i. A platform whose fixed communication c_i is longer than
/// the slowest platform's whole shard trains, max_j |X_j| / p_j, is planned
/// with c_i = 0 (balance_decision::unplanned_communication): no epoch
/// training allows would let those messages through.
balance_plan balance(const std::vector<platform_estimate>& platforms, double p_threshold = 0.001,
                     double f_threshold = 0.1, double min_ratio = 0.001);

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

#pragma once
// EdgeGossip's performance predictor, actor-free: contention samples from
// /proc, and the regression of time per data point against contention.
// ALGORITHMS.md section 1. No torch.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace eg::learning {

/// U = (U_core, U_net, U_disk) caused by co-running programs.
struct contention {
  double core = 0;  ///< cores busy with other programs (0 .. cores)
  double net = 0;   ///< network MB/s (all interfaces)
  double disk = 0;  ///< disk MB/s read + written
};

/// Reads /proc/stat, /proc/self/stat, /proc/net/dev and /proc/diskstats;
/// each sample() is the mean contention since the previous call. The CPU
/// time of this process itself is not contention and is subtracted.
class contention_sampler {
public:
  contention_sampler();
  contention sample();

private:
  struct counters {
    double wall = 0;          // seconds (steady clock)
    double busy_jiffies = 0;  // all CPUs, non-idle
    double self_jiffies = 0;  // this process, user + system
    double net_bytes = 0;
    double disk_bytes = 0;
  };
  static counters read();
  counters last_;
};

/// Time per data point t = t0 * RG(U) as a linear model t = b0 + b . x(U)
/// (t0 = b0, RG(U) = t(U) / t0 >= 1), fitted by weighted least squares with
/// exponential forgetting so that t0 follows slow drift of the machine.
///
/// x(U) is (U_core, U_net, U_disk), plus, when the machine's core count is
/// given, the CPU-share term s(U_core) = 1 / min(1, max(0.05, (cores -
/// U_core) / threads)) - 1: a platform of `threads` busy threads gets the
/// cores the co-runners leave, so its time grows with 1 / (cores - U_core)
/// once they leave less than it needs, and not at all before. Time is not
/// linear in U_core there; with this term the fit is (bench predictor).
class slowdown_model {
public:
  /// `forgetting` in (0, 1]: weight of a sample decays by this per newer one.
  /// `cores` > 0 adds the CPU-share term for a platform of `threads` threads.
  explicit slowdown_model(double forgetting = 0.995, size_t window = 600, double cores = 0,
                          double threads = 1);

  /// One observation: contention U and the measured seconds per data point.
  void observe(const contention& u, double seconds_per_point);
  /// Observations so far (bounded by the window).
  size_t size() const { return samples_.size(); }
  /// Predicted seconds per data point under U (0 when nothing observed).
  double seconds_per_point(const contention& u) const;
  /// t0: predicted seconds per point without interference.
  double t0() const;
  /// RG(U) = t(U) / t0, at least 1.
  double slowdown(const contention& u) const;
  /// p = sum over `executors` of 1 / t_i, data points per second.
  double throughput(const contention& u, int executors = 1) const;

  /// Samples as text, for the store; restore() takes them back.
  std::string serialize() const;
  void restore(const std::string& text);  // throws std::runtime_error when malformed

private:
  struct sample {
    contention u;
    double t;
  };
  static constexpr size_t max_features = 4;
  void refit();
  size_t features() const { return cores_ > 0 ? 4 : 3; }
  void features(const contention& u, double* x) const;
  double forgetting_;
  size_t window_;
  double cores_;
  double threads_;
  std::deque<sample> samples_;
  double beta_[1 + max_features] = {0, 0, 0, 0, 0};  // b0, b_core, b_net, b_disk, b_share
};

} // namespace eg::learning

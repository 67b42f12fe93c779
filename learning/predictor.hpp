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

/// Time per data point t = t0 * RG(U) as a linear model t = b0 + b . U
/// (t0 = b0, RG(U) = t(U) / t0 >= 1), fitted by weighted least squares with
/// exponential forgetting so that t0 follows slow drift of the machine.
class slowdown_model {
public:
  /// `forgetting` in (0, 1]: weight of a sample decays by this per newer one.
  explicit slowdown_model(double forgetting = 0.995, size_t window = 600);

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
  void refit();
  double forgetting_;
  size_t window_;
  std::deque<sample> samples_;
  double beta_[4] = {0, 0, 0, 0};  // b0, b_core, b_net, b_disk
};

} // namespace eg::learning

#pragma once
// EdgeGossip's performance predictor, actor-free: contention samples from
// /proc, and the regression of time per data point against contention.
// EdgeGossip (Han et al., IEEE TPDS 2021); docs/ALGORITHMS.md, "Performance predictor". No torch.

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace eg::learning {

/// U = (U_core, U_net, U_disk) caused by co-running programs, and U_wait,
/// how that contention reaches this process's threads.
struct contention {
  double core = 0;  ///< cores busy with other programs (0 .. cores)
  double net = 0;   ///< network MB/s (all interfaces)
  double disk = 0;  ///< disk MB/s read + written
  /// Seconds this process's threads waited in a run queue per second they
  /// ran (/proc/self/task/*/schedstat). U_core saturates once every core is
  /// busy (on 2 cores, 2 and 3 CPU hogs read 1.3 and 1.5 cores), while the
  /// slowdown of a CPU-bound thread keeps growing as 1 + U_wait.
  double wait = 0;
};

/// Reads /proc/stat, /proc/self/stat, /proc/net/dev, /proc/diskstats and
/// /proc/self/task/*/schedstat; each sample() is the mean contention since
/// the previous call. The CPU time of this process itself is not contention
/// and is subtracted.
class contention_sampler {
public:
  contention_sampler();
  contention sample();
  /// When the last sample() ended (or the sampler was made), in
  /// steady_seconds(): a sample covers the time since the one before.
  double sampled_at() const { return last_.wall; }

private:
  struct counters {
    double wall = 0;          // seconds (steady clock)
    double busy_jiffies = 0;  // all CPUs, non-idle
    double self_jiffies = 0;  // this process, user + system
    double net_bytes = 0;
    double disk_bytes = 0;
    double run_ns = 0;   // this process's threads: on a CPU
    double wait_ns = 0;  // this process's threads: runnable, waiting for a CPU
  };
  static counters read();
  counters last_;
  double last_wait_ = 0;
};

/// Seconds on the steady clock (the time base of contention_history).
double steady_seconds();

/// Contention samples with the time span each covers, for the two means the
/// predictor needs: the contention an observation's seconds of training ran
/// under (paired with that observation), and the contention of the last few
/// seconds a prediction is made for. One sample a second before an epoch
/// was a noisy estimate of co-runners that burst (a duty-cycled CPU hog,
/// disk writes): bench predictor's largest errors.
class contention_history {
public:
  /// Samples that ended more than `keep_seconds` before the newest go.
  explicit contention_history(double keep_seconds = 120);
  /// A sample: the mean contention over [start, end].
  void add(double start, double end, const contention& u);
  /// Time-weighted mean over [from, to] of the samples overlapping it; the
  /// newest sample when none does; all zero when there is none.
  contention mean(double from, double to) const;
  size_t size() const { return spans_.size(); }

private:
  struct span {
    double start, end;
    contention u;
  };
  std::deque<span> spans_;
  double keep_;
};

/// A contention_sampler and its history, shared by threads: what the
/// predictors of one process (actors/platform/predictor.cpp) and bench predictor use.
class contention_monitor {
public:
  /// Samples now if the newest sample is `sample_period` seconds old.
  void refresh();
  /// The mean contention of the last `seconds`.
  contention last(double seconds);

  static constexpr double sample_period = 0.5;
  /// A prediction is made for the mean contention of this many seconds.
  static constexpr double prediction_window = 2.0;

private:
  std::mutex mutex_;
  contention_sampler sampler_;
  contention_history history_;
};

/// What a platform observes of itself for its predictor: wall time (idle
/// included) and points trained, handed over after every `period` seconds of
/// training and at the end of every epoch. The end of an epoch matters: a
/// fast platform on a small share trains for less than a second an epoch,
/// and without it made one observation every few epochs, so its predictor
/// lagged behind a change of its speed by that many epochs.
class observation_meter {
public:
  struct observation {
    double seconds = 0;
    uint64_t samples = 0;
  };
  explicit observation_meter(double period = 1.0) : period_(period) {}
  /// One iteration's wall time and points; an observation when `period`
  /// seconds have gathered.
  std::optional<observation> add(double seconds, uint64_t samples);
  /// What has gathered since the last observation (the end of an epoch).
  std::optional<observation> flush();

private:
  double period_;
  observation open_;
};

/// Time per data point t = t0 * RG(U), with RG(U) = RG_run(U) * (1 + U_wait):
/// a training thread's wall time is the time it runs and the time it waits
/// for a CPU, so U_wait slows it by exactly 1 + U_wait, while core, network
/// and disk load slow its running (caches, memory bandwidth, interrupts).
/// RG_run comes from a linear fit of the run time t / (1 + U_wait) =
/// b0 + b . U (U = core, net, disk) by weighted least squares with
/// exponential forgetting over a long window: RG_run(U) = (b0 + b . U) / b0
/// >= 1. (A linear fit of t against all four, wait included, predicted two
/// recorded runs of bench predictor 0.2 and 0.7 points worse, and load of two
/// kinds at once as the sum of their slowdowns, not the product.)
/// Contention only ever slows
/// a platform down, so a slope the samples fit below 0 is taken out and the
/// fit made again without it, and slopes are only fitted from
/// `min_fit_samples` samples on (two or three samples fit any noise exactly
/// and extrapolate wildly). Nor is the fit read above the contention its
/// samples cover: there the slowdown is the one at their highest (a
/// platform's node moving its own models at an epoch's end reads as
/// network load no training saw). t0 follows the observed times quickly: it is the
/// recency-weighted mean of t_k / RG(U_k) over the newest samples (each older
/// one weighs `tracking` times less), so a machine that slows down for
/// reasons U does not see is followed within a few observations.
///
/// A step change is followed at once: the mean stops at the first older
/// sample whose t_k / RG(U_k) lies more than a factor `change` away from the
/// mean of the newer ones. Without that, a platform whose load fell from 8x
/// to 1x and was then given a small share of its data (one observation an
/// epoch) took tens of epochs to be seen as fast, and idled meanwhile (a
/// platform's speed moves that much when co-runners come and go, or its
/// node's CPU quota changes). A single outlier moves t0 for one
/// observation: the next one, back at the old level, is within `change` of
/// the older samples again.
class slowdown_model {
public:
  /// `forgetting` in (0, 1]: weight of a sample in the fit decays by this per
  /// newer one. `tracking` in (0, 1]: the same for t0. `change` > 1: a factor
  /// between t0's estimates that is a new level, not noise.
  explicit slowdown_model(double forgetting = 0.995, size_t window = 600, double tracking = 0.8,
                          size_t min_fit_samples = 5, double change = 1.5);

  /// One observation: contention U and the measured seconds per data point.
  void observe(const contention& u, double seconds_per_point);
  /// Observations so far (bounded by the window).
  size_t size() const { return samples_.size(); }
  /// U_wait of the newest observation (0 before any): the wait of the
  /// platform's latest training. A prediction made between epochs takes it
  /// instead of the idle seconds' wait (a CPU quota throttles only a
  /// process that runs: with the idle wait, a node limited to 0.15 cores
  /// was predicted as fast as an unlimited one).
  double training_wait() const { return samples_.empty() ? 0 : samples_.back().u.wait; }
  /// Predicted seconds per data point under U (0 when nothing observed).
  double seconds_per_point(const contention& u) const;
  /// t0: predicted seconds per point without interference, following the
  /// newest observations.
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
  void fit_slopes();
  void find_base();
  void track_t0();
  double forgetting_;
  size_t window_;
  double tracking_;
  size_t min_fit_samples_;
  double change_;
  std::deque<sample> samples_;
  double beta_[4] = {0, 0, 0, 0};  // b0, b_core, b_net, b_disk (of the run time)
  // Each feature's highest value (core, net, disk) in the samples the fit
  // weighs: a prediction does not extrapolate the slopes above it.
  double highest_[3] = {0, 0, 0};
  double base_ = 0;  // the fit's time per point on a quiet machine (0: none)
  double t0_ = 0;    // tracked t0
};

/// The other half of a platform's predictor: its link. Seconds per byte
/// its node's weights lane took to send and to receive, learnt from the
/// lane's own timings of every epoch (messages::link_timing: the seconds
/// the lane was busy writing or reading frames, and the bytes). A link that
/// keeps up with the messages shows the time of handing them to the kernel,
/// next to nothing; one that cannot shows its rate, once the socket's
/// buffer is full and every write waits for the link. An epoch that moved
/// less than `min_bytes` in a direction teaches nothing of it (a few
/// frames, timed, are noise). Each direction follows its newest epochs
/// (each older one weighs `tracking` times less) and jumps to a new level
/// at once, as slowdown_model's t0 does, when an epoch's time per byte lies
/// more than a factor `change` away: a link that slows down mid-run is
/// planned for from the next epoch on.
class link_model {
public:
  explicit link_model(uint64_t min_bytes = 64 * 1024, double tracking = 0.5,
                      double change = 1.5);
  /// One epoch of the lane: busy seconds and bytes, each way.
  void observe(double send_seconds, uint64_t bytes_sent, double receive_seconds,
               uint64_t bytes_received);
  /// Predicted seconds per byte (0: nothing learnt).
  double send_seconds_per_byte() const { return send_.estimate; }
  double receive_seconds_per_byte() const { return receive_.estimate; }
  /// Epochs that taught something, either way.
  size_t observations() const { return send_.epochs + receive_.epochs; }

private:
  struct direction {
    double estimate = 0;
    size_t epochs = 0;
  };
  void learn(direction& d, double seconds, uint64_t bytes) const;
  uint64_t min_bytes_;
  double tracking_;
  double change_;
  direction send_, receive_;
};

} // namespace eg::learning

#pragma once
// The arithmetic of parameter-server synchronisation (docs/ALGORITHMS.md,
// "ADSP"): ADSP's commit interval, the loss-curve fit and reward its
// scheduler climbs C_target by, SSP's staleness bound and ADACOMM's period.
// Plain classes, no torch, no CAF: the server and worker actors call them.
//
// ADSP: Hu, Wang, Wu, "Distributed Machine Learning through Heterogeneous
// Edge Systems", AAAI 2020 (arXiv 1911.06949), as its authors' released
// code does it. SSP: Ho et al., "More Effective Distributed ML via a Stale
// Synchronous Parallel Parameter Server", NIPS 2013. ADACOMM: Wang, Joshi,
// "Adaptive Communication Strategies to Achieve the Best Error-Runtime
// Trade-off in Local-Update SGD", SysML 2019.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace eg::learning {

/// ADSP's commit interval of one worker, in seconds: every worker commits
/// C_target times a check period Gamma, less the time a commit costs it
/// (O_i, measured), and never more often than `minimum`:
/// max(minimum, Gamma / C_target - O_i). A fast worker thus runs more local
/// steps between commits than a slow one, and none waits. Throws
/// std::invalid_argument for a check period or minimum that is not
/// positive, C_target < 1 or a negative overhead.
double adsp_commit_interval(double check_period, int64_t c_target, double overhead,
                            double minimum);

/// l(t) = 1 / (a2 t + b) + c: the loss curve ADSP's scheduler fits to the
/// global loss observed during a trial (a2 is the paper's a^2).
struct loss_curve {
  double a2 = 0;
  double b = 0;
  double c = 0;
  double residual = 0;  ///< sum of squared errors of the fit, in loss units

  double at(double t) const { return 1.0 / (a2 * t + b) + c; }
  /// The time at which the curve reaches `target` (from the trial's start):
  /// (1 / (target - c) - b) / a2; +infinity when it never does (target <=
  /// c, or a flat or rising curve), <= 0 when it is already there.
  double time_to(double target) const;
  /// The scheduler's reward, 1 / time_to(target): a2 / (1 / (target - c) -
  /// b); 0 when the target is out of reach, +infinity when the curve is
  /// already below it.
  double reward(double target) const;
};

/// Least-squares fit of l(t) to (t, loss) points: for a given c the model
/// is linear in 1 / (l - c) = a2 t + b, so c is searched (log-spaced below
/// the smallest loss, then refined) for the smallest squared error in loss
/// units; a2 is kept >= 0. Three points at distinct times determine it
/// exactly. nullopt with fewer than three distinct times, or a non-finite
/// point.
std::optional<loss_curve> fit_loss_curve(const std::vector<std::pair<double, double>>& points);

/// ADSP's online search for C_target, the commits per check period of every
/// worker: test C (one check period) and C + 1; while C + 1 scores the
/// higher reward, C += 1 and test the next; else settle on C. `again()`
/// searches anew from the settled C (the authors: every 1000 s, or when the
/// global loss rose by 30 %; see search_trigger).
class commit_rate_search {
public:
  /// Starts searching at `start` >= 1 (the authors: 1).
  explicit commit_rate_search(int64_t start = 1);
  /// The C the workers should run now: the one under test while searching,
  /// the settled one after.
  int64_t trial() const;
  /// The best C known: the settled one, or the base of the comparison.
  int64_t target() const { return base_; }
  bool searching() const { return searching_; }
  /// The reward of the trial just run (the C that trial() said).
  void report(double reward);
  /// Search again from the settled C (its reward is measured afresh).
  void again();

private:
  int64_t base_;
  std::optional<double> base_reward_;
  bool searching_ = true;
};

/// When ADSP searches C_target again: `period` seconds after it settled, or
/// when the global loss rose by `rise` (0.3: 30 %) over the lowest seen
/// since.
class search_trigger {
public:
  search_trigger(double period, double rise);
  /// The search settled at time `now` with the global loss `loss`.
  void settled(double now, double loss);
  /// A new global loss at time `now`; true when the search is due.
  bool due(double now, double loss);

private:
  double period_, rise_;
  double since_ = 0;
  double lowest_ = 0;
  bool armed_ = false;
};

/// SSP's bound: a worker whose clock (commits made) is more than
/// `staleness` ahead of the slowest live worker's waits. Workers join and
/// leave (a worker that goes down no longer holds the others back).
class staleness_bound {
public:
  explicit staleness_bound(uint64_t staleness);
  uint64_t staleness() const { return staleness_; }
  /// A worker joins at the slowest clock (a newcomer does not hold the
  /// others back, nor race ahead); the clock it had if it was here before
  /// and is behind.
  void join(const std::string& worker);
  void leave(const std::string& worker);
  /// The worker committed: its clock moves on by one.
  void tick(const std::string& worker);
  uint64_t clock(const std::string& worker) const;
  /// The slowest live worker's clock (0 with none).
  uint64_t slowest() const;
  /// Whether `worker` may run on, i.e. clock - slowest <= staleness.
  bool may_proceed(const std::string& worker) const;
  /// How far the worker is ahead of the slowest.
  uint64_t lead(const std::string& worker) const;

private:
  uint64_t staleness_;
  std::map<std::string, uint64_t> clocks_;
};

/// ADACOMM's communication period in local steps, after a check with
/// global loss `loss` (`initial_loss` at the start): ceil(sqrt(loss /
/// initial_loss) * tau0) when that is below the current `tau`, else
/// ceil(tau / 2), as the ADSP authors' ADACOMM baseline does; at least 1.
int64_t adacomm_period(double loss, double initial_loss, int64_t tau0, int64_t tau);

} // namespace eg::learning

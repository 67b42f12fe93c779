#pragma once
// When the workers of a parameter server commit and who waits
// (docs/ALGORITHMS.md, "Parameter server and ADSP"), actor-free: the
// server's side decides, at each commit, which workers get their answer
// (the global model) now and when each commits next; a worker's side
// counts steps and seconds until its next commit and measures what a
// commit costs it. Plain classes, no torch, no CAF: the server actor and
// the platform call them.

#include "algorithms/ps/adsp.hpp"
#include "config/registry.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace eg::learning {

/// The synchronisation model of a parameter server.
enum class sync_model {
  bsp,      ///< every live worker commits each round; the server answers once all did
  ssp,      ///< a worker more than `staleness` commits ahead of the slowest waits
  async,    ///< commit every `commit_steps` steps; nobody waits
  adacomm,  ///< commit every tau steps, tau from the loss (ADACOMM's rule)
  adsp,     ///< commit every max(min, Gamma / C_target - O_i) seconds; C_target searched
};

/// The synchronisation model of each parameter-server strategy, by the
/// strategy's name (config::strategies() holds its traits).
config::registry<sync_model>& sync_models();

/// Registers a parameter-server strategy: its traits for config and the
/// actors, its synchronisation model for the server. A static object of
/// this type beside the model's code (here: commit_schedule.cpp).
struct server_registration {
  server_registration(const std::string& name, config::strategy_traits traits, sync_model model);
};

struct commit_settings {
  sync_model model = sync_model::adsp;
  int64_t commit_steps = 40;   ///< bsp, ssp, async; ADACOMM's tau_0; ADSP before its first check
  uint64_t staleness = 1;      ///< SSP, in commits
  /// ADSP's Gamma and ADACOMM's period of checks, seconds; 0: measured,
  /// 1.5 commit_steps steps of the median worker (see measured_periods).
  double check_period = 0;
  /// ADSP's least commit interval, seconds; 0: check_period / 6.
  double min_interval = 0;
  double target_loss = 0.35;   ///< ADSP's reward: the fitted time to this training loss
  /// ADSP searches C_target again this long after it settled (0: the
  /// authors' 1000 s against their 60 s period, i.e. 50 / 3 check periods).
  double search_again = 0;
};

/// When a worker commits next: after `steps` local steps (> 0), or after
/// `seconds` of training (> 0).
struct next_commit {
  int64_t steps = 0;
  double seconds = 0;
};

/// A worker to answer now, and when it commits next.
struct release {
  std::string worker;
  next_commit next;
};

/// The server's side. Times are seconds on one clock (the server's).
class commit_schedule {
public:
  /// `workers`: the workers expected (BSP's rounds and SSP's slowest count
  /// them from the start, at clock 0; one that is not there must leave()).
  commit_schedule(commit_settings s, const std::vector<std::string>& workers);

  /// Worker `w` committed at `now` with the mean training loss of its steps
  /// since its last commit and its measured commit overhead (seconds from
  /// sending its last commit to receiving the answer). `resting`: it ended
  /// its epoch and waits for the next (it holds no one back until it
  /// commits again). Returns the workers to answer now: `w` unless it must
  /// wait (BSP until the round is complete, SSP while too far ahead), and
  /// any held worker that may go on now.
  std::vector<release> commit(const std::string& w, double now, double loss, double overhead,
                              bool resting);
  /// Worker `w` is gone (its platform is down): it holds no one back; the
  /// workers that may go on now. A worker that commits again rejoins.
  std::vector<release> leave(const std::string& w);

  /// What the console shows of a worker.
  struct worker_view {
    uint64_t commits = 0;
    double first_at = 0;  ///< time of its first commit
    double last_at = 0;   ///< time of its latest commit
    uint64_t lead = 0;    ///< SSP: commits ahead of the slowest live worker
    bool held = false;    ///< waiting for the server's answer (BSP, SSP)
    bool resting = false;
    next_commit next;     ///< what it was told last
  };
  const std::map<std::string, worker_view>& workers() const { return workers_; }
  /// ADSP's C_target in force (the one under trial while searching).
  int64_t c_target() const { return search_.trial(); }
  bool searching() const { return search_.searching(); }
  /// ADACOMM's tau in force.
  int64_t tau() const { return tau_; }
  /// Gamma and the least interval in force (0 while still being measured).
  double check_period() const { return gamma_; }
  double min_interval() const { return min_; }
  /// The median worker's seconds per step they were measured from (0: set
  /// in the settings, or not measured yet).
  double step_seconds() const { return step_seconds_; }
  const commit_settings& settings() const { return s_; }

private:
  next_commit next_for(const std::string& w, double overhead) const;
  /// Releases every held worker allowed to go on (BSP: all once every live
  /// active worker is held; SSP: those within the bound).
  void release_held(std::vector<release>& out);
  void observe(double now, double loss);
  /// Gamma and the least interval in force from now on (and the period
  /// after which C_target is searched again, unless set).
  void set_periods(double gamma, double min);
  /// Worker `w` committed at `now` after a full interval of commit_steps
  /// steps begun at `since`: a sample for measured periods.
  void measure(const std::string& w, double since, double now);

  commit_settings s_;
  double gamma_ = 0;
  double min_ = 0;
  double step_seconds_ = 0;
  std::map<std::string, double> step_samples_;  ///< seconds per step, per worker
  std::map<std::string, worker_view> workers_;
  std::map<std::string, double> overhead_;
  std::set<std::string> held_;
  std::set<std::string> active_;  ///< live and not resting
  staleness_bound bound_;
  // ADACOMM.
  int64_t tau_;
  std::optional<double> initial_loss_;
  double period_start_ = 0;
  double period_loss_sum_ = 0;
  uint64_t period_losses_ = 0;
  // ADSP.
  commit_rate_search search_{1};
  search_trigger trigger_;
  bool started_ = false;
  double trial_start_ = 0;
  bool first_check_done_ = false;
  bool settled_said_ = false;
  std::vector<std::pair<double, double>> trial_points_;
};

/// Measured periods: a worker's step takes `step_seconds` (the median
/// worker's); Gamma = 1.5 * `commit_steps` steps and the least interval
/// Gamma / 6 (= commit_steps / 4 steps), the ratios of the authors' 60 s,
/// 10 s and 40 steps for workers whose step takes about a second.
struct adsp_periods {
  double check_period = 0;
  double min_interval = 0;
};
adsp_periods measured_periods(double step_seconds, int64_t commit_steps);

/// A worker's side: counts toward its next commit and measures the
/// overhead of the last one.
class commit_clock {
public:
  /// Before the server's first answer: commit after `first_steps` steps.
  explicit commit_clock(int64_t first_steps);
  /// A local step with this training loss ended.
  void stepped(double loss);
  /// Whether a commit is due at `now` (seconds, the worker's clock).
  bool due(double now) const;
  /// The mean loss of the steps since the last commit (0 with none).
  double loss() const;
  /// A commit leaves at `now`: the step count restarts.
  void committed(double now);
  /// The server's answer arrived at `now`, with when to commit next.
  void answered(double now, next_commit next);
  /// Seconds from the last commit to its answer (0 before any).
  double overhead() const { return overhead_; }
  bool in_flight() const { return in_flight_; }
  uint64_t steps() const { return steps_; }

private:
  next_commit next_;
  uint64_t steps_ = 0;
  double loss_sum_ = 0;
  double since_ = 0;       ///< when the interval started (the last answer)
  double sent_at_ = 0;
  double overhead_ = 0;
  bool in_flight_ = false;
};

} // namespace eg::learning

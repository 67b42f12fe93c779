#pragma once
// A real limit on the CPU time of this process, as a resource-limited
// container gives an edge device: every thread it has and will have, together,
// gets at most N cores. No CAF, no torch.
//
// Mechanisms, in the order "auto" tries them:
//   cgroup v2  a child `edgegossip-<pid>` of the process's cgroup with
//              cpu.max = "QUOTA 100000"; the process moves into it
//   cgroup v1  the same below the cpu controller's hierarchy, with
//              cpu.cfs_period_us = 100000 and cpu.cfs_quota_us = QUOTA
//   cpulimit   the cpulimit program (-p PID -l PERCENT -z), which stops and
//              continues the process to keep it to its share (coarser, and
//              blocking calls may return EINTR after a stop)
// The kernel counts a throttled thread's time as waiting for a CPU
// (/proc/PID/schedstat), so the performance predictor's U_wait sees a limit
// without knowing of it.

#include "config/config.hpp"

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace eg::actors {

class cpu_limit {
public:
  /// The least limit: a quota of 1 ms per 100 ms period, cpulimit's 1 %.
  static constexpr double min_cores = 0.01;

  /// Limits this process to `cores` (>= min_cores; 0: the mechanism is set
  /// up, the process moved, and nothing is limited until set()). `how` is
  /// "auto" (cgroup v2, cgroup v1, then cpulimit), "cgroup" (v2, then v1) or
  /// "cpulimit". Throws std::invalid_argument for a bad `cores` or `how`,
  /// std::runtime_error naming every mechanism tried and why it failed.
  explicit cpu_limit(double cores, const std::string& how = "auto");
  /// Lifts the limit: the process goes back to the cgroup it came from and
  /// ours is removed, or cpulimit is stopped.
  ~cpu_limit();
  cpu_limit(const cpu_limit&) = delete;
  cpu_limit& operator=(const cpu_limit&) = delete;

  /// Changes the limit now (0: none); throws as the constructor does.
  void set(double cores);
  /// The limit in force, in cores (0: none).
  double cores() const;
  /// "cgroup v2", "cgroup v1" or "cpulimit".
  const std::string& mechanism() const { return mechanism_; }
  /// The cgroup directory the process is in while limited ("" with cpulimit).
  const std::string& cgroup() const { return dir_; }
  /// cgroup.procs of the cgroup the process came from ("" with cpulimit): a
  /// child process that must not share the limit (a co-runner) writes "0"
  /// into it between fork and exec.
  std::string origin_procs() const;

  /// Removes the `edgegossip-<pid>` cgroups of processes that no longer run
  /// (a node killed with -9 leaves its own) beside the one this process would
  /// make, v2 and v1; returns the directories removed. Called by the
  /// constructor; never throws.
  static std::vector<std::string> remove_stale();

private:
  void apply(double cores);  // mutex_ held
  bool try_cgroup_v2(double cores, std::string& why);
  bool try_cgroup_v1(double cores, std::string& why);
  bool try_cpulimit(double cores, std::string& why);
  void start_cpulimit(double cores);
  void stop_cpulimit();

  mutable std::mutex mutex_;
  double cores_ = 0;
  std::string mechanism_;
  std::string home_;        // the cgroup the process came from (cgroups)
  std::string dir_;         // ours, below home_ (cgroups)
  bool enabled_cpu_ = false;  // v2: we enabled the cpu controller in home_
  std::string program_;     // cpulimit's path
  pid_t helper_ = -1;       // the running cpulimit, if any
};

/// A node's CPU limit over time: `cores` from construction (0: none yet),
/// then each step of `schedule` at its time after construction, applied by a
/// thread of its own (like corunners). The limiter is set up at once, so an
/// unusable mechanism fails the constructor, not a step.
class scheduled_cpu_limit {
public:
  scheduled_cpu_limit(double cores, std::vector<config::cpu_step> schedule,
                      const std::string& how = "auto");
  /// Stops the schedule, then lifts the limit.
  ~scheduled_cpu_limit();
  scheduled_cpu_limit(const scheduled_cpu_limit&) = delete;
  scheduled_cpu_limit& operator=(const scheduled_cpu_limit&) = delete;

  const cpu_limit& limit() const { return limit_; }

private:
  void run();
  std::chrono::steady_clock::time_point start_;
  std::vector<config::cpu_step> schedule_;
  cpu_limit limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool over_ = false;
  std::thread thread_;
};

} // namespace eg::actors

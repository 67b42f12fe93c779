#pragma once
// Real co-running load: stress-ng workers that a node starts and stops on a
// schedule while it trains (the paper's co-running MapReduce jobs). No CAF.

#include "config/config.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace eg::actors {

class corunners {
public:
  /// Starts the schedule's clock now; `scratch` holds the disk workers' files.
  corunners(std::vector<config::corunner_config> schedule, std::string scratch);
  /// Stops every worker still running.
  ~corunners();
  corunners(const corunners&) = delete;
  corunners& operator=(const corunners&) = delete;

  /// The stress-ng command line of one entry.
  static std::vector<std::string> command(const config::corunner_config& c,
                                          const std::string& scratch);

private:
  void run();
  std::vector<config::corunner_config> schedule_;
  std::string scratch_;
  std::vector<int> pids_;  // per entry: 0 not started, > 0 running, -1 over
  std::mutex mutex_;
  std::condition_variable wake_;
  bool over_ = false;
  std::thread thread_;
};

} // namespace eg::actors

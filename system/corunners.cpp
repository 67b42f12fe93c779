#include "system/corunners.hpp"

#include "system/child_process.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <sys/wait.h>
#include <thread>

namespace eg::actors {
namespace {

/// SIGTERM, then SIGKILL if the child has not ended within 2 s.
void stop(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) != 0)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  spdlog::warn("co-runner {} did not end on SIGTERM: killed", pid);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

} // namespace

corunners::corunners(std::vector<config::corunner_config> schedule, std::string scratch)
    : schedule_(std::move(schedule)), scratch_(std::move(scratch)), pids_(schedule_.size(), 0) {
  if (!schedule_.empty())
    thread_ = std::thread([this] { run(); });
}

corunners::~corunners() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    over_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

std::vector<std::string> corunners::command(const config::corunner_config& c,
                                            const std::string& scratch) {
  auto n = std::to_string(c.workers);
  // A timeout bounds the workers even if this process dies without stopping them.
  auto limit = std::to_string(c.until_seconds > 0 ? static_cast<int>(c.until_seconds - c.at_seconds) + 5
                                                  : 3600);
  std::vector<std::string> cmd{"stress-ng", "--quiet", "--timeout", limit + "s"};
  if (c.kind == "cpu") {
    cmd.insert(cmd.end(), {"--cpu", n});
  } else if (c.kind == "disk") {
    cmd.insert(cmd.end(), {"--hdd", n, "--hdd-bytes", "64M", "--temp-path", scratch});
  } else {
    cmd.insert(cmd.end(), {"--sock", n});  // loopback TCP traffic
  }
  return cmd;
}

void corunners::run() {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto at = [&](double s) { return start + std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // The next event: a start or a stop.
    auto next = clock::time_point::max();
    for (size_t i = 0; i < schedule_.size(); ++i) {
      auto& c = schedule_[i];
      if (pids_[i] == 0)  // not started yet
        next = std::min(next, at(c.at_seconds));
      if (pids_[i] > 0 && c.until_seconds > 0)
        next = std::min(next, at(c.until_seconds));
    }
    if (next == clock::time_point::max())
      wake_.wait(lock, [&] { return over_; });
    else
      wake_.wait_until(lock, next, [&] { return over_; });
    if (over_)
      break;
    auto now = clock::now();
    for (size_t i = 0; i < schedule_.size(); ++i) {
      auto& c = schedule_[i];
      if (pids_[i] == 0 && now >= at(c.at_seconds)) {
        std::filesystem::create_directories(scratch_);
        try {
          pids_[i] = spawn_child(command(c, scratch_));
          spdlog::info("co-runner started: {} x {} (pid {})", c.workers, c.kind, pids_[i]);
        } catch (const std::exception& e) {
          pids_[i] = -1;
          spdlog::error("co-runner {} not started: {}", c.kind, e.what());
        }
      } else if (pids_[i] > 0 && c.until_seconds > 0 && now >= at(c.until_seconds)) {
        stop(pids_[i]);
        spdlog::info("co-runner stopped: {} x {}", c.workers, c.kind);
        pids_[i] = -1;  // done
      }
    }
  }
  for (auto& pid : pids_)
    if (pid > 0) {
      stop(pid);
      pid = -1;
    }
}

} // namespace eg::actors

// links: eg_system eg_config
#include "system/corunners.hpp"

#include <boost/test/unit_test.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pthread.h>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace eg;
using namespace std::chrono_literals;

namespace {

/// Children of this process (from /proc/self/task/*/children).
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  for (auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    for (pid_t pid; in >> pid;)
      out.push_back(pid);
  }
  return out;
}

bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line))
    return false;
  auto state = line.substr(line.rfind(')') + 2, 1);
  return state != "Z" && state != "X";
}

/// The SigBlk mask of a process (hexadecimal in /proc/PID/status).
unsigned long long blocked(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("SigBlk:", 0) == 0)
      return std::stoull(line.substr(7), nullptr, 16);
  return ~0ull;
}

bool stress_ng_installed() {
  return std::system("command -v stress-ng > /dev/null 2>&1") == 0;
}

} // namespace

BOOST_AUTO_TEST_SUITE(corunners)

BOOST_AUTO_TEST_CASE(workers_take_sigterm_and_end_with_their_node) {
  if (!stress_ng_installed()) {
    BOOST_TEST_MESSAGE("stress-ng is not installed (setup.sh installs it): skipped");
    return;
  }
  // A node blocks SIGINT and SIGTERM in its threads (its signal watcher
  // takes them); the co-runners it starts must not inherit that, or they
  // outlive it.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  auto scratch = std::filesystem::temp_directory_path() / ("eg-corunners-" + std::to_string(getpid()));
  std::vector<pid_t> started;
  {
    actors::corunners load({{"cpu", 1, 0.0, 0.0}}, scratch.string());
    for (int i = 0; i < 300 && started.empty(); ++i) {
      std::this_thread::sleep_for(10ms);
      started = children();
    }
    BOOST_REQUIRE_EQUAL(started.size(), 1u);
    std::this_thread::sleep_for(200ms);  // stress-ng's own setup
    BOOST_TEST(alive(started[0]));
    const unsigned long long term = 1ull << (SIGTERM - 1), intr = 1ull << (SIGINT - 1);
    BOOST_TEST((blocked(started[0]) & (term | intr)) == 0u);
  }
  // Destroyed: the worker is gone (SIGTERM taken), and quickly.
  BOOST_TEST(!alive(started[0]));
  BOOST_TEST(children().empty());
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::filesystem::remove_all(scratch);
}

BOOST_AUTO_TEST_CASE(a_schedule_starts_and_stops_workers_on_time) {
  if (!stress_ng_installed()) {
    BOOST_TEST_MESSAGE("stress-ng is not installed (setup.sh installs it): skipped");
    return;
  }
  auto scratch = std::filesystem::temp_directory_path() / ("eg-corunners-" + std::to_string(getpid()));
  actors::corunners load({{"cpu", 1, 0.3, 1.0}}, scratch.string());
  std::this_thread::sleep_for(100ms);
  BOOST_TEST(children().empty());  // not yet
  std::this_thread::sleep_for(500ms);
  auto running = children();
  BOOST_REQUIRE_EQUAL(running.size(), 1u);
  std::this_thread::sleep_for(1000ms);  // stopped at 1.0 s
  BOOST_TEST(!alive(running[0]));
  std::filesystem::remove_all(scratch);
}

BOOST_AUTO_TEST_SUITE_END()

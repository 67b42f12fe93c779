// links: eg_system eg_config
// The real CPU limit of a node's process (system/cpu_limit.hpp). A limit
// applies to the whole process that sets it, so every limit here is set in a
// forked child, which spins, measures its own CPU time against the wall
// clock and reports through a pipe.
#include "system/cpu_limit.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ea = eg::actors;

namespace {

double now(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void burn() {
  volatile uint64_t x = 0;
  for (int i = 0; i < 20000; ++i)
    x = x + static_cast<uint64_t>(i);
}

/// CPU time of this process (all threads) per wall second over `wall`
/// seconds, while `threads` threads spin (this one and threads - 1 new ones).
double busy_ratio(double wall, int threads = 1) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> others;
  for (int i = 1; i < threads; ++i)
    others.emplace_back([&] {
      while (!stop)
        burn();
    });
  const double cpu0 = now(CLOCK_PROCESS_CPUTIME_ID), wall0 = now(CLOCK_MONOTONIC);
  while (now(CLOCK_MONOTONIC) - wall0 < wall)
    burn();
  const double ratio = (now(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / (now(CLOCK_MONOTONIC) - wall0);
  stop = true;
  for (auto& t : others)
    t.join();
  return ratio;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Writes one "key value" line to the pipe at once (a child may be killed
/// right after).
template <class T>
void say(int fd, const std::string& key, const T& value) {
  std::ostringstream line;
  line << key << ' ' << value << '\n';
  auto text = line.str();
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
}

/// Runs `body` in a forked child; returns the lines it said (key -> value)
/// and, under "exit", how it ended. An exception in the child comes back as
/// "error".
std::map<std::string, std::string> in_child(const std::function<void(int)>& body) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      body(fds[1]);
    } catch (const std::exception& e) {
      say(fds[1], "error", e.what());
    }
    ::_exit(0);
  }
  BOOST_REQUIRE(pid > 0);
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::map<std::string, std::string> said;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    auto space = line.find(' ');
    said[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
  }
  said["exit"] = WIFEXITED(status) ? "code " + std::to_string(WEXITSTATUS(status))
                 : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                       : "?";
  return said;
}

std::string get(const std::map<std::string, std::string>& said, const std::string& key) {
  auto it = said.find(key);
  return it == said.end() ? std::string() : it->second;
}

double number(const std::map<std::string, std::string>& said, const std::string& key) {
  auto it = said.find(key);
  return it == said.end() || it->second.empty() ? std::nan("") : std::stod(it->second);
}

std::string text_of(const std::map<std::string, std::string>& said) {
  std::string out;
  for (auto& [k, v] : said)
    out += k + "=" + v + "; ";
  return out;
}

bool have_cpulimit() { return ::access("/usr/bin/cpulimit", X_OK) == 0; }

/// In a child: 0.25 cores, measured on one thread; 0.5 cores, measured on
/// three (one started before the limit, one by the measurement, this one);
/// refused changes; then the limit lifted.
void limit_and_change(const std::string& how, int out) {
  std::atomic<int> phase{0};
  std::thread old([&] {  // a thread from before the limit
    while (phase == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    while (phase == 1)
      burn();
  });
  struct joiner {
    std::atomic<int>& phase;
    std::thread& t;
    ~joiner() {
      phase = 2;
      t.join();
    }
  } join_old{phase, old};

  const auto cgroup_before = read_file("/proc/self/cgroup");
  say(out, "unlimited", busy_ratio(0.5));
  std::string dir;
  {
    std::unique_ptr<ea::cpu_limit> limit;
    try {
      limit = std::make_unique<ea::cpu_limit>(0.25, how);
    } catch (const std::runtime_error& e) {
      say(out, "unavailable", e.what());
      return;
    }
    dir = limit->cgroup();
    say(out, "mechanism", limit->mechanism());
    say(out, "cores", limit->cores());
    say(out, "cgroup", dir.empty() ? "-" : dir);
    say(out, "cgroup_exists", !dir.empty() && std::filesystem::is_directory(dir));
    say(out, "moved", !dir.empty() && read_file("/proc/self/cgroup").find(
                                          std::filesystem::path(dir).filename().string()) !=
                                          std::string::npos);
    say(out, "quarter", busy_ratio(2.0));

    limit->set(0.5);
    say(out, "cores_set", limit->cores());
    phase = 1;
    say(out, "half", busy_ratio(1.5, 2));
    phase = 2;

    try {
      limit->set(-1);
      say(out, "negative_set", "taken");
    } catch (const std::invalid_argument&) {
      say(out, "negative_set", "refused");
    }
    say(out, "cores_after_refusal", limit->cores());
    try {
      ea::cpu_limit second(0.5, how);
      say(out, "second", "taken");
    } catch (const std::invalid_argument&) {
      say(out, "second", "invalid");
    } catch (const std::logic_error&) {
      say(out, "second", "refused");
    }
  }
  say(out, "cgroup_left", !dir.empty() && std::filesystem::exists(dir));
  say(out, "cgroup_restored", read_file("/proc/self/cgroup") == cgroup_before);
  errno = 0;
  say(out, "children_left", !(::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD));
  say(out, "after", busy_ratio(0.5));
}

void check_limit_and_change(std::map<std::string, std::string> r) {
  BOOST_TEST_MESSAGE("measured: " << text_of(r));
  BOOST_TEST(r["exit"] == "code 0");
  BOOST_TEST(r.count("error") == 0u, get(r, "error"));
  BOOST_TEST(number(r, "cores") == 0.25);
  BOOST_TEST(number(r, "cores_set") == 0.5);
  // One spinning thread at 0.25 cores.
  const double quarter = number(r, "quarter");
  BOOST_TEST(quarter > 0.1);
  BOOST_TEST(quarter < 0.45);
  // Three spinning threads, one from before the limit, at 0.5 cores: the
  // limit holds them all, and is more than before.
  const double half = number(r, "half");
  BOOST_TEST(half > quarter + 0.1);
  BOOST_TEST(half < 0.7);
  BOOST_TEST(r["negative_set"] == "refused");
  BOOST_TEST(number(r, "cores_after_refusal") == 0.5);
  BOOST_TEST(r["second"] == "refused");  // one limit per process
  BOOST_TEST(r["children_left"] == "0");
  // Lifted: well above the limit it had.
  BOOST_TEST(number(r, "after") > quarter + 0.15);
}

} // namespace

BOOST_AUTO_TEST_SUITE(cpu_limit)

BOOST_AUTO_TEST_CASE(bad_requests_are_refused) {
  // Checked before anything is changed, so this process may ask.
  for (double cores : {-1.0, -0.0001, 0.005, std::nan(""), HUGE_VAL}) {
    BOOST_TEST_CONTEXT("cores " << cores) {
      BOOST_CHECK_THROW(ea::cpu_limit(cores, "auto"), std::invalid_argument);
      BOOST_CHECK_THROW(ea::scheduled_cpu_limit(cores, {}, "auto"), std::invalid_argument);
    }
  }
  BOOST_CHECK_THROW(ea::cpu_limit(0.5, "docker"), std::invalid_argument);
  try {
    ea::cpu_limit(-2, "auto");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "a CPU limit must be 0 (none) or at least 0.01 cores, got -2");
  }
  // A bad step is refused at once, not when its time comes.
  auto r = in_child([](int out) {
    try {
      ea::scheduled_cpu_limit s(0.5, {{1.0, 0.25}, {2.0, -1}}, "auto");
      say(out, "bad_step", "taken");
    } catch (const std::invalid_argument&) {
      say(out, "bad_step", "refused");
    }
  });
  BOOST_TEST(r["bad_step"] == "refused", text_of(r));
}

BOOST_AUTO_TEST_CASE(cgroup_limits_all_threads_and_changes) {
  auto r = in_child([](int out) { limit_and_change("cgroup", out); });
  if (r.count("unavailable")) {
    BOOST_TEST_MESSAGE("cgroups cannot be written here, not tested: " << r["unavailable"]);
    return;
  }
  check_limit_and_change(r);
  BOOST_TEST((r["mechanism"] == "cgroup v1" || r["mechanism"] == "cgroup v2"), r["mechanism"]);
  BOOST_TEST(r["cgroup_exists"] == "1");
  BOOST_TEST(r["moved"] == "1");
  BOOST_TEST(r["cgroup"].find("/edgegossip-") != std::string::npos, r["cgroup"]);
  BOOST_TEST(r["cgroup_left"] == "0");  // removed on destruction
  BOOST_TEST(r["cgroup_restored"] == "1");
}

BOOST_AUTO_TEST_CASE(cpulimit_limits_all_threads_and_changes) {
  if (!have_cpulimit()) {
    BOOST_TEST_MESSAGE("/usr/bin/cpulimit is not installed (setup.sh installs it): not tested");
    return;
  }
  auto r = in_child([](int out) { limit_and_change("cpulimit", out); });
  BOOST_TEST(r.count("unavailable") == 0u, get(r, "unavailable"));
  check_limit_and_change(r);
  BOOST_TEST(r["mechanism"] == "cpulimit");
  BOOST_TEST(r["cgroup"] == "-");
  BOOST_TEST(r["cgroup_restored"] == "1");
}

BOOST_AUTO_TEST_CASE(zero_sets_up_without_limiting) {
  std::vector<std::string> hows{"auto"};
  if (have_cpulimit())
    hows.push_back("cpulimit");
  for (auto& how : hows) {
    BOOST_TEST_CONTEXT("limiter " << how) {
      auto r = in_child([&](int out) {
        ea::cpu_limit limit(0, how);
        say(out, "mechanism", limit.mechanism());
        say(out, "cores", limit.cores());
        say(out, "free", busy_ratio(0.5));
        limit.set(0.25);
        say(out, "quarter", busy_ratio(1.0));
      });
      BOOST_TEST_MESSAGE(how << ": " << text_of(r));
      BOOST_TEST(r.count("error") == 0u, get(r, "error"));
      BOOST_TEST(!r["mechanism"].empty());
      BOOST_TEST(number(r, "cores") == 0.0);
      BOOST_TEST(number(r, "quarter") < 0.45);
      BOOST_TEST(number(r, "free") > number(r, "quarter") + 0.2);
    }
  }
}

BOOST_AUTO_TEST_CASE(schedule_changes_the_limit_at_its_times) {
  // Unlimited, 0.25 cores from 0.5 s, lifted from 2 s.
  auto r = in_child([](int out) {
    ea::scheduled_cpu_limit s(0, {{0.5, 0.25}, {2.0, 0}}, "auto");
    say(out, "mechanism", s.limit().mechanism());
    say(out, "start", s.limit().cores());
    say(out, "free", busy_ratio(0.4));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    say(out, "limited_cores", s.limit().cores());
    say(out, "limited", busy_ratio(1.2));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    say(out, "end", s.limit().cores());
    say(out, "lifted", busy_ratio(0.4));
  });
  BOOST_TEST_MESSAGE(text_of(r));
  BOOST_TEST(r.count("error") == 0u, get(r, "error"));
  BOOST_TEST(number(r, "start") == 0.0);
  BOOST_TEST(number(r, "limited_cores") == 0.25);
  BOOST_TEST(number(r, "end") == 0.0);
  BOOST_TEST(number(r, "limited") < 0.45);
  BOOST_TEST(number(r, "free") > number(r, "limited") + 0.2);
  BOOST_TEST(number(r, "lifted") > number(r, "limited") + 0.2);
}

BOOST_AUTO_TEST_CASE(stale_cgroups_of_dead_processes_are_removed) {
  // A limited process killed with -9 leaves its cgroup behind.
  auto r = in_child([](int out) {
    try {
      ea::cpu_limit limit(0.5, "cgroup");
      say(out, "cgroup", limit.cgroup());
    } catch (const std::runtime_error& e) {
      say(out, "unavailable", e.what());
      return;
    }
  });
  if (r.count("unavailable")) {
    BOOST_TEST_MESSAGE("cgroups cannot be written here, not tested: " << r["unavailable"]);
    return;
  }
  // That child ended normally: its cgroup went with its limit.
  BOOST_TEST(!std::filesystem::exists(r["cgroup"]), r["cgroup"]);

  r = in_child([](int out) {
    ea::cpu_limit limit(0.5, "cgroup");
    say(out, "cgroup", limit.cgroup());
    ::raise(SIGKILL);
  });
  BOOST_TEST(r["exit"] == "signal 9");
  const std::string stale = r["cgroup"];
  BOOST_REQUIRE(!stale.empty());
  BOOST_TEST(std::filesystem::is_directory(stale), stale);

  // One of a process that still runs stays.
  pid_t sleeper = ::fork();
  if (sleeper == 0) {
    for (;;)
      ::pause();
  }
  BOOST_REQUIRE(sleeper > 0);
  struct reaper {
    pid_t pid;
    ~reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  };
  std::unique_ptr<reaper> stop_sleeper(new reaper{sleeper});
  const std::string live =
    (std::filesystem::path(stale).parent_path() / ("edgegossip-" + std::to_string(sleeper))).string();
  BOOST_REQUIRE(::mkdir(live.c_str(), 0755) == 0);

  auto removed = ea::cpu_limit::remove_stale();
  BOOST_TEST(std::count(removed.begin(), removed.end(), stale) == 1);
  BOOST_TEST(!std::filesystem::exists(stale));
  BOOST_TEST(std::filesystem::is_directory(live));

  stop_sleeper.reset();
  removed = ea::cpu_limit::remove_stale();
  BOOST_TEST(std::count(removed.begin(), removed.end(), live) == 1);
  BOOST_TEST(!std::filesystem::exists(live));
  ::rmdir(live.c_str());
}

BOOST_AUTO_TEST_SUITE_END()

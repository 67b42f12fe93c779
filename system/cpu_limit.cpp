#include "system/cpu_limit.hpp"
#include "common/error.hpp"

#include "system/child_process.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace eg::actors {

namespace {

constexpr long long period_us = 100000;  // the kernel's default CFS period, 100 ms

// One limiter per process: two would share the process's cgroup, and the
// first to go would lift the other's limit.
std::atomic<bool> limiter_alive{false};

std::string show(double cores) {
  std::ostringstream os;
  os << cores;
  return os.str();
}

void check_cores(double cores) {
  if (!(cores == 0 || (std::isfinite(cores) && cores >= cpu_limit::min_cores)))
    throw argument_error("a CPU limit must be 0 (none) or at least " +
                                show(cpu_limit::min_cores) + " cores, got " + show(cores));
}

long online_cpus() { return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)); }

// A CFS quota per period: no more than every CPU can give, no less than the
// kernel takes (1 ms).
long long quota_us(double cores) {
  double most = static_cast<double>(online_cpus());
  return std::max(1000LL, std::llround(std::min(cores, most) * period_us));
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `text` to a cgroup file in one write(); returns 0 or the errno, and
// says what failed in `why`.
int write_text(const std::string& path, const std::string& text, std::string& why) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    why = "cannot open " + path + ": " + std::strerror(e);
    return e;
  }
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = n < 0 ? errno : n == static_cast<ssize_t>(text.size()) ? 0 : EIO;
  ::close(fd);
  if (e != 0)
    why = "cannot write '" + text + "' to " + path + ": " + std::strerror(e);
  return e;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep))
    parts.push_back(part);
  return parts;
}

bool has_token(const std::string& list, const std::string& token, char sep) {
  auto parts = split(list, sep);
  return std::find(parts.begin(), parts.end(), token) != parts.end();
}

// cgroup.controllers and cgroup.subtree_control: names separated by spaces.
bool has_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w)
    if (w == word)
      return true;
  return false;
}

// The process's cgroup in the v2 hierarchy ("0::/path") or in the v1
// hierarchy holding the cpu controller ("4:cpu,cpuacct:/path").
std::optional<std::string> cgroup_path(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos)
      continue;
    auto id = line.substr(0, first);
    auto controllers = line.substr(first + 1, second - first - 1);
    if (v2 ? id == "0" && controllers.empty() : has_token(controllers, "cpu", ','))
      return line.substr(second + 1);
  }
  return std::nullopt;
}

// Mount points are written with octal escapes (\040 for a space).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The directory of this process's cgroup, v2 or v1's cpu, from
// /proc/self/cgroup and /proc/self/mountinfo (whose root field says which
// part of the hierarchy a mount shows); "" and why not.
std::string cgroup_home(bool v2, std::string& why) {
  auto path = cgroup_path(v2);
  if (!path) {
    why = v2 ? "/proc/self/cgroup has no cgroup v2 entry"
             : "/proc/self/cgroup has no hierarchy with the cpu controller";
    return {};
  }
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
    auto dash = line.find(" - ");
    if (dash == std::string::npos)
      continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, device, root, point, fstype, source, options;
    if (!(head >> id >> parent >> device >> root >> point) || !(tail >> fstype >> source >> options))
      continue;
    if (v2 ? fstype != "cgroup2" : fstype != "cgroup" || !has_token(options, "cpu", ','))
      continue;
    root = unescape(root);
    std::string rel;
    if (root == "/")
      rel = *path;
    else if (path->compare(0, root.size(), root) == 0 &&
             (path->size() == root.size() || (*path)[root.size()] == '/'))
      rel = path->substr(root.size());
    else
      continue;  // this mount shows another part of the hierarchy
    std::string dir = unescape(point) + (rel == "/" ? "" : rel);
    if (::access(dir.c_str(), F_OK) == 0)
      return dir;
  }
  why = std::string(v2 ? "no cgroup2 mount" : "no cgroup mount with the cpu controller") +
        " shows this process's cgroup " + *path + " (/proc/self/mountinfo)";
  return {};
}

// Moves every process of cgroup `from` into `to`; true when none is left.
bool move_all(const std::string& from, const std::string& to) {
  bool all = true;
  if (auto procs = read_text(from + "/cgroup.procs")) {
    std::istringstream in(*procs);
    std::string pid, why;
    while (in >> pid)
      all = write_text(to + "/cgroup.procs", pid, why) == 0 && all;
  }
  return all;
}

std::string find_program(const std::string& name) {
  const char* env = std::getenv("PATH");
  std::string path = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
  for (auto& dir : split(path + ":/usr/sbin:/sbin", ':')) {
    if (dir.empty())
      continue;
    auto candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return {};
}

// A schedule whose every step may be applied, checked before anything changes.
std::vector<config::cpu_step> checked(std::vector<config::cpu_step> schedule) {
  for (auto& step : schedule)
    check_cores(step.cores);
  return schedule;
}

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

} // namespace

// --- cpu_limit --------------------------------------------------------------------

cpu_limit::cpu_limit(double cores, const std::string& how) {
  check_cores(cores);
  if (how != "auto" && how != "cgroup" && how != "cpulimit")
    throw unknown_name("a CPU limiter must be 'auto', 'cgroup' or 'cpulimit', got '" +
                                how + "'");
  if (limiter_alive.exchange(true))
    throw std::logic_error("this process already has a CPU limit");
  remove_stale();
  std::lock_guard<std::mutex> lock(mutex_);
  std::string tried;
  auto attempt = [&](const char* name, bool (cpu_limit::*try_it)(double, std::string&)) {
    std::string why;
    if ((this->*try_it)(cores, why))
      return true;
    tried += (tried.empty() ? "" : "; ") + std::string(name) + ": " + why;
    return false;
  };
  if (how != "cpulimit" && (attempt("cgroup v2", &cpu_limit::try_cgroup_v2) ||
                            attempt("cgroup v1", &cpu_limit::try_cgroup_v1)))
    return;
  if (how != "cgroup" && attempt("cpulimit", &cpu_limit::try_cpulimit))
    return;
  limiter_alive = false;
  throw system_failure("cannot limit the CPU of process " + std::to_string(getpid()) + " (" +
                           (cores == 0 ? std::string("no limit yet") : show(cores) + " cores") +
                           ", limiter '" + how + "'): " + tried);
}

cpu_limit::~cpu_limit() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (mechanism_ == "cpulimit") {
    stop_cpulimit();
  } else {
    std::string why;
    // Lift the limit first: should the process not get back out, it is
    // at least no longer limited.
    if (mechanism_ == "cgroup v1")
      write_text(dir_ + "/cpu.cfs_quota_us", "-1", why);
    else
      write_text(dir_ + "/cpu.max", "max " + std::to_string(period_us), why);
    if (enabled_cpu_)  // v2 takes processes back only into a cgroup that passes on no controller
      write_text(home_ + "/cgroup.subtree_control", "-cpu", why);
    if (!move_all(dir_, home_))
      spdlog::warn("CPU limit: cannot move every process of {} back to {}", dir_, home_);
    else if (::rmdir(dir_.c_str()) != 0)
      spdlog::warn("CPU limit: cannot remove {}: {}", dir_, std::strerror(errno));
  }
  limiter_alive = false;
}

void cpu_limit::set(double cores) {
  check_cores(cores);
  std::lock_guard<std::mutex> lock(mutex_);
  apply(cores);
}

double cpu_limit::cores() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cores_;
}

std::string cpu_limit::origin_procs() const {
  return home_.empty() ? std::string() : home_ + "/cgroup.procs";
}

void cpu_limit::apply(double cores) {
  std::string why;
  if (mechanism_ == "cpulimit") {
    stop_cpulimit();
    start_cpulimit(cores);
  } else if (mechanism_ == "cgroup v1") {
    if (write_text(dir_ + "/cpu.cfs_quota_us", cores == 0 ? "-1" : std::to_string(quota_us(cores)),
                   why) != 0)
      throw system_failure("cannot change the CPU limit to " + show(cores) + " cores: " + why);
  } else {
    auto quota = cores == 0 ? std::string("max") : std::to_string(quota_us(cores));
    if (write_text(dir_ + "/cpu.max", quota + " " + std::to_string(period_us), why) != 0)
      throw system_failure("cannot change the CPU limit to " + show(cores) + " cores: " + why);
  }
  cores_ = cores;
}

bool cpu_limit::try_cgroup_v2(double cores, std::string& why) {
  auto home = cgroup_home(true, why);
  if (home.empty())
    return false;
  auto controllers = read_text(home + "/cgroup.controllers");
  if (!controllers) {
    why = "cannot read " + home + "/cgroup.controllers";
    return false;
  }
  if (!has_word(*controllers, "cpu")) {
    why = "the cpu controller is not available in " + home +
          " (held by cgroup v1, or not delegated)";
    return false;
  }
  const auto pid = std::to_string(getpid());
  const auto dir = home + "/edgegossip-" + pid;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    why = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  bool moved = false, enabled = false;
  auto undo = [&] {
    std::string ignored;
    if (enabled)
      write_text(home + "/cgroup.subtree_control", "-cpu", ignored);
    if (moved)
      move_all(dir, home);
    ::rmdir(dir.c_str());
    return false;
  };
  auto subtree = read_text(home + "/cgroup.subtree_control");
  if (!subtree || !has_word(*subtree, "cpu")) {
    int e = write_text(home + "/cgroup.subtree_control", "+cpu", why);
    if (e == EBUSY) {
      // A cgroup other than the root passes controllers on only while no
      // process is in it: this one moves below first.
      if (write_text(dir + "/cgroup.procs", pid, why) != 0)
        return undo();
      moved = true;
      e = write_text(home + "/cgroup.subtree_control", "+cpu", why);
      if (e != 0)
        why += " (other processes are in " + home + ")";
      enabled = e == 0;
    }
    if (e != 0)
      return undo();
  }
  auto quota = cores == 0 ? std::string("max") : std::to_string(quota_us(cores));
  if (write_text(dir + "/cpu.max", quota + " " + std::to_string(period_us), why) != 0)
    return undo();
  if (!moved && write_text(dir + "/cgroup.procs", pid, why) != 0)
    return undo();
  home_ = home;
  dir_ = dir;
  enabled_cpu_ = enabled;
  mechanism_ = "cgroup v2";
  cores_ = cores;
  return true;
}

bool cpu_limit::try_cgroup_v1(double cores, std::string& why) {
  auto home = cgroup_home(false, why);
  if (home.empty())
    return false;
  const auto pid = std::to_string(getpid());
  const auto dir = home + "/edgegossip-" + pid;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    why = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  if (write_text(dir + "/cpu.cfs_period_us", std::to_string(period_us), why) != 0 ||
      write_text(dir + "/cpu.cfs_quota_us", cores == 0 ? "-1" : std::to_string(quota_us(cores)),
                 why) != 0 ||
      write_text(dir + "/cgroup.procs", pid, why) != 0) {  // moves every thread
    move_all(dir, home);
    ::rmdir(dir.c_str());
    return false;
  }
  home_ = home;
  dir_ = dir;
  mechanism_ = "cgroup v1";
  cores_ = cores;
  return true;
}

bool cpu_limit::try_cpulimit(double cores, std::string& why) {
  program_ = find_program("cpulimit");
  if (program_.empty()) {
    why = "not installed (apt-get install cpulimit)";
    return false;
  }
  try {
    start_cpulimit(cores);
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  mechanism_ = "cpulimit";
  cores_ = cores;
  return true;
}

void cpu_limit::start_cpulimit(double cores) {
  if (cores == 0 || cores >= static_cast<double>(online_cpus()))
    return;  // nothing to limit (cpulimit refuses more than 100 % per CPU)
  auto percent = std::to_string(std::max(1LL, std::llround(cores * 100)));  // of one CPU
  auto target = std::to_string(getpid());
  // It must take SIGTERM, though a node blocks it in every thread.
  const pid_t pid =
    spawn_child({program_, "-q", "-z", "-p", target, "-l", percent}, /*quiet_stdout=*/true);
  // A bad argument, or a process it may not signal, ends it at once.
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      throw system_failure(program_ + " -p " + target + " -l " + percent + " ended at once (" +
                               describe_status(status) + ")");
  }
  helper_ = pid;
}

void cpu_limit::stop_cpulimit() {
  if (helper_ <= 0)
    return;
  ::kill(helper_, SIGTERM);  // on its way out it continues the process (its -s SIGCONT)
  while (waitpid(helper_, nullptr, 0) < 0 && errno == EINTR) {
  }
  helper_ = -1;
}

std::vector<std::string> cpu_limit::remove_stale() {
  std::vector<std::string> removed;
  for (bool v2 : {true, false}) {
    std::string why;
    auto home = cgroup_home(v2, why);
    if (home.empty())
      continue;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(home, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      auto name = it->path().filename().string();
      const std::string prefix = "edgegossip-";
      if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size() ||
          name.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
          name.size() - prefix.size() > 9)
        continue;
      pid_t pid = static_cast<pid_t>(std::stol(name.substr(prefix.size())));
      if (pid == getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
        continue;  // its process still runs
      if (::rmdir(it->path().c_str()) == 0)  // only once no process is in it
        removed.push_back(it->path().string());
    }
  }
  return removed;
}

// --- scheduled_cpu_limit -------------------------------------------------------

scheduled_cpu_limit::scheduled_cpu_limit(double cores, std::vector<config::cpu_step> schedule,
                                         const std::string& how)
    : start_(std::chrono::steady_clock::now()), schedule_(checked(std::move(schedule))),
      limit_(cores, how) {
  if (!schedule_.empty())
    thread_ = std::thread([this] { run(); });
}

scheduled_cpu_limit::~scheduled_cpu_limit() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    over_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void scheduled_cpu_limit::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (auto& step : schedule_) {
    auto after = std::chrono::duration<double>(std::min(step.at_seconds, 1e9));
    auto at = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(after);
    if (wake_.wait_until(lock, at, [&] { return over_; }))
      return;
    try {
      limit_.set(step.cores);
      if (step.cores > 0)
        spdlog::info("CPU limit: {} cores from {} s ({})", step.cores, step.at_seconds,
                     limit_.mechanism());
      else
        spdlog::info("CPU limit lifted at {} s", step.at_seconds);
    } catch (const std::exception& e) {
      spdlog::error("CPU limit of {} cores at {} s not applied: {}", step.cores, step.at_seconds,
                    e.what());
    }
  }
}

} // namespace eg::actors

#include "bench/common.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

namespace eg::bench {

namespace fs = std::filesystem;

bool run_processes(const config::cluster_config& cfg, const fs::path& dir,
                   const std::string& who, const std::vector<std::vector<std::string>>& prefixes,
                   double wall_limit) {
  auto file = dir / "cluster.toml";
  std::ofstream(file) << config::to_toml(cfg);
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  for (size_t i = 0; i < cfg.nodes.size(); ++i) {
    const auto& n = cfg.nodes[i];
    auto log = (dir / (n.name + ".log")).string();
    // Built before the fork: the child only execs.
    std::vector<std::string> args = i < prefixes.size() ? prefixes[i] : std::vector<std::string>{};
    for (std::string a : {exe, std::string("node"), std::string("--config"), file.string(),
                          std::string("--node"), n.name, std::string("--fresh")})
      args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
      execvp(argv[0], argv.data());
      _exit(127);
    }
    if (pid < 0)
      throw std::runtime_error(who + ": cannot start node " + n.name);
    pids.push_back(pid);
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto since = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  int failed = 0;
  bool stopped = false;
  bool killed = false;
  std::vector<pid_t> live = pids;
  while (!live.empty()) {
    for (auto it = live.begin(); it != live.end();) {
      int status = 0;
      if (waitpid(*it, &status, WNOHANG) == *it) {
        if (!stopped && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
          ++failed;
        it = live.erase(it);
      } else {
        ++it;
      }
    }
    if (live.empty())
      break;
    if (wall_limit > 0 && !stopped && since() >= wall_limit) {
      stopped = true;  // what the nodes are doing now is the limit's, not a failure
      for (auto pid : live)
        kill(pid, SIGTERM);
    }
    if (stopped && !killed && since() >= wall_limit + 30) {
      killed = true;
      for (auto pid : live)
        kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (failed)
    throw std::runtime_error(who + ": " + std::to_string(failed) + " node process(es) failed; "
                             "their logs are in " + dir.string());
  return stopped;
}

void spread::add(double v, bool defined) {
  if (defined && std::isfinite(v))
    values.push_back(v);
  else
    ++missing;
}

double spread::median() const {
  if (values.empty())
    return std::numeric_limits<double>::quiet_NaN();
  auto v = values;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string spread::show(const char* format, const char* unit) const {
  if (values.empty())
    return "n/a";
  auto v = values;
  std::sort(v.begin(), v.end());
  char buf[160];
  auto one = [&](double x) {
    char b[40];
    std::snprintf(b, sizeof b, format, x);
    return std::string(b) + unit;
  };
  std::snprintf(buf, sizeof buf, "%s [%s .. %s]", one(median()).c_str(), one(v.front()).c_str(),
                one(v.back()).c_str());
  std::string s = v.size() == 1 ? one(median()) : buf;
  if (missing)
    s += " (" + std::to_string(missing) + " n/a)";
  return s;
}

std::string fixed(double v, int digits) {
  char b[40];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

strategy_spec parse_spec(const std::string& spec) {
  strategy_spec s;
  auto slash = spec.find('/');
  auto head = spec.substr(0, slash);
  if (slash != std::string::npos)
    s.every = spec.substr(slash + 1);
  auto colon = head.find(':');
  s.name = head.substr(0, colon);
  if (colon != std::string::npos)
    s.density = head.substr(colon + 1);
  auto plus = s.name.find('+');
  if (plus != std::string::npos) {
    s.gossip = s.name.substr(plus + 1);
    s.name = s.name.substr(0, plus);
  }
  return s;
}

bool push_sum_family(const strategy_spec& s) {
  return s.rule() == "sgp" || s.rule() == "sparse-push" || s.rule() == "scsp";
}

void apply_strategy(config::cluster_config& cfg, const std::string& spec, const std::string& who) {
  auto s = parse_spec(spec);
  config::apply_override(cfg, "strategy.name=" + s.name);
  if (!s.gossip.empty())
    config::apply_override(cfg, "strategy.gossip=" + s.gossip);
  if (push_sum_family(s))
    config::apply_override(cfg, "strategy.topology=exponential");
  if (!s.density.empty()) {
    if (s.rule() != "sparse-push" && s.rule() != "scsp")
      throw config::config_error(who + ": '" + spec
                                 + "': only sparse-push and scsp take a density (NAME:DENSITY)");
    config::apply_override(cfg, "strategy.density=" + s.density);
  }
  if (!s.every.empty()) {
    if (!push_sum_family(s))
      throw config::config_error(who + ": '" + spec
                                 + "': only sgp, sparse-push and scsp gossip every H steps (/H)");
    config::apply_override(cfg, "strategy.gossip_every=" + s.every);
  }
}

std::string file_name_of(const std::string& spec) {
  std::string out = spec;
  std::replace(out.begin(), out.end(), '/', '_');
  std::replace(out.begin(), out.end(), ':', '_');
  return out;
}

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');)
    cells.push_back(c);
  return cells;
}

} // namespace eg::bench

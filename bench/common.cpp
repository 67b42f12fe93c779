#include "bench/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace eg::bench {

namespace fs = std::filesystem;

void run_processes(const config::cluster_config& cfg, const fs::path& dir,
                   const std::string& who) {
  auto file = dir / "cluster.toml";
  std::ofstream(file) << config::to_toml(cfg);
  std::vector<pid_t> pids;
  for (auto& n : cfg.nodes) {
    auto log = (dir / (n.name + ".log")).string();
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
      std::string exe = "/proc/self/exe", node = n.name, path = file.string();
      execl(exe.c_str(), "edgegossip", "node", "--config", path.c_str(), "--node", node.c_str(),
            "--fresh", static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid < 0)
      throw std::runtime_error(who + ": cannot start node " + n.name);
    pids.push_back(pid);
  }
  int failed = 0;
  for (auto pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failed;
  }
  if (failed)
    throw std::runtime_error(who + ": " + std::to_string(failed) + " node process(es) failed; "
                             "their logs are in " + dir.string());
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

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');)
    cells.push_back(c);
  return cells;
}

} // namespace eg::bench

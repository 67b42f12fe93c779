#pragma once
// Test helpers: child processes of the edgegossip binary, temporary
// directories, free ports and CSV files.

#include "bench/ports.hpp"

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace eg::test {

/// A fresh directory under the system's temp dir, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path()
           / ("edgegossip-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    if (std::getenv("EG_KEEP_TEST_DIRS")) {  // for a look at logs after a failure
      std::fprintf(stderr, "kept %s\n", path.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

using eg::bench::free_port;

/// A child process whose stdout + stderr go to a log file.
struct process {
  pid_t pid = -1;
  std::string log;

  process(const std::vector<std::string>& args, std::string log_file) : log(std::move(log_file)) {
    pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  process(const process&) = delete;
  ~process() {
    if (pid > 0 && !exited) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  /// Exit code (128 + signal when killed), or -1 if still running after `limit`.
  int wait(std::chrono::seconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  void signal(int sig) { kill(pid, sig); }

  /// Waits until the output holds `text` (true) or `limit` passed (false).
  bool wait_for_output(const std::string& text, std::chrono::seconds limit) const {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (output().find(text) != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  /// Whether the process is still running.
  bool running() {
    if (exited)
      return false;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      return false;
    }
    return true;
  }

  std::string output() const {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  bool exited = false;
};

/// Runs the edgegossip binary to completion; returns {exit code, output}.
inline std::pair<int, std::string> run_binary(const std::vector<std::string>& args,
                                              const std::string& log_file,
                                              std::chrono::seconds limit
                                              = std::chrono::seconds(300)) {
  std::vector<std::string> full{EG_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  process p(full, log_file);
  auto code = p.wait(limit);
  return {code, p.output()};
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

/// A CSV file as rows of column name -> value.
inline std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> cols;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string cell;
    while (std::getline(ss, cell, ','))
      out.push_back(cell);
    return out;
  };
  if (std::getline(in, line))
    cols = split(line);
  while (std::getline(in, line)) {
    auto cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < cols.size() && i < cells.size(); ++i)
      row[cols[i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

/// The single run directory below `output_dir`.
inline std::filesystem::path only_run_dir(const std::string& output_dir) {
  std::vector<std::filesystem::path> dirs;
  for (auto& e : std::filesystem::directory_iterator(output_dir))
    if (e.is_directory())
      dirs.push_back(e.path());
  if (dirs.size() != 1)
    throw std::runtime_error("expected one run directory in " + output_dir + ", found "
                             + std::to_string(dirs.size()));
  return dirs.front();
}

/// A TCP connection to 127.0.0.1:port (-1 when refused), sends timing out
/// after 0.2 s.
inline int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

/// The port of node `node` in a cluster file written by a test.
inline uint16_t port_of(const std::string& config, const std::string& node) {
  std::ifstream in(config);
  std::string line;
  bool in_node = false;
  while (std::getline(in, line)) {
    if (line == "name = \"" + node + "\"")
      in_node = true;
    else if (in_node && line.rfind("port = ", 0) == 0)
      return static_cast<uint16_t>(std::stoi(line.substr(7)));
  }
  return 0;
}

/// A small tmpfs mounted on `where` (where this process may mount one, e.g.
/// as root), unmounted at the end; `why_not` says why not otherwise.
struct small_tmpfs {
  std::string dir;
  bool mounted = false;
  std::string why_not;
  small_tmpfs(const std::filesystem::path& where, const std::string& size)
    : dir(where.string()) {
    std::filesystem::create_directories(where);
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted)
      why_not = std::strerror(errno);
  }
  ~small_tmpfs() {
    if (mounted)
      ::umount2(dir.c_str(), MNT_DETACH);
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
};

} // namespace eg::test

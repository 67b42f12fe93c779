#include "launcher/launch.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace eg::launcher {
namespace {

std::atomic<int> pending_signal{0};

void on_signal(int sig) {
  pending_signal = sig;
}

struct child {
  std::string name;
  pid_t pid = -1;
  int out = -1;           // read end of the child's stdout + stderr
  std::string partial;    // output after the last newline
  bool exited = false;
  int code = 0;
};

void emit(child& c, const char* data, size_t n) {
  c.partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    std::printf("[%s] %s\n", c.name.c_str(), c.partial.substr(start, nl - start).c_str());
  c.partial.erase(0, start);
  std::fflush(stdout);
}

} // namespace

int launch_nodes(const std::string& program, const std::string& config,
                 const std::vector<std::string>& nodes, const std::vector<std::string>& extra) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<child> children;
  for (auto& name : nodes) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("edgegossip launch: pipe");
      return 1;
    }
    std::vector<std::string> args{program, "node", "--config", config, "--node", name};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      // The launcher forwards signals itself: a Ctrl-C on the terminal must
      // not reach the nodes twice.
      setpgid(0, 0);
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      std::fprintf(stderr, "cannot start %s: %s\n", program.c_str(), std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      std::perror("edgegossip launch: fork");
      close(fds[0]);
      return 1;
    }
    children.push_back(child{name, pid, fds[0], {}, false, 0});
    std::printf("[launch] node %s started (pid %d)\n", name.c_str(), static_cast<int>(pid));
  }
  std::fflush(stdout);

  size_t open_pipes = children.size();
  bool forwarded = false;
  while (open_pipes > 0) {
    if (int sig = pending_signal.exchange(0); sig != 0) {
      std::printf("[launch] %s: stopping every node\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stdout);
      for (auto& c : children)
        if (!c.exited)
          kill(c.pid, forwarded ? SIGKILL : SIGTERM);
      forwarded = true;
    }
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.out >= 0)
        fds.push_back(pollfd{c.out, POLLIN, 0});
    int n = poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR)
      break;
    for (auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      for (auto& c : children) {
        if (c.out != p.fd)
          continue;
        char buf[4096];
        auto got = read(c.out, buf, sizeof buf);
        if (got > 0) {
          emit(c, buf, static_cast<size_t>(got));
        } else if (got == 0 || errno != EINTR) {
          if (!c.partial.empty())
            emit(c, "\n", 1);
          close(c.out);
          c.out = -1;
          --open_pipes;
        }
      }
    }
  }
  int result = 0;
  for (auto& c : children) {
    int status = 0;
    while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::printf("[launch] node %s exited with code %d\n", c.name.c_str(), c.code);
    if (result == 0 && c.code != 0)
      result = c.code;
  }
  std::fflush(stdout);
  return result;
}

} // namespace eg::launcher

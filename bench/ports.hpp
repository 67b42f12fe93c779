#pragma once
// Ports for the node processes that benchmarks and tests start on 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>

namespace eg::bench {

/// A TCP port on 127.0.0.1 that was free a moment ago, for a node of a
/// cluster file. It is taken below the kernel's ephemeral range (32768 and
/// up by default): a port from that range can be taken, between writing it
/// into a cluster file and the node binding it, by another node's weights
/// lane set to listen on a port the kernel picks, or by an outgoing
/// connection; the node dialling it then reaches a lane instead (CAF:
/// malformed_basp_message) for as long as the run lasts.
inline uint16_t free_port() {
  // An even port whose next one is free too: a node's weights lane listens
  // on its port + 1 by default, and two even ports never take each other's.
  static std::mt19937 pick{std::random_device{}()};
  std::uniform_int_distribution<int> half(10000, 16383);
  auto bindable = [](int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return free;
  };
  // Never the same port twice in one process: nothing holds a port between
  // this answer and the node's start, so a second pick could find it free.
  static std::set<int> given;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = 2 * half(pick);
    if (!given.count(port) && bindable(port) && bindable(port + 1)) {
      given.insert(port);
      return static_cast<uint16_t>(port);
    }
  }
  throw std::runtime_error("no two free ports in 20000..32767 on 127.0.0.1");
}

} // namespace eg::bench

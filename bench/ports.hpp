#pragma once
// Ports for the node processes that benchmarks and tests start on 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>

namespace eg::bench {

/// A TCP port on 127.0.0.1 that was free a moment ago, for a node of a
/// cluster file. It is taken below the kernel's ephemeral range (32768 and
/// up by default): a port from that range can be taken, between writing it
/// into a cluster file and the node binding it, by another node's weights
/// lane (which listens on a port the kernel picks) or by an outgoing
/// connection; the node dialling it then reaches a lane instead (CAF:
/// malformed_basp_message) for as long as the run lasts.
inline uint16_t free_port() {
  static std::mt19937 pick{std::random_device{}()};
  std::uniform_int_distribution<int> port(20000, 32767);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port(pick)));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free)
      return ntohs(addr.sin_port);
  }
  throw std::runtime_error("no free port in 20000..32767 on 127.0.0.1");
}

} // namespace eg::bench

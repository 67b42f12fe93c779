#include "messages/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace eg::messages {
namespace {

std::string where(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

[[noreturn]] void fail(const std::string& what) {
  throw socket_error(what + ": " + std::strerror(errno));
}

sockaddr_in resolve(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1)
    return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found)
    throw socket_error("cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return addr;
}

} // namespace

void socket_fd::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

socket_fd listen_tcp(const std::string& host, uint16_t port, int backlog) {
  auto addr = resolve(host, port);
  socket_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd)
    fail("socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    fail("cannot bind " + where(host, port));
  if (::listen(fd.get(), backlog) != 0)
    fail("cannot listen on " + where(host, port));
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    fail("getsockname");
  return ntohs(addr.sin_port);
}

socket_fd connect_tcp(const std::string& host, uint16_t port, int timeout_ms) {
  auto addr = resolve(host, port);
  socket_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd)
    fail("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS)
      fail("cannot connect to " + where(host, port));
    pollfd p{fd.get(), POLLOUT, 0};
    int rc;
    do
      rc = ::poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc == 0)
      throw socket_error("cannot connect to " + where(host, port) + ": no answer within "
                         + std::to_string(timeout_ms) + " ms");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0 || err != 0) {
      errno = err ? err : errno;
      fail("cannot connect to " + where(host, port));
    }
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  tune_socket(fd.get(), 0, 0);
  return fd;
}

void tune_socket(int fd, int send_timeout_ms, int receive_timeout_ms) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto timeout = [](int ms) {
    timeval tv{};
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
  };
  auto snd = timeout(send_timeout_ms), rcv = timeout(receive_timeout_ms);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
}

void write_all(int fd, const void* data, size_t n) {
  writev_all(fd, {iovec{const_cast<void*>(data), n}});
}

namespace {

/// Drops the first `n` bytes of iov[first..]; returns the new first.
size_t advance(std::vector<iovec>& iov, size_t first, size_t n) {
  while (first < iov.size() && n >= iov[first].iov_len)
    n -= iov[first++].iov_len;
  if (first < iov.size()) {
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + n;
    iov[first].iov_len -= n;
  }
  return first;
}

size_t skip_empty(const std::vector<iovec>& iov) {
  size_t first = 0;
  while (first < iov.size() && iov[first].iov_len == 0)
    ++first;
  return first;
}

} // namespace

void writev_all(int fd, std::vector<iovec> iov) {
  size_t first = skip_empty(iov);
  bool socket = true;  // else a pipe or file: writev (SIGPIPE as usual)
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t w = socket ? ::sendmsg(fd, &msg, MSG_NOSIGNAL)
                       : ::writev(fd, msg.msg_iov, static_cast<int>(msg.msg_iovlen));
    if (w < 0 && errno == ENOTSOCK && socket) {
      socket = false;
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      throw socket_error("write: the peer took nothing within the send timeout");
    if (w <= 0)
      fail("write");
    first = advance(iov, first, static_cast<size_t>(w));
  }
}

size_t write_available(int fd, std::vector<iovec>& iov) {
  size_t first = skip_empty(iov), written = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (w <= 0)
      fail("write");
    written += static_cast<size_t>(w);
    first = advance(iov, first, static_cast<size_t>(w));
  }
  iov.erase(iov.begin(), iov.begin() + static_cast<std::ptrdiff_t>(first));
  return written;
}

size_t read_some_all(int fd, void* data, size_t n) {
  auto p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      throw socket_error("read: nothing arrived within the receive timeout");
    if (r < 0)
      fail("read");
    if (r == 0)
      break;
    got += static_cast<size_t>(r);
  }
  return got;
}

bool read_all(int fd, void* data, size_t n) {
  return read_some_all(fd, data, n) == n;
}

} // namespace eg::messages

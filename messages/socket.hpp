#pragma once
// Blocking TCP sockets, the little the weights lane (and bench transport's
// plain-socket baseline) need. Errors throw socket_error naming the call,
// the address and errno's text.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::messages {

class socket_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Owns a file descriptor; closes it once.
class socket_fd {
public:
  socket_fd() = default;
  explicit socket_fd(int fd) : fd_(fd) {}
  socket_fd(socket_fd&& o) noexcept : fd_(o.release()) {}
  socket_fd& operator=(socket_fd&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = o.release();
    }
    return *this;
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() { close(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

private:
  int fd_ = -1;
};

/// Listens on host:port (IPv4 address or name; port 0: any free port).
socket_fd listen_tcp(const std::string& host, uint16_t port, int backlog = 16);
/// The port a listening socket is bound to.
uint16_t bound_port(int fd);
/// Connects within `timeout_ms`; TCP_NODELAY set.
socket_fd connect_tcp(const std::string& host, uint16_t port, int timeout_ms = 3000);
/// TCP_NODELAY, and send/receive timeouts (0: none).
void tune_socket(int fd, int send_timeout_ms, int receive_timeout_ms);

/// Writes all of it (to a socket: no SIGPIPE when the peer has gone).
void write_all(int fd, const void* data, size_t n);
/// Writes every buffer with as few system calls as the kernel allows.
void writev_all(int fd, std::vector<iovec> iov);
/// Writes to a socket what its send buffer takes now, without waiting;
/// `iov` keeps what is left (empty when all was written). Returns the bytes
/// written; throws socket_error when the connection has failed.
size_t write_available(int fd, std::vector<iovec>& iov);
/// Reads exactly `n` bytes; returns how many arrived before the peer closed
/// (n when all did). Throws on errors other than an orderly close.
size_t read_some_all(int fd, void* data, size_t n);
/// read_some_all() == n.
bool read_all(int fd, void* data, size_t n);

} // namespace eg::messages

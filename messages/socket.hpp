#pragma once
// TCP sockets, the little the weights lane (and bench transport's
// plain-socket baseline) need: blocking helpers (listen, connect, write,
// read), and `stream`, a connected socket, plain or TLS (OpenSSL), that
// never blocks inside: every wait is a poll() with a time limit, so a peer
// that sends or takes nothing cannot hold a thread for longer than the
// caller allows. Errors throw socket_error naming the call, the address and
// errno's (or OpenSSL's) text.

#include "common/error.hpp"
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

// OpenSSL's SSL and SSL_CTX (messages/socket.cpp includes OpenSSL).
struct ssl_st;
struct ssl_ctx_st;

namespace eg::messages {

class socket_error : public failure<errc::network_failed> {
public:
  using failure::failure;
};

/// The peer did not do its part (send, or take what was written) within
/// the time allowed.
class socket_timeout : public socket_error {
public:
  using socket_error::socket_error;
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
/// accept4() on a non-blocking listener after poll() said it is readable:
/// the connection's descriptor and its peer as "host:port" in `address`, or
/// -1 when there was nothing to take. Out of descriptors or memory, it waits
/// up to 100 ms on `wake` first (the listener stays readable: no spinning;
/// a write to `wake` ends the wait).
int accept_peer(int listener, int wake, std::string& address);
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

/// Marks a socket as bulk traffic: IP_TOS = IPTOS_THROUGHPUT, and with it
/// the kernel's priority TC_PRIO_BULK (set explicitly as SO_PRIORITY), which
/// pfifo_fast and a prio qdisc's default priomap put in their last band.
/// Traffic at the default priority (heartbeats, plans: another connection)
/// is then served first on a saturated link. And BBR congestion control
/// where the kernel offers it, which keeps a slow link's queue short, so
/// that other connections' packets are not dropped behind bulk weights.
void mark_bulk(int fd);
/// TCP keepalive probes after `idle_s` quiet seconds: a connection to a host
/// that vanished without a word is noticed within a minute or so.
void keep_alive(int fd, int idle_s = 30, int interval_s = 10, int probes = 3);

/// One side's TLS settings: its certificate (PEM, the chain to the CA) and
/// private key, the CA file (PEM) that must have signed every peer's
/// certificate; TLS 1.2 at least, each side verifies the other's
/// certificate (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT). No
/// session tickets or resumption: every connection verifies anew.
class tls_context {
public:
  /// Throws socket_error naming the file that cannot be used, and why.
  tls_context(const std::string& certificate, const std::string& key, const std::string& ca);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  ::ssl_ctx_st* get() const { return ctx_; }

private:
  ::ssl_ctx_st* ctx_ = nullptr;
};

/// A connected socket, plain or TLS, in non-blocking mode: reads wait until
/// a deadline, writes until the peer has taken nothing for a while, both
/// with poll(). ::shutdown() of fd() from another thread wakes either.
/// Reading and writing from two threads at once is for plain sockets only.
class stream {
public:
  using clock = std::chrono::steady_clock;
  static constexpr clock::time_point forever = clock::time_point::max();

  stream() = default;
  /// Takes the socket over and makes it non-blocking.
  explicit stream(socket_fd fd);
  stream(stream&& o) noexcept;
  stream& operator=(stream&& o) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream();

  int fd() const { return fd_.get(); }
  explicit operator bool() const { return static_cast<bool>(fd_); }
  bool tls() const { return ssl_ != nullptr; }

  /// The TLS handshake, as the accepting (`server`) or the dialling side,
  /// done by `until` (else socket_timeout). A failure (the peer's
  /// certificate not signed by the CA, none given, no common protocol)
  /// throws socket_error saying so: the verification error when this side
  /// refused the peer's certificate, the alert when the peer refused ours.
  void start_tls(const tls_context& ctx, bool server, clock::time_point until);

  /// Reads `n` bytes; returns how many arrived before the peer closed (n
  /// when all did). Throws socket_timeout when they have not by `until`.
  size_t read(void* data, size_t n, clock::time_point until = forever);
  bool read_all(void* data, size_t n, clock::time_point until = forever) {
    return read(data, n, until) == n;
  }
  /// Writes all of `iov`: plain, with gather writes (sendmsg, as the
  /// buffers lie); TLS, small pieces gathered into records. Throws
  /// socket_timeout when the peer takes nothing for `idle_timeout_ms`
  /// (<= 0: waits as long as it takes).
  void write(std::vector<iovec> iov, int idle_timeout_ms);
  void write(const void* data, size_t n, int idle_timeout_ms) {
    write({iovec{const_cast<void*>(data), n}}, idle_timeout_ms);
  }

  /// Shuts the socket down (both ways), wakes a thread waiting on it.
  void shutdown();
  /// Frees the TLS state and closes the socket.
  void close();

private:
  void write_tls(const char* data, size_t n, int idle_timeout_ms);
  socket_fd fd_;
  ::ssl_st* ssl_ = nullptr;
};

} // namespace eg::messages

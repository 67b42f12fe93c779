#include "messages/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

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

int accept_peer(int listener, int wake, std::string& address) {
  sockaddr_storage from{};
  socklen_t len = sizeof from;
  int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      pollfd w{wake, POLLIN, 0};
      ::poll(&w, 1, 100);
    }
    return -1;
  }
  char host[64] = "?";
  if (from.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&from);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    std::snprintf(host + std::strlen(host), sizeof host - std::strlen(host), ":%u",
                  static_cast<unsigned>(ntohs(in->sin_port)));
  }
  address = host;
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

void mark_bulk(int fd) {
  int tos = IPTOS_THROUGHPUT;
  ::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  // What the kernel derives from that TOS (rt_tos2priority): TC_PRIO_BULK.
  // Said explicitly, as priority 0 would share the band of default traffic.
  int priority = 2;  // TC_PRIO_BULK
  ::setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &priority, sizeof priority);
  // A congestion control that keeps the bottleneck's queue short (BBR,
  // where the kernel has it): loss-based CUBIC fills a slow link's buffer
  // until it drops, and the small packets of the other connections
  // (heartbeats, plans) are dropped with the rest and wait out TCP's
  // retransmission back-off, long enough to read as a dead peer.
  static const char bbr[] = "bbr";
  ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, bbr, sizeof bbr - 1);
}

void keep_alive(int fd, int idle_s, int interval_s, int probes) {
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// -- TLS ------------------------------------------------------------------------

namespace {

/// OpenSSL's queued errors of this thread, "; "-separated (and cleared).
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    char buf[256];
    if (!reason) {
      ERR_error_string_n(e, buf, sizeof buf);
      reason = buf;
    }
    if (!out.empty())
      out += "; ";
    out += reason;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

} // namespace

tls_context::tls_context(const std::string& certificate, const std::string& key,
                         const std::string& ca) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (!ctx)
    throw socket_error("TLS: SSL_CTX_new: " + openssl_errors());
  auto bad = [](const std::string& what, const std::string& file) {
    throw socket_error("TLS " + what + " '" + file + "' cannot be used: " + openssl_errors());
  };
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  uint64_t options = SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A peer that closes without close_notify has closed (frames carry their
  // lengths: one cut short is noticed as such).
  options |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
  SSL_CTX_set_options(ctx.get(), options);
  // Nothing arrives on a dialled connection after the handshake but its end
  // (the lane takes data there as the peer closing): no session tickets.
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (certificate.empty() || key.empty() || ca.empty())
    throw socket_error("TLS needs a certificate, a key and a CA file");
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), certificate.c_str()) != 1)
    bad("certificate", certificate);
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1)
    bad("key", key);
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    bad("key (not the key of certificate '" + certificate + "')", key);
  if (SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1)
    bad("CA file", ca);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  ctx_ = ctx.release();
}

tls_context::~tls_context() {
  SSL_CTX_free(ctx_);
}

// -- stream ----------------------------------------------------------------------

namespace {

using clock_type = std::chrono::steady_clock;

/// Waits until `fd` is ready for `events` or `until` has passed (then throws
/// socket_timeout saying `what`). Ready includes hang-ups and errors: the
/// call that follows reports them.
void wait_ready(int fd, short events, clock_type::time_point until, const char* what) {
  for (;;) {
    int timeout = -1;
    if (until != stream::forever) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(until - clock_type::now()).count();
      if (left <= 0)
        throw socket_timeout(what);
      timeout = static_cast<int>(std::min<long long>(left, INT_MAX));
    }
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, timeout);
    if (rc > 0)
      return;
    if (rc < 0 && errno != EINTR)
      fail("poll");
    if (rc == 0 && until != stream::forever && clock_type::now() >= until)
      throw socket_timeout(what);
  }
}

clock_type::time_point after_ms(int ms) {
  return ms > 0 ? clock_type::now() + std::chrono::milliseconds(ms) : stream::forever;
}

std::string idle_message(int ms) {
  return "write: the peer took nothing for " + std::to_string(ms) + " ms";
}

/// What a failed TLS call means: this side's verification of the peer's
/// certificate, OpenSSL's errors (an alert from the peer among them), or
/// the connection's end.
std::string tls_failure(SSL* ssl, int err) {
  std::string why;
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK)
    why = std::string("the peer's certificate failed verification: ")
          + X509_verify_cert_error_string(verify);
  const int saved = errno;
  std::string detail;
  if (ERR_peek_error() != 0)
    detail = openssl_errors();
  else if (err == SSL_ERROR_SYSCALL)
    detail = saved != 0 ? std::strerror(saved) : "the peer closed the connection";
  else if (err == SSL_ERROR_ZERO_RETURN)
    detail = "the peer closed the connection";
  else
    detail = "SSL error " + std::to_string(err);
  return why.empty() ? detail : why + " (" + detail + ")";
}

} // namespace

stream::stream(socket_fd fd) : fd_(std::move(fd)) {
  int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd_.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    fail("fcntl");
}

stream::stream(stream&& o) noexcept : fd_(std::move(o.fd_)), ssl_(o.ssl_) {
  o.ssl_ = nullptr;
}

stream& stream::operator=(stream&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::move(o.fd_);
    ssl_ = o.ssl_;
    o.ssl_ = nullptr;
  }
  return *this;
}

stream::~stream() {
  close();
}

void stream::close() {
  if (ssl_)
    SSL_free(ssl_);
  ssl_ = nullptr;
  fd_.close();
}

void stream::shutdown() {
  if (fd_)
    ::shutdown(fd_.get(), SHUT_RDWR);
}

void stream::start_tls(const tls_context& ctx, bool server, clock::time_point until) {
  ERR_clear_error();
  if (ssl_)
    throw socket_error("TLS: the connection is TLS already");
  ssl_ = SSL_new(ctx.get());
  if (!ssl_)
    throw socket_error("TLS: SSL_new: " + openssl_errors());
  if (SSL_set_fd(ssl_, fd_.get()) != 1)
    throw socket_error("TLS: SSL_set_fd: " + openssl_errors());
  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int rc = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
    if (rc == 1)
      return;
    const int err = SSL_get_error(ssl_, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      wait_ready(fd_.get(), err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, until,
                 "TLS handshake: not done within the time allowed");
      continue;
    }
    throw socket_error("TLS handshake failed: " + tls_failure(ssl_, err));
  }
}

size_t stream::read(void* data, size_t n, clock::time_point until) {
  auto p = static_cast<char*>(data);
  size_t got = 0;
  const char* late = "read: nothing arrived within the time allowed";
  while (got < n) {
    if (ssl_) {
      ERR_clear_error();
      errno = 0;
      const int r = SSL_read(ssl_, p + got, static_cast<int>(std::min<size_t>(n - got, INT_MAX)));
      if (r > 0) {
        got += static_cast<size_t>(r);
        continue;
      }
      const int err = SSL_get_error(ssl_, r);
      if (err == SSL_ERROR_ZERO_RETURN)
        break;
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        wait_ready(fd_.get(), err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, until, late);
        continue;
      }
      if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0)
        break;  // closed without close_notify
      throw socket_error("TLS read: " + tls_failure(ssl_, err));
    }
    const ssize_t r = ::read(fd_.get(), p + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0)
      break;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd_.get(), POLLIN, until, late);
      continue;
    }
    fail("read");
  }
  return got;
}

void stream::write(std::vector<iovec> iov, int idle_timeout_ms) {
  if (ssl_) {
    // Records of up to 16 KB: pieces smaller than that go out together.
    constexpr size_t record = 16384;
    std::string staged;
    for (auto& piece : iov) {
      auto data = static_cast<const char*>(piece.iov_base);
      if (piece.iov_len < record) {
        staged.append(data, piece.iov_len);
        if (staged.size() < record)
          continue;
        write_tls(staged.data(), staged.size(), idle_timeout_ms);
        staged.clear();
        continue;
      }
      if (!staged.empty()) {
        write_tls(staged.data(), staged.size(), idle_timeout_ms);
        staged.clear();
      }
      write_tls(data, piece.iov_len, idle_timeout_ms);
    }
    if (!staged.empty())
      write_tls(staged.data(), staged.size(), idle_timeout_ms);
    return;
  }
  size_t first = skip_empty(iov);
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd_.get(), POLLOUT, after_ms(idle_timeout_ms),
                 idle_message(idle_timeout_ms).c_str());
      continue;
    }
    if (w <= 0)
      fail("write");
    first = advance(iov, first, static_cast<size_t>(w));
  }
}

void stream::write_tls(const char* data, size_t n, int idle_timeout_ms) {
  // OpenSSL writes with write(2): SIGPIPE when the peer has gone, unless
  // the thread blocks it (the lane's threads do).
  size_t done = 0;
  while (done < n) {
    ERR_clear_error();
    errno = 0;
    const int chunk = static_cast<int>(std::min<size_t>(n - done, size_t{1} << 30));
    const int w = SSL_write(ssl_, data + done, chunk);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    const int err = SSL_get_error(ssl_, w);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      wait_ready(fd_.get(), err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                 after_ms(idle_timeout_ms), idle_message(idle_timeout_ms).c_str());
      continue;
    }
    throw socket_error("TLS write: " + tls_failure(ssl_, err));
  }
}

} // namespace eg::messages

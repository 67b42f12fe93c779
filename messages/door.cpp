#include "messages/door.hpp"

#include "messages/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace eg::messages {
namespace {

using clock_type = stream::clock;

constexpr size_t copy_buffer_bytes = 64 * 1024;

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/// Copies bytes both ways between `peer` and `local` (both non-blocking)
/// until both directions are closed, either fails (a reset: the end of the
/// connection, not a fault of the peer's), or `meter` refuses what the peer
/// sends. Returns "" or why `meter` cut the connection.
std::string join(int peer, int local, basp_meter* meter) {
  struct direction {
    int from, to;
    basp_meter* meter;
    std::vector<char> buf = std::vector<char>(copy_buffer_bytes);
    size_t len = 0, off = 0;
    bool eof = false;
  };
  direction up{peer, local, meter}, down{local, peer, nullptr};
  bool hung_up[2] = {false, false};  // peer, local: poll reports it at every call
  for (;;) {
    pollfd p[2] = {{hung_up[0] ? -1 : peer, 0, 0}, {hung_up[1] ? -1 : local, 0, 0}};
    auto slot = [&](int fd) -> pollfd& { return fd == peer ? p[0] : p[1]; };
    bool any = false;
    for (auto* d : {&up, &down}) {
      if (!d->eof && d->len == 0) {
        slot(d->from).events |= POLLIN;
        any = true;
      }
      if (d->len > d->off) {
        slot(d->to).events |= POLLOUT;
        any = true;
      }
    }
    if (!any)
      return {};  // both ways closed and drained
    int rc = ::poll(p, 2, -1);
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return {};
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i].revents & POLLERR)
        return {};
      if (p[i].revents & POLLHUP)
        hung_up[i] = true;
    }
    // A hung-up socket (closed both ways) takes nothing more: bytes still
    // waiting for it can never be written.
    if ((hung_up[0] && down.len > down.off) || (hung_up[1] && up.len > up.off))
      return {};
    for (auto* d : {&up, &down}) {
      const auto& in = slot(d->from);
      if (!d->eof && d->len == 0 && (in.revents & (POLLIN | POLLHUP) || hung_up[d->from != peer])) {
        ssize_t n = ::recv(d->from, d->buf.data(), d->buf.size(), 0);
        if (n > 0) {
          if (d->meter) {
            auto wrong = d->meter->consume(d->buf.data(), static_cast<size_t>(n));
            if (!wrong.empty())
              return wrong;
          }
          d->len = static_cast<size_t>(n);
          d->off = 0;
        } else if (n == 0) {
          d->eof = true;
          ::shutdown(d->to, SHUT_WR);
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return {};  // reset: the end of the connection
        }
      }
      if (d->len > d->off) {
        ssize_t n = ::send(d->to, d->buf.data() + d->off, d->len - d->off, MSG_NOSIGNAL);
        if (n > 0) {
          d->off += static_cast<size_t>(n);
          if (d->off == d->len)
            d->len = d->off = 0;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return {};
        }
      }
    }
  }
}

/// One joined connection pair and the thread that serves it.
struct joint {
  // Closed only when the joint is pruned, after its thread has ended, so
  // that a shutdown() from another thread never meets a reused descriptor.
  stream peer;
  socket_fd local;
  std::atomic<int> peer_fd{-1}, local_fd{-1};  // theirs, for shutdown()
  std::string address;
  std::thread thread;
  std::atomic<bool> finished{false};
  // Under the owner's mutex:
  std::string node;
  bool admitted = false;
  bool replaced = false;
};

/// Shuts down both sockets of every joint; joins the finished ones' threads
/// (all of them when `all`). Under the owner's mutex.
void prune(std::list<std::unique_ptr<joint>>& joints, bool all) {
  for (auto i = joints.begin(); i != joints.end();) {
    if (all) {
      for (int fd : {(*i)->peer_fd.load(), (*i)->local_fd.load()})
        if (fd >= 0)
          ::shutdown(fd, SHUT_RDWR);
    }
    if (all || (*i)->finished) {
      (*i)->thread.join();
      i = joints.erase(i);
    } else {
      ++i;
    }
  }
}

/// Ends an acceptor thread (woken through `wake`), then every joint: their
/// threads take `mutex` on their way out, so they are joined without it.
void halt(std::atomic<bool>& stopping, int wake, std::thread& acceptor, std::mutex& mutex,
          std::list<std::unique_ptr<joint>>& joints) {
  stopping = true;
  char c = 1;
  if (wake >= 0 && ::write(wake, &c, 1) < 0) {
  }
  if (acceptor.joinable())
    acceptor.join();
  std::list<std::unique_ptr<joint>> ending;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ending.swap(joints);
  }
  prune(ending, true);
}

} // namespace

std::string basp_meter::consume(const char* data, size_t n) {
  while (n > 0) {
    if (payload_ > 0) {
      auto take = static_cast<size_t>(std::min<uint64_t>(payload_, n));
      payload_ -= take;
      data += take;
      n -= take;
      continue;
    }
    auto take = std::min(header_bytes - have_, n);
    std::memcpy(header_ + have_, data, take);
    have_ += take;
    data += take;
    n -= take;
    if (have_ < header_bytes)
      break;
    have_ = 0;
    // CAF 0.17's basp::header: operation, two padding bytes, flags, then
    // the payload length in network byte order.
    uint32_t length = 0;
    std::memcpy(&length, header_ + 4, sizeof length);
    length = ntohl(length);
    if (length > max_)
      return "a message of " + std::to_string(length) + " bytes (the most let through is "
             + std::to_string(max_) + "); connection closed";
    payload_ = length;
  }
  return {};
}

// -- the front door -------------------------------------------------------------

struct front_door::impl {
  door_options opt;
  socket_fd listener;
  uint16_t port = 0;
  uint16_t inner_port = 0;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  bool started = false, stopped = false;
  std::thread acceptor;

  std::mutex mutex;
  std::list<std::unique_ptr<joint>> joints;  // oldest first
  size_t pending = 0;                        // in their handshake
  door_stats stats;

  warn_limit warn_crowded, warn_refused, warn_cut;

  std::string who() const { return "[" + opt.identity.node + "] node port"; }

  void accept_loop() {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {wake[0], POLLIN, 0}};
    while (!stopping) {
      int rc = ::poll(fds, 2, -1);
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc < 0 || stopping || (fds[1].revents & POLLIN))
        break;
      if (!(fds[0].revents & POLLIN))
        continue;
      std::string address;
      int fd = accept_peer(listener.get(), wake[0], address);
      if (fd < 0)
        continue;
      socket_fd sock(fd);
      std::unique_lock<std::mutex> lock(mutex);
      prune(joints, false);
      const size_t limit = std::max<size_t>(1, opt.max_pending_handshakes);
      if (pending >= limit) {
        ++stats.connections_refused;
        lock.unlock();
        sock.close();
        uint64_t held = 0;
        if (warn_crowded.allow(held))
          spdlog::warn("{}: refused a connection from {}: {} connections are in their "
                       "handshake already (the most allowed){}",
                       who(), address, limit, held_note(held));
        continue;
      }
      ++pending;
      auto j = std::make_unique<joint>();
      j->peer_fd = sock.get();
      j->address = address;
      auto* raw = j.get();
      j->thread = std::thread([this, raw, fd = sock.release()] {
        name_thread("eg.door");
        block_sigpipe();
        serve(*raw, socket_fd(fd));
        raw->finished = true;
      });
      joints.push_back(std::move(j));
    }
  }

  /// Admits `node` under the limits (the oldest connection of the node is
  /// closed when it has the most allowed); "" or why not. Under `mutex`.
  std::string admit(joint& j, const std::string& node) {
    const size_t per_node = std::max<size_t>(1, opt.max_connections_per_node);
    size_t total = 0;
    std::vector<joint*> same;
    for (auto& other : joints)
      if (other->admitted && !other->replaced) {
        ++total;
        if (other->node == node)
          same.push_back(other.get());
      }
    for (size_t i = 0; same.size() - i >= per_node; ++i) {
      same[i]->replaced = true;
      ::shutdown(same[i]->peer_fd, SHUT_RDWR);
      --total;
      ++stats.connections_replaced;
    }
    if (total >= opt.max_connections)
      return "this node has " + std::to_string(total) + " connections already (the most allowed)";
    j.node = node;
    j.admitted = true;
    return {};
  }

  void serve(joint& j, socket_fd sock) {
    std::string node;
    bool admitted = false, quiet = false;
    auto& s = j.peer;
    try {
      tune_socket(sock.get(), 0, 0);
      keep_alive(sock.get());
      s = stream(std::move(sock));
      const auto until =
        clock_type::now() + std::chrono::milliseconds(std::max(1, opt.handshake_timeout_ms));
      node = accept_handshake(s, door_handshake, opt.identity, until, [&](const std::string& n) {
        std::lock_guard<std::mutex> lock(mutex);
        return stopping ? std::string("the node is stopping") : admit(j, n);
      });
      admitted = true;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      // A connection closed without a byte (a peer's reachability probe:
      // the greeting may meet it closed already) or reset: gone, not
      // refused. A handshake of the wrong kind, or none in time, is.
      quiet = what == "closed before its handshake"
              || (dynamic_cast<const socket_error*>(&e) && !dynamic_cast<const socket_timeout*>(&e));
      uint64_t held = 0;
      if (!quiet && !stopping && warn_refused.allow(held))
        spdlog::warn("{}: refused a connection from {}: {}{}{}", who(), j.address, what,
                     dynamic_cast<const socket_timeout*>(&e)
                       ? " (the handshake was not done within "
                           + std::to_string(opt.handshake_timeout_ms) + " ms)"
                       : std::string{},
                     held_note(held));
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      --pending;
      if (admitted)
        ++stats.connections_admitted;
      else if (!quiet)
        ++stats.connections_refused;
    }
    if (admitted)
      pass(j, node);
    std::lock_guard<std::mutex> lock(mutex);
    j.admitted = false;
    ::shutdown(s.fd(), SHUT_RDWR);  // the peer sees the end at once
  }

  /// Joins an admitted connection to CAF's port until either side ends it.
  void pass(joint& j, const std::string& node) {
    try {
      j.local = connect_tcp("127.0.0.1", inner_port, opt.connect_timeout_ms);
    } catch (const std::exception& e) {
      spdlog::error("{}: cannot reach this node's own actor port 127.0.0.1:{}: {}", who(),
                    inner_port, e.what());
      return;
    }
    set_nonblocking(j.local.get());
    j.local_fd = j.local.get();
    if (stopping)
      ::shutdown(j.local.get(), SHUT_RDWR);
    basp_meter meter(opt.max_message_bytes);
    auto cut = join(j.peer.fd(), j.local.get(), opt.check_lengths ? &meter : nullptr);
    ::shutdown(j.local.get(), SHUT_RDWR);
    if (!cut.empty()) {
      bool replaced = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++stats.messages_refused;
        replaced = j.replaced;
      }
      uint64_t held = 0;
      if (!replaced && !stopping && warn_cut.allow(held))
        spdlog::warn("{}: from node '{}' ({}): {}{}", who(), node, j.address, cut,
                     held_note(held));
    }
  }
};

front_door::front_door(door_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opt = std::move(options);
  try {
    d.listener = listen_tcp(d.opt.host, d.opt.port, 64);
    d.port = bound_port(d.listener.get());
    set_nonblocking(d.listener.get());
  } catch (const socket_error& e) {
    throw door_error(std::string("node port: ") + e.what());
  }
  if (::pipe2(d.wake, O_CLOEXEC) != 0)
    throw door_error(std::string("node port: pipe: ") + std::strerror(errno));
}

front_door::~front_door() {
  stop();
  if (impl_->wake[0] >= 0) {
    ::close(impl_->wake[0]);
    ::close(impl_->wake[1]);
  }
}

uint16_t front_door::port() const {
  return impl_->port;
}

const door_options& front_door::options() const {
  return impl_->opt;
}

void front_door::start(uint16_t inner_port) {
  auto& d = *impl_;
  if (d.started || d.stopped)
    return;
  d.started = true;
  d.inner_port = inner_port;
  d.acceptor = std::thread([&d] {
    name_thread("eg.door.accept");
    d.accept_loop();
  });
}

void front_door::stop() {
  auto& d = *impl_;
  if (d.stopped)
    return;
  d.stopped = true;
  halt(d.stopping, d.wake[1], d.acceptor, d.mutex, d.joints);
  d.listener.close();
}

door_stats front_door::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

// -- the routes out ---------------------------------------------------------------

struct door_routes::impl {
  door_options opt;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  bool stopped = false;
  std::thread acceptor;

  struct route {
    std::string node, host;
    uint16_t port = 0;
    socket_fd listener;
    uint16_t local_port = 0;
    std::string last_failure;  // under mutex
  };
  mutable std::mutex mutex;
  std::map<std::string, std::unique_ptr<route>> routes;  // by "host:port"
  std::list<std::unique_ptr<joint>> joints;
  door_stats stats;
  warn_limit warn_failed, warn_cut;

  std::string who() const { return "[" + opt.identity.node + "]"; }

  void accept_loop() {
    while (!stopping) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}};
      std::vector<route*> of;
      {
        std::lock_guard<std::mutex> lock(mutex);
        for (auto& [key, r] : routes) {
          fds.push_back({r->listener.get(), POLLIN, 0});
          of.push_back(r.get());
        }
      }
      int rc = ::poll(fds.data(), fds.size(), -1);
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc < 0 || stopping)
        break;
      if (fds[0].revents & POLLIN) {  // a new route: poll it too
        char buf[64];
        if (::read(wake[0], buf, sizeof buf) < 0) {
        }
        continue;
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & POLLIN))
          continue;
        std::string address;
        int fd = accept_peer(fds[i].fd, wake[0], address);
        if (fd < 0)
          continue;
        std::lock_guard<std::mutex> lock(mutex);
        prune(joints, false);
        auto j = std::make_unique<joint>();
        j->local = socket_fd(fd);
        j->local_fd = fd;
        auto* raw = j.get();
        auto* r = of[i - 1];
        j->thread = std::thread([this, raw, r] {
          name_thread("eg.door.route");
          block_sigpipe();
          carry(*raw, *r);
          ::shutdown(raw->local.get(), SHUT_RDWR);
          raw->finished = true;
        });
        joints.push_back(std::move(j));
      }
    }
  }

  void failed(route& r, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      r.last_failure = why;
      ++stats.routes_failed;
    }
    // The caller reports it (last_failure()), as often as it sees fit.
    uint64_t held = 0;
    if (!stopping && warn_failed.allow(held))
      spdlog::debug("{} node port of {} at {}:{}: {}{}", who(),
                   r.node.empty() ? std::string("a node") : "node " + r.node, r.host, r.port, why,
                   held_note(held));
  }

  /// Dials the route's front door for the local connection `local`, and
  /// joins the two once the peer has admitted it.
  void carry(joint& j, route& r) {
    auto& s = j.peer;
    try {
      auto fd = connect_tcp(r.host, r.port, opt.connect_timeout_ms);
      keep_alive(fd.get());
      const int raw = fd.get();
      s = stream(std::move(fd));
      j.peer_fd = raw;
      if (stopping)
        ::shutdown(raw, SHUT_RDWR);
      const auto until =
        clock_type::now() + std::chrono::milliseconds(std::max(1, opt.handshake_timeout_ms));
      dial_handshake(s, door_handshake, opt.identity, r.node, until, opt.handshake_timeout_ms);
    } catch (const std::exception& e) {
      if (s)
        ::shutdown(s.fd(), SHUT_RDWR);
      failed(r, e.what());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      r.last_failure.clear();
      ++stats.routes_opened;
    }
    set_nonblocking(j.local.get());
    basp_meter meter(opt.max_message_bytes);
    auto cut = join(s.fd(), j.local.get(), opt.check_lengths ? &meter : nullptr);
    ::shutdown(s.fd(), SHUT_RDWR);
    if (!cut.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++stats.messages_refused;
      }
      uint64_t held = 0;
      if (!stopping && warn_cut.allow(held))
        spdlog::warn("{} from node '{}' ({}:{}): {}{}", who(), r.node, r.host, r.port, cut,
                     held_note(held));
    }
  }
};

door_routes::door_routes(door_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opt = std::move(options);
  if (::pipe2(d.wake, O_CLOEXEC | O_NONBLOCK) != 0)
    throw door_error(std::string("door routes: pipe: ") + std::strerror(errno));
  d.acceptor = std::thread([&d] {
    name_thread("eg.door.routes");
    d.accept_loop();
  });
}

door_routes::~door_routes() {
  stop();
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

uint16_t door_routes::route(const std::string& node, const std::string& host, uint16_t port) {
  auto& d = *impl_;
  const std::string key = host + ":" + std::to_string(port);
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.stopped)
      throw door_error("door routes are stopped");
    auto found = d.routes.find(key);
    if (found != d.routes.end())
      return found->second->local_port;
    auto r = std::make_unique<impl::route>();
    r->node = node;
    r->host = host;
    r->port = port;
    try {
      r->listener = listen_tcp("127.0.0.1", 0, 16);
      r->local_port = bound_port(r->listener.get());
      set_nonblocking(r->listener.get());
    } catch (const socket_error& e) {
      throw door_error("no loopback port for the route to " + key + ": " + e.what());
    }
    auto local = r->local_port;
    d.routes.emplace(key, std::move(r));
    char c = 1;
    if (::write(d.wake[1], &c, 1) < 0) {
    }
    return local;
  }
}

std::string door_routes::last_failure(const std::string& host, uint16_t port) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto found = impl_->routes.find(host + ":" + std::to_string(port));
  return found == impl_->routes.end() ? std::string{} : found->second->last_failure;
}

void door_routes::stop() {
  auto& d = *impl_;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.stopped)
      return;
    d.stopped = true;
  }
  halt(d.stopping, d.wake[1], d.acceptor, d.mutex, d.joints);
  std::lock_guard<std::mutex> lock(d.mutex);
  d.routes.clear();
}

door_stats door_routes::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

} // namespace eg::messages

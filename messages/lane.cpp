#include "messages/lane.hpp"

#include "messages/codec.hpp"
#include "messages/secret.hpp"
#include "messages/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>

namespace eg::messages {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the lane's wire format is little-endian and written as the host's");

constexpr uint32_t hello_magic = 0x484c4745;  // "EGLH"
constexpr uint32_t frame_magic = 0x464c4745;  // "EGLF"
constexpr uint32_t lane_version = 1;
constexpr size_t max_name_bytes = 1024;
constexpr size_t frame_header_bytes = 16;  // magic, target length, message length
constexpr int handshake_timeout_ms = 5000;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_text(std::string& out, const std::string& s) {
  put(out, static_cast<uint16_t>(s.size()));
  out += s;
}

template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Reads a u16-length-prefixed text of at most max_name_bytes.
std::string read_text(int fd, const char* what) {
  uint16_t n = 0;
  if (!read_all(fd, &n, sizeof n))
    throw lane_error(std::string("handshake cut short before its ") + what);
  if (n > max_name_bytes)
    throw lane_error(std::string("handshake ") + what + " of " + std::to_string(n)
                     + " bytes (at most " + std::to_string(max_name_bytes) + ")");
  std::string s(n, '\0');
  if (!read_all(fd, s.data(), n))
    throw lane_error(std::string("handshake cut short in its ") + what);
  return s;
}

std::string hex_of(const char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(p[i]);
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

/// Names the calling thread as `top -H` and `perf` show it. (CAF 0.17 names
/// both its scheduler's workers and the middleman's thread "caf.multiplexer".)
void name_thread(const char* name) {
  ::pthread_setname_np(::pthread_self(), name);
}

std::string key_of(const lane_endpoint& e) {
  return e.host + ":" + std::to_string(e.port);
}

} // namespace

std::string to_string(const lane_endpoint& e) {
  return e.node + "@" + e.host + ":" + std::to_string(e.port);
}

lane_endpoint parse_endpoint(const std::string& text) {
  auto at = text.find('@');
  auto colon = text.rfind(':');
  if (at == std::string::npos || colon == std::string::npos || colon < at)
    throw lane_error("weights lane endpoint '" + text + "' is not node@host:port");
  lane_endpoint e;
  e.node = text.substr(0, at);
  e.host = text.substr(at + 1, colon - at - 1);
  try {
    size_t used = 0;
    auto port = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || port == 0 || port > 65535)
      throw std::out_of_range("port");
    e.port = static_cast<uint16_t>(port);
  } catch (const std::exception&) {
    throw lane_error("weights lane endpoint '" + text + "' has no valid port");
  }
  return e;
}

struct lane::impl {
  lane_options opt;
  socket_fd listener;
  uint16_t port = 0;
  int wake[2] = {-1, -1};
  deliver_fn deliver;
  std::atomic<bool> stopping{false};
  bool started = false;
  bool stopped = false;
  std::thread acceptor;
  std::thread sender;

  struct connection {
    socket_fd fd;
    std::string address;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  std::mutex connections_mutex;
  std::list<std::unique_ptr<connection>> connections;

  struct job {
    lane_endpoint to;
    std::string target;
    std::vector<char> head;     // the frame's header and target (on the heap: moves keep it)
    std::vector<iovec> pieces;  // the message, written as it lies
    size_t size = 0;
    std::shared_ptr<const void> hold;  // what the pieces point into
    /// send() wrote the first part of the frame itself: `pieces` holds what
    /// is left of head and message, for the same connection.
    bool begun = false;
  };
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<job> queue;
  size_t queued_bytes = 0;
  /// A thread is writing a frame: the sender thread, or a caller of send()
  /// that found the queue empty. Frames are written one at a time, in order.
  bool busy = false;

  // Whoever holds `busy` owns these: one connection per peer node, failures
  // in a row.
  std::map<std::string, socket_fd> outgoing;
  std::map<std::string, uint64_t> failures;

  mutable std::mutex stats_mutex;
  lane_stats stats;

  template <class F>
  void count(F f) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    f(stats);
  }

  // -- receiving -----------------------------------------------------------

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
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
      if (fd < 0)
        continue;
      char host[64] = "?";
      if (from.ss_family == AF_INET) {
        auto* in = reinterpret_cast<sockaddr_in*>(&from);
        ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        std::snprintf(host + std::strlen(host), sizeof host - std::strlen(host), ":%u",
                      static_cast<unsigned>(ntohs(in->sin_port)));
      }
      std::lock_guard<std::mutex> lock(connections_mutex);
      for (auto i = connections.begin(); i != connections.end();) {
        if ((*i)->finished) {
          (*i)->thread.join();
          i = connections.erase(i);
        } else {
          ++i;
        }
      }
      auto c = std::make_unique<connection>();
      c->fd = socket_fd(fd);
      c->address = host;
      auto* raw = c.get();
      c->thread = std::thread([this, raw] {
        name_thread("eg.lane.recv");
        serve(*raw);
        // The peer sees the end at once; the descriptor itself is closed
        // when the connection is pruned (stop() may shut it down meanwhile).
        ::shutdown(raw->fd.get(), SHUT_RDWR);
        raw->finished = true;
      });
      connections.push_back(std::move(c));
    }
  }

  /// Checks the dialling node's handshake; returns its name. Answers it
  /// either way; throws lane_error (what was wrong) when refused.
  std::string accept_handshake(int fd) {
    char head[8];
    size_t got = read_some_all(fd, head, sizeof head);
    if (got == 0)
      throw lane_error("closed before its handshake");
    if (got < sizeof head || get<uint32_t>(head) != hello_magic)
      throw lane_error("not an edgegossip lane handshake (first bytes " + hex_of(head, got)
                       + ")");
    auto refuse = [&](const std::string& why) {
      std::string reply;
      put(reply, uint32_t{1});
      put_text(reply, why);
      try {
        write_all(fd, reply.data(), reply.size());
      } catch (const socket_error&) {
      }
      throw lane_error(why);
    };
    auto version = get<uint32_t>(head + 4);
    if (version != lane_version)
      refuse("speaks lane version " + std::to_string(version) + ", this node speaks "
             + std::to_string(lane_version));
    auto cluster = read_text(fd, "cluster id");
    auto node = read_text(fd, "node name");
    auto digest = read_text(fd, "secret digest");
    if (cluster != opt.cluster_id)
      refuse("node '" + node + "' belongs to cluster '" + cluster + "', this node to '"
             + opt.cluster_id + "'");
    if (opt.peer_allowed && !opt.peer_allowed(node))
      refuse("node '" + node + "' is not a peer in the cluster file");
    if (!opt.secret.empty()
        && !same_digest(digest, lane_digest(opt.secret, opt.cluster_id, node)))
      refuse("node '" + node + "' "
             + (digest.empty() ? "presented no cluster secret" : "presented a wrong cluster secret"));
    std::string ok;
    put(ok, uint32_t{0});
    put_text(ok, opt.node);
    write_all(fd, ok.data(), ok.size());
    return node;
  }

  void serve(connection& c) {
    const int fd = c.fd.get();
    std::string peer = c.address, node;
    try {
      tune_socket(fd, handshake_timeout_ms, handshake_timeout_ms);
      try {
        node = accept_handshake(fd);
        peer = "node '" + node + "' (" + c.address + ")";
      } catch (const lane_error& e) {
        count([](lane_stats& s) { ++s.connections_refused; });
        if (!stopping)
          spdlog::warn("[{}] weights lane: refused a connection from {}: {}", opt.node,
                       c.address, e.what());
        return;
      }
      tune_socket(fd, opt.send_timeout_ms, 0);
      std::string target;
      for (;;) {
        char head[frame_header_bytes];
        size_t got = read_some_all(fd, head, sizeof head);
        if (got == 0)
          return;  // closed between frames: the peer is done or gone
        if (got < sizeof head)
          throw lane_error("frame header cut short (" + std::to_string(got) + " of "
                           + std::to_string(sizeof head) + " bytes)");
        if (get<uint32_t>(head) != frame_magic)
          throw lane_error("foreign data instead of a frame (first bytes "
                           + hex_of(head, sizeof head) + "); connection closed");
        auto target_bytes = get<uint32_t>(head + 4);
        auto size = get<uint64_t>(head + 8);
        if (target_bytes == 0 || target_bytes > max_name_bytes)
          throw lane_error("frame names a target of " + std::to_string(target_bytes)
                           + " bytes; connection closed");
        if (size == 0 || size > max_message_bytes)
          throw lane_error("frame of " + std::to_string(size) + " bytes (limit "
                           + std::to_string(max_message_bytes) + "); connection closed");
        target.resize(target_bytes);
        if (!read_all(fd, target.data(), target_bytes))
          throw lane_error("frame cut short in its target name");
        buffer message(static_cast<size_t>(size));
        got = read_some_all(fd, message.data(), message.size());
        if (got < size)
          throw lane_error("frame for '" + target + "' cut short: " + std::to_string(got)
                           + " of " + std::to_string(size) + " bytes arrived");
        count([&](lane_stats& s) {
          ++s.frames_received;
          s.bytes_received += size;
        });
        deliver(node, target, std::make_shared<const buffer>(std::move(message)));
      }
    } catch (const std::exception& e) {
      if (stopping)
        return;
      count([](lane_stats& s) { ++s.frames_refused; });
      spdlog::warn("[{}] weights lane: from {}: {}", opt.node, peer, e.what());
    }
  }

  // -- sending ---------------------------------------------------------------

  socket_fd dial(const lane_endpoint& to) {
    auto fd = connect_tcp(to.host, to.port, opt.connect_timeout_ms);
    tune_socket(fd.get(), opt.send_timeout_ms, handshake_timeout_ms);
    std::string hello;
    put(hello, hello_magic);
    put(hello, lane_version);
    put_text(hello, opt.cluster_id);
    put_text(hello, opt.node);
    put_text(hello, lane_digest(opt.secret, opt.cluster_id, opt.node));
    write_all(fd.get(), hello.data(), hello.size());
    uint32_t status = 1;
    if (!read_all(fd.get(), &status, sizeof status))
      throw lane_error("closed the connection during the handshake");
    auto text = read_text(fd.get(), "answer");
    if (status != 0)
      throw lane_error("refused the handshake: " + text);
    if (!to.node.empty() && text != to.node)
      throw lane_error("is node '" + text + "', not '" + to.node + "'");
    tune_socket(fd.get(), opt.send_timeout_ms, 0);
    return fd;
  }

  /// Whether the peer closed its end (a restarted node): checked before
  /// writing, so that a frame is not written into a dead connection.
  static bool closed_by_peer(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLIN));
  }

  static std::vector<char> frame_head(const std::string& target, size_t size) {
    std::string head;
    put(head, frame_magic);
    put(head, static_cast<uint32_t>(target.size()));
    put(head, static_cast<uint64_t>(size));
    head += target;
    return {head.begin(), head.end()};
  }

  /// The frame's buffers still to write: all of it, or what send() left.
  static std::vector<iovec> frame_iov(job& j) {
    if (j.begun)
      return j.pieces;
    std::vector<iovec> iov;
    iov.reserve(j.pieces.size() + 1);
    iov.push_back({j.head.data(), j.head.size()});
    iov.insert(iov.end(), j.pieces.begin(), j.pieces.end());
    return iov;
  }

  void sent(const job& j) {
    count([&](lane_stats& s) {
      ++s.frames_sent;
      s.bytes_sent += j.size;
    });
    failures.erase(key_of(j.to));
  }

  void lost(const job& j, const std::string& why) {
    auto key = key_of(j.to);
    outgoing.erase(key);
    count([](lane_stats& s) { ++s.frames_lost; });
    auto n = ++failures[key];
    if (!stopping && (n == 1 || n % 100 == 0))
      spdlog::warn("[{}] weights lane: a message for '{}' on node '{}' ({}) is lost{}: {}",
                   opt.node, j.target, j.to.node, key,
                   n > 1 ? " (" + std::to_string(n) + " in a row)" : std::string{}, why);
  }

  /// The connection to `to` that is still open, or end().
  std::map<std::string, socket_fd>::iterator open_connection(const lane_endpoint& to) {
    auto i = outgoing.find(key_of(to));
    if (i != outgoing.end() && closed_by_peer(i->second.get())) {
      outgoing.erase(i);
      return outgoing.end();
    }
    return i;
  }

  /// On the sender thread: writes the frame (dialling first if needed),
  /// waiting for the peer up to the send timeout.
  void send_one(job& j) {
    try {
      auto i = outgoing.end();
      if (j.begun) {
        // The rest of a frame belongs on the connection it began on.
        i = outgoing.find(key_of(j.to));
        if (i == outgoing.end())
          throw lane_error("the connection closed in the middle of the frame");
      } else {
        i = open_connection(j.to);
        if (i == outgoing.end())
          i = outgoing.emplace(key_of(j.to), dial(j.to)).first;
      }
      writev_all(i->second.get(), frame_iov(j));
      sent(j);
    } catch (const std::exception& e) {
      lost(j, e.what());
    }
  }

  /// On the caller of send(), holding `busy`: writes what the connection
  /// takes now, without waiting and without dialling. Returns whether the
  /// frame is done with (written, or lost); else the sender thread finishes it.
  bool send_now(job& j) {
    try {
      auto i = open_connection(j.to);
      if (i == outgoing.end())
        return false;
      auto iov = frame_iov(j);
      const size_t written = write_available(i->second.get(), iov);
      if (iov.empty()) {
        sent(j);
        return true;
      }
      if (written > 0) {
        j.pieces = std::move(iov);
        j.begun = true;
      }
      return false;
    } catch (const std::exception& e) {
      lost(j, e.what());
      return true;
    }
  }

  bool enqueue(const lane_endpoint& to, const std::string& target, std::vector<iovec> pieces,
               std::shared_ptr<const void> hold) {
    if (target.empty() || target.size() > max_name_bytes)
      throw lane_error("weights lane: no target, or a target name over "
                       + std::to_string(max_name_bytes) + " bytes");
    size_t size = 0;
    for (auto& p : pieces)
      size += p.iov_len;
    std::unique_lock<std::mutex> lock(queue_mutex);
    if (stopping || !started || queued_bytes + size > opt.max_queued_bytes) {
      lock.unlock();
      count([](lane_stats& s) { ++s.frames_lost; });
      return false;
    }
    queued_bytes += size;
    job j{to, target, frame_head(target, size), std::move(pieces), size, std::move(hold)};
    if (!queue.empty() || busy) {
      queue.push_back(std::move(j));
      queue_cv.notify_one();
      return true;
    }
    // Nothing is being written: the caller writes what the socket takes at
    // once, which spares a small frame the hand-over to the sender thread.
    busy = true;
    lock.unlock();
    const bool done = send_now(j);
    lock.lock();
    busy = false;
    if (done)
      queued_bytes -= size;
    else
      queue.push_front(std::move(j));  // frames queued meanwhile come after it
    queue_cv.notify_all();             // the sender thread, or stop()
    lock.unlock();
    return true;  // `j` (and its hold, when written) goes here, outside the lock
  }

  void send_loop() {
    for (;;) {
      job j;
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_cv.wait(lock, [&] { return stopping || (!queue.empty() && !busy); });
        if (stopping)
          return;
        j = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      send_one(j);
      const size_t size = j.size;
      j = job{};  // the message is written: its hold goes now, not with the next job
      std::lock_guard<std::mutex> lock(queue_mutex);
      busy = false;
      queued_bytes -= size;
    }
  }
};

lane::lane(lane_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opt = std::move(options);
  try {
    d.listener = listen_tcp(d.opt.host, d.opt.port);
    d.port = bound_port(d.listener.get());
  } catch (const socket_error& e) {
    throw lane_error("weights lane of node '" + d.opt.node + "': " + e.what());
  }
  if (::pipe2(d.wake, O_CLOEXEC) != 0)
    throw lane_error(std::string("weights lane: pipe: ") + std::strerror(errno));
}

lane::~lane() {
  stop();
  if (impl_->wake[0] >= 0) {
    ::close(impl_->wake[0]);
    ::close(impl_->wake[1]);
  }
}

uint16_t lane::port() const {
  return impl_->port;
}

const lane_options& lane::options() const {
  return impl_->opt;
}

void lane::start(deliver_fn deliver) {
  auto& d = *impl_;
  std::lock_guard<std::mutex> lock(d.queue_mutex);  // send() reads `started`
  if (d.started || d.stopped)
    return;
  d.deliver = std::move(deliver);
  d.acceptor = std::thread([&d] {
    name_thread("eg.lane.accept");
    d.accept_loop();
  });
  d.sender = std::thread([&d] {
    name_thread("eg.lane.send");
    d.send_loop();
  });
  d.started = true;
}

bool lane::send(const lane_endpoint& to, const std::string& target, shared_buffer message) {
  if (!message || message->empty())
    throw lane_error("weights lane: nothing to send");
  std::vector<iovec> pieces{{const_cast<char*>(message->data()), message->size()}};
  return impl_->enqueue(to, target, std::move(pieces), std::move(message));
}

bool lane::send(const lane_endpoint& to, const std::string& target, shared_gathered message) {
  if (!message || message->size() == 0)
    throw lane_error("weights lane: nothing to send");
  std::vector<iovec> pieces;
  pieces.reserve(message->pieces().size());
  for (auto& p : message->pieces())
    pieces.push_back({const_cast<char*>(p.data), p.size});
  return impl_->enqueue(to, target, std::move(pieces), std::move(message));
}

void lane::stop() {
  auto& d = *impl_;
  if (d.stopped)
    return;
  d.stopped = true;
  {
    std::lock_guard<std::mutex> lock(d.queue_mutex);
    d.stopping = true;
  }
  d.queue_cv.notify_all();
  char c = 1;
  if (d.wake[1] >= 0 && ::write(d.wake[1], &c, 1) < 0) {
  }
  if (d.acceptor.joinable())
    d.acceptor.join();
  if (d.sender.joinable())
    d.sender.join();
  {
    // A caller of send() still writing a frame (it does not wait on the peer).
    std::unique_lock<std::mutex> lock(d.queue_mutex);
    d.queue_cv.wait(lock, [&] { return !d.busy; });
  }
  {
    std::lock_guard<std::mutex> lock(d.connections_mutex);
    for (auto& conn : d.connections)
      ::shutdown(conn->fd.get(), SHUT_RDWR);
  }
  for (auto& conn : d.connections)
    if (conn->thread.joinable())
      conn->thread.join();
  d.connections.clear();
  d.outgoing.clear();
  d.queue.clear();
  d.listener.close();
}

lane_stats lane::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

} // namespace eg::messages

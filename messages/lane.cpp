#include "messages/lane.hpp"

#include "messages/codec.hpp"
#include "messages/handshake.hpp"
#include "messages/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace eg::messages {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the lane's wire format is little-endian and written as the host's");

// The handshake: messages/handshake.hpp (lane_handshake). Then frames:
// magic, target length (u32), message length (u64), target, message.
constexpr uint32_t frame_magic = 0x464c4745;  // "EGLF"
constexpr size_t frame_header_bytes = 16;  // magic, target length, message length

using clock_type = std::chrono::steady_clock;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string key_of(const lane_endpoint& e) {
  return e.host + ":" + std::to_string(e.port);
}

/// Whether the peer closed its end (a restarted node): checked before
/// writing, so that a frame is not written into a dead connection. Nothing
/// else arrives on a dialled connection after the handshake.
bool closed_by_peer(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLIN));
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
  std::unique_ptr<tls_context> tls;
  socket_fd listener;
  uint16_t port = 0;
  int wake[2] = {-1, -1};
  deliver_fn deliver;
  std::atomic<bool> stopping{false};
  bool started = false;
  bool stopped = false;
  std::thread acceptor;

  mutable std::mutex stats_mutex;
  lane_stats stats;

  template <class F>
  void count(F f) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    f(stats);
  }

  /// Seconds in which at least one frame was in the works, over all
  /// threads: overlapping writes to several peers count once (under
  /// stats_mutex).
  struct busy_time {
    int active = 0;
    clock_type::time_point since;
    double total = 0;
    double now(clock_type::time_point t) const {
      return total + (active > 0 ? std::chrono::duration<double>(t - since).count() : 0.0);
    }
  };
  busy_time sending, receiving;

  void busy(busy_time& b, bool begins) {
    const auto t = clock_type::now();
    std::lock_guard<std::mutex> lock(stats_mutex);
    if (begins) {
      if (b.active++ == 0)
        b.since = t;
    } else if (b.active > 0 && --b.active == 0) {
      b.total += std::chrono::duration<double>(t - b.since).count();
    }
  }

  /// Marks a frame in the works from its making to its end.
  struct busy_scope {
    impl& d;
    busy_time& b;
    busy_scope(impl& d, busy_time& b) : d(d), b(b) { d.busy(b, true); }
    ~busy_scope() { d.busy(b, false); }
    busy_scope(const busy_scope&) = delete;
    busy_scope& operator=(const busy_scope&) = delete;
  };

  // One of each kind of warning a second at most.
  warn_limit warn_crowded;  // too many connections in their handshake
  warn_limit warn_refused;  // a handshake refused (over the connection limits too)
  warn_limit warn_frames;   // a connection's frames refused

  // -- receiving -----------------------------------------------------------

  struct connection {
    stream s;
    int fd = -1;  // s's, for shutdown() from other threads
    std::string address;
    std::thread thread;
    std::atomic<bool> finished{false};
    // Under connections_mutex:
    std::string node;            // once handshaken
    bool authenticated = false;  // handshaken and still served
    bool replaced = false;       // closed for a newer connection of its node
  };
  std::mutex connections_mutex;
  std::list<std::unique_ptr<connection>> connections;  // oldest first
  size_t pending = 0;  // connections in their handshake (under connections_mutex)

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
      std::string host;
      int fd = accept_peer(listener.get(), wake[0], host);
      if (fd < 0)
        continue;
      socket_fd sock(fd);
      std::unique_lock<std::mutex> lock(connections_mutex);
      for (auto i = connections.begin(); i != connections.end();) {
        if ((*i)->finished) {
          (*i)->thread.join();
          i = connections.erase(i);
        } else {
          ++i;
        }
      }
      const size_t limit = std::max<size_t>(1, opt.max_pending_handshakes);
      if (pending >= limit) {
        lock.unlock();
        sock.close();
        count([](lane_stats& s) { ++s.connections_refused; });
        uint64_t held = 0;
        if (warn_crowded.allow(held))
          spdlog::warn("[{}] weights lane: refused a connection from {}: {} connections are in "
                       "their handshake already (the most allowed){}",
                       opt.node, host, limit, held_note(held));
        continue;
      }
      ++pending;
      auto c = std::make_unique<connection>();
      c->fd = sock.get();
      try {
        c->s = stream(std::move(sock));
      } catch (const socket_error&) {
        --pending;
        continue;
      }
      c->address = host;
      auto* raw = c.get();
      c->thread = std::thread([this, raw] {
        name_thread("eg.lane.recv");
        block_sigpipe();
        serve(*raw);
        // The peer sees the end at once; the descriptor itself is closed
        // when the connection is pruned (stop() may shut it down meanwhile).
        ::shutdown(raw->fd, SHUT_RDWR);
        raw->finished = true;
      });
      connections.push_back(std::move(c));
    }
  }

  /// Admits a handshaken connection of `node` under the limits: the oldest
  /// connection of that node is closed when it has the most allowed; returns
  /// why it is refused ("" when admitted).
  std::string admit(connection& c, const std::string& node) {
    std::lock_guard<std::mutex> lock(connections_mutex);
    const size_t per_node = std::max<size_t>(1, opt.max_connections_per_node);
    size_t total = 0;
    std::vector<connection*> same;  // oldest first
    for (auto& other : connections)
      if (other->authenticated && !other->replaced) {
        ++total;
        if (other->node == node)
          same.push_back(other.get());
      }
    for (size_t i = 0; same.size() - i >= per_node; ++i) {
      same[i]->replaced = true;
      ::shutdown(same[i]->fd, SHUT_RDWR);
      --total;
      count([](lane_stats& s) { ++s.connections_replaced; });
    }
    if (total >= opt.max_connections)
      return "this node has " + std::to_string(total)
             + " weights lane connections already (the most allowed)";
    c.node = node;
    c.authenticated = true;
    return {};
  }

  handshake_identity identity() const {
    return {opt.cluster_id, opt.node, opt.secret, opt.peer_allowed};
  }

  /// Runs the accepting side of the handshake (the dialling node's
  /// answer to a fresh challenge) by `until`; returns the node's name.
  /// Answers it either way; throws handshake_error (what was wrong) when
  /// refused.
  std::string accept(connection& c, clock_type::time_point until) {
    return accept_handshake(c.s, lane_handshake, identity(), until,
                            [&](const std::string& node) { return admit(c, node); });
  }

  void serve(connection& c) {
    auto& s = c.s;
    std::string peer = c.address, node;
    const auto until =
      clock_type::now() + std::chrono::milliseconds(std::max(1, opt.handshake_timeout_ms));
    bool handshaken = false;
    try {
      tune_socket(c.fd, 0, 0);  // TCP_NODELAY
      mark_bulk(c.fd);
      keep_alive(c.fd);
      if (tls)
        s.start_tls(*tls, true, until);
      node = accept(c, until);
      handshaken = true;
      count([](lane_stats& st) { ++st.connections_accepted; });
    } catch (const std::exception& e) {
      count([](lane_stats& st) { ++st.connections_refused; });
      uint64_t held = 0;
      const bool timed_out = dynamic_cast<const socket_timeout*>(&e) != nullptr;
      if (!stopping && warn_refused.allow(held))
        spdlog::warn("[{}] weights lane: refused a connection from {}: {}{}{}", opt.node,
                     c.address, e.what(),
                     timed_out ? " (the handshake was not done within "
                                   + std::to_string(opt.handshake_timeout_ms) + " ms)"
                               : std::string{},
                     held_note(held));
    }
    {
      std::lock_guard<std::mutex> lock(connections_mutex);
      --pending;
    }
    if (handshaken) {
      peer = "node '" + node + "' (" + c.address + ")";
      receive(c, node, peer);
    }
    std::lock_guard<std::mutex> lock(connections_mutex);
    c.authenticated = false;
  }

  /// Reads frames until the peer closes, or sends something wrong.
  void receive(connection& c, const std::string& node, const std::string& peer) {
    auto& s = c.s;
    const uint64_t limit = std::min<uint64_t>(opt.max_frame_bytes, max_message_bytes);
    try {
      std::string target;
      for (;;) {
        char head[frame_header_bytes];
        size_t got = s.read(head, sizeof head);
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
        if (size == 0 || size > limit)
          throw lane_error("frame of " + std::to_string(size) + " bytes (limit "
                           + std::to_string(limit) + "); connection closed");
        target.resize(target_bytes);
        if (!s.read_all(target.data(), target_bytes))
          throw lane_error("frame cut short in its target name");
        buffer message(static_cast<size_t>(size));
        {
          busy_scope timed(*this, receiving);
          got = s.read(message.data(), message.size());
        }
        if (got < size)
          throw lane_error("frame for '" + target + "' cut short: " + std::to_string(got)
                           + " of " + std::to_string(size) + " bytes arrived");
        count([&](lane_stats& st) {
          ++st.frames_received;
          st.bytes_received += size;
        });
        deliver(node, target, std::make_shared<const buffer>(std::move(message)));
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(connections_mutex);
        if (stopping || c.replaced)
          return;  // closed here, not by the peer
      }
      count([](lane_stats& st) { ++st.frames_refused; });
      uint64_t held = 0;
      if (warn_frames.allow(held))
        spdlog::warn("[{}] weights lane: from {}: {}{}", opt.node, peer, e.what(),
                     held_note(held));
    }
  }

  // -- sending ---------------------------------------------------------------

  /// The sender's unsent_fn, called once when the frame it belongs to is let
  /// go without having been written whole (skipped, lost, queued at stop),
  /// unless disarm()ed when it was written. Moves hand it on.
  class unsent_call {
  public:
    unsent_call() = default;
    explicit unsent_call(lane::unsent_fn fn) : fn_(std::move(fn)) {}
    unsent_call(unsent_call&& o) noexcept : fn_(std::exchange(o.fn_, nullptr)) {}
    unsent_call& operator=(unsent_call&& o) noexcept {
      if (this != &o) {
        fire();
        fn_ = std::exchange(o.fn_, nullptr);
      }
      return *this;
    }
    unsent_call(const unsent_call&) = delete;
    unsent_call& operator=(const unsent_call&) = delete;
    ~unsent_call() { fire(); }
    void disarm() { fn_ = nullptr; }

  private:
    void fire() noexcept {
      if (!fn_)
        return;
      auto fn = std::exchange(fn_, nullptr);
      try {
        fn();
      } catch (const std::exception& e) {
        spdlog::warn("weights lane: telling the sender of a frame not sent failed: {}", e.what());
      } catch (...) {
      }
    }
    lane::unsent_fn fn_;
  };

  struct job {
    lane_endpoint to;
    std::string target;
    std::vector<char> head;     // the frame's header and target (on the heap: moves keep it)
    std::vector<iovec> pieces;  // the message, written as it lies
    size_t size = 0;
    std::shared_ptr<const void> hold;  // what the pieces point into
    clock_type::time_point queued;     // when send() took it
    /// send() wrote the first part of the frame itself: `pieces` holds what
    /// is left of head and message, for the same connection.
    bool begun = false;
    bool urgent = false;  ///< before the others waiting, never skipped
    /// Called when the job is let go unwritten (sent() disarms it); jobs
    /// are let go outside queue_mutex.
    unsent_call unsent;
  };

  /// One peer endpoint: its queue, its connection, its sender thread.
  struct peer {
    std::condition_variable cv;
    std::deque<job> queue;  // a frame send() began, if any, first
    size_t waiting = 0;     // frames in `queue` not begun
    /// A thread is writing a frame to this peer: its sender thread, or a
    /// caller of send() that found the queue empty. One at a time, in order.
    bool busy = false;
    // Whoever holds `busy` owns these; `conn` is assigned under queue_mutex
    // (stop() shuts it down).
    stream conn;
    uint64_t failures = 0;  // frames lost in a row
    std::thread thread;
  };

  std::mutex queue_mutex;
  std::condition_variable idle_cv;  // some peer's `busy` ended
  std::map<std::string, std::unique_ptr<peer>> peers;
  size_t queued_bytes = 0;

  /// The peer at `key`, its sender thread started (under queue_mutex).
  peer& peer_at(const std::string& key) {
    auto& p = peers[key];
    if (!p) {
      p = std::make_unique<peer>();
      auto* raw = p.get();
      p->thread = std::thread([this, raw] {
        name_thread("eg.lane.send");
        block_sigpipe();
        send_loop(*raw);
      });
    }
    return *p;
  }

  /// Closes the peer's connection (outside queue_mutex).
  void drop_connection(peer& p) {
    stream old;
    std::lock_guard<std::mutex> lock(queue_mutex);
    old = std::move(p.conn);
    // `old` closes after the lock is let go (lock_guard was made after it).
  }

  /// Pushes the oldest waiting frames out of a queue that is too long
  /// (under queue_mutex); they go to `out`, to be let go outside the lock.
  void trim(peer& p, std::vector<job>& out) {
    const size_t limit = std::max<size_t>(1, opt.max_queued_messages);
    while (p.waiting > limit) {
      auto i = std::find_if(p.queue.begin(), p.queue.end(),
                            [](const job& j) { return !j.begun && !j.urgent; });
      if (i == p.queue.end())
        break;  // only urgent frames wait
      queued_bytes -= i->size;
      out.push_back(std::move(*i));
      p.queue.erase(i);
      --p.waiting;
      count([](lane_stats& s) { ++s.frames_skipped; });
    }
  }

  bool too_old(const job& j, clock_type::time_point now) const {
    return !j.urgent && opt.max_wait_ms > 0
           && now - j.queued > std::chrono::milliseconds(opt.max_wait_ms);
  }

  /// Dials `to` and runs the dialling side of the handshake: answers the
  /// acceptor's challenge, checks its answer. The connection is p.conn from
  /// the moment it is made (stop() shuts it down).
  void dial(peer& p, const lane_endpoint& to) {
    auto fd = connect_tcp(to.host, to.port, opt.connect_timeout_ms);
    mark_bulk(fd.get());
    keep_alive(fd.get());
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (stopping)
        throw lane_error("the lane is stopping");
      p.conn = stream(std::move(fd));
    }
    auto& s = p.conn;
    const auto until =
      clock_type::now() + std::chrono::milliseconds(std::max(1, opt.handshake_timeout_ms));
    try {
      if (tls)
        s.start_tls(*tls, false, until);
    } catch (const socket_timeout&) {
      throw lane_error("the handshake was not done within "
                       + std::to_string(opt.handshake_timeout_ms) + " ms");
    }
    dial_handshake(s, lane_handshake, identity(), to.node, until, opt.handshake_timeout_ms);
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

  void sent(peer& p, job& j) {
    j.unsent.disarm();
    count([&](lane_stats& s) {
      ++s.frames_sent;
      s.bytes_sent += j.size;
    });
    p.failures = 0;
  }

  void lost(peer& p, const job& j, const std::string& why) {
    count([](lane_stats& s) { ++s.frames_lost; });
    auto n = ++p.failures;
    if (!stopping && (n == 1 || n % 100 == 0))
      spdlog::warn("[{}] weights lane: a message for '{}' on node '{}' ({}) is lost{}: {}",
                   opt.node, j.target, j.to.node, key_of(j.to),
                   n > 1 ? " (" + std::to_string(n) + " in a row)" : std::string{}, why);
  }

  /// On the peer's sender thread: writes the frame (dialling first if
  /// needed), giving up when the peer takes nothing for the send timeout.
  void send_one(peer& p, job& j) {
    try {
      if (j.begun) {
        // The rest of a frame belongs on the connection it began on.
        if (!p.conn)
          throw lane_error("the connection closed in the middle of the frame");
      } else if (!p.conn || closed_by_peer(p.conn.fd())) {
        drop_connection(p);
        dial(p, j.to);
      }
    } catch (const std::exception& e) {
      drop_connection(p);
      lost(p, j, e.what());
      return;
    }
    try {
      {
        busy_scope timed(*this, sending);
        p.conn.write(frame_iov(j), opt.send_timeout_ms);
      }
      sent(p, j);
    } catch (const socket_timeout& e) {
      drop_connection(p);
      count([](lane_stats& s) { ++s.connections_given_up; });
      lost(p, j, std::string(e.what()) + "; connection given up");
    } catch (const std::exception& e) {
      drop_connection(p);
      lost(p, j, e.what());
    }
  }

  /// On the caller of send(), holding the peer's `busy`: writes what the
  /// connection takes now, without waiting and without dialling (plain TCP
  /// only). Returns whether the frame is done with (written, or lost); else
  /// the sender thread finishes it.
  bool send_now(peer& p, job& j) {
    try {
      if (!p.conn)
        return false;
      if (closed_by_peer(p.conn.fd())) {
        drop_connection(p);
        return false;
      }
      auto iov = frame_iov(j);
      const size_t written = write_available(p.conn.fd(), iov);
      if (iov.empty()) {
        sent(p, j);
        return true;
      }
      if (written > 0) {
        j.pieces = std::move(iov);
        j.begun = true;
      }
      return false;
    } catch (const std::exception& e) {
      drop_connection(p);
      lost(p, j, e.what());
      return true;
    }
  }

  bool enqueue(const lane_endpoint& to, const std::string& target, std::vector<iovec> pieces,
               std::shared_ptr<const void> hold, bool urgent = false,
               lane::unsent_fn unsent = {}) {
    if (target.empty() || target.size() > max_name_bytes)
      throw lane_error("weights lane: no target, or a target name over "
                       + std::to_string(max_name_bytes) + " bytes");
    size_t size = 0;
    for (auto& piece : pieces)
      size += piece.iov_len;
    std::vector<job> done;  // frames let go outside the lock (their holds)
    std::unique_lock<std::mutex> lock(queue_mutex);
    if (stopping || !started || queued_bytes + size > opt.max_queued_bytes) {
      lock.unlock();
      count([](lane_stats& s) { ++s.frames_lost; });
      return false;
    }
    auto& p = peer_at(key_of(to));
    queued_bytes += size;
    job j{to, target, frame_head(target, size), std::move(pieces), size, std::move(hold),
          clock_type::now(), false, urgent, unsent_call(std::move(unsent))};
    if (tls || !p.queue.empty() || p.busy) {
      if (urgent)  // after a frame begun and the urgent ones before it
        p.queue.insert(std::find_if(p.queue.begin(), p.queue.end(),
                                    [](const job& q) { return !q.begun && !q.urgent; }),
                       std::move(j));
      else
        p.queue.push_back(std::move(j));
      ++p.waiting;
      trim(p, done);
      p.cv.notify_one();
      lock.unlock();
      return true;
    }
    // Nothing is being written to that peer: the caller writes what the
    // socket takes at once, which spares a small frame the hand-over.
    p.busy = true;
    lock.unlock();
    const bool written = send_now(p, j);
    lock.lock();
    p.busy = false;
    if (written) {
      queued_bytes -= size;
      done.push_back(std::move(j));
    } else {
      const bool begun = j.begun;
      p.queue.push_front(std::move(j));  // frames queued meanwhile come after it
      if (!begun)
        ++p.waiting;
      trim(p, done);
    }
    p.cv.notify_one();
    idle_cv.notify_all();  // stop() may wait for it
    lock.unlock();
    return true;
  }

  void send_loop(peer& p) {
    for (;;) {
      job j;
      std::vector<job> stale;  // let go outside the lock
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        p.cv.wait(lock, [&] { return stopping || (!p.queue.empty() && !p.busy); });
        if (stopping)
          return;
        // A frame that waited too long is skipped: a newer one is worth more.
        const auto now = clock_type::now();
        while (!p.queue.empty() && !p.queue.front().begun && too_old(p.queue.front(), now)) {
          queued_bytes -= p.queue.front().size;
          stale.push_back(std::move(p.queue.front()));
          p.queue.pop_front();
          --p.waiting;
          count([](lane_stats& s) { ++s.frames_skipped; });
        }
        if (p.queue.empty())
          continue;
        j = std::move(p.queue.front());
        p.queue.pop_front();
        if (!j.begun)
          --p.waiting;
        p.busy = true;
      }
      stale.clear();
      send_one(p, j);
      const size_t size = j.size;
      j = job{};  // the message is written: its hold goes now, not with the next job
      std::lock_guard<std::mutex> lock(queue_mutex);
      p.busy = false;
      queued_bytes -= size;
      idle_cv.notify_all();
    }
  }
};

lane::lane(lane_options options) : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opt = std::move(options);
  const std::string who = "weights lane of node '" + d.opt.node + "': ";
  if (d.opt.tls.enabled()) {
    const auto& t = d.opt.tls;
    if (t.certificate.empty() || t.key.empty() || t.ca.empty())
      throw lane_error(who + "TLS needs a certificate, a key and a CA file (given: "
                       + (t.certificate.empty() ? "" : "certificate ") + (t.key.empty() ? "" : "key ")
                       + (t.ca.empty() ? "" : "CA") + ")");
    try {
      d.tls = std::make_unique<tls_context>(t.certificate, t.key, t.ca);
    } catch (const socket_error& e) {
      throw lane_error(who + e.what());
    }
  }
  try {
    d.listener = listen_tcp(d.opt.host, d.opt.port);
    d.port = bound_port(d.listener.get());
    // accept() after poll() must not wait: a connection can go again between.
    const int flags = ::fcntl(d.listener.get(), F_GETFL);
    ::fcntl(d.listener.get(), F_SETFL, flags | O_NONBLOCK);
  } catch (const socket_error& e) {
    throw lane_error(who + e.what());
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
    block_sigpipe();
    d.accept_loop();
  });
  d.started = true;
}

bool lane::send(const lane_endpoint& to, const std::string& target, shared_buffer message) {
  if (!message || message->empty())
    throw lane_error("weights lane: nothing to send");
  std::vector<iovec> pieces{{const_cast<char*>(message->data()), message->size()}};
  return impl_->enqueue(to, target, std::move(pieces), std::move(message));
}

bool lane::send(const lane_endpoint& to, const std::string& target, shared_gathered message,
                bool urgent, unsent_fn unsent) {
  if (!message || message->size() == 0)
    throw lane_error("weights lane: nothing to send");
  std::vector<iovec> pieces;
  pieces.reserve(message->pieces().size());
  for (auto& p : message->pieces())
    pieces.push_back({const_cast<char*>(p.data), p.size});
  return impl_->enqueue(to, target, std::move(pieces), std::move(message), urgent,
                        std::move(unsent));
}

void lane::stop() {
  auto& d = *impl_;
  if (d.stopped)
    return;
  d.stopped = true;
  {
    // Writes and handshakes in progress end at once: their sockets shut.
    std::lock_guard<std::mutex> lock(d.queue_mutex);
    d.stopping = true;
    for (auto& [key, p] : d.peers) {
      p->conn.shutdown();
      p->cv.notify_all();
    }
  }
  char c = 1;
  if (d.wake[1] >= 0 && ::write(d.wake[1], &c, 1) < 0) {
  }
  if (d.acceptor.joinable())
    d.acceptor.join();
  for (auto& [key, p] : d.peers)
    if (p->thread.joinable())
      p->thread.join();
  {
    // A caller of send() still writing a frame (it does not wait on the peer).
    std::unique_lock<std::mutex> lock(d.queue_mutex);
    d.idle_cv.wait(lock, [&] {
      return std::none_of(d.peers.begin(), d.peers.end(),
                          [](const auto& p) { return p.second->busy; });
    });
  }
  {
    std::lock_guard<std::mutex> lock(d.connections_mutex);
    for (auto& conn : d.connections)
      ::shutdown(conn->fd, SHUT_RDWR);
  }
  for (auto& conn : d.connections)
    if (conn->thread.joinable())
      conn->thread.join();
  d.connections.clear();
  d.peers.clear();
  d.queued_bytes = 0;
  d.listener.close();
}

lane_stats lane::stats() const {
  lane_stats s;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mutex);
    s = impl_->stats;
    const auto now = clock_type::now();
    s.send_seconds = impl_->sending.now(now);
    s.receive_seconds = impl_->receiving.now(now);
  }
  std::lock_guard<std::mutex> lock(impl_->queue_mutex);
  for (auto& [key, p] : impl_->peers)
    s.frames_queued += p->queue.size();
  s.bytes_queued = impl_->queued_bytes;
  return s;
}

} // namespace eg::messages

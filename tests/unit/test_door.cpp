// links: eg_messages
// The front door of a node's port (messages/door.hpp) between real sockets
// on 127.0.0.1: what passes it reaches the inner port byte for byte, and
// nothing of a stranger's connection does.
#include "messages/door.hpp"

#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace eg::messages;
using namespace std::chrono_literals;

namespace {

/// Stands in for CAF's loopback port: accepts, records what arrives on each
/// connection, and echoes it back.
struct inner_server {
  socket_fd listener = listen_tcp("127.0.0.1", 0);
  uint16_t port = bound_port(listener.get());
  std::mutex mutex;
  std::condition_variable cv;
  int accepted = 0;
  int closed = 0;
  std::string received;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::thread acceptor{[this] {
    for (;;) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) {
        if (stop)
          return;
        continue;
      }
      int fd = ::accept(listener.get(), nullptr, nullptr);
      if (fd < 0)
        continue;
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++accepted;
      }
      threads.emplace_back([this, fd] {
        char buf[4096];
        for (;;) {
          ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0)
            break;
          {
            std::lock_guard<std::mutex> lock(mutex);
            received.append(buf, static_cast<size_t>(n));
          }
          cv.notify_all();
          if (::send(fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) < 0)
            break;
        }
        ::close(fd);
        std::lock_guard<std::mutex> lock(mutex);
        ++closed;
        cv.notify_all();
      });
    }
  }};

  ~inner_server() {
    stop = true;
    acceptor.join();
    for (auto& t : threads)
      t.join();
  }
  template <class P>
  bool wait(P pred, std::chrono::milliseconds limit = 5000ms) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, limit, [&] { return pred(); });
  }
};

door_options options(const std::string& node, const std::string& secret,
                     const std::string& cluster = "c") {
  door_options o;
  o.identity = {cluster, node, secret, {}};
  o.connect_timeout_ms = 1000;
  o.handshake_timeout_ms = 1000;
  o.max_message_bytes = 1 << 20;
  return o;
}

/// A BASP message as CAF 0.17 writes it: a 32-byte header (operation,
/// padding, flags, payload length in network byte order, ...), then the
/// payload.
std::string basp(const std::string& payload, uint32_t announced = UINT32_MAX) {
  std::string m(32, '\0');
  m[0] = 1;
  uint32_t n = htonl(announced == UINT32_MAX ? static_cast<uint32_t>(payload.size()) : announced);
  std::memcpy(m.data() + 4, &n, 4);
  return m + payload;
}

int connect_local(uint16_t port) {
  return connect_tcp("127.0.0.1", port, 5000).release();
}

/// Reads until `n` bytes or the peer closes (or 3 s pass).
std::string read_n(int fd, size_t n) {
  std::string out;
  char buf[4096];
  auto until = std::chrono::steady_clock::now() + 3s;
  while (out.size() < n && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
    if (got <= 0)
      break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

/// Whether the peer closed `fd` within `limit`.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  char buf[256];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0)
      continue;
    ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got <= 0)
      return true;
  }
  return false;
}

} // namespace

BOOST_AUTO_TEST_SUITE(door)

BOOST_AUTO_TEST_CASE(a_member_passes_and_its_bytes_arrive_as_sent_both_ways) {
  inner_server inner;
  front_door door(options("a", "s"));
  door.start(inner.port);
  door_routes routes(options("b", "s"));
  int fd = connect_local(routes.route("a", "127.0.0.1", door.port()));
  std::string sent = basp("hello") + basp("") + basp(std::string(100000, 'x'));
  write_all(fd, sent.data(), sent.size());
  BOOST_TEST(inner.wait([&] { return inner.received.size() == sent.size(); }));
  BOOST_TEST(inner.received == sent);
  BOOST_TEST(read_n(fd, sent.size()) == sent);  // and back
  ::close(fd);
  BOOST_TEST(inner.wait([&] { return inner.closed == 1; }));
  BOOST_TEST(door.stats().connections_admitted == 1u);
  BOOST_TEST(routes.stats().routes_opened == 1u);
  BOOST_TEST(routes.last_failure("127.0.0.1", door.port()).empty());
}

BOOST_AUTO_TEST_CASE(a_wrong_secret_or_cluster_gets_nothing_through_and_is_named) {
  inner_server inner;
  front_door door(options("a", "s"));
  door.start(inner.port);
  struct wrong {
    door_options o;
    std::string expected;
  };
  for (auto& w : {wrong{options("b", "other"), "node 'b' did not prove the cluster secret"},
                  wrong{options("b", ""), "node 'b' presented no cluster secret"},
                  wrong{options("b", "s", "d"), "node 'b' belongs to cluster 'd', this node to 'c'"}}) {
    door_routes routes(w.o);
    int fd = connect_local(routes.route("a", "127.0.0.1", door.port()));
    auto msg = basp("x");
    write_all(fd, msg.data(), msg.size());
    BOOST_TEST(closed_within(fd, 3000ms));
    ::close(fd);
    auto why = routes.last_failure("127.0.0.1", door.port());
    BOOST_TEST(why.rfind("refused the handshake: ", 0) == 0u, why);
    BOOST_TEST(why.find(w.expected) != std::string::npos, why);
  }
  BOOST_TEST(inner.wait([&] { return inner.accepted == 0; }, 1ms));
  BOOST_TEST(door.stats().connections_refused == 3u);
}

BOOST_AUTO_TEST_CASE(a_door_that_is_not_the_expected_node_is_named) {
  inner_server inner;
  front_door door(options("a", "s"));
  door.start(inner.port);
  door_routes routes(options("b", "s"));
  int fd = connect_local(routes.route("z", "127.0.0.1", door.port()));
  BOOST_TEST(closed_within(fd, 3000ms));
  ::close(fd);
  BOOST_TEST(routes.last_failure("127.0.0.1", door.port()).find("is node 'a', not 'z'")
             != std::string::npos);
}

BOOST_AUTO_TEST_CASE(strangers_bytes_never_reach_the_inner_port) {
  inner_server inner;
  auto o = options("a", "");  // no secret: the default settings
  front_door door(o);
  door.start(inner.port);
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    int fd = connect_local(door.port());
    std::string junk(rng() % 600 + 1, '\0');
    for (auto& c : junk)
      c = static_cast<char>(rng());
    if (i % 3 == 0)
      junk = basp("", 0xffffffffu) + junk;  // CAF's header announcing 4 GB
    else if (i % 3 == 1)
      junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
    std::this_thread::sleep_for(2ms);  // a flood, not a SYN flood: the backlog keeps up
  }
  // A member still gets in afterwards.
  door_routes routes(options("b", ""));
  int fd = connect_local(routes.route("a", "127.0.0.1", door.port()));
  auto msg = basp("after");
  write_all(fd, msg.data(), msg.size());
  BOOST_TEST(inner.wait([&] { return inner.received == msg; }));
  ::close(fd);
  BOOST_TEST(inner.wait([&] { return inner.accepted == 1; }, 1ms));
  BOOST_TEST(door.stats().connections_refused >= 150u);
}

BOOST_AUTO_TEST_CASE(an_admitted_peer_announcing_too_long_a_message_is_cut_before_it_arrives) {
  inner_server inner;
  front_door door(options("a", "s"));
  door.start(inner.port);
  door_routes routes(options("b", "s"));
  int fd = connect_local(routes.route("a", "127.0.0.1", door.port()));
  auto fine = basp("fine");
  write_all(fd, fine.data(), fine.size());
  BOOST_TEST(inner.wait([&] { return inner.received == fine; }));
  auto huge = basp("", (1u << 20) + 1);  // one byte over the bound
  write_all(fd, huge.data(), huge.size());
  BOOST_TEST(closed_within(fd, 3000ms));
  ::close(fd);
  BOOST_TEST(inner.wait([&] { return inner.closed == 1; }));
  BOOST_TEST(inner.received == fine);  // nothing of the oversized header
  BOOST_TEST(door.stats().messages_refused == 1u);
}

BOOST_AUTO_TEST_CASE(the_meter_follows_headers_and_payloads_cut_anywhere) {
  std::string stream = basp("abc") + basp(std::string(70, 'y')) + basp("") + basp("z");
  for (size_t cut = 1; cut <= 40; ++cut) {
    basp_meter m(100);
    for (size_t at = 0; at < stream.size(); at += cut)
      BOOST_TEST(m.consume(stream.data() + at, std::min(cut, stream.size() - at)).empty());
  }
  basp_meter m(100);
  auto over = basp("abc") + basp("", 101);
  auto why = m.consume(over.data(), over.size());
  BOOST_TEST(why.find("a message of 101 bytes") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(silent_connections_are_bounded_in_number_and_time) {
  inner_server inner;
  auto o = options("a", "s");
  o.max_pending_handshakes = 4;
  o.handshake_timeout_ms = 2500;
  front_door door(o);
  door.start(inner.port);
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i)
    silent.push_back(connect_local(door.port()));
  std::this_thread::sleep_for(100ms);
  // Over the limit: closed at once, long before the handshake's deadline
  // (the margin is for a machine busy with other tests).
  int fifth = connect_local(door.port());
  BOOST_TEST(closed_within(fifth, 1500ms));
  ::close(fifth);
  for (int fd : silent) {
    BOOST_TEST(closed_within(fd, 5000ms));  // the deadline
    ::close(fd);
  }
  // Then the door takes members again.
  door_routes routes(options("b", "s"));
  int fd = connect_local(routes.route("a", "127.0.0.1", door.port()));
  auto msg = basp("in");
  write_all(fd, msg.data(), msg.size());
  BOOST_TEST(inner.wait([&] { return inner.received == msg; }));
  ::close(fd);
}

BOOST_AUTO_TEST_CASE(a_node_over_its_connection_limit_loses_its_oldest) {
  inner_server inner;
  auto o = options("a", "s");
  o.max_connections_per_node = 2;
  front_door door(o);
  door.start(inner.port);
  door_routes routes(options("b", "s"));
  const auto port = routes.route("a", "127.0.0.1", door.port());
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    fds.push_back(connect_local(port));
    auto msg = basp(std::to_string(i));
    write_all(fds.back(), msg.data(), msg.size());
    BOOST_TEST(inner.wait([&] { return inner.accepted == i + 1; }));
  }
  BOOST_TEST(closed_within(fds[0], 3000ms));  // the oldest
  BOOST_TEST(!closed_within(fds[2], 300ms));
  for (int fd : fds)
    ::close(fd);
  BOOST_TEST(door.stats().connections_replaced == 1u);
}

BOOST_AUTO_TEST_CASE(an_unreachable_peer_is_named_on_its_route) {
  door_routes routes(options("b", "s"));
  // A port nobody listens on.
  uint16_t nobody = 0;
  {
    auto l = listen_tcp("127.0.0.1", 0);
    nobody = bound_port(l.get());
  }
  int fd = connect_local(routes.route("a", "127.0.0.1", nobody));
  BOOST_TEST(closed_within(fd, 3000ms));
  ::close(fd);
  auto why = routes.last_failure("127.0.0.1", nobody);
  BOOST_TEST(!why.empty());
  BOOST_TEST(routes.stats().routes_failed == 1u);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_is_named) {
  front_door a(options("a", "s"));
  auto o = options("b", "s");
  o.port = a.port();
  try {
    front_door b(o);
    BOOST_FAIL("a second door on the same port");
  } catch (const door_error& e) {
    BOOST_TEST(std::string(e.what()).find(std::to_string(a.port())) != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()

// links: eg_messages
// The weights lane (messages/lane.hpp) between real sockets on 127.0.0.1,
// the buffer cache behind it, and the codec's gathered messages.
#include "messages/buffer.hpp"
#include "messages/codec.hpp"
#include "messages/lane.hpp"
#include "messages/rendezvous.hpp"
#include "messages/secret.hpp"
#include "messages/socket.hpp"

#include <boost/test/unit_test.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

using namespace eg::messages;

namespace {

struct received {
  std::string from, target;
  std::string bytes;
};

/// A lane that records what it receives.
struct endpoint {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<received> got;
  lane l;

  endpoint(const std::string& node, const std::string& secret,
           const std::string& cluster = "c")
      : endpoint(options(node, secret, cluster)) {}

  explicit endpoint(lane_options o) : l(std::move(o)) {
    l.start([this](const std::string& from, const std::string& target, shared_buffer m) {
      std::lock_guard<std::mutex> lock(mutex);
      got.push_back({from, target, std::string(m->data(), m->size())});
      cv.notify_all();
    });
  }

  static lane_options options(const std::string& node, const std::string& secret,
                              const std::string& cluster) {
    lane_options o;
    o.cluster_id = cluster;
    o.node = node;
    o.secret = secret;
    o.connect_timeout_ms = 1000;
    return o;
  }

  lane_endpoint where() const { return {l.options().node, "127.0.0.1", l.port()}; }

  /// Waits until `n` messages arrived (at most `limit`); returns how many did.
  size_t wait_for(size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait_for(lock, limit, [&] { return got.size() >= n; });
    return got.size();
  }

  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return got.size();
  }
};

shared_buffer bytes_of(const std::string& s) {
  buffer b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return std::make_shared<const buffer>(std::move(b));
}

/// A weights message of platform p0 in cluster c.
envelope from_p0(const weights& msg) {
  envelope e;
  e.hdr.cluster_id = "c";
  e.hdr.sender = "p0";
  e.payload = msg;
  return e;
}

/// Waits until `pred` holds (at most 10 s).
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 1000 && !pred(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return pred();
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_text(std::string& out, const std::string& s) {
  put(out, static_cast<uint16_t>(s.size()));
  out += s;
}

constexpr uint32_t hello_magic = 0x484c4745;  // "EGLH"
constexpr uint32_t frame_magic = 0x464c4745;  // "EGLF"
constexpr uint32_t version = 2;

std::string read_text(int fd) {
  uint16_t n = 0;
  BOOST_REQUIRE(read_all(fd, &n, sizeof n));
  std::string text(n, '\0');
  BOOST_REQUIRE(read_all(fd, text.data(), n));
  return text;
}

/// A raw connection to a lane, its greeting read: the lane's challenge.
struct greeted {
  socket_fd fd;
  std::string challenge;

  explicit greeted(uint16_t port) : fd(connect_tcp("127.0.0.1", port)) {
    tune_socket(fd.get(), 5000, 5000);
    char head[8];
    BOOST_REQUIRE(read_all(fd.get(), head, sizeof head));
    uint32_t magic = 0, v = 0;
    std::memcpy(&magic, head, 4);
    std::memcpy(&v, head + 4, 4);
    BOOST_REQUIRE_EQUAL(magic, hello_magic);
    BOOST_REQUIRE_EQUAL(v, version);
    challenge = read_text(fd.get());
  }
};

/// The dialling side's hello, answering `challenge` as node `node`; `nonce`
/// is set to the nonce it carries.
std::string hello_for(const std::string& node, const std::string& secret,
                      const std::string& challenge, std::string* nonce = nullptr) {
  auto mine = make_nonce();
  if (nonce)
    *nonce = mine;
  std::string hello;
  put(hello, hello_magic);
  put(hello, version);
  put_text(hello, "c");
  put_text(hello, node);
  put_text(hello, mine);
  put_text(hello, proof(secret, "lane", "c", node, challenge, mine));
  return hello;
}

/// The lane's answer to a hello: status, and the name or the reason.
struct answer {
  uint32_t status = 1;
  std::string text;   // its name, or why it refused
  std::string proof;  // with status 0
};

answer read_answer(int fd) {
  answer a;
  BOOST_REQUIRE(read_all(fd, &a.status, sizeof a.status));
  a.text = read_text(fd);
  if (a.status == 0)
    a.proof = read_text(fd);
  return a;
}

/// A hand-made connection that passes the handshake of node `node`, and
/// checks the lane's proof.
socket_fd handshaken(const endpoint& to, const std::string& node, const std::string& secret) {
  greeted g(to.l.port());
  std::string nonce;
  auto hello = hello_for(node, secret, g.challenge, &nonce);
  write_all(g.fd.get(), hello.data(), hello.size());
  auto a = read_answer(g.fd.get());
  BOOST_REQUIRE_EQUAL(a.status, 0u);
  BOOST_TEST(a.text == to.l.options().node);
  BOOST_TEST(a.proof == proof(secret, "lane-answer", "c", a.text, nonce, g.challenge));
  tune_socket(g.fd.get(), 10000, 10000);  // a test that waits in vain fails, and ends
  return std::move(g.fd);
}

/// Runs the accepting side of the handshake by hand on `fd`, as node
/// `name` (its proof keyed by `secret`); returns the dialling node's name.
std::string accept_by_hand(int fd, const std::string& secret, const std::string& name) {
  auto challenge = make_nonce();
  std::string greeting;
  put(greeting, hello_magic);
  put(greeting, version);
  put_text(greeting, challenge);
  write_all(fd, greeting.data(), greeting.size());
  char head[8];
  BOOST_REQUIRE(read_all(fd, head, sizeof head));
  read_text(fd);  // cluster id
  auto node = read_text(fd);
  auto nonce = read_text(fd);
  read_text(fd);  // its proof
  std::string ok;
  put(ok, uint32_t{0});
  put_text(ok, name);
  put_text(ok, proof(secret, "lane-answer", "c", name, nonce, challenge));
  write_all(fd, ok.data(), ok.size());
  return node;
}

/// Reads one frame from a raw connection: its target and message.
std::pair<std::string, std::string> read_frame(int fd) {
  char frame[16];
  BOOST_REQUIRE(read_all(fd, frame, sizeof frame));
  uint32_t magic = 0, target_bytes = 0;
  uint64_t size = 0;
  std::memcpy(&magic, frame, sizeof magic);
  std::memcpy(&target_bytes, frame + 4, sizeof target_bytes);
  std::memcpy(&size, frame + 8, sizeof size);
  BOOST_REQUIRE_EQUAL(magic, frame_magic);
  BOOST_REQUIRE(target_bytes <= 1024u);
  BOOST_REQUIRE(size <= (size_t{1} << 30));
  std::string target(target_bytes, '\0'), got(size, '\0');
  BOOST_REQUIRE(read_all(fd, target.data(), target_bytes));
  BOOST_REQUIRE(read_all(fd, got.data(), size));
  return {target, got};
}

void write_frame(int fd, const std::string& target, const std::string& message) {
  std::string frame;
  put(frame, frame_magic);
  put(frame, static_cast<uint32_t>(target.size()));
  put(frame, static_cast<uint64_t>(message.size()));
  frame += target;
  frame += message;
  write_all(fd, frame.data(), frame.size());
}

/// Whether the other end closes `fd` within `limit` (what it sends before
/// is read and dropped).
bool closed_within(int fd, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  until - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0)
      continue;
    ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      return true;
  }
}

/// A listening socket that plays a peer node by hand.
struct raw_peer {
  socket_fd listener = listen_tcp("127.0.0.1", 0);
  lane_endpoint where(const std::string& node) const {
    return {node, "127.0.0.1", bound_port(listener.get())};
  }
  /// Accepts the lane's connection (within 10 s) and answers its handshake.
  socket_fd accept(const std::string& secret, const std::string& name) {
    pollfd p{listener.get(), POLLIN, 0};
    BOOST_REQUIRE(::poll(&p, 1, 10000) == 1);
    socket_fd fd(::accept(listener.get(), nullptr, nullptr));
    BOOST_REQUIRE(static_cast<bool>(fd));
    tune_socket(fd.get(), 10000, 10000);  // a test that waits in vain fails, and ends
    accept_by_hand(fd.get(), secret, name);
    return fd;
  }
};

/// Milliseconds since `t`.
long long ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
    .count();
}

std::string pattern(size_t n, int seed) {
  std::string m(n, '\0');
  for (size_t i = 0; i < n; ++i)
    m[i] = static_cast<char>((i * 7 + static_cast<size_t>(seed)) % 253);
  return m;
}

/// What the lane logs while it lives.
struct captured_log {
  std::ostringstream text;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink =
    std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  captured_log() { spdlog::default_logger()->sinks().push_back(sink); }
  ~captured_log() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
  }
  std::string str() {
    spdlog::default_logger()->flush();
    return text.str();
  }
};

/// Certificates made by scripts/make-test-ca.sh in a directory of their own.
struct test_certificates {
  std::filesystem::path dir;
  bool made = false;

  test_certificates() {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      BOOST_TEST_MESSAGE("the openssl program is missing: TLS test skipped");
      return;
    }
    std::string pattern = (std::filesystem::temp_directory_path() / "eg-lane-tls-XXXXXX").string();
    BOOST_REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    // Two CAs: one the cluster's (nodes a, b, y), one another's (x, y).
    auto make = [&](const std::string& ca, const std::string& nodes) {
      auto command = std::string("'") + EG_SOURCE_DIR + "/scripts/make-test-ca.sh' '"
                     + (dir / ca).string() + "' " + nodes + " >/dev/null";
      BOOST_REQUIRE_EQUAL(std::system(command.c_str()), 0);
    };
    make("one", "a b y");
    make("other", "x y");
    made = true;
  }
  ~test_certificates() {
    if (!dir.empty())
      std::filesystem::remove_all(dir);
  }
  /// Node `node`'s certificate from CA `ca`, trusting CA `trusts`.
  lane_tls tls(const std::string& ca, const std::string& node, const std::string& trusts) const {
    return {(dir / ca / (node + ".pem")).string(), (dir / ca / (node + ".key")).string(),
            (dir / trusts / "ca.pem").string()};
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(weights_lane)

BOOST_AUTO_TEST_CASE(messages_arrive_whole_in_order_from_the_named_node) {
  endpoint a("a", "s"), b("b", "s");
  std::string big(5u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i * 131 % 251);
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("first")));
  BOOST_TEST(a.l.send(b.where(), "p2", bytes_of(big)));
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("third")));
  BOOST_REQUIRE_EQUAL(b.wait_for(3), 3u);
  BOOST_TEST(b.got[0].from == "a");
  BOOST_TEST(b.got[0].target == "p1");
  BOOST_TEST(b.got[0].bytes == "first");
  BOOST_TEST(b.got[1].target == "p2");
  BOOST_TEST((b.got[1].bytes == big));
  BOOST_TEST(b.got[2].bytes == "third");
  // And the other way, on a connection of its own.
  BOOST_TEST(b.l.send(a.where(), "p0", bytes_of("back")));
  BOOST_REQUIRE_EQUAL(a.wait_for(1), 1u);
  BOOST_TEST(a.got[0].from == "b");
  BOOST_TEST(eventually([&] { return a.l.stats().frames_sent == 3; }));
  BOOST_TEST(b.l.stats().frames_received == 3u);
  BOOST_TEST(b.l.stats().bytes_received == 5u + big.size() + 5u);
}

BOOST_AUTO_TEST_CASE(a_wrong_secret_or_cluster_is_refused_and_nothing_delivered) {
  endpoint b("b", "right");
  endpoint wrong("x", "wrong"), none("y", ""), other("z", "right", "another-cluster");
  BOOST_TEST(wrong.l.send(b.where(), "p1", bytes_of("w")));
  BOOST_TEST(none.l.send(b.where(), "p1", bytes_of("n")));
  BOOST_TEST(other.l.send(b.where(), "p1", bytes_of("o")));
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 3; }));
  BOOST_TEST(eventually([&] {
    return wrong.l.stats().frames_lost == 1 && none.l.stats().frames_lost == 1
           && other.l.stats().frames_lost == 1;
  }));
  BOOST_TEST(b.got.empty());
  BOOST_TEST(b.l.stats().frames_received == 0u);
}

BOOST_AUTO_TEST_CASE(a_node_outside_the_cluster_file_is_refused) {
  auto o = endpoint::options("b", "s", "c");
  o.peer_allowed = [](const std::string& node) { return node == "a"; };
  std::vector<std::string> got;
  std::mutex mutex;
  eg::messages::lane b(o);
  b.start([&](const std::string& from, const std::string&, shared_buffer) {
    std::lock_guard<std::mutex> lock(mutex);
    got.push_back(from);
  });
  endpoint a("a", "s"), x("x", "s");
  lane_endpoint to{"b", "127.0.0.1", b.port()};
  BOOST_TEST(x.l.send(to, "p1", bytes_of("from x")));
  BOOST_TEST(eventually([&] { return b.stats().connections_refused == 1; }));
  BOOST_TEST(a.l.send(to, "p1", bytes_of("from a")));
  BOOST_TEST(eventually([&] { return b.stats().frames_received == 1; }));
  std::lock_guard<std::mutex> lock(mutex);
  BOOST_REQUIRE_EQUAL(got.size(), 1u);
  BOOST_TEST(got[0] == "a");
}

BOOST_AUTO_TEST_CASE(foreign_bytes_close_the_connection_and_the_lane_goes_on) {
  endpoint a("a", "s"), b("b", "s");
  {
    auto fd = connect_tcp("127.0.0.1", b.l.port());
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    write_all(fd.get(), junk.data(), junk.size());
    BOOST_TEST(closed_within(fd.get(), std::chrono::seconds(5)));  // closed by the lane
  }
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 1; }));
  {
    // Past the handshake, a frame with the wrong magic.
    auto fd = handshaken(b, "a", "s");
    std::string junk(64, '\x7f');
    write_all(fd.get(), junk.data(), junk.size());
    char c;
    BOOST_TEST(read_some_all(fd.get(), &c, 1) == 0u);
  }
  BOOST_TEST(eventually([&] { return b.l.stats().frames_refused == 1; }));
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("still here")));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  BOOST_TEST(b.got[0].bytes == "still here");
}

BOOST_AUTO_TEST_CASE(a_frame_cut_short_or_oversized_is_dropped) {
  endpoint b("b", "s");
  {
    auto fd = handshaken(b, "a", "s");
    std::string frame;
    put(frame, uint32_t{0x464c4745});  // "EGLF"
    put(frame, uint32_t{2});
    put(frame, uint64_t{1000});
    frame += "p1";
    frame += std::string(10, 'x');  // 10 of 1,000 bytes, then the peer goes
    write_all(fd.get(), frame.data(), frame.size());
  }
  BOOST_TEST(eventually([&] { return b.l.stats().frames_refused == 1; }));
  {
    auto fd = handshaken(b, "a", "s");
    std::string frame;
    put(frame, uint32_t{0x464c4745});
    put(frame, uint32_t{2});
    put(frame, uint64_t{max_message_bytes + 1});
    frame += "p1";
    write_all(fd.get(), frame.data(), frame.size());
    char c;
    BOOST_TEST(read_some_all(fd.get(), &c, 1) == 0u);
  }
  BOOST_TEST(eventually([&] { return b.l.stats().frames_refused == 2; }));
  BOOST_TEST(b.got.empty());
}

BOOST_AUTO_TEST_CASE(a_peer_that_is_gone_loses_messages_without_blocking) {
  endpoint a("a", "s");
  lane_endpoint gone;
  {
    endpoint b("b", "s");
    gone = b.where();
    BOOST_TEST(a.l.send(gone, "p1", bytes_of("one")));
    BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  }  // b stops: its connections close
  auto before = a.l.stats();
  BOOST_TEST(a.l.send(gone, "p1", bytes_of("two")));
  BOOST_TEST(a.l.send(gone, "p1", bytes_of("three")));
  BOOST_TEST(eventually([&] { return a.l.stats().frames_lost == before.frames_lost + 2; }));
  // A new node at another port is reached as before.
  endpoint c("c", "s");
  BOOST_TEST(a.l.send(c.where(), "p1", bytes_of("four")));
  BOOST_REQUIRE_EQUAL(c.wait_for(1), 1u);
}

BOOST_AUTO_TEST_CASE(a_full_queue_drops_instead_of_growing) {
  auto o = endpoint::options("a", "s", "c");
  o.max_queued_bytes = 1000;
  eg::messages::lane a(o);
  // Not started yet: nothing would drain the queue.
  BOOST_TEST(!a.send({"b", "127.0.0.1", 1}, "p1", bytes_of("x")));
  a.start([](const std::string&, const std::string&, shared_buffer) {});
  BOOST_TEST(!a.send({"b", "127.0.0.1", 1}, "p1", bytes_of(std::string(2000, 'x'))));
  BOOST_TEST(a.stats().frames_lost == 2u);
  BOOST_CHECK_THROW(a.send({"b", "127.0.0.1", 1}, "", bytes_of("x")), lane_error);
}

BOOST_AUTO_TEST_CASE(endpoints_round_trip_and_bad_ones_are_named) {
  lane_endpoint e{"n1", "10.0.0.7", 4242};
  BOOST_TEST(to_string(e) == "n1@10.0.0.7:4242");
  BOOST_TEST((parse_endpoint(to_string(e)) == e));
  for (auto bad : {"n1", "n1@host", "n1@host:", "n1@host:0", "n1@host:70000", "n1@host:12x"})
    BOOST_CHECK_THROW(parse_endpoint(bad), lane_error);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_is_a_clear_error) {
  endpoint a("a", "s");
  auto o = endpoint::options("b", "s", "c");
  o.port = a.l.port();
  try {
    eg::messages::lane b(o);
    BOOST_FAIL("a second lane on the same port");
  } catch (const lane_error& e) {
    BOOST_TEST(std::string(e.what()).find(std::to_string(a.l.port())) != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(buffers_reuse_the_storage_of_earlier_large_messages) {
  auto before = buffer_cache();
  const char* first = nullptr;
  {
    buffer b(8u << 20);
    first = b.data();
    BOOST_TEST(reinterpret_cast<uintptr_t>(first) % 8 == 0u);
  }
  {
    buffer again(7u << 20);  // fits the cached block
    BOOST_TEST(static_cast<const void*>(again.data()) == static_cast<const void*>(first));
    BOOST_TEST(again.size() == (7u << 20));
  }
  auto after = buffer_cache();
  BOOST_TEST(after.reused == before.reused + 1);
  {
    buffer small(100);  // below the cache's minimum: plain memory
    BOOST_TEST(small.size() == 100u);
  }
  BOOST_TEST(buffer_cache().reused == after.reused);
  buffer from(64);
  // As pointers: Boost.Test compares two char* as C strings.
  const void* p = from.data();
  buffer to(std::move(from));
  BOOST_TEST(static_cast<const void*>(to.data()) == p);
  BOOST_TEST(static_cast<const void*>(from.data()) == nullptr);
  BOOST_TEST(from.size() == 0u);
}

BOOST_AUTO_TEST_CASE(a_gathered_message_is_what_encode_writes_without_copying_tensors) {
  std::vector<float> w(300000, 0.5f), bias(10, 1.f), odd(5, 2.f);
  weights msg;
  msg.gossip_weight = 0.25;
  msg.tensors.push_back({"w", dtype::float32, {300000}, w.data(), w.size() * 4});
  msg.tensors.push_back({"b", dtype::float32, {10}, bias.data(), bias.size() * 4});
  msg.tensors.push_back({"odd", dtype::float32, {5}, odd.data(), odd.size() * 4});  // 20 bytes
  auto e = from_p0(msg);
  auto hold = std::make_shared<int>(7);
  std::weak_ptr<int> held = hold;
  auto g = encode_gathered(e, std::move(hold));
  auto v = encode(e);
  BOOST_REQUIRE_EQUAL(g.size(), v.size());
  auto flat = g.flatten();
  BOOST_REQUIRE_EQUAL(flat.size(), v.size());
  BOOST_TEST(std::memcmp(flat.data(), v.data(), v.size()) == 0);
  // Whole-word tensors are pieces of their own, pointing at the caller's
  // memory; a tensor of 20 bytes is copied into the message.
  auto points_at = [&](const void* p) {
    for (auto& piece : g.pieces())
      if (piece.data == p)
        return true;
    return false;
  };
  BOOST_TEST(points_at(w.data()));
  BOOST_TEST(points_at(bias.data()));
  BOOST_TEST(!points_at(odd.data()));
  BOOST_TEST(!held.expired());
  auto back = decode(flat.data(), flat.size(), "c");
  auto& got = std::get<weights>(back.payload);
  BOOST_REQUIRE_EQUAL(got.tensors.size(), 3u);
  BOOST_TEST(got.gossip_weight == 0.25);
  BOOST_TEST(static_cast<const float*>(got.tensors[0].data)[299999] == 0.5f);
  BOOST_TEST(static_cast<const float*>(got.tensors[2].data)[4] == 2.f);
  BOOST_CHECK_THROW(decode(flat.data(), flat.size() - 8, "c"), codec_error);
  BOOST_CHECK_THROW(decode(flat.data(), flat.size(), "other"), codec_error);
  // A moved message still points at the same table and tensors.
  auto moved = std::move(g);
  auto again = moved.flatten();
  BOOST_TEST(std::memcmp(again.data(), v.data(), v.size()) == 0);
  { auto gone = std::move(moved); }
  BOOST_TEST(held.expired());
}

BOOST_AUTO_TEST_CASE(a_gathered_message_crosses_the_lane_and_lets_go_once_written) {
  endpoint a("a", "s"), b("b", "s");
  std::vector<double> values(1u << 20);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<double>(i) * 0.5;
  weights msg;
  msg.tensors.push_back({"x", dtype::float64, {static_cast<int64_t>(values.size())},
                         values.data(), values.size() * 8});
  auto e = from_p0(msg);
  auto hold = std::make_shared<int>(0);
  std::weak_ptr<int> held = hold;
  BOOST_TEST(a.l.send(b.where(), "p1",
                      std::make_shared<const gathered>(encode_gathered(e, std::move(hold)))));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  auto v = encode(e);
  BOOST_TEST((b.got[0].bytes == std::string(v.data(), v.size())));
  // The sender's memory is free again once the frame is written.
  BOOST_TEST(eventually([&] { return held.expired(); }));
  BOOST_TEST(a.l.stats().bytes_sent == v.size());
}

/// Frames that several threads send at once, of sizes on both sides of
/// what a socket takes at once: each arrives whole, and each thread's in the
/// order it sent them (the caller and the sender thread take turns).
BOOST_AUTO_TEST_CASE(messages_sent_from_many_threads_arrive_whole_in_each_senders_order) {
  auto o = endpoint::options("a", "s", "c");
  o.max_queued_messages = 1000;  // every frame is to arrive, however long it waits
  o.max_wait_ms = 0;
  endpoint a(o), b("b", "s");
  BOOST_TEST(a.l.send(b.where(), "warm", bytes_of("dial")));  // the connection first
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  constexpr int threads = 4, each = 40;
  auto message = [](int t, int k) {
    size_t n = (k % 5 == 4) ? (size_t{12} << 20) + static_cast<size_t>(k) : 100 + k;
    std::string m(n, '\0');
    for (size_t i = 0; i < n; ++i)
      m[i] = static_cast<char>((i * 7 + static_cast<size_t>(t * 31 + k)) % 253);
    return m;
  };
  std::vector<std::thread> senders;
  std::atomic<int> refused{0};  // (Boost.Test's checks are for the main thread)
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      for (int k = 0; k < each; ++k)
        if (!a.l.send(b.where(), "t" + std::to_string(t), bytes_of(message(t, k))))
          ++refused;
    });
  for (auto& s : senders)
    s.join();
  BOOST_TEST(refused == 0);
  BOOST_REQUIRE_EQUAL(b.wait_for(1 + threads * each), static_cast<size_t>(1 + threads * each));
  std::vector<int> next(threads, 0);
  for (size_t i = 1; i < b.got.size(); ++i) {
    int t = std::stoi(b.got[i].target.substr(1));
    BOOST_REQUIRE(b.got[i].bytes == message(t, next[t]));
    ++next[t];
  }
  BOOST_TEST(a.l.stats().frames_lost == 0u);
  BOOST_TEST(eventually([&] { return a.l.stats().frames_sent == 1u + threads * each; }));
  BOOST_TEST(b.l.stats().connections_accepted == 1u);
}

/// A peer that stops reading: send() returns at once all the same (the
/// frame it began is finished by the sender thread, the others queue), and
/// once the peer reads again every frame is there, whole and in order.
BOOST_AUTO_TEST_CASE(send_does_not_wait_for_a_peer_that_stopped_reading) {
  raw_peer b;
  const lane_endpoint slow = b.where("b");
  auto o = endpoint::options("a", "s", "c");
  o.send_timeout_ms = 3000;  // a send() that waited would lose its frame
  o.max_queued_messages = 8;
  eg::messages::lane a(o);
  a.start([](const std::string&, const std::string&, shared_buffer) {});
  std::vector<std::string> sent{"first", std::string(24u << 20, 'x'), "third",
                                std::string(5u << 20, 'y'), "fifth"};
  for (size_t i = 0; i < sent[1].size(); i += 4096)
    sent[1][i] = static_cast<char>(i / 4096);
  BOOST_TEST(a.send(slow, "p1", bytes_of(sent[0])));  // queued: the sender thread dials

  // The peer: accepts the handshake, then reads nothing for now.
  auto peer = b.accept("s", "b");
  const int fd = peer.get();
  BOOST_REQUIRE(eventually([&] { return a.stats().frames_sent == 1; }));

  for (size_t i = 1; i < sent.size(); ++i)
    BOOST_TEST(a.send(slow, "p1", bytes_of(sent[i])));
  // Every send() has returned: now the peer reads.
  for (auto& want : sent) {
    auto [target, got] = read_frame(fd);
    BOOST_TEST(target == "p1");
    BOOST_TEST((got == want));
  }
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == sent.size(); }));
  BOOST_TEST(a.stats().frames_lost == 0u);
  BOOST_TEST(a.stats().frames_skipped == 0u);
}

/// The lane's own timings (lane_stats::send_seconds, receive_seconds),
/// from which a platform's predictor learns its link: a peer that takes
/// the bytes slowly (a slow link, here a reader pacing itself at about
/// 8 MB/s) costs many times more seconds per byte to send than one that
/// reads at once; busy time is never more than the time that passed.
BOOST_AUTO_TEST_CASE(the_lane_times_its_links) {
  constexpr size_t frame = 4u << 20;
  constexpr int frames = 4;
  const auto started = std::chrono::steady_clock::now();
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };

  // A fast link: a lane that reads as the bytes come.
  auto o = endpoint::options("a", "s", "c");
  o.max_wait_ms = 0;  // the slow link's frames wait their turn, however long
  endpoint a(o), b("b", "s");
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("warm")));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  const auto before = a.l.stats();
  for (int i = 0; i < frames; ++i)
    BOOST_TEST(a.l.send(b.where(), "p1", bytes_of(pattern(frame, i))));
  BOOST_REQUIRE_EQUAL(b.wait_for(1 + frames), 1u + frames);
  BOOST_REQUIRE(eventually([&] { return a.l.stats().frames_sent == 1u + frames; }));
  const auto fast = a.l.stats();
  const double fast_per_byte = (fast.send_seconds - before.send_seconds) /
                               static_cast<double>(fast.bytes_sent - before.bytes_sent);
  BOOST_TEST(b.l.stats().receive_seconds > 0.0);
  BOOST_TEST(b.l.stats().receive_seconds <= seconds_since(started));

  // A slow link: 128 KB every 16 ms.
  raw_peer slow_peer;
  const auto slow = slow_peer.where("slow");
  BOOST_TEST(a.l.send(slow, "p1", bytes_of("hello")));
  auto fd = slow_peer.accept("s", "slow");
  BOOST_REQUIRE(eventually([&] { return a.l.stats().frames_sent == 2u + frames; }));
  {
    auto [target, got] = read_frame(fd.get());
    BOOST_TEST(got == "hello");
  }
  const auto mid = a.l.stats();
  for (int i = 0; i < frames; ++i)
    BOOST_TEST(a.l.send(slow, "p1", bytes_of(pattern(frame, i))));
  size_t left = frames * (frame + 64);  // the frames and their headers, about
  std::vector<char> chunk(128u << 10);
  while (left > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(16));
    const auto got = ::recv(fd.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (got > 0)
      left -= std::min(left, static_cast<size_t>(got));
    if (a.l.stats().frames_sent == 2u + 2 * frames && got <= 0)
      break;
    BOOST_REQUIRE(seconds_since(started) < 30);
  }
  BOOST_REQUIRE(eventually([&] { return a.l.stats().frames_sent == 2u + 2 * frames; }));
  const auto end = a.l.stats();
  const double slow_seconds = end.send_seconds - mid.send_seconds;
  const double slow_per_byte = slow_seconds / static_cast<double>(end.bytes_sent - mid.bytes_sent);
  BOOST_TEST_MESSAGE("seconds per byte: fast " << fast_per_byte << ", slow " << slow_per_byte);
  // 16 MB at 8 MB/s, less what the sockets' buffers held: most of a second.
  BOOST_TEST(slow_seconds > 0.4);
  BOOST_TEST(slow_per_byte > 4 * fast_per_byte);
  BOOST_TEST(end.send_seconds <= seconds_since(started));
  BOOST_TEST(end.frames_lost == 0u);
}

// -- the handshake: challenge and response ----------------------------------------

/// What a node sent in one handshake is worth nothing on another
/// connection: the lane's challenge is new for each.
BOOST_AUTO_TEST_CASE(a_recorded_handshake_replayed_is_refused) {
  endpoint b("b", "s");
  greeted first(b.l.port());
  const auto recorded = hello_for("a", "s", first.challenge);
  write_all(first.fd.get(), recorded.data(), recorded.size());
  auto a1 = read_answer(first.fd.get());
  BOOST_REQUIRE_EQUAL(a1.status, 0u);
  write_frame(first.fd.get(), "p1", "genuine");
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  BOOST_TEST(b.got[0].from == "a");

  const auto refused = b.l.stats().connections_refused;
  {
    // The same bytes on a new connection, after its greeting...
    greeted again(b.l.port());
    BOOST_TEST(again.challenge != first.challenge);
    write_all(again.fd.get(), recorded.data(), recorded.size());
    auto a2 = read_answer(again.fd.get());
    BOOST_TEST(a2.status == 1u);
    BOOST_TEST(a2.text.find("did not prove the cluster secret") != std::string::npos);
    BOOST_TEST(closed_within(again.fd.get(), std::chrono::seconds(5)));
  }
  {
    // ... or without reading it.
    auto fd = connect_tcp("127.0.0.1", b.l.port());
    write_all(fd.get(), recorded.data(), recorded.size());
    write_frame(fd.get(), "p1", "replayed");
    BOOST_TEST(closed_within(fd.get(), std::chrono::seconds(5)));
  }
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == refused + 2; }));
  BOOST_TEST(b.count() == 1u);
  BOOST_TEST(b.l.stats().frames_received == 1u);
}

/// The dialling node checks the accepting node's proof too: a listener that
/// answers without knowing the secret gets no frame.
BOOST_AUTO_TEST_CASE(an_acceptor_that_cannot_prove_the_secret_gets_nothing) {
  endpoint a("a", "right");
  raw_peer fake;
  BOOST_TEST(a.l.send(fake.where("b"), "p1", bytes_of("secret weights")));
  auto fd = fake.accept("wrong", "b");  // answers with a proof keyed by another secret
  BOOST_TEST(closed_within(fd.get(), std::chrono::seconds(5)));  // and no frame before
  BOOST_TEST(eventually([&] { return a.l.stats().frames_lost == 1; }));
  BOOST_TEST(a.l.stats().frames_sent == 0u);
}

// -- slow and frozen peers ----------------------------------------------------------

/// A peer that completed its handshake and reads nothing more: frames to a
/// healthy peer go on arriving at once, the frozen one's queue stays
/// bounded (its oldest frames skipped), and once it has taken nothing for
/// the send timeout its connection is given up.
BOOST_AUTO_TEST_CASE(a_frozen_peer_does_not_delay_frames_to_others) {
  endpoint a("a", "s"), b("b", "s");  // send_timeout_ms 6000
  raw_peer frozen_peer;
  const auto frozen = frozen_peer.where("f");
  BOOST_TEST(a.l.send(frozen, "p1", bytes_of("hello")));
  auto fd = frozen_peer.accept("s", "f");
  BOOST_REQUIRE(eventually([&] { return a.l.stats().frames_sent == 1; }));
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("warm")));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);

  const auto big = bytes_of(std::string(4u << 20, 'f'));
  constexpr int rounds = 12;
  // Each round one more frame for the frozen peer (48 MB in all: far more
  // than its socket buffers hold) and one for b, which arrives before the
  // next round; a frame held up behind the frozen peer's would wait for the
  // send timeout (6 s). (b's frames are not sent all at once: b's own queue
  // holds 4, and a slow machine may fall that far behind.)
  const auto sent = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    BOOST_TEST(a.l.send(frozen, "p1", big));
    BOOST_TEST(a.l.send(b.where(), "p1", bytes_of(pattern(1u << 20, i))));
    BOOST_REQUIRE_EQUAL(b.wait_for(2 + i, std::chrono::milliseconds(2500)), 2u + i);
  }
  BOOST_TEST(ms_since(sent) < 5000);
  for (int i = 0; i < rounds; ++i)
    BOOST_REQUIRE(b.got[1 + i].bytes == pattern(1u << 20, i));
  // The frozen peer's queue: at most max_queued_messages waiting, the
  // older ones pushed out.
  BOOST_TEST(a.l.stats().frames_skipped >= static_cast<uint64_t>(rounds - 2 - 4));
  BOOST_TEST(eventually([&] { return a.l.stats().connections_given_up == 1; }));
  BOOST_TEST(a.l.stats().frames_lost >= 1u);
}

/// Options of lane "a" whose peers' queues hold `queued` frames and skip a
/// frame that waited `wait_ms` (0: never); it gives up on no peer within a
/// test.
lane_options queue_options(size_t queued, int wait_ms) {
  auto o = endpoint::options("a", "s", "c");
  o.max_queued_messages = queued;
  o.max_wait_ms = wait_ms;
  o.send_timeout_ms = 20000;
  return o;
}

/// What a lane that only sends does with frames it receives.
void ignore_frames(const std::string&, const std::string&, shared_buffer) {}

/// A frame whose turn comes after it waited longer than max_wait_ms is
/// skipped, not sent late; a frame already begun is finished.
BOOST_AUTO_TEST_CASE(frames_that_waited_too_long_are_skipped) {
  raw_peer b;
  eg::messages::lane a(queue_options(8, 1000));
  a.start(ignore_frames);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("warm")));
  auto fd = b.accept("s", "b");
  BOOST_TEST(read_frame(fd.get()).second == "warm");
  const auto big = pattern(32u << 20, 3);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(big)));  // fills the socket: the sender waits
  for (auto s : {"old 1", "old 2", "old 3"})
    BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(s)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("fresh")));
  // Now the peer reads: the frame it was taking, then the fresh one.
  BOOST_TEST((read_frame(fd.get()).second == big));
  BOOST_TEST(read_frame(fd.get()).second == "fresh");
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == 3; }));
  BOOST_TEST(a.stats().frames_skipped == 3u);
  BOOST_TEST(a.stats().frames_lost == 0u);
}

/// When a peer's queue is full, the oldest frame waiting makes way.
BOOST_AUTO_TEST_CASE(a_full_peer_queue_pushes_out_its_oldest_frame) {
  raw_peer b;
  eg::messages::lane a(queue_options(2, 0));
  a.start(ignore_frames);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("warm")));
  auto fd = b.accept("s", "b");
  BOOST_TEST(read_frame(fd.get()).second == "warm");
  const auto big = pattern(32u << 20, 5);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(big)));
  for (int i = 1; i <= 5; ++i)
    BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("small " + std::to_string(i))));
  BOOST_TEST(a.stats().frames_skipped == 3u);  // at once, in send()
  BOOST_TEST((read_frame(fd.get()).second == big));
  BOOST_TEST(read_frame(fd.get()).second == "small 4");
  BOOST_TEST(read_frame(fd.get()).second == "small 5");
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == 4; }));
}

/// A small gathered frame: a weights message of five floats (copied into
/// the message).
std::shared_ptr<const gathered> small_gathered(float value) {
  auto x = std::make_shared<std::vector<float>>(5, value);
  weights msg;
  msg.gossip_weight = value;
  msg.tensors.push_back({"x", dtype::float32, {5}, x->data(), x->size() * 4});
  return std::make_shared<const gathered>(encode_gathered(from_p0(msg), x));
}

/// A frame send() took and never wrote whole tells its sender once, from
/// wherever it was let go: pushed out of a full queue, lost to a peer that
/// is not there, still queued at stop(); a frame written whole never does.
BOOST_AUTO_TEST_CASE(a_frame_not_sent_tells_its_sender_once_and_a_written_one_never) {
  std::mutex m;
  std::vector<std::string> unsent;
  auto told = [&] {
    std::lock_guard<std::mutex> g(m);
    return unsent;
  };
  auto tell = [&](std::string name) -> lane::unsent_fn {
    return [&m, &unsent, name] {
      std::lock_guard<std::mutex> g(m);
      unsent.push_back(name);
    };
  };
  raw_peer b;
  eg::messages::lane a(queue_options(2, 0));
  a.start(ignore_frames);
  BOOST_TEST(a.send(b.where("b"), "p1", small_gathered(0), false, tell("warm")));
  auto fd = b.accept("s", "b");
  BOOST_TEST(read_frame(fd.get()).first == "p1");
  const auto big = pattern(32u << 20, 9);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(big)));  // fills the socket
  for (int i = 1; i <= 5; ++i)
    BOOST_TEST(a.send(b.where("b"), "p1", small_gathered(static_cast<float>(i)), false,
                      tell("small " + std::to_string(i))));
  // Pushed out of the queue in send(), oldest first.
  BOOST_TEST((told() == std::vector<std::string>{"small 1", "small 2", "small 3"}));
  BOOST_TEST((read_frame(fd.get()).second == big));
  read_frame(fd.get());
  read_frame(fd.get());
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == 4; }));
  BOOST_TEST(told().size() == 3u);  // warm, small 4 and small 5 were written
  // Lost: nobody listens there.
  BOOST_TEST(a.send({"z", "127.0.0.1", 1}, "p1", small_gathered(6), false, tell("lost")));
  BOOST_TEST(eventually([&] { return told().size() == 4; }));
  BOOST_TEST(told().back() == "lost");
  // Queued when the lane stops: the peer reads nothing, the big frame waits.
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(big)));
  BOOST_TEST(a.send(b.where("b"), "p1", small_gathered(7), false, tell("queued")));
  a.stop();
  BOOST_TEST(told().size() == 5u);
  BOOST_TEST(told().back() == "queued");
  // Refused at once (the lane stopped): send() says so, the sender is not told.
  BOOST_TEST(!a.send(b.where("b"), "p1", small_gathered(8), false, tell("refused")));
  BOOST_TEST(told().size() == 5u);
}

/// An urgent frame (a model the balancer waits for) goes before the frames
/// waiting for that peer, is not pushed out of a full queue and not
/// skipped for its wait.
BOOST_AUTO_TEST_CASE(an_urgent_frame_goes_first_and_is_neither_pushed_out_nor_skipped) {
  raw_peer b;
  eg::messages::lane a(queue_options(2, 1000));
  a.start(ignore_frames);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("warm")));
  auto fd = b.accept("s", "b");
  BOOST_TEST(read_frame(fd.get()).second == "warm");
  const auto big = pattern(32u << 20, 7);
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(big)));  // fills the socket: the sender waits
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("old 1")));
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("old 2")));
  std::vector<double> values(1000, 0.25);
  weights msg;
  msg.tensors.push_back({"x", dtype::float64, {static_cast<int64_t>(values.size())},
                         values.data(), values.size() * 8});
  auto e = from_p0(msg);
  BOOST_TEST(a.send(b.where("b"), "@balancer",
                    std::make_shared<const gathered>(encode_gathered(e, nullptr)), true));
  // One more than the queue holds: the oldest ordinary ones make way.
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("old 3")));
  BOOST_TEST(a.stats().frames_skipped == 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // all of them waited too long
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("fresh")));
  BOOST_TEST((read_frame(fd.get()).second == big));
  auto urgent = read_frame(fd.get());
  BOOST_TEST(urgent.first == "@balancer");
  auto v = encode(e);
  BOOST_TEST((urgent.second == std::string(v.data(), v.size())));
  BOOST_TEST(read_frame(fd.get()).second == "fresh");
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == 4; }));
  BOOST_TEST(a.stats().frames_skipped == 3u);  // old 3 waited too long
  BOOST_TEST(a.stats().frames_lost == 0u);
}

/// stop() does not wait for a peer that takes nothing: the write in
/// progress is cut short.
BOOST_AUTO_TEST_CASE(stop_does_not_wait_for_a_frozen_peer) {
  raw_peer b;
  auto o = endpoint::options("a", "s", "c");
  o.send_timeout_ms = 30000;
  eg::messages::lane a(o);
  a.start([](const std::string&, const std::string&, shared_buffer) {});
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of("warm")));
  auto fd = b.accept("s", "b");
  BOOST_REQUIRE(eventually([&] { return a.stats().frames_sent == 1; }));
  BOOST_TEST(a.send(b.where("b"), "p1", bytes_of(std::string(64u << 20, 'z'))));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t = std::chrono::steady_clock::now();
  a.stop();
  BOOST_TEST(ms_since(t) < 2000);
}

// -- hostile input ----------------------------------------------------------------

/// Connections that say nothing hold at most max_pending_handshakes places;
/// more are closed at once, and the places free again when the handshake
/// deadline has passed.
BOOST_AUTO_TEST_CASE(silent_connections_are_bounded_and_a_peer_gets_in_after_them) {
  auto ob = endpoint::options("b", "s", "c");
  ob.max_pending_handshakes = 4;
  ob.handshake_timeout_ms = 1500;
  endpoint b(ob);
  endpoint a("a", "s");
  captured_log log;
  std::vector<socket_fd> silent;
  for (int i = 0; i < 10; ++i)
    silent.push_back(connect_tcp("127.0.0.1", b.l.port()));
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 6; }));
  // Refusals are counted, and logged at most once a second.
  auto text = log.str();
  size_t lines = 0;
  for (auto at = text.find("in their handshake already"); at != std::string::npos;
       at = text.find("in their handshake already", at + 1))
    ++lines;
  BOOST_TEST(lines == 1u, text);
  // Meanwhile a node of the cluster is turned away too.
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("during")));
  BOOST_TEST(eventually([&] { return a.l.stats().frames_lost == 1; }));
  BOOST_TEST(b.l.stats().connections_refused == 7u);
  // Each silent connection is closed by the deadline.
  const auto t = std::chrono::steady_clock::now();
  for (auto& fd : silent)
    BOOST_TEST(closed_within(fd.get(), std::chrono::seconds(3)));
  BOOST_TEST(ms_since(t) < 2500);
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 11; }));
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("after")));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  BOOST_TEST(b.got[0].bytes == "after");
}

/// The handshake has one deadline in all, not one per read: a stranger that
/// drips a byte at a time cannot hold a connection.
BOOST_AUTO_TEST_CASE(a_handshake_dripped_slowly_is_cut_at_its_deadline) {
  auto ob = endpoint::options("b", "s", "c");
  ob.handshake_timeout_ms = 1500;
  endpoint b(ob);
  const auto t = std::chrono::steady_clock::now();
  greeted g(b.l.port());
  std::string hello;
  put(hello, hello_magic);
  put(hello, version);
  put(hello, uint16_t{1000});  // a cluster id of 1,000 bytes, at 10 a second
  hello += std::string(1000, 'c');
  bool closed = false;
  for (size_t i = 0; i < hello.size() && !closed; ++i) {
    if (::send(g.fd.get(), &hello[i], 1, MSG_NOSIGNAL) != 1)
      break;
    closed = closed_within(g.fd.get(), std::chrono::milliseconds(100));
    if (std::chrono::steady_clock::now() - t > std::chrono::seconds(8))
      break;
  }
  BOOST_TEST(closed);
  BOOST_TEST(ms_since(t) < 2500);
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 1; }));
}

/// Handshaken connections: a node's newest replaces its oldest beyond
/// max_connections_per_node; beyond max_connections in all, more are refused.
BOOST_AUTO_TEST_CASE(handshaken_connections_are_bounded_per_node_and_in_all) {
  auto ob = endpoint::options("b", "s", "c");
  ob.max_connections_per_node = 2;
  ob.max_connections = 3;
  endpoint b(ob);
  auto a1 = handshaken(b, "a", "s");
  auto a2 = handshaken(b, "a", "s");
  auto a3 = handshaken(b, "a", "s");
  BOOST_TEST(closed_within(a1.get(), std::chrono::seconds(5)));  // the oldest made way
  BOOST_TEST(!closed_within(a2.get(), std::chrono::milliseconds(200)));
  BOOST_TEST(eventually([&] { return b.l.stats().connections_replaced == 1; }));
  auto x = handshaken(b, "x", "s");
  {
    greeted y(b.l.port());
    auto hello = hello_for("y", "s", y.challenge);
    write_all(y.fd.get(), hello.data(), hello.size());
    auto answer = read_answer(y.fd.get());
    BOOST_TEST(answer.status == 1u);
    BOOST_TEST(answer.text.find("the most allowed") != std::string::npos);
  }
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 1; }));
  write_frame(a3.get(), "p1", "from a");
  write_frame(x.get(), "p1", "from x");
  BOOST_REQUIRE_EQUAL(b.wait_for(2), 2u);
  BOOST_TEST(b.l.stats().frames_refused == 0u);  // the replaced one is not a bad frame
}

/// A frame over max_frame_bytes is refused before anything is allocated for
/// it; the sender's next frame goes on a new connection.
BOOST_AUTO_TEST_CASE(a_frame_over_max_frame_bytes_is_refused) {
  auto ob = endpoint::options("b", "s", "c");
  ob.max_frame_bytes = 1000;
  endpoint b(ob), a("a", "s");
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of(std::string(1001, 'x'))));
  BOOST_TEST(eventually([&] { return b.l.stats().frames_refused == 1; }));
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of(std::string(1000, 'y'))));
  BOOST_REQUIRE_EQUAL(b.wait_for(1), 1u);
  BOOST_TEST(b.got[0].bytes == std::string(1000, 'y'));
}

// -- TLS ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(lanes_with_certificates_of_the_cluster_ca_exchange_frames_over_tls) {
  test_certificates certs;
  if (!certs.made)
    return;
  auto oa = endpoint::options("a", "s", "c");
  oa.tls = certs.tls("one", "a", "one");
  auto ob = endpoint::options("b", "s", "c");
  ob.tls = certs.tls("one", "b", "one");
  endpoint a(oa), b(ob);
  const auto big = pattern(5u << 20, 9);
  BOOST_TEST(a.l.send(b.where(), "p1", bytes_of("first")));
  BOOST_TEST(a.l.send(b.where(), "p2", bytes_of(big)));
  std::vector<double> values(100000, 0.25);
  weights msg;
  msg.tensors.push_back({"x", dtype::float64, {100000}, values.data(), values.size() * 8});
  auto e = from_p0(msg);
  BOOST_TEST(a.l.send(b.where(), "p3",
                      std::make_shared<const gathered>(encode_gathered(e, nullptr))));
  BOOST_REQUIRE_EQUAL(b.wait_for(3), 3u);
  BOOST_TEST(b.got[0].bytes == "first");
  BOOST_TEST((b.got[1].bytes == big));
  auto v = encode(e);
  BOOST_TEST((b.got[2].bytes == std::string(v.data(), v.size())));
  BOOST_TEST(b.l.send(a.where(), "p0", bytes_of("back")));
  BOOST_REQUIRE_EQUAL(a.wait_for(1), 1u);
  BOOST_TEST(a.got[0].from == "b");
  // One connection each way carried it all.
  BOOST_TEST(b.l.stats().connections_accepted == 1u);
  BOOST_TEST(a.l.stats().connections_accepted == 1u);
  // Plain TCP is no way in.
  auto fd = connect_tcp("127.0.0.1", b.l.port());
  const auto hello = hello_for("a", "s", make_nonce());
  write_all(fd.get(), hello.data(), hello.size());
  BOOST_TEST(closed_within(fd.get(), std::chrono::seconds(5)));
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 1; }));
}

BOOST_AUTO_TEST_CASE(a_certificate_of_another_ca_is_refused_with_the_reason) {
  test_certificates certs;
  if (!certs.made)
    return;
  captured_log log;
  auto ob = endpoint::options("b", "s", "c");
  ob.tls = certs.tls("one", "b", "one");
  endpoint b(ob);
  // x: certificate and trust of another CA. y: a certificate of another CA
  // though it trusts the cluster's (so b is the one that refuses it).
  auto ox = endpoint::options("x", "s", "c");
  ox.tls = certs.tls("other", "x", "other");
  auto oy = endpoint::options("y", "s", "c");
  oy.tls = certs.tls("other", "y", "one");
  endpoint x(ox), y(oy);
  BOOST_TEST(y.l.send(b.where(), "p1", bytes_of("from y")));
  BOOST_TEST(eventually([&] { return b.l.stats().connections_refused == 1; }));
  BOOST_TEST(x.l.send(b.where(), "p1", bytes_of("from x")));
  BOOST_TEST(eventually([&] {
    return x.l.stats().frames_lost == 1 && y.l.stats().frames_lost == 1
           && b.l.stats().connections_refused == 2;
  }));
  BOOST_TEST(b.l.send(x.where(), "p1", bytes_of("to x")));
  BOOST_TEST(eventually([&] { return b.l.stats().frames_lost == 1; }));
  BOOST_TEST(b.count() == 0u);
  BOOST_TEST(x.count() == 0u);
  // b refused y's certificate, x refused b's, b refused x's: each says why.
  auto text = log.str();
  // (Either "unable to get local issuer certificate", or "self-signed
  // certificate in certificate chain" when the peer sent its CA along.)
  const std::string why = "the peer's certificate failed verification: ";
  BOOST_TEST(text.find("[b] weights lane: refused a connection from 127.0.0.1") != std::string::npos);
  size_t n = 0;
  for (auto at = text.find(why); at != std::string::npos; at = text.find(why, at + 1))
    ++n;
  BOOST_TEST(n == 3u, text);
}

BOOST_AUTO_TEST_CASE(tls_files_that_cannot_be_used_are_named) {
  test_certificates certs;
  if (!certs.made)
    return;
  auto named = [](lane_tls tls, const std::string& file) {
    auto o = endpoint::options("a", "s", "c");
    o.tls = std::move(tls);
    try {
      eg::messages::lane l(o);
      BOOST_ERROR("a lane with TLS file " << file);
    } catch (const lane_error& e) {
      BOOST_TEST(std::string(e.what()).find(file) != std::string::npos, e.what());
    }
  };
  auto good = certs.tls("one", "a", "one");
  auto t = good;
  t.certificate = (certs.dir / "missing.pem").string();
  named(t, t.certificate);
  t = good;
  t.key = certs.tls("one", "b", "one").key;  // b's key for a's certificate
  named(t, t.key);
  t = good;
  t.ca = good.key;  // not a certificate
  named(t, t.ca);
  t = good;
  t.ca.clear();
  named(t, "CA");
}

// -- rendezvous: a commit's typed half and its update on the lane ---------------

BOOST_AUTO_TEST_CASE(rendezvous_pairs_halves_in_either_order_and_expires_the_unpaired) {
  using key = std::pair<std::string, uint64_t>;
  eg::messages::rendezvous<key, std::string, int> r(5.0, 3);
  // The typed half first, then the update; and the other way round.
  BOOST_TEST(!r.first({"a", 1}, "control a1", 0.0));
  auto both = r.second({"a", 1}, 11, 0.5);
  BOOST_REQUIRE(both);
  BOOST_TEST(both->first == "control a1");
  BOOST_TEST(both->second == 11);
  BOOST_TEST(!r.second({"b", 1}, 21, 1.0));
  both = r.first({"b", 1}, "control b1", 1.0);
  BOOST_REQUIRE(both);
  BOOST_TEST(both->second == 21);
  // Another commit's number, or another worker's, does not pair.
  BOOST_TEST(!r.first({"a", 2}, "control a2", 2.0));
  BOOST_TEST(!r.second({"a", 3}, 13, 2.0));
  BOOST_TEST(!r.second({"b", 2}, 22, 2.0));
  BOOST_TEST(r.waiting_firsts() == 1u);
  BOOST_TEST(r.waiting_seconds() == 2u);
  // Not yet expired at 5 s of waiting; expired after.
  auto gone = r.expire(7.0);
  BOOST_TEST(gone.firsts.empty());
  BOOST_TEST(gone.seconds == 0u);
  gone = r.expire(7.5);
  BOOST_REQUIRE_EQUAL(gone.firsts.size(), 1u);
  BOOST_TEST(gone.firsts[0].first.first == "a");
  BOOST_TEST(gone.firsts[0].first.second == 2u);
  BOOST_TEST(gone.firsts[0].second == "control a2");
  BOOST_TEST(gone.seconds == 2u);
  BOOST_TEST(r.waiting_firsts() == 0u);
  BOOST_TEST(r.waiting_seconds() == 0u);
  // A half that arrives after its pair expired waits alone again.
  BOOST_TEST(!r.second({"a", 2}, 12, 8.0));
}

BOOST_AUTO_TEST_CASE(rendezvous_holds_at_most_its_capacity_pushing_out_the_oldest) {
  using key = std::pair<std::string, uint64_t>;
  eg::messages::rendezvous<key, std::string, int> r(100.0, 2);
  // A flood of updates nobody commits: only the newest two wait.
  for (uint64_t i = 0; i < 10; ++i)
    BOOST_TEST(!r.second({"x", i}, static_cast<int>(i), static_cast<double>(i)));
  BOOST_TEST(r.waiting_seconds() == 2u);
  BOOST_TEST(r.first({"x", 9}, "c9", 10.0).has_value());
  BOOST_TEST(!r.first({"x", 0}, "c0", 10.0));  // pushed out long ago
  // Typed halves pushed out are handed back to be answered, not forgotten.
  BOOST_TEST(!r.first({"y", 1}, "y1", 11.0));
  BOOST_TEST(!r.first({"y", 2}, "y2", 12.0));
  auto gone = r.expire(12.0);
  BOOST_REQUIRE_EQUAL(gone.firsts.size(), 1u);
  BOOST_TEST(gone.firsts[0].second == "c0");
  BOOST_TEST(gone.seconds == 8u);  // x0 .. x7, pushed out
  BOOST_TEST(r.waiting_seconds() == 1u);  // x8, within its wait
  BOOST_TEST(r.cancel({"y", 1}).value_or("") == "y1");
  BOOST_TEST(!r.cancel({"y", 1}));
}

BOOST_AUTO_TEST_SUITE_END()

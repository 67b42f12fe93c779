// links: eg_messages
// The weights lane (messages/lane.hpp) between real sockets on 127.0.0.1,
// the buffer cache behind it, and the codec's gathered messages.
#include "messages/buffer.hpp"
#include "messages/codec.hpp"
#include "messages/lane.hpp"
#include "messages/secret.hpp"
#include "messages/socket.hpp"

#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
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
      : l(options(node, secret, cluster)) {
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

  /// Waits until `n` messages arrived (at most 10 s); returns how many did.
  size_t wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= n; });
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

/// A hand-made connection that passes the handshake of node `node`.
socket_fd handshaken(const endpoint& to, const std::string& node, const std::string& secret) {
  auto fd = connect_tcp("127.0.0.1", to.l.port());
  std::string hello;
  put(hello, uint32_t{0x484c4745});  // "EGLH"
  put(hello, uint32_t{1});
  put_text(hello, "c");
  put_text(hello, node);
  put_text(hello, lane_digest(secret, "c", node));
  write_all(fd.get(), hello.data(), hello.size());
  uint32_t status = 1;
  BOOST_REQUIRE(read_all(fd.get(), &status, sizeof status));
  BOOST_REQUIRE_EQUAL(status, 0u);
  uint16_t n = 0;
  BOOST_REQUIRE(read_all(fd.get(), &n, sizeof n));
  std::string name(n, '\0');
  BOOST_REQUIRE(read_all(fd.get(), name.data(), n));
  BOOST_TEST(name == to.l.options().node);
  return fd;
}

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
    char c;
    BOOST_TEST(read_some_all(fd.get(), &c, 1) == 0u);  // closed by the lane
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
  endpoint a("a", "s"), b("b", "s");
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
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      for (int k = 0; k < each; ++k)
        BOOST_CHECK(a.l.send(b.where(), "t" + std::to_string(t), bytes_of(message(t, k))));
    });
  for (auto& s : senders)
    s.join();
  BOOST_REQUIRE_EQUAL(b.wait_for(1 + threads * each), static_cast<size_t>(1 + threads * each));
  std::vector<int> next(threads, 0);
  for (size_t i = 1; i < b.got.size(); ++i) {
    int t = std::stoi(b.got[i].target.substr(1));
    BOOST_REQUIRE(b.got[i].bytes == message(t, next[t]));
    ++next[t];
  }
  BOOST_TEST(a.l.stats().frames_lost == 0u);
  BOOST_TEST(eventually([&] { return a.l.stats().frames_sent == 1u + threads * each; }));
}

/// A peer that stops reading: send() returns at once all the same (the
/// frame it began is finished by the sender thread, the others queue), and
/// once the peer reads again every frame is there, whole and in order.
BOOST_AUTO_TEST_CASE(send_does_not_wait_for_a_peer_that_stopped_reading) {
  auto listener = listen_tcp("127.0.0.1", 0);
  const lane_endpoint slow{"b", "127.0.0.1", bound_port(listener.get())};
  auto o = endpoint::options("a", "s", "c");
  o.send_timeout_ms = 3000;  // a send() that waited would lose its frame
  eg::messages::lane a(o);
  a.start([](const std::string&, const std::string&, shared_buffer) {});
  std::vector<std::string> sent{"first", std::string(24u << 20, 'x'), "third",
                                std::string(5u << 20, 'y'), "fifth"};
  for (size_t i = 0; i < sent[1].size(); i += 4096)
    sent[1][i] = static_cast<char>(i / 4096);
  BOOST_TEST(a.send(slow, "p1", bytes_of(sent[0])));  // queued: the sender thread dials

  // The peer: accepts the handshake, then reads nothing for now.
  int fd = ::accept(listener.get(), nullptr, nullptr);
  BOOST_REQUIRE(fd >= 0);
  socket_fd peer(fd);
  char head[8];
  BOOST_REQUIRE(read_all(fd, head, sizeof head));
  for (int text = 0; text < 3; ++text) {  // cluster id, node, digest
    uint16_t n = 0;
    BOOST_REQUIRE(read_all(fd, &n, sizeof n));
    std::string skip(n, '\0');
    BOOST_REQUIRE(read_all(fd, skip.data(), n));
  }
  std::string ok;
  put(ok, uint32_t{0});
  put_text(ok, "b");
  write_all(fd, ok.data(), ok.size());
  BOOST_REQUIRE(eventually([&] { return a.stats().frames_sent == 1; }));

  for (size_t i = 1; i < sent.size(); ++i)
    BOOST_TEST(a.send(slow, "p1", bytes_of(sent[i])));
  // Every send() has returned: now the peer reads.
  for (auto& want : sent) {
    char frame[16];
    BOOST_REQUIRE(read_all(fd, frame, sizeof frame));
    uint32_t target_bytes = 0;
    uint64_t size = 0;
    std::memcpy(&target_bytes, frame + 4, sizeof target_bytes);
    std::memcpy(&size, frame + 8, sizeof size);
    BOOST_REQUIRE_EQUAL(target_bytes, 2u);
    BOOST_REQUIRE_EQUAL(size, want.size());
    std::string target(target_bytes, '\0'), got(size, '\0');
    BOOST_REQUIRE(read_all(fd, target.data(), target_bytes));
    BOOST_REQUIRE(read_all(fd, got.data(), size));
    BOOST_TEST(target == "p1");
    BOOST_TEST((got == want));
  }
  BOOST_TEST(eventually([&] { return a.stats().frames_sent == sent.size(); }));
  BOOST_TEST(a.stats().frames_lost == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

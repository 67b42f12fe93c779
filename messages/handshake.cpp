#include "messages/handshake.hpp"

#include "messages/secret.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstring>

namespace eg::messages {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the handshake's wire format is little-endian and written as the host's");

constexpr size_t min_nonce_bytes = 16;

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

/// Reads a u16-length-prefixed text of at most max_name_bytes by `until`;
/// its length is checked before anything is allocated for it.
std::string read_text(stream& s, const char* what, stream::clock::time_point until) {
  uint16_t n = 0;
  if (!s.read_all(&n, sizeof n, until))
    throw handshake_error(std::string("handshake cut short before its ") + what);
  if (n > max_name_bytes)
    throw handshake_error(std::string("handshake ") + what + " of " + std::to_string(n)
                          + " bytes (at most " + std::to_string(max_name_bytes) + ")");
  std::string text(n, '\0');
  if (!s.read_all(text.data(), n, until))
    throw handshake_error(std::string("handshake cut short in its ") + what);
  return text;
}

} // namespace

std::string accept_handshake(stream& s, const handshake_protocol& protocol,
                             const handshake_identity& me, stream::clock::time_point until,
                             const std::function<std::string(const std::string&)>& admit) {
  const std::string challenge = make_nonce();
  std::string greeting;
  put(greeting, protocol.magic);
  put(greeting, protocol.version);
  put_text(greeting, challenge);
  if (protocol.greets_with_cluster)
    put_text(greeting, me.cluster_id);
  s.write(greeting.data(), greeting.size(), ms_left(until));

  char head[8];
  size_t got = s.read(head, sizeof head, until);
  if (got == 0)
    throw handshake_error("closed before its handshake");
  if (got < sizeof head || get<uint32_t>(head) != protocol.magic)
    throw handshake_error(std::string("not an edgegossip ") + protocol.name
                          + " handshake (first bytes " + hex_of(head, got) + ")");
  auto refuse = [&](const std::string& why) {
    std::string reply;
    put(reply, uint32_t{1});
    put_text(reply, why);
    try {
      s.write(reply.data(), reply.size(), ms_left(until));
    } catch (const socket_error&) {
    }
    throw handshake_error(why);
  };
  auto version = get<uint32_t>(head + 4);
  if (version != protocol.version)
    refuse(std::string("speaks ") + protocol.name + " version " + std::to_string(version)
           + ", this node speaks " + std::to_string(protocol.version));
  auto cluster = read_text(s, "cluster id", until);
  auto node = read_text(s, "node name", until);
  auto nonce = read_text(s, "nonce", until);
  auto presented = read_text(s, "proof", until);
  if (cluster != me.cluster_id)
    refuse("node '" + node + "' belongs to cluster '" + cluster + "', this node to '"
           + me.cluster_id + "'");
  if (me.peer_allowed && !me.peer_allowed(node))
    refuse("node '" + node + "' is not a peer in the cluster file");
  if (nonce.size() < min_nonce_bytes || nonce == challenge)
    refuse("node '" + node + "' sent no nonce of its own");
  if (!me.secret.empty()
      && !same_digest(presented, proof(me.secret, protocol.proof_purpose, me.cluster_id, node,
                                       challenge, nonce)))
    refuse("node '" + node + "' "
           + (presented.empty() ? "presented no cluster secret"
                                : "did not prove the cluster secret (a wrong secret, or a "
                                  "handshake recorded and replayed)"));
  if (admit) {
    auto crowded = admit(node);
    if (!crowded.empty())
      refuse("node '" + node + "': " + crowded);
  }
  std::string ok;
  put(ok, uint32_t{0});
  put_text(ok, me.node);
  put_text(ok, proof(me.secret, protocol.answer_purpose, me.cluster_id, me.node, nonce, challenge));
  s.write(ok.data(), ok.size(), ms_left(until));
  return node;
}

std::string dial_handshake(stream& s, const handshake_protocol& protocol,
                           const handshake_identity& me, const std::string& expected,
                           stream::clock::time_point until, int timeout_ms) {
  try {
    char head[8];
    size_t got = s.read(head, sizeof head, until);
    if (got == 0)
      throw handshake_error("closed the connection before its handshake");
    if (got < sizeof head || get<uint32_t>(head) != protocol.magic)
      throw handshake_error(std::string("is not an edgegossip ") + protocol.name
                            + " (first bytes " + hex_of(head, got) + ")");
    if (get<uint32_t>(head + 4) != protocol.version)
      throw handshake_error(std::string("speaks ") + protocol.name + " version "
                            + std::to_string(get<uint32_t>(head + 4)) + ", this node speaks "
                            + std::to_string(protocol.version));
    const auto challenge = read_text(s, "challenge", until);
    if (challenge.size() < min_nonce_bytes)
      throw handshake_error("sent no challenge in its handshake");
    // (Its cluster id: another cluster's is refused by the accepting side,
    // which names both, so that its log says so too.)
    if (protocol.greets_with_cluster)
      read_text(s, "cluster id", until);
    const auto nonce = make_nonce();
    std::string hello;
    put(hello, protocol.magic);
    put(hello, protocol.version);
    put_text(hello, me.cluster_id);
    put_text(hello, me.node);
    put_text(hello, nonce);
    put_text(hello, proof(me.secret, protocol.proof_purpose, me.cluster_id, me.node, challenge,
                          nonce));
    s.write(hello.data(), hello.size(), ms_left(until));
    uint32_t status = 1;
    if (!s.read_all(&status, sizeof status, until))
      throw handshake_error("closed the connection during the handshake");
    if (status != 0)
      throw handshake_error("refused the handshake: " + read_text(s, "reason", until));
    const auto name = read_text(s, "node name", until);
    const auto answer = read_text(s, "proof", until);
    if (!expected.empty() && name != expected)
      throw handshake_error("is node '" + name + "', not '" + expected + "'");
    if (!me.secret.empty()
        && !same_digest(answer, proof(me.secret, protocol.answer_purpose, me.cluster_id, name,
                                      nonce, challenge)))
      throw handshake_error("answered without proving the cluster secret (not a node of this "
                            "cluster, or one with another secret); connection closed");
    return name;
  } catch (const socket_timeout&) {
    throw handshake_error("the handshake was not done within " + std::to_string(timeout_ms)
                          + " ms");
  }
}

std::string greeting_cluster_id(const std::string& host, uint16_t port, int timeout_ms) {
  const auto protocol = door_handshake;
  const auto until = stream::clock::now() + std::chrono::milliseconds(timeout_ms);
  try {
    stream s(connect_tcp(host, port, timeout_ms));
    char head[8];
    size_t got = s.read(head, sizeof head, until);
    if (got < sizeof head || get<uint32_t>(head) != protocol.magic)
      throw handshake_error(std::string("is not an edgegossip ") + protocol.name
                            + (got ? " (first bytes " + hex_of(head, got) + ")" : ""));
    if (get<uint32_t>(head + 4) != protocol.version)
      throw handshake_error(std::string("speaks ") + protocol.name + " version "
                            + std::to_string(get<uint32_t>(head + 4)) + ", this node speaks "
                            + std::to_string(protocol.version));
    read_text(s, "challenge", until);
    auto id = read_text(s, "cluster id", until);
    s.shutdown();
    return id;
  } catch (const socket_timeout&) {
    throw handshake_error("did not greet within " + std::to_string(timeout_ms) + " ms");
  }
}

bool warn_limit::allow(uint64_t& held) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = stream::clock::now();
  if (any_ && now - last_ < std::chrono::seconds(1)) {
    ++held_;
    return false;
  }
  any_ = true;
  last_ = now;
  held = held_;
  held_ = 0;
  return true;
}

std::string held_note(uint64_t held) {
  return held == 0 ? std::string{}
                   : " (and " + std::to_string(held) + " more like it not logged)";
}

int ms_left(stream::clock::time_point until) {
  auto left =
    std::chrono::ceil<std::chrono::milliseconds>(until - stream::clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 1, 1 << 30));
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

void name_thread(const char* name) {
  ::pthread_setname_np(::pthread_self(), name);
}

void block_sigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

} // namespace eg::messages

#pragma once
// The challenge-response handshake that opens every connection between
// nodes outside CAF: the weights lane's (messages/lane.hpp) and the node
// port's front door (messages/door.hpp), each with a magic and purpose of
// its own, so that one cannot be answered with the other.
//
// All integers little-endian, texts a u16 length and at most
// max_name_bytes:
//   accepting side: magic, version, nonce B[, its cluster id (node port)]
//   dialling side:  magic, version, cluster id, node name, nonce A,
//                   proof(secret, purpose, cluster id, node name, B, A)
//   accepting side: status 0, its node name,
//                   proof(secret, answer purpose, cluster id, its name, A, B)
//               or: status 1, why it refuses
// Every length is checked before anything is allocated for it, and the
// whole exchange has one deadline, so a stranger's bytes cost a bounded
// buffer and a bounded time. Also here: the little helpers both users share
// (rate-limited warnings, deadlines, thread names).

#include "common/error.hpp"
#include "messages/socket.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

namespace eg::messages {

class handshake_error : public failure<errc::refused> {
public:
  using failure::failure;
};

/// Which handshake: the lane's or the front door's.
struct handshake_protocol {
  uint32_t magic;
  uint32_t version;
  const char* proof_purpose;
  const char* answer_purpose;
  const char* name;  ///< in errors: "weights lane", "node port"
  /// The accepting side's greeting ends with its cluster id (the node
  /// port's, version 2: a node joining with --join and no --cluster learns
  /// the id there; the id is no secret, the proof still is).
  bool greets_with_cluster = false;
};

inline constexpr handshake_protocol lane_handshake{0x484c4745 /* "EGLH" */, 2, "lane",
                                                   "lane-answer", "weights lane"};
inline constexpr handshake_protocol door_handshake{0x44474745 /* "EGGD" */, 2, "door",
                                                   "door-answer", "node port", true};

/// Who this side is.
struct handshake_identity {
  std::string cluster_id;
  std::string node;    ///< this side's name
  std::string secret;  ///< "" when none is configured
  /// Whether a dialling node of that name may come in; empty: any name.
  std::function<bool(const std::string&)> peer_allowed;
};

inline constexpr size_t max_name_bytes = 1024;

/// The accepting side, done by `until`: returns the dialling node's name.
/// `admit(name)` runs once every check has passed and returns why the
/// connection is refused after all ("" to take it; the connection limits).
/// A refusal is answered, then thrown as handshake_error; a timeout is
/// socket_timeout.
std::string accept_handshake(stream& s, const handshake_protocol& protocol,
                             const handshake_identity& me, stream::clock::time_point until,
                             const std::function<std::string(const std::string&)>& admit);

/// The dialling side, done by `until` (else handshake_error saying that the
/// handshake took longer than `timeout_ms`): returns the accepting node's
/// name, which must be `expected` unless that is empty.
std::string dial_handshake(stream& s, const handshake_protocol& protocol,
                           const handshake_identity& me, const std::string& expected,
                           stream::clock::time_point until, int timeout_ms);

/// The cluster id the node port at host:port greets with (door_handshake),
/// read without handshaking (the connection is closed after the greeting).
/// Throws socket_error when it cannot be reached, handshake_error when what
/// answers is not an edgegossip node port of this version.
std::string greeting_cluster_id(const std::string& host, uint16_t port, int timeout_ms);

/// At most one warning a second of one kind: a flood of bad connections
/// shows in the counts, not as a flood in the log.
class warn_limit {
public:
  /// Whether to warn now; `held` is set to how many were held back since
  /// the last warning.
  bool allow(uint64_t& held);

private:
  std::mutex mutex_;
  stream::clock::time_point last_;
  bool any_ = false;
  uint64_t held_ = 0;
};

/// " (and N more like it not logged)", or "" when none were held back.
std::string held_note(uint64_t held);

/// Milliseconds left until `until`, at least 1.
int ms_left(stream::clock::time_point until);

/// The first bytes of something foreign, in hex.
std::string hex_of(const char* p, size_t n);

/// Names the calling thread as `top -H` and `perf` show it.
void name_thread(const char* name);

/// On the calling thread a write to a closed connection fails with EPIPE
/// instead of raising SIGPIPE (OpenSSL writes with write(2)).
void block_sigpipe();

} // namespace eg::messages

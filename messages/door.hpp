#pragma once
// The front door of a node's port. CAF 0.17's middleman reads whatever a
// connection sends: a BASP header announcing a 4 GB message makes it
// allocate 4 GB, and it sets no bound on connections or handshakes. So a
// node does not let CAF listen where strangers can reach it: CAF listens on
// loopback, and the front door listens on the node's port. A connection
// there must first pass the node-port handshake (messages/handshake.hpp:
// cluster id, protocol version, and the secret's challenge where a secret
// is set) before a single byte of it reaches CAF; only then is it joined to
// a fresh loopback connection to CAF's port, and the two are copied into
// each other. Until then nothing from the connection is held but a buffer
// of fixed size, and the door keeps the weights lane's limits: handshakes
// in flight, connections per node and in all, one deadline per handshake,
// and at most one warning a second of each kind.
//
// Once admitted, plain connections stay bounded: the door reads the BASP
// headers as they pass (32 bytes: operation, padding, flags, payload length
// as a big-endian u32, ...) and closes a connection whose message would be
// longer than max_message_bytes, before CAF sees the header. Under TLS the
// bytes are encrypted: admitted peers hold certificates of the cluster's CA.
//
// The dialling side (door_routes): CAF dials a loopback port of the
// node's own, which dials the peer's front door, runs the handshake and then
// copies bytes the same way (with the same bound on what comes back). One
// route per peer address, made on first use.

#include "common/error.hpp"
#include "messages/handshake.hpp"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace eg::messages {

class door_error : public failure<errc::network_failed> {
public:
  using failure::failure;
};

struct door_options {
  handshake_identity identity;
  std::string host = "127.0.0.1";  ///< where the front door listens
  uint16_t port = 0;               ///< 0: any free port
  int connect_timeout_ms = 3000;
  /// The whole handshake must be done in this.
  int handshake_timeout_ms = 5000;
  /// Connections in their handshake at once; more are closed at once.
  size_t max_pending_handshakes = 16;
  /// Admitted connections from one node; one more closes the oldest.
  size_t max_connections_per_node = 4;
  /// Admitted connections in all; more are refused.
  size_t max_connections = 64;
  /// The longest BASP message let through (its payload).
  size_t max_message_bytes = size_t{64} << 20;
  /// Read BASP headers to bound message lengths (false under TLS, whose
  /// bytes cannot be read).
  bool check_lengths = true;
};

struct door_stats {
  uint64_t connections_admitted = 0;
  /// Failed handshakes (foreign, wrong cluster or secret, too slow), and
  /// connections over a limit. (One closed before it sent anything, such as
  /// a peer's reachability probe, is not counted.)
  uint64_t connections_refused = 0;
  /// Closed for a newer connection of the same node.
  uint64_t connections_replaced = 0;
  /// Closed for a message longer than max_message_bytes.
  uint64_t messages_refused = 0;
  /// Outgoing connections routed to a peer's front door, and those that
  /// failed (peer unreachable, handshake refused).
  uint64_t routes_opened = 0;
  uint64_t routes_failed = 0;
};

/// The BASP framing of a byte stream, followed as it passes: consume()
/// returns "" while every message is within the bound, else what was wrong.
class basp_meter {
public:
  static constexpr size_t header_bytes = 32;
  explicit basp_meter(size_t max_payload) : max_(max_payload) {}
  std::string consume(const char* data, size_t n);

private:
  size_t max_;
  char header_[header_bytes] = {};
  size_t have_ = 0;       // bytes of the current header seen
  uint64_t payload_ = 0;  // bytes of the current payload still to come
};

/// Listens on options.host:port at once (throws door_error naming the
/// address when it cannot); admitted connections go to CAF's port on
/// loopback from start() on.
class front_door {
public:
  explicit front_door(door_options options);
  ~front_door();
  front_door(const front_door&) = delete;
  front_door& operator=(const front_door&) = delete;

  uint16_t port() const;
  const door_options& options() const;
  /// Starts admitting; admitted connections are joined to 127.0.0.1:inner_port.
  void start(uint16_t inner_port);
  /// Closes every connection and joins the threads. Idempotent.
  void stop();
  door_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The dialling side: loopback ports for CAF to dial, one per peer address,
/// each joined through that peer's front door.
class door_routes {
public:
  /// Uses options.identity, the timeouts and the bounds; no listening on
  /// options.host.
  explicit door_routes(door_options options);
  ~door_routes();
  door_routes(const door_routes&) = delete;
  door_routes& operator=(const door_routes&) = delete;

  /// The loopback port that reaches the front door at host:port, whose node
  /// must be `node` ("" for any); made on first use (throws door_error when
  /// no loopback port can be had).
  uint16_t route(const std::string& node, const std::string& host, uint16_t port);
  /// What went wrong last on the route to host:port ("" when nothing has,
  /// or the last connection got through).
  std::string last_failure(const std::string& host, uint16_t port) const;
  void stop();
  door_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace eg::messages

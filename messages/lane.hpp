#pragma once
// The weights lane: node-to-node TCP connections that carry gossip messages
// (encoded model weights) beside the CAF middleman, which carries everything
// else (handshake, plans, reports, monitors).
//
// Why: CAF 0.17's middleman copies a message three more times than a socket
// does (into the connection's write buffer; into its read buffer, resized
// with a fill for every message; into the received std::vector by another
// resize and copy), and its buffers are fresh memory for every large
// message. For 4 MB and larger models that cost half the throughput of a
// plain socket (bench transport). Here a message is written with one
// sendmsg() straight from the sender's buffer and read straight into a
// receiving buffer from the process's cache (messages/buffer.hpp), which
// the receiving actors then share without copying. When nothing else is
// being written, send() itself writes what the socket takes at once
// (never waiting, never dialling), which spares a small message the
// hand-over to the lane's sender thread; that thread writes the rest, and
// every frame queued behind it.
//
// A connection opens with a handshake: the dialling node names its cluster
// and itself and presents lane_digest() of the cluster secret, the
// accepting node checks both and answers; then frames follow (magic,
// target platform, length, the message). Anything else is refused with a
// warning that names the peer and what was wrong, and the connection is
// closed; a frame cut short is dropped. Gossip tolerates lost messages, so
// a frame that cannot be sent (peer gone, queue full) is counted and
// dropped, never retried; peers' liveness is the CAF monitors' business.

#include "messages/buffer.hpp"
#include "messages/codec.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace eg::messages {

class lane_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Where a node's lane listens.
struct lane_endpoint {
  std::string node;
  std::string host;
  uint16_t port = 0;  ///< 0: that node has no lane
  bool operator==(const lane_endpoint& o) const {
    return node == o.node && host == o.host && port == o.port;
  }
};

/// "node@host:port"; parse_endpoint() takes it back (throws lane_error).
std::string to_string(const lane_endpoint& e);
lane_endpoint parse_endpoint(const std::string& text);

struct lane_options {
  std::string cluster_id;
  std::string node;    ///< this node's name
  std::string secret;  ///< the cluster secret ("" when none is configured)
  /// Whether a dialling node of that name may send (the cluster file's
  /// nodes); empty: any node of the cluster id.
  std::function<bool(const std::string&)> peer_allowed;
  std::string host = "127.0.0.1";  ///< where to listen
  uint16_t port = 0;               ///< 0: any free port
  /// Frames waiting to be sent, in bytes; a frame beyond it is dropped.
  size_t max_queued_bytes = size_t{1} << 30;
  int connect_timeout_ms = 3000;
  /// A peer that takes nothing of a frame for this long is given up.
  int send_timeout_ms = 30000;
};

struct lane_stats {
  uint64_t frames_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t frames_received = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_lost = 0;          ///< not sent: queue full, peer unreachable or gone
  uint64_t frames_refused = 0;       ///< received but malformed or cut short
  uint64_t connections_refused = 0;  ///< handshakes refused (foreign, wrong secret)
};

class lane {
public:
  /// Called on one of the lane's threads for every frame received: the
  /// sending node, the platform it is for, the message.
  using deliver_fn = std::function<void(const std::string& from, const std::string& target,
                                        shared_buffer message)>;

  /// Listens at once (throws lane_error naming the address when it cannot);
  /// connections are accepted from start() on.
  explicit lane(lane_options options);
  ~lane();
  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;

  /// The port it listens on.
  uint16_t port() const;
  const lane_options& options() const;

  /// Starts accepting and sending; `deliver` must be thread-safe.
  void start(deliver_fn deliver);
  /// Sends `message` to platform `target` on the node at `to`: written at
  /// once as far as the socket takes it when the lane is idle and connected
  /// to that node, else queued. Never waits for the peer. Returns false
  /// when it was dropped at once (lane stopped, queue full).
  bool send(const lane_endpoint& to, const std::string& target, shared_buffer message);
  /// The same for a message in pieces (messages::encode_gathered), written
  /// with one gather write; `message` (and what it holds) is released as
  /// soon as it is written or dropped.
  bool send(const lane_endpoint& to, const std::string& target, shared_gathered message);
  /// Closes every connection and joins the threads; frames still queued are
  /// dropped. Idempotent; the destructor calls it.
  void stop();

  lane_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace eg::messages

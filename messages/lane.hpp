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
// the receiving actors then share without copying.
//
// Sending: every peer (lane endpoint) has a sender thread of its own,
// started by the first message to it and kept until stop(), with one
// connection and a queue of
// at most max_queued_messages frames, so a slow or frozen peer delays
// nobody else's messages. Gossip wants the newest weights: when a peer's
// queue is full its oldest waiting frame is skipped, and a frame whose turn
// comes after it waited longer than max_wait_ms is skipped too, not sent
// late. A peer that takes nothing of a frame for send_timeout_ms is given
// up (connection closed, that frame lost; the next frame dials again).
// Frames to one peer go out in the order they were sent. When that peer's
// sender is idle, send() itself writes what the socket takes at once (never
// waiting, never dialling; plain TCP only), which spares a small message
// the hand-over; the sender thread writes the rest. max_queued_bytes bounds
// all queues together. Sockets are marked as bulk traffic (IP_TOS
// throughput, priority bulk) so that a priority qdisc serves heartbeats and
// plans, which go over the middleman's connections, first.
//
// Receiving: an acceptor thread and a thread per connection. Hostile input
// is bounded: at most max_pending_handshakes connections in their handshake
// at once (more are closed at once), the whole handshake done within
// handshake_timeout_ms (a peer dripping bytes gains nothing), at most
// max_connections_per_node connections from one node (a new one closes the
// oldest: a restarted node is not locked out by its dead connections) and
// max_connections in all; a length is checked before anything is
// allocated for it (names 1 KB, frames max_frame_bytes). Refusals are
// counted in stats and logged at most once a second of each kind.
//
// A connection opens with a challenge-response handshake (lane version 2):
// the accepting node sends a fresh nonce; the dialling node names its
// cluster and itself, and sends its own nonce with proof() over both, keyed
// by the cluster secret (messages/secret.hpp); the accepting node checks
// them and answers with its name and its proof over the nonces the other
// way round, which the dialling node checks in turn. The secret never
// crosses the network, and a recorded handshake is worth nothing on another
// connection. With lane_options::tls every connection is TLS (1.2 at least)
// with both certificates verified against the cluster's CA, and the same
// handshake runs inside it. Then frames follow (magic, target platform,
// length, the message). Anything else is refused (a warning names the peer
// and what was wrong) and the connection closed; a frame cut short is
// dropped. Gossip tolerates lost messages, so a frame that cannot be sent
// (peer gone, queue full, too old) is counted and dropped, never retried,
// and its sender is told (send()'s `unsent`), so that the gossip weight it
// carried goes back to it; peers' liveness is the CAF monitors' business.

#include "common/error.hpp"
#include "messages/buffer.hpp"
#include "messages/codec.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace eg::messages {

class lane_error : public failure<errc::network_failed> {
public:
  using failure::failure;
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

/// TLS on every lane connection: PEM files; all empty: plain TCP.
struct lane_tls {
  std::string certificate;  ///< this node's certificate (chain), signed by `ca`
  std::string key;          ///< its private key
  std::string ca;           ///< the CA that signed every node's certificate
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

struct lane_options {
  std::string cluster_id;
  std::string node;    ///< this node's name
  std::string secret;  ///< the cluster secret ("" when none is configured)
  /// Whether a dialling node of that name may send (the cluster file's
  /// nodes); empty: any node of the cluster id.
  std::function<bool(const std::string&)> peer_allowed;
  std::string host = "127.0.0.1";  ///< where to listen
  uint16_t port = 0;               ///< 0: any free port
  /// Frames waiting to be sent to one peer (the one being written not
  /// counted); when one more comes, the oldest waiting is skipped.
  size_t max_queued_messages = 4;
  /// A frame that waited longer than this when its turn comes is skipped
  /// (<= 0: no limit).
  int max_wait_ms = 2000;
  /// Frames waiting to be sent to all peers, in bytes; a frame beyond it is
  /// dropped (lost).
  size_t max_queued_bytes = size_t{1} << 30;
  int connect_timeout_ms = 3000;
  /// A peer that takes nothing of a frame for this long is given up.
  int send_timeout_ms = 6000;
  /// The whole handshake (TLS included), either side, must be done in this.
  int handshake_timeout_ms = 5000;
  /// Incoming connections in their handshake at once; more are closed at once.
  size_t max_pending_handshakes = 16;
  /// Handshaken incoming connections from one node; one more closes the
  /// oldest of them.
  size_t max_connections_per_node = 4;
  /// Handshaken incoming connections in all; more are refused.
  size_t max_connections = 64;
  /// The largest frame taken (its message's bytes; at most
  /// messages::max_message_bytes): a node can lower it to its model's
  /// encoded size and some slack.
  size_t max_frame_bytes = max_message_bytes;
  lane_tls tls;
};

struct lane_stats {
  uint64_t frames_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t frames_received = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_lost = 0;     ///< not sent: lane full or stopped, peer unreachable or gone
  uint64_t frames_skipped = 0;  ///< not sent: waited too long, or pushed out of a full queue
  uint64_t frames_refused = 0;  ///< received but malformed, oversized or cut short
  /// Incoming connections that passed the handshake.
  uint64_t connections_accepted = 0;
  /// Incoming connections refused: a failed handshake (foreign, wrong
  /// secret or certificate, replayed, too slow) or over a limit.
  uint64_t connections_refused = 0;
  /// Incoming connections closed for a newer one from the same node.
  uint64_t connections_replaced = 0;
  /// Outgoing connections closed because the peer took nothing for
  /// send_timeout_ms.
  uint64_t connections_given_up = 0;
  /// Now: frames waiting to be sent, to every peer, and their bytes.
  uint64_t frames_queued = 0;
  uint64_t bytes_queued = 0;
  /// The lane's own timings: seconds in which at least one frame was being
  /// written by a sender thread (which waits while the socket takes no
  /// more: the link's pace once its buffer is full; dialling not counted),
  /// and seconds in which at least one frame was being read, from its
  /// header to its last byte. With bytes_sent and bytes_received, the
  /// link's time per byte as the lane lived it (learning::link_model).
  double send_seconds = 0;
  double receive_seconds = 0;
};

class lane {
public:
  /// Called on one of the lane's threads for every frame received: the
  /// sending node, the platform it is for, the message.
  using deliver_fn = std::function<void(const std::string& from, const std::string& target,
                                        shared_buffer message)>;

  /// Listens at once (throws lane_error naming the address when it cannot,
  /// or naming the TLS file that cannot be used); connections are accepted
  /// from start() on.
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
  /// once as far as the socket takes it when that peer's sender is idle and
  /// connected (plain TCP), else queued for that peer (pushing its oldest
  /// waiting frame out when its queue is full). Never waits for the peer.
  /// Returns false when it was dropped at once (lane not started or
  /// stopped, max_queued_bytes reached).
  bool send(const lane_endpoint& to, const std::string& target, shared_buffer message);
  /// Called once for a frame send() took (it returned true) that is never
  /// written whole: skipped, lost, or still queued at stop(). It runs on
  /// one of the lane's threads, or in a send() to the same peer, with no
  /// lock of the lane held. A frame written whole never calls it (whether
  /// the peer read it is TCP's business).
  using unsent_fn = std::function<void()>;
  /// The same for a message in pieces (messages::encode_gathered), written
  /// with one gather write; `message` (and what it holds) is released as
  /// soon as it is written or dropped. An `urgent` one (a model the
  /// balancer waits for, which holds the cluster's next epoch) goes before
  /// every frame waiting for that peer but the other urgent ones, and is
  /// neither skipped for its wait nor pushed out of a full queue.
  /// `unsent` (if given) hears of the frame that was taken and not sent:
  /// push-sum takes back the weight such a message carried.
  bool send(const lane_endpoint& to, const std::string& target, shared_gathered message,
            bool urgent = false, unsent_fn unsent = {});
  /// Closes every connection and joins the threads (a write in progress is
  /// cut short); frames still queued are dropped. Idempotent; the
  /// destructor calls it.
  void stop();

  lane_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace eg::messages

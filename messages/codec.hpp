#pragma once
// The wire codec: every payload that crosses nodes is a Cap'n Proto message
// (schema in edgegossip.capnp) carried as a byte buffer inside a CAF message.
// Tensors travel as raw contiguous bytes with name, dtype and shape; encoding
// writes them once into the output buffer and decoding points into the
// received buffer (no per-element work). No torch and no CAF in this layer.

#include "common/error.hpp"
#include "messages/buffer.hpp"
#include "messages/sparse.hpp"

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace eg::messages {

/// Bumped whenever the schema changes incompatibly.
// 3: roles and control verbs are enumerations
// 4: sparse parts in weights messages; traffic by category in epoch reports
// 5: messages without dense tensors travel packed (packed_marker)
// 6: one message per protocol: commits, global models and stage batches are
//    bodies of their own, no longer weights
inline constexpr uint32_t protocol_version = 6;

/// The two bytes that open a packed message: Cap'n Proto's packed encoding
/// of the message follows. No unpacked message starts with them (its first
/// 32 bits are the segment count less one, and Cap'n Proto takes at most
/// 512 segments), so the receiver tells the two forms apart by them.
inline constexpr unsigned char packed_marker[2] = {0xFF, 0xFF};

/// A message that cannot be accepted: not Cap'n Proto, truncated, oversized,
/// from another cluster or protocol version. what() says which.
class codec_error : public failure<errc::bad_message> {
public:
  using failure::failure;
};

enum class dtype : uint8_t { float32 = 0, float64 = 1, int64 = 2, int32 = 3, uint8 = 4 };

/// Size in bytes of one element of `t`.
size_t element_size(dtype t);

/// A tensor as raw contiguous bytes. When decoded, `data` points into the
/// buffer that was decoded (which must outlive the view).
struct tensor_view {
  std::string name;
  dtype type = dtype::float32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

/// How the values of a sparse part are stored.
/// float16: IEEE binary16 bits; float8: the high byte of those bits (1
/// sign, 5 exponent and 2 mantissa bits, "E5M2"), rounded to nearest even;
/// sign: one bit a value (scaled sign): first a binary16 scale for each
/// tensor of the model layout that has entries in the part, in the layout's
/// order (finite, not negative), then `count` sign bits packed LSB-first
/// (bit k of the stream: bit k % 8 of byte k / 8; 1 for negative, padding
/// bits zero). An entry's value is its sign times its tensor's scale.
enum class value_type : uint8_t { float32 = 0, float16 = 1, float8 = 2, sign = 3 };

/// Size in bytes of one value of `t`; throws codec_error for `sign`, whose
/// values have no size of their own (sign_value_bytes()).
size_t element_size(value_type t);

/// Bytes of the values of a `sign` part: 2 a scale, then ceil(count / 8).
inline size_t sign_value_bytes(size_t count, size_t scales) {
  return 2 * scales + (count + 7) / 8;
}

/// One sparse vector over the flattened model (all parameters in order):
/// `count` entries out of `numel`; indices coded as `coding` (sparse.hpp),
/// values as `values`, in the order of the indices. When decoded, the
/// pointers point into the received buffer. The codec checks the structure
/// (known codings, count <= numel, the byte counts); decode_indices() checks
/// the indices themselves.
struct sparse_part {
  uint64_t layout = 0;  ///< fingerprint of the model layout the indices refer to
  uint64_t numel = 0;
  uint32_t count = 0;
  index_coding coding = index_coding::delta_varint;
  value_type values = value_type::float16;
  const uint8_t* indices = nullptr;
  size_t index_bytes = 0;
  const uint8_t* value_data = nullptr;
  size_t value_bytes = 0;
};

/// Carried by every message.
struct header {
  std::string cluster_id;
  uint32_t version = protocol_version;
  std::string sender;  ///< platform or node name of the sender
};

/// Gossip: a platform's model and its weight, to a peer (GoSGD's
/// (x_s, a_s); push-sum's (x, w)).
struct weights {
  double gossip_weight = 0;
  uint64_t epoch = 0;      ///< the sender's epoch
  uint64_t iteration = 0;  ///< the sender's training iterations so far
  std::vector<tensor_view> tensors;
  double rate = 0;  ///< r_i of the sender this epoch (0: not given, counts as 1)
  /// Sparse parts; a message carries dense `tensors` or sparse parts, or
  /// neither (the codec also accepts both together).
  std::vector<sparse_part> sparse;
  /// Sparse-Push's edge state (algorithms/gossip/gossip.hpp): the message's number on
  /// its edge, the sender's generation, and whether it restarts the edge.
  uint64_t edge_seq = 0;
  uint64_t generation = 0;
  bool keyframe = false;
  /// Sparse-Push: messages on this edge the sender took back (its lane did
  /// not send them) before this one, as far as it knew when it sent this.
  uint64_t withdrawn = 0;
  /// Sparse-Push: no model, but a request that the receiver's next message
  /// to the sender be a keyframe (the sender's copy of that edge is out of
  /// step).
  bool keyframe_request = false;
};

/// A parameter-server worker's update (bsp, ssp, async, adacomm, adsp):
/// the change of its model since it last pulled the global model.
struct commit {
  /// The worker's commit number: on the weights lane it pairs the update
  /// with the commit's typed half at the server.
  uint64_t number = 0;
  std::vector<tensor_view> tensors;  ///< one a parameter, in the model's order
};

/// The parameter server's global model, as a worker pulls it.
struct global_model {
  uint64_t version = 0;  ///< commits the server has applied to it
  std::vector<tensor_view> tensors;
};

/// Which way a batch goes between two adjacent stages of a split model.
enum class stage_direction : uint8_t {
  forward = 0,   ///< activations and labels, up
  backward = 1,  ///< the gradient of the loss in the activations, down
  infer = 2,     ///< test activations and labels, up (no gradient comes back)
};
const char* to_string(stage_direction d);

/// One batch between two adjacent stages of a split model.
struct stage_batch {
  stage_direction direction = stage_direction::forward;
  uint64_t batch = 0;  ///< the batch's number in the run (the first stage counts)
  /// forward and infer: "input" and "labels"; backward: "gradient".
  std::vector<tensor_view> tensors;
  /// forward: the first stage sends no training batch after this one until
  /// every batch it sent came back (the end of an epoch): a stage that
  /// keeps to a schedule (split.schedule) stops waiting for forwards.
  bool last = false;
};

/// What a component of a node is. On the wire as its name (to_string).
enum class role : uint8_t {
  node,
  platform,
  mixer,
  predictor,
  balancer,
  store,
  parameter_server,  ///< ADSP's parameter server
  stage,             ///< one stage of a model split across machines
  tester,            ///< a node's test of the averaged model on its own test data
};
const char* to_string(role r);
/// The role of that name; throws codec_error for an unknown one.
role parse_role(const std::string& name);
inline std::ostream& operator<<(std::ostream& os, role r) { return os << to_string(r); }

/// One component of a node, announced in the handshake.
struct component {
  messages::role role = role::node;
  std::string name;  ///< platform name for platform/mixer/predictor, else the node name
  std::string node;  ///< node hosting it
  /// A platform's data: data::signature() of what its model is built for
  /// (shape and classes), which must be the balancer's; "" for other roles.
  std::string data;
  uint64_t samples = 0;  ///< a platform's training samples (its shard)
  /// A platform's node's training data statistics (data::to_text of
  /// data::moments), which the balancer combines into the cluster's
  /// normalisation; "" for other roles.
  std::string stats;
  /// A platform's node's run settings (config::join_settings: the model,
  /// the strategy, the run fingerprint), which must be the balancer's; ""
  /// for other roles, and from a node that does not say.
  std::string run;
};

/// Node handshake: who I am and what I host. The CAF message carrying it
/// also carries the actor handles, in the order of `components`.
struct hello {
  std::string node;
  /// messages::proof() of the cluster secret over `challenge` and `nonce`
  /// ("" if no secret is configured).
  std::string secret_digest;
  std::vector<component> components;
  uint16_t lane_port = 0;  ///< where its weights lane listens (0: it has none)
  std::string nonce;       ///< the sender's fresh nonce
  std::string challenge;   ///< the other side's nonce this hello answers
};

/// Balancer -> platform: train epoch `epoch` on `ratio` of the local data.
struct plan {
  uint32_t epoch = 0;
  double ratio = 1;
  uint32_t last_epoch = 0;  ///< the run stops after this epoch
  /// Failed platforms whose shards this platform trains on as well
  /// (exception handling): part `adopt_part` of `adopt_parts` of each.
  std::vector<std::string> adopt;
  uint32_t adopt_part = 0;
  uint32_t adopt_parts = 1;
  /// EdgeGossip over push-sum: the gossip rounds every platform makes this
  /// epoch, spread evenly over its own batches (so platforms on unequal
  /// shares meet in the same rounds); 0: a round every gossip_every steps.
  uint32_t rounds = 0;
};

/// Predictor -> balancer: the platform's predicted throughput now.
struct prediction {
  std::string platform;
  double throughput = 0;        ///< p_i, data points per second (0: no observations yet)
  double seconds_per_point = 0; ///< t = t0 * RG(U)
  double t0 = 0;                ///< without interference
  double core = 0;              ///< contention U now
  double net = 0;
  double disk = 0;
  uint64_t observations = 0;
  double wait = 0;              ///< run-queue wait per second run (learning::contention)
  /// Its link (learning::link_model): seconds per byte its node's weights
  /// lane takes to send and to receive (0: nothing learnt, or no lane).
  double send_seconds_per_byte = 0;
  double receive_seconds_per_byte = 0;
};

/// What a node's weights lane did while a platform trained an epoch
/// (messages::lane_stats, the difference over the epoch): the bytes it
/// wrote and read, and the seconds it was busy writing and reading frames.
/// Their ratios are what the platform's predictor learns its link from.
struct link_timing {
  uint64_t bytes_sent = 0;
  double send_seconds = 0;
  uint64_t bytes_received = 0;
  double receive_seconds = 0;
};

/// Messages received from one peer during an epoch.
struct peer_traffic {
  std::string peer;
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

/// A message's size: on the wire, and before Cap'n Proto's packed encoding
/// (goes_packed()) dropped its zero bytes. The same for a message that goes
/// unpacked.
struct message_size {
  size_t wire = 0;
  size_t unpacked = 0;
};

/// Bytes of gossip messages by what they carry. The four parts are the
/// unpacked message's bytes; `packing_saved` is what the packed encoding saved of
/// them, so that the parts less packing_saved are the bytes on the wire,
/// exactly (a packed sparse message whose values hold zero words can be
/// smaller on the wire than its values and indices).
struct traffic {
  uint64_t values = 0;   ///< tensor bytes and sparse values
  uint64_t indices = 0;  ///< sparse indices
  uint64_t weights = 0;  ///< the gossip / push-sum weight (8 bytes a message)
  uint64_t headers = 0;  ///< the rest of the unpacked message: envelope, names, shapes, framing
  int64_t packing_saved = 0;  ///< bytes packing saved (negative: its marker and tags cost more)
  /// values + indices + weights + headers - packing_saved: the bytes on the wire.
  uint64_t total() const;
  traffic& operator+=(const traffic&);
};
bool operator==(const traffic& a, const traffic& b);
inline bool operator!=(const traffic& a, const traffic& b) { return !(a == b); }

/// How a message of `size` splits by category; its total() is size.wire by
/// construction. Throws codec_error when the unpacked size cannot hold the
/// message's own values, indices and weight (a size of another message).
traffic traffic_of(const weights& w, message_size size);

/// Platform -> balancer at the end of each epoch.
struct epoch_report {
  std::string platform;
  std::string node;
  uint32_t epoch = 0;
  double ratio = 1;
  double wall_seconds = 0;     ///< the epoch's training time (evaluation excluded)
  double compute_seconds = 0;  ///< of which forward/backward/step
  uint64_t samples = 0;
  uint64_t planned_samples = 0;  ///< |X_i| * r_i: what the epoch will process
  uint64_t iterations = 0;
  double train_loss = 0;       ///< mean over the epoch's iterations
  double test_loss = 0;
  double test_accuracy = 0;
  double gossip_weight = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t messages_refused = 0;
  std::vector<peer_traffic> received_from;
  double predicted_seconds = 0;  ///< the balancer's prediction of wall_seconds (0: none)
  /// Points of each class (label 0, 1, ...) trained in the epoch; empty
  /// from a platform that did not count them.
  std::vector<uint64_t> class_samples;
  traffic sent;      ///< bytes_sent by category
  traffic received;  ///< bytes_received by category
  /// Parameter-server strategies: commits the server answered in the
  /// epoch, the mean staleness of the models pulled with them (commits of
  /// other workers the server applied between this worker's two pulls),
  /// and the version of the last one pulled.
  uint64_t commits = 0;
  double staleness = 0;
  uint64_t server_version = 0;
  /// The node's weights lane in the epoch (all zero: no lane).
  link_timing link;
  /// Times the platform went back to its checkpoint in the epoch (its
  /// model ran away; train.max_rollbacks).
  uint32_t rollbacks = 0;
};

/// What a control request asks. On the wire as its name (to_string).
enum class verb : uint8_t {
  pause,       ///< stop stepping until resume
  resume,
  checkpoint,  ///< save a checkpoint now
  stop,        ///< final checkpoint, then stop
  snapshot,    ///< console: the cluster as the balancer sees it
  history,     ///< console: every epoch report of the platform named in the argument
  /// balancer -> platform -> its node: the balancer refused the platform at
  /// join (the argument says why); the node stops and exits with code 2
  refuse,
};
const char* to_string(verb v);
/// The verb of that name; throws codec_error for an unknown one.
verb parse_verb(const std::string& name);
inline std::ostream& operator<<(std::ostream& os, verb v) { return os << to_string(v); }

/// A control request (platforms, nodes) or a console command, with its
/// argument (history: the platform's name).
struct control {
  messages::verb verb = verb::snapshot;
  std::string argument;
};

/// How a commit or a global model of `size` splits by category: its
/// tensors are values, the rest headers (no indices, no weight).
traffic traffic_of(const commit& c, message_size size);
traffic traffic_of(const global_model& m, message_size size);

using body = std::variant<weights, hello, plan, epoch_report, control, prediction, commit,
                          global_model, stage_batch>;

/// A message with tensors (weights, commit, global_model, stage_batch)
/// together with what keeps the memory of its tensor views alive: the
/// received buffer it was decoded from, a loan on the sending platform's
/// parameters, or a copy (copy_held).
template <class Body>
struct held {
  std::string sender;  ///< the platform (stage, server) that sent it
  Body value;
  std::shared_ptr<const void> hold;
  size_t wire_bytes = 0;  ///< size of the message on the wire (traffic counters)
  size_t unpacked_bytes = 0;  ///< and before packing (wire_bytes for a message not packed)
  message_size size() const { return {wire_bytes, unpacked_bytes}; }
};
using held_weights = held<weights>;
using held_commit = held<commit>;
using held_global_model = held<global_model>;
using held_stage_batch = held<stage_batch>;

/// A copy whose tensors (and sparse parts) live in one buffer of its own
/// (for a receiver in this process: the sender's parameters change with its
/// next step).
held_weights copy_held(const held_weights& w);
held_commit copy_held(const held_commit& c);
held_global_model copy_held(const held_global_model& m);
held_stage_batch copy_held(const held_stage_batch& b);

struct envelope {
  header hdr;
  body payload;
  /// Set by decode() for a packed message: the unpacked words its views
  /// (sparse parts) point into, which whoever keeps the views must hold.
  std::shared_ptr<const void> storage;
};

/// The dense tensors of a body (null for a body that has none).
const std::vector<tensor_view>* tensors_of(const body& b);

/// Whether `e` goes packed: every message but those with dense tensors.
/// Cap'n Proto's packed encoding drops the zero bytes of fixed-width fields
/// and pointers, the bulk of a small message (a sparse gossip message's
/// envelope: about 200 bytes unpacked, about half packed); dense tensors
/// stay unpacked, written from where they lie (encode_gathered).
bool goes_packed(const envelope& e);

/// Encodes an envelope; tensor bytes are copied once, straight into the
/// returned buffer. Packed when goes_packed(e).
std::vector<char> encode(const envelope& e);

/// The exact size encode() gives `e` (it builds the message as encode_gathered
/// does, without copying its whole-word tensors' bytes, and writes nothing;
/// a packed message, small by its nature, it packs to measure).
/// Throws as encode() does.
size_t wire_size(const envelope& e);
/// The same, with the size before packing beside it.
message_size measure(const envelope& e);

/// A message whose tensor bytes stay where they are: its pieces (the
/// segment table, the message's own segment, then each tensor's bytes in
/// the caller's memory) are written out with one gather write, and equal
/// encode()'s bytes once put end to end. What the pieces point into must
/// not change while the message lives: `hold` (given to encode_gathered)
/// keeps it, and the sender must not write to it in place meanwhile
/// (learning::parameter_loans: copy-on-write of a platform's parameters).
class gathered {
public:
  gathered() = default;
  // Moves keep the pieces valid (the table's storage moves with it); a copy
  // would point into the original's table.
  gathered(gathered&&) = default;
  gathered& operator=(gathered&&) = default;
  gathered(const gathered&) = delete;
  gathered& operator=(const gathered&) = delete;

  struct piece {
    const char* data;
    size_t size;
  };
  const std::vector<piece>& pieces() const { return pieces_; }
  /// Bytes in all, as encode() would give them.
  size_t size() const { return size_; }
  /// The same, with the size before packing beside it.
  message_size sizes() const { return {size_, unpacked_}; }
  /// The pieces copied into one buffer (for a receiver in this process, or
  /// the middleman).
  buffer flatten() const;

private:
  friend gathered encode_gathered(const envelope& e, std::shared_ptr<const void> hold);
  std::vector<piece> pieces_;
  std::vector<uint32_t> table_;               // the segment table (piece 0)
  std::vector<char> packed_;                  // a packed message: its only piece
  std::shared_ptr<const void> builder_;       // the message's own segment(s)
  std::shared_ptr<const void> hold_;          // the tensors' memory
  size_t size_ = 0;
  size_t unpacked_ = 0;
};
using shared_gathered = std::shared_ptr<const gathered>;

/// Encodes `e` without copying the bytes of its (8-byte aligned, whole
/// word) tensors; `hold` keeps their memory alive with the message.
gathered encode_gathered(const envelope& e, std::shared_ptr<const void> hold);

/// Decodes and checks a buffer, packed or not. Throws codec_error when it is
/// not a well-formed message of this protocol version, or its cluster id is
/// not `cluster_id`. Views point into `buffer`, or for a packed message into
/// the envelope's `storage`. With `measured`, the message's size (on the
/// wire and unpacked) is written there (traffic_of).
envelope decode(const std::vector<char>& buffer, const std::string& cluster_id,
                message_size* measured = nullptr);
/// The same for `size` bytes at `data` (best 8-byte aligned: else they are
/// copied once to be read).
envelope decode(const char* data, size_t size, const std::string& cluster_id,
                message_size* measured = nullptr);

/// Buffers larger than this are refused before decoding (1 GiB).
inline constexpr size_t max_message_bytes = size_t{1} << 30;

} // namespace eg::messages

// links: eg_messages
#include "messages/codec.hpp"
#include "messages/edgegossip.capnp.h"

#include <boost/test/unit_test.hpp>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>

#include <functional>

#include <cstring>
#include <limits>
#include <random>

using namespace eg::messages;

namespace {

const std::string cluster = "test-cluster";

envelope wrap(body b, std::string sender = "p0") {
  return envelope{header{cluster, protocol_version, std::move(sender)}, std::move(b), nullptr};
}

template <class T>
T round_trip(const T& b) {
  static std::vector<char> buffer;  // decoded tensor views point into it
  static std::shared_ptr<const void> storage;  // or, for a packed message, into this
  buffer = encode(wrap(b));
  envelope e = decode(buffer, cluster);
  storage = e.storage;
  BOOST_TEST(e.hdr.cluster_id == cluster);
  BOOST_TEST(e.hdr.version == protocol_version);
  BOOST_TEST(e.hdr.sender == "p0");
  BOOST_REQUIRE(std::holds_alternative<T>(e.payload));
  return std::get<T>(std::move(e.payload));
}

// Owns the bytes of a tensor_view.
struct owned_tensor {
  std::vector<uint64_t> storage;  // 8-byte aligned backing memory
  tensor_view view;
};

owned_tensor random_tensor(std::mt19937_64& rng, std::string name, dtype type,
                           std::vector<int64_t> shape, size_t misalign = 0) {
  owned_tensor t;
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  size_t bytes = n * element_size(type);
  t.storage.resize((bytes + misalign) / 8 + 2);
  for (auto& w : t.storage) w = rng();  // any bit pattern: NaN payloads, denormals, infinities
  t.view = tensor_view{std::move(name), type, std::move(shape),
                       reinterpret_cast<const char*>(t.storage.data()) + misalign, bytes};
  return t;
}

std::vector<char> sample_message() {
  hello h{"node-a", "digest",
          {{role::platform, "p0", "node-a", {}, 0, {}}, {role::mixer, "p0", "node-a", {}, 0, {}}},
          0, "n", "c"};
  return encode(wrap(h));
}

// Decoding either succeeds or throws codec_error; anything else fails the test.
bool decodes(const std::vector<char>& buffer) {
  try {
    decode(buffer, cluster);
    return true;
  } catch (const codec_error&) {
    return false;
  }
}

// Owns the bytes of a sparse_part.
struct owned_sparse {
  std::vector<uint8_t> indices;
  std::vector<uint8_t> values;
  sparse_part part;
};

// `count` random indices of `numel`, coded as encode_indices chooses, and
// random values of `type`.
owned_sparse random_sparse(std::mt19937_64& rng, uint64_t numel, uint32_t count, value_type type,
                           uint64_t layout = 0x5eed5eed) {
  std::vector<uint32_t> idx;
  for (uint64_t i = 0; i < numel && idx.size() < count; ++i)
    if (rng() % numel < 2 * uint64_t{count}) idx.push_back(static_cast<uint32_t>(i));
  owned_sparse s;
  index_coding coding;
  s.indices = encode_indices(idx.data(), idx.size(), numel, coding);
  // sign: 3 scales (the codec checks only that the count is in range).
  s.values.resize(type == value_type::sign ? sign_value_bytes(idx.size(), 3)
                                           : idx.size() * element_size(type));
  for (auto& b : s.values) b = static_cast<uint8_t>(rng());
  s.part.layout = layout;
  s.part.numel = numel;
  s.part.count = static_cast<uint32_t>(idx.size());
  s.part.coding = coding;
  s.part.values = type;
  s.part.indices = s.indices.data();
  s.part.index_bytes = s.indices.size();
  s.part.value_data = s.values.data();
  s.part.value_bytes = s.values.size();
  return s;
}

void check_same_sparse(const sparse_part& a, const sparse_part& b) {
  BOOST_TEST(b.layout == a.layout);
  BOOST_TEST(b.numel == a.numel);
  BOOST_TEST(b.count == a.count);
  BOOST_TEST(static_cast<int>(b.coding) == static_cast<int>(a.coding));
  BOOST_TEST(static_cast<int>(b.values) == static_cast<int>(a.values));
  BOOST_REQUIRE(b.index_bytes == a.index_bytes);
  BOOST_REQUIRE(b.value_bytes == a.value_bytes);
  if (a.index_bytes) BOOST_TEST(std::memcmp(a.indices, b.indices, a.index_bytes) == 0);
  if (a.value_bytes) BOOST_TEST(std::memcmp(a.value_data, b.value_data, a.value_bytes) == 0);
}

// An encoded weights message with one sparse part as `edit` leaves it,
// built with Cap'n Proto directly (encode() refuses what the tests need).
std::vector<char> raw_sparse_message(const std::function<void(wire::SparsePart::Builder)>& edit) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::Envelope>();
  root.setClusterId(cluster.c_str());
  root.setVersion(protocol_version);
  root.setSender("p0");
  auto part = root.initBody().initWeights().initSparse(1)[0];
  part.setNumel(1000);
  part.setCount(3);
  part.setCoding(wire::IndexCoding::FIXED_BITS);
  part.setValueType(wire::ValueType::FLOAT16);
  part.initIndices(4);  // 3 * 10 bits
  part.initValues(6);
  edit(part);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asChars();
  return std::vector<char>(bytes.begin(), bytes.end());
}

// The message of the codec_error that decoding `buffer` throws ("" if none).
std::string decode_refusal(const std::vector<char>& buffer) {
  try {
    decode(buffer, cluster);
  } catch (const codec_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

BOOST_AUTO_TEST_SUITE(codec)

BOOST_AUTO_TEST_CASE(element_sizes) {
  BOOST_TEST(element_size(dtype::float32) == 4u);
  BOOST_TEST(element_size(dtype::float64) == 8u);
  BOOST_TEST(element_size(dtype::int64) == 8u);
  BOOST_TEST(element_size(dtype::int32) == 4u);
  BOOST_TEST(element_size(dtype::uint8) == 1u);
}

BOOST_AUTO_TEST_CASE(hello_round_trip) {
  hello h{"node-b", "sha256:abc",
          {{role::node, "node-b", "node-b", {}, 0, {}},
           {role::platform, "p3", "node-b", "1x28x28; 2 classes: a, b", 600,
            "count 470400; sum 134523.25; squares 66123.5",
            "train.model=lenet5\nfingerprint=00ff\n"},
           {role::store, "node-b", "node-b", {}, 0, {}}},
          47000, "nonce-b", "nonce-a"};
  hello r = round_trip(h);
  BOOST_TEST(r.node == h.node);
  BOOST_TEST(r.lane_port == h.lane_port);
  BOOST_TEST(r.nonce == h.nonce);
  BOOST_TEST(r.challenge == h.challenge);
  BOOST_TEST(r.secret_digest == h.secret_digest);
  BOOST_REQUIRE(r.components.size() == h.components.size());
  for (size_t i = 0; i < h.components.size(); ++i) {
    BOOST_TEST(r.components[i].role == h.components[i].role);
    BOOST_TEST(r.components[i].name == h.components[i].name);
    BOOST_TEST(r.components[i].node == h.components[i].node);
    BOOST_TEST(r.components[i].data == h.components[i].data);
    BOOST_TEST(r.components[i].samples == h.components[i].samples);
    // A platform's node's data statistics, for the cluster's normalisation.
    BOOST_TEST(r.components[i].stats == h.components[i].stats);
    // Its node's run settings, which the balancer checks at join.
    BOOST_TEST(r.components[i].run == h.components[i].run);
  }
}

BOOST_AUTO_TEST_CASE(plan_round_trip) {
  plan p{7, 0.375, 12, {}, 0, 1};
  plan r = round_trip(p);
  BOOST_TEST(r.epoch == 7u);
  BOOST_TEST(r.ratio == 0.375);
  BOOST_TEST(r.last_epoch == 12u);
  BOOST_TEST(r.adopt.empty());
  BOOST_TEST(r.rounds == 0u);
  p.rounds = 37;  // EdgeGossip over push-sum
  BOOST_TEST(round_trip(p).rounds == 37u);
}

BOOST_AUTO_TEST_CASE(plan_with_adopted_shards_round_trip) {
  plan p{2, 0.5, 9, {"p3", "p7"}, 1, 3};
  plan r = round_trip(p);
  BOOST_TEST((r.adopt == std::vector<std::string>{"p3", "p7"}));
  BOOST_TEST(r.adopt_part == 1u);
  BOOST_TEST(r.adopt_parts == 3u);
  // A part beyond the number of parts is refused.
  plan bad{2, 0.5, 9, {"p3"}, 3, 3};
  auto buf = encode(envelope{header{"c", protocol_version, "b"}, bad, nullptr});
  BOOST_CHECK_THROW(decode(buf, "c"), codec_error);
}

BOOST_AUTO_TEST_CASE(prediction_round_trip) {
  prediction p{"p1", 4321.5, 1.0 / 4321.5, 2e-4, 0.75, 1.5, 12.25, 42, 0.625};
  prediction r = round_trip(p);
  BOOST_TEST(r.platform == "p1");
  BOOST_TEST(r.throughput == 4321.5);
  BOOST_TEST(r.seconds_per_point == 1.0 / 4321.5);
  BOOST_TEST(r.t0 == 2e-4);
  BOOST_TEST(r.core == 0.75);
  BOOST_TEST(r.net == 1.5);
  BOOST_TEST(r.disk == 12.25);
  BOOST_TEST(r.observations == 42u);
  BOOST_TEST(r.wait == 0.625);
  BOOST_TEST(r.send_seconds_per_byte == 0.0);  // no link learnt
  p.send_seconds_per_byte = 1.6e-6;
  p.receive_seconds_per_byte = 8e-7;
  r = round_trip(p);
  BOOST_TEST(r.send_seconds_per_byte == 1.6e-6);
  BOOST_TEST(r.receive_seconds_per_byte == 8e-7);
}

BOOST_AUTO_TEST_CASE(epoch_report_round_trip) {
  epoch_report e;
  e.platform = "p2";
  e.node = "b";
  e.epoch = 3;
  e.ratio = 0.8;
  e.wall_seconds = 12.5;
  e.compute_seconds = 10.25;
  e.samples = 15000;
  e.planned_samples = 15008;
  e.predicted_seconds = 11.75;
  e.iterations = 235;
  e.train_loss = 0.4321;
  e.test_loss = 0.5;
  e.test_accuracy = 0.875;
  e.gossip_weight = 0.125;
  e.bytes_sent = 1u << 30;
  e.bytes_received = 123456789012ull;
  e.messages_sent = 11;
  e.messages_received = 13;
  e.messages_refused = 2;
  e.received_from = {{"p0", 4, 1000}, {"p1", 9, 123456789012ull}};
  e.link = {5'000'000, 6.25, 7'000'000, 0.5};
  e.rollbacks = 3;
  epoch_report r = round_trip(e);
  BOOST_TEST(r.rollbacks == 3u);
  BOOST_TEST(r.link.bytes_sent == 5'000'000u);
  BOOST_TEST(r.link.send_seconds == 6.25);
  BOOST_TEST(r.link.bytes_received == 7'000'000u);
  BOOST_TEST(r.link.receive_seconds == 0.5);
  BOOST_TEST(r.platform == e.platform);
  BOOST_TEST(r.node == e.node);
  BOOST_TEST(r.epoch == e.epoch);
  BOOST_TEST(r.ratio == e.ratio);
  BOOST_TEST(r.wall_seconds == e.wall_seconds);
  BOOST_TEST(r.compute_seconds == e.compute_seconds);
  BOOST_TEST(r.samples == e.samples);
  BOOST_TEST(r.planned_samples == e.planned_samples);
  BOOST_TEST(r.predicted_seconds == e.predicted_seconds);
  BOOST_TEST(r.iterations == e.iterations);
  BOOST_TEST(r.train_loss == e.train_loss);
  BOOST_TEST(r.test_loss == e.test_loss);
  BOOST_TEST(r.test_accuracy == e.test_accuracy);
  BOOST_TEST(r.gossip_weight == e.gossip_weight);
  BOOST_TEST(r.bytes_sent == e.bytes_sent);
  BOOST_TEST(r.bytes_received == e.bytes_received);
  BOOST_TEST(r.messages_sent == e.messages_sent);
  BOOST_TEST(r.messages_received == e.messages_received);
  BOOST_TEST(r.messages_refused == e.messages_refused);
  BOOST_REQUIRE(r.received_from.size() == 2u);
  for (size_t i = 0; i < 2; ++i) {
    BOOST_TEST(r.received_from[i].peer == e.received_from[i].peer);
    BOOST_TEST(r.received_from[i].messages == e.received_from[i].messages);
    BOOST_TEST(r.received_from[i].bytes == e.received_from[i].bytes);
  }
}

BOOST_AUTO_TEST_CASE(control_round_trip) {
  control c{verb::history, std::string("arg with \0 inside", 17)};
  control r = round_trip(c);
  BOOST_TEST(r.verb == c.verb);
  BOOST_TEST(r.argument == c.argument);
}

BOOST_AUTO_TEST_CASE(weights_round_trip_is_bit_exact) {
  std::mt19937_64 rng(42);
  std::vector<owned_tensor> owned;
  owned.push_back(random_tensor(rng, "conv1.weight", dtype::float32, {6, 1, 5, 5}));  // 600 B: referenced
  owned.push_back(random_tensor(rng, "conv1.bias", dtype::float32, {3}));             // 12 B: copied
  owned.push_back(random_tensor(rng, "fc.weight", dtype::float64, {4, 7}));
  owned.push_back(random_tensor(rng, "steps", dtype::int64, {2, 2, 2}));
  owned.push_back(random_tensor(rng, "counts", dtype::int32, {7}));
  owned.push_back(random_tensor(rng, "mask", dtype::uint8, {13}));
  owned.push_back(random_tensor(rng, "empty", dtype::float32, {0, 5}));
  owned.push_back(random_tensor(rng, "scalar", dtype::float64, {}));
  owned.push_back(random_tensor(rng, "misaligned", dtype::float32, {16}, 4));  // copied
  // Special values at known places, beside the random bit patterns.
  float specials[] = {std::numeric_limits<float>::denorm_min(), -0.0f,
                      std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()};
  uint32_t nan_payload = 0x7fa12345u;  // signalling NaN with a payload
  std::memcpy(owned[0].storage.data(), specials, sizeof specials);
  std::memcpy(reinterpret_cast<char*>(owned[0].storage.data()) + sizeof specials, &nan_payload, 4);

  weights w;
  w.gossip_weight = 0.0625;
  w.rate = 0.375;
  w.epoch = 4;
  w.iteration = 987654321;
  w.edge_seq = 12345;
  w.generation = 0xfedcba9876543210ull;
  w.keyframe = true;
  w.withdrawn = 77;
  w.keyframe_request = true;
  for (auto& t : owned) w.tensors.push_back(t.view);

  weights r = round_trip(w);
  BOOST_TEST(r.gossip_weight == w.gossip_weight);
  BOOST_TEST(r.rate == w.rate);
  BOOST_TEST(r.epoch == w.epoch);
  BOOST_TEST(r.iteration == w.iteration);
  BOOST_TEST(r.edge_seq == w.edge_seq);
  BOOST_TEST(r.generation == w.generation);
  BOOST_TEST(r.keyframe);
  BOOST_TEST(r.withdrawn == w.withdrawn);
  BOOST_TEST(r.keyframe_request);
  BOOST_REQUIRE(r.tensors.size() == w.tensors.size());
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    const tensor_view& a = w.tensors[i];
    const tensor_view& b = r.tensors[i];
    BOOST_TEST_CONTEXT("tensor " << a.name) {
      BOOST_TEST(b.name == a.name);
      BOOST_TEST(static_cast<int>(b.type) == static_cast<int>(a.type));
      BOOST_TEST(b.shape == a.shape);
      BOOST_REQUIRE(b.bytes == a.bytes);
      if (a.bytes > 0) BOOST_TEST(std::memcmp(a.data, b.data, a.bytes) == 0);
    }
  }
}

void check_same_tensors(const std::vector<tensor_view>& a, const std::vector<tensor_view>& b) {
  BOOST_REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST_CONTEXT("tensor " << a[i].name) {
      BOOST_TEST(b[i].name == a[i].name);
      BOOST_TEST(static_cast<int>(b[i].type) == static_cast<int>(a[i].type));
      BOOST_TEST(b[i].shape == a[i].shape);
      BOOST_REQUIRE(b[i].bytes == a[i].bytes);
      if (a[i].bytes > 0) BOOST_TEST(std::memcmp(a[i].data, b[i].data, a[i].bytes) == 0);
    }
}

// One message per protocol: a commit, a global model and a stage batch are
// bodies of their own, each with the fields its protocol means.
BOOST_AUTO_TEST_CASE(commit_global_model_and_stage_batch_round_trip_bit_exact) {
  std::mt19937_64 rng(43);
  owned_tensor w = random_tensor(rng, "conv1.weight", dtype::float32, {6, 1, 5, 5});
  owned_tensor b = random_tensor(rng, "conv1.bias", dtype::float32, {6});
  owned_tensor input = random_tensor(rng, "input", dtype::float32, {4, 6, 12, 12});
  owned_tensor labels = random_tensor(rng, "labels", dtype::int64, {4});

  commit c{0xfedcba9876543210ull, {w.view, b.view}};
  commit rc = round_trip(c);
  BOOST_TEST(rc.number == c.number);
  check_same_tensors(c.tensors, rc.tensors);

  global_model m{41, {w.view, b.view}};
  global_model rm = round_trip(m);
  BOOST_TEST(rm.version == 41u);
  check_same_tensors(m.tensors, rm.tensors);

  for (auto d : {stage_direction::forward, stage_direction::backward, stage_direction::infer}) {
    stage_batch s{d, 977, {input.view, labels.view}};
    stage_batch rs = round_trip(s);
    BOOST_TEST(static_cast<int>(rs.direction) == static_cast<int>(d));
    BOOST_TEST(rs.batch == 977u);
    check_same_tensors(s.tensors, rs.tensors);
    BOOST_TEST(!rs.last);
    s.last = true;  // the last training batch before the pipeline drains
    BOOST_TEST(round_trip(s).last);
  }
  BOOST_TEST(std::string{to_string(stage_direction::backward)} == "backward");

  // Dense tensors go unpacked, as gossip's do; an empty one packs.
  BOOST_TEST(!goes_packed(wrap(c)));
  BOOST_TEST(!goes_packed(wrap(m)));
  BOOST_TEST(goes_packed(wrap(commit{})));
  BOOST_TEST(tensors_of(wrap(m).payload) != nullptr);
  BOOST_TEST(tensors_of(wrap(plan{}).payload) == nullptr);

  // Their traffic: tensor bytes are values, the rest headers, no weight.
  auto size = measure(wrap(c));
  traffic t = traffic_of(c, size);
  BOOST_TEST(t.values == w.view.bytes + b.view.bytes);
  BOOST_TEST(t.weights == 0u);
  BOOST_TEST(t.total() == size.wire);
  BOOST_CHECK_THROW(traffic_of(c, message_size{10, 10}), codec_error);
}

BOOST_AUTO_TEST_CASE(a_stage_batch_of_unknown_direction_is_refused) {
  stage_batch s;
  s.direction = static_cast<stage_direction>(7);
  BOOST_CHECK_THROW(encode(wrap(s)), codec_error);
  // Written by another program: the receiver refuses it.
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::Envelope>();
  root.setClusterId(cluster.c_str());
  root.setVersion(protocol_version);
  root.setSender("@stage0");
  auto batch = root.initBody().initStageBatch();
  batch.setDirection(static_cast<wire::StageDirection>(7));
  batch.setBatch(3);
  auto words = capnp::messageToFlatArray(message);
  std::vector<char> buffer(words.asChars().begin(), words.asChars().end());
  std::string why;
  try {
    decode(buffer, cluster);
  } catch (const codec_error& e) {
    why = e.what();
  }
  BOOST_TEST(why.find("unknown direction 7") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(copies_of_commits_models_and_batches_own_their_tensors) {
  std::mt19937_64 rng(16);
  owned_tensor t = random_tensor(rng, "t", dtype::float32, {7, 3});
  auto buffer = std::make_shared<std::vector<char>>(encode(wrap(global_model{3, {t.view}})));
  envelope e = decode(*buffer, cluster);
  held_global_model held{"@server", std::get<global_model>(e.payload), buffer, buffer->size(),
                         buffer->size()};
  auto copy = copy_held(held);
  std::fill(buffer->begin(), buffer->end(), '\x5a');
  BOOST_TEST(copy.sender == "@server");
  BOOST_TEST(copy.value.version == 3u);
  BOOST_TEST(copy.wire_bytes == buffer->size());
  BOOST_TEST(std::memcmp(copy.value.tensors.at(0).data, t.view.data, t.view.bytes) == 0);
  held_stage_batch batch{"@stage1", stage_batch{stage_direction::backward, 5, {t.view}}, nullptr};
  auto batch_copy = copy_held(batch);
  BOOST_TEST(batch_copy.value.tensors.at(0).data != t.view.data);
  BOOST_TEST(static_cast<int>(batch_copy.value.direction) ==
             static_cast<int>(stage_direction::backward));
  held_commit update{"p0", commit{9, {t.view}}, nullptr};
  auto update_copy = copy_held(update);
  BOOST_TEST(update_copy.value.number == 9u);
  BOOST_TEST(std::memcmp(update_copy.value.tensors.at(0).data, t.view.data, t.view.bytes) == 0);
}

BOOST_AUTO_TEST_CASE(decoding_large_weights_does_not_copy) {
  std::mt19937_64 rng(7);
  owned_tensor t = random_tensor(rng, "big", dtype::float32, {1024, 1024});  // 4 MB
  weights w;
  w.tensors.push_back(t.view);
  std::vector<char> buffer = encode(wrap(w));
  BOOST_TEST(buffer.size() < t.view.bytes + 1024);
  envelope e = decode(buffer, cluster);
  const tensor_view& v = std::get<weights>(e.payload).tensors.at(0);
  const char* p = static_cast<const char*>(v.data);
  BOOST_TEST((p >= buffer.data() && p + v.bytes <= buffer.data() + buffer.size()));
  BOOST_TEST(std::memcmp(p, t.view.data, v.bytes) == 0);
}

BOOST_AUTO_TEST_CASE(tensor_size_must_match_shape) {
  float data[4] = {};
  weights w;
  w.tensors.push_back(tensor_view{"t", dtype::float32, {2, 3}, data, sizeof data});
  BOOST_CHECK_THROW(encode(wrap(w)), codec_error);
  w.tensors[0].shape = {-1, -4};
  BOOST_CHECK_THROW(encode(wrap(w)), codec_error);
  w.tensors[0].shape = {int64_t{1} << 29};  // 2 GiB of float32
  BOOST_CHECK_THROW(encode(wrap(w)), codec_error);
}

BOOST_AUTO_TEST_CASE(sparse_weights_round_trip_is_bit_exact) {
  std::mt19937_64 rng(11);
  std::vector<owned_sparse> owned;
  owned.push_back(random_sparse(rng, 61706, 600, value_type::float16));     // rice indices
  owned.push_back(random_sparse(rng, 120, 40, value_type::float32, 7));     // rice: 3 bits each
  owned.push_back(random_sparse(rng, 50, 0, value_type::float16));          // empty
  owned.push_back(random_sparse(rng, 1, 1, value_type::float32));           // 0-bit indices
  owned.push_back(random_sparse(rng, 5000, 30, value_type::float8));        // one-byte values
  owned.push_back(random_sparse(rng, 5000, 30, value_type::sign));          // one-bit values
  BOOST_TEST(static_cast<int>(owned[0].part.coding) == static_cast<int>(index_coding::rice));
  BOOST_TEST(static_cast<int>(owned[1].part.coding) == static_cast<int>(index_coding::rice));
  BOOST_TEST(static_cast<int>(owned[3].part.coding) == static_cast<int>(index_coding::fixed_bits));
  BOOST_TEST(owned[3].part.count == 1u);
  weights w;
  w.gossip_weight = 0.25;
  w.epoch = 3;
  w.iteration = 77;
  w.rate = 0.5;
  for (auto& s : owned) w.sparse.push_back(s.part);

  std::vector<char> buffer = encode(wrap(w));
  // No dense tensors: the message goes packed, and its views point into the
  // words it was unpacked into, which the envelope holds.
  BOOST_REQUIRE(buffer.size() > 2);
  BOOST_TEST(static_cast<unsigned char>(buffer[0]) == packed_marker[0]);
  BOOST_TEST(static_cast<unsigned char>(buffer[1]) == packed_marker[1]);
  envelope e = decode(buffer, cluster);
  BOOST_REQUIRE(e.storage != nullptr);
  auto* unpacked = static_cast<const kj::Array<capnp::word>*>(e.storage.get());
  const char* words = reinterpret_cast<const char*>(unpacked->begin());
  const size_t words_size = unpacked->size() * sizeof(capnp::word);
  const weights& r = std::get<weights>(e.payload);
  BOOST_TEST(r.gossip_weight == w.gossip_weight);
  BOOST_TEST(r.epoch == w.epoch);
  BOOST_TEST(r.iteration == w.iteration);
  BOOST_TEST(r.rate == w.rate);
  BOOST_TEST(r.tensors.empty());
  BOOST_REQUIRE(r.sparse.size() == w.sparse.size());
  for (size_t i = 0; i < w.sparse.size(); ++i)
    BOOST_TEST_CONTEXT("part " << i) {
      check_same_sparse(w.sparse[i], r.sparse[i]);
      // Views into the message's unpacked words, not copies of their own.
      auto in_storage = [&](const uint8_t* p, size_t n) {
        auto c = reinterpret_cast<const char*>(p);
        return n == 0 || (c >= words && c + n <= words + words_size);
      };
      BOOST_TEST(in_storage(r.sparse[i].indices, r.sparse[i].index_bytes));
      BOOST_TEST(in_storage(r.sparse[i].value_data, r.sparse[i].value_bytes));
      // The indices decode as they were.
      std::vector<uint32_t> idx(r.sparse[i].count);
      decode_indices(r.sparse[i].indices, r.sparse[i].index_bytes, r.sparse[i].coding,
                     r.sparse[i].count, r.sparse[i].numel, idx.data());
    }

  // The same through encode_gathered and flatten.
  gathered g = encode_gathered(wrap(w), nullptr);
  eg::messages::buffer flat = g.flatten();
  BOOST_REQUIRE(flat.size() == buffer.size());
  BOOST_TEST(std::memcmp(flat.data(), buffer.data(), buffer.size()) == 0);
  envelope f = decode(flat.data(), flat.size(), cluster);
  const weights& rf = std::get<weights>(f.payload);
  BOOST_REQUIRE(rf.sparse.size() == w.sparse.size());
  for (size_t i = 0; i < w.sparse.size(); ++i)
    BOOST_TEST_CONTEXT("gathered part " << i) check_same_sparse(w.sparse[i], rf.sparse[i]);
}

BOOST_AUTO_TEST_CASE(mixed_weights_round_trip_through_gathered_messages) {
  std::mt19937_64 rng(12);
  owned_tensor dense = random_tensor(rng, "fc.weight", dtype::float32, {64, 32});  // referenced
  owned_tensor odd = random_tensor(rng, "fc.bias", dtype::float32, {3});          // copied
  owned_sparse part = random_sparse(rng, 100000, 2000, value_type::float16);
  weights w;
  w.tensors = {dense.view, odd.view};
  w.sparse = {part.part};
  auto hold = std::make_shared<int>(1);
  gathered g = encode_gathered(wrap(w), hold);
  BOOST_TEST(hold.use_count() == 2);
  eg::messages::buffer flat = g.flatten();
  std::vector<char> encoded = encode(wrap(w));
  BOOST_REQUIRE(flat.size() == encoded.size());
  BOOST_TEST(std::memcmp(flat.data(), encoded.data(), encoded.size()) == 0);
  envelope e = decode(flat.data(), flat.size(), cluster);
  const weights& r = std::get<weights>(e.payload);
  BOOST_REQUIRE(r.tensors.size() == 2u);
  BOOST_TEST(std::memcmp(r.tensors[0].data, dense.view.data, dense.view.bytes) == 0);
  BOOST_TEST(std::memcmp(r.tensors[1].data, odd.view.data, odd.view.bytes) == 0);
  BOOST_REQUIRE(r.sparse.size() == 1u);
  check_same_sparse(part.part, r.sparse[0]);
}

BOOST_AUTO_TEST_CASE(wire_size_is_what_encode_gives) {
  std::mt19937_64 rng(13);
  owned_tensor big = random_tensor(rng, "big", dtype::float32, {256, 256});
  owned_tensor odd = random_tensor(rng, "odd", dtype::float32, {5});
  owned_tensor misaligned = random_tensor(rng, "misaligned", dtype::float64, {9}, 4);
  owned_sparse a = random_sparse(rng, 61706, 617, value_type::float16);
  owned_sparse b = random_sparse(rng, 777, 100, value_type::float32);
  owned_sparse c = random_sparse(rng, 9, 3, value_type::float16);  // sizes not whole words
  weights dense, sparse, mixed, empty;
  dense.tensors = {big.view, odd.view, misaligned.view};
  sparse.sparse = {a.part, b.part, c.part};
  mixed.tensors = {odd.view, big.view};
  mixed.sparse = {c.part, a.part};
  epoch_report report;
  report.platform = "p3";
  report.received_from = {{"p1", 3, 400}};
  report.sent = {1, 2, 3, 4};
  for (const envelope& e : {wrap(dense), wrap(sparse), wrap(mixed), wrap(empty), wrap(report),
                            wrap(plan{1, 0.5, 3, {"p9"}, 0, 2})}) {
    size_t expected = encode(e).size();
    BOOST_TEST(wire_size(e) == expected);
    BOOST_TEST(encode_gathered(e, nullptr).size() == expected);
  }
  // Not an approximation: one more value byte pair moves an unpacked message
  // (one with a dense tensor) by a word.
  owned_sparse d = random_sparse(rng, 1000, 4, value_type::float16);  // 8 value bytes
  weights w;
  w.tensors = {odd.view};
  w.sparse = {d.part};
  size_t before = wire_size(wrap(w));
  d.values.resize(10);
  d.part.value_data = d.values.data();
  d.part.value_bytes = 10;
  d.part.count = 5;  // its indices no longer match: encode does not look at them
  d.part.coding = index_coding::delta_varint;
  d.indices = {0, 1, 2, 3, 4};
  d.part.indices = d.indices.data();
  d.part.index_bytes = 5;
  w.sparse = {d.part};
  BOOST_TEST(wire_size(wrap(w)) == encode(wrap(w)).size());
  BOOST_TEST(wire_size(wrap(w)) == before + 8);
}

BOOST_AUTO_TEST_CASE(sparse_structure_is_refused) {
  using builder = wire::SparsePart::Builder;
  // The untouched message decodes.
  BOOST_TEST(decode_refusal(raw_sparse_message([](builder) {})) == "");
  struct bad {
    std::function<void(builder)> edit;
    std::string says;
  };
  const bad cases[] = {
      {[](builder p) { p.setCoding(static_cast<wire::IndexCoding>(3)); }, "unknown index coding 3"},
      {[](builder p) { p.setValueType(static_cast<wire::ValueType>(5)); }, "unknown value type 5"},
      {[](builder p) { p.setCount(1001); }, "1001 entries of 1000 parameters"},
      {[](builder p) { p.setNumel(0); }, "entries over a model of no parameters"},
      {[](builder p) { p.setNumel((uint64_t{1} << 32) + 1); }, "32-bit"},
      {[](builder p) { p.initValues(8); }, "8 value bytes for 3 values of 2 bytes"},
      {[](builder p) {
         p.setValueType(wire::ValueType::FLOAT32);
       }, "6 value bytes for 3 values of 4 bytes"},
      {[](builder p) { p.initIndices(5); }, "5 index bytes for 3 fixed-width indices (4 expected)"},
      {[](builder p) { p.initIndices(3); }, "3 index bytes for 3 fixed-width indices"},
      {[](builder p) {
         p.setCoding(wire::IndexCoding::DELTA_VARINT);
         p.initIndices(2);
       }, "2 index bytes for 3 varint indices"},
      {[](builder p) {
         p.setCoding(wire::IndexCoding::DELTA_VARINT);
         p.initIndices(16);
       }, "16 index bytes for 3 varint indices"},
      {[](builder p) {
         p.setCoding(wire::IndexCoding::RICE);
         p.initIndices(0);
       }, "0 index bytes for 3 rice-coded indices of 1000 (1 to 138 expected)"},
      {[](builder p) {
         p.setCoding(wire::IndexCoding::RICE);
         p.initIndices(139);
       }, "139 index bytes for 3 rice-coded indices"},
  };
  for (const bad& c : cases) {
    std::string what = decode_refusal(raw_sparse_message(c.edit));
    BOOST_TEST(what.find("sparse part 0: ") != std::string::npos, what);
    BOOST_TEST(what.find(c.says) != std::string::npos, what << " (expected: " << c.says << ")");
  }
  // The encoder refuses the same.
  std::mt19937_64 rng(14);
  owned_sparse s = random_sparse(rng, 1000, 10, value_type::float16);
  auto refused = [&](std::function<void(sparse_part&)> edit) {
    weights w;
    w.sparse = {s.part};
    edit(w.sparse[0]);
    try {
      encode(wrap(w));
    } catch (const codec_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(refused([](sparse_part&) {}) == "");
  BOOST_TEST(refused([](sparse_part& p) { p.value_bytes -= 2; }).find("value bytes") !=
             std::string::npos);
  BOOST_TEST(refused([](sparse_part& p) { p.count = 1001; }).find("entries of 1000") !=
             std::string::npos);
  BOOST_TEST(refused([](sparse_part& p) { p.coding = static_cast<index_coding>(9); })
                 .find("unknown index coding 9") != std::string::npos);
  BOOST_TEST(refused([](sparse_part& p) { p.values = static_cast<value_type>(9); })
                 .find("unknown value type 9") != std::string::npos);
  BOOST_TEST(refused([](sparse_part& p) { p.value_data = nullptr; }).find("no data") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(copying_sparse_weights) {
  std::mt19937_64 rng(15);
  owned_tensor t = random_tensor(rng, "t", dtype::float32, {7});
  owned_sparse a = random_sparse(rng, 61706, 100, value_type::float16);
  owned_sparse b = random_sparse(rng, 300, 50, value_type::float32);
  auto buffer = std::make_shared<std::vector<char>>();
  {
    weights w;
    w.tensors = {t.view};
    w.sparse = {a.part, b.part};
    *buffer = encode(wrap(w));
  }
  envelope e = decode(*buffer, cluster);
  held_weights held{"p0", std::get<weights>(e.payload), buffer, buffer->size()};
  held_weights copy = copy_held(held);
  BOOST_TEST(copy.sender == "p0");
  BOOST_TEST(copy.wire_bytes == buffer->size());
  BOOST_REQUIRE(copy.value.sparse.size() == 2u);
  // Nothing points into the original any more, and the bytes survive it.
  std::vector<char> original = *buffer;
  std::fill(buffer->begin(), buffer->end(), '\x5a');
  auto outside = [&](const void* p) {
    auto c = static_cast<const char*>(p);
    return c < buffer->data() || c >= buffer->data() + buffer->size();
  };
  for (size_t i = 0; i < 2; ++i) {
    const sparse_part& c = copy.value.sparse[i];
    BOOST_TEST(outside(c.indices));
    BOOST_TEST(outside(c.value_data));
    check_same_sparse((i ? b : a).part, c);
  }
  BOOST_TEST(outside(copy.value.tensors.at(0).data));
  BOOST_TEST(std::memcmp(copy.value.tensors[0].data, t.view.data, t.view.bytes) == 0);
}

BOOST_AUTO_TEST_CASE(epoch_report_traffic_round_trip) {
  epoch_report e;
  e.platform = "p4";
  e.bytes_sent = 1000;
  e.bytes_received = 2000;
  e.sent = traffic{123456789012ull, 2, 3, 4, -5};
  e.received = traffic{5, 6000000000ull, 7, 8};
  epoch_report r = round_trip(e);
  BOOST_TEST(r.sent.values == 123456789012ull);
  BOOST_TEST(r.sent.indices == 2u);
  BOOST_TEST(r.sent.weights == 3u);
  BOOST_TEST(r.sent.headers == 4u);
  BOOST_TEST(r.sent.packing_saved == -5);
  BOOST_TEST(r.received.values == 5u);
  BOOST_TEST(r.received.indices == 6000000000ull);
  BOOST_TEST(r.received.weights == 7u);
  BOOST_TEST(r.received.headers == 8u);
  BOOST_TEST(r.bytes_sent == 1000u);
  BOOST_TEST(r.bytes_received == 2000u);
  BOOST_TEST((r.sent == e.sent));
  BOOST_TEST((r.received != e.sent));
}

BOOST_AUTO_TEST_CASE(traffic_of_a_message_sums_to_its_size) {
  std::mt19937_64 rng(16);
  owned_tensor t = random_tensor(rng, "t", dtype::float32, {100, 3});
  owned_sparse a = random_sparse(rng, 61706, 500, value_type::float16);
  owned_sparse b = random_sparse(rng, 64, 20, value_type::float32);
  weights w;
  w.tensors = {t.view};
  w.sparse = {a.part, b.part};
  size_t size = encode(wrap(w)).size();
  BOOST_TEST(measure(wrap(w)).wire == size);
  BOOST_TEST(measure(wrap(w)).unpacked == size);  // a dense tensor: not packed
  traffic split = traffic_of(w, measure(wrap(w)));
  BOOST_TEST(split.total() == size);
  BOOST_TEST(split.values == t.view.bytes + a.part.value_bytes + b.part.value_bytes);
  BOOST_TEST(split.indices == a.part.index_bytes + b.part.index_bytes);
  BOOST_TEST(split.weights == 8u);
  BOOST_TEST(split.headers == size - split.values - split.indices - 8);
  BOOST_TEST(split.headers > 0u);
  BOOST_TEST(split.packing_saved == 0);
  // A size that cannot hold the message's own bytes is a mistake, not a
  // message with no headers.
  BOOST_CHECK_THROW(traffic_of(w, message_size{10, 10}), codec_error);
  // Sums.
  traffic sum;
  sum += split;
  sum += split;
  BOOST_TEST(sum.total() == 2 * size);
  BOOST_TEST(sum.indices == 2 * split.indices);
  BOOST_TEST(sum.headers == 2 * split.headers);
  // A dense message has no index bytes.
  weights d;
  d.tensors = {t.view};
  traffic dense = traffic_of(d, measure(wrap(d)));
  BOOST_TEST(dense.indices == 0u);
  BOOST_TEST(dense.values == t.view.bytes);
  BOOST_TEST(dense.total() == encode(wrap(d)).size());
}

// A packed sparse message whose values pack well (zero words: a Sparse-Push
// message of float16 values that rounded to 0) is smaller on the wire than
// its own values and indices. Its parts, counted on the unpacked message,
// less what packing saved, are still exactly its bytes on the wire, at the
// sender (measure, encode_gathered) and at the receiver (decode).
BOOST_AUTO_TEST_CASE(traffic_of_a_message_that_packs_well_sums_to_its_wire_bytes) {
  std::mt19937_64 rng(35);
  owned_sparse part = random_sparse(rng, 61706, 600, value_type::float16);
  std::fill(part.values.begin(), part.values.end(), uint8_t{0});
  weights w;
  w.sparse = {part.part};
  w.gossip_weight = 0.5;
  w.iteration = 3;
  auto e = wrap(w, "p0");
  BOOST_REQUIRE(goes_packed(e));
  const auto bytes = encode(e);
  const message_size size = measure(e);
  BOOST_TEST(size.wire == bytes.size());
  BOOST_TEST(encode_gathered(e, nullptr).sizes().wire == bytes.size());
  BOOST_TEST(encode_gathered(e, nullptr).sizes().unpacked == size.unpacked);
  // The case that made a metrics row's parts exceed its bytes.
  BOOST_TEST(part.part.value_bytes + part.part.index_bytes + 8 > bytes.size());
  traffic sent = traffic_of(w, size);
  BOOST_TEST(sent.total() == bytes.size());
  BOOST_TEST(sent.values == part.part.value_bytes);
  BOOST_TEST(sent.indices == part.part.index_bytes);
  BOOST_TEST(sent.packing_saved > static_cast<int64_t>(sent.headers));
  // The receiver counts the same from the bytes it took.
  message_size got_size;
  auto got = decode(bytes, cluster, &got_size);
  BOOST_TEST(got_size.wire == size.wire);
  BOOST_TEST(got_size.unpacked == size.unpacked);
  traffic received = traffic_of(std::get<weights>(got.payload), got_size);
  BOOST_TEST((received == sent));
  // Random values barely pack: packing may then cost (its marker and tags),
  // and the count still adds up.
  owned_sparse noisy = random_sparse(rng, 61706, 600, value_type::float32);
  weights n;
  n.sparse = {noisy.part};
  auto ne = wrap(n, "p0");
  traffic t = traffic_of(n, measure(ne));
  BOOST_TEST(t.total() == encode(ne).size());
  // A message that does not go packed decodes with its own size twice.
  owned_tensor dense = random_tensor(rng, "t", dtype::float32, {16});
  weights d;
  d.tensors = {dense.view};
  auto db = encode(wrap(d));
  message_size dd;
  decode(db, cluster, &dd);
  BOOST_TEST(dd.wire == db.size());
  BOOST_TEST(dd.unpacked == db.size());
}

BOOST_AUTO_TEST_CASE(foreign_cluster_is_refused) {
  std::vector<char> buffer = encode(envelope{header{"cluster-a", protocol_version, "p0"}, plan{}, nullptr});
  try {
    decode(buffer, "cluster-b");
    BOOST_FAIL("a message of another cluster was accepted");
  } catch (const codec_error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("'cluster-a'") != std::string::npos, what);
    BOOST_TEST(what.find("'cluster-b'") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(other_protocol_version_is_refused) {
  std::vector<char> buffer =
      encode(envelope{header{cluster, protocol_version + 6, "p0"}, control{verb::stop, ""}, nullptr});
  try {
    decode(buffer, cluster);
    BOOST_FAIL("a message of another protocol version was accepted");
  } catch (const codec_error& e) {
    std::string what = e.what();
    BOOST_TEST(what.find("version " + std::to_string(protocol_version + 6)) != std::string::npos,
               what);
    BOOST_TEST(what.find("speaks " + std::to_string(protocol_version)) != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(empty_and_odd_sized_buffers_are_refused) {
  BOOST_CHECK_THROW(decode({}, cluster), codec_error);
  std::vector<char> buffer = sample_message();
  buffer.push_back(0);
  BOOST_CHECK_THROW(decode(buffer, cluster), codec_error);
}

BOOST_AUTO_TEST_CASE(trailing_bytes_are_refused) {
  std::vector<char> buffer = sample_message();
  buffer.resize(buffer.size() + 8);
  BOOST_CHECK_THROW(decode(buffer, cluster), codec_error);
}

BOOST_AUTO_TEST_CASE(every_prefix_is_refused) {
  std::mt19937_64 rng(7);
  owned_tensor t = random_tensor(rng, "t", dtype::float32, {6});
  weights dense;
  dense.tensors = {t.view};
  owned_sparse part = random_sparse(rng, 61706, 185, value_type::sign);
  weights sparse;
  sparse.sparse = {part.part};
  // A packed hello, an unpacked dense message, a packed sparse one.
  for (const auto& full : {sample_message(), encode(wrap(dense)), encode(wrap(sparse))}) {
    BOOST_REQUIRE(decodes(full));
    for (size_t n = 0; n < full.size(); ++n) {
      std::vector<char> prefix(full.begin(), full.begin() + n);
      BOOST_TEST(!decodes(prefix), "prefix of " << n << " of " << full.size() << " bytes");
    }
  }
}

BOOST_AUTO_TEST_CASE(packed_only_without_dense_tensors) {
  std::mt19937_64 rng(8);
  owned_tensor t = random_tensor(rng, "t", dtype::float32, {16});
  owned_sparse part = random_sparse(rng, 61706, 185, value_type::sign);
  weights dense, sparse, mixed;
  dense.tensors = {t.view};
  sparse.sparse = {part.part};
  mixed.tensors = {t.view};
  mixed.sparse = {part.part};
  BOOST_TEST(!goes_packed(wrap(dense)));
  BOOST_TEST(!goes_packed(wrap(mixed)));
  BOOST_TEST(goes_packed(wrap(sparse)));
  BOOST_TEST(goes_packed(wrap(plan{})));
  BOOST_TEST(goes_packed(wrap(control{verb::stop, ""})));
  auto dense_bytes = encode(wrap(dense));
  BOOST_TEST(dense_bytes.size() % 8 == 0u);
  BOOST_TEST(static_cast<unsigned char>(dense_bytes[0]) != packed_marker[0]);
  BOOST_TEST(decode(dense_bytes, cluster).storage == nullptr);
  // A Sparse-Push message of LeNet-5 at density 0.003 (185 entries, sign
  // values): the envelope, weight and framing around the part's bytes,
  // unpacked about 200 bytes, packed well under 120.
  sparse.gossip_weight = 0.0123;
  sparse.epoch = 7;
  sparse.iteration = 812;
  sparse.rate = 1;
  sparse.edge_seq = 271;
  sparse.generation = 0x9e3779b97f4a7c15ull;
  auto sparse_bytes = encode(wrap(sparse, "platform-3"));
  traffic split = traffic_of(sparse, measure(wrap(sparse, "platform-3")));
  BOOST_TEST(split.total() == sparse_bytes.size());
  const int64_t packed_headers = static_cast<int64_t>(split.headers) - split.packing_saved;
  BOOST_TEST(packed_headers < 120, packed_headers << " header bytes after packing");
  BOOST_TEST(split.packing_saved > 0);
  BOOST_TEST_MESSAGE("packed sparse message: " << sparse_bytes.size() << " bytes, of which "
                                               << split.headers << " headers unpacked, "
                                               << split.packing_saved << " saved by packing");
}

BOOST_AUTO_TEST_CASE(malformed_packed_messages_are_refused) {
  auto refusal = [](const std::vector<char>& buffer) {
    try {
      decode(buffer, cluster);
    } catch (const codec_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::vector<char> marker(std::begin(packed_marker), std::end(packed_marker));
  BOOST_TEST(refusal(marker).find("nothing after the marker") != std::string::npos);
  // Trailing bytes after a whole packed message.
  std::vector<char> full = sample_message();
  BOOST_REQUIRE(decodes(full));
  auto trailing = full;
  trailing.push_back(1);
  BOOST_TEST(!refusal(trailing).empty());
  trailing = full;
  trailing.insert(trailing.end(), {0, 0});  // one more zero word: not the segment's size
  BOOST_TEST(refusal(trailing).find("follow the message") != std::string::npos, refusal(trailing));
  // A few bytes that unpack to far more (runs of zero words): refused
  // before anything is allocated for them, beyond the message limit and
  // beyond 64 times their size.
  std::vector<char> bomb = marker;
  for (size_t i = 0; i < (max_message_bytes / 8) / 256 + 1; ++i)
    bomb.insert(bomb.end(), {0, static_cast<char>(0xFF)});  // 1 + 255 zero words
  BOOST_TEST(refusal(bomb).find("unpacks to more than the limit") != std::string::npos,
             refusal(bomb));
  std::vector<char> small_bomb = marker;
  for (size_t i = 0; i < 4096; ++i)  // 8 KiB that unpack to 8 MiB
    small_bomb.insert(small_bomb.end(), {0, static_cast<char>(0xFF)});
  BOOST_TEST(refusal(small_bomb).find("more than 64 times its size") != std::string::npos,
             refusal(small_bomb));
  // A real message that packs well still decodes: a sparse part of 20,000
  // sign values, all positive (zero bits), beside its indices.
  std::mt19937_64 draws(5);
  owned_sparse part = random_sparse(draws, 2000000, 20000, value_type::sign);
  std::fill(part.values.begin() + 6, part.values.end(), 0);  // after the three scales
  weights w;
  w.sparse = {part.part};
  auto packs_well = encode(wrap(w));
  BOOST_TEST(decodes(packs_well), refusal(packs_well));
  // Random bytes after the marker never crash.
  std::mt19937_64 rng(4321);
  for (int i = 0; i < 3000; ++i) {
    std::vector<char> buffer = marker;
    for (size_t n = 1 + rng() % 300; n > 0; --n)
      buffer.push_back(static_cast<char>(rng()));
    decodes(buffer);
  }
}

BOOST_AUTO_TEST_CASE(random_garbage_never_crashes) {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    std::vector<char> buffer(8 * (1 + rng() % 64));
    for (char& c : buffer) c = static_cast<char>(rng());
    if (i % 2) {  // a plausible segment table makes the parser go further
      uint32_t table[2] = {0, static_cast<uint32_t>(buffer.size() / 8 - 1)};
      std::memcpy(buffer.data(), table, sizeof table);
    }
    decodes(buffer);
  }
}

BOOST_AUTO_TEST_CASE(random_bit_flips_never_crash) {
  std::mt19937_64 rng(99);
  std::vector<owned_tensor> owned;
  owned.push_back(random_tensor(rng, "a", dtype::float32, {4, 4}));
  owned.push_back(random_tensor(rng, "b", dtype::uint8, {5}));
  weights w;
  for (auto& t : owned) w.tensors.push_back(t.view);
  epoch_report report;
  report.platform = "p0";
  report.received_from = {{"p1", 2, 300}};
  owned_sparse part = random_sparse(rng, 3000, 40, value_type::float16);
  weights sparse;
  sparse.sparse = {part.part};
  const std::vector<std::vector<char>> originals = {encode(wrap(w)), sample_message(),
                                                    encode(wrap(report)), encode(wrap(sparse))};
  int accepted = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<char> buffer = originals[i % originals.size()];
    for (uint64_t flips = 1 + rng() % 3; flips > 0; --flips) {
      size_t bit = rng() % (buffer.size() * 8);
      buffer[bit / 8] = static_cast<char>(buffer[bit / 8] ^ (1 << (bit % 8)));
    }
    accepted += decodes(buffer);
  }
  BOOST_TEST_MESSAGE(accepted << " of 4000 damaged messages still decoded");
}

BOOST_AUTO_TEST_CASE(oversized_buffers_are_refused) {
  std::vector<char> buffer(max_message_bytes + 8);
  try {
    decode(buffer, cluster);
    BOOST_FAIL("an oversized buffer was accepted");
  } catch (const codec_error& e) {
    BOOST_TEST(std::string(e.what()).find("exceeds") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()

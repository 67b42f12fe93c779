// links: eg_messages
#include "messages/codec.hpp"

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <limits>
#include <random>

using namespace eg::messages;

namespace {

const std::string cluster = "test-cluster";

envelope wrap(body b, std::string sender = "p0") {
  return envelope{header{cluster, protocol_version, std::move(sender)}, std::move(b)};
}

template <class T>
T round_trip(const T& b) {
  static std::vector<char> buffer;  // decoded tensor views point into it
  buffer = encode(wrap(b));
  envelope e = decode(buffer, cluster);
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
  hello h{"node-a", "digest", {{role::platform, "p0", "node-a"}, {role::mixer, "p0", "node-a"}}, 0, "n", "c"};
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
  hello h{"node-b", "sha256:abc", {{role::node, "node-b", "node-b"}, {role::platform, "p3", "node-b"},
                                   {role::store, "node-b", "node-b"}}, 47000, "nonce-b", "nonce-a"};
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
  }
}

BOOST_AUTO_TEST_CASE(plan_round_trip) {
  plan p{7, 0.375, 12, {}, 0, 1};
  plan r = round_trip(p);
  BOOST_TEST(r.epoch == 7u);
  BOOST_TEST(r.ratio == 0.375);
  BOOST_TEST(r.last_epoch == 12u);
  BOOST_TEST(r.adopt.empty());
}

BOOST_AUTO_TEST_CASE(plan_with_adopted_shards_round_trip) {
  plan p{2, 0.5, 9, {"p3", "p7"}, 1, 3};
  plan r = round_trip(p);
  BOOST_TEST((r.adopt == std::vector<std::string>{"p3", "p7"}));
  BOOST_TEST(r.adopt_part == 1u);
  BOOST_TEST(r.adopt_parts == 3u);
  // A part beyond the number of parts is refused.
  plan bad{2, 0.5, 9, {"p3"}, 3, 3};
  auto buf = encode(envelope{header{"c", protocol_version, "b"}, bad});
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
  epoch_report r = round_trip(e);
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
  for (auto& t : owned) w.tensors.push_back(t.view);

  weights r = round_trip(w);
  BOOST_TEST(r.gossip_weight == w.gossip_weight);
  BOOST_TEST(r.rate == w.rate);
  BOOST_TEST(r.epoch == w.epoch);
  BOOST_TEST(r.iteration == w.iteration);
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

BOOST_AUTO_TEST_CASE(foreign_cluster_is_refused) {
  std::vector<char> buffer = encode(envelope{header{"cluster-a", protocol_version, "p0"}, plan{}});
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
      encode(envelope{header{cluster, protocol_version + 6, "p0"}, control{verb::stop, ""}});
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
  std::vector<char> full = sample_message();
  BOOST_REQUIRE(decodes(full));
  for (size_t n = 0; n < full.size(); n += 8) {
    std::vector<char> prefix(full.begin(), full.begin() + n);
    BOOST_TEST(!decodes(prefix), "prefix of " << n << " bytes");
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
  const std::vector<std::vector<char>> originals = {encode(wrap(w)), sample_message(),
                                                    encode(wrap(report))};
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

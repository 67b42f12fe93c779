#include "messages/codec.hpp"

#include "messages/edgegossip.capnp.h"

#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/serialize.h>
#include <capnp/serialize-packed.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <type_traits>

namespace eg::messages {

namespace {

constexpr uint8_t last_dtype = static_cast<uint8_t>(dtype::uint8);
constexpr uint8_t last_direction = static_cast<uint8_t>(stage_direction::infer);

/// Throws codec_error when a message of `bytes` bytes is over the limit.
void check_limit(size_t bytes) {
  if (bytes > max_message_bytes)
    throw codec_error("message of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                      std::to_string(max_message_bytes) + " bytes");
}

kj::StringPtr text(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }

std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

std::string describe_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Bytes a tensor of this shape and dtype must have; throws on negative
// dimensions and on sizes no message could carry (which also rules out overflow).
size_t expected_bytes(const std::string& name, const std::vector<int64_t>& shape, dtype t) {
  uint64_t n = element_size(t);
  for (int64_t d : shape) {
    if (d < 0)
      throw codec_error("tensor '" + name + "' has a negative dimension in shape " +
                        describe_shape(shape));
    if (d != 0 && n > max_message_bytes / static_cast<uint64_t>(d))
      throw codec_error("tensor '" + name + "' of shape " + describe_shape(shape) +
                        " is larger than a message may be");
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(n);
}

// --- encoding --------------------------------------------------------------------

// Tensors whose bytes can become message segments as they are (no copy).
bool can_reference(const tensor_view& v) {
  return v.bytes > 0 && v.bytes % sizeof(capnp::word) == 0 &&
         reinterpret_cast<uintptr_t>(v.data) % alignof(capnp::word) == 0;
}

// A first segment big enough for the whole message, so that copied tensor
// bytes and the small fields land in one segment.
uint64_t first_segment_words(const envelope& e) {
  uint64_t words = 1024;
  if (auto* tensors = tensors_of(e.payload))
    for (const tensor_view& v : *tensors) {
      words += 16 + v.name.size() / sizeof(capnp::word) + v.shape.size();
      if (!can_reference(v)) words += (v.bytes + sizeof(capnp::word) - 1) / sizeof(capnp::word);
    }
  if (auto* w = std::get_if<weights>(&e.payload)) {
    for (const sparse_part& p : w->sparse)
      words += 8 + (p.index_bytes + sizeof(capnp::word) - 1) / sizeof(capnp::word) +
               (p.value_bytes + sizeof(capnp::word) - 1) / sizeof(capnp::word);
  }
  return words;
}

void write_tensor(wire::Tensor::Builder out, const tensor_view& v, capnp::Orphanage orphanage) {
  if (static_cast<uint8_t>(v.type) > last_dtype)
    throw codec_error("tensor '" + v.name + "' has an unknown dtype " +
                      std::to_string(static_cast<int>(v.type)));
  size_t expected = expected_bytes(v.name, v.shape, v.type);
  if (v.bytes != expected)
    throw codec_error("tensor '" + v.name + "' has " + std::to_string(v.bytes) +
                      " bytes, its shape " + describe_shape(v.shape) + " needs " +
                      std::to_string(expected));
  if (v.bytes > 0 && v.data == nullptr)
    throw codec_error("tensor '" + v.name + "' has no data");
  out.setName(text(v.name));
  out.setDtype(static_cast<wire::DType>(v.type));
  auto shape = out.initShape(static_cast<unsigned>(v.shape.size()));
  for (unsigned i = 0; i < shape.size(); ++i) shape.set(i, v.shape[i]);
  if (v.bytes == 0) return;
  if (can_reference(v)) {
    // The caller's bytes become a segment; they are copied only when the
    // segments are written into the output buffer.
    out.adoptData(orphanage.referenceExternalData(
        capnp::Data::Reader(static_cast<const kj::byte*>(v.data), v.bytes)));
  } else {
    auto data = out.initData(static_cast<unsigned>(v.bytes));
    std::memcpy(data.begin(), v.data, v.bytes);
  }
}

template <class ListBuilder>
void write_tensors(ListBuilder out, const std::vector<tensor_view>& tensors,
                   capnp::Orphanage orphanage) {
  for (unsigned i = 0; i < out.size(); ++i) write_tensor(out[i], tensors[i], orphanage);
}

constexpr uint16_t last_index_coding = static_cast<uint16_t>(index_coding::rice);
constexpr uint16_t last_value_type = static_cast<uint16_t>(value_type::sign);

// The structure of sparse part `i` (what the codec checks on both sides;
// decode_indices() checks the indices themselves). `coding` and `type` are
// the raw enumerants.
void check_sparse(size_t i, uint64_t numel, uint64_t count, uint16_t coding, uint16_t type,
                  size_t index_bytes, size_t value_bytes) {
  auto problem = [i](const std::string& what) {
    return codec_error("sparse part " + std::to_string(i) + ": " + what);
  };
  if (coding > last_index_coding)
    throw problem("unknown index coding " + std::to_string(coding));
  if (type > last_value_type)
    throw problem("unknown value type " + std::to_string(type));
  if (numel > max_sparse_numel)
    throw problem("over " + std::to_string(numel) + " parameters, more than 32-bit indices reach");
  if (numel == 0 && count > 0)
    throw problem(std::to_string(count) + " entries over a model of no parameters");
  if (count > numel)
    throw problem(std::to_string(count) + " entries of " + std::to_string(numel) + " parameters");
  if (type == static_cast<uint16_t>(value_type::sign)) {
    // One scale for each tensor with entries: at least one when there are
    // entries, at most one an entry (the layout checks the exact number).
    const uint64_t least = sign_value_bytes(count, count > 0 ? 1 : 0),
                   most = sign_value_bytes(count, count);
    if (value_bytes < least || value_bytes > most)
      throw problem(std::to_string(value_bytes) + " value bytes for " + std::to_string(count) +
                    " sign values (" + std::to_string(least) + " to " + std::to_string(most) +
                    " expected)");
  } else {
    uint64_t values = count * element_size(static_cast<value_type>(type));
    if (value_bytes != values)
      throw problem(std::to_string(value_bytes) + " value bytes for " + std::to_string(count) +
                    " values of " + std::to_string(element_size(static_cast<value_type>(type))) +
                    " bytes");
  }
  if (coding == static_cast<uint16_t>(index_coding::fixed_bits)) {
    size_t expected = fixed_index_bytes(static_cast<size_t>(count), numel);
    if (index_bytes != expected)
      throw problem(std::to_string(index_bytes) + " index bytes for " + std::to_string(count) +
                    " fixed-width indices (" + std::to_string(expected) + " expected)");
  } else if (coding == static_cast<uint16_t>(index_coding::rice)) {
    // The parameter's byte, then per entry 1 + b <= 32 bits besides the
    // quotients' ones, which add up to at most numel.
    const uint64_t most = 1 + (numel + 32 * count + 7) / 8;
    if (index_bytes < 1 || index_bytes > most)
      throw problem(std::to_string(index_bytes) + " index bytes for " + std::to_string(count) +
                    " rice-coded indices of " + std::to_string(numel) + " (1 to " +
                    std::to_string(most) + " expected)");
  } else if (index_bytes < count || index_bytes > 5 * count) {
    // Each varint has 1 to 5 bytes.
    throw problem(std::to_string(index_bytes) + " index bytes for " + std::to_string(count) +
                  " varint indices (" + std::to_string(count) + " to " +
                  std::to_string(5 * count) + " expected)");
  }
}

void write_sparse(wire::SparsePart::Builder out, const sparse_part& p, size_t i) {
  check_sparse(i, p.numel, p.count, static_cast<uint16_t>(p.coding),
               static_cast<uint16_t>(p.values), p.index_bytes, p.value_bytes);
  if ((p.index_bytes > 0 && p.indices == nullptr) || (p.value_bytes > 0 && p.value_data == nullptr))
    throw codec_error("sparse part " + std::to_string(i) + " has no data");
  out.setLayout(p.layout);
  out.setNumel(p.numel);
  out.setCount(p.count);
  out.setCoding(static_cast<wire::IndexCoding>(p.coding));
  out.setValueType(static_cast<wire::ValueType>(p.values));
  // Small next to dense tensors: copied into the message.
  if (p.index_bytes > 0)
    std::memcpy(out.initIndices(static_cast<unsigned>(p.index_bytes)).begin(), p.indices,
                p.index_bytes);
  if (p.value_bytes > 0)
    std::memcpy(out.initValues(static_cast<unsigned>(p.value_bytes)).begin(), p.value_data,
                p.value_bytes);
}

void write_traffic(wire::Traffic::Builder out, const traffic& t) {
  out.setValues(t.values);
  out.setIndices(t.indices);
  out.setWeights(t.weights);
  out.setHeaders(t.headers);
  out.setPackingSaved(t.packing_saved);
}

traffic read_traffic(wire::Traffic::Reader in) {
  return traffic{in.getValues(), in.getIndices(), in.getWeights(), in.getHeaders(),
                 in.getPackingSaved()};
}

// Large buffers are fresh memory for every message (glibc maps blocks over
// 32 MiB anew each time), and first-touch page faults of 4 KiB pages cost
// more than the copy itself (bench transport, perf): ask for transparent huge
// pages where the kernel gives them on request. Advice only; errors ignored.
void ask_for_huge_pages(void* data, size_t bytes) {
  constexpr uintptr_t huge = uintptr_t{2} << 20;
  if (bytes < 2 * huge)
    return;
  auto begin = (reinterpret_cast<uintptr_t>(data) + huge - 1) & ~(huge - 1);
  auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(huge - 1);
  if (end > begin)
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Appends what capnp::writeMessage writes to a vector of reserved capacity.
class append_stream final : public kj::OutputStream {
public:
  explicit append_stream(std::vector<char>& out) : out_(out) {}
  void write(const void* buffer, size_t size) override {
    auto p = static_cast<const char*>(buffer);
    out_.insert(out_.end(), p, p + size);
  }

private:
  std::vector<char>& out_;
};

struct body_writer {
  wire::Envelope::Body::Builder body;
  capnp::Orphanage orphanage;

  void operator()(const weights& w) {
    auto out = body.initWeights();
    out.setGossipWeight(w.gossip_weight);
    out.setRate(w.rate);
    out.setEpoch(w.epoch);
    out.setIteration(w.iteration);
    out.setEdgeSeq(w.edge_seq);
    out.setGeneration(w.generation);
    out.setKeyframe(w.keyframe);
    out.setWithdrawn(w.withdrawn);
    out.setKeyframeRequest(w.keyframe_request);
    write_tensors(out.initTensors(static_cast<unsigned>(w.tensors.size())), w.tensors, orphanage);
    if (!w.sparse.empty()) {
      auto sparse = out.initSparse(static_cast<unsigned>(w.sparse.size()));
      for (unsigned i = 0; i < sparse.size(); ++i) write_sparse(sparse[i], w.sparse[i], i);
    }
  }
  void operator()(const commit& c) {
    auto out = body.initCommit();
    out.setNumber(c.number);
    write_tensors(out.initTensors(static_cast<unsigned>(c.tensors.size())), c.tensors, orphanage);
  }
  void operator()(const global_model& m) {
    auto out = body.initGlobalModel();
    out.setVersion(m.version);
    write_tensors(out.initTensors(static_cast<unsigned>(m.tensors.size())), m.tensors, orphanage);
  }
  void operator()(const stage_batch& b) {
    if (static_cast<uint8_t>(b.direction) > last_direction)
      throw codec_error("stage batch " + std::to_string(b.batch) + " has an unknown direction " +
                        std::to_string(static_cast<int>(b.direction)));
    auto out = body.initStageBatch();
    out.setDirection(static_cast<wire::StageDirection>(b.direction));
    out.setBatch(b.batch);
    out.setLast(b.last);
    write_tensors(out.initTensors(static_cast<unsigned>(b.tensors.size())), b.tensors, orphanage);
  }
  void operator()(const hello& h) {
    auto out = body.initHello();
    out.setNode(text(h.node));
    out.setSecretDigest(text(h.secret_digest));
    out.setLanePort(h.lane_port);
    out.setNonce(text(h.nonce));
    out.setChallenge(text(h.challenge));
    auto components = out.initComponents(static_cast<unsigned>(h.components.size()));
    for (unsigned i = 0; i < components.size(); ++i) {
      components[i].setRole(to_string(h.components[i].role));
      components[i].setName(text(h.components[i].name));
      components[i].setNode(text(h.components[i].node));
      components[i].setData(text(h.components[i].data));
      components[i].setSamples(h.components[i].samples);
      components[i].setStats(text(h.components[i].stats));
      components[i].setRun(text(h.components[i].run));
    }
  }
  void operator()(const plan& p) {
    auto out = body.initPlan();
    out.setEpoch(p.epoch);
    out.setRatio(p.ratio);
    out.setLastEpoch(p.last_epoch);
    auto adopt = out.initAdopt(static_cast<unsigned>(p.adopt.size()));
    for (unsigned i = 0; i < adopt.size(); ++i)
      adopt.set(i, text(p.adopt[i]));
    out.setAdoptPart(p.adopt_part);
    out.setAdoptParts(p.adopt_parts);
    out.setRounds(p.rounds);
  }
  void operator()(const prediction& p) {
    auto out = body.initPrediction();
    out.setPlatform(text(p.platform));
    out.setThroughput(p.throughput);
    out.setSecondsPerPoint(p.seconds_per_point);
    out.setT0(p.t0);
    out.setCore(p.core);
    out.setNet(p.net);
    out.setDisk(p.disk);
    out.setWait(p.wait);
    out.setObservations(p.observations);
    out.setSendSecondsPerByte(p.send_seconds_per_byte);
    out.setReceiveSecondsPerByte(p.receive_seconds_per_byte);
  }
  void operator()(const epoch_report& r) {
    auto out = body.initEpochReport();
    out.setPlatform(text(r.platform));
    out.setNode(text(r.node));
    out.setEpoch(r.epoch);
    out.setRatio(r.ratio);
    out.setWallSeconds(r.wall_seconds);
    out.setComputeSeconds(r.compute_seconds);
    out.setSamples(r.samples);
    out.setPlannedSamples(r.planned_samples);
    out.setIterations(r.iterations);
    out.setTrainLoss(r.train_loss);
    out.setTestLoss(r.test_loss);
    out.setTestAccuracy(r.test_accuracy);
    out.setGossipWeight(r.gossip_weight);
    out.setBytesSent(r.bytes_sent);
    out.setBytesReceived(r.bytes_received);
    out.setMessagesSent(r.messages_sent);
    out.setMessagesReceived(r.messages_received);
    out.setMessagesRefused(r.messages_refused);
    out.setPredictedSeconds(r.predicted_seconds);
    out.setCommits(r.commits);
    out.setStaleness(r.staleness);
    out.setServerVersion(r.server_version);
    out.setRollbacks(r.rollbacks);
    out.setLinkBytesSent(r.link.bytes_sent);
    out.setLinkSendSeconds(r.link.send_seconds);
    out.setLinkBytesReceived(r.link.bytes_received);
    out.setLinkReceiveSeconds(r.link.receive_seconds);
    auto classes = out.initClassSamples(static_cast<unsigned>(r.class_samples.size()));
    for (unsigned i = 0; i < classes.size(); ++i)
      classes.set(i, r.class_samples[i]);
    auto from = out.initReceivedFrom(static_cast<unsigned>(r.received_from.size()));
    for (unsigned i = 0; i < from.size(); ++i) {
      from[i].setPeer(text(r.received_from[i].peer));
      from[i].setMessages(r.received_from[i].messages);
      from[i].setBytes(r.received_from[i].bytes);
    }
    write_traffic(out.initTrafficSent(), r.sent);
    write_traffic(out.initTrafficReceived(), r.received);
  }
  void operator()(const control& c) {
    auto out = body.initControl();
    out.setCommand(to_string(c.verb));
    out.setArgument(text(c.argument));
  }
};

// --- decoding --------------------------------------------------------------------

// Decoded tensor bytes point into `base` (the buffer the caller passed), at the
// offset they have in the words that were parsed (the same bytes, or an aligned copy).
struct body_reader {
  const char* parsed;
  const char* base;

  const uint8_t* point_into(const kj::byte* p) const {
    return reinterpret_cast<const uint8_t*>(base + (reinterpret_cast<const char*>(p) - parsed));
  }

  std::vector<tensor_view> read_tensors(capnp::List<wire::Tensor>::Reader tensors) const {
    std::vector<tensor_view> out;
    out.reserve(tensors.size());
    for (auto t : tensors) {
      tensor_view v;
      v.name = str(t.getName());
      auto type = static_cast<uint16_t>(t.getDtype());
      if (type > last_dtype)
        throw codec_error("tensor '" + v.name + "' has an unknown dtype " + std::to_string(type));
      v.type = static_cast<dtype>(type);
      auto shape = t.getShape();
      v.shape.reserve(shape.size());
      for (int64_t d : shape) v.shape.push_back(d);
      auto data = t.getData();
      size_t expected = expected_bytes(v.name, v.shape, v.type);
      if (data.size() != expected)
        throw codec_error("tensor '" + v.name + "' carries " + std::to_string(data.size()) +
                          " bytes, its shape " + describe_shape(v.shape) + " needs " +
                          std::to_string(expected));
      v.bytes = data.size();
      if (v.bytes > 0) v.data = base + (reinterpret_cast<const char*>(data.begin()) - parsed);
      out.push_back(std::move(v));
    }
    return out;
  }

  weights operator()(wire::Weights::Reader in) const {
    weights w;
    w.gossip_weight = in.getGossipWeight();
    w.rate = in.getRate();
    w.epoch = in.getEpoch();
    w.iteration = in.getIteration();
    w.edge_seq = in.getEdgeSeq();
    w.generation = in.getGeneration();
    w.keyframe = in.getKeyframe();
    w.withdrawn = in.getWithdrawn();
    w.keyframe_request = in.getKeyframeRequest();
    w.tensors = read_tensors(in.getTensors());
    auto sparse = in.getSparse();
    w.sparse.reserve(sparse.size());
    for (auto sp : sparse) {
      sparse_part p;
      auto indices = sp.getIndices();
      auto values = sp.getValues();
      check_sparse(w.sparse.size(), sp.getNumel(), sp.getCount(),
                   static_cast<uint16_t>(sp.getCoding()), static_cast<uint16_t>(sp.getValueType()),
                   indices.size(), values.size());
      p.layout = sp.getLayout();
      p.numel = sp.getNumel();
      p.count = sp.getCount();
      p.coding = static_cast<index_coding>(sp.getCoding());
      p.values = static_cast<value_type>(sp.getValueType());
      p.index_bytes = indices.size();
      if (p.index_bytes > 0) p.indices = point_into(indices.begin());
      p.value_bytes = values.size();
      if (p.value_bytes > 0) p.value_data = point_into(values.begin());
      w.sparse.push_back(p);
    }
    return w;
  }
  commit operator()(wire::Commit::Reader in) const {
    return commit{in.getNumber(), read_tensors(in.getTensors())};
  }
  global_model operator()(wire::GlobalModel::Reader in) const {
    return global_model{in.getVersion(), read_tensors(in.getTensors())};
  }
  stage_batch operator()(wire::StageBatch::Reader in) const {
    const auto direction = static_cast<uint16_t>(in.getDirection());
    if (direction > last_direction)
      throw codec_error("stage batch " + std::to_string(in.getBatch()) +
                        " has an unknown direction " + std::to_string(direction));
    return stage_batch{static_cast<stage_direction>(direction), in.getBatch(),
                       read_tensors(in.getTensors()), in.getLast()};
  }
  hello operator()(wire::Hello::Reader in) const {
    hello h;
    h.node = str(in.getNode());
    h.secret_digest = str(in.getSecretDigest());
    for (auto c : in.getComponents())
      h.components.push_back({parse_role(str(c.getRole())), str(c.getName()), str(c.getNode()),
                              str(c.getData()), c.getSamples(), str(c.getStats()),
                              str(c.getRun())});
    h.lane_port = in.getLanePort();
    h.nonce = str(in.getNonce());
    h.challenge = str(in.getChallenge());
    return h;
  }
  plan operator()(wire::Plan::Reader in) const {
    plan p;
    p.epoch = in.getEpoch();
    p.ratio = in.getRatio();
    p.last_epoch = in.getLastEpoch();
    for (auto a : in.getAdopt())
      p.adopt.push_back(str(a));
    p.adopt_part = in.getAdoptPart();
    p.adopt_parts = in.getAdoptParts();
    p.rounds = in.getRounds();
    if (p.adopt_parts == 0 || p.adopt_part >= p.adopt_parts)
      throw codec_error("plan adopts part " + std::to_string(p.adopt_part) + " of "
                        + std::to_string(p.adopt_parts));
    return p;
  }
  prediction operator()(wire::Prediction::Reader in) const {
    prediction p;
    p.platform = str(in.getPlatform());
    p.throughput = in.getThroughput();
    p.seconds_per_point = in.getSecondsPerPoint();
    p.t0 = in.getT0();
    p.core = in.getCore();
    p.net = in.getNet();
    p.disk = in.getDisk();
    p.wait = in.getWait();
    p.observations = in.getObservations();
    p.send_seconds_per_byte = in.getSendSecondsPerByte();
    p.receive_seconds_per_byte = in.getReceiveSecondsPerByte();
    return p;
  }
  epoch_report operator()(wire::EpochReport::Reader in) const {
    epoch_report r;
    r.platform = str(in.getPlatform());
    r.node = str(in.getNode());
    r.epoch = in.getEpoch();
    r.ratio = in.getRatio();
    r.wall_seconds = in.getWallSeconds();
    r.compute_seconds = in.getComputeSeconds();
    r.samples = in.getSamples();
    r.planned_samples = in.getPlannedSamples();
    r.iterations = in.getIterations();
    r.train_loss = in.getTrainLoss();
    r.test_loss = in.getTestLoss();
    r.test_accuracy = in.getTestAccuracy();
    r.gossip_weight = in.getGossipWeight();
    r.bytes_sent = in.getBytesSent();
    r.bytes_received = in.getBytesReceived();
    r.messages_sent = in.getMessagesSent();
    r.messages_received = in.getMessagesReceived();
    r.messages_refused = in.getMessagesRefused();
    r.predicted_seconds = in.getPredictedSeconds();
    r.commits = in.getCommits();
    r.staleness = in.getStaleness();
    r.server_version = in.getServerVersion();
    r.rollbacks = in.getRollbacks();
    r.link.bytes_sent = in.getLinkBytesSent();
    r.link.send_seconds = in.getLinkSendSeconds();
    r.link.bytes_received = in.getLinkBytesReceived();
    r.link.receive_seconds = in.getLinkReceiveSeconds();
    for (auto n : in.getClassSamples())
      r.class_samples.push_back(n);
    for (auto p : in.getReceivedFrom())
      r.received_from.push_back({str(p.getPeer()), p.getMessages(), p.getBytes()});
    r.sent = read_traffic(in.getTrafficSent());
    r.received = read_traffic(in.getTrafficReceived());
    return r;
  }
  control operator()(wire::Control::Reader in) const {
    return control{parse_verb(str(in.getCommand())), str(in.getArgument())};
  }
};

body read_body(wire::Envelope::Body::Reader in, const body_reader& read) {
  switch (in.which()) {
    case wire::Envelope::Body::WEIGHTS: return read(in.getWeights());
    case wire::Envelope::Body::HELLO: return read(in.getHello());
    case wire::Envelope::Body::PLAN: return read(in.getPlan());
    case wire::Envelope::Body::EPOCH_REPORT: return read(in.getEpochReport());
    case wire::Envelope::Body::CONTROL: return read(in.getControl());
    case wire::Envelope::Body::PREDICTION: return read(in.getPrediction());
    case wire::Envelope::Body::COMMIT: return read(in.getCommit());
    case wire::Envelope::Body::GLOBAL_MODEL: return read(in.getGlobalModel());
    case wire::Envelope::Body::STAGE_BATCH: return read(in.getStageBatch());
  }
  throw codec_error("unknown message body type " + std::to_string(static_cast<int>(in.which())));
}

} // namespace

namespace {
constexpr const char* role_names[] = {"node",     "platform", "mixer",            "predictor",
                                      "balancer", "store",    "parameter_server", "stage",
                                      "tester"};
constexpr const char* verb_names[] = {"pause",    "resume",  "checkpoint", "stop",
                                      "snapshot", "history", "refuse"};
constexpr const char* direction_names[] = {"forward", "backward", "infer"};

template <class Enum, size_t N>
Enum parse_name(const char* const (&names)[N], const std::string& name, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i])
      return static_cast<Enum>(i);
  std::string known;
  for (size_t i = 0; i < N; ++i)
    known += (i ? ", " : "") + std::string{names[i]};
  throw codec_error("unknown " + std::string{what} + " '" + name + "' (known: " + known + ")");
}
} // namespace

const char* to_string(role r) { return role_names[static_cast<size_t>(r)]; }
role parse_role(const std::string& name) { return parse_name<role>(role_names, name, "role"); }
const char* to_string(verb v) { return verb_names[static_cast<size_t>(v)]; }
verb parse_verb(const std::string& name) { return parse_name<verb>(verb_names, name, "verb"); }
const char* to_string(stage_direction d) {
  const auto i = static_cast<size_t>(d);
  return i < std::size(direction_names) ? direction_names[i] : "unknown";
}

const std::vector<tensor_view>* tensors_of(const body& b) {
  return std::visit(
    [](const auto& x) -> const std::vector<tensor_view>* {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, weights> || std::is_same_v<T, commit> ||
                    std::is_same_v<T, global_model> || std::is_same_v<T, stage_batch>)
        return &x.tensors;
      else
        return nullptr;
    },
    b);
}

namespace {

constexpr size_t aligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/// Lays out copies of pieces in one buffer, each 64-byte aligned.
class copy_place {
public:
  explicit copy_place(size_t total) : storage_(std::make_shared<buffer>(total)) {}
  const char* operator()(const void* from, size_t bytes) {
    char* to = storage_->data() + at_;
    if (bytes)
      std::memcpy(to, from, bytes);
    at_ += aligned64(bytes);
    return to;
  }
  std::shared_ptr<buffer> storage() && { return std::move(storage_); }

private:
  std::shared_ptr<buffer> storage_;
  size_t at_ = 0;
};

size_t tensor_bytes_aligned(const std::vector<tensor_view>& tensors) {
  size_t total = 0;
  for (auto& t : tensors)
    total += aligned64(t.bytes);
  return total;
}

/// A copy of a held message whose only views are its tensors.
template <class Body>
held<Body> copy_tensors(const held<Body>& x) {
  held<Body> out{x.sender, x.value, nullptr, x.wire_bytes, x.unpacked_bytes};
  copy_place place(tensor_bytes_aligned(x.value.tensors));
  for (auto& t : out.value.tensors)
    t.data = place(t.data, t.bytes);
  out.hold = std::move(place).storage();
  return out;
}

/// Tensor bytes are values, the rest headers.
traffic tensor_traffic(const std::vector<tensor_view>& tensors, message_size size) {
  traffic t;
  for (auto& v : tensors)
    t.values += v.bytes;
  if (size.unpacked < t.values)
    throw codec_error("a message of " + std::to_string(size.unpacked) +
                      " unpacked bytes cannot hold its own " + std::to_string(t.values) +
                      " bytes of tensors");
  t.headers = size.unpacked - t.values;
  t.packing_saved = static_cast<int64_t>(size.unpacked) - static_cast<int64_t>(size.wire);
  return t;
}

} // namespace

held_weights copy_held(const held_weights& w) {
  size_t total = tensor_bytes_aligned(w.value.tensors);
  for (auto& p : w.value.sparse)
    total += aligned64(p.index_bytes) + aligned64(p.value_bytes);
  copy_place place(total);
  held_weights out{w.sender, w.value, nullptr, w.wire_bytes, w.unpacked_bytes};
  for (auto& t : out.value.tensors)
    t.data = place(t.data, t.bytes);
  for (auto& p : out.value.sparse) {
    p.indices = p.index_bytes ? reinterpret_cast<const uint8_t*>(place(p.indices, p.index_bytes))
                              : nullptr;
    p.value_data = p.value_bytes
                       ? reinterpret_cast<const uint8_t*>(place(p.value_data, p.value_bytes))
                       : nullptr;
  }
  out.hold = std::move(place).storage();
  return out;
}
held_commit copy_held(const held_commit& c) { return copy_tensors(c); }
held_global_model copy_held(const held_global_model& m) { return copy_tensors(m); }
held_stage_batch copy_held(const held_stage_batch& b) { return copy_tensors(b); }

traffic traffic_of(const commit& c, message_size size) { return tensor_traffic(c.tensors, size); }
traffic traffic_of(const global_model& m, message_size size) {
  return tensor_traffic(m.tensors, size);
}

uint64_t traffic::total() const {
  return static_cast<uint64_t>(static_cast<int64_t>(values + indices + weights + headers) -
                               packing_saved);
}

traffic& traffic::operator+=(const traffic& o) {
  values += o.values;
  indices += o.indices;
  weights += o.weights;
  headers += o.headers;
  packing_saved += o.packing_saved;
  return *this;
}

bool operator==(const traffic& a, const traffic& b) {
  return a.values == b.values && a.indices == b.indices && a.weights == b.weights &&
         a.headers == b.headers && a.packing_saved == b.packing_saved;
}

traffic traffic_of(const weights& w, message_size size) {
  traffic t;
  for (auto& v : w.tensors)
    t.values += v.bytes;
  for (auto& p : w.sparse) {
    t.values += p.value_bytes;
    t.indices += p.index_bytes;
  }
  t.weights = sizeof w.gossip_weight;
  const uint64_t counted = t.values + t.indices + t.weights;
  if (size.unpacked < counted)
    throw codec_error("a message of " + std::to_string(size.unpacked) +
                      " unpacked bytes cannot hold its own " + std::to_string(counted) +
                      " bytes of values, indices and weight");
  t.headers = size.unpacked - counted;
  t.packing_saved = static_cast<int64_t>(size.unpacked) - static_cast<int64_t>(size.wire);
  return t;
}

size_t element_size(value_type t) {
  switch (t) {
    case value_type::float32: return 4;
    case value_type::float16: return 2;
    case value_type::float8: return 1;
    case value_type::sign:
      throw codec_error("sign values have no size of their own (a scale a tensor, a bit a value)");
  }
  throw codec_error("unknown value type " + std::to_string(static_cast<int>(t)));
}

size_t element_size(dtype t) {
  switch (t) {
    case dtype::float32: return 4;
    case dtype::float64: return 8;
    case dtype::int64: return 8;
    case dtype::int32: return 4;
    case dtype::uint8: return 1;
  }
  throw codec_error("unknown dtype " + std::to_string(static_cast<int>(t)));
}

namespace {

/// Builds the message of `e` and hands it, with its size in bytes, to
/// `write(message, bytes)`, which writes it out (and may keep the builder,
/// whose segments the message's pieces are).
template <class Write>
auto build_and_write(const envelope& e, Write write) {
  try {
    auto message = std::make_shared<capnp::MallocMessageBuilder>(static_cast<unsigned>(
        std::min<uint64_t>(first_segment_words(e), max_message_bytes / sizeof(capnp::word))));
    auto root = message->initRoot<wire::Envelope>();
    root.setClusterId(text(e.hdr.cluster_id));
    root.setVersion(e.hdr.version);
    root.setSender(text(e.hdr.sender));
    std::visit(body_writer{root.initBody(), message->getOrphanage()}, e.payload);

    size_t bytes = capnp::computeSerializedSizeInWords(*message) * sizeof(capnp::word);
    check_limit(bytes);
    return write(message, bytes);
  } catch (const kj::Exception& ex) {
    throw codec_error(std::string("cannot encode message: ") + ex.getDescription().cStr());
  }
}

} // namespace

bool goes_packed(const envelope& e) {
  auto* tensors = tensors_of(e.payload);
  return !tensors || tensors->empty();
}

namespace {

/// The marker, then the packed message.
std::vector<char> pack(capnp::MessageBuilder& message) {
  std::vector<char> out(std::begin(packed_marker), std::end(packed_marker));
  append_stream stream{out};
  capnp::writePackedMessage(stream, message);
  check_limit(out.size());
  return out;
}

} // namespace

std::vector<char> encode(const envelope& e) {
  const bool packed = goes_packed(e);
  return build_and_write(e, [packed](const std::shared_ptr<capnp::MallocMessageBuilder>& message,
                                     size_t bytes) {
    if (packed)
      return pack(*message);
    // The segment table and the segments are appended straight to the
    // result, which is reserved but not zero-filled first (zeroing it cost a
    // whole extra pass over the message: bench transport).
    std::vector<char> out;
    out.reserve(bytes);
    ask_for_huge_pages(out.data(), bytes);
    append_stream stream{out};
    capnp::writeMessage(stream, *message);
    if (out.size() != bytes)
      throw codec_error("encoded " + std::to_string(out.size()) + " bytes, expected " +
                        std::to_string(bytes));
    return out;
  });
}

size_t wire_size(const envelope& e) { return measure(e).wire; }

message_size measure(const envelope& e) {
  const bool packed = goes_packed(e);
  return build_and_write(e, [packed](const std::shared_ptr<capnp::MallocMessageBuilder>& message,
                                     size_t bytes) {
    return message_size{packed ? pack(*message).size() : bytes, bytes};
  });
}

gathered encode_gathered(const envelope& e, std::shared_ptr<const void> hold) {
  const bool packed = goes_packed(e);
  return build_and_write(e, [&](const std::shared_ptr<capnp::MallocMessageBuilder>& message,
                                size_t bytes) {
    gathered g;
    g.unpacked_ = bytes;
    if (packed) {
      // Nothing to reference: the packed bytes are the one piece.
      g.packed_ = pack(*message);
      g.size_ = g.packed_.size();
      g.pieces_.push_back({g.packed_.data(), g.packed_.size()});
      g.hold_ = std::move(hold);
      return g;
    }
    g.size_ = bytes;
    auto segments = message->getSegmentsForOutput();
    // The segment table as capnp::writeMessage writes it: the count less
    // one, each segment's size in words, padded to a whole word.
    g.table_.assign((segments.size() + 2) & ~size_t{1}, 0);
    g.table_[0] = static_cast<uint32_t>(segments.size() - 1);
    for (size_t i = 0; i < segments.size(); ++i)
      g.table_[i + 1] = static_cast<uint32_t>(segments[i].size());
    g.pieces_.reserve(segments.size() + 1);
    g.pieces_.push_back({reinterpret_cast<const char*>(g.table_.data()),
                         g.table_.size() * sizeof(uint32_t)});
    for (auto s : segments)
      g.pieces_.push_back({reinterpret_cast<const char*>(s.begin()), s.size() * sizeof(capnp::word)});
    size_t total = 0;
    for (auto& p : g.pieces_)
      total += p.size;
    if (total != bytes)
      throw codec_error("gathered " + std::to_string(total) + " bytes, expected " +
                        std::to_string(bytes));
    g.builder_ = message;
    g.hold_ = std::move(hold);
    return g;
  });
}

buffer gathered::flatten() const {
  buffer out(size_);
  char* at = out.data();
  for (auto& p : pieces_) {
    std::memcpy(at, p.data, p.size);
    at += p.size;
  }
  return out;
}

envelope decode(const std::vector<char>& buffer, const std::string& cluster_id,
                message_size* measured) {
  return decode(buffer.data(), buffer.size(), cluster_id, measured);
}

namespace {

/// Reads the unpacked message of `words` words at `parsed` (8-byte
/// aligned); its views point to the same offsets from `base`.
envelope decode_words(const capnp::word* parsed, size_t words, const char* base,
                      const std::string& cluster_id) {
  try {
    capnp::ReaderOptions options;
    // Each part is read once, so a maximal message stays within twice its size.
    options.traversalLimitInWords = 2 * max_message_bytes / sizeof(capnp::word);
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(parsed, words), options);
    if (reader.getEnd() != parsed + words)
      throw codec_error("truncated or malformed message: " +
                        std::to_string((parsed + words - reader.getEnd()) * sizeof(capnp::word)) +
                        " bytes follow the message");
    auto root = reader.getRoot<wire::Envelope>();

    envelope e;
    e.hdr.version = root.getVersion();
    if (e.hdr.version != protocol_version)
      throw codec_error("peer speaks protocol version " + std::to_string(e.hdr.version) +
                        ", this node speaks " + std::to_string(protocol_version));
    e.hdr.cluster_id = str(root.getClusterId());
    if (e.hdr.cluster_id != cluster_id)
      throw codec_error("message from cluster '" + e.hdr.cluster_id +
                        "', this node belongs to '" + cluster_id + "'");
    e.hdr.sender = str(root.getSender());
    e.payload = read_body(root.getBody(),
                          body_reader{reinterpret_cast<const char*>(parsed), base});
    return e;
  } catch (const kj::Exception& ex) {
    throw codec_error(std::string("truncated or malformed message: ") +
                      ex.getDescription().cStr());
  }
}

/// A packed message (after the marker): unpacked into words of its own,
/// its size checked before anything is allocated for it. Two bytes of
/// packed zeros unpack to 2 KiB, so a small message could make the receiver
/// allocate a thousand times its size: a packed message may unpack to at
/// most max_packed_expansion times its size (or 1 MiB). What this codec
/// packs expands far less: its messages' bulk is index and value bytes,
/// which do not pack, and a keyframe's values are float16.
constexpr size_t max_packed_expansion = 64;

envelope decode_packed(const kj::byte* data, size_t size, const std::string& cluster_id,
                        message_size* measured) {
  auto packed = kj::arrayPtr(data, size);
  std::shared_ptr<kj::Array<capnp::word>> words;
  try {
    const size_t unpacked = capnp::computeUnpackedSizeInWords(packed);
    if (unpacked == 0)
      throw codec_error("truncated or malformed packed message: nothing after the marker");
    if (unpacked > max_message_bytes / sizeof(capnp::word))
      throw codec_error("packed message unpacks to more than the limit of " +
                        std::to_string(max_message_bytes) + " bytes");
    const size_t allowed = std::max<size_t>(size_t{1} << 20, max_packed_expansion * size);
    if (unpacked * sizeof(capnp::word) > allowed)
      throw codec_error("packed message of " + std::to_string(size) + " bytes unpacks to " +
                        std::to_string(unpacked * sizeof(capnp::word)) + " bytes, more than " +
                        std::to_string(max_packed_expansion) + " times its size");
    words = std::make_shared<kj::Array<capnp::word>>(kj::heapArray<capnp::word>(unpacked));
    kj::ArrayInputStream in(packed);
    capnp::_::PackedInputStream unpack(in);
    unpack.read(words->begin(), unpacked * sizeof(capnp::word));
    kj::byte after;
    if (in.tryRead(&after, 0, 1) != 0)  // nothing may follow
      throw codec_error("truncated or malformed packed message: bytes follow the message");
  } catch (const kj::Exception& ex) {
    throw codec_error(std::string("truncated or malformed packed message: ") +
                      ex.getDescription().cStr());
  }
  auto e = decode_words(words->begin(), words->size(),
                        reinterpret_cast<const char*>(words->begin()), cluster_id);
  // `size` is what follows the marker; the marker went on the wire too.
  if (measured)
    *measured = {size + sizeof(packed_marker), words->size() * sizeof(capnp::word)};
  e.storage = std::move(words);
  return e;
}

} // namespace

envelope decode(const char* data, size_t size, const std::string& cluster_id,
                message_size* measured) {
  if (size == 0) throw codec_error("empty message");
  check_limit(size);
  const auto* bytes = reinterpret_cast<const kj::byte*>(data);
  if (size >= sizeof(packed_marker) && bytes[0] == packed_marker[0] && bytes[1] == packed_marker[1])
    return decode_packed(bytes + sizeof(packed_marker), size - sizeof(packed_marker), cluster_id,
                         measured);
  if (size % sizeof(capnp::word) != 0)
    throw codec_error("truncated or malformed message: " + std::to_string(size) +
                      " bytes is not a whole number of 8-byte words");

  size_t words = size / sizeof(capnp::word);
  kj::Array<capnp::word> aligned;
  auto parsed = reinterpret_cast<const capnp::word*>(data);
  if (reinterpret_cast<uintptr_t>(parsed) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned.begin(), data, size);
    parsed = aligned.begin();
  }
  auto e = decode_words(parsed, words, data, cluster_id);
  if (measured)
    *measured = {size, size};
  return e;
}

} // namespace eg::messages

// Checkpoint records: "EGCK", uint32 format version, uint32 CRC-32 of the
// body (both little-endian), then the body, a Cap'n Proto Checkpoint message.
// The checksum catches torn or damaged records so that loading falls back to
// an older epoch instead of restoring garbage.

#include "storage/store.hpp"

#include "messages/edgegossip.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>
#include <zlib.h>

#include <cstring>

namespace eg::storage {

namespace {

namespace wire = eg::messages::wire;

constexpr char magic[4] = {'E', 'G', 'C', 'K'};
constexpr uint32_t format_version = 1;
constexpr size_t header_bytes = 12;

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

uint32_t crc(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(data), size));
}

capnp::Data::Reader bytes(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

std::string str(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

// The checkpoint in `record`, or nullopt with the reason in `problem`.
std::optional<checkpoint> parse_record(const std::string& record, std::string& problem) {
  if (record.size() < header_bytes) {
    problem = "record of " + std::to_string(record.size()) + " bytes is too short";
    return std::nullopt;
  }
  if (std::memcmp(record.data(), magic, sizeof magic) != 0) {
    problem = "not a checkpoint record (bad magic)";
    return std::nullopt;
  }
  if (uint32_t v = get_u32(record.data() + 4); v != format_version) {
    problem = "format version " + std::to_string(v) + " is not supported (this build reads " +
              std::to_string(format_version) + ")";
    return std::nullopt;
  }
  const char* body = record.data() + header_bytes;
  size_t body_bytes = record.size() - header_bytes;
  if (crc(body, body_bytes) != get_u32(record.data() + 8)) {
    problem = "checksum mismatch";
    return std::nullopt;
  }
  if (body_bytes % sizeof(capnp::word) != 0) {
    problem = "body of " + std::to_string(body_bytes) + " bytes is not whole 8-byte words";
    return std::nullopt;
  }
  // The body sits 12 bytes into the value: copy it to word-aligned memory.
  auto words = kj::heapArray<capnp::word>(body_bytes / sizeof(capnp::word));
  std::memcpy(words.begin(), body, body_bytes);
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 2 * words.size() + 1024;
    capnp::FlatArrayMessageReader reader(words, options);
    auto in = reader.getRoot<wire::Checkpoint>();
    checkpoint c;
    c.platform = str(in.getPlatform());
    c.epoch = in.getEpoch();
    c.iteration = in.getIteration();
    c.gossip_weight = in.getGossipWeight();
    c.model = str(in.getModel());
    c.optimizer = str(in.getOptimizer());
    return c;
  } catch (const kj::Exception& e) {
    problem = std::string("body does not parse: ") + e.getDescription().cStr();
    return std::nullopt;
  }
}

} // namespace

void save_checkpoint(store& s, const checkpoint& c) {
  const std::string k = key(c.platform, c.epoch);
  std::string record;
  try {
    // One segment for the whole record: both blobs plus the small fields.
    capnp::MallocMessageBuilder message(static_cast<unsigned>(
        (c.model.size() + c.optimizer.size() + c.platform.size()) / sizeof(capnp::word) + 64));
    auto out = message.initRoot<wire::Checkpoint>();
    out.setPlatform(kj::StringPtr(c.platform.c_str(), c.platform.size()));
    out.setEpoch(c.epoch);
    out.setIteration(c.iteration);
    out.setGossipWeight(c.gossip_weight);
    out.setModel(bytes(c.model));
    out.setOptimizer(bytes(c.optimizer));

    size_t body_bytes = capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word);
    record.resize(header_bytes + body_bytes);
    kj::ArrayOutputStream stream(
        kj::arrayPtr(reinterpret_cast<kj::byte*>(&record[header_bytes]), body_bytes));
    capnp::writeMessage(stream, message);
  } catch (const kj::Exception& e) {
    throw storage_error("cannot save checkpoint " + k + " in the store in '" + s.dir() +
                        "': " + e.getDescription().cStr());
  }
  std::memcpy(&record[0], magic, sizeof magic);
  put_u32(&record[4], format_version);
  put_u32(&record[8], crc(record.data() + header_bytes, record.size() - header_bytes));
  s.put(family::checkpoints, k, record);
}

std::optional<checkpoint> load_latest_checkpoint(const store& s, const std::string& platform,
                                                 std::vector<std::string>* problems) {
  // The trailing '/' keeps platform "p1" from matching the records of "p10".
  auto records = s.scan(family::checkpoints, platform + "/");
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    std::string problem;
    std::optional<checkpoint> c = parse_record(it->second, problem);
    if (c && c->platform != platform) {
      problem = "records platform '" + c->platform + "'";
      c.reset();
    }
    if (c) return c;
    if (problems) problems->push_back("checkpoint " + it->first + ": " + problem);
  }
  return std::nullopt;
}

} // namespace eg::storage

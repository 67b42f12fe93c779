// Checkpoint records: a Cap'n Proto Checkpoint message framed as "EGCK"
// (storage/record.hpp), so that loading falls back to an older epoch instead
// of restoring a damaged one.

#include "storage/store.hpp"

#include "storage/record.hpp"

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

constexpr char magic[5] = "EGCK";

using record::data;
using record::str;

// The checkpoint in `value`, or nullopt with the reason in `problem`.
std::optional<checkpoint> parse_record(const std::string& value, std::string& problem) {
  auto words = record::unframe(value, magic, "checkpoint", problem);
  if (!words)
    return std::nullopt;
  try {
    capnp::FlatArrayMessageReader reader(*words, record::reader_options(words->size()));
    auto in = reader.getRoot<wire::Checkpoint>();
    checkpoint c;
    c.platform = str(in.getPlatform());
    c.epoch = in.getEpoch();
    c.iteration = in.getIteration();
    c.gossip_weight = in.getGossipWeight();
    c.model = str(in.getModel());
    c.optimizer = str(in.getOptimizer());
    c.saved_unix = in.getSavedUnix();
    return c;
  } catch (const kj::Exception& e) {
    problem = std::string("body does not parse: ") + e.getDescription().cStr();
    return std::nullopt;
  }
}

} // namespace

void save_checkpoint(store& s, const checkpoint& c) {
  const std::string k = key(c.platform, c.epoch);
  std::string framed;
  try {
    // One segment for the whole record: both blobs plus the small fields.
    capnp::MallocMessageBuilder message(static_cast<unsigned>(
        (c.model.size() + c.optimizer.size() + c.platform.size()) / sizeof(capnp::word) + 64));
    auto out = message.initRoot<wire::Checkpoint>();
    out.setPlatform(kj::StringPtr(c.platform.c_str(), c.platform.size()));
    out.setEpoch(c.epoch);
    out.setIteration(c.iteration);
    out.setGossipWeight(c.gossip_weight);
    out.setModel(data(c.model));
    out.setOptimizer(data(c.optimizer));
    out.setSavedUnix(c.saved_unix > 0 ? c.saved_unix : unix_now());
    framed = record::frame(magic, message);
  } catch (const kj::Exception& e) {
    throw storage_error("cannot save checkpoint " + k + " in the store in '" + s.dir() +
                        "': " + e.getDescription().cStr());
  }
  s.put(family::checkpoints, k, framed);
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

void prune_checkpoints(store& s, const std::string& platform, size_t keep) {
  auto records = s.scan(family::checkpoints, platform + "/");
  for (size_t i = 0; i + keep < records.size(); ++i)
    s.erase(family::checkpoints, records[i].first);
}

} // namespace eg::storage

// Run-state records: a Cap'n Proto RunState message framed as "EGRS"
// (storage/record.hpp).

#include "storage/store.hpp"

#include "storage/record.hpp"

#include "messages/edgegossip.capnp.h"

#include <capnp/serialize.h>
#include <kj/exception.h>

#include <chrono>

namespace eg::storage {
namespace {

namespace wire = eg::messages::wire;

constexpr char magic[5] = "EGRS";

using record::data;
using record::str;

} // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string frame_run_state(const run_state& r) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<wire::RunState>();
  out.setFingerprint(r.fingerprint);
  out.setRun(r.run);
  out.setFinished(r.finished);
  out.setStartedUnix(r.started_unix);
  out.setNormalisation(r.norm);
  auto epochs = out.initEpochs(static_cast<unsigned>(r.epochs.size()));
  for (unsigned i = 0; i < r.epochs.size(); ++i) {
    auto& e = r.epochs[i];
    auto o = epochs[i];
    o.setEpoch(e.epoch);
    o.setElapsedSeconds(e.elapsed_seconds);
    o.setEpochSeconds(e.epoch_seconds);
    o.setSamples(e.samples);
    o.setAveragedLoss(e.averaged_loss);
    o.setAveragedAccuracy(e.averaged_accuracy);
    o.setPlatformsUp(e.platforms_up);
    o.setTrainingSeconds(e.training_seconds);
    o.setPredictionError(e.prediction_error);
    o.setWallSeconds(e.wall_seconds);
    o.setNetworkSeconds(e.network_seconds);
    o.setEvaluationSeconds(e.evaluation_seconds);
    auto tests = o.initTests(static_cast<unsigned>(e.tests.size()));
    for (unsigned k = 0; k < e.tests.size(); ++k) {
      tests[k].setNode(e.tests[k].node);
      tests[k].setCorrect(e.tests[k].correct);
      tests[k].setSamples(e.tests[k].samples);
      tests[k].setLoss(e.tests[k].loss);
    }
  }
  auto reports = out.initReports(static_cast<unsigned>(r.reports.size()));
  for (unsigned i = 0; i < r.reports.size(); ++i)
    reports.set(i, data(r.reports[i]));
  return record::frame(magic, message);
}

std::optional<run_state> parse_run_state(const std::string& value, std::string& problem) {
  auto words = record::unframe(value, magic, "run state", problem);
  if (!words)
    return std::nullopt;
  try {
    capnp::FlatArrayMessageReader reader(*words, record::reader_options(words->size()));
    auto in = reader.getRoot<wire::RunState>();
    run_state r;
    r.fingerprint = str(in.getFingerprint());
    r.run = str(in.getRun());
    r.finished = in.getFinished();
    r.started_unix = in.getStartedUnix();
    r.norm = str(in.getNormalisation());
    for (auto e : in.getEpochs()) {
      r.epochs.push_back(cluster_epoch{e.getEpoch(), e.getElapsedSeconds(), e.getEpochSeconds(),
                                       e.getSamples(), e.getAveragedLoss(),
                                       e.getAveragedAccuracy(), e.getPlatformsUp(),
                                       e.getTrainingSeconds(), e.getPredictionError(),
                                       e.getWallSeconds(), e.getNetworkSeconds(),
                                       e.getEvaluationSeconds(), {}});
      for (auto t : e.getTests())
        r.epochs.back().tests.push_back(
          {str(t.getNode()), t.getCorrect(), t.getSamples(), t.getLoss()});
    }
    for (auto d : in.getReports())
      r.reports.push_back(str(d));
    return r;
  } catch (const kj::Exception& e) {
    problem = std::string("body does not parse: ") + e.getDescription().cStr();
    return std::nullopt;
  }
}

std::optional<run_state> load_run_state(const store& s, std::string* problem) {
  auto value = s.get(family::runs, run_state_key);
  if (!value)
    return std::nullopt;
  std::string why;
  auto r = parse_run_state(*value, why);
  if (!r && problem)
    *problem = "run state in '" + s.dir() + "': " + why;
  return r;
}

std::string encode_report(const messages::epoch_report& r, const std::string& cluster_id) {
  messages::envelope e;
  e.hdr = {cluster_id, messages::protocol_version, r.platform};
  e.payload = r;
  auto bytes = messages::encode(e);
  return std::string(bytes.data(), bytes.size());
}

std::optional<messages::epoch_report> decode_report(std::string_view record,
                                                    const std::string& cluster_id,
                                                    std::string& problem) {
  try {
    auto env = messages::decode(record.data(), record.size(), cluster_id);
    if (auto* r = std::get_if<messages::epoch_report>(&env.payload))
      return std::move(*r);
    problem = "the record does not hold an epoch report";
  } catch (const messages::codec_error& e) {
    problem = e.what();
  }
  return std::nullopt;
}

} // namespace eg::storage

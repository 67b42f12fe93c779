#include "actors/report_files.hpp"
#include "common/error.hpp"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace eg::actors {

const char* platform_csv_header
  = "platform,node,epoch,ratio,wall_seconds,compute_seconds,samples,samples_per_second,"
    "iterations,train_loss,test_loss,test_accuracy,gossip_weight,bytes_sent,bytes_received,"
    "messages_sent,messages_received,messages_refused,peers_heard,heard_from,predicted_seconds,"
    "sent_values,sent_indices,sent_weights,sent_headers,sent_packing_saved,"
    "received_values,received_indices,received_weights,received_headers,"
    "received_packing_saved,link_bytes_sent,link_send_seconds,link_bytes_received,"
    "link_receive_seconds,rollbacks";

namespace {

std::ofstream open_for_writing(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    throw storage_failure("cannot write '" + path + "'");
  out.precision(6);
  out << std::fixed;
  return out;
}

/// Writes `path` whole or not at all: PATH.part first, renamed over PATH
/// once complete, so that neither a reader nor a run stopped mid-write
/// finds half a table (the tables are rewritten after every epoch).
template <class Body>
void write_whole(const std::string& path, Body&& body) {
  const auto part = path + ".part";
  {
    auto out = open_for_writing(part);
    body(out);
    out.flush();
    if (!out)
      throw storage_failure("cannot write '" + part + "'");
  }
  std::error_code ec;
  std::filesystem::rename(part, path, ec);
  if (ec)
    throw storage_failure("cannot replace '" + path + "': " + ec.message());
}

} // namespace

void write_platform_csv(const std::string& path,
                        const std::vector<messages::epoch_report>& reports) {
  write_whole(path, [&](std::ofstream& out) {
    out << platform_csv_header << '\n';
    for (auto& r : reports) {
      auto rate = r.wall_seconds > 0 ? static_cast<double>(r.samples) / r.wall_seconds : 0.0;
      out << r.platform << ',' << r.node << ',' << r.epoch << ',' << r.ratio << ','
          << r.wall_seconds << ',' << r.compute_seconds << ',' << r.samples << ',' << rate << ','
          << r.iterations << ',' << r.train_loss << ',' << r.test_loss << ',' << r.test_accuracy
          << ',' << r.gossip_weight << ',' << r.bytes_sent << ',' << r.bytes_received << ','
          << r.messages_sent << ',' << r.messages_received << ',' << r.messages_refused << ','
          << r.received_from.size() << ',';
      // Names of the peers heard from this epoch, separated by ';'.
      for (size_t i = 0; i < r.received_from.size(); ++i)
        out << (i ? ";" : "") << r.received_from[i].peer;
      out << ',' << r.predicted_seconds;
      for (auto* t : {&r.sent, &r.received})
        out << ',' << t->values << ',' << t->indices << ',' << t->weights << ',' << t->headers << ','
            << t->packing_saved;
      out << ',' << r.link.bytes_sent << ',' << r.link.send_seconds << ',' << r.link.bytes_received
          << ',' << r.link.receive_seconds << ',' << r.rollbacks;
      out << '\n';
    }
  });
}

void write_cluster_csv(const std::string& path, const std::vector<cluster_epoch>& epochs) {
  write_whole(path, [&](std::ofstream& out) {
    out << "epoch,elapsed_seconds,epoch_seconds,samples,samples_per_second,averaged_loss,"
           "averaged_accuracy,platforms_up,training_seconds,prediction_error,wall_seconds,"
           "network_seconds,evaluation_seconds,test_samples,node_tests\n";
    for (auto& e : epochs) {
      auto rate = e.epoch_seconds > 0 ? static_cast<double>(e.samples) / e.epoch_seconds : 0.0;
      out << e.epoch << ',' << e.elapsed_seconds << ',' << e.epoch_seconds << ',' << e.samples
          << ',' << rate << ',' << e.averaged_loss << ',' << e.averaged_accuracy << ','
          << e.platforms_up << ',' << e.training_seconds << ',' << e.prediction_error << ','
          << e.wall_seconds << ',' << e.network_seconds << ',' << e.evaluation_seconds << ',';
      // Each node's test of the averaged model: node=accuracy/samples, ';' between.
      uint64_t tested = 0;
      for (auto& t : e.tests)
        tested += t.samples;
      out << tested << ',';
      for (size_t i = 0; i < e.tests.size(); ++i)
        out << (i ? ";" : "") << e.tests[i].node << '=' << e.tests[i].accuracy() << '/'
            << e.tests[i].samples;
      out << '\n';
    }
  });
}

void write_split_csv(const std::string& path, const std::vector<learning::split_epoch>& epochs) {
  auto out = open_for_writing(path);
  out << "epoch,seconds,train_loss,train_accuracy,test_accuracy\n";
  for (auto& e : epochs)
    out << e.epoch + 1 << ',' << e.seconds << ',' << e.train_loss << ',' << e.train_accuracy << ','
        << e.test_accuracy << '\n';
  if (!out.flush())
    throw storage_failure("cannot write '" + path + "'");
}

std::string new_run_name(const std::string& cluster) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return cluster + "-" + buf;
}

} // namespace eg::actors

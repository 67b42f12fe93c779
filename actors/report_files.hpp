#pragma once
// Run-directory files: per-platform metrics and per-epoch cluster metrics as
// CSV. Plain functions, no CAF.

#include "messages/codec.hpp"

#include <string>
#include <vector>

namespace eg::actors {

/// One epoch of the whole cluster, as the balancer saw it.
struct cluster_epoch {
  uint32_t epoch = 0;
  double elapsed_seconds = 0;  ///< since training started, at the epoch's last report
  double epoch_seconds = 0;    ///< from the epoch's start to its last report
  uint64_t samples = 0;        ///< all platforms together
  double averaged_loss = 0;    ///< the average of all platforms' models, on the test set
  double averaged_accuracy = 0;
  uint32_t platforms_up = 0;
  /// The training clock at the epoch's last report: time platforms spent
  /// training, without the pauses between epochs (evaluation of the averaged
  /// model, planning) of the epoch-synchronous schedule.
  double training_seconds = 0;
  /// EdgeGossip: mean absolute percentage error of the predicted epoch times
  /// (-1 when there was no prediction).
  double prediction_error = -1;
};

/// The header line of write_platform_csv's files.
extern const char* platform_csv_header;

/// Writes one row per report (platform, node, epoch, ratio, wall time,
/// samples, samples/s, losses, test accuracy, gossip traffic ...).
void write_platform_csv(const std::string& path,
                        const std::vector<messages::epoch_report>& reports);

/// Writes one row per epoch of the cluster.
void write_cluster_csv(const std::string& path, const std::vector<cluster_epoch>& epochs);

} // namespace eg::actors

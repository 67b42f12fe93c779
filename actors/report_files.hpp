#pragma once
// Run-directory files: per-platform metrics and per-epoch cluster metrics as
// CSV. Plain functions, no CAF.

#include "messages/codec.hpp"
#include "storage/store.hpp"

#include <string>
#include <vector>

namespace eg::actors {

using storage::cluster_epoch;

/// The header line of write_platform_csv's files.
extern const char* platform_csv_header;

/// Writes one row per report (platform, node, epoch, ratio, wall time,
/// samples, samples/s, losses, test accuracy, gossip traffic ...).
void write_platform_csv(const std::string& path,
                        const std::vector<messages::epoch_report>& reports);

/// Writes one row per epoch of the cluster.
void write_cluster_csv(const std::string& path, const std::vector<cluster_epoch>& epochs);

} // namespace eg::actors

#pragma once
// Run-directory files: per-platform metrics and per-epoch cluster metrics as
// CSV. Plain functions, no CAF.

#include "algorithms/split/split_driver.hpp"
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

/// Writes one row per epoch of a split run (epoch, training seconds,
/// training loss and accuracy, test accuracy).
void write_split_csv(const std::string& path, const std::vector<learning::split_epoch>& epochs);

/// A new run's name: the cluster's id and the local time.
std::string new_run_name(const std::string& cluster);

} // namespace eg::actors

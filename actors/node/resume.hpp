#pragma once
// What a node resumes from its store: a platform's newest good checkpoint of
// the run it continues, and a split run's stages with theirs.

#include "actors/platform/platform.hpp"
#include "actors/stage.hpp"
#include "config/config.hpp"
#include "messages/codec.hpp"

#include <string>
#include <vector>

namespace eg::storage {
class store;
struct run_state;
}

namespace eg::actors {

/// Resuming `run`: the platform's newest good checkpoint saved since the
/// run started, its last report and its earlier reports (for the node's
/// metrics file). Damaged checkpoints are reported and skipped.
void restore_platform(const storage::store& db, const storage::run_state& run,
                      const std::string& cluster_id, platform_args& pa,
                      std::vector<messages::epoch_report>& reports);

/// A split run: the stages this node hosts, each with its layers, its
/// trainer and, resuming, its newest checkpoint; the first stage with the
/// data and the run.
std::vector<stage_args> local_stages(const config::cluster_config& cfg, const std::string& node_name,
                                     const storage::store& db, bool fresh,
                                     const std::string& data_dir);

} // namespace eg::actors

#pragma once
// The parameter server of the bsp, ssp, async, adacomm and adsp strategies
// (docs/ALGORITHMS.md, "Parameter server and ADSP"): it holds the global
// model and its version, adds each worker's commit U_i / N to it, and
// answers with the model and when the worker commits next, at once or
// when the synchronisation model (learning/commit_schedule.hpp) lets the
// worker go on. A thin actor over learning::global_model and
// learning::commit_schedule.
//
// Every few seconds (defaults::server_checkpoint_interval), when the model
// changed, it checkpoints the global model and its version to every node's
// store (storage::server_checkpoint): when its node is lost, the next node
// of the server's succession starts a server that continues from the
// newest one.

#include "actors/interfaces.hpp"
#include "config/config.hpp"
#include "learning/commit_schedule.hpp"
#include "storage/store.hpp"

#include <optional>
#include <string>
#include <vector>

namespace eg::actors {

struct server_args {
  std::string model;  ///< train.model
  int64_t seed = 0;   ///< the cluster seed: the same initial model as every worker
  std::vector<std::string> workers;  ///< the cluster's platforms
  learning::commit_settings schedule;
  /// A successor's start: the newest server checkpoint in its node's
  /// store (none: the seed's initial model, version 0).
  std::optional<storage::checkpoint> restore;
};

/// The schedule's settings from the cluster file's [strategy] (one of the
/// parameter-server strategies).
learning::commit_settings commit_settings_of(const config::strategy_config& s);

server_actor spawn_server(caf::actor_system& sys, server_args args);

} // namespace eg::actors

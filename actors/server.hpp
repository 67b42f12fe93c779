#pragma once
// The parameter server of the bsp, ssp, async, adacomm and adsp strategies
// (docs/ALGORITHMS.md, "Parameter server and ADSP"): it holds the global
// model and its version, adds each worker's commit U_i / N to it, and
// answers with the model and when the worker commits next, at once or
// when the synchronisation model (algorithms/ps/commit_schedule.hpp) lets the
// worker go on. A thin actor over learning::global_model and
// learning::commit_schedule.
//
// Every few seconds (defaults::server_checkpoint_interval), when the model
// changed, it checkpoints the global model and its version to every node's
// store (storage::server_checkpoint): when its node is lost, the next node
// of the server's succession starts a server that continues from the
// newest one.
//
// A worker on another node commits in two halves: a typed message (its
// loss, overhead, the commit's number) and its update on the weights lane
// (messages/lane.hpp, to the target server_name); the server pairs them
// (messages/rendezvous.hpp) and answers with the model on the lane and its
// version in the typed answer. A worker in this process, or on a node
// without a lane, sends its update in the typed message and gets the model
// in the answer.

#include "actors/interfaces.hpp"
#include "models/model_shape.hpp"
#include "config/config.hpp"
#include "algorithms/ps/commit_schedule.hpp"
#include "storage/store.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eg::messages {
class lane;
}

namespace eg::actors {

/// The server's name on the weights lane: the target of workers' updates
/// and the sender of the models it answers with (no platform's name starts
/// with '@').
inline constexpr std::string_view server_name = "@server";

struct server_args {
  std::string model;  ///< train.model
  learning::model_shape shape;  ///< the data's: what the model is built for
  int64_t seed = 0;   ///< the cluster seed: the same initial model as every worker
  std::vector<std::string> workers;  ///< the cluster's platforms
  learning::commit_settings schedule;
  /// A successor's start: the newest server checkpoint in its node's
  /// store (none: the seed's initial model, version 0).
  std::optional<storage::checkpoint> restore;
  /// Its node's weights lane (none: every worker is answered through CAF),
  /// and the cluster id its messages there carry.
  std::shared_ptr<messages::lane> lane;
  std::string cluster_id;
};

/// The schedule's settings from the cluster file's [strategy] (one of the
/// parameter-server strategies).
learning::commit_settings commit_settings_of(const config::strategy_config& s);

server_actor spawn_server(caf::actor_system& sys, server_args args);

} // namespace eg::actors

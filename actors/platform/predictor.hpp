#pragma once
// The predictor: EdgeGossip's performance predictor of one platform. Twice a
// second the contention of co-running programs is sampled from /proc (one
// sampler and history per process); its platform reports how long its
// iterations really took, which it pairs with the mean contention of those
// seconds; it keeps the regression of time per point against contention
// (algorithms/edgegossip/predictor.hpp), saves its samples to the store so a restarted
// node starts warm, and answers the throughput predicted for the mean
// contention of the last 2 seconds. It also learns the platform's link
// (learning::link_model) from the node's weights lane's timings of each
// epoch, which the platform hands over with its report, and answers its
// seconds per byte each way beside the throughput (not saved: an epoch
// teaches it again).

#include "actors/interfaces.hpp"

#include <caf/fwd.hpp>

#include <string>

namespace eg::actors {

struct predictor_args {
  std::string platform;
  store_actor store;
  std::string restore;  ///< saved samples ("" for none)
};

predictor_actor spawn_predictor(caf::actor_system& sys, predictor_args args);

} // namespace eg::actors

#pragma once
// The workers by training family (train/worker.hpp): which one a strategy
// trains with.

#include "train/worker.hpp"

#include <memory>

namespace eg::learning {

/// The worker of `settings.strategy`'s family over `model` (which outlives
/// it): the parameter server's worker for bsp, ssp, async, adacomm and adsp;
/// EdgeGossip's for edgegossip; the gossip worker for GoSGD and the
/// push-sum family. Throws std::invalid_argument for a strategy or topology
/// it does not know.
std::unique_ptr<worker> make_worker(const worker_settings& settings, platform_model& model);

} // namespace eg::learning

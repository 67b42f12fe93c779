#pragma once
// EdgeGossip's worker: gossip as GoSGD (algorithms/gossip/gossip_worker.hpp),
// with the accuracy-aware trainer's epochs (Algorithm 2): the losses of the
// shard's aggregated points under the current model rank them, and the
// epoch trains the highest-ranked whole subsets until |X_i| * r_i points
// (algorithms/edgegossip/ranking.hpp).

#include "algorithms/gossip/gossip_worker.hpp"

namespace eg::learning {

class edgegossip_worker : public gossip_worker {
public:
  edgegossip_worker(const worker_settings& settings, platform_model& model,
                    std::unique_ptr<gossip_strategy> strategy, std::unique_ptr<topology> topology);

  std::string family() const override { return "edgegossip"; }
  planned_epoch plan_epoch(const run_position& at, const std::vector<int64_t>& adopted) override;
  void renormalised(const data::normalisation& from, const data::normalisation& to) override;

private:
  std::shared_ptr<const aggregated_points> aggregated_;  ///< null: trains as GoSGD
  std::vector<int64_t> subset_classes_;                  ///< label of each aggregated point
};

} // namespace eg::learning

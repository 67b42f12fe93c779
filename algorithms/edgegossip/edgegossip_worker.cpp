#include "algorithms/edgegossip/edgegossip_worker.hpp"

#include "algorithms/edgegossip/aggregator.hpp"
#include "algorithms/edgegossip/ranking.hpp"

#include <cmath>

namespace eg::learning {

edgegossip_worker::edgegossip_worker(const worker_settings& settings, platform_model& model,
                                     std::unique_ptr<gossip_strategy> strategy,
                                     std::unique_ptr<topology> topology)
    : gossip_worker(settings, model, std::move(strategy), std::move(topology)),
      aggregated_(settings.aggregated) {
  if (aggregated_) {
    auto labels = aggregated_->labels.contiguous();
    subset_classes_.assign(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + labels.numel());
  }
}

planned_epoch edgegossip_worker::plan_epoch(const run_position& at,
                                            const std::vector<int64_t>& adopted) {
  // A platform that keeps all its data (r_i = 1) trains every subset:
  // ranking them would change nothing but cost a forward pass over every
  // aggregated point.
  if (!aggregated_ || settings_.edgegossip.selection == config::selection::random || at.ratio >= 1.0)
    return worker::plan_epoch(at, adopted);
  // Algorithm 2: losses of the aggregated points under the current model,
  // ranking (kept in the store), then the highest-ranked whole subsets until
  // |X_i| * r_i points (visited in random order: algorithms/edgegossip/ranking.hpp).
  auto& trainer = model_.trainer();
  planned_epoch out;
  out.ranking = rank_by_loss(aggregated_losses(trainer.model(), *aggregated_));
  auto budget = static_cast<int64_t>(
    std::ceil(static_cast<double>(trainer.shard().size()) * at.ratio - 1e-9));
  out.plan = accuracy_aware_plan(aggregated_->members, subset_classes_, out.ranking,
                                 settings_.batch, budget, rng_);
  if (!adopted.empty()) {
    // Adopted points have no aggregated points here: shuffled, in proportion.
    auto more = shuffled_plan(adopted, settings_.batch, at.ratio, rng_);
    out.plan.batches.insert(out.plan.batches.end(), more.batches.begin(), more.batches.end());
  }
  return out;
}

void edgegossip_worker::renormalised(const data::normalisation& from,
                                     const data::normalisation& to) {
  if (aggregated_)
    aggregated_ = std::make_shared<const aggregated_points>(learning::renormalised(*aggregated_, from, to));
}

} // namespace eg::learning

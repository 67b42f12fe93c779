#include "algorithms/workers.hpp"

#include "algorithms/edgegossip/edgegossip_worker.hpp"
#include "algorithms/gossip/gossip_worker.hpp"
#include "algorithms/ps/ps_worker.hpp"

namespace eg::learning {

std::unique_ptr<worker> make_worker(const worker_settings& settings, platform_model& model) {
  const auto& sc = settings.strategy;
  if (sc.parameter_server())
    return std::make_unique<ps_worker>(settings, model);
  auto strategy = make_gossip_strategy(settings, model);
  auto topology = make_topology(sc.topology, settings.members,
                                static_cast<size_t>(sc.out_peers));
  if (sc.edgegossip())
    return std::make_unique<edgegossip_worker>(settings, model, std::move(strategy),
                                               std::move(topology));
  return std::make_unique<gossip_worker>(settings, model, std::move(strategy), std::move(topology));
}

} // namespace eg::learning

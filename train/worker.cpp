#include "train/worker.hpp"

#include "models/serialize.hpp"

#include <functional>

namespace eg::learning {

platform_model::platform_model(std::unique_ptr<local_trainer> trainer)
    : trainer_(std::move(trainer)),
      names_(parameter_names(trainer_->model())),
      cpu_(parameters(trainer_->model())) {}

void platform_model::replace_trainer(std::unique_ptr<local_trainer> trainer) {
  trainer_ = std::move(trainer);
  cpu_ = parameters(trainer_->model());
}

worker::worker(const worker_settings& settings, platform_model& model)
    : settings_(settings),
      model_(model),
      rng_(settings.seed * 7919 + std::hash<std::string>{}(settings.platform)) {}

planned_epoch worker::plan_epoch(const run_position& at, const std::vector<int64_t>& adopted) {
  const auto& shard = model_.trainer().shard();
  if (adopted.empty())
    return {shuffled_plan(shard, settings_.batch, at.ratio, rng_), {}};
  auto points = adopted;
  points.insert(points.end(), shard.begin(), shard.end());
  return {shuffled_plan(points, settings_.batch, at.ratio, rng_), {}};
}

void worker::merge(const messages::held_weights& message) {
  throw refused_message("a " + family() + " worker takes no gossip (weights from '"
                        + message.sender + "')");
}

messages::held_weights weights_message(const run_position& at, double weight,
                                       std::vector<messages::tensor_view> tensors,
                                       std::shared_ptr<const void> hold) {
  messages::held_weights h;
  h.sender = at.platform;
  h.value.gossip_weight = weight;
  h.value.rate = at.ratio;
  h.value.epoch = at.epoch;
  h.value.iteration = at.total_iterations;
  h.value.tensors = std::move(tensors);
  for (auto& t : h.value.tensors)
    h.wire_bytes += t.bytes;
  h.hold = std::move(hold);
  return h;
}

} // namespace eg::learning

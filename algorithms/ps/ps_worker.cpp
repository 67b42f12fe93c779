#include "algorithms/ps/ps_worker.hpp"

#include "algorithms/gossip/gossip.hpp"
#include "messages/lane.hpp"

#include <spdlog/fmt/fmt.h>

namespace eg::learning {

ps_worker::ps_worker(const worker_settings& settings, platform_model& model)
    : worker(settings, model),
      weight_(1.0 / static_cast<double>(std::max<int64_t>(settings.platforms, 1))),
      commits_(settings.strategy.commit_steps) {}

// The initial (or restored, or adopted) model is the base of the first commit.
void ps_worker::start() { base_.pulled(model_.params(), model_.params()); }

void ps_worker::restored(double weight) {
  weight_ = weight;
  base_.pulled(model_.params(), model_.params());
}

void ps_worker::fill_report(messages::epoch_report& r) const {
  r.commits = epoch_commits_;
  r.staleness =
    epoch_commits_ ? epoch_staleness_ / static_cast<double>(epoch_commits_) : 0.0;
  r.server_version = pulled_version_.value_or(0);
}

std::vector<worker_note> ps_worker::epoch_over(uint32_t) {
  epoch_commits_ = 0;
  epoch_staleness_ = 0;
  return {};
}

std::string ps_worker::epoch_summary(const messages::epoch_report& r) const {
  return fmt::format("{} commits to the server (staleness {:.1f})", r.commits, r.staleness);
}

std::vector<std::string> ps_worker::awaited(uint64_t) {
  if (server_heard_ || server_waits_ >= first_server_waits)
    return {};
  return {"the parameter server"};
}

size_t ps_worker::give_up(uint64_t k) {
  if (awaited(k).empty())
    return 0;
  ++server_waits_;
  return 1;
}

worker_outcome ps_worker::stepped(const step_done& step, const run_position& at) {
  commits_.stepped(step.loss);
  if (step.epoch_done)
    return commit(true, at, step.now);  // the epoch ends on the global model
  if (commits_.due(step.now))
    return commit(false, at, step.now);  // the answer steps on
  worker_outcome out;
  out.next = next_move::step;
  return out;
}

worker_outcome ps_worker::commit(bool epoch_end, const run_position& at, double now) {
  worker_outcome out;
  commit_ends_epoch_ = epoch_end;
  if (!server_present_) {
    // No server reachable (its node is down, or not peered yet): training
    // goes on locally; the next step after one is found commits.
    if (!serverless_said_)
      out.notes.push_back({true, "no parameter server reachable: training on locally until one is"});
    serverless_said_ = true;
    out.next = after_commit();
    return out;
  }
  serverless_said_ = false;
  auto update = std::make_shared<std::vector<torch::Tensor>>(base_.commit(model_.params()));
  in_flight_update_ = update;
  server_commit c;
  c.update.sender = at.platform;
  c.update.value.number = ++commit_number_;
  c.update.value.tensors = to_views(model_.names(), *update);
  for (auto& t : c.update.value.tensors)
    c.update.wire_bytes += t.bytes;
  c.update.hold = update;
  c.loss = commits_.loss();
  c.overhead = commits_.overhead();
  c.epoch_end = epoch_end;
  commits_.committed(now);
  c.generation = ++generation_;
  if (!server_lane_.empty()) {
    // The update on the lane, the rest typed.
    c.lane = server_lane_;
    if (!std::exchange(lane_commits_said_, true))
      out.notes.push_back(
        {false, fmt::format("commits to the parameter server on the weights lane ({})", server_lane_)});
  }
  out.commit = std::move(c);
  return out;
}

void ps_worker::commit_over(double now, next_commit next) {
  commits_.answered(now, next);
  lane_answer_.reset();
  lane_model_.reset();
  in_flight_update_.reset();
}

worker_outcome ps_worker::pulled(const messages::held_global_model* global, next_commit next,
                                 double now) {
  worker_outcome out;
  commit_over(now, next);
  ++epoch_commits_;
  if (global) {
    // Staleness: other workers' commits applied since the last pull (none
    // counted across a server that started again from a checkpoint).
    const uint64_t version = global->value.version;
    if (pulled_version_ && version > *pulled_version_)
      epoch_staleness_ += static_cast<double>(version - *pulled_version_ - 1);
    pulled_version_ = version;
    try {
      auto received = from_views(global->value.tensors, model_.names(), model_.params());
      model_.before_write();
      base_.pulled(model_.params(), received);
    } catch (const std::exception& e) {
      ++out.refused;
      out.notes.push_back({true, std::string{"refused the server's model: "} + e.what()});
    }
  }
  out.next = after_commit();
  return out;
}

worker_outcome ps_worker::server_changed(bool present, bool moved, const std::string& lane,
                                         double now) {
  worker_outcome out;
  server_heard_ = server_heard_ || present;
  if (!moved && lane == server_lane_)
    return out;
  server_present_ = present;
  server_lane_ = lane;
  server_node_.clear();
  if (!server_lane_.empty()) {
    try {
      server_node_ = messages::parse_endpoint(server_lane_).node;
    } catch (const messages::lane_error& e) {
      out.notes.push_back({true, std::string{"commits go in the typed messages: "} + e.what()});
      server_lane_.clear();
    }
  }
  if (moved && commits_.in_flight()) {
    // Its answer will not come from a server that is gone: on without it.
    ++generation_;
    commit_over(now, {});
    out.next = after_commit();
  }
  return out;
}

worker_outcome ps_worker::answered(uint64_t generation, const messages::held_global_model& global,
                                   int64_t steps, double seconds, double now) {
  if (generation != generation_)
    return {};
  return pulled(&global, {steps, seconds}, now);
}

worker_outcome ps_worker::answered_on_lane(uint64_t generation, uint64_t version, int64_t steps,
                                           double seconds, double now) {
  if (generation != generation_)
    return {};
  if (lane_model_ && lane_model_->value.version == version) {
    auto global = std::move(*lane_model_);
    return pulled(&global, {steps, seconds}, now);
  }
  // The model is on its way on the lane.
  lane_answer_ = pending_answer{version, {steps, seconds}};
  worker_outcome out;
  out.lane_wait = generation;
  return out;
}

worker_outcome ps_worker::lane_model(const std::string& from, messages::held_global_model model,
                                     double now) {
  worker_outcome out;
  if (!commits_.in_flight())
    return out;  // an answer given up on
  if (server_node_.empty() || server_node_ != from) {
    ++out.refused;
    out.notes.push_back(
      {true, fmt::format("refused a model from node '{}', which does not host the parameter server",
                         from)});
    return out;
  }
  if (lane_answer_ && lane_answer_->version == model.value.version) {
    const auto next = lane_answer_->next;
    return pulled(&model, next, now);
  }
  lane_model_ = std::move(model);  // its answer is on its way
  return out;
}

worker_outcome ps_worker::lane_wait_over(uint64_t generation, double now) {
  if (generation != generation_ || !lane_answer_)
    return {};
  worker_outcome out;
  // The update was applied: the base stays where the commit left it.
  const auto next = lane_answer_->next;
  const auto version = lane_answer_->version;
  out = pulled(nullptr, next, now);
  out.notes.insert(out.notes.begin(),
                   {true, fmt::format("the server's model of version {} did not come on the "
                                      "weights lane in time: training on with the local model",
                                      version)});
  return out;
}

worker_outcome ps_worker::unanswered(uint64_t generation, bool lost, const std::string& why,
                                     double now) {
  if (generation != generation_)
    return {};
  worker_outcome out;
  if (lost && in_flight_update_) {
    base_.returned(*in_flight_update_);
    out.notes.push_back({true, why + ": it goes with the next commit"});
  } else {
    out.notes.push_back(
      {true, "commit not answered (" + why + "): training on with the local model"});
  }
  commit_over(now, {});
  out.next = after_commit();
  return out;
}

} // namespace eg::learning
